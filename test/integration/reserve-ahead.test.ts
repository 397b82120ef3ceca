import { describe, expect, it } from 'vitest';
import { meterRequests } from '../../bench/request-meter.js';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomerSource } from '../../functions/weekly-report/recipients.js';
import { gatedBackend, InvocationGate, ReplicaCrashedError } from '../../local/replica-faults.js';
import { CountingSender } from '../helpers/counting-sender.js';
import { useDynamo } from '../helpers/dynalite.js';
import { schedulerEvent, testBackend, testHandler } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';

const WINDOW = '2026-11-30T06:00:00Z';
const SLOT = { jobId: 'weekly-report', window: WINDOW };
const dynamo = useDynamo();

describe('done marks and reserving ahead, on DynamoDB', () => {
  it.each([false, true])(
    'sends 1,000 customers once with reserveAhead %s: every reservation read done, about one write per recipient',
    async (reserveAhead) => {
      const table = await dynamo.freshTable();
      const client = dynamo.client();
      const meter = meterRequests(client);
      const sender = new CountingSender();
      const { handler } = testHandler(
        weeklyReportJob({ customers: () => syntheticCustomerSource(1_000), sender, concurrency: 8 }),
        testBackend(client, table),
        { clock: new ManualClock(Date.parse(WINDOW) + 500), run: { reserveAhead } },
      );
      const result = await handler(schedulerEvent('weekly-report', WINDOW));
      expect(result).toMatchObject({
        status: 'completed',
        state: 'DONE',
        window: { done: 1_000, inDoubt: 0, failed: 0, runs: 1 },
      });
      expect([sender.total, sender.duplicates()]).toEqual([1_000, 0]);
      // One reservation per recipient, one slot write per 25 of them: no mark per recipient.
      expect(meter.byOperation.get('PutItem')).toBe(1_000);
      expect(meter.byOperation.get('BatchWriteItem') ?? 0).toBe(0);
      expect(meter.requests() / 1_000).toBeLessThanOrEqual(1.1);
    },
  );

  it.each([
    { reserveAhead: false, unsentAtMost: 4 },
    { reserveAhead: true, unsentAtMost: 8 },
  ])(
    'takes over a run killed mid-walk with reserveAhead $reserveAhead: nobody twice, at most 25 sends and $unsentAtMost reserved-but-unsent in doubt',
    async ({ reserveAhead, unsentAtMost }) => {
      const table = await dynamo.freshTable();
      const backend = testBackend(dynamo.client(), table);
      const clock = new ManualClock(Date.parse(WINDOW) + 500);
      const gate = new InvocationGate('doomed');
      // The doomed run dies after its 230th send returns: its process is gone, marks unwritten.
      const doomedSender = new CountingSender(async () => {
        if (doomedSender.total === 229) gate.crash();
      });
      const concurrency = 4;
      const doomed = testHandler(
        weeklyReportJob({ customers: () => syntheticCustomerSource(600), sender: doomedSender, concurrency }),
        gatedBackend(backend, gate),
        { clock, run: { reserveAhead } },
      );
      await expect(doomed.handler(schedulerEvent('weekly-report', WINDOW))).rejects.toBeInstanceOf(
        ReplicaCrashedError,
      );
      const marks = (await backend.claims.read(SLOT))?.doneMarks?.['1'];
      expect(marks?.below).toBeGreaterThanOrEqual(200);

      await clock.advance(63_000);
      const sender = new CountingSender();
      const survivor = testHandler(
        weeklyReportJob({ customers: () => syntheticCustomerSource(600), sender }),
        backend,
        { clock },
      );
      const result = await survivor.handler({
        ...schedulerEvent('weekly-report', WINDOW),
        continuation: true,
      });
      expect(result).toMatchObject({ status: 'completed', epoch: 2, window: { failed: 0, runs: 2 } });
      if (result.status !== 'completed') return;
      const sentByDoomed = new Set(doomedSender.perRecipient.keys());
      for (const to of sender.perRecipient.keys()) expect(sentByDoomed.has(to), to).toBe(false);
      const hashOfSent = new Set([...sentByDoomed].map((to) => backend.hashKey(to)));
      const inDoubtUnsent = result.window.inDoubtKeys.filter((key) => !hashOfSent.has(key));
      const inDoubtSent = result.window.inDoubt - inDoubtUnsent.length;
      // Everyone is accounted for once: sent by one run or the other, or reserved and never sent.
      expect(doomedSender.total + sender.total + inDoubtUnsent.length).toBe(600);
      expect(result.window.done + result.window.inDoubt).toBe(600);
      // What a crash costs: the sends since the last marks write (25, or those in flight when it
      // came), and the reservations in flight: one per worker, one more with reserve-ahead.
      expect(inDoubtSent).toBeLessThanOrEqual(25 + concurrency);
      expect(inDoubtUnsent.length).toBeLessThanOrEqual(unsentAtMost);
      console.info(
        `reserveAhead ${reserveAhead}: killed after 230 sends, in doubt ${result.window.inDoubt} ` +
          `(${inDoubtSent} sent, ${inDoubtUnsent.length} never sent)`,
      );
    },
  );
});
