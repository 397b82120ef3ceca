import { describe, expect, it } from 'vitest';
import { BatchSendError, type WorkQueue, WorkQueueError } from '../../shared/continuation/work-queue.js';

/** A message as the consumer (Lambda's event source mapping) receives it. */
export interface ReceivedMessage {
  readonly messageId: string;
  readonly receiptHandle: string;
  readonly body: string;
  readonly receiveCount: number;
}

/** How every queue under contract is configured. */
export const CONTRACT_QUEUE = { visibilityTimeoutMs: 30_000, maxReceiveCount: 3 } as const;

/**
 * A queue under contract, fresh for each test: the port the runtime uses, and what the test does
 * around it (receive and delete as the event source mapping does, move time, read the DLQ).
 */
export interface WorkQueueHarness {
  readonly queue: WorkQueue;
  receive(max?: number): Promise<readonly ReceivedMessage[]>;
  delete(receiptHandle: string): Promise<void>;
  /** Moves the queue's clock forward. */
  advance(ms: number): Promise<void>;
  /** Bodies of the messages moved to the dead-letter queue. */
  deadLetterBodies(): Promise<readonly string[]>;
  /** The queue refuses the next message sent with `body` (SQS: a Failed entry, InternalError). */
  refuse(body: string): void;
}

const SECOND = 1_000;
const MINUTE = 60_000;
const HOUR = 3_600_000;

/**
 * The work-queue contract: what the continuation engine relies on from any queue, the in-process
 * one and SQS alike. Each queue is configured as CONTRACT_QUEUE.
 */
export function describeWorkQueueContract(name: string, makeHarness: () => Promise<WorkQueueHarness>): void {
  async function receiveOne(h: WorkQueueHarness): Promise<ReceivedMessage> {
    const [message, ...more] = await h.receive(10);
    if (!message || more.length > 0) throw new Error(`expected exactly one message, got ${1 + more.length}`);
    return message;
  }

  describe(`work queue contract: ${name}`, () => {
    it('delivers a message sent without a delay at once, its body intact, as its first delivery', async () => {
      const h = await makeHarness();
      await h.queue.send('{"jobId":"weekly-report","scheduledTime":"2026-11-30T06:00:00Z"}', 0);
      const message = await receiveOne(h);
      expect(message.body).toBe('{"jobId":"weekly-report","scheduledTime":"2026-11-30T06:00:00Z"}');
      expect(message.receiveCount).toBe(1);
      expect(await h.receive(10)).toHaveLength(0);
    });

    it('does not deliver a delayed message before its delay has passed', async () => {
      const h = await makeHarness();
      await h.queue.send('delayed', 90 * SECOND);
      await h.advance(89 * SECOND);
      expect(await h.receive(10)).toHaveLength(0);
      await h.advance(SECOND);
      expect((await receiveOne(h)).body).toBe('delayed');
    });

    it('rounds a delay up to whole seconds, so a wait is never cut short', async () => {
      const h = await makeHarness();
      await h.queue.send('rounded', 1_500);
      await h.advance(SECOND);
      expect(await h.receive(10)).toHaveLength(0);
      await h.advance(SECOND);
      expect((await receiveOne(h)).body).toBe('rounded');
    });

    it('cuts a delay longer than 15 minutes to 15 minutes (the run it starts is told to wait again)', async () => {
      const h = await makeHarness();
      await h.queue.send('long wait', 40 * MINUTE);
      await h.advance(15 * MINUTE - SECOND);
      expect(await h.receive(10)).toHaveLength(0);
      await h.advance(SECOND);
      expect((await receiveOne(h)).body).toBe('long wait');
    });

    it('delivers a received message again after the visibility timeout, counting the delivery, under a new handle', async () => {
      const h = await makeHarness();
      await h.queue.send('crashes', 0);
      const first = await receiveOne(h);
      await h.advance(CONTRACT_QUEUE.visibilityTimeoutMs - SECOND);
      expect(await h.receive(10)).toHaveLength(0);
      await h.advance(SECOND);
      const second = await receiveOne(h);
      expect(second).toMatchObject({ messageId: first.messageId, body: 'crashes', receiveCount: 2 });
      expect(second.receiptHandle).not.toBe(first.receiptHandle);
    });

    it('never delivers a deleted message again', async () => {
      const h = await makeHarness();
      await h.queue.send('finished', 0);
      await h.delete((await receiveOne(h)).receiptHandle);
      await h.advance(HOUR);
      expect(await h.receive(10)).toHaveLength(0);
    });

    it('delivers a kept message when its visibility says, not at the queue timeout', async () => {
      const h = await makeHarness();
      await h.queue.send('retry in 5 minutes', 0);
      const message = await receiveOne(h);
      expect(await h.queue.changeVisibility(message.receiptHandle, 5 * MINUTE)).toBe('changed');
      await h.advance(5 * MINUTE - SECOND);
      expect(await h.receive(10)).toHaveLength(0);
      await h.advance(SECOND);
      expect((await receiveOne(h)).receiveCount).toBe(2);
    });

    it('keeps a message invisible while heartbeats push its visibility forward, and delivers it two leases after the last', async () => {
      const h = await makeHarness();
      await h.queue.send('long run', 0);
      const message = await receiveOne(h);
      // A 14-minute run renewing its 60 s lease every 20 s, each renewal a 120 s heartbeat.
      for (let t = 0; t < 14 * MINUTE; t += 20 * SECOND) {
        expect(await h.queue.changeVisibility(message.receiptHandle, 2 * MINUTE)).toBe('changed');
        await h.advance(20 * SECOND);
        expect(await h.receive(10)).toHaveLength(0);
      }
      // The run died after its last heartbeat, 20 s ago.
      await h.advance(2 * MINUTE - 20 * SECOND - SECOND);
      expect(await h.receive(10)).toHaveLength(0);
      await h.advance(SECOND);
      expect((await receiveOne(h)).receiveCount).toBe(2);
    });

    it('makes a message deliverable at once with a visibility of 0', async () => {
      const h = await makeHarness();
      await h.queue.send('now', 0);
      const message = await receiveOne(h);
      expect(await h.queue.changeVisibility(message.receiptHandle, 0)).toBe('changed');
      expect((await receiveOne(h)).receiveCount).toBe(2);
    });

    it('cuts a visibility past 12 hours to 12 hours', async () => {
      const h = await makeHarness();
      await h.queue.send('half a day', 0);
      const message = await receiveOne(h);
      expect(await h.queue.changeVisibility(message.receiptHandle, 30 * HOUR)).toBe('changed');
      await h.advance(12 * HOUR - SECOND);
      expect(await h.receive(10)).toHaveLength(0);
      await h.advance(SECOND);
      expect((await receiveOne(h)).body).toBe('half a day');
    });

    it('refuses a visibility that would end more than 12 hours after the receive, leaving the current one', async () => {
      const h = await makeHarness();
      await h.queue.send('too late', 0);
      const message = await receiveOne(h);
      expect(await h.queue.changeVisibility(message.receiptHandle, 2 * HOUR)).toBe('changed');
      await h.advance(HOUR);
      await expect(h.queue.changeVisibility(message.receiptHandle, 12 * HOUR)).rejects.toThrow(
        WorkQueueError,
      );
      // The two hours set before still hold.
      await h.advance(HOUR - SECOND);
      expect(await h.receive(10)).toHaveLength(0);
      await h.advance(SECOND);
      expect((await receiveOne(h)).receiveCount).toBe(2);
    });

    it("answers not-in-flight, without throwing, for a deleted message's handle", async () => {
      const h = await makeHarness();
      await h.queue.send('gone', 0);
      const message = await receiveOne(h);
      await h.delete(message.receiptHandle);
      expect(await h.queue.changeVisibility(message.receiptHandle, MINUTE)).toBe('not-in-flight');
    });

    /** Receives until the queue has nothing due: every body, in no particular order. */
    async function drain(h: WorkQueueHarness): Promise<string[]> {
      const bodies: string[] = [];
      for (let batch = await h.receive(10); batch.length > 0; batch = await h.receive(10)) {
        bodies.push(...batch.map((m) => m.body));
      }
      return bodies.sort();
    }
    const shardBodies = (count: number) =>
      Array.from({ length: count }, (_, shard) => `{"shard":${String(shard).padStart(2, '0')}}`);

    it('sends every message of a batch once, body intact, after the batch delay', async () => {
      const h = await makeHarness();
      const bodies = shardBodies(23);
      await h.queue.sendBatch(bodies, 30 * SECOND);
      await h.advance(30 * SECOND - 1);
      expect(await h.receive(10)).toHaveLength(0);
      await h.advance(1);
      expect(await drain(h)).toEqual(bodies);
    });

    it('sends nothing for an empty batch', async () => {
      const h = await makeHarness();
      await h.queue.sendBatch([], 0);
      expect(await h.receive(10)).toHaveLength(0);
    });

    it('counts exactly the messages it sent when one of a batch is refused, and sends nothing after its request', async () => {
      const h = await makeHarness();
      const bodies = shardBodies(23);
      // The 13th message, in the second request of 10.
      h.refuse(bodies[12] ?? '');
      const error = await h.queue.sendBatch(bodies, 0).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(WorkQueueError);
      expect(error).toBeInstanceOf(BatchSendError);
      // The first request's 10, the second's other 9; the third request is never made.
      expect(error).toMatchObject({ operation: 'sendBatch', sent: 19, total: 23 });
      const delivered = await drain(h);
      expect(delivered).toHaveLength(19);
      expect(delivered).toEqual(bodies.slice(0, 20).filter((_, i) => i !== 12));
    });

    it('moves a message to the dead-letter queue after maxReceiveCount deliveries', async () => {
      const h = await makeHarness();
      await h.queue.send('never finishes', 0);
      for (let delivery = 1; delivery <= CONTRACT_QUEUE.maxReceiveCount; delivery++) {
        expect((await receiveOne(h)).receiveCount).toBe(delivery);
        await h.advance(CONTRACT_QUEUE.visibilityTimeoutMs);
      }
      expect(await h.receive(10)).toHaveLength(0);
      expect(await h.deadLetterBodies()).toEqual(['never finishes']);
    });
  });
}
