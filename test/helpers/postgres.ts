import { escapeIdentifier, type Pool, type PoolClient } from 'pg';
import { afterAll, beforeAll } from 'vitest';
import { startEmbeddedPostgres } from '../../local/embedded-postgres.js';
import {
  createPostgresPool,
  migrate,
  type PostgresBackend,
  type PostgresBackendOptions,
  type PostgresPoolOptions,
  postgresBackend,
} from '../../shared/backends/postgres/index.js';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import type { Slot } from '../../shared/slot/slot.js';
import { TEST_SECRET } from './harness.js';

/** A Postgres server for one test file: pools on it, a fresh schema per test, and fault injection. */
export interface PostgresServer {
  readonly connectionString: string;
  /** A pool with slotguard's settings (closed by `close`). Name it to find its sessions later. */
  pool(options?: PostgresPoolOptions): Pool;
  /** A new, migrated schema no other test uses. */
  freshSchema(prefix?: string): Promise<string>;
  /** A schema name no test has used, not created (dropped at close when the server is shared). */
  uniqueSchemaName(prefix?: string): string;
  /** The backend on `schema`, on its own pool unless one is given. */
  backend(schema: string, options?: Partial<PostgresBackendOptions> & { pool?: Pool }): PostgresBackend;
  /** Ends every session whose application_name is `applicationName` (pg_terminate_backend); returns how many. */
  terminate(applicationName: string): Promise<number>;
  /**
   * Moves a slot's lease end `ms` into the past: what the database clock passing the lease end looks
   * like to every statement, since each compares lease_until with the database clock. The database
   * clock itself cannot be moved, and a clock offset in the store would be a test switch in
   * production code; ageing the row is the one thing a test changes.
   */
  ageLease(schema: string, slot: Slot, ms: number): Promise<void>;
  /** Runs one statement as the superuser (inspection in tests). */
  sql<R extends Record<string, unknown>>(text: string, values?: unknown[]): Promise<R[]>;
  close(): Promise<void>;
}

let schemas = 0;
/** Distinguishes this run's schemas from an earlier run's on a shared DATABASE_URL server. */
const RUN = Math.random().toString(36).slice(2, 8);

/**
 * Starts a PostgreSQL server for one test file with embedded-postgres: a data directory under
 * os.tmpdir(), a free loopback port, fsync off (a test server, thrown away). As root, Postgres
 * refuses to run, so embedded-postgres creates and uses a `postgres` system user. DATABASE_URL
 * points the same tests at another server instead (each test still gets its own schema).
 */
export async function startPostgres(): Promise<PostgresServer> {
  const external = process.env.DATABASE_URL;
  let stop = async () => {};
  let connectionString = external ?? '';
  if (!external) {
    // A test file opens many pools (one per backend under test); the default 100 connections can run out.
    const server = await startEmbeddedPostgres({ settings: { max_connections: '300' } });
    connectionString = server.connectionString;
    stop = () => server.stop();
  }

  const pools: Pool[] = [];
  const pool = (options: PostgresPoolOptions = {}) => {
    const p = createPostgresPool({ connectionString, ...options });
    pools.push(p);
    return p;
  };
  const admin = pool({ applicationName: 'slotguard-test-admin', max: 2 });
  const sql = async <R extends Record<string, unknown>>(text: string, values: unknown[] = []) =>
    (await admin.query<R>(text, values)).rows;

  const created: string[] = [];
  const uniqueSchemaName = (prefix = 'sg') => {
    const schema = `${prefix}_${RUN}_${process.pid}_${++schemas}`;
    created.push(schema);
    return schema;
  };

  return {
    connectionString,
    pool,
    uniqueSchemaName,
    async freshSchema(prefix = 'sg') {
      const schema = uniqueSchemaName(prefix);
      await migrate(admin, { schema });
      return schema;
    },
    backend(schema, options = {}) {
      return postgresBackend({
        hashKey: hmacEffectKeys(TEST_SECRET),
        ...options,
        pool: options.pool ?? pool({ applicationName: `slotguard-test-${schema}` }),
        schema,
      });
    },
    async terminate(applicationName) {
      const rows = await sql<{ ended: boolean }>(
        `SELECT pg_terminate_backend(pid) AS ended FROM pg_stat_activity
         WHERE application_name = $1 AND pid <> pg_backend_pid()`,
        [applicationName],
      );
      return rows.filter((r) => r.ended).length;
    },
    async ageLease(schema, slot, ms) {
      await sql(
        `UPDATE ${escapeIdentifier(schema)}.slots SET lease_until = lease_until - $3::double precision * interval '1 millisecond'
         WHERE job_id = $1 AND slot_window = $2`,
        [slot.jobId, slot.window, ms],
      );
    },
    sql,
    async close() {
      if (external) {
        for (const schema of created) await sql(`DROP SCHEMA IF EXISTS ${escapeIdentifier(schema)} CASCADE`);
      }
      await Promise.all(pools.map((p) => p.end().catch(() => {})));
      await stop();
    },
  };
}

/**
 * Starts one Postgres server for the calling test file (beforeAll) and stops it after (afterAll).
 * The returned object forwards to it, so tests call `postgres.freshSchema()` and the rest.
 */
export function usePostgres(): PostgresServer {
  let current: PostgresServer | undefined;
  beforeAll(async () => {
    current = await startPostgres();
  });
  afterAll(() => current?.close());
  const started = () => {
    if (!current) throw new Error('usePostgres(): the server starts in beforeAll; use it inside a test');
    return current;
  };
  return {
    get connectionString() {
      return started().connectionString;
    },
    pool: (options) => started().pool(options),
    freshSchema: (prefix) => started().freshSchema(prefix),
    uniqueSchemaName: (prefix) => started().uniqueSchemaName(prefix),
    backend: (schema, options) => started().backend(schema, options),
    terminate: (applicationName) => started().terminate(applicationName),
    ageLease: (schema, slot, ms) => started().ageLease(schema, slot, ms),
    sql: (text, values) => started().sql(text, values),
    close: () => started().close(),
  };
}

/** What a lossy pool did. */
export interface LostReplies {
  /** Transactions that committed and whose COMMIT reply was then lost. */
  lost: number;
  commits: number;
}

/**
 * A pool whose connections lose the reply to some COMMITs: the transaction commits on the server,
 * then the client sees its connection drop, as after a network failure at the worst moment. The
 * backend's retry then repeats an operation that already took effect, which it must recognise as
 * its own. `lose(n)` decides for the n-th COMMIT (from 1). For a backend with timeouts scope
 * 'transaction', where every operation ends in a COMMIT.
 */
export function losingReplies(pool: Pool, lose: (n: number) => boolean): { pool: Pool; counts: LostReplies } {
  const counts: LostReplies = { lost: 0, commits: 0 };
  const wrap = (client: PoolClient): PoolClient =>
    new Proxy(client, {
      get(target, property, receiver) {
        if (property !== 'query') return Reflect.get(target, property, receiver);
        return async (text: unknown, values?: unknown) => {
          const result = await target.query(text as string, values as unknown[]);
          if (text === 'COMMIT' && lose(++counts.commits)) {
            counts.lost++;
            throw new Error('Connection terminated unexpectedly');
          }
          return result;
        };
      },
    });
  const lossy = new Proxy(pool, {
    get(target, property, receiver) {
      if (property === 'connect') return async () => wrap(await target.connect());
      return Reflect.get(target, property, receiver);
    },
  });
  return { pool: lossy, counts };
}
