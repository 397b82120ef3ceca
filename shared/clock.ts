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

/** The longest delay setTimeout takes (about 24.8 days); a longer one fires at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Calls `fn` when `clock` reaches `at`, chaining timers past setTimeout's 24.8-day limit, so a
 * monthly or yearly fire waits as long as it should. Returns a function that cancels it.
 * @example const cancel = scheduleAt(systemClock, next.getTime(), () => void fire(next));
 */
export function scheduleAt(clock: Clock, at: number, fn: () => void): () => void {
  let cancel: () => void;
  const arm = () => {
    const delay = Math.max(0, at - clock.now());
    cancel = clock.schedule(Math.min(delay, MAX_TIMER_MS), delay > MAX_TIMER_MS ? arm : fn);
  };
  arm();
  return () => cancel();
}
