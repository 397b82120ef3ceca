import { describe, expect, it } from 'vitest';
import { memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import type { MemoryTransport } from '../../shared/backends/memory/memory-transport.js';
import { defineJob } from '../../shared/job/job-definition.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { deliver, hashKey, START, WINDOW } from '../helpers/one-window.js';

/*
 * Found by a review of done marks: a run's last checkpoint (Checkpointer.stop) carries the marks of the effects
 * performed since the one before. If that one write fails (a throttled store, after the client's
 * retries) and the reads that follow succeed, the run goes on to tally and complete the window: the
 * sends it made and knows it made are RESERVED under numbers no marks cover, so the window is DONE
 * with them in doubt for good (paged as EffectInDoubt), although the run ended normally and nothing
 * it performed is unknown. Not new with done marks (a failed batch of 25 DONE puts was not retried
 * either). The checkpointer now falls back, as a fenced run does, to marking each of those effects
 * on its own record.
 */

const SLOT = { jobId: 'review-final-checkpoint', window: WINDOW };
const RECIPIENTS = Array.from({ length: 30 }, (_, i) => `r${i}@example.test`);

/** A healthy store but for the `failing`-th checkpoint write, which fails as a throttled request does. */
function failingCheckpoint(failing: number): MemoryTransport {
  let checkpoints = 0;
  return {
    async send(request, execute) {
      if (request.operation === 'checkpoint' && ++checkpoints === failing) {
        throw new Error(
          'ProvisionedThroughputExceededException: rate of requests exceeds the allowed throughput',
        );
      }
      return execute();
    },
  };
}

describe('the last checkpoint of a run', () => {
  it('leaves nothing a completed run performed in doubt when its last checkpoint write fails once', async () => {
    // The first checkpoint (after 25 emails) is written; the last one (the other 5) fails once.
    const backend = memoryBackend({ hashKey, transport: failingCheckpoint(2) });
    const sent: string[] = [];
    const job = defineJob({
      id: SLOT.jobId,
      run: (ctx) =>
        ctx.onceEach(RECIPIENTS, { key: (to) => to, concurrency: 1 }, async (to) => {
          sent.push(to);
        }),
    });

    const result = await deliver({
      job,
      backend,
      clock: new ManualClock(START),
      slot: SLOT,
      invocationId: 'run-1',
    });

    expect(sent).toHaveLength(30);
    expect(result).toMatchObject({ status: 'completed', summary: { done: 30, inDoubt: 0 } });
    // Before the fallback: { done: 25, inDoubt: 5 }, a DONE window with five emails it sent in doubt.
    expect(result.status === 'completed' ? result.window : undefined).toMatchObject({ done: 30, inDoubt: 0 });
  });
});
