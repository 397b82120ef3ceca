import { describe, expect, it } from 'vitest';
import { memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import { takeSendSlot } from '../../shared/effects/send-slot.js';
import { TokenBucket } from '../../shared/effects/token-bucket.js';
import { NotPerformedReason } from '../../shared/errors.js';
import { defineJob } from '../../shared/job/job-definition.js';
import type { RunResult } from '../../shared/job/run-slot.js';
import { EffectState } from '../../shared/slot/ports.js';
import type { JobMetrics } from '../../shared/telemetry/metrics.js';
import { deliver, hashKey, START, WINDOW } from '../helpers/one-window.js';
import { inVirtualTime, VirtualClock } from '../helpers/virtual-clock.js';

/*
 * Review of the send cut (half the stop margin left) with reserveAhead: each of 8 workers holds a
 * send waiting for a slot at 1 email a second and one more reservation made ahead. The run stops
 * reserving at the margin, still sends what it had reserved (ahead ones included) until the cut,
 * and the cut puts back every one still waiting: FAILED (cancelled), its attempts unchanged, due at
 * once, never RESERVED and in doubt. The next invocation sends those, and nobody gets two.
 */

const SLOT = { jobId: 'review-send-cut', window: WINDOW };
const RECIPIENTS = Array.from({ length: 100 }, (_, i) => `r${String(i).padStart(3, '0')}@example.test`);
const INVOCATION_MS = 40_000;

describe('the send cut with reserveAhead', () => {
  it('puts back every reserved-ahead send still waiting at the cut as due, and sends each recipient once over the next invocation', async () => {
    const backend = memoryBackend({ hashKey });
    const clock = new VirtualClock(START);
    const bucket = new TokenBucket({ ratePerSecond: 1, clock });
    const sent: string[] = [];
    const counts = new Map<string, number>();
    const metrics: JobMetrics = {
      count(name, value = 1) {
        counts.set(name, (counts.get(name) ?? 0) + value);
      },
      flush: async () => {},
    };
    const job = defineJob({
      id: SLOT.jobId,
      run: (ctx) =>
        ctx.onceEach(RECIPIENTS, { key: (to) => to, concurrency: 8 }, async (to, signal) => {
          await takeSendSlot(bucket, signal, 'the test rate');
          sent.push(to);
        }),
    });
    const invocation = (n: number): Promise<RunResult> => {
      const startedAt = clock.now();
      return inVirtualTime(
        clock,
        () => 0,
        deliver({
          job,
          backend,
          clock,
          metrics,
          slot: SLOT,
          invocationId: `invocation-${n}`,
          options: { leaseMs: 60_000, reserveAhead: true },
          remainingTimeMs: () => INVOCATION_MS - (clock.now() - startedAt),
        }),
      );
    };

    const first = await invocation(1);
    // Margin 10 s (a quarter of 40 s): reservations stop at 30 s, the waits are cut at 35 s.
    expect(first).toMatchObject({ status: 'yielded', reason: 'time' });
    const records = [];
    for await (const record of backend.ledger.list(SLOT)) records.push(record);
    const putBack = records.filter((r) => r.state === EffectState.Failed);
    // 31 sent by the margin (one a second from 0 s to 30 s) with 16 reserved: 8 waiting and 8
    // reserved ahead. 4 of those went before the cut; the other 12, more than the 8 workers, were put back.
    expect(sent).toHaveLength(35);
    expect(putBack).toHaveLength(12);
    for (const record of putBack) {
      expect(record).toMatchObject({ reason: NotPerformedReason.Cancelled, attempts: 0 });
    }
    expect(records.filter((r) => r.state === EffectState.Reserved)).toEqual([]);
    expect(records.filter((r) => r.state === EffectState.Done)).toHaveLength(sent.length);

    let result = first;
    for (let n = 2; result.status === 'yielded' && n <= 6; n++) {
      await clock.advance(1_000);
      result = await invocation(n);
    }
    expect(result).toMatchObject({
      status: 'completed',
      state: 'DONE',
      window: { done: 100, inDoubt: 0, failed: 0 },
    });
    expect(sent).toHaveLength(100);
    expect(new Set(sent).size).toBe(100);
    expect(counts.get('EffectInDoubtFound') ?? 0).toBe(0);
  });
});
