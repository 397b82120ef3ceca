import {
  MAX_DELAY_MS,
  MAX_VISIBILITY_MS,
  queueSeconds,
  type VisibilityOutcome,
  type WorkQueue,
} from '../../shared/continuation/work-queue.js';
import { LEASE_MS } from './scenario.js';
import type { SimActor } from './sim-actor.js';

/** The job function's configured timeout: the queue's visibility timeout is six times it. */
export const FUNCTION_TIMEOUT_MS = 30_000;
/** How long a received message stays invisible before the queue delivers it again (6 × the function timeout). */
export const VISIBILITY_TIMEOUT_MS = 6 * FUNCTION_TIMEOUT_MS;
/** The handler's heartbeat: from each claim and renewal, the message stays invisible this long. */
export const HEARTBEAT_VISIBILITY_MS = 2 * LEASE_MS;

/**
 * One message of the window on the job's work queue: the schedule's, a Scheduler retry's, or one of
 * the shard messages a coordinator sent.
 */
export class QueueMessage {
  readonly id: string;
  /** Scheduler's attempt number in the message body. */
  readonly attemptNumber: number;
  /** The shard a coordinator's message names; undefined for the window's own messages. */
  readonly shard: number | undefined;
  /** A shard message's body, as the coordinator sent it (the window's messages are built per receive). */
  readonly body: Readonly<Record<string, unknown>> | undefined;
  /** Deliveries in the final, healthy phase. */
  finalDeliveries = 0;
  /** Receives so far; the latest receipt is the only one SQS honours. */
  receives = 0;
  /** When it becomes visible again (and is delivered), while it is on the queue. */
  visibleAt = 0;
  state: 'queued' | 'deleted' | 'dead-letter' = 'queued';
  /** Visible while the faulty phase has no redelivery plan left: the final phase delivers it. */
  deferred = false;
  /** Bumped at each visibility change, so a delivery timed by an earlier one is dropped. */
  version = 0;

  constructor(id: string, attemptNumber: number, shard?: { index: number; body: Record<string, unknown> }) {
    this.id = id;
    this.attemptNumber = attemptNumber;
    this.shard = shard?.index;
    this.body = shard?.body;
  }
}

/** One receive of a message: what the handler's visibility changes name. */
export interface Receipt {
  readonly message: QueueMessage;
  /** The message's receive count at this receive. */
  readonly receiveCount: number;
  /** SQS's receipt handle: the message and the receive. */
  readonly handle: string;
  /** Set when the handler asked for the window to come back (a retry), with the delay it gave. */
  retryAfterMs: number | undefined;
}

/** What the queue needs from the world: the time, events, the trace, and a way to start a delivery. */
export interface QueueWorld {
  readonly now: number;
  /** One step the scheduler orders against every other: a SendMessage reaching the queue. */
  step(label: string): Promise<void>;
  /** Runs `fn` at `at`; `wakes` says whether the event still matters (a superseded visibility does not). */
  at(at: number, fn: () => void, options: { readonly wakes: () => boolean }): void;
  note(who: string, text: string): void;
  /** The queue delivers `message` again: the world starts an invocation for it (or defers it). */
  redeliver(message: QueueMessage): void;
}

/**
 * The job's SQS work queue, as far as one window's messages go: at-least-once delivery, visibility
 * timeouts on the simulated clock, heartbeats, receipt handles (only the latest receive's delete or
 * visibility change counts) and the dead-letter queue after maxReceiveCount. A message is
 * delivered again whenever its visibility runs out, whoever is still working on it.
 *
 * What becomes of a message after a run is the real handler's decision (createJobHandler, with
 * the engine's dispositionOf): each invocation gets `forReceipt`, a WorkQueue whose `send` (the
 * handler's continuation) sets when the received message comes back, as the SQS path's
 * ChangeMessageVisibility does; a run that returned without asking for one is deleted, as the
 * event source mapping deletes a record not reported failed.
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
    const existing = this.messages.find((m) => m.shard === undefined && m.attemptNumber === attemptNumber);
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
    return {
      message,
      receiveCount: message.receives,
      handle: `${message.id}#${message.receives}`,
      retryAfterMs: undefined,
    };
  }

  /** The handler saw its claim or a renewal commit: two leases from now. */
  heartbeat(receipt: Receipt): void {
    if (this.#honours(receipt)) this.#setVisibility(receipt.message, HEARTBEAT_VISIBILITY_MS);
  }

  /**
   * The work queue one invocation's handler sees: its continuation (`send`) delays the message it
   * received, and a visibility change applies to the latest receive only. A message naming a shard
   * the received one does not is a coordinator's fan-out: a new message, sent as one step of the
   * invocation (a crash or a pause can strike before it reaches the queue or after), and visible at
   * once, so a shard can run before its coordinator has marked the window SHARDED. A batch is sent
   * a message at a time, each its own step: finer than SQS's one request per batch, so every point
   * a crash can strike a real batch at is among those explored.
   */
  forReceipt(receipt: Receipt, actor: SimActor): WorkQueue {
    const who = actor.name;
    const send = async (body: string, delayMs: number) => {
      const fields = JSON.parse(body) as Record<string, unknown>;
      if (typeof fields.shard === 'number' && receipt.message.shard === undefined) {
        await this.#fanOut(actor, fields.shard, fields);
        return;
      }
      const afterMs = queueSeconds(delayMs, MAX_DELAY_MS, 'delayMs') * 1000;
      receipt.retryAfterMs = afterMs;
      this.#changeVisibility(receipt, Math.max(afterMs, 1000), who, 'continuation');
    };
    return {
      send,
      sendBatch: async (bodies, delayMs) => {
        for (const body of bodies) await send(body, delayMs);
      },
      changeVisibility: async (handle, visibleInMs) =>
        handle === receipt.handle
          ? this.#changeVisibility(
              receipt,
              queueSeconds(visibleInMs, MAX_VISIBILITY_MS, 'visibleInMs') * 1000,
              who,
              'visibility',
            )
          : 'not-in-flight',
    };
  }

  /**
   * The invocation is over. Killed, it answers nothing: the message comes back when its
   * visibility runs out. Returned without asking for a retry, its message is deleted (the window
   * is finished or can never run). Threw without one (its continuation could not be sent): kept.
   */
  settle(receipt: Receipt, how: 'killed' | 'returned' | 'threw', who: string): void {
    const message = receipt.message;
    if (how === 'killed' || receipt.retryAfterMs !== undefined) return;
    if (how === 'threw') {
      this.#world.note(
        'queue',
        `${who}: ${message.id} returns at ${message.visibleAt} ms (the handler threw)`,
      );
      return;
    }
    if (!this.#honours(receipt)) {
      this.#world.note('queue', `${who}: delete of ${message.id} ignored (${this.#why(message)})`);
      return;
    }
    message.state = 'deleted';
    message.version++;
    this.#world.note('queue', `${who}: ${message.id} deleted`);
  }

  /** Messages still on the queue. */
  get queued(): readonly QueueMessage[] {
    return this.messages.filter((m) => m.state === 'queued');
  }

  /** Messages sent for `shard` so far: one per fan-out that reached the queue. */
  shardMessages(shard: number): readonly QueueMessage[] {
    return this.messages.filter((m) => m.shard === shard);
  }

  async #fanOut(actor: SimActor, shard: number, body: Record<string, unknown>): Promise<void> {
    const op = actor.beginOp(`fan-out shard ${shard}`);
    await op.issue();
    await this.#world.step(`${actor.name} sends the message of shard ${shard}`);
    const message = new QueueMessage(`s${shard}.${this.shardMessages(shard).length + 1}`, 1, {
      index: shard,
      body,
    });
    this.messages.push(message);
    actor.fanOuts++;
    this.#world.note('queue', `${actor.name}: ${message.id} sent (shard ${shard})`);
    op.landed();
    // Visible at once: the event source hands it to an invocation while the coordinator goes on.
    this.#world.redeliver(message);
    await actor.proceed();
  }

  #changeVisibility(receipt: Receipt, ms: number, who: string, what: string): VisibilityOutcome {
    const message = receipt.message;
    if (!this.#honours(receipt)) {
      this.#world.note('queue', `${who}: ${what} of ${message.id} ignored (${this.#why(message)})`);
      return 'not-in-flight';
    }
    this.#setVisibility(message, ms);
    this.#world.note('queue', `${who}: ${message.id} again at ${message.visibleAt} ms (${what})`);
    return 'changed';
  }

  #why(message: QueueMessage): string {
    return message.state === 'queued' ? 'a stale receipt' : `the message is ${message.state}`;
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
