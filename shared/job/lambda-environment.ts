import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { createDynamoClient, dynamoBackend } from '../backends/dynamodb/dynamodb-backend.js';
import { type EffectKeyHasher, hmacEffectKeys } from '../effects/effect-key.js';
import { ConfigurationError } from '../errors.js';
import { jsonLog } from '../telemetry/log.js';
import { emfMetrics } from '../telemetry/metrics.js';
import {
  backendKind,
  type Env,
  type EnvironmentBackendContext,
  registeredBackend,
  requiredVariable,
} from './environment-backend.js';
import type { JobDefinition } from './job-definition.js';
import { JOB_DEFAULTS } from './job-spec.js';
import { createJobHandler } from './lambda-handler.js';
import type { RunOptions, SlotBackend } from './run-slot.js';
import { BackendKind, RuntimeEnv } from './runtime-env.js';

// Moved to environment-backend.ts, which the watchdog's handler shares; re-exported for the modules
// that import them from here (lambda-environment-postgres.ts, tests).
export {
  type Env,
  type EnvironmentBackend,
  type EnvironmentBackendContext,
  registerEnvironmentBackend,
  requiredVariable,
} from './environment-backend.js';

/**
 * The Lambda handler for `job`, configured from the environment the ScheduledJob construct sets
 * (RuntimeEnv; SLOTGUARD_BACKEND picks DynamoDB, the default, or a registered backend such as
 * Postgres). Configuration errors surface at cold start with the variable's name and the fix;
 * the effect-key secret is read from Secrets Manager once, on the first invocation.
 * @example export const handler = jobHandlerFromEnvironment(weeklyReportJob({ customers, sender }));
 */
export function jobHandlerFromEnvironment(job: JobDefinition, env: Env = process.env) {
  const configuredJob = requiredVariable(env, RuntimeEnv.jobId);
  if (configuredJob !== job.id) {
    throw new ConfigurationError(
      RuntimeEnv.jobId,
      `${RuntimeEnv.jobId} is ${JSON.stringify(configuredJob)} but this handler runs job '${job.id}'; ` +
        "point the ScheduledJob's entry at this job's handler",
    );
  }
  const retentionDays = positiveNumber(env, RuntimeEnv.retentionDays, JOB_DEFAULTS.retentionDays);
  const effectConcurrency = positiveNumber(env, RuntimeEnv.effectConcurrency, JOB_DEFAULTS.effectConcurrency);
  const options: RunOptions = {
    leaseMs: positiveNumber(env, RuntimeEnv.leaseSeconds, JOB_DEFAULTS.leaseSeconds) * 1000,
    effectConcurrency,
    maxAttempts: positiveNumber(env, RuntimeEnv.maxAttempts, JOB_DEFAULTS.maxAttempts),
    retentionDays,
  };
  let hasher: Promise<EffectKeyHasher> | undefined;
  const context: EnvironmentBackendContext = {
    jobId: job.id,
    effectConcurrency,
    hashKey: () => {
      hasher ??= effectKeySecret(env).then(hmacEffectKeys);
      return hasher;
    },
  };
  const kind = backendKind(env);
  const backend =
    kind === BackendKind.DynamoDB
      ? dynamoBackendFromEnvironment(env, context, retentionDays)
      : registeredBackend(kind)(env, context);
  return createJobHandler(job, {
    backend,
    metrics: () => emfMetrics({ jobId: job.id }),
    log: jsonLog(job.id),
    options,
  });
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

async function effectKeySecret(env: Env): Promise<string> {
  const inline = env[RuntimeEnv.effectKeySecret];
  if (inline) return inline;
  const arn = env[RuntimeEnv.effectKeySecretArn];
  if (!arn) {
    throw new ConfigurationError(
      RuntimeEnv.effectKeySecretArn,
      `neither ${RuntimeEnv.effectKeySecretArn} nor ${RuntimeEnv.effectKeySecret} is set; the ScheduledJob construct ` +
        'sets the ARN of the generated secret: deploy through it, or set one of them',
    );
  }
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

/** The number in `name`, `fallback` when unset, or a ConfigurationError naming it. */
export function positiveNumber(env: Env, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0) {
    throw new ConfigurationError(
      name,
      `${name} is ${JSON.stringify(raw)}; set a positive number (default ${fallback})`,
    );
  }
  return value;
}
