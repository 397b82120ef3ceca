import { describe, expect, it } from 'vitest';
import { meterRequests } from '../../bench/request-meter.js';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomerSource, syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import { gatedBackend, InvocationGate, ReplicaCrashedError } from '../../local/replica-faults.js';
import type { EmailMessage } from '../../shared/effects/email-sender.js';
import type { HandlerResponse } from '../../shared/job/lambda-handler.js';
import { CountingSender } from '../helpers/counting-sender.js';
import { useDynamo } from '../helpers/dynalite.js';
import { schedulerEvent, testBackend, testHandler } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';

const WINDOW = '2026-11-30T06:00:00Z';
const dynamo = useDynamo();

/**
 * A Lambda whose time runs out after `sendsPerRun` sends: remaining time is plenty until then and
 * zero after, so each run yields at about the same point, whatever the machine's speed.
 */
function invocation(sender: CountingSender, sendsPerRun: number) {
  const startedAt = sender.total;
  return {
    awsRequestId: `req-${startedAt}`,
    getRemainingTimeInMillis: () => (sender.total - startedAt >= sendsPerRun ? 0 : 900_000),
  };
}

/** Delivers the window, then its continuations, until a run finishes it. */
async function runUntilFinished(
  handler: (event: unknown, context?: ReturnType<typeof invocation>) => Promise<HandlerResponse>,
  sender: CountingSender,
  sendsPerRun: number,
): Promise<HandlerResponse[]> {
  const results: HandlerResponse[] = [];
  for (let run = 0; run < 20; run++) {
    const event = { ...schedulerEvent('weekly-report', WINDOW), ...(run > 0 ? { continuation: true } : {}) };
    const result = await handler(event, invocation(sender, sendsPerRun));
    results.push(result);
    if (result.status !== 'yielded') return results;
  }
  throw new Error(`the window did not finish in 20 runs: ${JSON.stringify(results.at(-1))}`);
}

describe('a window longer than one run', () => {
  it('resumes from the checkpoint: five runs of 2,000 recipients cost at most 1.1 requests per recipient', async () => {
    const table = await dynamo.freshTable();
    const client = dynamo.client();
    const meter = meterRequests(client);
    const sender = new CountingSender();
    const { handler } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomerSource(2_000), sender }),
      testBackend(client, table),
      { clock: new ManualClock(Date.parse(WINDOW) + 500) },
    );
    const results = await runUntilFinished(handler, sender, 420);

    expect(results.map((r) => r.status)).toEqual(['yielded', 'yielded', 'yielded', 'yielded', 'completed']);
    expect(results.at(-1)).toMatchObject({
      status: 'completed',
      state: 'DONE',
      epoch: 5,
      window: { done: 2_000, inDoubt: 0, failed: 0, runs: 5 },
    });
    expect(sender.total).toBe(2_000);
    expect(sender.duplicates()).toBe(0);
    // No run walked the recipients an earlier one had finished: none was skipped.
    expect(results.reduce((n, r) => n + ('summary' in r ? r.summary.skipped : 0), 0)).toBe(0);
    const perRecipient = meter.requests() / 2_000;
    console.info(
      `resumable source, 5 runs: ${meter.requests()} requests, ${perRecipient.toFixed(3)} per recipient`,
      Object.fromEntries(meter.byOperation),
    );
    expect(perRecipient).toBeLessThanOrEqual(1.1);
  });

  it('takes over a run killed mid-walk from its last checkpoint: nobody twice, its unmarked sends in doubt', async () => {
    const table = await dynamo.freshTable();
    const backend = testBackend(dynamo.client(), table);
    const clock = new ManualClock(Date.parse(WINDOW) + 500);
    const gate = new InvocationGate('doomed');
    // The doomed run dies after its 230th send returns, before it is marked: its process is gone.
    const doomedSender = new CountingSender(async () => {
      if (doomedSender.total === 229) gate.crash();
    });
    const doomed = testHandler(
      weeklyReportJob({
        customers: () => syntheticCustomerSource(600),
        sender: doomedSender,
        concurrency: 4,
      }),
      gatedBackend(backend, gate),
      { clock },
    );
    await expect(doomed.handler(schedulerEvent('weekly-report', WINDOW))).rejects.toBeInstanceOf(
      ReplicaCrashedError,
    );
    const checkpoint = (await backend.claims.read({ jobId: 'weekly-report', window: WINDOW }))?.checkpoint;
    const resumedAt = Number(checkpoint?.positions.customers?.slice(1));
    expect(resumedAt).toBeGreaterThanOrEqual(100);
    expect(resumedAt).toBeLessThan(230);

    await clock.advance(63_000);
    const sender = new CountingSender();
    const survivor = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomerSource(600), sender }),
      backend,
      { clock },
    );
    const result = await survivor.handler({ ...schedulerEvent('weekly-report', WINDOW), continuation: true });
    expect(result).toMatchObject({ status: 'completed', epoch: 2, window: { failed: 0, runs: 2 } });
    if (result.status !== 'completed') return;
    const { done, skipped, inDoubt } = result.summary;
    expect(done).toBe(sender.total);
    // The survivor walked only what came after the checkpoint, and found everything the dead run
    // had touched there done (marked) or in doubt (reserved: sent, or killed before sending).
    expect(done + skipped + inDoubt).toBe(600 - resumedAt);
    expect(result.window.done + result.window.inDoubt).toBe(600);
    const sentByDoomed = new Set(doomedSender.perRecipient.keys());
    for (const to of sender.perRecipient.keys()) expect(sentByDoomed.has(to), to).toBe(false);
    const inDoubtUnsent = result.window.inDoubtKeys.filter(
      (key) => ![...sentByDoomed].some((to) => backend.hashKey(to) === key),
    );
    expect(doomedSender.total + sender.total + inDoubtUnsent.length).toBe(600);
  });

  it('still finishes a list that cannot resume, paying a conditional write per recipient each re-walk', async () => {
    const table = await dynamo.freshTable();
    const client = dynamo.client();
    const meter = meterRequests(client);
    const sender = new CountingSender();
    const { handler } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomers(1_000), sender }),
      testBackend(client, table),
      { clock: new ManualClock(Date.parse(WINDOW) + 500) },
    );
    const results = await runUntilFinished(handler, sender, 260);

    expect(results.at(-1)).toMatchObject({
      status: 'completed',
      window: { done: 1_000, runs: results.length },
    });
    expect(sender.total).toBe(1_000);
    expect(sender.duplicates()).toBe(0);
    // Run k walks past every recipient runs 1..k-1 finished: each costs one conditional write.
    const skipped = results.reduce((n, r) => n + ('summary' in r ? r.summary.skipped : 0), 0);
    expect(skipped).toBeGreaterThanOrEqual(260 + 520 + 780);
    expect(meter.requests() / 1_000).toBeGreaterThan(2);
  });

  it('never takes the next recipient of a list when the run has nothing but time to fail on', async () => {
    // Three runs in a row that get no time at all: the window is STUCK, paged, not looped forever.
    const table = await dynamo.freshTable();
    const sender = new CountingSender();
    const backend = testBackend(dynamo.client(), table);
    const { handler, emf } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomerSource(50), sender }),
      backend,
      { clock: new ManualClock(Date.parse(WINDOW) + 500) },
    );
    const results = await runUntilFinished(handler, sender, 0);
    expect(results.map((r) => r.status)).toEqual(['yielded', 'yielded', 'stuck']);
    expect(results.at(-1)).toMatchObject({
      reason: 'no progress in 3 consecutive runs (the last stopped: time)',
    });
    expect(sender.total).toBe(0);
    expect(emf.sum('WindowStuck')).toBe(1);
    expect(await backend.claims.read({ jobId: 'weekly-report', window: WINDOW })).toMatchObject({
      state: 'STUCK',
      runsWithoutProgress: 3,
    });
    // A later fire stands down, told why.
    const late = await handler(schedulerEvent('weekly-report', WINDOW, 2));
    expect(late).toMatchObject({ status: 'duplicate', outcome: { kind: 'stuck', epoch: 3 } });
  });

  it('gives up past its deadline, and finishes PARTIAL when only refused effects were left', async () => {
    const table = await dynamo.freshTable();
    const { EffectNotPerformedError } = await import('../../shared/errors.js');
    const refused = 'customer-c000004@example.com';
    const sender = new CountingSender(async (m: EmailMessage) => {
      if (m.to === refused) throw new EffectNotPerformedError('throttled', { reason: 'throttled' });
    });
    const start = Date.parse(WINDOW) + 500;
    const clock = new ManualClock(start);
    const backend = testBackend(dynamo.client(), table);
    const { handler, emf } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomerSource(10), sender }),
      backend,
      { clock, run: { deadlineMs: 20 * 60_000 } },
    );
    const first = await handler(schedulerEvent('weekly-report', WINDOW));
    expect(first).toMatchObject({ status: 'yielded', reason: 'retry-wait', resumeAfter: start + 60_000 });
    // The engine delivers each continuation when asked; the fourth wait (16 min) passes the deadline.
    const statuses = [first.status];
    for (let run = 0; run < 5 && statuses.at(-1) === 'yielded'; run++) {
      const last = (await backend.claims.read({ jobId: 'weekly-report', window: WINDOW }))?.resumeAfter ?? 0;
      await clock.advance(Math.max(0, last - clock.now()));
      const result = await handler({ ...schedulerEvent('weekly-report', WINDOW), continuation: true });
      statuses.push(result.status);
      if (result.status === 'completed') {
        expect(result).toMatchObject({ state: 'PARTIAL', window: { done: 9, failed: 1, runs: run + 2 } });
      }
    }
    expect(statuses.at(-1)).toBe('completed');
    expect(clock.now()).toBeGreaterThan(start + 20 * 60_000);
    expect(sender.total).toBe(9);
    expect(emf.sum('EffectFailed')).toBe(1);
    expect(await backend.claims.read({ jobId: 'weekly-report', window: WINDOW })).toMatchObject({
      state: 'PARTIAL',
    });
  });
});
