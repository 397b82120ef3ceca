import { describe, expect, it } from 'vitest';
import { type Clock, scheduleAt } from '../../shared/clock.js';
import { ManualClock } from '../helpers/manual-clock.js';

const DAY_MS = 86_400_000;
/** setTimeout fires at once, with a TimeoutOverflowWarning, when asked for longer than this. */
const SET_TIMEOUT_MAX_MS = 2 ** 31 - 1;

/** A manual clock that records every delay it is asked for, as setTimeout would receive it. */
function recordingClock() {
  const manual = new ManualClock(Date.parse('2026-01-01T00:00:00Z'));
  const delays: number[] = [];
  const clock: Clock = {
    now: () => manual.now(),
    schedule(ms, fn) {
      delays.push(ms);
      return manual.schedule(ms, fn);
    },
  };
  return { manual, clock, delays };
}

describe('scheduleAt', () => {
  it('waits 40 days in timers setTimeout takes (24.8 days at most), firing once at the time', async () => {
    const { manual, clock, delays } = recordingClock();
    let fired = 0;
    scheduleAt(clock, manual.now() + 40 * DAY_MS, () => fired++);

    await manual.advance(40 * DAY_MS - 1);
    expect(fired).toBe(0);
    await manual.advance(1);
    expect(fired).toBe(1);
    expect(delays).toHaveLength(2);
    expect(Math.max(...delays)).toBeLessThanOrEqual(SET_TIMEOUT_MAX_MS);
    expect(manual.pending).toBe(0);
  });

  it('cancels whichever of its chained timers is waiting', async () => {
    const { manual, clock, delays } = recordingClock();
    let fired = 0;
    const cancel = scheduleAt(clock, manual.now() + 40 * DAY_MS, () => fired++);
    await manual.advance(30 * DAY_MS);
    expect(delays).toHaveLength(2);
    cancel();
    await manual.advance(20 * DAY_MS);
    expect(fired).toBe(0);
    expect(manual.pending).toBe(0);
  });
});
