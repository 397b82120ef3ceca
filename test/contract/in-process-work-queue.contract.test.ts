import { InProcessWorkQueue } from '../../shared/continuation/in-process-work-queue.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { CONTRACT_QUEUE, describeWorkQueueContract } from './work-queue-contract.js';

describeWorkQueueContract('in-process', async () => {
  const clock = new ManualClock();
  const refused = new Set<string>();
  const queue = new InProcessWorkQueue({
    clock,
    ...CONTRACT_QUEUE,
    refuse: ({ body }) => refused.delete(body),
  });
  return {
    queue,
    receive: async (max) =>
      queue.receive(max).map((r) => ({
        messageId: r.messageId,
        receiptHandle: r.receiptHandle,
        body: r.body,
        receiveCount: Number(r.attributes.ApproximateReceiveCount),
      })),
    delete: async (handle) => {
      queue.delete(handle);
    },
    advance: (ms) => clock.advance(ms),
    deadLetterBodies: async () => queue.deadLetters.map((d) => d.body),
    refuse: (body) => {
      refused.add(body);
    },
  };
});
