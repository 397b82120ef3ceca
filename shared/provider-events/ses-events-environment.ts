import type { EffectKeyHasher } from '../effects/effect-key.js';
import { ConfigurationError, SlotguardError } from '../errors.js';
import {
  backendKind,
  type Env,
  type EnvironmentBackendContext,
  registeredBackend,
  requiredVariable,
} from '../job/environment-backend.js';
import { JOB_DEFAULTS } from '../job/job-spec.js';
import { dynamoBackendFromEnvironment } from '../job/lambda-environment.js';
import { BackendKind } from '../job/runtime-env.js';
import { JOB_ID_PATTERN } from '../slot/slot.js';
import { jsonLog } from '../telemetry/log.js';
import { emfMetrics } from '../telemetry/metrics.js';
import { createSesEventRecorder, type ProviderWordLedger } from './ses-event-recorder.js';
import { SesEventsEnv } from './ses-events-env.js';

/** The log name of what the recorder logs about an event that names none of its jobs. */
const RECORDER_LOG_NAME = 'ses-events';

/**
 * The SES event recorder's handler configured from its function's environment, the way the
 * watchdog's is: SLOTGUARD_BACKEND picks DynamoDB (SLOTGUARD_TABLE_NAME, DYNAMODB_ENDPOINT) or a
 * registered backend such as Postgres (its PostgresRuntimeEnv variables; the bundle must include
 * shared/job/lambda-environment-postgres.ts), and SLOTGUARD_RECORDED_JOBS lists its jobs.
 * Misconfiguration fails at cold start, naming the variable. No effect-key secret: a message's tags
 * carry its effect's key hash, which is all the write needs.
 * @example export const handler = sesEventRecorderFromEnvironment(process.env);
 */
export function sesEventRecorderFromEnvironment(env: Env = process.env) {
  return createSesEventRecorder({
    ledger: providerWordLedgerFromEnvironment(env),
    jobIds: recordedJobsOf(env),
    metrics: (jobId) => emfMetrics({ jobId }),
    log: (jobId) => jsonLog(jobId ?? RECORDER_LOG_NAME),
  });
}

/**
 * The ledger the environment names, checked now and connected on first use. Only its
 * `recordProviderWord` is used: on DynamoDB a GetItem of the record and a Query of its window's done
 * marks, then an UpdateItem conditioned on the record (and a GetItem when the condition fails and no
 * old item came back); on Postgres one UPDATE of an effect row.
 */
export function providerWordLedgerFromEnvironment(env: Env): () => Promise<ProviderWordLedger> {
  const kind = backendKind(env);
  const context: EnvironmentBackendContext = {
    jobId: RECORDER_LOG_NAME,
    // One event per invocation, one write per event: the pool's floor.
    effectConcurrency: 1,
    hashKey: async () => hashesNoEffectKeys,
  };
  const connect =
    kind === BackendKind.DynamoDB
      ? dynamoBackendFromEnvironment(env, context, JOB_DEFAULTS.retentionDays)
      : registeredBackend(kind)(env, context);
  return async () => (await connect()).ledger;
}

/** SLOTGUARD_RECORDED_JOBS as a set of job ids, each checked; a ConfigurationError naming the variable otherwise. */
function recordedJobsOf(env: Env): ReadonlySet<string> {
  const raw = requiredVariable(env, SesEventsEnv.jobIds);
  const ids = raw.split(',').map((id) => id.trim());
  const bad = ids.find((id) => !JOB_ID_PATTERN.test(id));
  if (bad !== undefined) {
    throw new ConfigurationError(
      SesEventsEnv.jobIds,
      `${SesEventsEnv.jobIds} is ${JSON.stringify(raw)}, and ${JSON.stringify(bad)} is not a job id; list the ` +
        'recorded jobs comma-separated (e.g. "weekly-report,payment-reminder"), as SesEventRecorder sets it',
    );
  }
  return new Set(ids);
}

/**
 * The hasher the recorder's backend is built with: it hashes nothing, since the key hash arrives in
 * the message's tags, and it has no effect-key secret to hash with.
 */
const hashesNoEffectKeys: EffectKeyHasher = () => {
  throw new SlotguardError(
    'the SES event recorder takes effect key hashes from message tags and has no effect-key secret; an effect ' +
      'key was hashed, which is a bug',
  );
};
