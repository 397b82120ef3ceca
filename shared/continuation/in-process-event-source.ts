import { type Clock, systemClock } from '../clock.js';
import { ConfigurationError } from '../errors.js';
import type { InvocationContext } from '../job/lambda-handler.js';
import type { InProcessWorkQueue } from './in-process-work-queue.js';
import type { SqsBatchResponse, SqsEvent, SqsRecord } from './work-queue.js';

/** A function an SQS event source mapping invokes. */
export type SqsHandler = (event: SqsEvent, context: InvocationContext) => Promise<SqsBatchResponse>;

/** Options of an `InProcessEventSource`. */
export interface InProcessEventSourceOptions {
  readonly queue: InProcessWorkQueue;
  readonly handler: SqsHandler;
  /** @default the system clock */
  readonly clock?: Clock;
  /**
   * Invocations at once (the mapping's ScalingConfig.MaximumConcurrency).
   * @default 2
   */
  readonly maximumConcurrency?: number;
  /**
   * Records per invocation.
   * @default 1
   */
  readonly batchSize?: number;
  /**
   * The function's timeout: each invocation's getRemainingTimeInMillis counts down from it, and an
   * invocation that returns later than this is treated as Lambda treats it: timed out, its answer
   * lost, its messages left to come back.
   * @default 900_000
   */
  readonly timeoutMs?: number;
  /**
   * Prefix of each invocation's request id.
   * @default 'sqs'
   */
  readonly name?: string;
  /** Called after each invocation, for logs and tests. */
  readonly onInvocation?: (report: InvocationReport) => void;
}

/** What one invocation came to. */
export interface InvocationReport {
  readonly requestId: string;
  readonly messageIds: readonly string[];
  readonly startedAt: number;
  readonly endedAt: number;
  /** `returned` an answer, `threw`, or ran past the timeout (`timed-out`). */
  readonly outcome: 'returned' | 'threw' | 'timed-out';
  /** Messages kept for another delivery: reported failed, or every one of a failed invocation. */
  readonly kept: readonly string[];
  readonly error?: unknown;
}

/**
 * Lambda's SQS event source mapping, in the process: whenever a message of `queue` is due, it
 * receives it and invokes `handler` with an SQS event, at most `maximumConcurrency` invocations at
 * once; then it deletes every record the answer did not list in batchItemFailures. An invocation
 * that throws or times out deletes nothing: its messages come back when their visibility ends.
 * Timers run on the injected clock, so a test drives hours of redeliveries without waiting.
 * @example
 * const source = new InProcessEventSource({ queue, handler, clock, timeoutMs: 900_000 });
 * source.start();
 * // ... later
 * await source.stop();
 */
export class InProcessEventSource {
  readonly #o: Required<Omit<InProcessEventSourceOptions, 'onInvocation'>> &
    Pick<InProcessEventSourceOptions, 'onInvocation'>;
  readonly #inFlight = new Set<Promise<void>>();
  #cancelTimer: (() => void) | undefined;
  #unsubscribe: (() => void) | undefined;
  #running = false;
  #polling = false;
  #invocations = 0;

  constructor(options: InProcessEventSourceOptions) {
    this.#o = {
      clock: systemClock,
      maximumConcurrency: 2,
      batchSize: 1,
      timeoutMs: 900_000,
      name: 'sqs',
      ...options,
    };
    for (const [name, value, min, max] of [
      ['maximumConcurrency', this.#o.maximumConcurrency, 2, 1000],
      ['batchSize', this.#o.batchSize, 1, 10],
    ] as const) {
      if (!(Number.isInteger(value) && value >= min && value <= max)) {
        throw new ConfigurationError(
          name,
          `${name} is ${value}; use a whole number from ${min} to ${max}, as Lambda allows`,
        );
      }
    }
    if (!(this.#o.timeoutMs > 0)) {
      throw new ConfigurationError(
        'timeoutMs',
        `timeoutMs is ${this.#o.timeoutMs}; use the function's timeout, e.g. 900000`,
      );
    }
  }

  /** Starts delivering: now, and whenever a message becomes due. */
  start(): void {
    if (this.#running) return;
    this.#running = true;
    this.#unsubscribe = this.#o.queue.onChange(() => this.#arm());
    this.#arm();
  }

  /** Stops taking messages and waits for the invocations in flight. */
  async stop(): Promise<void> {
    this.#running = false;
    this.#unsubscribe?.();
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    while (this.#inFlight.size > 0) await Promise.all(this.#inFlight);
  }

  /** Invocations running now. */
  get inFlight(): number {
    return this.#inFlight.size;
  }

  /** Invocations started so far. */
  get invocations(): number {
    return this.#invocations;
  }

  /** Sets a timer for the next due message, if there is room for another invocation. */
  #arm(): void {
    if (!this.#running || this.#polling) return;
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    if (this.#inFlight.size >= this.#o.maximumConcurrency) return;
    const next = this.#o.queue.nextVisibleAt();
    if (next === undefined) return;
    const { clock } = this.#o;
    this.#cancelTimer = clock.schedule(Math.max(0, next - clock.now()), () => {
      this.#cancelTimer = undefined;
      this.#poll();
    });
  }

  #poll(): void {
    this.#polling = true;
    try {
      while (this.#running && this.#inFlight.size < this.#o.maximumConcurrency) {
        const records = this.#o.queue.receive(this.#o.batchSize);
        if (records.length === 0) break;
        this.#invoke(records);
      }
    } finally {
      this.#polling = false;
    }
    this.#arm();
  }

  #invoke(records: readonly SqsRecord[]): void {
    const { clock, timeoutMs, queue, handler } = this.#o;
    const requestId = `${this.#o.name}-${++this.#invocations}`;
    const startedAt = clock.now();
    const context: InvocationContext = {
      awsRequestId: requestId,
      getRemainingTimeInMillis: () => timeoutMs - (clock.now() - startedAt),
    };
    const messageIds = records.map((r) => r.messageId);
    const work = handler({ Records: records }, context).then(
      (response) => {
        const endedAt = clock.now();
        if (endedAt - startedAt > timeoutMs) {
          return { outcome: 'timed-out' as const, endedAt, kept: messageIds };
        }
        const failed = failedIds(response, messageIds);
        for (const record of records) if (!failed.has(record.messageId)) queue.delete(record.receiptHandle);
        return { outcome: 'returned' as const, endedAt, kept: [...failed] };
      },
      (error: unknown) => ({ outcome: 'threw' as const, endedAt: clock.now(), kept: messageIds, error }),
    );
    const tracked: Promise<void> = work.then((result) => {
      this.#inFlight.delete(tracked);
      this.#o.onInvocation?.({ requestId, messageIds, startedAt, ...result });
      this.#arm();
    });
    this.#inFlight.add(tracked);
  }
}

/**
 * The records an answer keeps, read as Lambda reads it: no answer, or no or an empty
 * batchItemFailures, keeps none; an unreadable list, or an id that is not in the batch, keeps all.
 */
function failedIds(
  response: SqsBatchResponse | undefined | null,
  messageIds: readonly string[],
): Set<string> {
  const failures: unknown = response?.batchItemFailures;
  if (failures === undefined || failures === null) return new Set();
  if (!Array.isArray(failures)) return new Set(messageIds);
  const ids = failures.map((f: { itemIdentifier?: unknown } | null) => f?.itemIdentifier);
  if (ids.some((id) => typeof id !== 'string' || !messageIds.includes(id))) return new Set(messageIds);
  return new Set(ids as string[]);
}
