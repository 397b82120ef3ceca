import type { Pool, PoolClient, QueryResultRow } from 'pg';
import { ConfigurationError } from '../../errors.js';
import { DEFAULT_TIMEOUTS } from './postgres-settings.js';
import {
  beginTransaction,
  COMMIT,
  READ_SESSION_TIMEOUTS,
  ROLLBACK,
  type TransactionTimeouts,
} from './sql.js';

/**
 * The session limits that bound how long a stuck statement, a lock wait or a frozen client inside a
 * transaction can delay a takeover. Each must be well under the lease (a third of it at most,
 * checked at every claim): a claim or reservation that cannot finish gives up while the lease
 * still has time, and a holder frozen inside a transaction is disconnected by the server, which
 * releases its row locks.
 */
export interface PostgresTimeouts {
  /**
   * statement_timeout: the longest any statement runs.
   * @default 5_000
   */
  readonly statementMs?: number;
  /**
   * lock_timeout: the longest a statement waits for a row or advisory lock.
   * @default 2_000
   */
  readonly lockMs?: number;
  /**
   * idle_in_transaction_session_timeout: how long the server keeps a session that went quiet inside
   * an open transaction (a frozen or partitioned client) before ending it and its locks.
   * @default 5_000
   */
  readonly idleInTransactionMs?: number;
  /**
   * Where the limits are applied.
   * - `'transaction'`: `SET LOCAL` at the start of every transaction slotguard runs. Works with any
   *   pool, and through RDS Proxy and PgBouncer in transaction mode, because nothing outlives the
   *   transaction. Costs two extra round trips per single-statement operation.
   * - `'connection'`: the pool's connections already carry them as startup parameters
   *   (createPostgresPool with the same `timeouts`), checked on first use. One round trip per
   *   operation; not accepted by RDS Proxy, which rejects startup parameters.
   * @default 'transaction'
   */
  readonly scope?: 'transaction' | 'connection';
}

/** Timeouts with every default filled in and checked. */
export type ResolvedTimeouts = Required<PostgresTimeouts>;

export { DEFAULT_TIMEOUTS };

/** Fills in and validates timeouts; the error names the value and the fix. */
export function resolveTimeouts(timeouts: PostgresTimeouts = {}): ResolvedTimeouts {
  const resolved = { ...DEFAULT_TIMEOUTS, ...timeouts };
  for (const key of ['statementMs', 'lockMs', 'idleInTransactionMs'] as const) {
    const value = resolved[key];
    if (!Number.isSafeInteger(value) || value < 100 || value > 600_000) {
      throw new ConfigurationError(
        `timeouts.${key}`,
        `timeouts.${key} is ${value}; use whole milliseconds from 100 to 600000, well under the lease ` +
          '(the default lease is 60000 ms)',
      );
    }
  }
  if (resolved.scope !== 'transaction' && resolved.scope !== 'connection') {
    throw new ConfigurationError(
      'timeouts.scope',
      `timeouts.scope is ${JSON.stringify(resolved.scope)}; use 'transaction' or 'connection'`,
    );
  }
  return resolved;
}

/** The largest of the limits, which bounds a stuck operation and so must sit well under the lease. */
export function longestTimeout(timeouts: ResolvedTimeouts): number {
  return Math.max(timeouts.statementMs, timeouts.lockMs, timeouts.idleInTransactionMs);
}

/** One statement inside a transaction. */
export type TransactionQuery = <R extends QueryResultRow>(text: string, values: unknown[]) => Promise<R[]>;

/** How a PostgresExecutor runs: its pool, limits and retries. */
export interface ExecutorOptions {
  readonly pool: Pool;
  readonly timeouts: ResolvedTimeouts;
  /**
   * Tries per operation when the connection failed or the server asked for a retry (deadlock,
   * serialization failure, lock timeout). Every operation is safe to repeat: its conditions
   * recognise the caller's own earlier write.
   * @default 3
   */
  readonly attempts?: number;
}

/**
 * Runs the backend's statements on a pool: single statements or short transactions, the session
 * limits in force, transient failures retried. It keeps no state on a connection between
 * transactions (no session SET, no named prepared statement, no session advisory lock), so any
 * connection may serve the next call.
 */
export class PostgresExecutor {
  readonly #pool: Pool;
  readonly #timeouts: ResolvedTimeouts;
  readonly #attempts: number;
  readonly #begin: string;
  #checked: Promise<void> | undefined;

  constructor(options: ExecutorOptions) {
    this.#pool = options.pool;
    this.#timeouts = options.timeouts;
    this.#attempts = options.attempts ?? 3;
    this.#begin = beginTransaction(
      this.#timeouts.scope === 'transaction' ? toLocal(this.#timeouts) : undefined,
    );
  }

  /** One statement as its own transaction. */
  async query<R extends QueryResultRow>(text: string, values: unknown[]): Promise<R[]> {
    if (this.#timeouts.scope === 'transaction') return this.transaction((q) => q<R>(text, values));
    await this.#checkConnectionTimeouts();
    return this.#retrying(async () => (await this.#pool.query<R>(text, values)).rows);
  }

  /** Several statements in one transaction, retried whole. */
  async transaction<T>(work: (query: TransactionQuery) => Promise<T>): Promise<T> {
    await this.#checkConnectionTimeouts();
    return this.#retrying(async () => {
      const client = await this.#pool.connect();
      let broken: Error | undefined;
      // Between two statements a checked-out client has no query to fail, and pg emits a lost
      // connection as an 'error' event, which would end the process with no listener.
      const onError = (error: Error) => {
        broken ??= error;
      };
      client.on('error', onError);
      try {
        await client.query(this.#begin);
        const result = await work(async <R extends QueryResultRow>(text: string, values: unknown[]) => {
          return (await client.query<R>(text, values)).rows;
        });
        await client.query(COMMIT);
        return result;
      } catch (error) {
        broken ??= await rollback(client, error);
        throw error;
      } finally {
        client.off('error', onError);
        // A connection that failed mid-transaction is destroyed, not returned to the pool.
        client.release(broken);
      }
    });
  }

  async #retrying<T>(operation: () => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await operation();
      } catch (error) {
        if (attempt >= this.#attempts || !isTransient(error)) throw error;
        await backoff(attempt);
      }
    }
  }

  /** With scope 'connection', checks once that the pool's connections carry the configured limits. */
  #checkConnectionTimeouts(): Promise<void> {
    if (this.#timeouts.scope !== 'connection') return Promise.resolve();
    this.#checked ??= (async () => {
      const { rows } = await this.#pool.query<Record<string, string>>(READ_SESSION_TIMEOUTS);
      const actual = rows[0] ?? {};
      for (const key of ['statementMs', 'lockMs', 'idleInTransactionMs'] as const) {
        if (settingMs(actual[key]) !== this.#timeouts[key]) {
          throw new ConfigurationError(
            `timeouts.${key}`,
            `timeouts.scope is 'connection' but the pool's connections run with ${key} ${JSON.stringify(actual[key])}, ` +
              `not ${this.#timeouts[key]} ms; create the pool with createPostgresPool({ timeouts }) using the same ` +
              "timeouts, or use scope 'transaction'",
          );
        }
      }
    })().catch((error: unknown) => {
      this.#checked = undefined;
      throw error;
    });
    return this.#checked;
  }
}

function toLocal(timeouts: ResolvedTimeouts): TransactionTimeouts {
  return {
    statementMs: timeouts.statementMs,
    lockMs: timeouts.lockMs,
    idleInTransactionMs: timeouts.idleInTransactionMs,
  };
}

/** Rolls back after a failure; returns the error to destroy the connection with, if it is unusable. */
async function rollback(client: PoolClient, cause: unknown): Promise<Error | undefined> {
  if (isConnectionFailure(cause)) return cause instanceof Error ? cause : new Error(String(cause));
  try {
    await client.query(ROLLBACK);
    return undefined;
  } catch (error) {
    return error instanceof Error ? error : new Error(String(error));
  }
}

/** A Postgres setting such as '5s', '2000ms' or '0' in milliseconds. */
function settingMs(value: string | undefined): number {
  const match = /^(\d+)\s*(ms|s|min|h)?$/.exec(value ?? '');
  if (!match) return Number.NaN;
  const unit = { ms: 1, s: 1_000, min: 60_000, h: 3_600_000 }[match[2] ?? 'ms'] ?? 1;
  return Number(match[1]) * unit;
}

/**
 * SQLSTATEs worth a retry: the server ended or refused the session (class 08, 57P01-57P03), or
 * asked the transaction to run again (40001 serialization failure, 40P01 deadlock, 55P03 lock not
 * available within lock_timeout).
 */
const RETRYABLE_SQLSTATES = new Set(['40001', '40P01', '55P03', '57P01', '57P02', '57P03']);
const CONNECTION_ERROR_CODES = new Set(['ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH']);

/** An error a retry may cure. */
export function isTransient(error: unknown): boolean {
  const code = sqlState(error);
  return (code !== undefined && RETRYABLE_SQLSTATES.has(code)) || isConnectionFailure(error);
}

/** The connection itself is gone (its socket closed, or the server ended the session). */
export function isConnectionFailure(error: unknown): boolean {
  const code = sqlState(error);
  if (code?.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03') return true;
  if (code !== undefined && CONNECTION_ERROR_CODES.has(code)) return true;
  return (
    error instanceof Error &&
    /Connection terminated|connection is closed|Client has encountered a connection error/i.test(
      error.message,
    )
  );
}

/** The SQLSTATE (or Node socket code) of an error, if it has one. */
export function sqlState(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null || !('code' in error)) return undefined;
  const code = (error as { code: unknown }).code;
  return typeof code === 'string' ? code : undefined;
}

/** Jittered exponential backoff between tries, so replicas do not retry in lockstep. */
function backoff(attempt: number): Promise<void> {
  const ceiling = Math.min(1_000, 50 * 2 ** attempt);
  return new Promise((resolve) => setTimeout(resolve, ceiling / 2 + Math.random() * (ceiling / 2)));
}
