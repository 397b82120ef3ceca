/**
 * slotguard's Postgres backend, behind its own import path so that a DynamoDB-only function never
 * bundles `pg`: import it from `shared/backends/postgres/index.js`, and nothing else under
 * `shared/` imports this directory. See docs/postgres.md.
 */
export {
  type MigrateOptions,
  type MigrateResult,
  migrate,
  migrationScript,
  type PurgeOptions,
  type PurgeResult,
  purgeExpired,
} from './migrate.js';
export {
  type PostgresSecret,
  type RdsIamAuthOptions,
  rdsIamPassword,
  readPostgresSecret,
  type SecretsManagerPasswordOptions,
  secretsManagerPassword,
} from './postgres-auth.js';
export {
  createPostgresPool,
  DEFAULT_SCHEMA,
  type PostgresBackend,
  type PostgresBackendOptions,
  type PostgresPoolOptions,
  postgresBackend,
} from './postgres-backend.js';
export { type LeaseClock, PostgresClaimStore, type PostgresSlotRecord } from './postgres-claim-store.js';
export { PostgresEffectLedger } from './postgres-effect-ledger.js';
export { PostgresDeadlineError } from './postgres-errors.js';
export { type AwaitedReply, DEFAULT_TIMEOUTS, type PostgresTimeouts } from './postgres-executor.js';
export { advisoryLockKey, MAX_KEY_HASH_LENGTH } from './postgres-keys.js';
export { PostgresOperatorStore, type PostgresOperatorStoreOptions } from './postgres-operator-store.js';
export { PostgresRateLimitStore, type PostgresRateLimitStoreOptions } from './postgres-rate-limit-store.js';
export { assertSchemaName, SCHEMA_NAME_PATTERN, SCHEMA_VERSION } from './sql.js';
