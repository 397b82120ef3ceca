import { describe, expect, it } from 'vitest';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomerSource } from '../../functions/weekly-report/recipients.js';
import type { RunOptions } from '../../shared/job/run-slot.js';
import { CountingSender } from '../helpers/counting-sender.js';
import { useDynamo } from '../helpers/dynalite.js';
import { schedulerEvent, testBackend, testHandler } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';

const WINDOW = '2026-11-30T06:00:00Z';
const dynamo = useDynamo();

/**
 * One invocation with `timeoutMs` left when it starts, on the clock: every email takes 100 ms, one
 * at a time, so the run's stop point is exact.
 */
async function invocation(timeoutMs: number, run: RunOptions = {}) {
  const clock = new ManualClock(Date.parse(WINDOW) + 500);
  const sender = new CountingSender(() => clock.advance(100));
  const backend = testBackend(dynamo.client(), await dynamo.freshTable());
  const { handler } = testHandler(
    weeklyReportJob({ customers: () => syntheticCustomerSource(500), sender }),
    backend,
    { clock, run: { effectConcurrency: 1, ...run } },
  );
  const startedAt = clock.now();
  const result = await handler(schedulerEvent('weekly-report', WINDOW), {
    awsRequestId: 'req-1',
    getRemainingTimeInMillis: () => timeoutMs - (clock.now() - startedAt),
  });
  return { result, sender, elapsedMs: clock.now() - startedAt };
}

describe('a short Lambda timeout', () => {
  it('does not stop a 10-second invocation before its first email: the stop margin shrinks to a quarter of the time left at the claim', async () => {
    const { result, sender, elapsedMs } = await invocation(10_000);

    // A 30 s margin would have stopped it before the first email. A quarter of 10 s is 2.5 s:
    // emails start at 0, 0.1, … 7.5 s (76 of them), then the run yields inside its time.
    expect(result).toMatchObject({ status: 'yielded', reason: 'time', summary: { done: 76 } });
    expect(sender.total).toBe(76);
    expect(elapsedMs).toBeLessThan(10_000);
  });

  it('keeps a stopMarginMs that was set, even one longer than the invocation', async () => {
    const { result, sender } = await invocation(10_000, { stopMarginMs: 30_000 });

    expect(result).toMatchObject({ status: 'yielded', reason: 'time', summary: { done: 0 } });
    expect(sender.total).toBe(0);
  });

  it('sends nothing from an invocation with no time left, whose scaled margin is nothing', async () => {
    const { result, sender } = await invocation(0);

    expect(result).toMatchObject({ status: 'yielded', reason: 'time', summary: { done: 0 } });
    expect(sender.total).toBe(0);
  });
});
