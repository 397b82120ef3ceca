import type { ConnectionOptions } from 'node:tls';
import pg, { type Pool } from 'pg';
import type { EffectKeyHasher } from '../../effects/effect-key.js';
import { ConfigurationError } from '../../errors.js';
import type { SlotBackend } from '../../job/run-slot.js';
import { assertLeaseClock, type LeaseClock, PostgresClaimStore } from './postgres-claim-store.js';
import { PostgresEffectLedger } from './postgres-effect-ledger.js';
import { PostgresExecutor, type PostgresTimeouts, resolveTimeouts } from './postgres-executor.js';
import { DEFAULT_SCHEMA } from './postgres-settings.js';
import { assertSchemaName, sqlFor } from './sql.js';

export { DEFAULT_SCHEMA };

/** Options of postgresBackend. */
export interface PostgresBackendOptions {
  /**
   * The pool statements run on: createPostgresPool's, or your own. Give your own a
   * `connectionTimeoutMillis`: the deadline ends a call that waits for a connection, but only the
   * pool can end the connection attempt itself.
   */
  readonly pool: Pool;
  /**
   * The schema holding slotguard's tables, created by `migrate`.
   * @default 'slotguard'
   */
  readonly schema?: string;
  readonly hashKey: EffectKeyHasher;
  /**
   * Whose clock decides when a lease has ended (see LeaseClock). Production uses the database's,
   * so replicas with skewed clocks still agree; 'caller' is for a single injected clock (tests).
   * @default 'database'
   */
  readonly leaseClock?: LeaseClock;
  /**
   * Session limits and the client-side deadline of every call, each well under the lease.
   * @default { statementMs: 5000, lockMs: 2000, idleInTransactionMs: 5000, deadlineMs: 5000, scope: 'transaction' }
   */
  readonly timeouts?: PostgresTimeouts;
  /**
   * Tries per operation on a dropped connection, deadlock or lock timeout, within the deadline.
   * @default 3
   */
  readonly attempts?: number;
}

/** The Postgres backend: its claim store and ledger, with their Postgres-only extras. */
export interface PostgresBackend extends SlotBackend {
  readonly claims: PostgresClaimStore;
  readonly ledger: PostgresEffectLedger;
  /** The schema in use. */
  readonly schema: string;
}

/**
 * The Postgres backend: lease rows with fencing epochs on the database's clock, and an effect
 * ledger whose every write first checks the lease. Run `migrate` once per schema first.
 * @example
 * const pool = createPostgresPool({ connectionString: process.env.DATABASE_URL });
 * await migrate(pool, { schema: 'slotguard' });
 * const backend = postgresBackend({ pool, hashKey: hmacEffectKeys(secret) });
 */
export function postgresBackend(options: PostgresBackendOptions): PostgresBackend {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  assertSchemaName(schema);
  const leaseClock = options.leaseClock ?? 'database';
  assertLeaseClock(leaseClock);
  const timeouts = resolveTimeouts(options.timeouts);
  const executor = new PostgresExecutor({
    pool: options.pool,
    timeouts,
    ...(options.attempts !== undefined ? { attempts: options.attempts } : {}),
  });
  const sql = sqlFor(schema);
  const claims = new PostgresClaimStore({ executor, sql, schema, leaseClock, timeouts });
  const ledger = new PostgresEffectLedger({ executor, sql, schema, leaseClock, claims });
  return { claims, ledger, hashKey: options.hashKey, schema };
}

/** Options of createPostgresPool: where to connect, and how connections behave. */
export interface PostgresPoolOptions {
  /** A `postgres://` URL. Fields below override its parts. @default the PG* environment variables */
  readonly connectionString?: string;
  /** @default from the URL, else PGHOST, else localhost */
  readonly host?: string;
  /** @default from the URL, else PGPORT, else 5432 */
  readonly port?: number;
  /** @default from the URL, else PGDATABASE, else the user name */
  readonly database?: string;
  /** @default from the URL, else PGUSER, else the OS user */
  readonly user?: string;
  /**
   * A password, or a function called for every new connection: an RDS IAM token
   * (rdsIamPassword) or a rotated Secrets Manager secret (secretsManagerPassword).
   * @default from the URL, else PGPASSWORD or ~/.pgpass
   */
  readonly password?: string | (() => Promise<string>);
  /** TLS: required for IAM authentication; pass the RDS CA bundle as `ca`. @default pg's (from the URL or PGSSLMODE) */
  readonly ssl?: boolean | ConnectionOptions;
  /**
   * Connections in the pool. A run uses about as many as its effect concurrency.
   * @default 10
   */
  readonly max?: number;
  /**
   * Shown in pg_stat_activity; name the replica so an operator can find its sessions.
   * @default 'slotguard'
   */
  readonly applicationName?: string;
  /**
   * TCP keepalive starts probing an idle socket after this long, so a connection to a server
   * that vanished (failover, partition) is found dead instead of hanging a renewal.
   * @default 10_000
   */
  readonly keepAliveInitialDelayMs?: number;
  /**
   * Giving up on opening a connection, or on waiting for a free one when all are in use. A server
   * that is frozen accepts the TCP connection (the kernel does) and never answers the startup
   * message: without this limit the attempt, and the pool slot it holds, would wait forever.
   * @default the client-side deadline of `timeouts` (5_000 by default)
   */
  readonly connectionTimeoutMs?: number;
  /**
   * Closing a connection idle this long.
   * @default 30_000
   */
  readonly idleTimeoutMs?: number;
  /**
   * Session limits sent as startup parameters on every new connection, for a backend whose
   * `timeouts.scope` is 'connection'. Leave out behind RDS Proxy, which rejects startup parameters;
   * the backend's default scope ('transaction') applies them with SET LOCAL instead.
   * @default none sent
   */
  readonly timeouts?: PostgresTimeouts;
  /**
   * Called when an idle connection fails (the server ended it, the network dropped it). The pool
   * discards that connection and opens another on demand.
   * @default ignore
   */
  readonly onIdleError?: (error: Error) => void;
}

/**
 * A pg Pool set up for slotguard: TCP keepalive, a bounded connect, an application name, optional
 * per-connection timeouts, and an idle-error handler (without one, a server ending an idle
 * connection would crash the process with an unhandled 'error' event).
 * @example const pool = createPostgresPool({ host, database: 'app', user: 'slotguard', password: rdsIamPassword({ hostname: host, username: 'slotguard' }), ssl: { ca } })
 */
export function createPostgresPool(options: PostgresPoolOptions = {}): Pool {
  const startup = options.timeouts
    ? resolveTimeouts({ ...options.timeouts, scope: 'connection' })
    : undefined;
  const connectionTimeoutMs = options.connectionTimeoutMs ?? resolveTimeouts(options.timeouts).deadlineMs;
  if (
    !Number.isSafeInteger(connectionTimeoutMs) ||
    connectionTimeoutMs < 100 ||
    connectionTimeoutMs > 600_000
  ) {
    // pg reads 0 as "no limit": a connection to a frozen server would then never give up.
    throw new ConfigurationError(
      'connectionTimeoutMs',
      `connectionTimeoutMs is ${connectionTimeoutMs}; use whole milliseconds from 100 to 600000, for example ` +
        'the client-side deadline (timeouts.deadlineMs, 5000 by default)',
    );
  }
  const pool = new pg.Pool({
    ...(options.connectionString !== undefined ? { connectionString: options.connectionString } : {}),
    ...(options.host !== undefined ? { host: options.host } : {}),
    ...(options.port !== undefined ? { port: options.port } : {}),
    ...(options.database !== undefined ? { database: options.database } : {}),
    ...(options.user !== undefined ? { user: options.user } : {}),
    ...(options.password !== undefined ? { password: options.password } : {}),
    ...(options.ssl !== undefined ? { ssl: options.ssl } : {}),
    max: options.max ?? 10,
    application_name: options.applicationName ?? 'slotguard',
    keepAlive: true,
    keepAliveInitialDelayMillis: options.keepAliveInitialDelayMs ?? 10_000,
    connectionTimeoutMillis: connectionTimeoutMs,
    idleTimeoutMillis: options.idleTimeoutMs ?? 30_000,
    ...(startup
      ? {
          statement_timeout: startup.statementMs,
          lock_timeout: startup.lockMs,
          idle_in_transaction_session_timeout: startup.idleInTransactionMs,
        }
      : {}),
  });
  const onIdleError = options.onIdleError ?? (() => {});
  pool.on('error', onIdleError);
  return pool;
}
