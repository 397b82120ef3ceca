import { describe, expect, it } from 'vitest';
import { memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import { defineJob } from '../../shared/job/job-definition.js';
import { RecordingLog, schedulerEvent, TEST_SECRET, testHandler } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';

const WINDOW = '2026-11-30T06:00:00Z';
const recipients = ['alice@example.org', 'bob@example.org', 'carol@example.org'];

describe('what a run writes about a failed effect', () => {
  it('puts no recipient address in the run log or the stored lastError when a sender throws the raw provider text', async () => {
    const backend = memoryBackend({ hashKey: hmacEffectKeys(TEST_SECRET) });
    const log = new RecordingLog();
    // A sender that passes the provider's error on unmasked, as a third-party one might; and a
    // job that then fails with the last recipient in its message.
    const job = defineJob({
      id: 'weekly-report',
      async run(ctx) {
        await ctx.onceEach(recipients, { key: (to) => to, concurrency: 1 }, async (to) => {
          throw new Error(`Recipient command failed: 550 <${to}>`, {
            cause: new Error(`no mailbox ${to}`),
          });
        });
        throw new Error(`report for ${recipients.at(-1)} could not be sent`);
      },
    });
    const { handler } = testHandler(job, backend, {
      clock: new ManualClock(Date.parse(WINDOW) + 500),
      log,
      run: { maxAttempts: 1 },
    });

    await expect(handler(schedulerEvent('weekly-report', WINDOW))).rejects.toThrow();

    const effectLines = log.lines.filter((line) => line.message === 'effect did not complete');
    expect(effectLines).toHaveLength(3);
    expect(effectLines.map((line) => line.fields.error)).toEqual(
      Array(3).fill('Error: Recipient command failed: 550 <<address>> (cause: Error: no mailbox <address>)'),
    );
    const record = await backend.claims.read({ jobId: 'weekly-report', window: WINDOW });
    expect(record).toMatchObject({
      state: 'FAILED',
      lastError: 'Error: report for <address> could not be sent',
    });
    for (const to of recipients) expect(log.text()).not.toContain(to);
  });
});
