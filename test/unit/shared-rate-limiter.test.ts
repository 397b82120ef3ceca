import { describe, expect, it } from 'vitest';
import { MemoryRateLimitStore } from '../../shared/backends/memory/memory-rate-limit-store.js';
import type { Clock } from '../../shared/clock.js';
import type { RateLimitStore } from '../../shared/effects/rate-limit-store.js';
import { SharedRateLimiter } from '../../shared/effects/shared-rate-limiter.js';
import { ConfigurationError, StoreError } from '../../shared/errors.js';
import { settle } from '../helpers/manual-clock.js';
import { busiestWindow, runFleet } from '../helpers/send-rate-fleet.js';
import { VirtualClock } from '../helpers/virtual-clock.js';

const T0 = Date.parse('2026-11-30T06:00:00Z');

/** `base` read `offsetMs` ahead (behind, when negative): a worker whose clock is off. */
const offsetClock = (base: Clock, offsetMs: number): Clock => ({
  now: () => base.now() + offsetMs,
  schedule: (ms, fn) => base.schedule(ms, fn),
});

const lostBy = (limiters: readonly SharedRateLimiter[]) => limiters.reduce((n, l) => n + l.stats.lost, 0);

describe('SharedRateLimiter', () => {
  it("stays within the rate plus rate × skew when workers' clocks disagree by up to 100 ms, and the long run keeps the rate", async () => {
    const clock = new VirtualClock(T0);
    const store = new MemoryRateLimitStore();
    const offsets = [-50, -25, 25, 50];
    const rate = 100;
    const fleet = await runFleet(
      clock,
      { worker: () => store },
      {
        workers: 4,
        senders: 4,
        ratePerSecond: rate,
        until: T0 + 10_000,
        clockOf: (i) => offsetClock(clock, offsets[i]!),
      },
    );
    // Skew of 100 ms between the fastest and slowest clock: at most 10 sends more in any second.
    expect(busiestWindow(fleet.sends, 1_000)).toBeLessThanOrEqual(rate + 1 + rate * 0.1);
    expect(fleet.sends.length).toBeLessThanOrEqual(rate * 10 + 1 + rate * 0.1);
    expect(fleet.sends.length).toBeGreaterThanOrEqual(rate * 10 * 0.9);
    expect(lostBy(fleet.limiters)).toBe(0);
  });

  it("maps a store clock an hour off the workers' onto their own, so no send goes early and no token is lost", async () => {
    const clock = new VirtualClock(T0);
    const store = new MemoryRateLimitStore({ clock: offsetClock(clock, 3_600_000) });
    const rate = 50;
    const fleet = await runFleet(
      clock,
      { worker: () => store },
      { workers: 4, senders: 2, ratePerSecond: rate, until: T0 + 4_000 },
    );
    expect(fleet.sends[0]).toBe(T0);
    expect(busiestWindow(fleet.sends, 1_000)).toBeLessThanOrEqual(rate + 1);
    expect(busiestWindow(fleet.sends, 100)).toBeLessThanOrEqual(rate / 10 + 1);
    expect(fleet.sends.length).toBeGreaterThanOrEqual(rate * 4 * 0.9);
    expect(lostBy(fleet.limiters)).toBe(0);
  });

  it('asks a round trip ahead once it has measured one, so a slow store does not cost tokens after the first reply', async () => {
    const clock = new VirtualClock(T0);
    const store = new MemoryRateLimitStore();
    const rate = 100;
    const fleet = await runFleet(
      clock,
      { worker: () => store },
      { workers: 2, senders: 4, ratePerSecond: rate, until: T0 + 5_000, roundTripMs: 20 },
    );
    // Before any reply a worker cannot know the round trip: its first reservation, on a quiet
    // timeline, arrives 20 ms after its token was due and that token is lost. Never again after.
    expect(lostBy(fleet.limiters)).toBeLessThanOrEqual(2);
    expect(busiestWindow(fleet.sends, 1_000)).toBeLessThanOrEqual(rate + 1);
    expect(fleet.sends.length).toBeGreaterThanOrEqual(rate * 5 * 0.9);
  });

  it('fails the waiters that have no token when the store fails, so their senders report the email not sent, and reserves again for the next caller', async () => {
    const clock = new VirtualClock(T0);
    const memory = new MemoryRateLimitStore();
    let failing = true;
    const store: RateLimitStore = {
      reserve: (request) =>
        failing
          ? Promise.reject(
              new StoreError('reserve send rate', 'DynamoDB reservation failed after the retries'),
            )
          : memory.reserve(request),
    };
    const limiter = new SharedRateLimiter({ store, ratePerSecond: 10, clock });
    const outcomes = await Promise.allSettled([limiter.take(), limiter.take()]);
    expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected']);
    expect(outcomes.every((o) => o.status === 'rejected' && o.reason instanceof StoreError)).toBe(true);
    expect(limiter.waiting).toBe(0);

    failing = false;
    await limiter.take();
    expect(limiter.stats).toEqual({ reservations: 1, reserved: 1, used: 1, lost: 0 });
  });

  it('does not hand out a token its aborted caller left once the token is past its last usable moment', async () => {
    const clock = new VirtualClock(T0);
    const store = new MemoryRateLimitStore();
    // Another worker holds the first second of the timeline.
    await store.reserve({ now: T0, spanMs: 1_000, notBeforeMs: 0 });
    const limiter = new SharedRateLimiter({ store, ratePerSecond: 10, clock });
    const controller = new AbortController();
    const first = limiter.take(controller.signal).catch((error: unknown) => error);
    await settle();
    expect(limiter.stats.reserved).toBe(1);
    controller.abort(new Error('run stopping'));
    expect(await first).toMatchObject({ message: 'run stopping' });

    // 50 ms after the token (due at T0 + 1000) was due: burst 1 allows none of that lateness.
    await clock.advance(1_050);
    let releasedAt: number | undefined;
    const second = limiter.take().then(() => {
      releasedAt = clock.now();
    });
    await settle();
    await clock.advance(clock.nextTimerAt! - clock.now());
    await second;
    // Its own token, next on the timeline (T0 + 1100): never the stale one at 1050.
    expect(releasedAt).toBe(T0 + 1_100);
    expect(limiter.stats).toEqual({ reservations: 2, reserved: 2, used: 1, lost: 1 });
  });

  it('refuses a batch size that is not a whole number of at least 1, naming the value', () => {
    const store = new MemoryRateLimitStore();
    expect(() => new SharedRateLimiter({ store, ratePerSecond: 10, maxBatch: 0 })).toThrow(
      ConfigurationError,
    );
    expect(() => new SharedRateLimiter({ store, ratePerSecond: 10, maxBatch: 2.5 })).toThrow(
      /maxBatch is 2.5/,
    );
    expect(() => new SharedRateLimiter({ store, ratePerSecond: 0 })).toThrow(/ratePerSecond is 0/);
  });
});
