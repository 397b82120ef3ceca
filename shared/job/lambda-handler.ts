import { type Clock, systemClock } from '../clock.js';
import { InvalidEventError, SlotguardError } from '../errors.js';
import type { Log } from '../telemetry/log.js';
import { MetricName } from '../telemetry/metric-names.js';
import type { JobMetrics } from '../telemetry/metrics.js';
import type { JobDefinition } from './job-definition.js';
import { type RunOptions, type RunResult, runSlot, type SlotBackend } from './run-slot.js';
import { parseSchedulerEvent } from './scheduler-event.js';

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
  readonly options?: RunOptions;
}

/** What the handler returns: JSON, for the invocation record and the local runner. */
export type HandlerResponse =
  | { readonly status: 'rejected'; readonly field: string; readonly message: string }
  | Exclude<RunResult, { status: 'failed' }>;

/**
 * Thrown after a failed run has given its slot back, so the window is delivered again (Lambda's
 * async retry, or the work queue's redelivery), or after its last allowed failure made it FAILED.
 */
export class JobRunFailedError extends SlotguardError {}

/**
 * Turns a job definition into a Lambda handler for its schedule's events.
 *
 * Invalid events are answered, not thrown: an InvalidEvent metric, a log line and a `rejected`
 * response, so Lambda does not retry what can never succeed. A job that throws releases its slot
 * and the handler rethrows, so the retry policy delivers the window again (up to maxAttempts).
 * @example export const handler = createJobHandler(weeklyReport, { backend, metrics, log })
 */
export function createJobHandler(job: JobDefinition, deps: JobHandlerDeps) {
  let backend: Promise<SlotBackend> | undefined;
  const clock = deps.clock ?? systemClock;
  return async function handler(event: unknown, context?: InvocationContext): Promise<HandlerResponse> {
    const metrics = deps.metrics();
    try {
      let parsed: ReturnType<typeof parseSchedulerEvent>;
      try {
        parsed = parseSchedulerEvent(event, job.id, context?.awsRequestId ?? 'local');
      } catch (error) {
        if (error instanceof InvalidEventError) return reject(error, metrics, deps.log);
        throw error;
      }
      backend ??= buildBackend(deps.backend).catch((error: unknown) => {
        backend = undefined;
        throw error;
      });
      let result: RunResult;
      try {
        result = await runSlot({
          job,
          backend: await backend,
          clock,
          metrics,
          log: deps.log,
          slot: parsed.slot,
          delivery: parsed.delivery,
          payload: parsed.payload,
          ...(deps.options ? { options: deps.options } : {}),
          ...(context ? { remainingTimeMs: () => context.getRemainingTimeInMillis() } : {}),
        });
      } catch (error) {
        if (error instanceof InvalidEventError) return reject(error, metrics, deps.log);
        throw error;
      }
      if (result.status === 'failed') {
        throw new JobRunFailedError(
          `job '${job.id}' failed for window ${parsed.slot.window} (epoch ${result.epoch}); ${AFTER_FAILURE[result.slotState]}`,
          { cause: result.error },
        );
      }
      return result;
    } finally {
      await metrics.flush();
    }
  };
}

/** What became of the slot after a failed run, for the error an operator reads. */
const AFTER_FAILURE = {
  RELEASED: 'the slot was released for a retry',
  FAILED:
    'that was its last allowed attempt, so the slot is FAILED and later deliveries stand down until an operator ' +
    'releases it (slotguard slots release)',
  fenced: 'a later run had already taken the slot over, which carries on with the window',
} as const;

function buildBackend(backend: JobHandlerDeps['backend']): Promise<SlotBackend> {
  return typeof backend === 'function' ? backend() : Promise.resolve(backend);
}

function reject(error: InvalidEventError, metrics: JobMetrics, log: Log): HandlerResponse {
  metrics.count(MetricName.InvalidEvent);
  log.error('event rejected: permanent, not retried', { field: error.field, reason: error.message });
  return { status: 'rejected', field: error.field, message: error.message };
}
