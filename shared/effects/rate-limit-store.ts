import { ConfigurationError } from '../errors.js';
import { assertJobId } from '../slot/slot.js';

/**
 * The port behind a job-wide send rate: one shared timeline per job, held by a backend (a DynamoDB
 * item, a Postgres row, a map in memory), that every worker of the job reserves its sends on.
 *
 * The timeline is a single instant, `next`: the moment the job's next unreserved send is due. A
 * reservation of `spanMs` (tokens × 1000 / rate) moves it forward in one atomic write:
 *
 *   start = max(next, now + notBeforeMs)
 *   next  = start + spanMs
 *
 * and the caller's tokens are due at start, start + 1000/rate, … Two reservations never overlap,
 * whoever makes them, so the sends of every worker together keep to the rate. `max` is what keeps
 * idle time from piling up: after a quiet hour the timeline restarts at `now + notBeforeMs`, not an
 * hour back.
 */
export interface RateLimitStore {
  /** Reserves `request.spanMs` of the job's timeline; see RateReservationRequest. */
  reserve(request: RateReservationRequest): Promise<RateReservation>;
}

/** One reservation on a job's send timeline. */
export interface RateReservationRequest {
  /** The caller's clock, in milliseconds since the epoch, read just before the request. */
  readonly now: number;
  /** Milliseconds of the timeline to reserve: the tokens wanted × 1000 / rate. Positive. */
  readonly spanMs: number;
  /**
   * The earliest start, relative to now (the store's own clock when it keeps one, else `now`):
   * the caller's round-trip estimate, so that tokens arrive before they are due, less the idle
   * allowance ((burst − 1) × 1000 / rate), so that a quiet timeline grants at most a burst at once.
   * May be negative.
   */
  readonly notBeforeMs: number;
}

/** Where a reservation landed. */
export interface RateReservation {
  /** When the first reserved token is due: on the caller's clock, or on the store's when `storeNow` is set. */
  readonly start: number;
  /**
   * The store's own clock when it made the reservation (a database's `clock_timestamp()`), for a
   * store that judges time by its own clock; absent when it used the caller's `now`.
   */
  readonly storeNow?: number;
}

/**
 * A store opened on its first reservation, not when it is built: a function's cold start then
 * creates no client and opens no connection for a run that never sends. A failed open is tried again
 * by the next reservation.
 * @example const store = lazyRateLimitStore(() => new DynamoRateLimitStore({ client: createDynamoClient(), tableName, jobId }));
 */
export function lazyRateLimitStore(open: () => RateLimitStore | Promise<RateLimitStore>): RateLimitStore {
  let opened: Promise<RateLimitStore> | undefined;
  return {
    async reserve(request) {
      opened ??= Promise.resolve()
        .then(open)
        .catch((error: unknown) => {
          opened = undefined;
          throw error;
        });
      return (await opened).reserve(request);
    },
  };
}

/**
 * Checks the job id a store is built for, as a configuration value: the store's key is made from
 * it, so it must be a job id the claims store would accept.
 */
export function assertRateLimitJobId(jobId: string): void {
  try {
    assertJobId(jobId);
  } catch (cause) {
    throw new ConfigurationError('jobId', `send-rate store: ${(cause as Error).message}`, { cause });
  }
}
