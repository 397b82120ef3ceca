import { type Clock, systemClock } from '../clock.js';
import { ConfigurationError } from '../errors.js';
import type { RateLimitStore } from './rate-limit-store.js';
import { checkedRate, type RateLimiter } from './token-bucket.js';
import { WaiterQueue } from './waiter-queue.js';

/** Options of a `SharedRateLimiter`. */
export interface SharedRateLimiterOptions {
  /** The job's shared timeline: DynamoRateLimitStore, PostgresRateLimitStore or MemoryRateLimitStore. */
  readonly store: RateLimitStore;
  /**
   * Sends per second across every worker of the job together (the SES account's maximum send rate,
   * or the part of it this job may use). Every worker of a job must be given the same rate.
   */
  readonly ratePerSecond: number;
  /**
   * Most sends above the rate in any stretch of time: how many may go back to back after a quiet
   * spell, and how long (burst − 1) / rate a token may wait for a sender before it is lost.
   * @default 1, so sends are spaced evenly at 1 / ratePerSecond
   */
  readonly burst?: number;
  /**
   * Most tokens one reservation takes. A worker reserves for the senders waiting on it, so this only
   * caps what one worker holds of the job's timeline at once.
   * @default one second of the rate (at least 1)
   */
  readonly maxBatch?: number;
  /** @default the system clock */
  readonly clock?: Clock;
}

/** What a SharedRateLimiter has done so far: for tests, benchmarks and a log line. */
export interface SharedRateLimiterStats {
  /** Reservations that succeeded (each one store write, two when the timeline had gone idle on DynamoDB). */
  readonly reservations: number;
  /** Tokens those reservations took from the job's timeline. */
  readonly reserved: number;
  /** Tokens handed to a caller of `take`. */
  readonly used: number;
  /**
   * Tokens that passed their last usable moment unused (their caller aborted, the worker stopped
   * asking, the reservation's reply came back late): they only ever lower the rate.
   */
  readonly lost: number;
}

/**
 * How late past its due time a token may still be used beyond the burst allowance: Node's timers
 * fire a millisecond or so after their time, and a token must not be lost for that.
 */
export const TIMER_SLACK_MS = 4;

/** Round trips remembered for the lead: the largest of the last few, so one fast reply does not shrink it. */
const ROUND_TRIPS_KEPT = 4;

/** Store-clock offsets remembered: the smallest of the recent ones is the tightest safe mapping. */
const OFFSETS_KEPT = 8;

/** Float drift in the token arithmetic must not make a due token wait for another timer round. */
const EPSILON = 1e-6;

/**
 * A send rate shared by every worker of a job: shards of one window, a run's continuation, a
 * backfill next to a scheduled run, each in its own Lambda with its own SharedRateLimiter on the
 * same store. Together they keep to `ratePerSecond`.
 *
 * Each worker reserves tokens in batches on the job's timeline (one atomic store write, see
 * RateLimitStore) for the callers waiting on it, then lets each caller go when its token is due, on
 * its own clock. A worker still holding tokens for a later moment does not reserve again until those
 * are nearly spent, so the callers that queue meanwhile share the next reservation: one store write
 * serves about as many sends as the worker has senders.
 *
 * Guarantees, on one clock: in any stretch of W seconds the job's workers together start at most
 * ratePerSecond × W + burst sends (+ ratePerSecond × TIMER_SLACK_MS for timers firing late). Clock
 * skew between workers adds ratePerSecond × skew to a stretch, never to the long-run rate; a store
 * with its own clock (Postgres) replaces skew by each worker's offset estimate, which errs late.
 *
 * An aborted `take` rejects at once with the signal's reason. Tokens reserved and not used in time
 * (a caller aborted, a worker stopped) are lost: they only ever lower the rate.
 *
 * @example
 * const limiter = new SharedRateLimiter({ store: new DynamoRateLimitStore({ client, tableName, jobId }), ratePerSecond: 14 });
 * await limiter.take(signal); // then send
 */
export class SharedRateLimiter implements RateLimiter {
  readonly #store: RateLimitStore;
  readonly #clock: Clock;
  /** Milliseconds of timeline per token. */
  readonly #interval: number;
  /** How long after its due time an unclaimed token is still usable: the burst allowance. */
  readonly #allowance: number;
  readonly #maxBatch: number;
  /** Due times of the tokens this worker holds, ascending, on this worker's clock. */
  #tokens: number[] = [];
  readonly #waiters = new WaiterQueue(() => this.#pump());
  #reserving = false;
  #roundTrips: number[] = [];
  #offsets: number[] = [];
  #cancelTimer: (() => void) | undefined;
  #stats = { reservations: 0, reserved: 0, used: 0, lost: 0 };

  constructor(options: SharedRateLimiterOptions) {
    const { ratePerSecond, burst } = checkedRate(options);
    const maxBatch = options.maxBatch ?? Math.max(1, Math.ceil(ratePerSecond));
    if (!Number.isInteger(maxBatch) || maxBatch < 1) {
      throw new ConfigurationError(
        'maxBatch',
        `maxBatch is ${maxBatch}; set a whole number of tokens of 1 or more, or leave it unset for one second of the rate`,
      );
    }
    this.#store = options.store;
    this.#clock = options.clock ?? systemClock;
    this.#interval = 1000 / ratePerSecond;
    this.#allowance = (burst - 1) * this.#interval;
    this.#maxBatch = maxBatch;
  }

  take(signal?: AbortSignal): Promise<void> {
    const waiting = this.#waiters.wait(signal);
    this.#pump();
    return waiting;
  }

  /** Callers waiting for a token. */
  get waiting(): number {
    return this.#waiters.length;
  }

  /** Reservations and tokens so far. */
  get stats(): SharedRateLimiterStats {
    return { ...this.#stats };
  }

  /**
   * Lets go every waiter whose token is due, drops the tokens nobody used in time, reserves more
   * when waiters outnumber tokens, and arms the one timer for the next token due.
   */
  #pump(): void {
    const now = this.#clock.now();
    const lastUsable = now - this.#allowance - TIMER_SLACK_MS;
    while (this.#tokens.length > 0 && this.#tokens[0]! < lastUsable - EPSILON) {
      this.#tokens.shift();
      this.#stats.lost++;
    }
    while (this.#waiters.length > 0 && this.#tokens.length > 0 && this.#tokens[0]! <= now + EPSILON) {
      this.#tokens.shift();
      this.#stats.used++;
      this.#waiters.release();
    }
    const deficit = this.#waiters.length - this.#tokens.length;
    // Coalescing: while this worker holds tokens for later, the callers queueing now wait for the
    // reservation made when those are nearly spent (one round trip before the last is due), which
    // takes them all at once instead of one write each.
    const last = this.#tokens.at(-1);
    if (deficit > 0 && !this.#reserving && (last === undefined || last <= now + this.#lead())) {
      void this.#reserve(Math.min(this.#maxBatch, deficit));
    }
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    const next = this.#tokens[0];
    if (this.#waiters.length > 0 && next !== undefined) {
      this.#cancelTimer = this.#clock.schedule(Math.max(0, next - now), () => {
        this.#cancelTimer = undefined;
        this.#pump();
      });
    }
  }

  async #reserve(count: number): Promise<void> {
    this.#reserving = true;
    const sentAt = this.#clock.now();
    try {
      const reservation = await this.#store.reserve({
        now: sentAt,
        spanMs: count * this.#interval,
        // A round trip ahead, so the first token arrives before it is due; less the burst allowance,
        // so a timeline gone quiet grants at most `burst` tokens at once.
        notBeforeMs: this.#lead() - this.#allowance,
      });
      const receivedAt = this.#clock.now();
      remember(this.#roundTrips, receivedAt - sentAt, ROUND_TRIPS_KEPT);
      let start = reservation.start;
      if (reservation.storeNow !== undefined) {
        // The store's clock read somewhere between sentAt and receivedAt; taking it as receivedAt
        // maps every store instant later than it happened, never earlier, so a token never goes early.
        // The smallest recent offset is the tightest such mapping (the fastest round trip).
        remember(this.#offsets, receivedAt - reservation.storeNow, OFFSETS_KEPT);
        start += Math.min(...this.#offsets);
      }
      for (let i = 0; i < count; i++) this.#tokens.push(start + i * this.#interval);
      // Reservations never overlap, but one mapped through a new store-clock offset may land before
      // tokens already held.
      this.#tokens.sort((a, b) => a - b);
      this.#stats.reservations++;
      this.#stats.reserved += count;
    } catch (error) {
      // The waiters without a token would only start the same failing write again: they fail now,
      // and their callers decide (a sender reports the email not sent, to be retried).
      this.#waiters.rejectAfter(this.#tokens.length, error);
    } finally {
      this.#reserving = false;
      this.#pump();
    }
  }

  /** How far ahead of now a reservation asks to start: the longest recent round trip. */
  #lead(): number {
    return this.#roundTrips.length === 0 ? 0 : Math.max(...this.#roundTrips);
  }
}

/** Appends `value`, keeping the last `kept`. */
function remember(values: number[], value: number, kept: number): void {
  values.push(value);
  if (values.length > kept) values.shift();
}
