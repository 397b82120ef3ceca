import { describe, expect, it } from 'vitest';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import { InProcessWorkQueue } from '../../shared/continuation/in-process-work-queue.js';
import type { SqsRecord, VisibilityOutcome, WorkQueue } from '../../shared/continuation/work-queue.js';
import { defineJob, type JobDefinition } from '../../shared/job/job-definition.js';
import { createJobHandler, JobRunFailedError } from '../../shared/job/lambda-handler.js';
import type { RunOptions, SlotBackend } from '../../shared/job/run-slot.js';
import { emfMetrics } from '../../shared/telemetry/metrics.js';
import { CountingSender } from '../helpers/counting-sender.js';
import { useDynamo } from '../helpers/dynalite.js';
import { EmfRecorder, RecordingLog, schedulerEvent, testBackend } from '../helpers/harness.js';
import { ManualClock, settle } from '../helpers/manual-clock.js';

const WINDOW = '2026-11-30T06:00:00Z';
const SLOT = { jobId: 'weekly-report', window: WINDOW };
const SECOND = 1_000;
const LEASE = 60_000;

const dynamo = useDynamo();

/** The port, with every call it was asked to make written down. */
class RecordingQueue implements WorkQueue {
  readonly visibility: { handle: string; ms: number; at: number }[] = [];
  readonly sent: { body: unknown; delayMs: number; at: number }[] = [];
  failVisibility = false;
  constructor(
    readonly inner: InProcessWorkQueue,
    private readonly clock: ManualClock,
  ) {}
  async send(body: string, delayMs: number): Promise<void> {
    this.sent.push({ body: JSON.parse(body), delayMs, at: this.clock.now() });
    await this.inner.send(body, delayMs);
  }
  async sendBatch(bodies: readonly string[], delayMs: number): Promise<void> {
    for (const body of bodies) this.sent.push({ body: JSON.parse(body), delayMs, at: this.clock.now() });
    await this.inner.sendBatch(bodies, delayMs);
  }
  async changeVisibility(handle: string, ms: number): Promise<VisibilityOutcome> {
    this.visibility.push({ handle, ms, at: this.clock.now() });
    if (this.failVisibility) throw new Error('ThrottlingException: Rate exceeded');
    return this.inner.changeVisibility(handle, ms);
  }
}

async function setUp(job: JobDefinition, options: RunOptions = {}) {
  const backend: SlotBackend = testBackend(dynamo.client(), await dynamo.freshTable());
  const clock = new ManualClock(Date.parse(WINDOW) + 500);
  const queue = new InProcessWorkQueue({ clock, visibilityTimeoutMs: 6 * 900 * SECOND });
  const recording = new RecordingQueue(queue, clock);
  const emf = new EmfRecorder();
  const log = new RecordingLog();
  const handler = createJobHandler(job, {
    backend,
    metrics: () => emfMetrics({ jobId: job.id, write: emf.write }),
    log,
    clock,
    options: { leaseMs: LEASE, ...options },
    workQueue: recording,
  });
  /** Sends the window's message and receives it, as the schedule and the event source mapping would. */
  async function deliver(body: string = JSON.stringify(schedulerEvent('weekly-report', WINDOW))) {
    await queue.send(body, 0);
    return receive();
  }
  function receive(): SqsRecord {
    const [record] = queue.receive(1);
    if (!record) throw new Error('no message is due');
    return record;
  }
  const context = (remainingMs = 900 * SECOND) => ({
    awsRequestId: 'req-1',
    getRemainingTimeInMillis: () => remainingMs,
  });
  return { backend, clock, queue, recording, emf, log, handler, deliver, receive, context };
}

/** Lets I/O and promise callbacks run until `condition` holds: event-loop turns, no timer, bounded. */
async function until(condition: () => boolean): Promise<void> {
  for (let turn = 0; turn < 200_000; turn++) {
    if (condition()) return;
    await settle();
  }
  throw new Error('the condition never held');
}

const report = (sender: CountingSender, customers = 30) =>
  weeklyReportJob({ customers: () => syntheticCustomers(customers), sender });

describe('a window delivered from the work queue', () => {
  it('deletes the message of a window that finished, after keeping it invisible for two leases from the claim and every renewal', async () => {
    let started = false;
    const s = await setUp(
      defineJob({
        id: 'weekly-report',
        async run(ctx) {
          // A run that lasts 70 s: its lease is renewed at 20, 40 and 60 s.
          started = true;
          await new Promise<void>((resolve) => s.clock.schedule(70 * SECOND, resolve));
          await ctx.once('only-effect', async () => {});
        },
      }),
    );
    const record = await s.deliver();
    const deliveredAt = s.clock.now();
    const running = s.handler({ Records: [record] }, s.context());
    await until(() => started && s.recording.visibility.length === 1);
    for (const renewal of [1, 2, 3]) {
      await s.clock.advance(20 * SECOND);
      await until(() => s.recording.visibility.length === 1 + renewal);
    }
    await s.clock.advance(10 * SECOND);
    const response = await running;

    expect(response).toEqual({ batchItemFailures: [] });
    expect(s.recording.visibility.map((v) => [v.at - deliveredAt, v.ms])).toEqual([
      [0, 2 * LEASE],
      [20 * SECOND, 2 * LEASE],
      [40 * SECOND, 2 * LEASE],
      [60 * SECOND, 2 * LEASE],
    ]);
    expect(s.recording.visibility.every((v) => v.handle === record.receiptHandle)).toBe(true);
    expect(await s.backend.claims.read(SLOT)).toMatchObject({ state: 'DONE' });
  });

  it('keeps the message of a run that stopped for time and brings it back a second later, where the next run finishes', async () => {
    const sender = new CountingSender();
    const s = await setUp(report(sender, 300), { stopMarginMs: 30 * SECOND });
    const first = await s.handler(
      { Records: [await s.deliver()] },
      { awsRequestId: 'req-1', getRemainingTimeInMillis: () => 120 * SECOND - sender.total * SECOND },
    );
    expect(first.batchItemFailures).toHaveLength(1);
    expect(s.recording.visibility.at(-1)?.ms).toBe(SECOND);
    expect(s.queue.counts()).toMatchObject({ visible: 0, invisible: 1 });
    await s.clock.advance(SECOND);
    const again = s.receive();
    expect(again.attributes.ApproximateReceiveCount).toBe('2');
    const second = await s.handler({ Records: [again] }, s.context());

    expect(second).toEqual({ batchItemFailures: [] });
    expect(sender.total).toBe(300);
    expect(sender.duplicates()).toBe(0);
    expect(await s.backend.claims.read(SLOT)).toMatchObject({ state: 'DONE', epoch: 2 });
    expect(s.emf.sum('DuplicateClaim')).toBe(0);
  });

  it.each([
    ['a body that is not JSON', 'report for 2026-11-30', 'body'],
    ['a body for another job', JSON.stringify(schedulerEvent('payment-reminder', WINDOW)), 'jobId'],
    ['a body without a scheduled time', JSON.stringify({ jobId: 'weekly-report' }), 'scheduledTime'],
  ])(
    'deletes %s as an invalid event: no claim, an InvalidEvent metric, a log line',
    async (_name, body, field) => {
      const sender = new CountingSender();
      const s = await setUp(report(sender));
      const response = await s.handler({ Records: [await s.deliver(body)] }, s.context());

      expect(response).toEqual({ batchItemFailures: [] });
      expect(s.emf.sum('InvalidEvent')).toBe(1);
      expect(s.log.lines.filter((l) => l.message.startsWith('event rejected'))).toMatchObject([
        { fields: { field } },
      ]);
      expect(s.log.text()).not.toContain('report for 2026-11-30');
      expect(await s.backend.claims.read(SLOT)).toBeUndefined();
      expect(sender.total).toBe(0);
    },
  );

  it('keeps a message whose window another run holds until that lease has ended, counting a duplicate on the first delivery only', async () => {
    let release!: () => void;
    const paused = new Promise<void>((r) => {
      release = r;
    });
    const sender = new CountingSender(() => paused);
    const s = await setUp(report(sender, 5));
    const holder = s.handler(schedulerEvent('weekly-report', WINDOW), s.context());
    await until(() => sender.total === 0 && s.log.lines.some((l) => l.message === 'slot claimed'));
    const claimedAt = s.clock.now();
    await s.clock.advance(10 * SECOND);
    const record = await s.deliver();
    const first = await s.handler({ Records: [record] }, s.context());
    // The same message's second delivery: the engine continuing, not a second fire.
    const redelivery = { ...record, attributes: { ...record.attributes, ApproximateReceiveCount: '2' } };
    const second = await s.handler({ Records: [redelivery] }, s.context());
    release();
    await holder;

    expect(first.batchItemFailures).toEqual([{ itemIdentifier: record.messageId }]);
    expect(second.batchItemFailures).toEqual([{ itemIdentifier: record.messageId }]);
    // The holder's lease ends 60 s after its claim, 50 s from now: back 5 s after that.
    const leaseLeft = claimedAt + LEASE - s.clock.now();
    expect(s.recording.visibility.map((v) => v.ms)).toEqual([leaseLeft + 5 * SECOND, leaseLeft + 5 * SECOND]);
    expect(s.emf.sum('DuplicateClaim')).toBe(1);
  });

  it('fails the invocation for a job that threw, keeping its message for 60 s times its deliveries', async () => {
    const s = await setUp(
      defineJob({
        id: 'weekly-report',
        async run() {
          throw new Error('customer query timed out');
        },
      }),
    );
    await expect(s.handler({ Records: [await s.deliver()] }, s.context())).rejects.toThrow(JobRunFailedError);
    expect(s.recording.visibility.at(-1)?.ms).toBe(60 * SECOND);
    await s.clock.advance(60 * SECOND);
    await expect(s.handler({ Records: [s.receive()] }, s.context())).rejects.toThrow(JobRunFailedError);
    expect(s.recording.visibility.at(-1)?.ms).toBe(120 * SECOND);
    expect(await s.backend.claims.read(SLOT)).toMatchObject({ state: 'RELEASED', failures: 2 });
  });

  it("deletes the message once the job's last allowed attempt left the slot FAILED", async () => {
    const s = await setUp(
      defineJob({
        id: 'weekly-report',
        async run() {
          throw new Error('customer query timed out');
        },
      }),
      { maxAttempts: 1 },
    );
    const response = await s.handler({ Records: [await s.deliver()] }, s.context());
    expect(response).toEqual({ batchItemFailures: [] });
    expect(await s.backend.claims.read(SLOT)).toMatchObject({ state: 'FAILED' });
  });

  it('finishes the window when every visibility heartbeat fails: the queue is a delay, never the guarantee', async () => {
    const sender = new CountingSender();
    const s = await setUp(report(sender));
    s.recording.failVisibility = true;
    const response = await s.handler({ Records: [await s.deliver()] }, s.context());

    expect(response).toEqual({ batchItemFailures: [] });
    expect(sender.total).toBe(30);
    expect(s.log.lines.filter((l) => l.message.startsWith('visibility heartbeat failed'))).toHaveLength(1);
  });
});

describe('a window past its deadline with work left', () => {
  const DEADLINE = 60 * SECOND;
  // The first claim is at the window + 0.5 s, so the window must be finished by 06:01:00.500.
  const deadlineText = '2026-11-30T06:01:00.500Z';
  /** An invocation whose time runs out once `sender` has sent `sends` emails. */
  const outOfTimeAfter = (sender: CountingSender, sends: number) => ({
    awsRequestId: 'req-1',
    getRemainingTimeInMillis: () => (sender.total >= sends ? 0 : 900 * SECOND),
  });
  /** One email at a time, so a run stops exactly where its time runs out. */
  const oneAtATime = (sender: CountingSender) =>
    weeklyReportJob({ customers: () => syntheticCustomers(300), sender, concurrency: 1 });
  /** Runs the handler on one record and does what the event source mapping does with its answer. */
  async function consume(
    s: Awaited<ReturnType<typeof setUp>>,
    record: SqsRecord,
    context: ReturnType<typeof outOfTimeAfter> = s.context(),
  ) {
    const response = await s.handler({ Records: [record] }, context);
    const kept = response.batchItemFailures.some((f) => f.itemIdentifier === record.messageId);
    if (!kept) s.queue.delete(record.receiptHandle);
    return response;
  }

  it('stops continuing a window whose run passed its deadline with work left: STUCK, paged, its message deleted', async () => {
    // The 20th email takes the clock past the deadline; the run's time then runs out. A lease of
    // 10 minutes keeps renewals out of the 61 s the clock jumps, so the run stops for time alone.
    const sender = new CountingSender(async () => {
      if (sender.total === 19) await s.clock.advance(DEADLINE + SECOND);
    });
    const s = await setUp(oneAtATime(sender), { deadlineMs: DEADLINE, leaseMs: 600 * SECOND });
    const response = await consume(s, await s.deliver(), outOfTimeAfter(sender, 20));

    expect(response).toEqual({ batchItemFailures: [] });
    expect(s.queue.counts()).toEqual({ visible: 0, invisible: 0, deadLetters: 0 });
    expect(sender.total).toBe(20);
    expect(await s.backend.claims.read(SLOT)).toMatchObject({
      state: 'STUCK',
      epoch: 1,
      deadline: Date.parse(deadlineText),
    });
    expect(s.emf.sum('WindowStuck')).toBe(1);
    expect(s.emf.sum('RunYielded')).toBe(0);
    expect(s.log.lines.filter((l) => l.message.startsWith('window STUCK'))).toMatchObject([
      { fields: { reason: `the window's deadline ${deadlineText} passed with work left`, done: 20 } },
    ]);

    // A continuation queued for the window and a late Scheduler retry stand down: no run, no email,
    // no second page, and both messages are deleted.
    const continuation = { ...schedulerEvent('weekly-report', WINDOW), continuation: true };
    for (const body of [continuation, schedulerEvent('weekly-report', WINDOW, 2)]) {
      expect(await consume(s, await s.deliver(JSON.stringify(body)))).toEqual({ batchItemFailures: [] });
    }
    expect(s.queue.counts()).toEqual({ visible: 0, invisible: 0, deadLetters: 0 });
    expect(sender.total).toBe(20);
    expect(sender.duplicates()).toBe(0);
    expect(await s.backend.claims.read(SLOT)).toMatchObject({ state: 'STUCK', epoch: 1 });
    expect(s.emf.sum('WindowStuck')).toBe(1);
    expect(s.emf.sum('ClaimAcquired')).toBe(1);
    // The retry is a fire of the schedule finding its window taken; the continuation is not.
    expect(s.emf.sum('DuplicateClaim')).toBe(1);
  });

  it('gives up on a window its continuation claims after the deadline: STUCK without walking, its message deleted', async () => {
    const sender = new CountingSender();
    const s = await setUp(oneAtATime(sender), { deadlineMs: DEADLINE });
    const first = await consume(s, await s.deliver(), outOfTimeAfter(sender, 20));
    expect(first.batchItemFailures).toHaveLength(1);
    expect(s.emf.sum('RunYielded')).toBe(1);
    expect(await s.backend.claims.read(SLOT)).toMatchObject({ state: 'RELEASED', epoch: 1 });

    // The continuation comes back only after the deadline (a throttled event source, a long queue).
    await s.clock.advance(DEADLINE + SECOND);
    const second = await consume(s, s.receive());

    expect(second).toEqual({ batchItemFailures: [] });
    expect(s.queue.counts()).toEqual({ visible: 0, invisible: 0, deadLetters: 0 });
    // It had all the time in the world, and sent nobody: past the deadline nothing is walked.
    expect(sender.total).toBe(20);
    expect(await s.backend.claims.read(SLOT)).toMatchObject({ state: 'STUCK', epoch: 2 });
    expect(s.emf.sum('WindowStuck')).toBe(1);
    expect(s.emf.sum('RunYielded')).toBe(1);
    expect(s.log.lines.filter((l) => l.message.startsWith('window STUCK'))).toMatchObject([
      { fields: { reason: `claimed after the window's deadline ${deadlineText} with work left`, done: 0 } },
    ]);
  });
});

describe('a window invoked directly, with a work queue configured', () => {
  it('queues its continuation, marked as one, when the run stops with work left', async () => {
    const sender = new CountingSender();
    const s = await setUp(report(sender, 300), { stopMarginMs: 30 * SECOND });
    const event = schedulerEvent('weekly-report', WINDOW);
    const result = await s.handler(event, {
      awsRequestId: 'req-1',
      getRemainingTimeInMillis: () => 120 * SECOND - sender.total * SECOND,
    });

    expect(result).toMatchObject({ status: 'yielded', reason: 'time' });
    expect(s.recording.sent).toEqual([
      { body: { ...event, continuation: true }, delayMs: SECOND, at: s.clock.now() },
    ]);
    await s.clock.advance(SECOND);
    const continued = await s.handler({ Records: [s.receive()] }, s.context());
    expect(continued).toEqual({ batchItemFailures: [] });
    expect(sender.total).toBe(300);
    expect(s.recording.sent).toHaveLength(1);
  });

  it('queues nothing for a window that finished', async () => {
    const s = await setUp(report(new CountingSender()));
    expect(await s.handler(schedulerEvent('weekly-report', WINDOW), s.context())).toMatchObject({
      status: 'completed',
    });
    expect(s.recording.sent).toEqual([]);
  });

  it('queues a wait longer than 15 minutes as 15 minutes', async () => {
    const { EffectNotPerformedError } = await import('../../shared/errors.js');
    const sender = new CountingSender(async (m) => {
      if (m.to.endsWith('c000002@example.com')) throw new EffectNotPerformedError('throttled');
    });
    const s = await setUp(report(sender, 3), { effectRetry: { firstDelayMs: 40 * 60_000 } });
    const result = await s.handler(schedulerEvent('weekly-report', WINDOW), s.context());

    expect(result).toMatchObject({ status: 'yielded', reason: 'retry-wait' });
    expect(s.recording.sent.map((m) => m.delayMs)).toEqual([15 * 60_000]);
  });
});
