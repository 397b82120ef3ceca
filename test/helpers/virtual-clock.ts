import { ManualClock, settle } from './manual-clock.js';

/**
 * A ManualClock that knows when its next timer is due, so a test can move time straight to it once
 * nothing else is happening: hours of token-bucket waits and redeliveries pass without a real
 * second of sleep.
 */
export class VirtualClock extends ManualClock {
  readonly #due = new Set<{ readonly at: number }>();

  override schedule(ms: number, fn: () => void): () => void {
    const timer = { at: this.now() + Math.max(0, ms) };
    this.#due.add(timer);
    const cancel = super.schedule(ms, () => {
      this.#due.delete(timer);
      fn();
    });
    return () => {
      this.#due.delete(timer);
      cancel();
    };
  }

  /** When the next timer is due, or undefined when none is set. */
  get nextTimerAt(): number | undefined {
    let next: number | undefined;
    for (const timer of this.#due) if (next === undefined || timer.at < next) next = timer.at;
    return next;
  }
}

/**
 * Runs `work` in virtual time: whenever nothing is in flight (`inFlight()` is 0 across two
 * event-loop turns), the clock jumps to its next timer. Real I/O (a store request, an email) is
 * never overtaken by time; every wait on the clock passes at once. Throws when work is left but
 * nothing is in flight and no timer is set: the system under test is stalled.
 */
export async function inVirtualTime<T>(
  clock: VirtualClock,
  inFlight: () => number,
  work: Promise<T>,
): Promise<T> {
  let over = false;
  const watched = work.finally(() => {
    over = true;
  });
  // Rejections surface from the awaited `watched` below, not as unhandled ones meanwhile.
  watched.catch(() => {});
  for (;;) {
    await quiet(inFlight);
    if (over) return watched;
    const next = clock.nextTimerAt;
    if (next === undefined) {
      await settle();
      if (over) return watched;
      throw new Error('stalled: work is left, nothing is in flight and no timer is set');
    }
    await clock.advance(next - clock.now());
  }
}

/** Returns once nothing is in flight across two event-loop turns. */
export async function quiet(inFlight: () => number): Promise<void> {
  for (;;) {
    await settle();
    if (inFlight() > 0) continue;
    await settle();
    if (inFlight() === 0) return;
  }
}
