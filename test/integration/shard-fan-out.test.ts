import { describe, expect, it } from 'vitest';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomerSource } from '../../functions/weekly-report/recipients.js';
import {
  InProcessWorkQueue,
  type InProcessWorkQueueOptions,
} from '../../shared/continuation/in-process-work-queue.js';
import {
  BatchSendError,
  type SqsRecord,
  type VisibilityOutcome,
  type WorkQueue,
  WorkQueueError,
} from '../../shared/continuation/work-queue.js';
import { defineJob, type JobDefinition } from '../../shared/job/job-definition.js';
import { createJobHandler } from '../../shared/job/lambda-handler.js';
import { emfMetrics } from '../../shared/telemetry/metrics.js';
import { CountingSender } from '../helpers/counting-sender.js';
import { useDynamo } from '../helpers/dynalite.js';
import { EmfRecorder, RecordingLog, schedulerEvent, testBackend } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';

const WINDOW = '2026-11-30T06:00:00Z';
const SLOT = { jobId: 'weekly-report', window: WINDOW };
const SHARDS = 4;
const CUSTOMERS = 40;
const SECOND = 1_000;

const dynamo = useDynamo();

/**
 * The in-process queue, refusing the first message sent for one shard, as SQS answering 503 would,
 * and sending a batch one message at a time: the batch stops at the refused one.
 */
class RefusingQueue implements WorkQueue {
  readonly refused: number[] = [];
  constructor(
    readonly inner: InProcessWorkQueue,
    private refuseShard: number | undefined,
  ) {}
  async send(body: string, delayMs: number): Promise<void> {
    const { shard } = JSON.parse(body) as { shard?: number };
    if (shard !== undefined && shard === this.refuseShard) {
      this.refuseShard = undefined;
      this.refused.push(shard);
      throw Object.assign(new Error('Service Unavailable'), { name: 'ServiceUnavailable' });
    }
    await this.inner.send(body, delayMs);
  }
  async sendBatch(bodies: readonly string[], delayMs: number): Promise<void> {
    for (const [sent, body] of bodies.entries()) {
      try {
        await this.send(body, delayMs);
      } catch (cause) {
        throw new BatchSendError(
          `sent ${sent} of ${bodies.length}`,
          { sent, total: bodies.length },
          { cause },
        );
      }
    }
  }
  changeVisibility(receiptHandle: string, visibleInMs: number): Promise<VisibilityOutcome> {
    return this.inner.changeVisibility(receiptHandle, visibleInMs);
  }
}

/**
 * A weekly report split into `shards` on a fresh table, its handler sending to `workQueue` (the
 * in-process queue, or something around it), and what the event source mapping does around it.
 */
async function setUp<Q extends WorkQueue>(o: {
  readonly shards: number;
  readonly customers: number;
  readonly queue?: Pick<InProcessWorkQueueOptions, 'refuse'>;
  readonly workQueue: (queue: InProcessWorkQueue) => Q;
  /** @default the weekly report itself */
  readonly job?: (report: JobDefinition) => JobDefinition;
}) {
  const backend = testBackend(dynamo.client(), await dynamo.freshTable());
  const clock = new ManualClock(Date.parse(WINDOW) + 500);
  const queue = new InProcessWorkQueue({ clock, visibilityTimeoutMs: 6 * 900 * SECOND, ...o.queue });
  const workQueue = o.workQueue(queue);
  const sender = new CountingSender();
  const report = weeklyReportJob({ customers: () => syntheticCustomerSource(o.customers), sender });
  const emf = new EmfRecorder();
  const log = new RecordingLog();
  const handler = createJobHandler(o.job ? o.job(report) : report, {
    backend,
    metrics: () => emfMetrics({ jobId: 'weekly-report', write: emf.write }),
    log,
    clock,
    // A 10-minute lease: no renewal falls inside the minute the test moves the clock.
    options: { leaseMs: 600 * SECOND, shards: o.shards },
    workQueue,
  });
  const context = { awsRequestId: 'req-1', getRemainingTimeInMillis: () => 900 * SECOND };
  /** Runs one record and does what the event source mapping does: deletes it unless kept or failed. */
  async function consume(record: SqsRecord) {
    const response = await handler({ Records: [record] }, context);
    if (response.batchItemFailures.length === 0) queue.delete(record.receiptHandle);
    return response;
  }
  function receive(): SqsRecord {
    const [record] = queue.receive(1);
    if (!record) throw new Error('no message is due');
    return record;
  }
  const shardRecords = () =>
    Promise.all(Array.from({ length: o.shards }, (_, shard) => backend.claims.read({ ...SLOT, shard })));
  /** The schedule's message for the window, received: the coordinator's. */
  async function fire(): Promise<SqsRecord> {
    await queue.send(JSON.stringify(schedulerEvent('weekly-report', WINDOW)), 0);
    return receive();
  }
  return { backend, clock, queue, workQueue, sender, emf, log, consume, receive, shardRecords, fire };
}

const shardOf = (record: SqsRecord) => (JSON.parse(record.body) as { shard?: number }).shard;

describe('a coordinator whose shard fan-out fails part way', () => {
  it('fails its run and keeps its message; the redelivery sends every shard again, and no shard runs twice at once nor anyone is emailed twice', async () => {
    // Shard 0's first run waits, holding its lease, until the test lets it go on.
    let enteredShard0!: () => void;
    let releaseShard0!: () => void;
    const shard0Entered = new Promise<void>((resolve) => {
      enteredShard0 = resolve;
    });
    const shard0Released = new Promise<void>((resolve) => {
      releaseShard0 = resolve;
    });
    const { backend, clock, queue, workQueue, sender, emf, log, consume, receive, shardRecords, fire } =
      await setUp({
        shards: SHARDS,
        customers: CUSTOMERS,
        workQueue: (queue) => new RefusingQueue(queue, 2),
        job: (report) =>
          defineJob({
            id: 'weekly-report',
            async run(ctx) {
              if (ctx.shard?.index === 0) {
                enteredShard0();
                await shard0Released;
              }
              await report.run(ctx);
            },
          }),
      });

    // The schedule's message: its coordinator sends shards 0 and 1, then SQS refuses shard 2's.
    const coordinator = await fire();
    const failedAt = clock.now();
    const failed = await consume(coordinator).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(failed).toBeInstanceOf(WorkQueueError);
    expect((failed as Error).message).toMatch(
      `sent 2 of the 4 shard messages of window ${WINDOW} of job 'weekly-report' (ServiceUnavailable: Service Unavailable)`,
    );
    expect(workQueue.refused).toEqual([2]);
    // The window is given back, not split: its message (kept, a minute away) will split it again.
    expect(await backend.claims.read(SLOT)).toMatchObject({
      state: 'RELEASED',
      epoch: 1,
      runsWithoutProgress: 1,
    });
    expect(queue.counts()).toEqual({ visible: 2, invisible: 1, deadLetters: 0 });
    expect(log.lines.filter((l) => l.message.startsWith('could not send the shards'))).toHaveLength(1);

    // The two shards that were sent run meanwhile: shard 0 holds its lease, shard 1 finishes.
    const shard0 = receive();
    expect(shardOf(shard0)).toBe(0);
    const shard0Run = consume(shard0);
    await shard0Entered;
    const shard1 = receive();
    expect(shardOf(shard1)).toBe(1);
    expect(await consume(shard1)).toEqual({ batchItemFailures: [] });
    expect((await shardRecords()).map((r) => r?.state)).toEqual(['RUNNING', 'DONE', undefined, undefined]);

    // The coordinator's message comes back a minute after its failure (60 s × its one delivery): the
    // window is claimed again and every shard sent.
    expect(queue.nextVisibleAt()).toBe(failedAt + 60 * SECOND);
    await clock.advance(60 * SECOND);
    const again = receive();
    expect(again.messageId).toBe(coordinator.messageId);
    expect(again.attributes.ApproximateReceiveCount).toBe('2');
    expect(await consume(again)).toEqual({ batchItemFailures: [] });
    // Shard 1 ended before its window was split: the coordinator recorded it.
    expect(await backend.claims.read(SLOT)).toMatchObject({
      state: 'SHARDED',
      epoch: 2,
      finishedShards: [1],
    });

    // The four new messages: shard 0's second stands down while its first run holds the shard,
    // shard 1's finds it done, shards 2 and 3 run.
    const kept: number[] = [];
    for (let n = 0; n < SHARDS; n++) {
      const record = receive();
      const response = await consume(record);
      if (response.batchItemFailures.length > 0) kept.push(shardOf(record) ?? -1);
    }
    expect(kept).toEqual([0]);
    expect((await shardRecords()).map((r) => r?.state)).toEqual(['RUNNING', 'DONE', 'DONE', 'DONE']);

    // Shard 0's first run goes on, finishes its shard, and with it the window.
    releaseShard0();
    expect(await shard0Run).toEqual({ batchItemFailures: [] });
    const next = queue.nextVisibleAt() ?? clock.now();
    await clock.advance(next - clock.now());
    expect(await consume(receive())).toEqual({ batchItemFailures: [] });

    expect(queue.counts()).toEqual({ visible: 0, invisible: 0, deadLetters: 0 });
    expect(sender.total).toBe(CUSTOMERS);
    expect(sender.duplicates()).toBe(0);
    expect(await backend.claims.read(SLOT)).toMatchObject({
      state: 'DONE',
      finishedShards: [0, 1, 2, 3],
      summary: { done: CUSTOMERS, inDoubt: 0, failed: 0, runs: SHARDS },
    });
    // Each shard ran once, at epoch 1: none was claimed by a second run, none taken over.
    expect((await shardRecords()).map((r) => [r?.state, r?.epoch])).toEqual(Array(SHARDS).fill(['DONE', 1]));
    expect(emf.sum('ClaimAcquired')).toBe(2 + SHARDS);
    expect(emf.sum('LeaseTakeover')).toBe(0);
    expect(emf.sum('DuplicateClaim')).toBe(0);
  });
});

describe('a coordinator whose batch of shard messages is refused in part', () => {
  it('counts exactly the shard messages the queue took, and its redelivery completes the split with every shard run once', async () => {
    const shards = 25;
    const customers = 100;
    // SQS fails one entry of the second SendMessageBatch (shard 13's), once.
    let refusals = 0;
    const { backend, clock, queue, sender, emf, consume, receive, shardRecords, fire } = await setUp({
      shards,
      customers,
      queue: { refuse: ({ body }) => JSON.parse(body).shard === 13 && refusals++ === 0 },
      workQueue: (queue) => queue,
    });

    // Three batches (10, 10, 5), all in flight at once: each other message of the second is sent,
    // and so is the third batch, which had started before the refusal came back.
    const coordinator = await fire();
    const failed = await consume(coordinator).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(failed).toBeInstanceOf(WorkQueueError);
    expect((failed as Error).message).toMatch(
      `sent 24 of the 25 shard messages of window ${WINDOW} of job 'weekly-report' ` +
        '(WorkQueueError: the in-process queue refused the message (its refuse option))',
    );
    expect(refusals).toBe(1);
    expect(await backend.claims.read(SLOT)).toMatchObject({ state: 'RELEASED', epoch: 1 });
    expect(queue.counts()).toEqual({ visible: 24, invisible: 1, deadLetters: 0 });

    // The 24 shards that were sent run to their end meanwhile.
    const ran: number[] = [];
    for (let n = 0; n < 24; n++) {
      const record = receive();
      ran.push(shardOf(record) ?? -1);
      expect(await consume(record)).toEqual({ batchItemFailures: [] });
    }
    expect(ran.sort((a, b) => a - b)).toEqual(
      Array.from({ length: shards }, (_, i) => i).filter((i) => i !== 13),
    );
    expect((await shardRecords()).filter((r) => r?.state === 'DONE')).toHaveLength(24);

    // The coordinator's redelivery claims the window again, sends all 25 and records the 24 ended.
    await clock.advance((queue.nextVisibleAt() ?? clock.now()) - clock.now());
    const again = receive();
    expect(again.messageId).toBe(coordinator.messageId);
    expect(await consume(again)).toEqual({ batchItemFailures: [] });
    expect(await backend.claims.read(SLOT)).toMatchObject({ state: 'SHARDED', epoch: 2 });

    // 24 second messages find their shard done; shard 13 runs, and its end finishes the window.
    for (let n = 0; n < shards; n++) expect(await consume(receive())).toEqual({ batchItemFailures: [] });

    expect(queue.counts()).toEqual({ visible: 0, invisible: 0, deadLetters: 0 });
    expect(sender.total).toBe(customers);
    expect(sender.duplicates()).toBe(0);
    expect(await backend.claims.read(SLOT)).toMatchObject({
      state: 'DONE',
      finishedShards: Array.from({ length: shards }, (_, i) => i),
      summary: { done: customers, inDoubt: 0, failed: 0, runs: shards },
    });
    expect((await shardRecords()).map((r) => [r?.state, r?.epoch])).toEqual(Array(shards).fill(['DONE', 1]));
    expect(emf.sum('ClaimAcquired')).toBe(2 + shards);
    expect(emf.sum('LeaseTakeover')).toBe(0);
    expect(emf.sum('DuplicateClaim')).toBe(0);
  });
});
