import { readFile } from 'node:fs/promises';
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
import type { Claim, LeaseRequest } from '../../shared/slot/ports.js';
import { type Slot, windowOf } from '../../shared/slot/slot.js';
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
   * Moves a slot's (or a shard's) lease end `ms` into the past: what the database clock passing the lease end looks
   * like to every statement, since each compares lease_until with the database clock. The database
   * clock itself cannot be moved, and a clock offset in the store would be a test switch in
   * production code; ageing the row is the one thing a test changes.
   */
  ageLease(schema: string, slot: Slot, ms: number): Promise<void>;
  /** Runs one statement as the superuser (inspection in tests). */
  sql<R extends Record<string, unknown>>(text: string, values?: unknown[]): Promise<R[]>;
  /**
   * Resolves with the sessions of `applicationName` once one of them matches `until`; a bounded
   * poll of pg_stat_activity, no sleep.
   */
  untilSession(applicationName: string, until: (session: ServerSession) => boolean): Promise<ServerSession>;
  /** Resolves once none of `pids` is a server process any more (each has ended its session). */
  untilGone(pids: readonly number[]): Promise<void>;
  /**
   * Stops server processes with SIGSTOP: what a frozen server is from outside. The kernel keeps
   * their connections open and buffers what clients send; nothing is read or answered until
   * `thaw`. Only for a server this helper started (`usePostgres({ embedded: true })`). `close` and
   * `thawAll` thaw whatever a test left frozen.
   */
  freeze(pids: readonly number[]): Promise<FrozenProcesses>;
  /**
   * Freezes the whole server: the postmaster (new connections are accepted by the kernel and never
   * answered) and every server process it has started, client sessions included.
   */
  freezeServer(): Promise<FrozenProcesses>;
  /** Thaws every process still frozen: for an afterEach, whatever a test did. */
  thawAll(): void;
  close(): Promise<void>;
}

/** A session as pg_stat_activity shows it. */
export interface ServerSession {
  readonly pid: number;
  readonly state: string | null;
  readonly wait_event_type: string | null;
}

/** Server processes stopped by `freeze`. */
export interface FrozenProcesses {
  readonly pids: readonly number[];
  /** SIGCONT: each process carries on where it stopped, reading what arrived meanwhile. */
  thaw(): void;
}

/** Options of startPostgres and usePostgres. */
export interface PostgresServerOptions {
  /**
   * Start an embedded server even when DATABASE_URL names one: a test that freezes server
   * processes needs them on this machine, under this user.
   * @default false
   */
  readonly embedded?: boolean;
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
export async function startPostgres(options: PostgresServerOptions = {}): Promise<PostgresServer> {
  const external = options.embedded ? undefined : process.env.DATABASE_URL;
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

  const frozen = new Set<number>();
  const thaw = (pids: readonly number[]) => {
    for (const pid of pids) {
      if (!frozen.delete(pid)) continue;
      try {
        process.kill(pid, 'SIGCONT');
      } catch {
        // Already gone: nothing to thaw.
      }
    }
  };
  const thawAll = () => thaw([...frozen]);
  const freeze = async (pids: readonly number[]): Promise<FrozenProcesses> => {
    if (external) throw new Error('freezing needs a server on this machine: usePostgres({ embedded: true })');
    for (const pid of pids) {
      if (!Number.isSafeInteger(pid) || pid <= 0) throw new Error(`not a server process id: ${pid}`);
      frozen.add(pid);
      process.kill(pid, 'SIGSTOP');
    }
    await Promise.all(pids.map(untilStopped));
    return { pids, thaw: () => thaw(pids) };
  };

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
      // A shard's lease is on its own row, in shard_slots.
      const [table, shard] =
        slot.shard === undefined ? ['slots', ''] : ['shard_slots', ' AND shard = $4::integer'];
      await sql(
        `UPDATE ${escapeIdentifier(schema)}.${table} SET lease_until = lease_until - $3::double precision * interval '1 millisecond'
         WHERE job_id = $1 AND slot_window = $2${shard}`,
        [slot.jobId, slot.window, ms, ...(slot.shard === undefined ? [] : [slot.shard])],
      );
    },
    sql,
    async untilSession(applicationName, until) {
      for (let i = 0; i < 5_000; i++) {
        const sessions = await sql<ServerSession & Record<string, unknown>>(
          'SELECT pid, state, wait_event_type FROM pg_stat_activity WHERE application_name = $1',
          [applicationName],
        );
        const found = sessions.find(until);
        if (found) return found;
        await new Promise((resolve) => setImmediate(resolve));
      }
      throw new Error(`no session of ${applicationName} reached the state the test waits for`);
    },
    async untilGone(pids) {
      for (let i = 0; i < 5_000; i++) {
        const [row] = await sql<{ n: number }>(
          'SELECT count(*)::integer AS n FROM pg_stat_activity WHERE pid = ANY($1::integer[])',
          [pids],
        );
        if (row?.n === 0) return;
        await new Promise((resolve) => setImmediate(resolve));
      }
      throw new Error(`server processes ${pids.join(', ')} did not end`);
    },
    freeze: (pids) => freeze(pids),
    async freezeServer() {
      const [file] = await sql<{ text: string }>("SELECT pg_read_file('postmaster.pid') AS text");
      const postmaster = Number(file?.text.split('\n')[0]);
      const processes = await sql<{ pid: number }>('SELECT pid FROM pg_stat_activity');
      return freeze([postmaster, ...processes.map((p) => p.pid)]);
    },
    thawAll,
    async close() {
      thawAll();
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
export function usePostgres(options: PostgresServerOptions = {}): PostgresServer {
  let current: PostgresServer | undefined;
  beforeAll(async () => {
    current = await startPostgres(options);
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
    untilSession: (applicationName, until) => started().untilSession(applicationName, until),
    untilGone: (pids) => started().untilGone(pids),
    freeze: (pids) => started().freeze(pids),
    freezeServer: () => started().freezeServer(),
    thawAll: () => current?.thawAll(),
    close: () => started().close(),
  };
}

/**
 * Resolves once `pid` is stopped, where the OS says so (/proc on Linux): SIGSTOP is delivered
 * asynchronously, and a test that sends a request right after freezing must not be answered.
 */
export async function untilStopped(pid: number): Promise<void> {
  for (let i = 0; i < 5_000; i++) {
    let stat: string;
    try {
      stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    } catch {
      return; // no /proc (not Linux), or the process is gone
    }
    // "pid (comm) S …": the state follows the last ')', since comm may contain spaces and parentheses.
    if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('T')) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error(`process ${pid} did not stop`);
}

/**
 * Counts the connections handed back to a pool with an error: the pool destroys each of those
 * instead of keeping it (pg-pool's 'release' event carries the error). Counted when the pool is
 * told, not when the socket's close event comes later.
 */
export function countDestroyedConnections(pool: Pool): { readonly count: number } {
  const counter = { count: 0 };
  pool.on('release', (error: Error | undefined) => {
    if (error) counter.count++;
  });
  return counter;
}

/**
 * A lease request for `owner`: a 60 s lease, 3 attempts, the records kept 35 days past the slot's
 * window, and the window due 6 hours after it (the runtime's default deadline), unless overridden.
 */
export function leaseRequest(owner: string, slot: Slot, overrides: Partial<LeaseRequest> = {}): LeaseRequest {
  const windowMs = Date.parse(slot.window);
  return {
    owner,
    leaseMs: 60_000,
    maxAttempts: 3,
    expiresAtSeconds: Math.ceil(windowMs / 1000) + 35 * 86_400,
    deadline: windowMs + 6 * 3_600_000,
    delivery: { invocationId: owner },
    ...overrides,
  };
}

/**
 * A source of slots whose windows no earlier call gave: a minute apart from `from`, spelled as
 * slots are (`…:00Z`). One per test file keeps its tests apart even on a shared schema.
 */
export function slotSequence(defaultJobId: string, from = '2026-11-30T06:00:00Z'): (jobId?: string) => Slot {
  let n = 0;
  return (jobId = defaultJobId) => ({ jobId, window: windowOf(Date.parse(from) + ++n * 60_000) });
}

/** Claims `slot` for `owner`, or throws naming what the claim came to instead. */
export async function claimOrFail(backend: PostgresBackend, slot: Slot, owner: string): Promise<Claim> {
  const outcome = await backend.claims.claim(slot, leaseRequest(owner, slot), Date.now());
  if (outcome.kind !== 'claimed')
    throw new Error(`expected ${owner} to claim, got ${JSON.stringify(outcome)}`);
  return outcome.claim;
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
