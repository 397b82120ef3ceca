import { type AttributeValue, ScanCommand } from '@aws-sdk/client-dynamodb';
import { describe, expect, it } from 'vitest';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import { TableLayout } from '../../shared/backends/dynamodb/table-layout.js';
import { memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import { EffectNotPerformedError } from '../../shared/errors.js';
import { defineJob } from '../../shared/job/job-definition.js';
import { CountingSender } from '../helpers/counting-sender.js';
import { useDynamo } from '../helpers/dynalite.js';
import { schedulerEvent, TEST_SECRET, testBackend, testHandler } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { describeOutsideReviewCases, describeWindowSpellingCase } from './outside-review-cases.js';

/**
 * Defects an outside review found in the runtime (issue 12), each pinned by a test that failed before.
 * The cases that concern each backend's adapter are in outside-review-cases.ts, run here on dynalite and
 * in memory.
 */

const WINDOW = '2026-11-30T06:00:00Z';
const SLOT = { jobId: 'weekly-report', window: WINDOW };
const dynamo = useDynamo();

describeOutsideReviewCases('DynamoDB', async () => testBackend(dynamo.client(), await dynamo.freshTable()));
describeWindowSpellingCase('DynamoDB', async () => {
  const client = dynamo.client();
  const tableName = await dynamo.freshTable();
  return {
    backend: testBackend(client, tableName),
    async stored() {
      // Every item of the table, whatever its key: a slot stored under another spelling shows here.
      const counts = { slots: 0, effects: 0 };
      let start: Record<string, AttributeValue> | undefined;
      do {
        const page = await client.send(new ScanCommand({ TableName: tableName, ExclusiveStartKey: start }));
        for (const item of page.Items ?? []) {
          if (item[TableLayout.sortKey]?.S === TableLayout.slotSortKey) counts.slots++;
          else counts.effects++;
        }
        start = page.LastEvaluatedKey;
      } while (start);
      return counts;
    },
  };
});
describeOutsideReviewCases('in-memory', async () => memoryBackend({ hashKey: hmacEffectKeys(TEST_SECRET) }));

describe('effect keys that are not well-formed text (issue 12, item 2)', () => {
  it('fails only the effect whose key is empty, named and counted, and performs every other', async () => {
    const backend = testBackend(dynamo.client(), await dynamo.freshTable());
    const performed: string[] = [];
    const job = defineJob({
      id: 'weekly-report',
      async run(ctx) {
        for (const key of ['alice', '', 'bob']) {
          await ctx.once(key, async () => {
            performed.push(key);
          });
        }
      },
    });
    const { handler, log, emf } = testHandler(job, backend, {
      clock: new ManualClock(Date.parse(WINDOW) + 500),
    });
    const result = await handler(schedulerEvent('weekly-report', WINDOW));
    expect(performed).toEqual(['alice', 'bob']);
    expect(result).toMatchObject({
      status: 'completed',
      state: 'PARTIAL',
      summary: { done: 2, failed: 1, failedKeys: [backend.hashKey('')] },
      window: { done: 2, failed: 1 },
    });
    expect(emf.sum('EffectFailed')).toBe(1);
    expect(log.text()).toMatch(/an effect key is empty/);
  });

  it('performs effects whose keys differ only in lone surrogates: none is skipped as another', async () => {
    const backend = testBackend(dynamo.client(), await dynamo.freshTable());
    const performed: string[] = [];
    const keys = ['x\uD800', 'x\uDFFF', 'x\uFFFD'];
    const job = defineJob({
      id: 'weekly-report',
      async run(ctx) {
        for (const key of keys) await ctx.once(key, async () => void performed.push(key));
      },
    });
    const { handler } = testHandler(job, backend, { clock: new ManualClock(Date.parse(WINDOW) + 500) });
    expect(await handler(schedulerEvent('weekly-report', WINDOW))).toMatchObject({
      status: 'completed',
      window: { done: 3 },
    });
    expect(performed).toEqual(keys);
  });
});

describe('a provider that refuses or fails everything (issue 12, item 3)', () => {
  it('stops the run after 10 refusals of one kind, pages, and waits a retry delay before the next run', async () => {
    const backend = testBackend(dynamo.client(), await dynamo.freshTable());
    let calls = 0;
    const sender = new CountingSender(async () => {
      calls++;
      throw new EffectNotPerformedError('AccessDeniedException: not authorized to send', {
        reason: 'unauthorized',
      });
    });
    const clock = new ManualClock(Date.parse(WINDOW) + 500);
    const { handler: counted, emf } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomers(200), sender, concurrency: 1 }),
      backend,
      { clock },
    );
    const first = await counted(schedulerEvent('weekly-report', WINDOW));
    expect(calls).toBe(10);
    expect(first).toMatchObject({
      status: 'yielded',
      reason: 'provider-failing',
      resumeAfter: clock.now() + 60_000,
      summary: { retrying: 10, done: 0, inDoubt: 0 },
    });
    expect(emf.sum('ProviderFailing')).toBe(1);
    // The same provider on the next two runs: no progress three times over, the window is STUCK.
    const statuses = [first.status];
    for (let run = 0; run < 2; run++) {
      await clock.advance(60_000);
      statuses.push(
        (await counted({ ...schedulerEvent('weekly-report', WINDOW), continuation: true })).status,
      );
    }
    expect(statuses).toEqual(['yielded', 'yielded', 'stuck']);
    expect(calls).toBe(30);
    expect(await backend.claims.read(SLOT)).toMatchObject({ state: 'STUCK', runsWithoutProgress: 3 });
  });

  it('does not take twelve rejected recipients in a row for a failing provider: the rest are still sent', async () => {
    const backend = testBackend(dynamo.client(), await dynamo.freshTable());
    const sender = new CountingSender(async (m) => {
      if (Number(m.to.slice(10, 16)) <= 12)
        throw new EffectNotPerformedError('address suppressed', { reason: 'rejected' });
    });
    const { handler } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomers(40), sender, concurrency: 1 }),
      backend,
      { clock: new ManualClock(Date.parse(WINDOW) + 500) },
    );
    const result = await handler(schedulerEvent('weekly-report', WINDOW));
    expect(result).toMatchObject({
      status: 'yielded',
      reason: 'retry-wait',
      summary: { done: 28, retrying: 12 },
    });
    expect(sender.total).toBe(28);
  });

  it('stops the run after 10 unknown errors of one kind in a row, leaving just those 10 in doubt', async () => {
    const backend = testBackend(dynamo.client(), await dynamo.freshTable());
    const sender = new CountingSender(async () => {
      throw new Error('socket hang up');
    });
    const { handler } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomers(200), sender, concurrency: 1 }),
      backend,
      { clock: new ManualClock(Date.parse(WINDOW) + 500) },
    );
    const result = await handler(schedulerEvent('weekly-report', WINDOW));
    expect(result).toMatchObject({ status: 'yielded', reason: 'provider-failing', summary: { inDoubt: 10 } });
  });
});

describe('clock skew on DynamoDB (issue 12, item 8)', () => {
  it('does not take over a live lease from a replica whose clock runs a second and a half fast', async () => {
    const backend = testBackend(dynamo.client(), await dynamo.freshTable());
    const holder = new ManualClock(Date.parse(WINDOW) + 500);
    await backend.claims.claim(
      SLOT,
      {
        owner: 'holder',
        leaseMs: 60_000,
        maxAttempts: 3,
        expiresAtSeconds: 2e9,
        deadline: 2e12,
        delivery: {},
      },
      holder.now(),
    );
    // 59 s into a 60 s lease on the holder's clock, 60.5 s on the fast replica's.
    const fast = new ManualClock(holder.now() + 59_000 + 1_500);
    const sender = new CountingSender();
    const { handler } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomers(10), sender }),
      backend,
      {
        clock: fast,
      },
    );
    expect(await handler(schedulerEvent('weekly-report', WINDOW, 2))).toMatchObject({
      status: 'duplicate',
      outcome: { kind: 'held', holder: 'holder' },
    });
    expect(sender.total).toBe(0);
  });
});
