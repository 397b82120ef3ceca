import { describe, expect, it } from 'vitest';
import { memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import { defineJob } from '../../shared/job/job-definition.js';
import { EffectState, MAX_OPEN_MARKS } from '../../shared/slot/ports.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { deliver, hashKey, START, WINDOW } from '../helpers/one-window.js';

/*
 * Found by review2: a run's done marks list at most MAX_OPEN_MARKS (64) open numbers; past that,
 * `below` stops at the 65th and every effect performed under a higher number waits for marks that
 * can never cover it (an in-doubt number stays open for good). Checkpointer.stop() writes the last
 * marks and marks one by one only what snapshots covered (newlyDone), so those performed effects
 * stay RESERVED and uncovered: the run that sent them reads them in doubt, and so does every later
 * run and the operator's listing, although the run ended normally and knows it sent each one.
 */

const SLOT = { jobId: 'review2-open-marks-cap', window: WINDOW };
/** 65 unknown errors (in doubt, one more than the marks can list), each followed by a send that works; then 10 more sends. */
const THROWN = MAX_OPEN_MARKS + 1;
const RECIPIENTS = Array.from({ length: 2 * THROWN + 10 }, (_, i) => `r${i}@example.test`);
const throws = (i: number) => i < 2 * THROWN && i % 2 === 0;

describe('a run with more effects in doubt than its done marks can list', () => {
  it('does not leave the effects it performed after the 65th in-doubt one in doubt', async () => {
    const backend = memoryBackend({ hashKey });
    const sent: string[] = [];
    const job = defineJob({
      id: SLOT.jobId,
      run: (ctx) =>
        ctx.onceEach(RECIPIENTS.entries(), { key: ([, to]) => to, concurrency: 1 }, async ([i, to]) => {
          // A timeout after the provider may have accepted: in doubt, never re-sent. The send
          // after it resets the failure streak, so the run goes on to the end of the list.
          if (throws(i)) throw new Error('socket hang up');
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

    const performed = RECIPIENTS.length - THROWN;
    expect(sent).toHaveLength(performed);
    expect(result).toMatchObject({ status: 'completed', summary: { done: performed, inDoubt: THROWN } });
    // FAILS on main: { done: 64, inDoubt: 76 }, the 11 sends after the 65th in-doubt number read in doubt.
    expect(result.status === 'completed' ? result.window : undefined).toMatchObject({
      done: performed,
      inDoubt: THROWN,
    });
    const last = RECIPIENTS[RECIPIENTS.length - 1]!;
    expect((await backend.ledger.read(SLOT, hashKey(last)))?.state).toBe(EffectState.Done);
  });
});
