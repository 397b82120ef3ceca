import { environmentDynamoClient } from '../backends/dynamodb/dynamodb-backend.js';
import { DynamoRateLimitStore } from '../backends/dynamodb/dynamodb-rate-limit-store.js';
import type { Clock } from '../clock.js';
import {
  assertRateLimitJobId,
  lazyRateLimitStore,
  type RateLimitStore,
} from '../effects/rate-limit-store.js';
import { SharedRateLimiter } from '../effects/shared-rate-limiter.js';
import { type RateLimiter, TokenBucket } from '../effects/token-bucket.js';
import { ConfigurationError } from '../errors.js';
import { backendKind, type Env, registeredSendRateStore } from './environment-backend.js';
import { BackendKind, RuntimeEnv, SendRateScope } from './runtime-env.js';

/**
 * The send-rate limiter a function's environment asks for: the composition root of
 * SesEmailSender.fromEnvironment, kept apart from the sender. With SLOTGUARD_SEND_RATE_SCOPE `job`
 * (the default wherever SLOTGUARD_JOB_ID is set) a SharedRateLimiter on the job's timeline in the
 * claims backend SLOTGUARD_BACKEND names, so every worker of the job together keeps to the rate;
 * with `process` a TokenBucket of this process's own.
 *
 * The variables are checked here, at cold start; the store's client or connection is made on the
 * first send. The Postgres store comes from the registry (registerEnvironmentSendRateStore), so a
 * DynamoDB-only bundle never includes `pg`.
 * @example const limiter = sendRateLimiterFromEnvironment(process.env, { ratePerSecond: 14 });
 */
export function sendRateLimiterFromEnvironment(
  env: Env,
  options: { readonly ratePerSecond: number; readonly clock?: Clock },
): RateLimiter {
  const clock = options.clock ? { clock: options.clock } : {};
  if (sendRateScope(env) === SendRateScope.Process) {
    return new TokenBucket({ ratePerSecond: options.ratePerSecond, ...clock });
  }
  const jobId = jobScopeVariable(env, RuntimeEnv.jobId);
  assertRateLimitJobId(jobId);
  const kind = backendKind(env);
  const store =
    kind === BackendKind.DynamoDB
      ? dynamoSendRateStore(env, jobId)
      : registeredSendRateStore(kind)(env, jobId);
  return new SharedRateLimiter({ store, ratePerSecond: options.ratePerSecond, ...clock });
}

/**
 * SLOTGUARD_SEND_RATE_SCOPE, checked. Unset, it is `job` for a function that serves a job
 * (SLOTGUARD_JOB_ID set, as on every ScheduledJob's function) and `process` elsewhere: a sender
 * built outside any job has no job to share a rate with.
 */
export function sendRateScope(env: Env): SendRateScope {
  const raw = env[RuntimeEnv.sendRateScope];
  if (raw === undefined || raw === '') {
    return env[RuntimeEnv.jobId] ? SendRateScope.Job : SendRateScope.Process;
  }
  const scopes: readonly string[] = Object.values(SendRateScope);
  if (!scopes.includes(raw)) {
    throw new ConfigurationError(
      RuntimeEnv.sendRateScope,
      `${RuntimeEnv.sendRateScope} is ${JSON.stringify(raw)}; set "job" (every worker of the job shares the rate) or ` +
        `"process" (each Lambda keeps to it alone), or leave it unset for "job"`,
    );
  }
  return raw as SendRateScope;
}

function dynamoSendRateStore(env: Env, jobId: string): RateLimitStore {
  const tableName = jobScopeVariable(env, RuntimeEnv.tableName);
  const endpoint = env[RuntimeEnv.dynamodbEndpoint];
  return lazyRateLimitStore(
    () =>
      new DynamoRateLimitStore({
        client: environmentDynamoClient(endpoint),
        tableName,
        jobId,
      }),
  );
}

/** A variable the job-wide rate needs, or a ConfigurationError naming it and the way out. */
function jobScopeVariable(env: Env, name: string): string {
  const value = env[name];
  if (value) return value;
  throw new ConfigurationError(
    name,
    `${name} is not set, and the job-wide send rate (${RuntimeEnv.sendRateScope}=job) keeps its timeline in the ` +
      `job's claims backend; deploy through the ScheduledJob construct, which sets it, or set ` +
      `${RuntimeEnv.sendRateScope}=process to limit each process on its own`,
  );
}
