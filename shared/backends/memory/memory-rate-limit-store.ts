import type { Clock } from '../../clock.js';
import type {
  RateLimitStore,
  RateReservation,
  RateReservationRequest,
} from '../../effects/rate-limit-store.js';

/** Options of a `MemoryRateLimitStore`. */
export interface MemoryRateLimitStoreOptions {
  /**
   * A clock of the store's own, as a database has: reservations are judged by it and returned with
   * its reading (`storeNow`), and callers map them onto theirs. Tests give it a clock set apart from
   * the workers' to show that they still keep to the rate.
   * @default none: the caller's `now` is used, as the DynamoDB store does
   */
  readonly clock?: Clock;
}

/**
 * One job's send timeline in process memory, with the semantics of the DynamoDB item and the
 * Postgres row: for tests and the simulation, and for workers that share one process. Give every
 * SharedRateLimiter of the job the same instance.
 * @example
 * const store = new MemoryRateLimitStore();
 * const workers = [1, 2, 3].map(() => new SharedRateLimiter({ store, ratePerSecond: 14, clock }));
 */
export class MemoryRateLimitStore implements RateLimitStore {
  readonly #clock: Clock | undefined;
  #next: number | undefined;
  #requests = 0;

  constructor(options: MemoryRateLimitStoreOptions = {}) {
    this.#clock = options.clock;
  }

  async reserve(request: RateReservationRequest): Promise<RateReservation> {
    this.#requests++;
    const now = this.#clock?.now() ?? request.now;
    const floor = now + request.notBeforeMs;
    const start = this.#next === undefined ? floor : Math.max(this.#next, floor);
    this.#next = start + request.spanMs;
    return this.#clock ? { start, storeNow: now } : { start };
  }

  /** Writes so far: one per reservation. */
  get requests(): number {
    return this.#requests;
  }
}
