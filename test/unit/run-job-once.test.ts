import { defineJob, EffectNotPerformedError, type EmailSender, JobRunFailedError } from 'slotguard';
import { ManualClock, RecordingEmailSender, runJobOnce } from 'slotguard/testing';
import { describe, expect, it } from 'vitest';

const WINDOW = '2026-11-30T06:00:00Z';

/** A job as a user writes one: an email to each of `count` customers. */
function reportJob(sender: EmailSender, count = 3) {
  return defineJob({
    id: 'weekly-report',
    async run(ctx) {
      const customers = Array.from({ length: count }, (_, i) => ({
        id: `c${i}`,
        email: `c${i}@example.org`,
      }));
      await ctx.onceEach(customers, { key: (c) => c.id }, (c, signal) =>
        sender.send({ to: c.email, subject: 'Your weekly report', text: 'Hello' }, { signal }),
      );
    },
  });
}

describe('slotguard/testing: runJobOnce', () => {
  it('runs every effect of the window once and reports the summary and the metrics a deployed run would emit', async () => {
    const sender = new RecordingEmailSender();

    const run = await runJobOnce(reportJob(sender), { scheduledTime: WINDOW });

    expect(run.result).toMatchObject({
      status: 'completed',
      epoch: 1,
      summary: { done: 3, inDoubt: 0, failed: 0 },
    });
    expect(run.metrics).toMatchObject({
      ClaimAcquired: 1,
      EffectDone: 3,
      DuplicateClaim: 0,
      EffectInDoubt: 0,
    });
    expect(sender.total).toBe(3);
    expect(sender.duplicates()).toBe(0);
    expect(run.log.text()).not.toContain('@example.org');
  });

  it('does not email anyone twice when the same window fires again against the same backend', async () => {
    const sender = new RecordingEmailSender();
    const job = reportJob(sender);

    const first = await runJobOnce(job, { scheduledTime: WINDOW });
    const again = await runJobOnce(job, { scheduledTime: WINDOW, backend: first.backend, attemptNumber: 2 });

    expect(again.result.status).toBe('duplicate');
    expect(again.metrics.DuplicateClaim).toBe(1);
    expect(sender.total).toBe(3);
  });

  it('starts every call from an empty store unless given a backend, so tests do not leak into each other', async () => {
    const sender = new RecordingEmailSender();
    const job = reportJob(sender);

    await runJobOnce(job, { scheduledTime: WINDOW });
    const separate = await runJobOnce(job, { scheduledTime: WINDOW });

    expect(separate.result.status).toBe('completed');
    expect(sender.total).toBe(6);
  });

  it('reports a send the provider refused as waiting for its retry, not in doubt, and sends the others once', async () => {
    const sender = new RecordingEmailSender(async (message) => {
      if (message.to === 'c1@example.org') throw new EffectNotPerformedError('throttled');
    });

    const run = await runJobOnce(reportJob(sender), { scheduledTime: WINDOW });

    expect(run.result).toMatchObject({
      status: 'yielded',
      reason: 'retry-wait',
      summary: { done: 2, retrying: 1, failed: 0, inDoubt: 0 },
    });
    expect(run.metrics).toMatchObject({ EffectDone: 2, EffectRetried: 1, EffectFailed: 0, EffectInDoubt: 0 });
    expect(sender.perRecipient.has('c1@example.org')).toBe(false);
    expect(sender.total).toBe(2);
  });

  it('rejects with JobRunFailedError, the job error as its cause, when the job throws', async () => {
    const broken = defineJob({
      id: 'weekly-report',
      async run() {
        throw new Error('customer query failed');
      },
    });

    const failure = await runJobOnce(broken, { scheduledTime: WINDOW }).catch((error: unknown) => error);

    expect(failure).toBeInstanceOf(JobRunFailedError);
    expect((failure as JobRunFailedError).cause).toEqual(new Error('customer query failed'));
  });

  it("takes the window from the clock's current minute when none is given", async () => {
    const clock = new ManualClock(Date.parse('2026-12-01T07:00:42Z'));
    let window = '';
    const job = defineJob({
      id: 'weekly-report',
      async run(ctx) {
        window = ctx.slot.window;
      },
    });

    await runJobOnce(job, { clock });

    expect(window).toBe('2026-12-01T07:00:00Z');
  });
});
