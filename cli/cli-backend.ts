import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { DynamoDBServiceException, ResourceNotFoundException } from '@aws-sdk/client-dynamodb';
import { StateDirectoryLockedError } from '../local/embedded-dynamo.js';
import { LOCAL_EFFECT_KEY_SECRET, LOCAL_TABLE_NAME, openLocalBackend } from '../local/local-backend.js';
import {
  DYNAMODB_STATE_DIR,
  isAlive,
  readServeState,
  SERVE_STATE_FILE,
  type ServeState,
} from '../local/serve.js';
import { createDynamoClient, dynamoBackend } from '../shared/backends/dynamodb/dynamodb-backend.js';
import { DynamoOperatorStore } from '../shared/backends/dynamodb/dynamodb-operator-store.js';
import { hmacEffectKeys } from '../shared/effects/effect-key.js';
import { StoreError } from '../shared/errors.js';
import type { SlotBackend } from '../shared/job/run-slot.js';
import { RuntimeEnv } from '../shared/job/runtime-env.js';
import type { OperatorStore } from '../shared/slot/operator-ports.js';
import { CliError, ExitCode, usageError } from './cli-support.js';

/** The backend options every slot command takes. */
export interface BackendOptions {
  readonly stateDir?: string;
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
  readonly slots: SlotBackend;
  /** The operator port: every backend the CLI opens has one; undefined is refused by the commands. */
  readonly operator: OperatorStore | undefined;
  /**
   * True for a local backend (the state directory, an --endpoint): jobs may run in this process.
   * False for AWS: backfill must invoke the deployed function.
   */
  readonly local: boolean;
  /** The mail server of a running `npm start -- serve`, for a local backfill. */
  readonly serveSmtp?: { readonly host: string; readonly port: number };
  close(): Promise<void>;
}

/**
 * Chooses the backend, in this order:
 * 1. `--backend postgres`: the server in DATABASE_URL, schema `--schema` (default slotguard).
 * 2. `--endpoint URL` (or DYNAMODB_ENDPOINT): a DynamoDB API there (dynalite, or any DynamoDB-compatible endpoint),
 *    table `--table` (default slotguard-claims).
 * 3. `--table NAME` alone: that table in AWS (`--region`, else AWS_REGION), default credentials.
 * 4. Otherwise the local state directory (`--state-dir`, default .slotguard): the endpoint of a
 *    running `npm start -- serve` (from its serve.json), else the tables it keeps there.
 */
export async function openCliBackend(
  options: BackendOptions,
  env: Readonly<Record<string, string | undefined>>,
): Promise<CliBackend> {
  const secret = env[RuntimeEnv.effectKeySecret] ?? LOCAL_EFFECT_KEY_SECRET;
  const kind = options.backend ?? 'dynamodb';
  if (kind !== 'dynamodb' && kind !== 'postgres') {
    throw usageError(`--backend is ${JSON.stringify(kind)}; use dynamodb (default) or postgres`);
  }
  if (kind === 'postgres') {
    const databaseUrl = env.DATABASE_URL;
    if (!databaseUrl)
      throw usageError('--backend postgres reads the server from DATABASE_URL, which is not set; set it');
    const local = await openLocalBackend({
      kind: 'postgres',
      databaseUrl,
      secret,
      migrate: false,
      ...(options.schema ? { schema: options.schema } : {}),
    });
    // Loaded only here, as openLocalBackend does, so the DynamoDB commands never load `pg`. The
    // operator's writes get their own one-connection pool, named so that a DBA can tell them apart
    // from the runs' sessions in pg_stat_activity. The lease clock is the database's, as the
    // runtime's: the operator's `now` is not what decides whether a run's lease is live.
    const postgres = await import('../shared/backends/postgres/index.js');
    const pool = postgres.createPostgresPool({
      connectionString: databaseUrl,
      applicationName: 'slotguard-operator',
      max: 1,
    });
    return {
      description: local.description,
      slots: local.backend,
      operator: new postgres.PostgresOperatorStore({
        pool,
        schema: options.schema ?? postgres.DEFAULT_SCHEMA,
      }),
      local: true,
      async close() {
        await pool.end().catch(() => {});
        await local.close();
      },
    };
  }
  const endpoint = options.endpoint ?? env[RuntimeEnv.dynamodbEndpoint];
  if (endpoint || options.table) {
    const tableName = options.table ?? LOCAL_TABLE_NAME;
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
      slots: dynamoBackend({ client, tableName, hashKey: hmacEffectKeys(secret) }),
      operator: new DynamoOperatorStore({ client, tableName }),
      local: endpoint !== undefined,
      async close() {
        client.destroy();
      },
    };
  }
  const stateDir = options.stateDir ?? '.slotguard';
  const serve = runningServe(stateDir);
  if (serve?.endpoint) {
    const opened = await openCliBackend(
      { ...options, endpoint: serve.endpoint, table: serve.tableName ?? LOCAL_TABLE_NAME },
      env,
    );
    return {
      ...opened,
      description: `the running serve's DynamoDB (pid ${serve.pid}) at ${serve.endpoint}`,
      serveSmtp: serve.smtp,
    };
  }
  const path = join(stateDir, DYNAMODB_STATE_DIR);
  if (!existsSync(path)) {
    throw new CliError(
      ExitCode.Unreachable,
      `there is no local state in ${path}: nothing has run here yet. Start the jobs with \`npm start -- serve\`, ` +
        'or point at a DynamoDB with --endpoint URL or --table NAME',
    );
  }
  try {
    // On its own thread: closing it then releases the LevelDB lock for the next process.
    const local = await openLocalBackend({ path, secret, thread: true });
    return {
      description: `the local state in ${path}`,
      slots: local.backend,
      operator: local.operator,
      local: true,
      close: local.close,
    };
  } catch (error) {
    if (error instanceof StateDirectoryLockedError)
      throw new CliError(ExitCode.Unreachable, error.message, { cause: error });
    throw error;
  }
}

/** serve.json, when the serve that wrote it is still running. */
function runningServe(stateDir: string): ServeState | undefined {
  const state = readServeState(join(stateDir, SERVE_STATE_FILE));
  // Stopped, or killed without cleaning up: its tables are on disk, not behind an endpoint.
  return state && !state.stoppedAt && isAlive(state.pid) ? state : undefined;
}

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
