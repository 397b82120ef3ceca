import { type Clock, systemClock } from '../clock.js';
import { ConfigurationError } from '../errors.js';
import { WaiterQueue } from './waiter-queue.js';

/** Something that lets a caller through at a bounded rate. */
export interface RateLimiter {
  /**
   * Resolves when the caller may go. Rejects with `signal.reason` if `signal` aborts first, in
   * which case no token was used.
   */
  take(signal?: AbortSignal): Promise<void>;
}

/** Options of a `TokenBucket`. */
export interface TokenBucketOptions {
  /** Tokens added per second: the sustained rate. May be fractional (0.5 = one every 2 s). */
  readonly ratePerSecond: number;
  /**
   * Most tokens held at once: how many takes may go through back to back after a quiet spell.
   * @default 1, so takes are spaced evenly at 1/ratePerSecond
   */
  readonly burst?: number;
  /** @default the system clock */
  readonly clock?: Clock;
}

/**
 * The rate and burst of a limiter, checked: a positive, finite rate and a whole burst of 1 or more
 * (1 when not given), or a ConfigurationError naming the value and the fix.
 */
export function checkedRate(options: { readonly ratePerSecond: number; readonly burst?: number }): {
  ratePerSecond: number;
  burst: number;
} {
  const burst = options.burst ?? 1;
  if (!(options.ratePerSecond > 0) || !Number.isFinite(options.ratePerSecond)) {
    throw new ConfigurationError(
      'ratePerSecond',
      `ratePerSecond is ${options.ratePerSecond}; set a positive number of sends per second`,
    );
  }
  if (!Number.isInteger(burst) || burst < 1) {
    throw new ConfigurationError('burst', `burst is ${burst}; set a whole number of 1 or more`);
  }
  return { ratePerSecond: options.ratePerSecond, burst };
}

/** Float drift in the refill arithmetic must not cost a whole extra timer round. */
const EPSILON = 1e-9;

/**
 * A token bucket on an injected clock. Waiters are served first come, first served, so with
 * `effectConcurrency` senders sharing one bucket none starves. At most one timer is pending: the
 * moment the head of the queue can go.
 *
 * @example
 * const bucket = new TokenBucket({ ratePerSecond: 14 });
 * await bucket.take(signal); // then send
 */
export class TokenBucket implements RateLimiter {
  readonly #rate: number;
  readonly #burst: number;
  readonly #clock: Clock;
  #tokens: number;
  #refilledAt: number;
  readonly #waiters = new WaiterQueue(() => {
    if (this.#waiters.length === 0) this.#stopTimer();
  });
  #cancelTimer: (() => void) | undefined;

  constructor(options: TokenBucketOptions) {
    const { ratePerSecond, burst } = checkedRate(options);
    this.#rate = ratePerSecond;
    this.#burst = burst;
    this.#clock = options.clock ?? systemClock;
    this.#tokens = burst;
    this.#refilledAt = this.#clock.now();
  }

  take(signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    this.#refill();
    if (this.#waiters.length === 0 && this.#tokens >= 1 - EPSILON) {
      this.#tokens -= 1;
      return Promise.resolve();
    }
    const waiting = this.#waiters.wait(signal);
    this.#startTimer();
    return waiting;
  }

  /** Callers waiting for a token. */
  get waiting(): number {
    return this.#waiters.length;
  }

  #refill(): void {
    const now = this.#clock.now();
    const elapsed = Math.max(0, now - this.#refilledAt);
    this.#tokens = Math.min(this.#burst, this.#tokens + (elapsed * this.#rate) / 1000);
    this.#refilledAt = now;
  }

  #startTimer(): void {
    if (this.#cancelTimer || this.#waiters.length === 0) return;
    const wait = Math.max(0, Math.ceil(((1 - this.#tokens) * 1000) / this.#rate));
    this.#cancelTimer = this.#clock.schedule(wait, () => {
      this.#cancelTimer = undefined;
      this.#serve();
    });
  }

  #stopTimer(): void {
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
  }

  #serve(): void {
    this.#refill();
    while (this.#waiters.length > 0 && this.#tokens >= 1 - EPSILON) {
      this.#tokens -= 1;
      this.#waiters.release();
    }
    this.#startTimer();
  }
}
