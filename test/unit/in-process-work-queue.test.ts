import { describe, expect, it } from 'vitest';
import {
  InProcessEventSource,
  type InvocationReport,
} from '../../shared/continuation/in-process-event-source.js';
import { InProcessWorkQueue } from '../../shared/continuation/in-process-work-queue.js';
import type { SqsBatchResponse, SqsEvent } from '../../shared/continuation/work-queue.js';
import { ConfigurationError } from '../../shared/errors.js';
import type { InvocationContext } from '../../shared/job/lambda-handler.js';
import { ManualClock, settle } from '../helpers/manual-clock.js';

const SECOND = 1_000;

function deferred<T = void>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

describe('the in-process queue beyond the contract', () => {
  it('hands a message out twice when asked to duplicate, and either handle deletes it', async () => {
    const clock = new ManualClock();
    const queue = new InProcessWorkQueue({ clock, duplicate: ({ receiveCount }) => receiveCount === 1 });
    await queue.send('twice', 0);
    const [first] = queue.receive(1);
    const [copy] = queue.receive(1);
    expect(first?.body).toBe('twice');
    expect(copy).toMatchObject({ messageId: first?.messageId, body: 'twice' });
    expect(copy?.attributes.ApproximateReceiveCount).toBe('1');
    expect(copy?.receiptHandle).not.toBe(first?.receiptHandle);
    expect(queue.receive(10)).toHaveLength(0);
    expect(queue.delete(String(copy?.receiptHandle))).toBe(true);
    expect(await queue.changeVisibility(String(first?.receiptHandle), 0)).toBe('not-in-flight');
    await clock.advance(3_600_000);
    expect(queue.counts()).toEqual({ visible: 0, invisible: 0, deadLetters: 0 });
  });

  it('ignores a stale receipt handle once the message was delivered again: the newer delivery owns it', async () => {
    const clock = new ManualClock();
    const queue = new InProcessWorkQueue({ clock, visibilityTimeoutMs: 30 * SECOND });
    await queue.send('slow run', 0);
    const [stale] = queue.receive(1);
    await clock.advance(30 * SECOND);
    const [current] = queue.receive(1);
    expect(current?.attributes.ApproximateReceiveCount).toBe('2');
    expect(await queue.changeVisibility(String(stale?.receiptHandle), 60 * SECOND)).toBe('not-in-flight');
    expect(queue.delete(String(stale?.receiptHandle))).toBe(false);
    expect(queue.counts()).toEqual({ visible: 0, invisible: 1, deadLetters: 0 });
    expect(queue.delete(String(current?.receiptHandle))).toBe(true);
  });

  it.each([
    [{ maxReceiveCount: 0 }, /maxReceiveCount is 0; use a whole number from 1 to 1000/],
    [{ maxReceiveCount: 2.5 }, /maxReceiveCount is 2.5/],
    [{ visibilityTimeoutMs: 13 * 3_600_000 }, /visibilityTimeoutMs is 46800000; use 0 to 43200000/],
  ])('refuses a configuration SQS would refuse: %j', (options, message) => {
    expect(() => new InProcessWorkQueue(options)).toThrow(ConfigurationError);
    expect(() => new InProcessWorkQueue(options)).toThrow(message);
  });
});

describe('the in-process event source', () => {
  function setUp(
    handler: (event: SqsEvent, context: InvocationContext) => Promise<SqsBatchResponse>,
    options: { timeoutMs?: number } = {},
  ) {
    const clock = new ManualClock();
    // The ScheduledJob's queue hides a message for six function timeouts.
    const queue = new InProcessWorkQueue({
      clock,
      visibilityTimeoutMs: 6 * (options.timeoutMs ?? 60 * SECOND),
    });
    const reports: InvocationReport[] = [];
    const source = new InProcessEventSource({
      queue,
      handler,
      clock,
      onInvocation: (r) => reports.push(r),
      ...options,
    });
    return { clock, queue, reports, source };
  }

  it('runs at most maximumConcurrency invocations at once and delivers the rest as they finish', async () => {
    const gates: ReturnType<typeof deferred<void>>[] = [];
    const seen: string[] = [];
    const { clock, queue, source, reports } = setUp(async (event) => {
      seen.push(event.Records.map((r) => r.body).join());
      const gate = deferred();
      gates.push(gate);
      await gate.promise;
      return { batchItemFailures: [] };
    });
    for (const body of ['a', 'b', 'c', 'd', 'e']) await queue.send(body, 0);
    source.start();
    await clock.advance(0);
    expect(source.inFlight).toBe(2);
    expect(seen).toEqual(['a', 'b']);
    gates[0]?.resolve();
    await settle();
    await clock.advance(0);
    expect(seen).toEqual(['a', 'b', 'c']);
    expect(source.inFlight).toBe(2);
    for (let i = 1; i < 5; i++) {
      gates[i]?.resolve();
      await settle();
      await clock.advance(0);
    }
    await source.stop();
    expect(seen).toEqual(['a', 'b', 'c', 'd', 'e']);
    expect(reports.map((r) => r.outcome)).toEqual(Array(5).fill('returned'));
    expect(queue.counts()).toEqual({ visible: 0, invisible: 0, deadLetters: 0 });
  });

  it('deletes what the answer did not list and delivers the listed message again when its visibility ends', async () => {
    const counts: string[] = [];
    const { clock, queue, source, reports } = setUp(async (event) => {
      const record = event.Records[0]!;
      counts.push(`${record.body}#${record.attributes.ApproximateReceiveCount}`);
      if (record.body === 'keep' && record.attributes.ApproximateReceiveCount === '1') {
        await queue.changeVisibility(record.receiptHandle, 5 * SECOND);
        return { batchItemFailures: [{ itemIdentifier: record.messageId }] };
      }
      return { batchItemFailures: [] };
    });
    await queue.send('keep', 0);
    await queue.send('done', 0);
    source.start();
    await clock.advance(0);
    await settle();
    expect(counts).toEqual(['keep#1', 'done#1']);
    expect(queue.counts()).toEqual({ visible: 0, invisible: 1, deadLetters: 0 });
    await clock.advance(5 * SECOND);
    await settle();
    await source.stop();
    expect(counts).toEqual(['keep#1', 'done#1', 'keep#2']);
    expect(reports.map((r) => r.kept.length).sort()).toEqual([0, 0, 1]);
    expect(queue.counts()).toEqual({ visible: 0, invisible: 0, deadLetters: 0 });
  });

  it('keeps every message of an invocation that threw, or whose answer Lambda cannot read', async () => {
    let n = 0;
    const { clock, queue, source, reports } = setUp(async (event) => {
      n++;
      if (n === 1) throw new Error('handler crashed');
      return { batchItemFailures: [{ itemIdentifier: `not-${event.Records[0]?.messageId}` }] };
    });
    await queue.send('x', 0);
    await queue.send('y', 0);
    source.start();
    await clock.advance(0);
    await settle();
    await source.stop();
    expect(reports.map((r) => r.outcome).sort()).toEqual(['returned', 'threw']);
    expect(reports.every((r) => r.kept.length === 1)).toBe(true);
    expect(queue.counts()).toEqual({ visible: 0, invisible: 2, deadLetters: 0 });
  });

  it('treats an answer that comes after the timeout as lost: nothing deleted, reported timed out', async () => {
    const gate = deferred();
    const remaining: number[] = [];
    const { clock, queue, source, reports } = setUp(
      async (_event, context) => {
        remaining.push(context.getRemainingTimeInMillis());
        await gate.promise;
        remaining.push(context.getRemainingTimeInMillis());
        return { batchItemFailures: [] };
      },
      { timeoutMs: 300 * SECOND },
    );
    await queue.send('overruns', 0);
    source.start();
    await clock.advance(0);
    await clock.advance(301 * SECOND);
    gate.resolve();
    await settle();
    await source.stop();
    expect(remaining).toEqual([300 * SECOND, -SECOND]);
    expect(reports).toMatchObject([{ outcome: 'timed-out', kept: [expect.any(String)] }]);
    expect(queue.counts()).toEqual({ visible: 0, invisible: 1, deadLetters: 0 });
    expect(source.invocations).toBe(1);
  });

  it('sleeps until a delayed message is due instead of polling', async () => {
    const seenAt: number[] = [];
    const { clock, queue, source } = setUp(async () => {
      seenAt.push(clock.now());
      return { batchItemFailures: [] };
    });
    const start = clock.now();
    source.start();
    await queue.send('later', 90 * SECOND);
    expect(clock.pending).toBe(1);
    await clock.advance(89 * SECOND);
    expect(seenAt).toEqual([]);
    await clock.advance(SECOND);
    await settle();
    await source.stop();
    expect(seenAt).toEqual([start + 90 * SECOND]);
    expect(clock.pending).toBe(0);
  });
});
