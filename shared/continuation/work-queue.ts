import { SlotguardError } from '../errors.js';
import type { RunResult } from '../job/run-slot.js';

/**
 * A job's work queue: where the schedule sends each window and where an unfinished window waits
 * for its next run. The deployed adapter is SQS (sqs-work-queue.ts); the local runner uses the
 * in-process queue (in-process-work-queue.ts). Both are held to test/contract/work-queue-contract.ts.
 *
 * Receiving and deleting are not here: in Lambda the event source mapping does both (it deletes a
 * message whose record the handler did not report failed), so the runtime only ever changes a
 * received message's visibility, or sends a new message.
 */
export interface WorkQueue {
  /**
   * Sends `body`, delivered no earlier than `delayMs` from now. SQS counts delays in whole seconds
   * (rounded up here) and at most 15 minutes: a longer delay is cut to 15 minutes, so the message
   * arrives early and the run it starts is told to wait again.
   */
  send(body: string, delayMs: number): Promise<void>;
  /**
   * Sends each of `bodies` as a message of its own, delivered no earlier than `delayMs` from now
   * (as `send` counts it), in as few requests as the queue takes (SQS: `batchRequests`), one after
   * another, in order. An empty list sends nothing. Resolves once every message is on the queue.
   *
   * A request the queue refuses, or one message of it refused, stops the batch after that request:
   * the method throws BatchSendError, whose `sent` counts the messages the queue confirmed, those
   * and only those, whatever their place in the list (SQS may refuse the 3rd entry of a request and
   * take the 4th). A request that failed outright may still have landed (its answer was lost), so
   * a message not counted is unconfirmed, not known to be absent: a caller retries the whole batch.
   */
  sendBatch(bodies: readonly string[], delayMs: number): Promise<void>;
  /**
   * Keeps a received message invisible for `visibleInMs` from now (whole seconds, rounded up; at
   * most 12 hours), after which it is delivered again unless it was deleted. A message that is no
   * longer in flight (deleted, or delivered again under a newer receipt handle) is answered with
   * `not-in-flight`, not an error: the caller lost a race that changes nothing for it.
   */
  changeVisibility(receiptHandle: string, visibleInMs: number): Promise<VisibilityOutcome>;
}

/** What a visibility change came to. */
export type VisibilityOutcome = 'changed' | 'not-in-flight';

/** SQS's longest message delay (DelaySeconds 900). */
export const MAX_DELAY_MS = 15 * 60_000;
/** SQS's longest visibility timeout (VisibilityTimeout 43,200). */
export const MAX_VISIBILITY_MS = 12 * 3_600_000;

/** A work-queue operation failed in a way its caller cannot read as an outcome. */
export class WorkQueueError extends SlotguardError {
  readonly operation: string;
  constructor(operation: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.operation = operation;
  }
}

/**
 * A `sendBatch` that stopped part way. `cause` is the first refusal: the error of the request that
 * failed, or, for a message the queue refused inside a request, that refusal as the error a
 * `send` of it would have thrown.
 */
export class BatchSendError extends WorkQueueError {
  /** Messages of the batch the queue confirmed sent. */
  readonly sent: number;
  /** Messages in the batch. */
  readonly total: number;
  constructor(
    message: string,
    counts: { readonly sent: number; readonly total: number },
    options: { cause: unknown },
  ) {
    super('sendBatch', message, options);
    this.sent = counts.sent;
    this.total = counts.total;
  }
}

/** The most messages one request of a `sendBatch` carries (SQS's SendMessageBatch limit). */
export const MAX_BATCH_MESSAGES = 10;
/**
 * The most bytes of message bodies put in one SendMessageBatch request: 256 KiB, SQS's limit on a
 * batch before it rose to 1 MiB. A shard message is a few hundred bytes, so keeping to the lower
 * one costs nothing, and it holds against any SQS-compatible endpoint.
 */
export const MAX_BATCH_BYTES = 256 * 1024;

/**
 * `bodies` cut into SendMessageBatch requests, in order: at most MAX_BATCH_MESSAGES messages and
 * MAX_BATCH_BYTES of bodies (UTF-8, as SQS counts them) each. A body larger than that goes in a
 * request of its own, for the queue to take or refuse.
 */
export function batchRequests(bodies: readonly string[]): string[][] {
  const requests: string[][] = [];
  let request: string[] = [];
  let bytes = 0;
  for (const body of bodies) {
    const size = Buffer.byteLength(body, 'utf8');
    if (request.length === MAX_BATCH_MESSAGES || (request.length > 0 && bytes + size > MAX_BATCH_BYTES)) {
      requests.push(request);
      request = [];
      bytes = 0;
    }
    request.push(body);
    bytes += size;
  }
  if (request.length > 0) requests.push(request);
  return requests;
}

/**
 * Milliseconds as SQS's whole seconds: rounded up (a wait is never cut short), at least 0 and at
 * most `maxMs`. A value that is not a number is a bug in the caller and throws.
 */
export function queueSeconds(ms: number, maxMs: number, name: string): number {
  if (Number.isNaN(ms)) {
    throw new RangeError(`${name} is NaN; pass a number of milliseconds from 0 to ${maxMs}`);
  }
  return Math.min(maxMs / 1000, Math.max(0, Math.ceil(ms / 1000)));
}

/** One message as the Lambda event source mapping hands it to the function. */
export interface SqsRecord {
  readonly messageId: string;
  readonly receiptHandle: string;
  readonly body: string;
  readonly attributes: {
    /** Deliveries of this message so far, this one included, as a decimal string. */
    readonly ApproximateReceiveCount: string;
    readonly SentTimestamp?: string;
    readonly ApproximateFirstReceiveTimestamp?: string;
  };
  readonly eventSource: 'aws:sqs';
  readonly eventSourceARN?: string;
}

/** The event an SQS event source mapping invokes the function with. */
export interface SqsEvent {
  readonly Records: readonly SqsRecord[];
}

/**
 * What the function returns for an SQS batch with ReportBatchItemFailures: the records listed are
 * kept (delivered again once their visibility runs out); every other record is deleted.
 */
export interface SqsBatchResponse {
  readonly batchItemFailures: readonly { readonly itemIdentifier: string }[];
}

/** True for an event from an SQS event source mapping (every record from `aws:sqs`). */
export function isSqsEvent(event: unknown): event is SqsEvent {
  if (typeof event !== 'object' || event === null) return false;
  const records = (event as { Records?: unknown }).Records;
  return (
    Array.isArray(records) &&
    records.length > 0 &&
    records.every(
      (r: unknown) =>
        typeof r === 'object' &&
        r !== null &&
        (r as { eventSource?: unknown }).eventSource === 'aws:sqs' &&
        typeof (r as { messageId?: unknown }).messageId === 'string' &&
        typeof (r as { receiptHandle?: unknown }).receiptHandle === 'string',
    )
  );
}

/** The record's delivery count (1 on the first delivery). */
export function receiveCountOf(record: SqsRecord): number {
  const count = Number(record.attributes?.ApproximateReceiveCount);
  return Number.isInteger(count) && count >= 1 ? count : 1;
}

/**
 * What one delivery of a window came to, as the handler sees it: the run's result, an event
 * rejected as invalid, or a run that threw (a store failure it could not classify, a backend that
 * could not be built).
 */
export type RunOutcome = RunResult | { readonly status: 'rejected' } | { readonly status: 'threw' };

/**
 * What becomes of the message that delivered a window: deleted (`done`), or kept and delivered
 * again after `afterMs` (`retry`).
 */
export type Disposition = { readonly kind: 'done' } | { readonly kind: 'retry'; readonly afterMs: number };

/** What a disposition depends on besides the outcome. */
export interface DispositionContext {
  /** The handler's clock reading after the run (epoch ms). */
  readonly now: number;
  /** The run's lease. */
  readonly leaseMs: number;
  /** Deliveries of the message so far, this one included. */
  readonly receiveCount: number;
}

const SECOND = 1_000;
const MINUTE = 60_000;

/**
 * The continuation rules, in one place. Invariant: a window's message is deleted only when the
 * window is finished or can never run; every other outcome keeps it, for a retry after a wait
 * fitted to why the run did not finish.
 *
 * | outcome                                                                  | disposition                                  |
 * | ------------------------------------------------------------------------ | -------------------------------------------- |
 * | completed; stuck; sharded; duplicate done, failed, stuck or sharded; failed with the slot FAILED; rejected | done       |
 * | yielded                                                                  | retry after resumeAfter − now, at least 1 s  |
 * | duplicate held                                                           | retry after the lease's end + 5 s, at least 30 s |
 * | duplicate waiting                                                        | retry after until − now, at least 1 s        |
 * | lease-lost; fenced; failed with the slot fenced                          | retry after one lease (a later holder may die) |
 * | failed with the slot RELEASED; threw                                     | retry after 60 s × receive count, at most 15 min |
 */
export function dispositionOf(outcome: RunOutcome, context: DispositionContext): Disposition {
  const { now, leaseMs, receiveCount } = context;
  const done: Disposition = { kind: 'done' };
  const retry = (afterMs: number): Disposition => ({ kind: 'retry', afterMs });
  switch (outcome.status) {
    case 'completed':
    case 'stuck':
    case 'rejected':
    // Each shard's own message carries the window from here.
    case 'sharded':
      return done;
    case 'yielded':
      return retry(Math.max(SECOND, (outcome.resumeAfter ?? now) - now));
    case 'duplicate': {
      const claim = outcome.outcome;
      switch (claim.kind) {
        case 'done':
        case 'failed':
        case 'stuck':
        // The window's shards carry it now, each on its own message.
        case 'sharded':
          return done;
        case 'held':
          // The holder renews every third of its lease; if it died, the lease ends and the retry
          // takes the window over. Not sooner than 30 s: a holder at work is not polled every second.
          return retry(Math.max(30 * SECOND, Math.max(claim.leaseEndsAt - now, 0) + 5 * SECOND));
        case 'waiting':
          return retry(Math.max(SECOND, claim.until - now));
        default:
          return claim satisfies never;
      }
    }
    case 'lease-lost':
    case 'fenced':
      return retry(leaseMs);
    case 'failed':
      if (outcome.slotState === 'FAILED') return done;
      if (outcome.slotState === 'fenced') return retry(leaseMs);
      return retry(Math.min(15 * MINUTE, MINUTE * receiveCount));
    case 'threw':
      return retry(Math.min(15 * MINUTE, MINUTE * receiveCount));
    default:
      return outcome satisfies never;
  }
}
