import { describe, expect, it } from 'vitest';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomerSource, syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import type { EmailMessage } from '../../shared/effects/email-sender.js';
import { EffectNotPerformedError } from '../../shared/errors.js';
import type { HandlerResponse } from '../../shared/job/lambda-handler.js';
import { CountingSender } from '../helpers/counting-sender.js';
import { EmfRecorder, schedulerEvent, testHandler } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { leaseRequest, slotSequence, usePostgres } from '../helpers/postgres.js';

/*
 * Windows that finish across runs, on the database lease clock (production's): the contract suite
 * covers the same rules on the caller's clock, which is the only one a test can move. Here leases are
 * the database's, while the instants a run computes itself (a refusal's retry time, a yielded
 * window's resume time, the deadline) follow the replica's clock.
 */

const postgres = usePostgres();

const JOB = 'weekly-report';
const WINDOW = '2026-11-30T06:00:00Z';
const WINDOW_MS = Date.parse(WINDOW);
const LEASE = 60_000;

/** A slot no other test in this file uses. */
const freshSlot = slotSequence('pg-windows');

describe('Postgres windows across runs, on the database clock', () => {
  it('resumes a window from its checkpoint: three runs of 400 recipients, nobody emailed twice or walked again', async () => {
    const backend = postgres.backend(await postgres.freshSchema());
    const sender = new CountingSender();
    const { handler } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomerSource(1_200), sender }),
      backend,
      { clock: new ManualClock(WINDOW_MS + 500) },
    );
    const results: HandlerResponse[] = [];
    for (let run = 0; run < 5 && results.at(-1)?.status !== 'completed'; run++) {
      // The Lambda's time runs out once this run has sent 400: each run yields at the same point.
      const sentBefore = sender.total;
      const event = { ...schedulerEvent(JOB, WINDOW), ...(run > 0 ? { continuation: true } : {}) };
      results.push(
        await handler(event, {
          awsRequestId: `run-${run}`,
          getRemainingTimeInMillis: () => (sender.total - sentBefore >= 400 ? 0 : 900_000),
        }),
      );
    }
    expect(results.map((r) => r.status)).toEqual(['yielded', 'yielded', 'completed']);
    expect(results.at(-1)).toMatchObject({
      status: 'completed',
      state: 'DONE',
      epoch: 3,
      window: { done: 1_200, inDoubt: 0, failed: 0, runs: 3 },
    });
    expect(sender.total).toBe(1_200);
    expect(sender.duplicates()).toBe(0);
    // Each continuation started after the checkpoint: no run met a recipient an earlier one had done.
    expect(results.reduce((n, r) => n + ('summary' in r ? r.summary.skipped : 0), 0)).toBe(0);
    const record = await backend.claims.read({ jobId: JOB, window: WINDOW });
    // The deadline the first claim stored (its clock's reading plus 6 hours), kept by the other two;
    // the checkpoint and counts are the last run's, written fenced as it went.
    expect(record).toMatchObject({
      state: 'DONE',
      epoch: 3,
      deadline: WINDOW_MS + 500 + 6 * 3_600_000,
      runsWithoutProgress: 0,
      progress: { epoch: 3, skipped: 0 },
    });
    expect(record?.checkpoint?.positions.customers).toMatch(/^c00\d{4}$/);
  });

  it("retries a refused send once the replica's clock passes its retry time, though the database clock has not moved", async () => {
    const backend = postgres.backend(await postgres.freshSchema());
    const refused = 'customer-c000003@example.com';
    let throttled = true;
    const sender = new CountingSender(async (m: EmailMessage) => {
      if (throttled && m.to === refused)
        throw new EffectNotPerformedError('throttled', { reason: 'throttled' });
    });
    const start = WINDOW_MS + 500;
    const clock = new ManualClock(start);
    const emf = new EmfRecorder();
    const { handler } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomers(10), sender }),
      backend,
      {
        clock,
        emf,
      },
    );
    const continuation = { ...schedulerEvent(JOB, WINDOW), continuation: true };

    expect(await handler(schedulerEvent(JOB, WINDOW))).toMatchObject({
      status: 'yielded',
      reason: 'retry-wait',
      resumeAfter: start + 60_000,
      summary: { done: 9, retrying: 1 },
    });
    const slot = { jobId: JOB, window: WINDOW };
    expect(await backend.ledger.read(slot, backend.hashKey(refused))).toMatchObject({
      state: 'FAILED',
      attempts: 1,
      retryAt: start + 60_000,
      reason: 'throttled',
    });
    expect(await backend.claims.read(slot)).toMatchObject({ state: 'RELEASED', resumeAfter: start + 60_000 });
    await clock.advance(30_000);
    expect(await handler(continuation)).toMatchObject({
      status: 'duplicate',
      outcome: { kind: 'waiting', until: start + 60_000 },
    });
    throttled = false;
    await clock.advance(30_000);
    expect(await handler(continuation)).toMatchObject({
      status: 'completed',
      state: 'DONE',
      epoch: 2,
      summary: { done: 1, skipped: 9 },
      window: { done: 10, inDoubt: 0, failed: 0, runs: 2 },
    });
    expect(sender.total).toBe(10);
    expect(sender.duplicates()).toBe(0);
    expect(emf.sum('EffectRetried')).toBe(1);
  });

  it("judges a refusal's retry time and a window's resume time by the caller's clock, an hour ahead of the database's", async () => {
    const backend = postgres.backend(await postgres.freshSchema());
    const slot = freshSlot();
    const now = Date.now();
    const hourLater = now + 3_600_000;
    const a = await backend.claims.claim(slot, leaseRequest('a', slot), now);
    if (a.kind !== 'claimed') throw new Error(a.kind);
    await backend.ledger.reserve(a.claim, 'k1', { rerunInDoubt: false, now });
    await backend.ledger.recordFailure(a.claim, 'k1', {
      attempts: 1,
      retryAt: hourLater,
      reason: 'throttled',
    });
    expect(await backend.ledger.reserve(a.claim, 'k1', { rerunInDoubt: false, now })).toEqual({
      kind: 'retry-later',
      retryAt: hourLater,
      attempts: 1,
    });
    expect(await backend.ledger.reserve(a.claim, 'k1', { rerunInDoubt: false, now: hourLater })).toEqual({
      kind: 'reserved',
      rerun: false,
      attempt: 2,
    });
    await backend.ledger.recordFailure(a.claim, 'k1', {
      attempts: 2,
      retryAt: hourLater + 1,
      reason: 'throttled',
    });

    const yielded = { kind: 'yield' as const, runsWithoutProgress: 0, resumeAfter: hourLater };
    expect(await backend.claims.release(a.claim, yielded, now)).toEqual({ kind: 'ok' });
    expect(await backend.claims.claim(slot, leaseRequest('early', slot), now)).toEqual({
      kind: 'waiting',
      until: hourLater,
    });
    expect(await backend.claims.claim(slot, leaseRequest('b', slot), hourLater)).toMatchObject({
      kind: 'claimed',
      claim: { epoch: 2, via: 'retry' },
    });
    expect((await backend.claims.read(slot))?.resumeAfter).toBeUndefined();
  });

  it('needs no skew allowance: the database clock alone decides a takeover, whatever allowance or clock the claimer has', async () => {
    const schema = await postgres.freshSchema();
    const backend = postgres.backend(schema);
    const slot = freshSlot();
    const holder = await backend.claims.claim(slot, leaseRequest('holder', slot), Date.now());
    expect(holder).toMatchObject({ kind: 'claimed', claim: { epoch: 1 } });
    const patient = leaseRequest('patient', slot, { takeoverSkewMs: 10 * 60_000 });
    // A claimer an hour fast still finds the lease live: the database wrote its end and judges it.
    expect(await backend.claims.claim(slot, patient, Date.now() + 3_600_000)).toMatchObject({
      kind: 'held',
      holder: 'holder',
    });
    // The lease ended a second ago by the database clock. On the caller's clock a ten-minute
    // allowance would hold this claimer off; here nobody's clock can run ahead of the holder's.
    await postgres.ageLease(schema, slot, LEASE + 1_000);
    expect(await backend.claims.claim(slot, patient, Date.now() - 3_600_000)).toMatchObject({
      kind: 'claimed',
      claim: { epoch: 2, via: 'takeover' },
      previousHolder: 'holder',
    });
  });
});
