import { SESv2Client, SendEmailCommand } from '@aws-sdk/client-sesv2';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, it } from 'vitest';
import { jobCatalog } from '../../functions/catalog.js';
import { paymentReminderJob, syntheticDueInvoices } from '../../functions/payment-reminder/job.js';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomerSource } from '../../functions/weekly-report/recipients.js';
import {
  InProcessEventSource,
  type InvocationReport,
} from '../../shared/continuation/in-process-event-source.js';
import { InProcessWorkQueue } from '../../shared/continuation/in-process-work-queue.js';
import { SesEmailSender } from '../../shared/effects/ses-email-sender.js';
import type { JobDefinition } from '../../shared/job/job-definition.js';
import { JOB_DEFAULTS } from '../../shared/job/job-spec.js';
import { createJobHandler } from '../../shared/job/lambda-handler.js';
import { emfMetrics } from '../../shared/telemetry/metrics.js';
import { useDynamo } from '../helpers/dynalite.js';
import { EmfRecorder, RecordingLog, schedulerEvent, testBackend } from '../helpers/harness.js';
import { quiet, VirtualClock } from '../helpers/virtual-clock.js';

/*
 * The README's deployment, end to end, in virtual time: the real job modules and SesEmailSender
 * (its SESv2Client an aws-sdk-client-mock recording each SendEmail: SES cannot run here) at the
 * deployed send rate on the clock, the handler's SQS path fed by the in-process work queue and
 * event source configured as the ScheduledJob's (visibility 6 × timeout, maximum concurrency 2,
 * redrive after min(1000, 2 × ceil(deadline / timeout) + 50) receives), each invocation given the
 * function's timeout on the clock, and DynamoDB on dynalite. Before issue 9, a window that did not
 * fit one run was never finished: 886 of 12,400 customers got their report at 1 email a second.
 */

const SECOND = 1_000;
const HOUR = 3_600_000;
const dynamo = useDynamo();
const ses = mockClient(SESv2Client);
afterEach(() => ses.reset());

interface Deployment {
  readonly jobId: string;
  readonly job: (sender: SesEmailSender) => JobDefinition;
  readonly window: string;
  readonly ratePerSecond: number;
  /** The ScheduledJob's default: the gap to the next window, at most 6 hours. */
  readonly deadlineMs: number;
  /** Delivers every message twice, as SQS (at least once) may. @default false */
  readonly duplicateDeliveries?: boolean;
  /** @default the job's spec */
  readonly effectConcurrency?: number;
}

/** Fires one window into the work queue and runs everything in virtual time until no work is left. */
async function deploy(d: Deployment) {
  const spec = jobCatalog.find((s) => s.id === d.jobId);
  if (!spec) throw new Error(`no job ${d.jobId} in the catalog`);
  const timeoutMs = (spec.timeoutSeconds ?? JOB_DEFAULTS.timeoutSeconds) * 1000;
  const clock = new VirtualClock(Date.parse(d.window) + 500);

  // Every DynamoDB request is counted while in flight: time moves only when none is.
  const client = dynamo.client();
  let inFlight = 0;
  client.middlewareStack.add(
    (next) => async (args) => {
      inFlight++;
      try {
        return await next(args);
      } finally {
        inFlight--;
      }
    },
    { step: 'initialize', name: 'countInFlight' },
  );
  const backend = testBackend(client, await dynamo.freshTable());

  const sent: string[] = [];
  ses.on(SendEmailCommand).callsFake(async (input) => {
    sent.push(String(input.Destination?.ToAddresses?.[0]));
    return { MessageId: `ses-${sent.length}` };
  });
  const sender = new SesEmailSender({
    fromAddress: 'reports@example.com',
    client: new SESv2Client({ region: 'eu-west-1', maxAttempts: 1 }),
    maxSendRatePerSecond: d.ratePerSecond,
    clock,
  });

  const queue = new InProcessWorkQueue({
    clock,
    visibilityTimeoutMs: 6 * timeoutMs,
    maxReceiveCount: Math.min(1000, 2 * Math.ceil(d.deadlineMs / timeoutMs) + 50),
    ...(d.duplicateDeliveries ? { duplicate: () => true } : {}),
  });
  const emf = new EmfRecorder();
  const handler = createJobHandler(d.job(sender), {
    backend,
    metrics: () => emfMetrics({ jobId: d.jobId, write: emf.write }),
    log: new RecordingLog(),
    clock,
    options: {
      leaseMs: (spec.leaseSeconds ?? JOB_DEFAULTS.leaseSeconds) * 1000,
      effectConcurrency: d.effectConcurrency ?? spec.effectConcurrency ?? JOB_DEFAULTS.effectConcurrency,
      maxAttempts: spec.maxAttempts ?? JOB_DEFAULTS.maxAttempts,
      deadlineMs: d.deadlineMs,
    },
    workQueue: queue,
  });
  const invocations: InvocationReport[] = [];
  const source = new InProcessEventSource({
    queue,
    handler,
    clock,
    maximumConcurrency: 2,
    timeoutMs,
    onInvocation: (report) => invocations.push(report),
  });

  // EventBridge Scheduler's target is the queue: the window's event, as the schedule sends it.
  await queue.send(JSON.stringify(schedulerEvent(d.jobId, d.window)), 0);
  source.start();
  const startedAt = clock.now();
  for (;;) {
    await quiet(() => inFlight);
    if (queue.nextVisibleAt() === undefined && source.inFlight === 0) break;
    const next = clock.nextTimerAt;
    if (next === undefined)
      throw new Error('stalled: work is left, nothing is in flight and no timer is set');
    await clock.advance(next - clock.now());
  }
  await source.stop();
  const record = await backend.claims.read({ jobId: d.jobId, window: d.window });
  const hours = (clock.now() - startedAt) / HOUR;
  console.info(
    `${d.jobId} at ${d.ratePerSecond}/s: ${sent.length} sent (${duplicates(sent)} twice) in ` +
      `${invocations.length} invocations, ${record?.summary?.runs} runs, ${hours.toFixed(2)} h of virtual time; ` +
      `window ${record?.state}`,
  );
  return { sent, invocations, record, emf, queue, hours };
}

function duplicates(sent: readonly string[]): number {
  return sent.length - new Set(sent).size;
}

const weeklyReport = (customers: number, ratePerSecond: number): Deployment => ({
  jobId: 'weekly-report',
  // The customer source functions/weekly-report/handler.ts deploys.
  job: (sender) => weeklyReportJob({ customers: () => syntheticCustomerSource(customers), sender }),
  // cron(0 9 ? * MON *) in Europe/Moscow; a week to the next window, so the deadline is 6 hours.
  window: '2026-11-30T06:00:00Z',
  ratePerSecond,
  deadlineMs: 6 * HOUR,
});

describe("the README's deployment finishes every window", () => {
  it.each([
    [1, 14],
    [10, 2],
  ])(
    'sends the weekly report to all 12,400 customers, none twice, at %i email a second (at least %i runs of 15 minutes)',
    async (rate, minRuns) => {
      const run = await deploy(weeklyReport(12_400, rate));

      expect(run.sent).toHaveLength(12_400);
      expect(duplicates(run.sent)).toBe(0);
      expect(run.record).toMatchObject({
        state: 'DONE',
        summary: { done: 12_400, inDoubt: 0, failed: 0 },
      });
      const runs = run.record?.summary?.runs ?? 0;
      expect(runs).toBeGreaterThanOrEqual(minRuns);
      expect(runs).toBeLessThanOrEqual(minRuns + 1);
      // One invocation per run: every redelivery claimed the window, none found it held.
      expect(run.invocations).toHaveLength(runs);
      expect(run.invocations.map((i) => i.outcome)).toEqual(Array(runs).fill('returned'));
      expect(run.queue.counts()).toEqual({ visible: 0, invisible: 0, deadLetters: 0 });
      expect(run.emf.sum('RunYielded')).toBe(runs - 1);
      expect(run.emf.sum('DuplicateClaim')).toBe(0);
      expect(run.hours).toBeLessThan(6);
    },
    // About 40 s (1 a second) and 20 s (10 a second) of real time on dynalite; more on a loaded machine.
    240_000,
  );

  const paymentReminder = (
    invoices: number,
    ratePerSecond: number,
    duplicateDeliveries = false,
  ): Deployment => ({
    jobId: 'payment-reminder',
    job: (sender) =>
      paymentReminderJob({ dueInvoices: (window) => syntheticDueInvoices(window, invoices), sender }),
    // rate(15 minutes): the next window is 15 minutes away, and so is the deadline.
    window: '2026-11-30T06:15:00Z',
    ratePerSecond,
    deadlineMs: 15 * 60 * SECOND,
    duplicateDeliveries,
  });

  // Ten times the reminders at ten times the rate: each run of the 5-minute timeout sends about 270
  // seconds' worth, so both need 3 runs, and one run alone would strand more than half the window.
  it.each([
    { rate: 1, invoices: 600 },
    { rate: 10, invoices: 6_000 },
  ])(
    'sends $invoices payment reminders at $rate a second in 3 runs of its 5-minute timeout, inside its 15-minute window',
    async ({ rate, invoices }) => {
      const run = await deploy(paymentReminder(invoices, rate));

      expect(run.sent).toHaveLength(invoices);
      expect(duplicates(run.sent)).toBe(0);
      expect(run.record).toMatchObject({
        state: 'DONE',
        summary: { done: invoices, inDoubt: 0, failed: 0, runs: 3 },
      });
      expect(run.invocations.map((i) => i.outcome)).toEqual(['returned', 'returned', 'returned']);
      expect(run.queue.counts()).toEqual({ visible: 0, invisible: 0, deadLetters: 0 });
      expect(run.emf.sum('RunYielded')).toBe(2);
      expect(run.emf.sum('DuplicateClaim')).toBe(0);
      expect(run.hours * 60).toBeLessThan(15);
    },
    // About a minute of real time at 10 a second on dynalite on a shared 2-core machine.
    240_000,
  );

  // 64 sends queued behind a rate of 1 a second take 64 s, past the run's 30 s stop margin: with half
  // the margin left their waits are cut, so each invocation ends inside its timeout, and what they
  // had reserved is put back, due at once, for the next run. Lambda would have killed it instead.
  it('ends every invocation inside its timeout when 64 sends queue behind 1 email a second, and leaves nothing in doubt', async () => {
    const run = await deploy({ ...paymentReminder(360, 1), effectConcurrency: 64 });

    expect(run.sent).toHaveLength(360);
    expect(duplicates(run.sent)).toBe(0);
    expect(run.invocations.map((i) => i.outcome)).toEqual(['returned', 'returned']);
    expect(run.record).toMatchObject({
      state: 'DONE',
      summary: { done: 360, inDoubt: 0, failed: 0, runs: 2 },
    });
    // The first run stopped reserving with 30 s left and cut the waits of those still queued at 15 s.
    expect(run.emf.sum('EffectInDoubtFound')).toBe(0);
    expect(run.emf.sum('EffectRetried')).toBe(0);
    expect(run.queue.counts()).toEqual({ visible: 0, invisible: 0, deadLetters: 0 });
  });

  it('sends each payment reminder once when SQS delivers every message twice', async () => {
    const run = await deploy(paymentReminder(600, 1, true));

    expect(run.sent).toHaveLength(600);
    expect(duplicates(run.sent)).toBe(0);
    expect(run.record).toMatchObject({ state: 'DONE', summary: { done: 600, inDoubt: 0, failed: 0 } });
    // Every delivery came twice; the copy that found the slot held stood down and came back later.
    expect(run.invocations.length).toBeGreaterThan(run.record?.summary?.runs ?? 0);
    expect(run.queue.counts()).toEqual({ visible: 0, invisible: 0, deadLetters: 0 });
    expect(run.hours * 60).toBeLessThan(15);
  });
});
