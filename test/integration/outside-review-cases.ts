import { describe, expect, it } from 'vitest';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import { hmacKeyRing } from '../../shared/effects/effect-key.js';
import { StoreError } from '../../shared/errors.js';
import { defineJob } from '../../shared/job/job-definition.js';
import { type RunResult, runSlot, type SlotBackend } from '../../shared/job/run-slot.js';
import { emfMetrics } from '../../shared/telemetry/metrics.js';
import { CountingSender } from '../helpers/counting-sender.js';
import { EmfRecorder, RecordingLog, schedulerEvent, testHandler } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';

/*
 * The outside review's runtime cases (issue 12) whose behaviour lives partly in each backend's
 * adapter (a fenced release, a pinned key version): described once here and run on every backend
 * by its own test file (outside-review.test.ts on dynalite and in memory, postgres-outside-review.test.ts on
 * embedded Postgres with its production lease clock, the database's).
 */

const WINDOW = '2026-11-30T06:00:00Z';
const SLOT = { jobId: 'weekly-report', window: WINDOW };

/**
 * Runs the cases against `makeBackend`, which returns a fresh backend (its own table or schema) on
 * every call.
 */
export function describeOutsideReviewCases(name: string, makeBackend: () => Promise<SlotBackend>): void {
  describe(`${name}: a holder whose lease ran out by its own clock (issue 12, item 7)`, () => {
    it('says lease-lost, not fenced, and gives back the slot it still held so the next run starts at once', async () => {
      const backend = await makeBackend();
      const clock = new ManualClock(Date.parse(WINDOW) + 500);
      // Every renewal fails (a store too slow to answer): nobody took the slot over.
      const slowRenewals: SlotBackend = {
        ...backend,
        claims: {
          claim: (...args) => backend.claims.claim(...args),
          renew: async () => {
            throw new StoreError('renew', 'renewal timed out');
          },
          checkpoint: (...args) => backend.claims.checkpoint(...args),
          complete: (...args) => backend.claims.complete(...args),
          release: (...args) => backend.claims.release(...args),
          read: (...args) => backend.claims.read(...args),
          shardFinished: (...args) => backend.claims.shardFinished(...args),
          finishSharded: (...args) => backend.claims.finishSharded(...args),
        },
      };
      const sender = new CountingSender(async () => {
        // Each send takes 5 s of the run's clock; the 60 s lease ends after about ten of them.
        await clock.advance(5_000);
      });
      const { handler } = testHandler(
        weeklyReportJob({ customers: () => syntheticCustomers(100), sender, concurrency: 1 }),
        slowRenewals,
        { clock },
      );
      const result = await handler(schedulerEvent('weekly-report', WINDOW));
      expect(result).toMatchObject({ status: 'lease-lost', epoch: 1, released: true });
      expect(sender.total).toBeLessThan(12);
      expect(await backend.claims.read(SLOT)).toMatchObject({ state: 'RELEASED', epoch: 1 });
      // No wait for the lease to run out: the next delivery claims it at once.
      const nextSender = new CountingSender();
      const next = testHandler(
        weeklyReportJob({ customers: () => syntheticCustomers(100), sender: nextSender }),
        backend,
        { clock },
      );
      expect(
        await next.handler({ ...schedulerEvent('weekly-report', WINDOW), continuation: true }),
      ).toMatchObject({
        status: 'completed',
        epoch: 2,
        window: { done: 100 },
      });
      // The first run's sends are skipped, not repeated: every customer has exactly one email.
      expect(sender.total + nextSender.total).toBe(100);
    });
  });

  describe(`${name}: rotating the effect-key secret (issue 12, item 4)`, () => {
    const V1 = 'first-secret-0123456789abcdef';
    const V2 = 'second-secret-0123456789abcdef';

    it('sends nobody a second email when the secret rotates mid-window: the window keeps its version', async () => {
      const backend = await makeBackend();
      const clock = new ManualClock(Date.parse(WINDOW) + 500);
      const sender = new CountingSender();
      const job = weeklyReportJob({ customers: () => syntheticCustomers(60), sender, concurrency: 1 });
      const before = testHandler(job, backend, {
        clock,
        keyRing: hmacKeyRing({ current: 'v1', secrets: { v1: V1 } }),
      });
      // The first run gets time for 25 emails, then yields.
      let sent = 0;
      const first = await before.handler(schedulerEvent('weekly-report', WINDOW), {
        awsRequestId: 'run-1',
        getRemainingTimeInMillis: () => (sender.total - sent >= 25 ? 0 : 900_000),
      });
      sent = sender.total;
      expect(first).toMatchObject({ status: 'yielded', reason: 'time' });
      expect(await backend.claims.read(SLOT)).toMatchObject({ keyVersion: 'v1' });

      // The secret rotates: v2 is current, v1 stays readable.
      const rotated = hmacKeyRing({ current: 'v2', secrets: { v1: V1, v2: V2 } });
      const after = testHandler(job, backend, { clock, keyRing: rotated });
      const second = await after.handler({ ...schedulerEvent('weekly-report', WINDOW), continuation: true });
      expect(second).toMatchObject({ status: 'completed', window: { done: 60, inDoubt: 0 } });
      expect(sender.total).toBe(60);
      expect(sender.duplicates()).toBe(0);

      // The next window starts on the new version.
      const nextWindow = '2026-12-07T06:00:00Z';
      await clock.advance(Date.parse(nextWindow) - clock.now() + 500);
      await after.handler(schedulerEvent('weekly-report', nextWindow));
      expect(await backend.claims.read({ jobId: 'weekly-report', window: nextWindow })).toMatchObject({
        state: 'DONE',
        keyVersion: 'v2',
      });
    });

    it('never runs a window whose key version can no longer be read: STUCK, with what to restore', async () => {
      const backend = await makeBackend();
      const clock = new ManualClock(Date.parse(WINDOW) + 500);
      const sender = new CountingSender();
      const job = weeklyReportJob({ customers: () => syntheticCustomers(30), sender, concurrency: 1 });
      const before = testHandler(job, backend, {
        clock,
        keyRing: hmacKeyRing({ current: 'v1', secrets: { v1: V1 } }),
      });
      await before.handler(schedulerEvent('weekly-report', WINDOW), {
        awsRequestId: 'run-1',
        getRemainingTimeInMillis: () => (sender.total >= 10 ? 0 : 900_000),
      });
      const lost = testHandler(job, backend, {
        clock,
        keyRing: hmacKeyRing({ current: 'v2', secrets: { v2: V2 } }),
      });
      const result = await lost.handler({ ...schedulerEvent('weekly-report', WINDOW), continuation: true });
      expect(result).toMatchObject({ status: 'stuck' });
      expect(result.status === 'stuck' && result.reason).toMatch(/effect-key version "v1" cannot be read/);
      expect(sender.total).toBe(10);
      expect(await backend.claims.read(SLOT)).toMatchObject({ state: 'STUCK' });
    });
  });
}

/** Every slot and effect record a fresh store holds, counted where they are stored, under any key. */
export interface StoredRecords {
  readonly slots: number;
  readonly effects: number;
}

/**
 * The review's first case (issue 12, item 1), end to end through runSlot, which the handler's own
 * canonicalisation does not guard: `makeStore` returns a fresh backend and a count of what its
 * store holds, read past the adapter (a scan, a query of the tables).
 */
export function describeWindowSpellingCase(
  name: string,
  makeStore: () => Promise<{ backend: SlotBackend; stored(): Promise<StoredRecords> }>,
): void {
  describe(`${name}: one instant, however its window is spelled (issue 12, item 1)`, () => {
    it('performs a ctx.once effect once when runSlot is given one instant as ….000Z, +01:00 and …Z: one slot, one effect', async () => {
      const { backend, stored } = await makeStore();
      let performed = 0;
      const job = defineJob({
        id: 'weekly-report',
        async run(ctx) {
          await ctx.once('the-report', async () => {
            performed++;
          });
        },
      });
      const clock = new ManualClock(Date.parse(WINDOW) + 500);
      const emf = new EmfRecorder();
      const metrics = emfMetrics({ jobId: 'weekly-report', write: emf.write });
      const results: RunResult[] = [];
      // The first fire spells it as toISOString does, so the record's own key is put to the test too.
      for (const [i, window] of ['2026-11-30T06:00:00.000Z', '2026-11-30T07:00:00+01:00', WINDOW].entries()) {
        results.push(
          await runSlot({
            job,
            backend,
            clock,
            metrics,
            log: new RecordingLog(),
            slot: { jobId: 'weekly-report', window },
            delivery: { invocationId: `fire-${i + 1}` },
          }),
        );
      }
      await metrics.flush();
      expect(results.map((r) => r.status)).toEqual(['completed', 'duplicate', 'duplicate']);
      expect(results[1]).toMatchObject({ outcome: { kind: 'done', state: 'DONE' } });
      expect(performed).toBe(1);
      expect(emf.sum('DuplicateClaim')).toBe(2);
      expect(await stored()).toEqual({ slots: 1, effects: 1 });
      expect(await backend.claims.read(SLOT)).toMatchObject({
        state: 'DONE',
        epoch: 1,
        summary: { done: 1, inDoubt: 0, failed: 0 },
      });
    });
  });
}
