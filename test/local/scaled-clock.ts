import type { Clock } from '../../shared/clock.js';

/**
 * A clock running `factor` times faster than real time from the moment it is made (showing
 * `start`, or the time of day): every wait on it (a send-rate token, a lease, Lambda's time limit,
 * a redelivery's visibility) passes in 1/factor of its length in real time, in the same
 * proportions to each other. Real I/O (dynalite, the SMTP server) looks `factor` times slower on
 * it, so a run achieves less in its time, never more.
 */
export class ScaledClock implements Clock {
  readonly #startedAt: number;
  readonly #realStart = performance.now();
  readonly #factor: number;

  constructor(factor: number, start: number = Date.now()) {
    this.#factor = factor;
    this.#startedAt = start;
  }

  now(): number {
    return Math.floor(this.#startedAt + (performance.now() - this.#realStart) * this.#factor);
  }

  schedule(ms: number, fn: () => void): () => void {
    const timer = setTimeout(fn, Math.max(0, ms) / this.#factor);
    return () => clearTimeout(timer);
  }
}
