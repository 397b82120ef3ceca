import { JobRunFailedError } from '../../shared/job/lambda-handler.js';
import { LEASE_MS } from './scenario.js';
import type { ActorResult } from './sim-actor.js';

/** The job function's configured timeout: the queue's visibility timeout is six times it. */
export const FUNCTION_TIMEOUT_MS = 30_000;
/** How long a received message stays invisible before the queue delivers it again (6 × the function timeout). */
export const VISIBILITY_TIMEOUT_MS = 6 * FUNCTION_TIMEOUT_MS;
/** The handler's heartbeat: from each claim and renewal, the message stays invisible this long. */
export const HEARTBEAT_VISIBILITY_MS = 2 * LEASE_MS;

/** What the handler does with its message once the run has a result (the engine's table, docs/simulation.md). */
export type Disposition =
  /** The window is finished or can never run: the message is deleted. */
  | { readonly kind: 'delete'; readonly why: string }
  /** ChangeMessageVisibility, and the message in batchItemFailures: delivered again after `afterMs`. */
  | { readonly kind: 'retry'; readonly afterMs: number; readonly why: string }
  /** The handler threw before it could say: the message returns when its visibility runs out. */
  | { readonly kind: 'keep'; readonly why: string };

/**
 * The disposition the SQS engine gives a run's result, by the design's table (issue 9). `now` is
 * the handler's own clock; `receiveCount` is the message's. A failed run is retried whether its
 * slot is RELEASED or FAILED (the thrown error does not say which); a FAILED slot's redelivery finds
 * it failed and deletes the message, one delivery later than the design's handler would.
 */
export function dispositionOf(result: ActorResult, now: number, receiveCount: number): Disposition {
  if (result.kind === 'threw') {
    if (result.error instanceof JobRunFailedError) {
      return {
        kind: 'retry',
        afterMs: Math.min(60_000 * receiveCount, 15 * 60_000),
        why: 'the job failed',
      };
    }
    return { kind: 'keep', why: 'the handler threw' };
  }
  const response = result.response;
  switch (response.status) {
    case 'rejected':
    case 'completed':
    case 'stuck':
      return { kind: 'delete', why: response.status };
    case 'duplicate': {
      const outcome = response.outcome;
      switch (outcome.kind) {
        case 'done':
        case 'failed':
        case 'stuck':
          return { kind: 'delete', why: `duplicate (${outcome.kind})` };
        case 'held':
          return {
            kind: 'retry',
            afterMs: Math.max(Math.max(outcome.leaseEndsAt - now, 0) + 5_000, 30_000),
            why: 'duplicate (held)',
          };
        case 'waiting':
          return { kind: 'retry', afterMs: outcome.until - now, why: 'duplicate (waiting)' };
        default:
          return outcome satisfies never;
      }
    }
    case 'yielded':
      return {
        kind: 'retry',
        afterMs: Math.max(0, (response.resumeAfter ?? now) - now),
        why: `yielded (${response.reason})`,
      };
    case 'lease-lost':
    case 'fenced':
      return { kind: 'retry', afterMs: LEASE_MS, why: response.status };
    default:
      return response satisfies never;
  }
}

/** SQS's own rounding of a visibility change: whole seconds, from 1 s to 12 hours. */
function visibilitySeconds(ms: number): number {
  return Math.min(Math.max(Math.ceil(ms / 1000), 1), 43_200);
}

/** One message of the window on the job's work queue: the schedule's, or a Scheduler retry's. */
export class QueueMessage {
  readonly id: string;
  /** Scheduler's attempt number in the message body. */
  readonly attemptNumber: number;
  /** Receives so far; the latest receipt is the only one SQS honours. */
  receives = 0;
  /** When it becomes visible again (and is delivered), while it is on the queue. */
  visibleAt = 0;
  state: 'queued' | 'deleted' | 'dead-letter' = 'queued';
  /** Visible while the faulty phase has no redelivery plan left: the final phase delivers it. */
  deferred = false;
  /** Bumped at each visibility change, so a delivery timed by an earlier one is dropped. */
  version = 0;

  constructor(id: string, attemptNumber: number) {
    this.id = id;
    this.attemptNumber = attemptNumber;
  }
}

/** One receive of a message: what the handler's ChangeMessageVisibility and DeleteMessage name. */
export interface Receipt {
  readonly message: QueueMessage;
  /** The message's receive count at this receive. */
  readonly receiveCount: number;
}

/** What the queue needs from the world: the time, events, the trace, and a way to start a delivery. */
export interface QueueWorld {
  readonly now: number;
  /** Runs `fn` at `at`; `wakes` says whether the event still matters (a superseded visibility does not). */
  at(at: number, fn: () => void, options: { readonly wakes: () => boolean }): void;
  note(who: string, text: string): void;
  /** The queue delivers `message` again: the world starts an invocation for it (or defers it). */
  redeliver(message: QueueMessage): void;
}

/**
 * The job's SQS work queue, as far as one window's messages go: at-least-once delivery, visibility
 * timeouts on the simulated clock, heartbeats, receipt handles (only the latest receive's delete or
 * visibility change counts), and the dead-letter queue after maxReceiveCount. A message is
 * delivered again whenever its visibility runs out, whoever is still working on it.
 */
export class SimWorkQueue {
  readonly messages: QueueMessage[] = [];
  readonly #world: QueueWorld;
  readonly #maxReceiveCount: number;

  constructor(world: QueueWorld, deadlineMs: number) {
    this.#world = world;
    this.#maxReceiveCount = Math.min(1000, 2 * Math.ceil(deadlineMs / FUNCTION_TIMEOUT_MS) + 50);
  }

  /** The message of Scheduler attempt `attemptNumber`, sent when that attempt first fires. */
  messageFor(attemptNumber: number): QueueMessage {
    const existing = this.messages.find((m) => m.attemptNumber === attemptNumber);
    if (existing) return existing;
    const message = new QueueMessage(`m${attemptNumber}`, attemptNumber);
    this.messages.push(message);
    return message;
  }

  /** A receive: invisible for the visibility timeout. Undefined once it went to the dead-letter queue. */
  receive(message: QueueMessage): Receipt | undefined {
    if (message.receives >= this.#maxReceiveCount) {
      message.state = 'dead-letter';
      this.#world.note(
        'queue',
        `${message.id} moved to the dead-letter queue after ${message.receives} receives`,
      );
      return undefined;
    }
    message.receives++;
    message.deferred = false;
    this.#setVisibility(message, VISIBILITY_TIMEOUT_MS);
    return { message, receiveCount: message.receives };
  }

  /** The handler saw its claim or a renewal commit: two leases from now. */
  heartbeat(receipt: Receipt): void {
    if (this.#honours(receipt)) this.#setVisibility(receipt.message, HEARTBEAT_VISIBILITY_MS);
  }

  /** The handler's disposition of its receive. */
  settle(receipt: Receipt, disposition: Disposition, who: string): void {
    const message = receipt.message;
    if (!this.#honours(receipt)) {
      const why = message.state === 'queued' ? 'a stale receipt' : `the message is ${message.state}`;
      this.#world.note('queue', `${who}: ${disposition.kind} of ${message.id} ignored (${why})`);
      return;
    }
    switch (disposition.kind) {
      case 'delete':
        message.state = 'deleted';
        message.version++;
        this.#world.note('queue', `${who}: ${message.id} deleted (${disposition.why})`);
        return;
      case 'retry':
        this.#setVisibility(message, visibilitySeconds(disposition.afterMs) * 1000);
        this.#world.note(
          'queue',
          `${who}: ${message.id} again at ${message.visibleAt} ms (${disposition.why})`,
        );
        return;
      case 'keep':
        this.#world.note(
          'queue',
          `${who}: ${message.id} returns at ${message.visibleAt} ms (${disposition.why})`,
        );
        return;
      default:
        disposition satisfies never;
    }
  }

  /** Messages still on the queue. */
  get queued(): readonly QueueMessage[] {
    return this.messages.filter((m) => m.state === 'queued');
  }

  #honours(receipt: Receipt): boolean {
    return receipt.message.state === 'queued' && receipt.receiveCount === receipt.message.receives;
  }

  #setVisibility(message: QueueMessage, ms: number): void {
    const version = ++message.version;
    message.visibleAt = this.#world.now + ms;
    const current = () => message.version === version && message.state === 'queued';
    this.#world.at(
      message.visibleAt,
      () => {
        if (current()) this.#world.redeliver(message);
      },
      { wakes: current },
    );
  }
}
