import { environmentDynamoClient } from '../backends/dynamodb/dynamodb-backend.js';
import { DynamoClaimStore } from '../backends/dynamodb/dynamodb-claim-store.js';
import { DynamoEffectLedger } from '../backends/dynamodb/dynamodb-effect-ledger.js';
import { DynamoOperatorStore } from '../backends/dynamodb/dynamodb-operator-store.js';
import type { EffectKeyHasher } from '../effects/effect-key.js';
import { SlotguardError } from '../errors.js';
import { backendKind, type Env, registeredBackend, requiredVariable } from '../job/environment-backend.js';
import { BackendKind, RuntimeEnv } from '../job/runtime-env.js';
import type { InDoubtResolverStores } from '../operator/in-doubt-resolver.js';
import { jsonLog } from '../telemetry/log.js';
import { emfMetrics } from '../telemetry/metrics.js';
import { createWatchdogHandler, type SlotReader } from './watchdog-lambda.js';

/**
 * The watchdog's handler configured from its function's environment, the way jobHandlerFromEnvironment
 * configures a job's: SLOTGUARD_BACKEND picks DynamoDB (SLOTGUARD_TABLE_NAME, DYNAMODB_ENDPOINT) or a
 * registered backend such as Postgres (its PostgresRuntimeEnv variables; the bundle must include
 * shared/job/lambda-environment-postgres.ts). Misconfiguration fails at cold start, naming the
 * variable. No effect-key secret: the watchdog reads slot records only.
 * @example export const handler = watchdogHandlerFromEnvironment(process.env);
 */
export function watchdogHandlerFromEnvironment(env: Env = process.env) {
  const inDoubt = watchdogInDoubtStoresFromEnvironment(env);
  return createWatchdogHandler({
    claims: watchdogClaimsFromEnvironment(env),
    ...(inDoubt ? { inDoubt } : {}),
    metrics: (jobId) => emfMetrics({ jobId }),
    log: (jobId) => jsonLog(jobId),
  });
}

/**
 * What confirming in-doubt effects uses (a watchdog event's `confirmInDoubt`), on the backend the
 * environment names, connected on first use: on DynamoDB, the job's slot records, effect ledger and
 * operator writes on the same table (dynamodb:GetItem, Query and UpdateItem on the job's items, which
 * the function is granted only for the jobs whose events ask). Undefined for the other backends,
 * whose environment builds no operator store yet.
 */
export function watchdogInDoubtStoresFromEnvironment(
  env: Env,
): (() => Promise<InDoubtResolverStores>) | undefined {
  if (backendKind(env) !== BackendKind.DynamoDB) return undefined;
  const tableName = requiredVariable(env, RuntimeEnv.tableName);
  const endpoint = env[RuntimeEnv.dynamodbEndpoint];
  return async () => {
    const options = { client: environmentDynamoClient(endpoint), tableName };
    return {
      claims: new DynamoClaimStore(options),
      // It reserves nothing, so it writes no record's expiry.
      ledger: new DynamoEffectLedger({ ...options, expiresAtSeconds: () => 0 }),
      operator: new DynamoOperatorStore(options),
    };
  };
}

/**
 * The claim store the environment names, checked now and connected on first use. Only its `read`
 * is used, which is why the function needs nothing but read access to the slot items
 * (dynamodb:GetItem, or SELECT on the slots table).
 */
export function watchdogClaimsFromEnvironment(env: Env): () => Promise<SlotReader> {
  const kind = backendKind(env);
  if (kind === BackendKind.DynamoDB) {
    const tableName = requiredVariable(env, RuntimeEnv.tableName);
    const endpoint = env[RuntimeEnv.dynamodbEndpoint];
    return async () => new DynamoClaimStore({ client: environmentDynamoClient(endpoint), tableName });
  }
  const connect = registeredBackend(kind)(env, {
    jobId: 'watchdog',
    // One audit reads eight slots at a time through one or two connections: the pool's floor.
    effectConcurrency: 1,
    hashKey: async () => hashesNoEffectKeys,
  });
  return async () => (await connect()).claims;
}

/**
 * The hasher a registered backend is built with for the watchdog, which has no effect-key secret
 * and hashes nothing: reading slot records needs no effect key.
 */
const hashesNoEffectKeys: EffectKeyHasher = () => {
  throw new SlotguardError(
    'the watchdog reads slot records only and has no effect-key secret; an effect key was hashed, which is a bug',
  );
};
