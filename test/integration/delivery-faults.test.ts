import { describe, expect, it } from 'vitest';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import type { EmailMessage } from '../../shared/effects/email-sender.js';
import { CountingSender } from '../helpers/counting-sender.js';
import { useDynamo } from '../helpers/dynalite.js';
import { EmfRecorder, schedulerEvent, testBackend, testHandler } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';

const WINDOW = '2026-11-30T06:00:00Z';
const LEASE = 60_000;

const dynamo = useDynamo();

/** A promise with its resolver, for pausing a replica at an exact point. */
function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

describe('duplicate and repeated deliveries of one window', () => {
  it('runs once for 50 concurrent deliveries of one event and 10 more after it completes', async () => {
    const table = await dynamo.freshTable();
    const sender = new CountingSender();
    const emf = new EmfRecorder();
    const clock = new ManualClock(Date.parse(WINDOW) + 500);
    const { handler } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomers(200), sender }),
      testBackend(dynamo.client(), table),
      { clock, emf },
    );
    // Lambda's async duplicates repeat the very same event, execution id included.
    const event = schedulerEvent('weekly-report', WINDOW);
    const first = await Promise.all(Array.from({ length: 50 }, () => handler(event)));
    const later = await Promise.all(Array.from({ length: 10 }, () => handler(event)));

    expect(first.filter((r) => r.status === 'completed')).toHaveLength(1);
    expect(first.filter((r) => r.status === 'duplicate')).toHaveLength(49);
    expect(later.map((r) => (r.status === 'duplicate' ? r.outcome.kind : r.status))).toEqual(
      Array(10).fill('done'),
    );
    expect(sender.total).toBe(200);
    expect(sender.duplicates()).toBe(0);
    expect(emf.sum('ClaimAcquired')).toBe(1);
    expect(emf.sum('DuplicateClaim')).toBe(59);
  });

  it('treats a scheduler retry (same scheduled time, new execution id, attempt 2) as the same slot', async () => {
    const table = await dynamo.freshTable();
    const sender = new CountingSender();
    const clock = new ManualClock(Date.parse(WINDOW) + 500);
    const backend = testBackend(dynamo.client(), table);
    const { handler } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomers(30), sender }),
      backend,
      {
        clock,
      },
    );
    const first = await handler(schedulerEvent('weekly-report', WINDOW, 1, 'exec-1'));
    await clock.advance(3 * 60_000);
    const retry = await handler(schedulerEvent('weekly-report', WINDOW, 2, 'exec-2'));

    expect(first).toMatchObject({ status: 'completed', epoch: 1, summary: { done: 30 } });
    expect(retry).toMatchObject({
      status: 'duplicate',
      outcome: { kind: 'done', state: 'DONE', summary: { done: 30, inDoubt: 0, failed: 0, runs: 1 } },
    });
    expect(sender.total).toBe(30);
    const record = await backend.claims.read({ jobId: 'weekly-report', window: WINDOW });
    expect(record).toMatchObject({
      state: 'DONE',
      epoch: 1,
      attempts: 1,
      delivery: { executionId: 'exec-1' },
    });
  });

  it('runs the next window as its own slot', async () => {
    const table = await dynamo.freshTable();
    const sender = new CountingSender();
    const clock = new ManualClock(Date.parse(WINDOW) + 7 * 86_400_000 + 500);
    const { handler } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomers(20), sender }),
      testBackend(dynamo.client(), table),
      { clock },
    );
    const week1 = await handler(schedulerEvent('weekly-report', WINDOW));
    const week2 = await handler(schedulerEvent('weekly-report', '2026-12-07T06:00:00Z'));
    expect([week1.status, week2.status]).toEqual(['completed', 'completed']);
    expect(sender.total).toBe(40);
    expect(Math.max(...sender.perRecipient.values())).toBe(2);
  });
});

describe('a holder that outlives its lease', () => {
  /**
   * Replica A sends 10 emails, then freezes inside its 11th send (a GC pause, a frozen VM). Its lease
   * runs out; B takes over and finishes the window. Then A thaws.
   */
  async function pausedHolderScenario(options: { thawClockAdvances: boolean }) {
    const table = await dynamo.freshTable();
    const total = 120;
    const start = Date.parse(WINDOW) + 1_000;
    const clockA = new ManualClock(start);
    const clockB = new ManualClock(start);
    const paused = deferred();
    const thaw = deferred();
    const senderA = new CountingSender(async () => {
      if (senderA.total === 10) {
        paused.resolve();
        await thaw.promise;
      }
    });
    const senderB = new CountingSender();
    const emf = new EmfRecorder();
    const backend = testBackend(dynamo.client(), table);
    const replica = (sender: CountingSender, clock: ManualClock) =>
      testHandler(
        weeklyReportJob({ customers: () => syntheticCustomers(total), sender, concurrency: 1 }),
        backend,
        {
          clock,
          emf,
          run: { leaseMs: LEASE },
        },
      );

    const runA = replica(senderA, clockA).handler(schedulerEvent('weekly-report', WINDOW));
    await paused.promise;
    // Past the lease and the 2 s skew allowance a takeover waits for.
    await clockB.advance(LEASE + 3_000);
    const resultB = await replica(senderB, clockB).handler(schedulerEvent('weekly-report', WINDOW, 2));
    if (options.thawClockAdvances) await clockA.advance(LEASE + 3_000);
    thaw.resolve();
    const resultA = await runA;

    const epochOne = [];
    for await (const record of backend.ledger.list({ jobId: 'weekly-report', window: WINDOW })) {
      if (record.epoch === 1) epochOne.push(record);
    }
    const everyone = new Map(senderA.perRecipient);
    for (const [to, n] of senderB.perRecipient) everyone.set(to, (everyone.get(to) ?? 0) + n);
    return { total, resultA, resultB, senderA, senderB, emf, epochOne, everyone, backend };
  }

  it("rejects the thawed holder's completion and further reservations when its clock hides the pause", async () => {
    const s = await pausedHolderScenario({ thawClockAdvances: false });
    // B found A's 11 reservations (10 sent and unmarked, 1 frozen mid-send) and did not resend them.
    expect(s.resultB).toMatchObject({
      status: 'completed',
      epoch: 2,
      summary: { done: s.total - 11, inDoubt: 11 },
    });
    // A believed its lease still held, tried the next recipient, found it reserved by B's later
    // epoch, and was fenced: it reserved and sent nothing more.
    expect(s.resultA).toMatchObject({
      status: 'fenced',
      epoch: 1,
      summary: { done: 11, skipped: 0 },
    });
    expect(s.epochOne).toHaveLength(11);
    expect(s.senderA.total + s.senderB.total).toBe(s.total);
    expect(Math.max(...s.everyone.values())).toBe(1);
    expect(s.everyone.size).toBe(s.total);
    expect(await s.backend.claims.read({ jobId: 'weekly-report', window: WINDOW })).toMatchObject({
      state: 'DONE',
      epoch: 2,
    });
    expect(s.emf.sum('LeaseTakeover')).toBe(1);
  });

  it('stops the thawed holder at once when its clock shows the lease ended', async () => {
    const s = await pausedHolderScenario({ thawClockAdvances: true });
    expect(s.resultB).toMatchObject({ status: 'completed', summary: { done: s.total - 11, inDoubt: 11 } });
    expect(s.resultA).toMatchObject({ status: 'fenced', summary: { done: 11, skipped: 0 } });
    expect(s.epochOne).toHaveLength(11);
    expect(s.senderA.total).toBe(11);
    expect(Math.max(...s.everyone.values())).toBe(1);
    expect(s.emf.sum('LeaseLost')).toBe(1);
  });
});

describe('a fan-out larger than one Lambda run', () => {
  it('stops cleanly when the remaining time falls under the margin and the next run resumes where it stopped', async () => {
    const table = await dynamo.freshTable();
    const total = 300;
    const sender = new CountingSender();
    const clock = new ManualClock(Date.parse(WINDOW) + 500);
    const backend = testBackend(dynamo.client(), table);
    const { handler, emf } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomers(total), sender }),
      backend,
      { clock, run: { stopMarginMs: 30_000 } },
    );
    // Each send "takes" a second of the first invocation's 2 minutes: it must stop after about 90.
    const first = await handler(schedulerEvent('weekly-report', WINDOW), {
      awsRequestId: 'req-1',
      getRemainingTimeInMillis: () => 120_000 - sender.total * 1_000,
    });
    const sentFirst = sender.total;
    const second = await handler(schedulerEvent('weekly-report', WINDOW), {
      awsRequestId: 'req-2',
      getRemainingTimeInMillis: () => 900_000,
    });

    expect(first).toMatchObject({ status: 'yielded', epoch: 1, reason: 'time', summary: { inDoubt: 0 } });
    expect(sentFirst).toBeGreaterThanOrEqual(90);
    // The time is checked before each reservation: the 91st send's reservation is the last one
    // made, with at most 15 others in flight beside it.
    expect(sentFirst).toBeLessThanOrEqual(91 + 15);
    expect(second).toMatchObject({
      status: 'completed',
      epoch: 2,
      summary: { done: total - sentFirst, skipped: sentFirst, inDoubt: 0 },
    });
    expect(sender.total).toBe(total);
    expect(sender.duplicates()).toBe(0);
    expect(emf.sum('RunYielded')).toBe(1);
  });
});

describe('effects that fail', () => {
  it('retries an effect the provider refused once its backoff has passed, and never one that may have happened', async () => {
    const table = await dynamo.freshTable();
    const { EffectNotPerformedError } = await import('../../shared/errors.js');
    let throttled = true;
    const refused = 'customer-c000003@example.com';
    const timedOut = 'customer-c000007@example.com';
    const attempts = new Map<string, number>();
    const sender = new CountingSender(async (m: EmailMessage) => {
      attempts.set(m.to, (attempts.get(m.to) ?? 0) + 1);
      if (throttled && m.to === refused)
        throw new EffectNotPerformedError('throttled by the provider before sending');
      if (m.to === timedOut) throw new Error('socket timeout after DATA');
    });
    const start = Date.parse(WINDOW) + 500;
    const clock = new ManualClock(start);
    const backend = testBackend(dynamo.client(), table);
    const emf = new EmfRecorder();
    const { handler } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomers(10), sender }),
      backend,
      {
        clock,
        emf,
      },
    );
    const continuation = { ...schedulerEvent('weekly-report', WINDOW), continuation: true };

    const first = await handler(schedulerEvent('weekly-report', WINDOW));
    expect(first).toMatchObject({
      status: 'yielded',
      reason: 'retry-wait',
      resumeAfter: start + 60_000,
      summary: { done: 8, retrying: 1, inDoubt: 1, failed: 0 },
    });
    expect(
      await backend.ledger.read({ jobId: 'weekly-report', window: WINDOW }, backend.hashKey(refused)),
    ).toMatchObject({
      state: 'FAILED',
      attempts: 1,
      retryAt: start + 60_000,
      reason: 'unspecified',
    });
    // Too early: the window is waiting for the retry, and a continuation now stands down quietly.
    await clock.advance(30_000);
    expect(await handler(continuation)).toMatchObject({
      status: 'duplicate',
      outcome: { kind: 'waiting', until: start + 60_000 },
    });
    throttled = false;
    await clock.advance(30_000);
    const second = await handler(continuation);
    expect(second).toMatchObject({
      status: 'completed',
      state: 'DONE',
      epoch: 2,
      summary: { done: 1, skipped: 8, inDoubt: 1 },
      window: { done: 9, inDoubt: 1, failed: 0, runs: 2 },
    });
    expect(attempts.get(refused)).toBe(2);
    expect(attempts.get(timedOut)).toBe(1);
    expect(sender.total).toBe(9);
    expect(emf.sum('EffectRetried')).toBe(1);
    expect(emf.sum('EffectFailed')).toBe(0);
    expect(emf.sum('DuplicateClaim')).toBe(0);
  });

  it('fails an effect refused on all five attempts for good, and ends the window PARTIAL, paged', async () => {
    const table = await dynamo.freshTable();
    const { EffectNotPerformedError } = await import('../../shared/errors.js');
    const refused = 'customer-c000002@example.com';
    const sender = new CountingSender(async (m: EmailMessage) => {
      if (m.to === refused) throw new EffectNotPerformedError('rejected', { reason: 'rejected' });
    });
    const start = Date.parse(WINDOW) + 500;
    const clock = new ManualClock(start);
    const backend = testBackend(dynamo.client(), table);
    const emf = new EmfRecorder();
    const { handler } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomers(4), sender }),
      backend,
      {
        clock,
        emf,
      },
    );
    const results = [await handler(schedulerEvent('weekly-report', WINDOW))];
    // Each continuation comes when the last run asked: 1, 4, 16 and 64 minutes later.
    while (results.at(-1)?.status === 'yielded') {
      const last = results.at(-1) as { resumeAfter: number };
      await clock.advance(last.resumeAfter - clock.now());
      results.push(await handler({ ...schedulerEvent('weekly-report', WINDOW), continuation: true }));
    }
    expect(results.map((r) => r.status)).toEqual(['yielded', 'yielded', 'yielded', 'yielded', 'completed']);
    expect(clock.now() - start).toBe((1 + 4 + 16 + 64) * 60_000);
    expect(results.at(-1)).toMatchObject({
      status: 'completed',
      state: 'PARTIAL',
      window: { done: 3, inDoubt: 0, failed: 1, failedKeys: [backend.hashKey(refused)], runs: 5 },
    });
    expect(sender.perRecipient.get(refused)).toBeUndefined();
    expect(await backend.claims.read({ jobId: 'weekly-report', window: WINDOW })).toMatchObject({
      state: 'PARTIAL',
    });
    expect(emf.sum('EffectRetried')).toBe(4);
    expect(emf.sum('EffectFailed')).toBe(1);
  });

  it('releases the slot when the job throws, and marks it FAILED after maxAttempts', async () => {
    const table = await dynamo.freshTable();
    const clock = new ManualClock(Date.parse(WINDOW) + 500);
    const backend = testBackend(dynamo.client(), table);
    let runs = 0;
    const { handler } = testHandler(
      {
        id: 'weekly-report',
        async run() {
          runs++;
          throw new Error('recipient query failed');
        },
      },
      backend,
      { clock, run: { maxAttempts: 2 } },
    );
    await expect(handler(schedulerEvent('weekly-report', WINDOW))).rejects.toThrow(/released for a retry/);
    await expect(handler(schedulerEvent('weekly-report', WINDOW, 2))).rejects.toThrow(
      /last allowed attempt, so the slot is FAILED/,
    );
    const third = await handler(schedulerEvent('weekly-report', WINDOW, 3));
    expect(third).toMatchObject({ status: 'duplicate', outcome: { kind: 'failed', attempts: 2 } });
    expect(runs).toBe(2);
    expect(await backend.claims.read({ jobId: 'weekly-report', window: WINDOW })).toMatchObject({
      state: 'FAILED',
      failures: 2,
      lastError: 'Error: recipient query failed',
    });
  });
});

describe('a list that names a recipient twice', () => {
  it('emails that recipient once and counts the repeat as skipped', async () => {
    const table = await dynamo.freshTable();
    const sender = new CountingSender();
    const clock = new ManualClock(Date.parse(WINDOW) + 500);
    const twice = async function* () {
      for (const id of ['c1', 'c2', 'c1', 'c3', 'c2', 'c1'])
        yield { id, email: `customer-${id}@example.com` };
    };
    const { handler } = testHandler(
      weeklyReportJob({ customers: () => twice(), sender, concurrency: 2 }),
      testBackend(dynamo.client(), table),
      { clock },
    );
    const result = await handler(schedulerEvent('weekly-report', WINDOW));
    expect(result).toMatchObject({ status: 'completed', summary: { done: 3, skipped: 3, inDoubt: 0 } });
    expect(sender.total).toBe(3);
    expect(sender.duplicates()).toBe(0);
  });
});
