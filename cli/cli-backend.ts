import { DynamoDBServiceException, ResourceNotFoundException } from '@aws-sdk/client-dynamodb';
import { createDynamoClient, dynamoBackend } from '../shared/backends/dynamodb/dynamodb-backend.js';
import { DynamoOperatorStore } from '../shared/backends/dynamodb/dynamodb-operator-store.js';
import type { EffectKeyHasher } from '../shared/effects/effect-key.js';
import { SlotguardError, StoreError } from '../shared/errors.js';
import type { SlotBackend } from '../shared/job/run-slot.js';
import { RuntimeEnv } from '../shared/job/runtime-env.js';
import type { OperatorStore } from '../shared/slot/operator-ports.js';
import { CliError, ExitCode, usageError } from './cli-support.js';
import { loadPostgres } from './postgres-module.js';

/**
 * The claims table `--endpoint` reads when `--table` is not given: the one the local runner creates
 * (local/local-backend.ts LOCAL_TABLE_NAME).
 */
export const DEFAULT_TABLE_NAME = 'slotguard-claims';

/** The backend options every slot command takes. */
export interface BackendOptions {
  readonly endpoint?: string;
  readonly table?: string;
  readonly region?: string;
  readonly backend?: string;
  readonly schema?: string;
}

/** The backend a command works on, and where it is. */
export interface CliBackend {
  /** One line: where the slots are read from. */
  readonly description: string;
  /**
   * The slot records and effect ledger. Its hasher refuses: the operator reads and repairs effects
   * by the hashes stored, and a window run in this process (LocalRuns) hashes with its own secret.
   */
  readonly slots: SlotBackend;
  /** The operator port: every backend the CLI opens has one; undefined is refused by the commands. */
  readonly operator: OperatorStore | undefined;
  /**
   * True for a local backend (the state directory, an --endpoint): jobs may run in this process.
   * False for AWS: backfill must invoke the deployed function.
   */
  readonly local: boolean;
  /** The mail server of a running `npm start -- serve`, for a window run in this process. @default none */
  readonly serveSmtp?: { readonly host: string; readonly port: number };
  close(): Promise<void>;
}

/**
 * Chooses the backend, in this order:
 * 1. `--backend postgres`: the server in DATABASE_URL, schema `--schema` (default slotguard).
 * 2. `--endpoint URL` (or DYNAMODB_ENDPOINT): a DynamoDB API there (dynalite, or any DynamoDB-compatible endpoint),
 *    table `--table` (default slotguard-claims).
 * 3. `--table NAME` alone: that table in AWS (`--region`, else AWS_REGION), default credentials.
 * 4. Otherwise `fallback` (the local runner's state, in slotguard's repository: LocalRuns), else a
 *    usage error naming the options.
 */
export async function openCliBackend(
  options: BackendOptions,
  env: Readonly<Record<string, string | undefined>>,
  fallback?: () => Promise<CliBackend>,
): Promise<CliBackend> {
  const kind = options.backend ?? 'dynamodb';
  if (kind !== 'dynamodb' && kind !== 'postgres') {
    throw usageError(`--backend is ${JSON.stringify(kind)}; use dynamodb (default) or postgres`);
  }
  if (kind === 'postgres') return openPostgres(options, env);
  const endpoint = options.endpoint ?? env[RuntimeEnv.dynamodbEndpoint];
  if (endpoint || options.table) {
    const tableName = options.table ?? DEFAULT_TABLE_NAME;
    // Three attempts, not the runtime's eight: an operator waiting on a dead endpoint wants to know.
    const client = createDynamoClient({
      ...(endpoint ? { endpoint } : {}),
      ...(options.region ? { region: options.region } : {}),
      maxAttempts: 3,
    });
    return {
      description: endpoint
        ? `DynamoDB at ${endpoint}, table ${tableName}`
        : `DynamoDB table ${tableName} in ${options.region ?? env.AWS_REGION ?? 'us-east-1'}`,
      slots: dynamoBackend({ client, tableName, hashKey: hashesNoEffectKeys }),
      operator: new DynamoOperatorStore({ client, tableName }),
      local: endpoint !== undefined,
      async close() {
        client.destroy();
      },
    };
  }
  if (fallback) return fallback();
  throw usageError(
    'name the claims backend: --table NAME (your ClaimsTable in AWS; --region, else AWS_REGION), ' +
      '--endpoint URL [--table NAME] (any DynamoDB API, e.g. DynamoDB Local), or --backend postgres (DATABASE_URL)',
  );
}

/**
 * Postgres in DATABASE_URL, on the database's lease clock as the runtime: the operator's `now` is
 * not what decides whether a run's lease is live. One small pool, named so that a DBA can tell the
 * operator's session from the runs' in pg_stat_activity. Runs no DDL: `slotguard postgres migrate`
 * does that.
 */
async function openPostgres(
  options: BackendOptions,
  env: Readonly<Record<string, string | undefined>>,
): Promise<CliBackend> {
  const databaseUrl = env.DATABASE_URL;
  if (!databaseUrl)
    throw usageError('--backend postgres reads the server from DATABASE_URL, which is not set; set it');
  const postgres = await loadPostgres('--backend postgres');
  const schema = options.schema ?? postgres.DEFAULT_SCHEMA;
  const pool = postgres.createPostgresPool({
    connectionString: databaseUrl,
    applicationName: 'slotguard-operator',
    max: 2,
  });
  return {
    description: `PostgreSQL at ${redact(databaseUrl)}, schema ${schema}`,
    slots: postgres.postgresBackend({ pool, schema, hashKey: hashesNoEffectKeys }),
    operator: new postgres.PostgresOperatorStore({ pool, schema }),
    local: true,
    async close() {
      await pool.end().catch(() => {});
    },
  };
}

/** A connection string without its password, for output. */
function redact(url: string): string {
  return url.replace(/\/\/([^:/@]+):[^@]*@/, '//$1:***@');
}

/**
 * The hasher of the operator's backends: every command reads and repairs effects by the hashes the
 * runs stored, so a key hashed here would be a bug, and the CLI needs no effect-key secret.
 */
const hashesNoEffectKeys: EffectKeyHasher = () => {
  throw new SlotguardError(
    'the operator CLI reads and repairs effects by their stored hashes and has no effect-key secret; an effect key was hashed, which is a bug',
  );
};

/**
 * Reads one slot record nobody has (1970's) to find out whether the backend answers at all, before
 * a command reads or writes anything: a failure here is exit code 3 with what to check, not a
 * half-done operation.
 */
export async function probeBackend(backend: CliBackend, jobId: string): Promise<void> {
  try {
    await backend.slots.claims.read({ jobId, window: '1970-01-01T00:00:00Z' });
  } catch (error) {
    const cause = error instanceof StoreError && error.cause ? error.cause : error;
    const detail = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
    const hint =
      cause instanceof ResourceNotFoundException
        ? 'the table does not exist: check --table and --region'
        : cause instanceof DynamoDBServiceException
          ? 'check the credentials (AWS_PROFILE, the role), --region and --table'
          : 'check that it is running and the endpoint, or the credentials and --region';
    throw new CliError(ExitCode.Unreachable, `${backend.description} did not answer (${detail}); ${hint}`, {
      cause: error,
    });
  }
}
