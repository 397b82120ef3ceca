import { describe, expect, it } from 'vitest';
import type { ScheduleSpec } from '../../shared/job/job-spec.js';
import type { Claim, ClaimStore, WindowSummary } from '../../shared/slot/ports.js';
import { emfMetrics } from '../../shared/telemetry/metrics.js';
import {
  type AuditWindowsArgs,
  auditWindows,
  countWatchdogMetrics,
  type WindowAudit,
} from '../../shared/watchdog/window-audit.js';
import { EmfRecorder } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';

const MINUTE = 60_000;
const HOUR = 3_600_000;
const DAY = 86_400_000;
const WEEKLY: ScheduleSpec = { expression: 'cron(0 9 ? * MON *)', timeZone: 'Europe/Moscow' };
const MONTHLY: ScheduleSpec = { expression: 'cron(0 9 1 * ? *)', timeZone: 'Europe/Moscow' };
/** 02:30 in Berlin: a local time the spring-forward night skips and the fall-back night repeats. */
const NIGHTLY_BERLIN: ScheduleSpec = { expression: 'cron(30 2 * * ? *)', timeZone: 'Europe/Berlin' };
const DEADLINE = 6 * HOUR;
const GRACE = 15 * MINUTE;

/** The slot records a window can be left with, written through the store's own runtime port. */
class Records {
  readonly #store: ClaimStore;
  readonly #jobId: string;
  #owners = 0;
  constructor(store: ClaimStore, jobId: string) {
    this.#store = store;
    this.#jobId = jobId;
  }

  /** Claims the window at `at`, its deadline `deadline` (runSlot's: scheduled time + the job's deadline). */
  async claim(window: string, at: number, options: { deadline?: number; maxAttempts?: number } = {}) {
    const owner = `replica-${++this.#owners}/contract`;
    const outcome = await this.#store.claim(
      { jobId: this.#jobId, window },
      {
        owner,
        leaseMs: MINUTE,
        maxAttempts: options.maxAttempts ?? 3,
        expiresAtSeconds: Math.ceil(Date.parse(window) / 1000) + 35 * 86_400,
        deadline: options.deadline ?? Date.parse(window) + DEADLINE,
        delivery: { executionId: `exec-${owner}`, attemptNumber: 1, invocationId: owner },
      },
      at,
    );
    if (outcome.kind !== 'claimed') throw new Error(`expected to claim ${window}, got ${outcome.kind}`);
    return outcome.claim;
  }

  async done(window: string, at: number, failed = 0): Promise<void> {
    const claim = await this.claim(window, at);
    expect(await this.#store.complete(claim, summary(failed), at + MINUTE / 2)).toEqual({ kind: 'ok' });
  }

  /** Stopped half way: released for a continuation that never came. */
  async released(window: string, at: number, options: { deadline?: number } = {}): Promise<Claim> {
    const claim = await this.claim(window, at, options);
    const outcome = await this.#store.release(
      claim,
      {
        kind: 'yield',
        runsWithoutProgress: 0,
        checkpoint: { positions: { customers: '6200' }, walked: false },
      },
      at + MINUTE / 2,
    );
    expect(outcome).toEqual({ kind: 'ok' });
    return claim;
  }

  async stuck(window: string, at: number): Promise<void> {
    const claim = await this.claim(window, at);
    const outcome = await this.#store.release(
      claim,
      {
        kind: 'stuck',
        reason: 'no progress in 3 consecutive runs (the last stopped: provider-failing)',
        runsWithoutProgress: 3,
      },
      at + MINUTE / 2,
    );
    expect(outcome).toEqual({ kind: 'ok' });
  }

  async failed(window: string, at: number): Promise<void> {
    const claim = await this.claim(window, at, { maxAttempts: 1 });
    await this.#store.release(
      claim,
      { kind: 'error', message: 'TypeError: customers is not iterable' },
      at + 1,
    );
  }
}

function summary(failed: number): WindowSummary {
  return {
    done: 12_400 - failed,
    inDoubt: 0,
    failed,
    inDoubtKeys: [],
    failedKeys: failed > 0 ? ['9f2c41d07a1e'] : [],
    runs: 1,
  };
}

/** Each window's verdict, in schedule order. */
const verdicts = (audit: WindowAudit) => audit.windows.map((w) => [w.window, w.verdict, w.state ?? null]);

/**
 * The watchdog's audit (shared/watchdog/window-audit.ts) against a backend's claim store: windows
 * come from the schedule, verdicts from what the store's `read` returns for records the store's own
 * claim, release and complete wrote. Every backend whose records carry the window's deadline passes
 * it unchanged: DynamoDB, the in-memory store, Postgres.
 */
export function describeWatchdogAudit(name: string, makeClaims: () => Promise<ClaimStore>): void {
  async function setup(jobId: string) {
    const store = await makeClaims();
    const records = new Records(store, jobId);
    const audit = (clock: ManualClock, schedule: ScheduleSpec, more: Partial<AuditWindowsArgs> = {}) =>
      auditWindows({
        jobId,
        schedule,
        deadlineMs: DEADLINE,
        graceMs: GRACE,
        lookbackMs: 48 * HOUR,
        now: clock.now(),
        claims: store,
        ...more,
      });
    return { store, records, audit };
  }

  describe(`${name}: the watchdog audit`, () => {
    it('pages a weekly window that never ran once its grace is over, and not before', async () => {
      const { audit } = await setup('weekly-report');
      const clock = new ManualClock(Date.parse('2026-11-30T06:10:00Z'));
      const early = await audit(clock, WEEKLY);
      expect(verdicts(early)).toEqual([['2026-11-30T06:00:00Z', 'pending', null]]);
      expect(early.windows[0]).toMatchObject({
        local: 'Mon 2026-11-30 09:00 Europe/Moscow',
        dueBy: Date.parse('2026-11-30T06:15:00Z'),
      });

      await clock.advance(10 * MINUTE);
      const late = await audit(clock, WEEKLY);
      expect(verdicts(late)).toEqual([['2026-11-30T06:00:00Z', 'missing', null]]);
      expect(late.windows[0]?.reason).toContain(
        'no slot record 20 min after its scheduled time (grace 15 min)',
      );
      expect(late.counts).toEqual({ ok: 0, partial: 0, missing: 1, incomplete: 0, pending: 0 });

      const emf = new EmfRecorder();
      const metrics = emfMetrics({ jobId: 'weekly-report', write: emf.write });
      countWatchdogMetrics(late, metrics);
      await metrics.flush();
      expect(emf.records).toHaveLength(1);
      expect(emf.records[0]).toMatchObject({
        JobId: 'weekly-report',
        WindowMissing: 1,
        WindowIncomplete: 0,
        WatchdogRun: 1,
      });
    });

    it('pages a weekly window that stopped half way: left RELEASED past its deadline, or STUCK', async () => {
      const { records, audit } = await setup('weekly-report');
      await records.stuck('2026-11-23T06:00:00Z', Date.parse('2026-11-23T06:00:05Z'));
      await records.released('2026-11-30T06:00:00Z', Date.parse('2026-11-30T06:00:05Z'));
      const clock = new ManualClock(Date.parse('2026-11-30T08:00:00Z'));
      const lookbackMs = 8 * DAY;

      const during = await audit(clock, WEEKLY, { lookbackMs });
      // STUCK pages at once; the released window still has until its deadline to be resumed.
      expect(verdicts(during)).toEqual([
        ['2026-11-23T06:00:00Z', 'incomplete', 'STUCK'],
        ['2026-11-30T06:00:00Z', 'pending', 'RELEASED'],
      ]);
      expect(during.windows[0]?.reason).toBe(
        'STUCK: no progress in 3 consecutive runs (the last stopped: provider-failing)',
      );
      expect(during.windows[1]?.dueBy).toBe(Date.parse('2026-11-30T12:00:00Z'));

      await clock.advance(4 * HOUR + MINUTE);
      const after = await audit(clock, WEEKLY, { lookbackMs });
      expect(verdicts(after)).toEqual([
        ['2026-11-23T06:00:00Z', 'incomplete', 'STUCK'],
        ['2026-11-30T06:00:00Z', 'incomplete', 'RELEASED'],
      ]);
      expect(after.windows[1]?.reason).toBe('RELEASED past its deadline 2026-11-30T12:00:00Z (1 min ago)');
      expect(after.counts.incomplete).toBe(2);
    });

    it('reports DONE as ok and PARTIAL as partial, without counting either incomplete', async () => {
      const { records, audit } = await setup('weekly-report');
      await records.done('2026-11-23T06:00:00Z', Date.parse('2026-11-23T06:00:05Z'));
      await records.done('2026-11-30T06:00:00Z', Date.parse('2026-11-30T06:00:05Z'), 3);
      const clock = new ManualClock(Date.parse('2026-12-01T06:00:00Z'));
      const result = await audit(clock, WEEKLY, { lookbackMs: 9 * DAY });
      expect(verdicts(result)).toEqual([
        ['2026-11-23T06:00:00Z', 'ok', 'DONE'],
        ['2026-11-30T06:00:00Z', 'partial', 'PARTIAL'],
      ]);
      expect(result.windows[1]?.reason).toBe(
        'PARTIAL: 12397 done, 0 in doubt, 3 failed over 1 runs: effects that failed for good page through EffectFailed',
      );
      expect(result.counts).toEqual({ ok: 1, partial: 1, missing: 0, incomplete: 0, pending: 0 });
    });

    it('pages a FAILED window, and one still RUNNING past its deadline', async () => {
      const { records, audit } = await setup('weekly-report');
      await records.failed('2026-11-23T06:00:00Z', Date.parse('2026-11-23T06:00:05Z'));
      // A holder still renewing at 12:05 is past the 12:00 deadline all the same.
      await records.claim('2026-11-30T06:00:00Z', Date.parse('2026-11-30T12:04:30Z'), {
        deadline: Date.parse('2026-11-30T12:00:00Z'),
      });
      const clock = new ManualClock(Date.parse('2026-11-30T12:05:00Z'));
      const result = await audit(clock, WEEKLY, { lookbackMs: 8 * DAY });
      expect(verdicts(result)).toEqual([
        ['2026-11-23T06:00:00Z', 'incomplete', 'FAILED'],
        ['2026-11-30T06:00:00Z', 'incomplete', 'RUNNING'],
      ]);
      expect(result.windows[0]?.reason).toBe(
        'FAILED after 1 failed runs: TypeError: customers is not iterable',
      );
    });

    it('judges a window by the deadline its record carries: a backfill claimed late has until its own', async () => {
      const { records, audit } = await setup('weekly-report');
      // First claimed at 10:00 by a backfill: runSlot stores 10:00 + 6 h, not 06:00 + 6 h.
      await records.released('2026-11-30T06:00:00Z', Date.parse('2026-11-30T10:00:00Z'), {
        deadline: Date.parse('2026-11-30T16:00:00Z'),
      });
      const clock = new ManualClock(Date.parse('2026-11-30T13:00:00Z'));
      const before = await audit(clock, WEEKLY);
      expect(verdicts(before)).toEqual([['2026-11-30T06:00:00Z', 'pending', 'RELEASED']]);
      expect(before.windows[0]?.dueBy).toBe(Date.parse('2026-11-30T16:00:00Z'));
      await clock.advance(3 * HOUR + 1_000);
      expect(verdicts(await audit(clock, WEEKLY))).toEqual([
        ['2026-11-30T06:00:00Z', 'incomplete', 'RELEASED'],
      ]);
    });

    it('pages a monthly window that never ran, beside last month’s that did', async () => {
      const { records, audit } = await setup('monthly-invoice');
      await records.done('2026-11-01T06:00:00Z', Date.parse('2026-11-01T06:00:05Z'));
      const clock = new ManualClock(Date.parse('2026-12-01T07:00:00Z'));
      const result = await audit(clock, MONTHLY, { lookbackMs: 34 * DAY });
      expect(verdicts(result)).toEqual([
        ['2026-11-01T06:00:00Z', 'ok', 'DONE'],
        ['2026-12-01T06:00:00Z', 'missing', null],
      ]);
    });

    it('expects no window in the hour the spring-forward night skips, and one in the hour fall-back repeats', async () => {
      const { records, audit } = await setup('nightly-berlin');
      const spring = await audit(new ManualClock(Date.parse('2026-03-30T12:00:00Z')), NIGHTLY_BERLIN);
      // 02:30 on 29 March does not exist in Berlin: the only window is the next night's, 02:30 CEST.
      expect(verdicts(spring)).toEqual([['2026-03-30T00:30:00Z', 'missing', null]]);
      expect(spring.windows[0]?.local).toBe('Mon 2026-03-30 02:30 Europe/Berlin');

      await records.done('2026-10-25T00:30:00Z', Date.parse('2026-10-25T00:30:05Z'));
      const autumn = await audit(new ManualClock(Date.parse('2026-10-25T12:00:00Z')), NIGHTLY_BERLIN, {
        lookbackMs: 24 * HOUR,
      });
      // 02:30 happens twice on 25 October (00:30Z in CEST, 01:30Z in CET): Scheduler fires the first.
      expect(verdicts(autumn)).toEqual([['2026-10-25T00:30:00Z', 'ok', 'DONE']]);
    });

    it('counts a rate() schedule from its start, and expects nothing before notBefore', async () => {
      const { records, audit } = await setup('payment-reminder');
      const rate: ScheduleSpec = { expression: 'rate(15 minutes)', timeZone: 'UTC' };
      const rateStart = Date.parse('2026-11-30T06:07:00Z');
      await records.done('2026-11-30T06:07:00Z', Date.parse('2026-11-30T06:07:05Z'));
      await records.done('2026-11-30T06:22:00Z', Date.parse('2026-11-30T06:22:05Z'));
      const clock = new ManualClock(Date.parse('2026-11-30T06:40:00Z'));
      const result = await audit(clock, rate, { rateStart, lookbackMs: 2 * HOUR, deadlineMs: 15 * MINUTE });
      expect(verdicts(result)).toEqual([
        ['2026-11-30T06:07:00Z', 'ok', 'DONE'],
        ['2026-11-30T06:22:00Z', 'ok', 'DONE'],
        ['2026-11-30T06:37:00Z', 'pending', null],
      ]);

      const deployedTuesday = await audit(new ManualClock(Date.parse('2026-12-01T12:00:00Z')), WEEKLY, {
        notBefore: Date.parse('2026-12-01T09:00:00Z'),
      });
      expect(deployedTuesday.windows).toEqual([]);
      expect(deployedTuesday.from).toBe(Date.parse('2026-12-01T09:00:00Z'));
    });
  });
}
