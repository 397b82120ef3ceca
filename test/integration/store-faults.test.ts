import { describe, expect, it } from 'vitest';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import { CountingSender } from '../helpers/counting-sender.js';
import { useDynamo } from '../helpers/dynalite.js';
import { injectFaults } from '../helpers/faults.js';
import { EmfRecorder, schedulerEvent, testBackend, testHandler } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';

const WINDOW = '2026-11-30T06:00:00Z';

const dynamo = useDynamo();

describe('a store that throttles, fails and loses replies', () => {
  it('completes 3 replicas over 1,500 recipients with the same counts as a healthy store', async () => {
    const seed = Number(process.env.FAULT_SEED ?? Date.now() % 100_000);
    const table = await dynamo.freshTable();
    const sender = new CountingSender();
    const emf = new EmfRecorder();
    const clock = new ManualClock(Date.parse(WINDOW) + 1_000);
    const faults = [1, 2, 3].map((replica) => {
      const client = dynamo.client({ maxAttempts: 10 });
      const counts = injectFaults(client, {
        throttle: 0.06,
        serverError: 0.03,
        lostReply: 0.03,
        seed: seed + replica,
      });
      return { client, counts };
    });
    const results = await Promise.all(
      faults.map(({ client }, i) =>
        testHandler(
          weeklyReportJob({ customers: () => syntheticCustomers(1_500), sender }),
          testBackend(client, table),
          {
            clock,
            emf,
          },
        ).handler(schedulerEvent('weekly-report', WINDOW, 1, `exec-${i}`)),
      ),
    );
    const injected = faults.reduce(
      (sum, { counts }) => sum + counts.throttled + counts.serverErrors + counts.lostReplies,
      0,
    );

    expect(injected, `seed ${seed}`).toBeGreaterThan(50);
    expect(results.map((r) => r.status).sort(), `seed ${seed}`).toEqual([
      'completed',
      'duplicate',
      'duplicate',
    ]);
    expect(sender.total, `seed ${seed}`).toBe(1_500);
    expect(sender.duplicates(), `seed ${seed}`).toBe(0);
    expect(emf.sum('EffectDone'), `seed ${seed}`).toBe(1_500);
    expect(emf.sum('EffectInDoubt'), `seed ${seed}`).toBe(0);
    expect(emf.sum('DuplicateClaim'), `seed ${seed}`).toBe(2);
  });
});
