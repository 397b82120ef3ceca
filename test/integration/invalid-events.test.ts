import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import { CountingSender } from '../helpers/counting-sender.js';
import { useDynamo } from '../helpers/dynalite.js';
import { EmfRecorder, RecordingLog, testBackend, testHandler } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';

const dynamo = useDynamo();

const NOW = Date.parse('2026-11-30T06:00:30Z');
const GOOD = {
  jobId: 'weekly-report',
  scheduledTime: '2026-11-30T06:00:00Z',
  executionId: 'e-1',
  attemptNumber: '1',
};

/** The good event with some fields drawn from other arbitraries. */
function goodWith(overrides: Record<string, fc.Arbitrary<unknown>>) {
  const constants = Object.fromEntries(Object.entries(GOOD).map(([k, v]) => [k, fc.constant<unknown>(v)]));
  return fc.record<Record<string, unknown>>({ ...constants, ...overrides });
}

/** Events that must be rejected: each breaks exactly one rule of the target input. */
const malformed = fc.oneof(
  fc.constantFrom<unknown>(null, undefined, 42, 'weekly-report', [], [GOOD], true),
  goodWith({ scheduledTime: fc.oneof(fc.string(), fc.integer(), fc.constant(null)) }).filter(
    (e) =>
      typeof e.scheduledTime !== 'string' ||
      !/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/.test(e.scheduledTime as string),
  ),
  fc.constantFrom(
    { ...GOOD, scheduledTime: '2026-02-31T06:00:00Z' },
    { ...GOOD, scheduledTime: '2026-11-30T24:00:00Z' },
    { ...GOOD, scheduledTime: '<aws.scheduler.scheduled-time>' },
    { ...GOOD, scheduledTime: '2026-11-30 06:00:00' },
    { ...GOOD, scheduledTime: '1999-01-01T00:00:00Z' },
    { ...GOOD, scheduledTime: '2030-01-01T00:00:00Z' },
    { jobId: GOOD.jobId },
  ),
  goodWith({ jobId: fc.string() }).filter((e) => e.jobId !== GOOD.jobId),
  goodWith({
    attemptNumber: fc.oneof(fc.constant('0'), fc.constant('-1'), fc.string({ minLength: 5 }), fc.double()),
  }).filter(
    (e) =>
      !(
        typeof e.attemptNumber === 'number' &&
        Number.isInteger(e.attemptNumber) &&
        e.attemptNumber >= 1 &&
        e.attemptNumber <= 1000
      ),
  ),
  goodWith({ payload: fc.string({ minLength: 17_000, maxLength: 20_000 }) }),
  goodWith({ backfilled: fc.oneof(fc.string(), fc.integer()) }),
);

describe('malformed events', () => {
  it('are rejected as permanent: no claim, no send, an InvalidEvent metric, no thrown error', async () => {
    const table = await dynamo.freshTable();
    const backend = testBackend(dynamo.client(), table);
    const sender = new CountingSender();
    const emf = new EmfRecorder();
    const log = new RecordingLog();
    const { handler } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomers(5), sender }),
      backend,
      {
        clock: new ManualClock(NOW),
        emf,
        log,
      },
    );
    let runs = 0;
    await fc.assert(
      fc.asyncProperty(malformed, async (event) => {
        runs++;
        const response = await handler(event);
        expect(response.status).toBe('rejected');
        if (response.status === 'rejected') expect(response.message.length).toBeGreaterThan(20);
      }),
      { numRuns: 300 },
    );
    expect(sender.total).toBe(0);
    expect(emf.sum('InvalidEvent')).toBe(runs);
    expect(emf.sum('ClaimAcquired') + emf.sum('DuplicateClaim')).toBe(0);
    expect(await backend.claims.read({ jobId: 'weekly-report', window: GOOD.scheduledTime })).toBeUndefined();
    expect(log.lines.filter((l) => l.level === 'error')).toHaveLength(runs);
    // The good event still runs afterwards: nothing was claimed by the rejected ones.
    expect(await handler(GOOD)).toMatchObject({ status: 'completed', summary: { done: 5 } });
  });

  it('names the value and the fix in the message', async () => {
    const table = await dynamo.freshTable();
    const { handler } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomers(1), sender: new CountingSender() }),
      testBackend(dynamo.client(), table),
      { clock: new ManualClock(NOW) },
    );
    expect(await handler({ ...GOOD, scheduledTime: '2026-02-31T06:00:00Z' })).toMatchObject({
      field: 'scheduledTime',
      message: expect.stringMatching(/"2026-02-31T06:00:00Z".*<aws\.scheduler\.scheduled-time>/),
    });
    expect(await handler({ ...GOOD, jobId: 'Weekly Report' })).toMatchObject({
      field: 'jobId',
      message: expect.stringMatching(/"Weekly Report" is not a valid job id: use 1-63 characters/),
    });
    expect(await handler({ ...GOOD, jobId: 'monthly-report' })).toMatchObject({
      field: 'jobId',
      message: expect.stringMatching(
        /"monthly-report" is not the job this function runs \("weekly-report"\)/,
      ),
    });
    expect(await handler({ ...GOOD, scheduledTime: '2026-09-01T06:00:00Z' })).toMatchObject({
      field: 'scheduledTime',
      message: expect.stringMatching(/older than the 35-day retention minus a day.*raise retentionDays/),
    });
  });
});
