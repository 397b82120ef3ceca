import { describe, expect, it } from 'vitest';
import { LeaseKeeper, type LeaseLostError } from '../../shared/job/lease-keeper.js';
import type { ClaimStore } from '../../shared/slot/ports.js';
import { useDynamo } from '../helpers/dynalite.js';
import { injectFaults } from '../helpers/faults.js';
import { testBackend } from '../helpers/harness.js';
import { ManualClock, settle } from '../helpers/manual-clock.js';

const dynamo = useDynamo();
const slot = { jobId: 'weekly-report', window: '2026-11-30T06:00:00Z' };
const LEASE = 60_000;

async function claimed(clock: ManualClock, table: string) {
  const backend = testBackend(dynamo.client(), table);
  const outcome = await backend.claims.claim(
    slot,
    {
      owner: 'a',
      leaseMs: LEASE,
      maxAttempts: 3,
      expiresAtSeconds: 2_000_000_000,
      deadline: 2_000_000_000_000,
      delivery: {},
    },
    clock.now(),
  );
  if (outcome.kind !== 'claimed') throw new Error(`claim failed: ${outcome.kind}`);
  return { backend, claim: outcome.claim };
}

/** A claim store whose renewals the test can wait for, so time moves only once each has landed. */
function tracked(store: ClaimStore) {
  const inflight: Promise<unknown>[] = [];
  const wrapped: ClaimStore = {
    claim: (...args) => store.claim(...args),
    checkpoint: (...args) => store.checkpoint(...args),
    renew: (...args) => {
      const renewal = store.renew(...args);
      inflight.push(renewal.catch(() => {}));
      return renewal;
    },
    complete: (...args) => store.complete(...args),
    release: (...args) => store.release(...args),
    read: (...args) => store.read(...args),
    shardFinished: (...args) => store.shardFinished(...args),
    finishSharded: (...args) => store.finishSharded(...args),
  };
  return { store: wrapped, landed: async () => void (await Promise.all(inflight.splice(0))) };
}

/** Advances the clock in steps, waiting after each for the renewals it started to land. */
async function advanceInSteps(clock: ManualClock, ms: number, landed: () => Promise<void>, step = 5_000) {
  for (let moved = 0; moved < ms; moved += step) {
    await clock.advance(Math.min(step, ms - moved));
    await landed();
    await settle();
  }
}

describe('the lease keeper', () => {
  it('keeps a live holder’s lease for as long as it runs: no takeover after many lease lengths', async () => {
    const clock = new ManualClock(Date.parse('2026-11-30T06:00:05Z'));
    const { backend, claim } = await claimed(clock, await dynamo.freshTable());
    const { store, landed } = tracked(backend.claims);
    const keeper = new LeaseKeeper({
      store,
      clock,
      claim,
      claimSentAt: clock.now(),
      leaseMs: LEASE,
      renewEveryMs: LEASE / 3,
      safetyMarginMs: LEASE / 6,
    });
    await advanceInSteps(clock, 5 * LEASE, landed);
    expect(keeper.canReserve()).toBe(true);
    expect(keeper.signal.aborted).toBe(false);
    const rival = await backend.claims.claim(
      slot,
      {
        owner: 'b',
        leaseMs: LEASE,
        maxAttempts: 3,
        expiresAtSeconds: 2_000_000_000,
        deadline: 2_000_000_000_000,
        delivery: {},
      },
      clock.now(),
    );
    expect(rival).toMatchObject({ kind: 'held', holder: 'a', epoch: 1 });
    keeper.stop();
  });

  it('stops the work when no renewal succeeds before the lease ends by the local clock', async () => {
    const clock = new ManualClock(Date.parse('2026-11-30T06:00:05Z'));
    const table = await dynamo.freshTable();
    const { claim } = await claimed(clock, table);
    // Every renewal is throttled: the store is unreachable for this holder.
    const failing = dynamo.client({ maxAttempts: 1 });
    const faults = injectFaults(failing, { throttle: 1, seed: 1 });
    const lost: LeaseLostError[] = [];
    const { store, landed } = tracked(testBackend(failing, table).claims);
    const keeper = new LeaseKeeper({
      store,
      clock,
      claim,
      claimSentAt: clock.now(),
      leaseMs: LEASE,
      renewEveryMs: LEASE / 3,
      safetyMarginMs: LEASE / 6,
      onLost: (error) => lost.push(error),
    });
    await advanceInSteps(clock, LEASE - LEASE / 6 - 1_000, landed);
    expect(keeper.signal.aborted).toBe(false);
    await advanceInSteps(clock, 2_000, landed);
    expect(faults.throttled).toBeGreaterThanOrEqual(2);
    expect(keeper.signal.aborted).toBe(true);
    expect(keeper.canReserve()).toBe(false);
    expect(lost).toHaveLength(1);
    expect(lost[0]?.message).toMatch(/lease ended at .* by the local clock before a renewal succeeded/);
  });
});
