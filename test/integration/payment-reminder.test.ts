import { describe, expect, it } from 'vitest';
import { paymentReminderJob, syntheticDueInvoices } from '../../functions/payment-reminder/job.js';
import { CountingSender } from '../helpers/counting-sender.js';
import { useDynamo } from '../helpers/dynalite.js';
import { EmfRecorder, schedulerEvent, testBackend, testHandler } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';

const dynamo = useDynamo();

describe('the rate-scheduled payment reminder', () => {
  it('reminds each invoice once across two replicas and four 15-minute windows', async () => {
    const table = await dynamo.freshTable();
    const sender = new CountingSender();
    const emf = new EmfRecorder();
    const clock = new ManualClock(Date.parse('2026-11-30T07:00:00Z'));
    const replicas = [1, 2].map(() =>
      testHandler(
        paymentReminderJob({ dueInvoices: (w) => syntheticDueInvoices(w, 7), sender }),
        testBackend(dynamo.client(), table),
        { clock, emf },
      ),
    );
    const windows = ['06:00', '06:15', '06:30', '06:45'].map((t) => `2026-11-30T${t}:00Z`);
    for (const window of windows) {
      await Promise.all(replicas.map((r) => r.handler(schedulerEvent('payment-reminder', window))));
    }
    expect(sender.total).toBe(28);
    expect(sender.perRecipient.size).toBe(28);
    expect(emf.sum('ClaimAcquired')).toBe(4);
    expect(emf.sum('DuplicateClaim')).toBe(4);
  });
});
