import { describe, expect, it, vi } from 'vitest';
import { SharedRateLimiter } from '../../shared/effects/shared-rate-limiter.js';
import { busiestWindow, runFleet, type SendRateBackend } from '../helpers/send-rate-fleet.js';
import { VirtualClock } from '../helpers/virtual-clock.js';

export type { SendRateBackend } from '../helpers/send-rate-fleet.js';

const T0 = Date.parse('2026-11-30T06:00:00Z');
let jobs = 0;

/** A job id no other test of the file uses, so tests on one table or schema never share a timeline. */
const freshJob = () => `rate-job-${process.pid}-${++jobs}`;

/**
 * The send-rate contract: what every RateLimitStore must do alone, and what SharedRateLimiter
 * workers on it must do together. `makeBackend` gives a fresh job's timeline for each test.
 */
export function describeSendRateContract(
  name: string,
  makeBackend: (jobId: string) => Promise<SendRateBackend>,
): void {
  describe(`send-rate contract: ${name}`, () => {
    it('does not hand two workers the same part of the timeline when they reserve at the same moment', async () => {
      const backend = await makeBackend(freshJob());
      const starts = await Promise.all(
        Array.from({ length: 8 }, () => backend.worker().reserve({ now: T0, spanMs: 100, notBeforeMs: 0 })),
      );
      const sorted = starts.map((r) => r.start).sort((a, b) => a - b);
      // Eight spans laid end to end from now: no overlap, no gap.
      expect(sorted).toEqual(Array.from({ length: 8 }, (_, i) => T0 + i * 100));
      expect(starts.every((r) => r.storeNow === undefined)).toBe(true);
    });

    it('continues a busy timeline from its end, not from now', async () => {
      const backend = await makeBackend(freshJob());
      const store = backend.worker();
      expect(await store.reserve({ now: T0, spanMs: 5_000, notBeforeMs: 0 })).toEqual({ start: T0 });
      expect(await store.reserve({ now: T0 + 10, spanMs: 2.5, notBeforeMs: -4 })).toEqual({
        start: T0 + 5_000,
      });
      expect(await backend.worker().reserve({ now: T0 + 20, spanMs: 1, notBeforeMs: 0 })).toEqual({
        start: T0 + 5_002.5,
      });
    });

    it('does not grant an idle hour as a burst: a quiet timeline restarts at now plus not-before', async () => {
      const backend = await makeBackend(freshJob());
      const store = backend.worker();
      await store.reserve({ now: T0, spanMs: 10, notBeforeMs: 0 });
      const later = T0 + 3_600_000;
      // A worker whose last reservation saw the timeline busy guesses wrong once and still lands right.
      expect(await store.reserve({ now: later, spanMs: 10, notBeforeMs: -20 })).toEqual({
        start: later - 20,
      });
      // Restarted there, the timeline is busy again for a worker whose floor it has passed.
      expect(await backend.worker().reserve({ now: later, spanMs: 10, notBeforeMs: -15 })).toEqual({
        start: later - 10,
      });
      expect(await store.reserve({ now: later + 3_600_000, spanMs: 10, notBeforeMs: 5 })).toEqual({
        start: later + 3_600_005,
      });
    });

    it("keeps each job's timeline apart, so one job's sends never delay another's", async () => {
      const a = await makeBackend(freshJob());
      const b = await makeBackend(freshJob());
      await a.worker().reserve({ now: T0, spanMs: 60_000, notBeforeMs: 0 });
      expect(await b.worker().reserve({ now: T0, spanMs: 10, notBeforeMs: 0 })).toEqual({ start: T0 });
    });

    it('keeps 8 concurrent workers within 10% of the rate and never above it by more than one burst in any window', async () => {
      const clock = new VirtualClock(T0);
      const rate = 200;
      const spanMs = 10_000;
      const fleet = await runFleet(clock, await makeBackend(freshJob()), {
        workers: 8,
        senders: 4,
        ratePerSecond: rate,
        until: T0 + spanMs,
      });
      const perSecond = fleet.sends.length / (spanMs / 1000);
      expect(perSecond).toBeGreaterThanOrEqual(rate * 0.9);
      expect(perSecond).toBeLessThanOrEqual(rate + 1);
      expect(busiestWindow(fleet.sends, 1_000)).toBeLessThanOrEqual(rate + 1);
      expect(busiestWindow(fleet.sends, 100)).toBeLessThanOrEqual(rate / 10 + 1);
      // Every worker got its share: none was starved by the others' batches.
      for (const limiter of fleet.limiters)
        expect(limiter.stats.used).toBeGreaterThan(fleet.sends.length / 16);
      // One write serves several sends (each worker reserves for its waiting senders at once).
      expect(fleet.requests).toBeLessThan(fleet.sends.length / 2);
      expect(fleet.limiters.reduce((lost, l) => lost + l.stats.lost, 0)).toBe(0);
    });

    it('does not exceed the rate plus one burst when a backfill of 8 workers starts together after an idle hour', async () => {
      const clock = new VirtualClock(T0);
      const backend = await makeBackend(freshJob());
      const rate = 50;
      const burst = 5;
      // A run sent before: the timeline is an hour behind when the backfill starts.
      await runFleet(clock, backend, {
        workers: 1,
        senders: 2,
        ratePerSecond: rate,
        burst,
        until: T0 + 1_000,
      });
      const start = T0 + 3_600_000;
      await clock.advance(start - clock.now());
      const fleet = await runFleet(clock, backend, {
        workers: 8,
        senders: 4,
        ratePerSecond: rate,
        burst,
        until: start + 3_000,
      });
      // The idle hour bought one burst, no more: at most `burst` at once, then the rate.
      expect(fleet.sends.filter((t) => t === start)).toHaveLength(burst);
      expect(busiestWindow(fleet.sends, 1_000)).toBeLessThanOrEqual(rate + burst);
      expect(busiestWindow(fleet.sends, 200)).toBeLessThanOrEqual(rate / 5 + burst);
      expect(fleet.sends.length).toBeGreaterThanOrEqual(rate * 3 * 0.9);
      expect(fleet.sends.length).toBeLessThanOrEqual(rate * 3 + burst);
      // The store restarted the quiet timeline at now: no worker was handed tokens an hour stale.
      expect(fleet.limiters.reduce((lost, l) => lost + l.stats.lost, 0)).toBe(0);
    });

    it('releases a waiter at once when its signal aborts, and lets it send nothing', async () => {
      const clock = new VirtualClock(T0);
      const backend = await makeBackend(freshJob());
      // Another worker holds the next ten seconds of the timeline.
      await backend.worker().reserve({ now: T0, spanMs: 10_000, notBeforeMs: 0 });
      const limiter = new SharedRateLimiter({ store: backend.worker(), ratePerSecond: 1, clock });
      const controller = new AbortController();
      let sent = 0;
      const waiting = limiter.take(controller.signal).then(
        () => sent++,
        (error: unknown) => error,
      );
      // The reservation lands: the waiter now holds a token ten seconds away.
      await vi.waitFor(() => expect(limiter.stats.reserved).toBe(1));
      controller.abort(new Error('lease lost'));
      expect(await waiting).toMatchObject({ message: 'lease lost' });
      expect(limiter.waiting).toBe(0);
      await clock.advance(60_000);
      expect(sent).toBe(0);
      expect(limiter.stats.used).toBe(0);
    });
  });
}
