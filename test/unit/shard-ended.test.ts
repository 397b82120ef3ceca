import { describe, expect, it } from 'vitest';
import { memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import { defineJob } from '../../shared/job/job-definition.js';
import { runSlot, type SlotBackend } from '../../shared/job/run-slot.js';
import { type LeaseRequest, SlotState } from '../../shared/slot/ports.js';
import type { Log } from '../../shared/telemetry/log.js';
import type { JobMetrics } from '../../shared/telemetry/metrics.js';
import { TEST_SECRET } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';

/*
 * The last shard to report in finishes its window only when every shard's record says it ended.
 * The window's set of finished shards says each shard ended once; a shard given back or running
 * again since must not be counted, or the window would finish DONE with that shard's part unwalked.
 */

const WINDOW = { jobId: 'shard-ended', window: '2026-11-30T06:00:00Z' };
const START = Date.parse(WINDOW.window) + 1_000;
const LEASE_MS = 6_000;
const silentMetrics: JobMetrics = { count() {}, flush: async () => {} };
const silentLog: Log = { info() {}, warn() {}, error() {} };
const job = defineJob({ id: WINDOW.jobId, run: async () => {} });

/** A claim's terms for `owner`, with the window's deadline an hour after the start. */
function lease(owner: string, shards?: number): LeaseRequest {
  return {
    owner,
    leaseMs: LEASE_MS,
    maxAttempts: 3,
    expiresAtSeconds: Math.ceil(START / 1000) + 35 * 86_400,
    deadline: START + 3_600_000,
    delivery: {},
    ...(shards ? { shards } : {}),
  };
}

/** One delivery of shard `index` of 2's message: the run claims it, or finds it ended and reports in. */
function deliverShard(backend: SlotBackend, clock: ManualClock, index: number) {
  return runSlot({
    job,
    backend,
    clock,
    metrics: silentMetrics,
    log: silentLog,
    slot: WINDOW,
    shard: { index, count: 2 },
    delivery: { invocationId: `shard-${index}` },
    options: { leaseMs: LEASE_MS, maxAttempts: 3 },
  });
}

/** A window handed to its 2 shards by its coordinator, shard 0 run to its end. */
async function splitWithShardZeroDone() {
  const backend = memoryBackend({ hashKey: hmacEffectKeys(TEST_SECRET) });
  const clock = new ManualClock(START);
  const coordinator = await backend.claims.claim(WINDOW, lease('coordinator', 2), START);
  if (coordinator.kind !== 'claimed') throw new Error(`coordinator ${coordinator.kind}`);
  await backend.claims.release(coordinator.claim, { kind: 'sharded', shards: 2 }, START);
  await deliverShard(backend, clock, 0);
  expect(await backend.claims.read({ ...WINDOW, shard: 0 })).toMatchObject({ state: SlotState.Done });
  return { backend, clock };
}

describe('the last shard to report in', () => {
  it('finishes the window once every shard record has ended', async () => {
    const { backend, clock } = await splitWithShardZeroDone();
    await deliverShard(backend, clock, 1);
    expect(await backend.claims.read(WINDOW)).toMatchObject({ state: SlotState.Done, shards: 2 });
  });

  it('leaves the window SHARDED while a shard counted as finished is running again', async () => {
    const { backend, clock } = await splitWithShardZeroDone();
    // Shard 1 is under way (claimed, lease live) yet already in the set: an end recorded before it
    // was given back and claimed again.
    const running = await backend.claims.claim({ ...WINDOW, shard: 1 }, lease('shard-1-again'), START);
    expect(running.kind).toBe('claimed');
    await backend.claims.shardFinished(WINDOW, 1);
    // Shard 0's message comes back (a duplicate delivery): it finds its shard DONE and reports in,
    // which makes the set whole.
    await deliverShard(backend, clock, 0);
    expect(await backend.claims.read(WINDOW)).toMatchObject({ state: SlotState.Sharded });
    expect(await backend.claims.read({ ...WINDOW, shard: 1 })).toMatchObject({
      state: SlotState.Running,
      owner: 'shard-1-again',
    });
  });
});
