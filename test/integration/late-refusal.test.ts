import { describe, expect, it } from 'vitest';
import { memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import type { MemoryTransport } from '../../shared/backends/memory/memory-transport.js';
import { EffectNotPerformedError, NotPerformedReason } from '../../shared/errors.js';
import { defineJob } from '../../shared/job/job-definition.js';
import { EffectState } from '../../shared/slot/ports.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { deliver, hashKey, START, WINDOW } from '../helpers/one-window.js';

/*
 * Found by a review of done marks: recordFailure is conditioned on the reservation being the claim's (owner,
 * epoch, RESERVED), not on which of the claim's reservations of the key it is (its seq). A run
 * reserves a key again, under a new number, once its refusal is due (the same recipient later in
 * the list, or a continuation's retry pass). If the first refusal's write lands late (the client
 * retried a request that timed out, and the first attempt reaches the table after the run moved
 * on), it turns the second reservation, which was performed, into FAILED. Before done marks the
 * performed retry's own DONE put came after it and restored DONE; now its mark is the number in the
 * slot's marks, which covers no FAILED record, so the next run sends the email again.
 */

const SLOT = { jobId: 'review-late-refusal', window: WINDOW };
const TWICE = 'twice@example.test';
const OTHER = 'other@example.test';

/**
 * A healthy store, except that the first refusal written reaches the table a second time, late:
 * `land()` applies that late attempt.
 */
function lateDuplicateOfFirstRefusal() {
  let late: (() => unknown) | undefined;
  let seen = false;
  const transport: MemoryTransport = {
    async send(request, execute) {
      if (request.operation === 'recordFailure' && !seen) {
        seen = true;
        late = execute;
      }
      return execute();
    },
  };
  return { transport, land: () => late?.() };
}

describe('a refusal written late', () => {
  it('does not email a recipient twice when the write of its first refusal lands again after its retry was sent', async () => {
    const { transport, land } = lateDuplicateOfFirstRefusal();
    const backend = memoryBackend({ hashKey, transport });
    const clock = new ManualClock(START);
    const sent: string[] = [];
    let refused = false;
    const job = defineJob({
      id: SLOT.jobId,
      run: (ctx) =>
        ctx.onceEach([TWICE, OTHER, TWICE], { key: (to) => to, concurrency: 1 }, async (to) => {
          if (to === TWICE && !refused) {
            refused = true;
            throw new EffectNotPerformedError('throttled', { reason: NotPerformedReason.Throttled });
          }
          if (to === TWICE) land();
          sent.push(to);
          // The other email takes a while: the refusal's backoff (1 minute) has passed when the
          // recipient comes round again.
          if (to === OTHER) await clock.advance(61_000);
        }),
    });
    const run = (invocationId: string) =>
      deliver({ job, backend, clock, slot: SLOT, invocationId, options: { leaseMs: 600_000 } });

    let result = await run('run-1');
    expect(sent).toEqual([OTHER, TWICE]);
    // Delivered until it finishes. FAILS on main: the late refusal replaced the performed retry
    // (FAILED, due), so the first run yields for it and the next one sends it a second time.
    for (let delivery = 2; result.status === 'yielded' && delivery <= 3; delivery++) {
      await clock.advance(Math.max(1_000, (result.resumeAfter ?? 0) - clock.now()));
      result = await run(`run-${delivery}`);
    }
    expect(result).toMatchObject({ status: 'completed', window: { done: 2, inDoubt: 0, failed: 0 } });
    expect(sent.filter((to) => to === TWICE)).toHaveLength(1);
    expect((await backend.ledger.read(SLOT, hashKey(TWICE)))?.state).toBe(EffectState.Done);
  });
});
