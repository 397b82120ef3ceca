import {
  createDynamoClient,
  dynamoBackend,
  ensureClaimsTable,
} from '../shared/backends/dynamodb/dynamodb-backend.js';
import { DynamoOperatorStore } from '../shared/backends/dynamodb/dynamodb-operator-store.js';
import { DynamoRateLimitStore } from '../shared/backends/dynamodb/dynamodb-rate-limit-store.js';
import { hmacEffectKeys } from '../shared/effects/effect-key.js';
import type { RateLimitStore } from '../shared/effects/rate-limit-store.js';
import { ConfigurationError } from '../shared/errors.js';
import type { SlotBackend } from '../shared/job/run-slot.js';
import { RuntimeEnv } from '../shared/job/runtime-env.js';
import type { OperatorStore } from '../shared/slot/operator-ports.js';
import { startEmbeddedDynamo } from './embedded-dynamo.js';
import { startEmbeddedPostgres } from './embedded-postgres.js';

/**
 * The effect-key secret of local runs, shared by `npm start`, `npm start -- serve` and the CLI's
 * local backfill so they hash the same recipient to the same key. Deployed functions read theirs
 * from Secrets Manager; SLOTGUARD_EFFECT_KEY_SECRET overrides this one.
 */
export const LOCAL_EFFECT_KEY_SECRET = 'slotguard-local-effect-key-secret-not-for-production';

/** The claims table local runs create. */
export const LOCAL_TABLE_NAME = 'slotguard-claims';

/** The backends a local run can use. */
export type LocalBackendKind = 'dynamodb' | 'postgres';

/** Which backend a local run opens, and where. */
export interface LocalBackendOptions {
  /** @default 'dynamodb' */
  readonly kind?: LocalBackendKind;
  /** DynamoDB: an endpoint already running; else dynalite is started in this process. */
  readonly endpoint?: string;
  /** DynamoDB: dynalite keeps its tables in this LevelDB directory. @default in memory */
  readonly path?: string;
  /** DynamoDB: dynalite on its own thread (the demo: two cores). @default false */
  readonly thread?: boolean;
  /** @default LOCAL_TABLE_NAME */
  readonly tableName?: string;
  /** Postgres: a server to use; else an embedded one is started, in a temporary directory. */
  readonly databaseUrl?: string;
  /** Postgres: @default 'slotguard' */
  readonly schema?: string;
  /** Postgres: whose clock ends leases (see PostgresBackendOptions.leaseClock). @default 'database' */
  readonly leaseClock?: 'database' | 'caller';
  /** @default SLOTGUARD_EFFECT_KEY_SECRET, else LOCAL_EFFECT_KEY_SECRET */
  readonly secret?: string;
  /**
   * Postgres: create the schema's tables if missing. The operator CLI passes false: it reads a
   * database someone else migrated, and runs no DDL.
   * @default true
   */
  readonly migrate?: boolean;
}

/** A backend for local runs, and what it takes to close it. */
export interface LocalBackend {
  readonly kind: LocalBackendKind;
  /** One line for output: `embedded DynamoDB (dynalite) at http://127.0.0.1:41523`. */
  readonly description: string;
  readonly backend: SlotBackend;
  /** The operator port; undefined where the backend has none yet (Postgres). */
  readonly operator: OperatorStore | undefined;
  /** DynamoDB: the endpoint, to share with another process (the CLI). */
  readonly endpoint?: string;
  readonly tableName?: string;
  /**
   * The send-rate timeline of job `jobId` in this backend (the DynamoDB item or Postgres row a
   * deployed function uses), for a SharedRateLimiter: give every worker of the job its own limiter
   * on a store from here, and together they keep to one rate.
   * @example rateLimitedSender(smtp, new SharedRateLimiter({ store: backend.sendRateStore(jobId), ratePerSecond: 50 }))
   */
  sendRateStore(jobId: string): RateLimitStore;
  close(): Promise<void>;
}

/**
 * Opens the backend a local run uses: dynalite (in memory, in a LevelDB directory, or an endpoint
 * given), or Postgres (DATABASE_URL, or an embedded server started for the run).
 */
export async function openLocalBackend(options: LocalBackendOptions = {}): Promise<LocalBackend> {
  const secret = options.secret ?? process.env[RuntimeEnv.effectKeySecret] ?? LOCAL_EFFECT_KEY_SECRET;
  const hashKey = hmacEffectKeys(secret);
  if ((options.kind ?? 'dynamodb') === 'postgres') return openPostgres(options, hashKey);
  const tableName = options.tableName ?? LOCAL_TABLE_NAME;
  const embedded = options.endpoint
    ? undefined
    : await startEmbeddedDynamo({
        ...(options.thread ? { thread: true } : {}),
        ...(options.path ? { path: options.path } : {}),
      });
  const endpoint = options.endpoint ?? embedded!.endpoint;
  const client = createDynamoClient({ endpoint, region: 'us-east-1' });
  try {
    await ensureClaimsTable(client, tableName);
  } catch (error) {
    client.destroy();
    await embedded?.close();
    throw error;
  }
  return {
    kind: 'dynamodb',
    description: embedded
      ? `embedded DynamoDB (dynalite${options.path ? `, tables kept in ${options.path}` : ', in memory'}) at ${endpoint}`
      : `DynamoDB at ${endpoint}, table ${tableName}`,
    backend: dynamoBackend({ client, tableName, hashKey }),
    operator: new DynamoOperatorStore({ client, tableName }),
    endpoint,
    tableName,
    sendRateStore: (jobId) => new DynamoRateLimitStore({ client, tableName, jobId }),
    async close() {
      client.destroy();
      await embedded?.close();
    },
  };
}

async function openPostgres(
  options: LocalBackendOptions,
  hashKey: SlotBackend['hashKey'],
): Promise<LocalBackend> {
  let postgres: typeof import('../shared/backends/postgres/index.js');
  try {
    postgres = await import('../shared/backends/postgres/index.js');
  } catch (cause) {
    throw new ConfigurationError(
      'backend',
      'the Postgres backend is not available yet (shared/backends/postgres/index.js could not be loaded); use --backend dynamodb',
      { cause },
    );
  }
  const schema = options.schema ?? postgres.DEFAULT_SCHEMA;
  const server = options.databaseUrl
    ? undefined
    : await startEmbeddedPostgres({ prefix: 'slotguard-local-pg-', settings: { max_connections: '200' } });
  const connectionString = options.databaseUrl ?? server!.connectionString;
  const pool = postgres.createPostgresPool({ connectionString, applicationName: 'slotguard-local', max: 40 });
  try {
    if (options.migrate !== false) await postgres.migrate(pool, { schema });
  } catch (error) {
    await pool.end().catch(() => {});
    await server?.stop();
    throw error;
  }
  const where = server ? 'embedded PostgreSQL' : `PostgreSQL at ${redact(connectionString)}`;
  const leaseClock = options.leaseClock ? { leaseClock: options.leaseClock } : {};
  return {
    kind: 'postgres',
    description: `${where}, schema ${schema}`,
    backend: postgres.postgresBackend({ pool, schema, hashKey, ...leaseClock }),
    // On the runs' lease clock, so a lease the runs see live is live to the operator too.
    operator: new postgres.PostgresOperatorStore({ pool, schema, ...leaseClock }),
    sendRateStore: (jobId) =>
      new postgres.PostgresRateLimitStore({
        pool,
        schema,
        jobId,
        ...(options.leaseClock ? { clock: options.leaseClock } : {}),
      }),
    async close() {
      await pool.end().catch(() => {});
      await server?.stop();
    },
  };
}

/** A connection string without its password, for output. */
function redact(url: string): string {
  return url.replace(/\/\/([^:/@]+):[^@]*@/, '//$1:***@');
}
