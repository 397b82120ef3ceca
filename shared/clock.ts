/**
 * Time as slotguard sees it. Production uses the system clock; tests inject a clock they move, so no
 * test sleeps to wait for a lease.
 */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Calls `fn` once `ms` have passed on this clock; returns a function that cancels it. */
  schedule(ms: number, fn: () => void): () => void;
}

/** The process clock. Timers are unref'd so a pending heartbeat never keeps a process alive. */
export const systemClock: Clock = {
  now: () => Date.now(),
  schedule(ms, fn) {
    const timer = setTimeout(fn, ms);
    timer.unref();
    return () => clearTimeout(timer);
  },
};
