import { describe, expect, it } from 'vitest';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import { CountingSender } from '../helpers/counting-sender.js';
import { useDynamo } from '../helpers/dynalite.js';
import { EmfRecorder, schedulerEvent, testBackend, testHandler } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';

const WINDOW = '2026-11-30T06:00:00Z';

describe('the incident: three replicas fire the weekly report for one window', () => {
  const dynamo = useDynamo();

  it('sends each of 12,400 customers exactly one email, with 2 DuplicateClaim and nothing in doubt', async () => {
    const table = await dynamo.freshTable();
    const sender = new CountingSender();
    const emf = new EmfRecorder();
    const clock = new ManualClock(Date.parse(WINDOW) + 1_000);
    const replicas = [1, 2, 3].map(() =>
      testHandler(
        weeklyReportJob({ customers: () => syntheticCustomers(12_400), sender }),
        testBackend(dynamo.client(), table),
        { clock, emf },
      ),
    );
    const results = await Promise.all(
      replicas.map((r, i) => r.handler(schedulerEvent('weekly-report', WINDOW, 1, `exec-replica-${i}`))),
    );

    expect(results.map((r) => r.status).sort()).toEqual(['completed', 'duplicate', 'duplicate']);
    expect(sender.total).toBe(12_400);
    expect(sender.perRecipient.size).toBe(12_400);
    expect(sender.duplicates()).toBe(0);
    expect(emf.sum('ClaimAcquired')).toBe(1);
    expect(emf.sum('DuplicateClaim')).toBe(2);
    expect(emf.sum('EffectDone')).toBe(12_400);
    expect(emf.sum('EffectInDoubt')).toBe(0);
    const completed = results.find((r) => r.status === 'completed');
    expect(completed).toMatchObject({ summary: { done: 12_400, skipped: 0, inDoubt: 0, failed: 0 } });
  });
});
