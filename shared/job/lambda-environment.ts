import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { createDynamoClient, dynamoBackend } from '../backends/dynamodb/dynamodb-backend.js';
import { SqsWorkQueue } from '../continuation/sqs-work-queue.js';
import { type EffectKeyHasher, hmacEffectKeys } from '../effects/effect-key.js';
import { ConfigurationError } from '../errors.js';
import { jsonLog } from '../telemetry/log.js';
import { emfMetrics } from '../telemetry/metrics.js';
import type { JobDefinition } from './job-definition.js';
import { JOB_DEFAULTS } from './job-spec.js';
import { createJobHandler, initOnce, type JobHandler } from './lambda-handler.js';
import type { RunOptions, SlotBackend } from './run-slot.js';
import { BACKEND_ENV, BackendKind, RuntimeEnv } from './runtime-env.js';

/** The environment a handler is configured from: `process.env`, or a record in tests. */
export type Env = Readonly<Record<string, string | undefined>>;

/** What a backend built from the environment gets from jobHandlerFromEnvironment. */
export interface EnvironmentBackendContext {
  readonly jobId: string;
  /** The run's effect concurrency, which sizes a connection pool. */
  readonly effectConcurrency: number;
  /**
   * The effect-key hasher, from the secret read on first use: kept once read, read again by the
   * next call when a read fails.
   */
  readonly hashKey: () => Promise<EffectKeyHasher>;
}

/**
 * Builds a claims backend from the environment in two steps: the call checks the variables (so a
 * misconfigured function fails at cold start, naming the variable), and the function it returns
 * connects, on the first invocation.
 */
export type EnvironmentBackend = (env: Env, context: EnvironmentBackendContext) => () => Promise<SlotBackend>;

/**
 * Backends other than DynamoDB, registered by their own modules. This module never imports them,
 * not even with a dynamic `import()`: esbuild inlines a dynamic import into a single-file bundle, so
 * `pg` would ride along in every DynamoDB-only Lambda. See registerEnvironmentBackend.
 */
const registeredBackends = new Map<BackendKind, EnvironmentBackend>();

/**
 * Makes `SLOTGUARD_BACKEND=<kind>` available to jobHandlerFromEnvironment in this process.
 * shared/job/lambda-environment-postgres.ts registers the Postgres backend when it is imported;
 * PostgresClaims adds that module to its functions' bundles (esbuild's `inject`), so the handler
 * modules stay the same for both backends.
 * @example registerEnvironmentBackend('postgres', postgresBackendFromEnvironment)
 */
export function registerEnvironmentBackend(
  kind: Exclude<BackendKind, typeof BackendKind.DynamoDB>,
  build: EnvironmentBackend,
): void {
  registeredBackends.set(kind, build);
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
export function jobHandlerFromEnvironment(job: JobDefinition, env: Env = process.env): JobHandler {
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
  const context: EnvironmentBackendContext = {
    jobId: job.id,
    effectConcurrency,
    hashKey: initOnce(() => effectKeySecret(env).then(hmacEffectKeys)),
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
  } satisfies RunOptions;
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

function backendKind(env: Env): BackendKind {
  const raw = env[BACKEND_ENV];
  if (raw === undefined || raw === '') return BackendKind.DynamoDB;
  const kinds: readonly string[] = Object.values(BackendKind);
  if (!kinds.includes(raw)) {
    throw new ConfigurationError(
      BACKEND_ENV,
      `${BACKEND_ENV} is ${JSON.stringify(raw)}; set ${kinds.map((k) => JSON.stringify(k)).join(' or ')}, or leave ` +
        'it unset for DynamoDB',
    );
  }
  return raw as BackendKind;
}

/** How a bundle comes to include each registered backend: the fix when one is missing. */
const HOW_TO_INCLUDE: Record<Exclude<BackendKind, typeof BackendKind.DynamoDB>, string> = {
  postgres:
    'deploy the job with PostgresClaims, which injects shared/job/lambda-environment-postgres.ts into the ' +
    "function's bundle, or import that module before building the handler",
};

function registeredBackend(kind: Exclude<BackendKind, typeof BackendKind.DynamoDB>): EnvironmentBackend {
  const build = registeredBackends.get(kind);
  if (!build) {
    throw new ConfigurationError(
      BACKEND_ENV,
      `${BACKEND_ENV} is ${JSON.stringify(kind)} but this bundle does not include the ${kind} backend; ${HOW_TO_INCLUDE[kind]}`,
    );
  }
  return build;
}

function dynamoBackendFromEnvironment(
  env: Env,
  context: EnvironmentBackendContext,
  retentionDays: number,
): () => Promise<SlotBackend> {
  const tableName = requiredVariable(env, RuntimeEnv.tableName);
  const endpoint = env[RuntimeEnv.dynamodbEndpoint];
  return async () =>
    dynamoBackend({
      client: createDynamoClient(endpoint ? { endpoint } : {}),
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

async function effectKeySecret(env: Env): Promise<string> {
  const inline = env[RuntimeEnv.effectKeySecret];
  if (inline) return inline;
  const arn = requiredVariable(env, RuntimeEnv.effectKeySecretArn);
  const client = new SecretsManagerClient({});
  try {
    const { SecretString } = await client.send(new GetSecretValueCommand({ SecretId: arn }));
    if (!SecretString) {
      throw new ConfigurationError(
        RuntimeEnv.effectKeySecretArn,
        `secret ${arn} has no string value; store the key as text`,
      );
    }
    return SecretString;
  } finally {
    client.destroy();
  }
}

/** The value of `name`, or a ConfigurationError naming it. */
export function requiredVariable(env: Env, name: string): string {
  const value = env[name];
  if (!value) throw new ConfigurationError(name, `${name} is not set; the ScheduledJob construct sets it`);
  return value;
}

/**
 * The whole number in `name`, at least `min`; `fallback` when it is unset. Anything else (a
 * fraction, a word, too small) is a ConfigurationError naming the variable, the value and the fix.
 */
function wholeNumber<F extends number | undefined>(
  env: Env,
  name: string,
  fallback: F,
  min: number,
  unit: string,
): number | F {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!/^\s*\d+\s*$/.test(raw) || !Number.isSafeInteger(value) || value < min) {
    const byDefault = fallback === undefined ? 'or leave it unset' : `default ${fallback}`;
    throw new ConfigurationError(
      name,
      `${name} is ${JSON.stringify(raw)}; set a whole number of ${unit}, at least ${min} (${byDefault})`,
    );
  }
  return value;
}
