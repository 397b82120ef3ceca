import { type Clock, systemClock } from '../clock.js';
import { VisibilityHeartbeat } from '../continuation/visibility-heartbeat.js';
import {
  BatchSendError,
  dispositionOf,
  isSqsEvent,
  MAX_BATCH_MESSAGES,
  MAX_DELAY_MS,
  MAX_VISIBILITY_MS,
  type RunOutcome,
  receiveCountOf,
  type SqsBatchResponse,
  type SqsEvent,
  type SqsRecord,
  type WorkQueue,
  WorkQueueError,
} from '../continuation/work-queue.js';
import { drainConcurrently } from '../effects/concurrent-drain.js';
import type { EffectKeyRing } from '../effects/effect-key.js';
import { ConfigurationError, InvalidEventError, SlotguardError } from '../errors.js';
import type { Log } from '../telemetry/log.js';
import { MetricName } from '../telemetry/metric-names.js';
import type { JobMetrics } from '../telemetry/metrics.js';
import { safeErrorText } from '../telemetry/safe-error-text.js';
import type { JobDefinition } from './job-definition.js';
import {
  type RunOptions,
  type RunResult,
  resolveRunOptions,
  runSlot,
  type ShardPlan,
  type SlotBackend,
} from './run-slot.js';
import { type ParsedEvent, parseSchedulerEvent } from './scheduler-event.js';

/** The part of Lambda's context the handler uses. */
export interface InvocationContext {
  readonly awsRequestId: string;
  getRemainingTimeInMillis(): number;
}

/** What `createJobHandler` runs a job with: the backend, metrics, log, clock and run options. */
export interface JobHandlerDeps {
  /**
   * The backend, or a function that builds it on first use (cold start). A build that fails is not
   * kept: the next invocation builds it again, so one failed cold start does not fail every later
   * invocation of the container.
   */
  readonly backend: SlotBackend | (() => Promise<SlotBackend>);
  /** Metrics for one invocation; flushed before the handler returns. */
  readonly metrics: () => JobMetrics;
  readonly log: Log;
  /** @default the system clock */
  readonly clock?: Clock;
  /** Checked when the handler is created: options that cannot work fail then, before any claim. */
  readonly options?: RunOptions;
  /**
   * The job's work queue. For a window delivered from it, the handler keeps the message invisible
   * while the run holds its lease and sets how long it waits before its next delivery; a direct
   * invocation whose window is not finished sends its continuation there.
   * @default none: a direct invocation that stops with work left waits for the window's next delivery
   */
  readonly workQueue?: WorkQueue;
  /**
   * The effect-key versions (or a function that reads them on first use): each window is pinned to
   * the version current at its first claim and hashed with it to its end, so rotating the secret
   * mid-window sends nobody a second email. A read that fails is not kept.
   * @default none: every window hashes with the backend's `hashKey`
   */
  readonly keyRing?: EffectKeyRing | (() => Promise<EffectKeyRing>);
}

/** What the handler returns for a direct invocation: JSON, for the invocation record and the local runner. */
export type HandlerResponse =
  | { readonly status: 'rejected'; readonly field: string; readonly message: string }
  | Exclude<RunResult, { status: 'failed' }>;

/**
 * A job's Lambda handler. Typed by event: a batch from the job's SQS queue gets a batch response;
 * anything else is read as the schedule's event itself. A value typed `unknown` that is an SQS event
 * at run time still gets the batch response: narrow it with isSqsEvent first.
 */
export interface JobHandler {
  (event: SqsEvent, context?: InvocationContext): Promise<SqsBatchResponse>;
  (event: unknown, context?: InvocationContext): Promise<HandlerResponse>;
}

/**
 * Thrown after a failed run has given its slot back, so the window is delivered again (Lambda's
 * async retry, or the work queue's redelivery), or after its last allowed failure made it FAILED.
 */
export class JobRunFailedError extends SlotguardError {}

type Outcome =
  | HandlerResponse
  | Extract<RunResult, { status: 'failed' }>
  | { readonly status: 'threw'; error: unknown };

/**
 * Turns a job definition into a Lambda handler for its windows: the schedule's event invoked
 * directly, or a batch from the job's SQS work queue.
 *
 * Invalid events are answered, not thrown: an InvalidEvent metric, a log line and a `rejected`
 * response (a queued one is deleted), so nothing retries what can never succeed.
 *
 * From the queue, a window's message is deleted only when the window is finished or can never run
 * (dispositionOf); otherwise it is reported in batchItemFailures with its visibility set to when
 * it should come back, and Lambda delivers it again: that redelivery is the continuation. A job
 * that threw, or a run that threw, still fails the invocation (after the message's retry delay is
 * set), so Lambda's Errors metric counts it.
 *
 * Invoked directly, a run that left work sends its continuation to the work queue, when there is
 * one; a job that threw releases its slot and the handler rethrows, so Lambda's async retry
 * delivers the window again (up to maxAttempts).
 * @example export const handler = createJobHandler(weeklyReport, { backend, metrics, log, workQueue })
 */
export function createJobHandler(job: JobDefinition, deps: JobHandlerDeps): JobHandler {
  // Configuration first: options that cannot work fail at cold start, never on a window's attempt.
  const { leaseMs, shards } = resolveRunOptions(deps.options);
  if (shards > 1 && !deps.workQueue) {
    throw new ConfigurationError(
      'shards',
      `job '${job.id}' is split into ${shards} shards but its handler has no work queue to send them to; ` +
        'give createJobHandler a workQueue (ScheduledJob sets SLOTGUARD_WORK_QUEUE_URL) or set shards to 1',
    );
  }
  const clock = deps.clock ?? systemClock;
  const backend = initOnce(() =>
    typeof deps.backend === 'function' ? deps.backend() : Promise.resolve(deps.backend),
  );
  const { keyRing } = deps;
  const keys = keyRing
    ? initOnce(() => (typeof keyRing === 'function' ? keyRing() : Promise.resolve(keyRing)))
    : undefined;

  async function runWindow(
    event: unknown,
    context: InvocationContext | undefined,
    metrics: JobMetrics,
    hooks: { readonly redelivered: boolean; readonly heartbeat?: () => void },
  ): Promise<{ outcome: Outcome; parsed?: ParsedEvent }> {
    let parsed: ParsedEvent;
    try {
      parsed = parseSchedulerEvent(event, job.id, context?.awsRequestId ?? 'local');
    } catch (error) {
      if (error instanceof InvalidEventError) return { outcome: reject(error, metrics, deps.log) };
      throw error;
    }
    try {
      const result = await runSlot({
        job,
        backend: await backend(),
        ...(keys ? { keyRing: await keys() } : {}),
        clock,
        metrics,
        log: deps.log,
        slot: parsed.slot,
        ...(parsed.shard ? { shard: parsed.shard } : {}),
        ...(deps.workQueue ? { fanOut: fanOutTo(deps.workQueue, event, parsed.slot.window) } : {}),
        // A redelivery of the schedule's message is the engine continuing the window, not a second
        // fire: it must not count as a DuplicateClaim when it finds the slot held or done.
        delivery: hooks.redelivered ? { ...parsed.delivery, continuation: true } : parsed.delivery,
        payload: parsed.payload,
        ...(deps.options ? { options: deps.options } : {}),
        ...(context ? { remainingTimeMs: () => context.getRemainingTimeInMillis() } : {}),
        ...(hooks.heartbeat ? { onClaimed: hooks.heartbeat, onLeaseRenewed: hooks.heartbeat } : {}),
      });
      return { outcome: result, parsed };
    } catch (error) {
      if (error instanceof InvalidEventError) return { outcome: reject(error, metrics, deps.log), parsed };
      return { outcome: { status: 'threw', error }, parsed };
    }
  }

  /**
   * The coordinator's fan-out: the window's event once per shard, naming the shard and what the
   * window pinned. Each is a continuation (the engine at work, not a fire of the schedule). They go
   * out in batches of MAX_BATCH_MESSAGES, FAN_OUT_BATCHES_IN_FLIGHT at once; after a batch fails no
   * new one starts, the ones in flight are let finish, and the error says how many messages the
   * queue confirmed: those shards run, and the window's retry sends every shard's message again.
   */
  function fanOutTo(queue: WorkQueue, event: unknown, window: string) {
    return async (plan: ShardPlan) => {
      const base = typeof event === 'object' && event !== null ? (event as Record<string, unknown>) : {};
      const bodies = Array.from({ length: plan.shards }, (_, shard) =>
        JSON.stringify({
          ...base,
          continuation: true,
          shard,
          shards: plan.shards,
          deadline: plan.deadline,
          ...(plan.keyVersion !== undefined ? { keyVersion: plan.keyVersion } : {}),
        }),
      );
      const batches: string[][] = [];
      for (let at = 0; at < bodies.length; at += MAX_BATCH_MESSAGES) {
        batches.push(bodies.slice(at, at + MAX_BATCH_MESSAGES));
      }
      let sent = 0;
      try {
        // After a failed batch no worker takes another; those in flight finish, and count.
        await drainConcurrently(batches, FAN_OUT_BATCHES_IN_FLIGHT, async (batch) => {
          try {
            await queue.sendBatch(batch, 0);
            sent += batch.length;
          } catch (error) {
            // Only what the queue confirmed counts: a batch that failed outright confirmed none.
            if (error instanceof BatchSendError) sent += error.sent;
            throw error;
          }
        });
      } catch (error) {
        throw new WorkQueueError(
          'send',
          `sent ${sent} of the ${plan.shards} shard messages of window ${window} of job '${job.id}' ` +
            `(${safeErrorText(error instanceof BatchSendError ? error.cause : error)}); the window is given back ` +
            "and its message retried, which sends every shard's message again",
          { cause: error },
        );
      }
      deps.log.info('window split: one message per shard sent', {
        shards: plan.shards,
        batches: batches.length,
      });
    };
  }

  function failure(outcome: Outcome, parsed: ParsedEvent | undefined): unknown {
    if (outcome.status === 'threw') return outcome.error;
    if (outcome.status !== 'failed') return undefined;
    return new JobRunFailedError(
      `job '${job.id}' failed for window ${parsed?.slot.window} (epoch ${outcome.epoch}); ${AFTER_FAILURE[outcome.slotState]}`,
      { cause: outcome.error },
    );
  }

  async function direct(event: unknown, context: InvocationContext | undefined): Promise<HandlerResponse> {
    const metrics = deps.metrics();
    try {
      const { outcome, parsed } = await runWindow(event, context, metrics, { redelivered: false });
      const disposition = dispositionOf(toRunOutcome(outcome), {
        now: clock.now(),
        leaseMs,
        receiveCount: parsed?.delivery.attemptNumber ?? 1,
      });
      const error = failure(outcome, parsed);
      if (disposition.kind === 'retry' && parsed) {
        try {
          await continueLater(event, parsed, disposition.afterMs);
        } catch (sendError) {
          throw error ?? sendError;
        }
      }
      if (error !== undefined) throw error;
      return outcome as HandlerResponse;
    } finally {
      await metrics.flush();
    }
  }

  /** Sends a direct invocation's continuation: the same event, marked as a continuation. */
  async function continueLater(event: unknown, parsed: ParsedEvent, afterMs: number): Promise<void> {
    const fields = { window: parsed.slot.window, retryInMs: afterMs };
    if (!deps.workQueue) {
      deps.log.warn(
        'window not finished and no work queue configured: it waits for its next delivery',
        fields,
      );
      return;
    }
    const body = JSON.stringify({ ...(event as Record<string, unknown>), continuation: true });
    try {
      // A longer wait arrives early, finds the window waiting, and is delayed again from the queue.
      await deps.workQueue.send(body, Math.min(afterMs, MAX_DELAY_MS));
    } catch (cause) {
      // Thrown, so Lambda's async retry delivers the window again: the continuation by other means.
      throw new WorkQueueError(
        'send',
        `window ${parsed.slot.window} of job '${job.id}' is not finished and its continuation could not be ` +
          `queued (${safeErrorText(cause)}); failing the invocation so that it is retried`,
        { cause },
      );
    }
    deps.log.info('continuation queued', fields);
  }

  async function fromQueue(
    event: SqsEvent,
    context: InvocationContext | undefined,
  ): Promise<SqsBatchResponse> {
    const kept: { itemIdentifier: string }[] = [];
    let firstError: unknown;
    for (const record of event.Records) {
      const { disposition, error } = await queuedRecord(record, context);
      if (disposition === 'retry') kept.push({ itemIdentifier: record.messageId });
      firstError ??= error;
    }
    // The kept messages' delays are set; failing the invocation loses nothing and lets Lambda's
    // Errors metric count a job or store failure that a batch response alone would hide.
    if (firstError !== undefined) throw firstError;
    return { batchItemFailures: kept };
  }

  async function queuedRecord(
    record: SqsRecord,
    context: InvocationContext | undefined,
  ): Promise<{ disposition: 'done' | 'retry'; error?: unknown }> {
    const metrics = deps.metrics();
    const receiveCount = receiveCountOf(record);
    const fields = { messageId: record.messageId, receiveCount };
    const queue = deps.workQueue;
    const heartbeat = queue
      ? new VisibilityHeartbeat({
          queue,
          receiptHandle: record.receiptHandle,
          visibleForMs: 2 * leaseMs,
          log: deps.log,
          fields,
        })
      : undefined;
    try {
      let body: unknown;
      let ran: { outcome: Outcome; parsed?: ParsedEvent };
      try {
        body = parseBody(record.body);
        ran = await runWindow(body, context, metrics, {
          redelivered: receiveCount > 1,
          ...(heartbeat ? { heartbeat: heartbeat.beat } : {}),
        });
      } catch (error) {
        if (!(error instanceof InvalidEventError)) throw error;
        ran = { outcome: reject(error, metrics, deps.log) };
      }
      await heartbeat?.settled();
      const { outcome, parsed } = ran;
      const disposition = dispositionOf(toRunOutcome(outcome), { now: clock.now(), leaseMs, receiveCount });
      const error =
        outcome.status === 'failed' && outcome.slotState === 'FAILED' ? undefined : failure(outcome, parsed);
      if (error !== undefined)
        deps.log.error('run failed; its message is kept', { ...fields, error: safeErrorText(error) });
      if (disposition.kind === 'done') return { disposition: 'done', error };
      const retryInMs = Math.min(Math.max(disposition.afterMs, 1_000), MAX_VISIBILITY_MS);
      await delayRedelivery(queue, record, retryInMs, fields, outcome.status);
      return { disposition: 'retry', error };
    } finally {
      await metrics.flush();
    }
  }

  /** Sets when a kept message comes back. If that fails it comes back at its current visibility: later, never lost. */
  async function delayRedelivery(
    queue: WorkQueue | undefined,
    record: SqsRecord,
    retryInMs: number,
    fields: Record<string, unknown>,
    status: string,
  ): Promise<void> {
    if (!queue) {
      deps.log.warn(
        'message kept; no work queue configured, so it comes back at the queue visibility timeout',
        fields,
      );
      return;
    }
    try {
      const changed = await queue.changeVisibility(record.receiptHandle, retryInMs);
      deps.log.info('message kept for the window to continue', { ...fields, status, retryInMs, changed });
    } catch (error) {
      deps.log.warn(
        'message kept, but its retry delay could not be set; it comes back when its visibility ends',
        {
          ...fields,
          status,
          error: safeErrorText(error),
        },
      );
    }
  }

  return async function handler(event: unknown, context?: InvocationContext) {
    return isSqsEvent(event) ? fromQueue(event, context) : direct(event, context);
  } as JobHandler;
}

/**
 * A cold-start initialisation kept once it succeeds and forgotten when it fails, so one failed
 * start (a secret read, a connection) is retried by the next invocation instead of being the
 * answer of every invocation the container serves.
 */
export function initOnce<T>(init: () => Promise<T>): () => Promise<T> {
  let pending: Promise<T> | undefined;
  return () => {
    pending ??= init().catch((error: unknown) => {
      pending = undefined;
      throw error;
    });
    return pending;
  };
}

/**
 * Shard batches a coordinator has in flight at once. 4 brings 1,000 shards (100 SendMessageBatch
 * requests) to 25 round trips in a row, well under a second, where one batch at a time takes 100
 * and one message at a time took 1,000. More buys little once the trips are that few, and costs:
 * each batch in flight is a connection of the container's, and after a failure the batches in
 * flight still finish, up to 30 more shard messages out while the window is given back (harmless,
 * as a shard sent twice runs once, but more shards started ahead of the retry).
 */
const FAN_OUT_BATCHES_IN_FLIGHT = 4;

/** What became of the slot after a failed run, for the error an operator reads. */
const AFTER_FAILURE = {
  RELEASED: 'the slot was released for a retry',
  FAILED:
    'that was its last allowed attempt, so the slot is FAILED and later deliveries stand down until an operator ' +
    'releases it (slotguard slots release)',
  fenced: 'a later run had already taken the slot over, which carries on with the window',
} as const;

function toRunOutcome(outcome: Outcome): RunOutcome {
  return outcome.status === 'threw' ? { status: 'threw' } : outcome;
}

function parseBody(body: string): unknown {
  try {
    return JSON.parse(body);
  } catch {
    throw new InvalidEventError(
      'body',
      `the message body is not JSON (${body.length} characters); the schedule sends the event as JSON`,
    );
  }
}

function reject(error: InvalidEventError, metrics: JobMetrics, log: Log): HandlerResponse {
  metrics.count(MetricName.InvalidEvent);
  log.error('event rejected: permanent, not retried', { field: error.field, reason: error.message });
  return { status: 'rejected', field: error.field, message: error.message };
}
