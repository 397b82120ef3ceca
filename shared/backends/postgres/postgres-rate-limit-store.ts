import type { Pool } from 'pg';
import {
  assertRateLimitJobId,
  type RateLimitStore,
  type RateReservation,
  type RateReservationRequest,
} from '../../effects/rate-limit-store.js';
import { ConfigurationError } from '../../errors.js';
import { assertLeaseClock, type LeaseClock } from './postgres-claim-store.js';
import { translateError } from './postgres-errors.js';
import { PostgresExecutor, type PostgresTimeouts, resolveTimeouts, sqlState } from './postgres-executor.js';
import { DEFAULT_SCHEMA } from './postgres-settings.js';
import { sqlFor } from './sql.js';

/** SQLSTATE insufficient_privilege. */
const INSUFFICIENT_PRIVILEGE = '42501';

/** Options of a `PostgresRateLimitStore`. */
export interface PostgresRateLimitStoreOptions {
  /** The pool its one statement runs on; one connection is enough (a worker has one reservation in flight). */
  readonly pool: Pool;
  /**
   * The schema `migrate` brought to version 4 or later (the `send_rates` table).
   * @default 'slotguard'
   */
  readonly schema?: string;
  /** The job whose sends share the timeline. */
  readonly jobId: string;
  /**
   * Whose clock the timeline is kept on. `'database'`: every worker's reservation is judged by the
   * database's clock and mapped onto the worker's own, so the workers' clock skew does not matter;
   * `'caller'`: the `now` each reservation passes, for one injected clock (tests).
   * @default 'database'
   */
  readonly clock?: LeaseClock;
  /**
   * Session limits and the client-side deadline of each reservation.
   * @default the backend's defaults (see PostgresTimeouts)
   */
  readonly timeouts?: PostgresTimeouts;
}

/**
 * One job's send-rate timeline as a row of `send_rates`: each reservation is one upsert whose
 * `GREATEST` restarts a quiet timeline at now, so idle time never accumulates into a burst (see
 * `reserveSendRate` in sql.ts). Run `migrate` first.
 * @example new SharedRateLimiter({ store: new PostgresRateLimitStore({ pool, jobId }), ratePerSecond: 14 })
 */
export class PostgresRateLimitStore implements RateLimitStore {
  readonly #executor: PostgresExecutor;
  readonly #statement: string;
  readonly #schema: string;
  readonly #jobId: string;
  readonly #databaseClock: boolean;

  constructor(options: PostgresRateLimitStoreOptions) {
    assertRateLimitJobId(options.jobId);
    const clock = options.clock ?? 'database';
    assertLeaseClock(clock);
    this.#schema = options.schema ?? DEFAULT_SCHEMA;
    this.#statement = sqlFor(this.#schema).reserveSendRate;
    this.#executor = new PostgresExecutor({
      pool: options.pool,
      timeouts: resolveTimeouts(options.timeouts),
    });
    this.#jobId = options.jobId;
    this.#databaseClock = clock === 'database';
  }

  async reserve(request: RateReservationRequest): Promise<RateReservation> {
    let rows: { start_ms: number; now_ms: number }[];
    try {
      rows = await this.#executor.query(this.#statement, [
        this.#jobId,
        this.#databaseClock ? null : request.now,
        request.notBeforeMs,
        request.spanMs,
      ]);
    } catch (error) {
      if (sqlState(error) === INSUFFICIENT_PRIVILEGE) {
        // A user granted ALL TABLES before version 4 created send_rates has no rights on it.
        throw new ConfigurationError(
          'schema',
          `Postgres reservation on the send-rate timeline of job '${this.#jobId}' was refused: the database user ` +
            `has no rights on ${this.#schema}.send_rates (SQLSTATE 42501); grant them as for the other tables: ` +
            `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ${this.#schema} TO <the functions' user>`,
          { cause: error },
        );
      }
      throw translateError(
        'reserve send rate',
        `the send-rate timeline of job '${this.#jobId}'`,
        this.#schema,
        error,
      );
    }
    // An upsert always returns its row.
    const row = rows[0]!;
    return this.#databaseClock ? { start: row.start_ms, storeNow: row.now_ms } : { start: row.start_ms };
  }
}
