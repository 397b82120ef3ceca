import type { Clock } from '../clock.js';

/**
 * A clock tests move by hand. Timers fire, in order, only when `advance` passes them, so a test
 * decides exactly when a lease renews or expires; nothing sleeps. Left alone, time stands still.
 * @example
 * const clock = new ManualClock(new Date('2026-11-30T06:00:00Z'));
 * await clock.advance(60_000); // fires the lease renewals due in that minute, in order
 */
export class ManualClock implements Clock {
  #now: number;
  #timers: { at: number; seq: number; fn: () => void }[] = [];
  #seq = 0;

  /** @param start the time it shows until moved (milliseconds or a Date); default 2026-11-30T06:00:00Z */
  constructor(start: number | Date = Date.parse('2026-11-30T06:00:00Z')) {
    this.#now = typeof start === 'number' ? start : start.getTime();
  }

  now(): number {
    return this.#now;
  }

  schedule(ms: number, fn: () => void): () => void {
    const timer = { at: this.#now + Math.max(0, ms), seq: this.#seq++, fn };
    this.#timers.push(timer);
    return () => {
      this.#timers = this.#timers.filter((t) => t !== timer);
    };
  }

  /** Moves time forward, firing due timers in order and letting their promises settle between them. */
  async advance(ms: number): Promise<void> {
    const target = this.#now + ms;
    for (;;) {
      const due = this.#timers.filter((t) => t.at <= target).sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (!due) break;
      this.#timers = this.#timers.filter((t) => t !== due);
      this.#now = Math.max(this.#now, due.at);
      due.fn();
      await settle();
    }
    this.#now = target;
  }

  /** Timers still waiting. */
  get pending(): number {
    return this.#timers.length;
  }
}

/** Lets pending promise callbacks and I/O callbacks run. */
export function settle(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
