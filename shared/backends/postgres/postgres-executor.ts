import type { Pool, PoolClient, QueryResultRow } from 'pg';
import { equalJitterDelayMs } from '../../backoff.js';
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
   * The client-side deadline of every call: one statement or one transaction, with its retries and
   * the wait for a connection. The limits above are enforced by the server, so they do nothing when
   * the server itself is frozen (stopped, paused, swapped out) with its connections open; this one
   * is enforced here. When it passes, the call fails with a StoreError naming the operation, the
   * slot and the deadline, and its connection is destroyed, never returned to the pool: a
   * transaction whose COMMIT had not been sent then rolls back when the server finds the connection
   * gone, so it cannot commit after the server thaws. It must fit in the run's lease safety margin
   * (a sixth of the lease unless leaseSafetyMarginMs sets it: 10 s of the default 60 s), so a call
   * that hangs ends before the lease does: a claim whose margin is shorter is refused, naming the
   * values (shortestLeaseMs gives the shortest lease these timeouts allow). It counts
   * this process's running time: a replica stopped or stalled mid-call (SIGSTOP, a paused VM, a long
   * GC) reads a reply that arrived meanwhile instead of giving up on it when it runs again.
   * @default the longest of statementMs, lockMs and idleInTransactionMs (5_000)
   */
  readonly deadlineMs?: number;
  /**
   * Where the limits are applied.
   * - `'transaction'`: `SET LOCAL` at the start of every transaction slotguard runs. Works with any
   *   pool, and through RDS Proxy and PgBouncer in transaction mode, because nothing outlives the
   *   transaction. Costs two extra round trips per single-statement operation.
   * - `'connection'`: the pool's connections already carry them as startup parameters
   *   (createPostgresPool with the same `timeouts`), checked on first use. One round trip per read;
   *   a write is still sent inside BEGIN … COMMIT (see PostgresExecutor.query). Not accepted by RDS
   *   Proxy, which rejects startup parameters.
   * @default 'transaction'
   */
  readonly scope?: 'transaction' | 'connection';
}

/** Timeouts with every default filled in and checked. */
export type ResolvedTimeouts = Required<PostgresTimeouts>;

export { DEFAULT_TIMEOUTS };

/**
 * Fills in and validates timeouts; the error names the value and the fix. The deadline defaults to
 * the longest server limit, not to the statement timeout plus an allowance: an allowance would
 * raise the shortest lease a claim accepts (three times the longest limit, 15 s by default) for
 * every existing deployment, and a call's statements are already bounded by the limits it waits on.
 */
export function resolveTimeouts(timeouts: PostgresTimeouts = {}): ResolvedTimeouts {
  const statementMs = timeouts.statementMs ?? DEFAULT_TIMEOUTS.statementMs;
  const lockMs = timeouts.lockMs ?? DEFAULT_TIMEOUTS.lockMs;
  const idleInTransactionMs = timeouts.idleInTransactionMs ?? DEFAULT_TIMEOUTS.idleInTransactionMs;
  const resolved: ResolvedTimeouts = {
    statementMs,
    lockMs,
    idleInTransactionMs,
    deadlineMs: timeouts.deadlineMs ?? Math.max(statementMs, lockMs, idleInTransactionMs),
    scope: timeouts.scope ?? DEFAULT_TIMEOUTS.scope,
  };
  for (const key of ['statementMs', 'lockMs', 'idleInTransactionMs', 'deadlineMs'] as const) {
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

/**
 * The largest of the limits and the client-side deadline, which bound a stuck operation and so must
 * sit well under the lease.
 */
export function longestTimeout(timeouts: ResolvedTimeouts): number {
  return Math.max(timeouts.statementMs, timeouts.lockMs, timeouts.idleInTransactionMs, timeouts.deadlineMs);
}

/** One statement inside a transaction. */
export type TransactionQuery = <R extends QueryResultRow>(text: string, values: unknown[]) => Promise<R[]>;

/** How a PostgresExecutor runs: its pool, limits and retries. */
export interface ExecutorOptions {
  readonly pool: Pool;
  readonly timeouts: ResolvedTimeouts;
  /**
   * Tries per operation when the connection failed or the server asked for a retry (deadlock,
   * serialization failure, lock timeout), all within the one deadline. Every operation is safe to
   * repeat: its conditions recognise the caller's own earlier write.
   * @default 3
   */
  readonly attempts?: number;
}

/** What a call was waiting for when its deadline passed. */
export type AwaitedReply = 'connection' | 'statement' | 'commit' | 'retry';

const WAITING_FOR: Record<AwaitedReply, string> = {
  connection: 'a connection',
  statement: 'the reply to a statement',
  commit: 'the reply to its COMMIT',
  retry: 'its next try',
};

/**
 * A call had no answer by its client-side deadline (timeouts.deadlineMs). Raised inside the
 * backend; translateError turns it into a PostgresDeadlineError naming the operation and the slot.
 */
export class DeadlineExceededError extends Error {
  readonly deadlineMs: number;
  readonly awaiting: AwaitedReply;
  /**
   * A COMMIT of this call was sent and never answered (in this try or an earlier one), so the
   * server may have committed it, or may once it thaws. When false, nothing the call wrote can
   * ever commit.
   */
  readonly mayHaveCommitted: boolean;

  constructor(deadlineMs: number, awaiting: AwaitedReply, mayHaveCommitted: boolean) {
    super(
      `no answer within the client-side deadline of ${deadlineMs} ms (timeouts.deadlineMs) while waiting for ` +
        WAITING_FOR[awaiting],
    );
    this.name = 'DeadlineExceededError';
    this.deadlineMs = deadlineMs;
    this.awaiting = awaiting;
    this.mayHaveCommitted = mayHaveCommitted;
  }
}

/**
 * Runs the backend's statements on a pool: single statements or short transactions, the session
 * limits in force, transient failures retried, each call bounded by the client-side deadline. It
 * keeps no state on a connection between transactions (no session SET, no named prepared
 * statement, no session advisory lock), so any connection may serve the next call.
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

  /**
   * One statement as its own transaction: BEGIN, the statement, and COMMIT only once the
   * statement's reply has arrived, in either scope. Every write goes this way because of what a
   * frozen server does with a write it never answered: sent as a single autocommit statement, the
   * write waits in the server's socket buffer, and when the server thaws it executes and commits it
   * although the client gave up and closed the connection (a test shows it). Inside BEGIN the server
   * finds the end of the connection where COMMIT would have been, and rolls back. What stays
   * possible is a COMMIT sent before the deadline and never answered: it may commit, and the error
   * says so.
   */
  async query<R extends QueryResultRow>(text: string, values: unknown[]): Promise<R[]> {
    await this.#checkConnectionTimeouts();
    return this.#run((q) => q<R>(text, values), true);
  }

  /**
   * One statement that writes nothing. With scope 'connection' it is a single round trip, outside a
   * transaction: abandoning it at the deadline leaves nothing to commit.
   */
  async read<R extends QueryResultRow>(text: string, values: unknown[]): Promise<R[]> {
    await this.#checkConnectionTimeouts();
    return this.#run((q) => q<R>(text, values), this.#timeouts.scope === 'transaction', false);
  }

  /** Several statements in one transaction, retried whole. */
  async transaction<T>(work: (query: TransactionQuery) => Promise<T>): Promise<T> {
    await this.#checkConnectionTimeouts();
    return this.#run(work, true);
  }

  /**
   * One call: its tries, the backoff between them and the wait for connections, all under one
   * deadline. `writes` false: a COMMIT left unanswered cannot have changed anything.
   */
  async #run<T>(
    work: (query: TransactionQuery) => Promise<T>,
    inTransaction: boolean,
    writes = true,
  ): Promise<T> {
    const deadline = new CallDeadline(this.#timeouts.deadlineMs);
    try {
      for (let attempt = 1; ; attempt++) {
        try {
          return await this.#attempt(deadline, work, inTransaction, writes);
        } catch (error) {
          if (deadline.error) throw deadline.error;
          if (attempt >= this.#attempts || !isTransient(error)) throw error;
          deadline.awaiting = 'retry';
          await deadline.race(backoff(attempt));
        }
      }
    } finally {
      deadline.clear();
    }
  }

  async #attempt<T>(
    deadline: CallDeadline,
    work: (query: TransactionQuery) => Promise<T>,
    inTransaction: boolean,
    writes: boolean,
  ): Promise<T> {
    deadline.awaiting = 'connection';
    const connecting = this.#pool.connect();
    let client: PoolClient;
    try {
      client = await deadline.race(connecting);
    } catch (error) {
      if (deadline.error) {
        // A connection that arrives after the call gave up goes back to the pool unused.
        connecting.then(
          (late) => late.release(),
          () => {},
        );
      }
      throw error;
    }
    let broken: Error | undefined;
    let released = false;
    const release = (error?: Error) => {
      if (released) return;
      released = true;
      // With an error the pool destroys the connection instead of keeping it; pg ends a client
      // that has a query in flight by destroying its socket, without waiting for the server.
      client.release(error);
    };
    // Between two statements a checked-out client has no query to fail, and pg emits a lost
    // connection as an 'error' event, which would end the process with no listener.
    const onError = (error: Error) => {
      broken ??= error;
    };
    client.on('error', onError);
    // At the deadline the connection goes at once, not when the awaited reply fails: a frozen server
    // then finds its client gone wherever COMMIT would have come, and the pool has the slot back.
    deadline.onPass = () => release(deadline.error);
    const send = async <R extends QueryResultRow>(text: string, values?: unknown[]) =>
      (await deadline.race(client.query<R>(text, values))).rows;
    try {
      deadline.awaiting = 'statement';
      if (inTransaction) await send(this.#begin);
      const result = await work(send);
      if (inTransaction) {
        deadline.awaiting = 'commit';
        deadline.commitSent ||= writes;
        await send(COMMIT);
      }
      return result;
    } catch (error) {
      if (!deadline.error) {
        broken ??= inTransaction ? await rollback(error, () => send(ROLLBACK)) : connectionFailure(error);
      }
      throw error;
    } finally {
      deadline.onPass = undefined;
      client.off('error', onError);
      // A connection that failed mid-transaction is destroyed, not returned to the pool.
      release(broken);
    }
  }

  /** With scope 'connection', checks once that the pool's connections carry the configured limits. */
  #checkConnectionTimeouts(): Promise<void> {
    if (this.#timeouts.scope !== 'connection') return Promise.resolve();
    this.#checked ??= (async () => {
      const [actual = {}] = await this.#run(
        (q) => q<Record<string, string>>(READ_SESSION_TIMEOUTS, []),
        false,
        false,
      );
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

/**
 * The client-side deadline of one call. Every wait of the call (a connection, a reply, a backoff)
 * is raced against it; when it passes, the wait fails with a DeadlineExceededError and `onPass`
 * destroys the connection in use.
 *
 * It counts the time the server has had to answer while this process was running, in ticks of a
 * tenth of the deadline (10 to 250 ms): a gap between two ticks longer than two ticks (the process
 * was stopped by SIGSTOP or a paused VM, or stalled by a long GC or a starved CPU) counts as two.
 * Timers that fell due while the process was stopped all fire as soon as it runs again, so a plain
 * timer would give up on a call whose reply had arrived meanwhile and was waiting in the socket: a
 * replica frozen past its deadline would leave the effects it had sent in doubt although their marks
 * were about to commit. A server that is itself frozen is still given up on after `ms` of this
 * process's running time.
 */
class CallDeadline {
  /** What the call waits for now: what the error will say it was waiting for. */
  awaiting: AwaitedReply = 'connection';
  /** A writing COMMIT was sent; whatever happened to its reply, the server may have committed. */
  commitSent = false;
  /** Called once if the deadline passes, while set. */
  onPass: (() => void) | undefined;
  #error: DeadlineExceededError | undefined;
  readonly #passed: Promise<never>;
  #timer: NodeJS.Timeout;

  constructor(ms: number) {
    let reject: (error: Error) => void = () => {};
    this.#passed = new Promise<never>((_, r) => {
      reject = r;
    });
    // Observed by every race; between two of them nobody is listening.
    this.#passed.catch(() => {});
    const tickMs = Math.min(250, Math.max(10, Math.floor(ms / 10)));
    let left = ms;
    let last = performance.now();
    const tick = () => {
      const now = performance.now();
      left -= Math.min(now - last, 2 * tickMs);
      last = now;
      if (left > 0) {
        this.#timer = setTimeout(tick, Math.min(tickMs, left));
        return;
      }
      this.#error = new DeadlineExceededError(ms, this.awaiting, this.commitSent);
      this.onPass?.();
      reject(this.#error);
    };
    this.#timer = setTimeout(tick, Math.min(tickMs, ms));
  }

  /** The error, once the deadline has passed. */
  get error(): DeadlineExceededError | undefined {
    return this.#error;
  }

  /** `pending`, unless the deadline passes first. */
  race<T>(pending: Promise<T>): Promise<T> {
    // An abandoned wait that fails later (its socket destroyed) must not become an unhandled rejection.
    pending.catch(() => {});
    return Promise.race([pending, this.#passed]);
  }

  clear(): void {
    clearTimeout(this.#timer);
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
async function rollback(cause: unknown, send: () => Promise<unknown>): Promise<Error | undefined> {
  const failed = connectionFailure(cause);
  if (failed) return failed;
  try {
    await send();
    return undefined;
  } catch (error) {
    return asError(error);
  }
}

/** The error to destroy a connection with, when `cause` says the connection itself is gone. */
function connectionFailure(cause: unknown): Error | undefined {
  return isConnectionFailure(cause) ? asError(cause) : undefined;
}

const asError = (value: unknown) => (value instanceof Error ? value : new Error(String(value)));

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
  return new Promise((resolve) => setTimeout(resolve, equalJitterDelayMs(attempt, 50, 1_000)));
}
