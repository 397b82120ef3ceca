import { dynamoBackend, environmentDynamoClient } from '../backends/dynamodb/dynamodb-backend.js';
import type { Clock } from '../clock.js';
import { SqsWorkQueue } from '../continuation/sqs-work-queue.js';
import { ConfigurationError } from '../errors.js';
import { MAX_SHARDS } from '../slot/slot.js';
import { jsonLog } from '../telemetry/log.js';
import { emfMetrics } from '../telemetry/metrics.js';
import {
  backendKind,
  type Env,
  type EnvironmentBackendContext,
  registeredBackend,
  requiredVariable,
} from './environment-backend.js';
import { effectKeyRingFromEnvironment } from './environment-key-ring.js';
import { AfterGrace } from './in-doubt-resolution.js';
import type { JobDefinition } from './job-definition.js';
import { defaultTakeoverSkewMs, JOB_DEFAULTS } from './job-spec.js';
import { createJobHandler, initOnce, type JobHandler } from './lambda-handler.js';
import type { RunOptions, SlotBackend } from './run-slot.js';
import { BackendKind, RuntimeEnv } from './runtime-env.js';

// The backend registry lives in environment-backend.ts, which the watchdog's handler shares;
// re-exported for the modules that import it from here (lambda-environment-postgres.ts, tests).
export {
  type Env,
  type EnvironmentBackend,
  type EnvironmentBackendContext,
  registerEnvironmentBackend,
  requiredVariable,
} from './environment-backend.js';

/** What `jobHandlerFromEnvironment` takes beside the job and the environment. */
export interface JobHandlerEnvironmentOptions {
  /**
   * The clock runs are timed by: leases, retry times, the in-doubt grace period. A test moves its own.
   * @default the system clock
   */
  readonly clock?: Clock;
}

/**
 * The Lambda handler for `job`, configured from the environment the construct sets (RuntimeEnv;
 * SLOTGUARD_BACKEND picks DynamoDB, the default, or a registered backend such as Postgres; with
 * SLOTGUARD_WORK_QUEUE_URL, the job's SQS work queue carries its continuations).
 *
 * Every variable is checked here, at cold start, with its name, its value and the fix: a value
 * that cannot work fails the function's initialisation, where it pages as an error, and never an
 * invocation after a claim, where it would spend one of a window's attempts. The effect-key secret
 * is read from Secrets Manager on the first invocation and kept once read; a read that fails is
 * tried again by the next invocation.
 * @example export const handler = jobHandlerFromEnvironment(weeklyReportJob({ customers, sender }));
 */
export function jobHandlerFromEnvironment(
  job: JobDefinition,
  env: Env = process.env,
  handlerOptions: JobHandlerEnvironmentOptions = {},
): JobHandler {
  const configuredJob = requiredVariable(env, RuntimeEnv.jobId);
  if (configuredJob !== job.id) {
    throw new ConfigurationError(
      RuntimeEnv.jobId,
      `${RuntimeEnv.jobId} is ${JSON.stringify(configuredJob)} but this handler runs job '${job.id}'; ` +
        "point the ScheduledJob's entry at this job's handler",
    );
  }
  const options = runOptionsFromEnvironment(env);
  const effectConcurrency = options.effectConcurrency;
  // Read on the first invocation (a failed read is retried by the next), shared by the backend's
  // hasher and the handler's window pinning, so both see the same current version.
  const keyRing = initOnce(() => effectKeyRingFromEnvironment(env));
  const context: EnvironmentBackendContext = {
    jobId: job.id,
    effectConcurrency,
    hashKey: async () => {
      const ring = await keyRing();
      return ring.hasher(ring.current);
    },
  };
  const kind = backendKind(env);
  const backend =
    kind === BackendKind.DynamoDB
      ? dynamoBackendFromEnvironment(env, context, options.retentionDays)
      : registeredBackend(kind)(env, context);
  assertEffectKeySecret(env);
  const workQueueUrl = workQueueUrlOf(env);
  return createJobHandler(job, {
    backend,
    metrics: () => emfMetrics({ jobId: job.id }),
    log: jsonLog(job.id),
    options,
    keyRing,
    ...(handlerOptions.clock ? { clock: handlerOptions.clock } : {}),
    // The SQS client is built on the first send or visibility change: a run that finishes its
    // window directly never builds one.
    ...(workQueueUrl ? { workQueue: new SqsWorkQueue({ queueUrl: workQueueUrl }) } : {}),
  });
}

/** The run options the construct sets, each checked by the rule runSlot would apply, named by its variable. */
function runOptionsFromEnvironment(env: Env) {
  const leaseSeconds = wholeNumber(env, RuntimeEnv.leaseSeconds, JOB_DEFAULTS.leaseSeconds, 1, 'seconds');
  const deadlineSeconds = wholeNumber(env, RuntimeEnv.deadlineSeconds, undefined, 60, 'seconds');
  return {
    leaseMs: leaseSeconds * 1000,
    effectConcurrency: wholeNumber(
      env,
      RuntimeEnv.effectConcurrency,
      JOB_DEFAULTS.effectConcurrency,
      1,
      'effects',
    ),
    maxAttempts: wholeNumber(env, RuntimeEnv.maxAttempts, JOB_DEFAULTS.maxAttempts, 1, 'attempts'),
    // Two days at least: Scheduler retries a fire for up to 24 hours, and a record must outlive them.
    retentionDays: wholeNumber(env, RuntimeEnv.retentionDays, JOB_DEFAULTS.retentionDays, 2, 'days'),
    ...(deadlineSeconds !== undefined ? { deadlineMs: deadlineSeconds * 1000 } : {}),
    shards: wholeNumber(env, RuntimeEnv.shards, 1, 1, 'shards', MAX_SHARDS),
    reserveAhead: reserveAheadOf(env),
    ...takeoverSkewOf(env, leaseSeconds),
    inDoubtResolution: {
      graceMs: wholeNumber(env, RuntimeEnv.inDoubtGraceSeconds, 0, 0, 'seconds') * 1000,
      afterGrace: afterGraceOf(env),
    },
  } satisfies RunOptions;
}

function reserveAheadOf(env: Env): boolean {
  const raw = env[RuntimeEnv.reserveAhead];
  if (raw === undefined || raw === '' || raw === 'false') return false;
  if (raw === 'true') return true;
  throw new ConfigurationError(
    RuntimeEnv.reserveAhead,
    `${RuntimeEnv.reserveAhead} is ${JSON.stringify(raw)}; set 'true' (reserve each worker's next effect during its send) or 'false' (the default)`,
  );
}

function afterGraceOf(env: Env): AfterGrace {
  const raw = env[RuntimeEnv.inDoubtAfterGrace];
  if (raw === undefined || raw === '') return AfterGrace.Report;
  if (raw === AfterGrace.Report || raw === AfterGrace.Resend) return raw;
  throw new ConfigurationError(
    RuntimeEnv.inDoubtAfterGrace,
    `${RuntimeEnv.inDoubtAfterGrace} is ${JSON.stringify(raw)}; set 'report' (leave it in doubt, the default) or 'resend'`,
  );
}

/**
 * SLOTGUARD_TAKEOVER_SKEW_SECONDS: seconds to the millisecond, from 0 to less than the lease, the
 * rule runSlot applies (an allowance as long as the lease would make a crashed run's window wait
 * out its lease twice). Unset: the runtime's default (defaultTakeoverSkewMs).
 */
function takeoverSkewOf(env: Env, leaseSeconds: number): Pick<RunOptions, 'takeoverSkewMs'> {
  const name = RuntimeEnv.takeoverSkewSeconds;
  const raw = env[name];
  if (raw === undefined || raw === '') return {};
  const seconds = Number(raw);
  if (!/^\s*\d+(\.\d{1,3})?\s*$/.test(raw) || !(seconds < leaseSeconds)) {
    throw new ConfigurationError(
      name,
      `${name} is ${JSON.stringify(raw)}; set a number of seconds (to the millisecond) from 0 to less than the ` +
        `lease (${RuntimeEnv.leaseSeconds}, ${leaseSeconds}), or leave it unset for ` +
        `${defaultTakeoverSkewMs(leaseSeconds * 1000) / 1000}`,
    );
  }
  return { takeoverSkewMs: Math.round(seconds * 1000) };
}

function workQueueUrlOf(env: Env): string | undefined {
  const raw = env[RuntimeEnv.workQueueUrl];
  if (raw === undefined || raw === '') return undefined;
  let url: URL | undefined;
  try {
    url = new URL(raw);
  } catch {
    url = undefined;
  }
  if (!url || (url.protocol !== 'https:' && url.protocol !== 'http:')) {
    throw new ConfigurationError(
      RuntimeEnv.workQueueUrl,
      `${RuntimeEnv.workQueueUrl} is ${JSON.stringify(raw)}; set the queue's URL ` +
        '(https://sqs.<region>.amazonaws.com/<account>/<queue>, as the ScheduledJob construct does) or leave it unset',
    );
  }
  return raw;
}

/**
 * The DynamoDB backend SLOTGUARD_TABLE_NAME (and DYNAMODB_ENDPOINT) name, the table checked now,
 * connected on first use; the SES event recorder builds its ledger with it too.
 */
export function dynamoBackendFromEnvironment(
  env: Env,
  context: EnvironmentBackendContext,
  retentionDays: number,
): () => Promise<SlotBackend> {
  const tableName = requiredVariable(env, RuntimeEnv.tableName);
  const endpoint = env[RuntimeEnv.dynamodbEndpoint];
  return async () =>
    dynamoBackend({
      client: environmentDynamoClient(endpoint),
      tableName,
      hashKey: await context.hashKey(),
      retentionDays,
    });
}

function assertEffectKeySecret(env: Env): void {
  if (env[RuntimeEnv.effectKeySecret] || env[RuntimeEnv.effectKeySecretArn]) return;
  throw new ConfigurationError(
    RuntimeEnv.effectKeySecretArn,
    `neither ${RuntimeEnv.effectKeySecretArn} nor ${RuntimeEnv.effectKeySecret} is set; the ScheduledJob construct ` +
      'sets the ARN of the generated secret: deploy through it, or set one of them',
  );
}

/**
 * The whole number in `name`, at least `min` (and at most `max`, when given); `fallback` when it is
 * unset. Anything else (a fraction, a word, out of range) is a ConfigurationError naming the
 * variable, the value and the fix.
 */
function wholeNumber<F extends number | undefined>(
  env: Env,
  name: string,
  fallback: F,
  min: number,
  unit: string,
  max = Number.MAX_SAFE_INTEGER,
): number | F {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!/^\s*\d+\s*$/.test(raw) || !Number.isSafeInteger(value) || value < min || value > max) {
    const byDefault = fallback === undefined ? 'or leave it unset' : `default ${fallback}`;
    const range = max === Number.MAX_SAFE_INTEGER ? `at least ${min}` : `from ${min} to ${max}`;
    throw new ConfigurationError(
      name,
      `${name} is ${JSON.stringify(raw)}; set a whole number of ${unit}, ${range} (${byDefault})`,
    );
  }
  return value;
}
