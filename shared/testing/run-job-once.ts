import { memoryBackend } from '../backends/memory/memory-backend.js';
import type { Clock } from '../clock.js';
import { hmacEffectKeys } from '../effects/effect-key.js';
import type { JobDefinition } from '../job/job-definition.js';
import { createJobHandler, type HandlerResponse } from '../job/lambda-handler.js';
import type { RunOptions, SlotBackend } from '../job/run-slot.js';
import type { SchedulerEvent } from '../job/scheduler-event.js';
import { windowOf } from '../slot/slot.js';
import { MetricName } from '../telemetry/metric-names.js';
import { emfMetrics } from '../telemetry/metrics.js';
import { ManualClock } from './manual-clock.js';
import { EmfRecorder, RecordingLog } from './recorders.js';

/** The effect-key secret of the in-memory backends runJobOnce builds. Test data only. */
const TEST_EFFECT_KEY_SECRET = 'slotguard-testing-effect-key-secret';

/** Options of `runJobOnce`; every one has a default. */
export interface RunJobOnceOptions {
  /**
   * The window: the scheduled time the fire carries, as EventBridge Scheduler stamps it.
   * @default the start of the clock's current minute
   */
  readonly scheduledTime?: Date | string;
  /**
   * Where the claim and the effect ledger live. Pass the backend of an earlier call to run the
   * window again (a duplicate fire, a retry) against what that call left.
   * @default a new in-memory backend (`testBackend()`): every call starts from an empty store
   */
  readonly backend?: SlotBackend;
  /**
   * The run's clock.
   * @default a ManualClock standing at `scheduledTime` (or now, without one): time stands still, so
   * no lease renews or expires during the run
   */
  readonly clock?: Clock;
  /**
   * The schedule's `payload`, handed to the job as `ctx.payload`.
   * @default none
   */
  readonly payload?: unknown;
  /**
   * Which delivery of the window this is (Scheduler's attempt number).
   * @default 1
   */
  readonly attemptNumber?: number;
  /**
   * Run options, as jobHandlerFromEnvironment would take them from the ScheduledJob's environment.
   * @default the runtime's defaults
   */
  readonly options?: RunOptions;
}

/** What one run of a job came to, as a test asserts it. */
export interface JobRunReport {
  /** What the handler returned: `completed` (with its summary), `duplicate`, `yielded`, `fenced` or `rejected`. */
  readonly result: HandlerResponse;
  /** Each metric's count over the EMF lines the run wrote (0 for those it did not write). */
  readonly metrics: Readonly<Record<MetricName, number>>;
  /** The run's log lines; effect keys appear only hashed. */
  readonly log: RecordingLog;
  /** The backend the run used, to pass to the next call. */
  readonly backend: SlotBackend;
}

/**
 * A fresh in-memory claims backend: conditional writes with the DynamoDB adapter's semantics, in
 * process memory, nothing persisted.
 * @example const backend = testBackend(); await runJobOnce(job, { backend }); await runJobOnce(job, { backend });
 */
export function testBackend(): SlotBackend {
  return memoryBackend({ hashKey: hmacEffectKeys(TEST_EFFECT_KEY_SECRET) });
}

/**
 * Runs `job` once, for one window, through the same handler a deployed function runs (the event
 * EventBridge Scheduler sends, the claim, the per-recipient ledger, the metrics), against an
 * in-memory backend, and reports what happened. A job that throws makes it reject, as the Lambda
 * handler does (JobRunFailedError, its `cause` the job's error), after releasing the slot.
 * @example
 * const sender = new RecordingEmailSender();
 * const job = weeklyReportJob({ customers: () => customers(3), sender });
 * const first = await runJobOnce(job, { scheduledTime: '2026-11-30T06:00:00Z' });
 * const again = await runJobOnce(job, { scheduledTime: '2026-11-30T06:00:00Z', backend: first.backend });
 * expect(first.result.status).toBe('completed');
 * expect(again.result.status).toBe('duplicate');
 * expect(sender.total).toBe(3);
 */
export async function runJobOnce(job: JobDefinition, options: RunJobOnceOptions = {}): Promise<JobRunReport> {
  const start = options.scheduledTime === undefined ? undefined : new Date(options.scheduledTime);
  const clock = options.clock ?? new ManualClock(start ?? Date.now());
  const window = start ?? new Date(Math.floor(clock.now() / 60_000) * 60_000);
  const backend = options.backend ?? testBackend();
  const emf = new EmfRecorder();
  const log = new RecordingLog();
  const handler = createJobHandler(job, {
    backend,
    metrics: () => emfMetrics({ jobId: job.id, write: emf.write }),
    log,
    clock,
    ...(options.options ? { options: options.options } : {}),
  });
  const result = await handler({
    ...schedulerEvent(job.id, window, options.attemptNumber ?? 1),
    ...(options.payload === undefined ? {} : { payload: options.payload }),
  });
  const metrics = Object.fromEntries(
    Object.values(MetricName).map((name) => [name, emf.sum(name)]),
  ) as Record<MetricName, number>;
  return { result, metrics, log, backend };
}

/**
 * The event EventBridge Scheduler delivers for one window of a job, as the ScheduledJob construct
 * configures it; call a handler with it to run that window.
 * @example await handler(schedulerEvent('weekly-report', '2026-11-30T06:00:00Z'))
 */
export function schedulerEvent(
  jobId: string,
  scheduledTime: Date | string,
  attemptNumber = 1,
  executionId?: string,
): SchedulerEvent & { readonly executionId: string; readonly attemptNumber: string } {
  const window = typeof scheduledTime === 'string' ? scheduledTime : windowOf(scheduledTime);
  return {
    jobId,
    scheduledTime: window,
    executionId: executionId ?? `exec-${window}-${attemptNumber}`,
    attemptNumber: String(attemptNumber),
  };
}
