import { describe, expect, it } from 'vitest';
import type { OperatorStore } from '../../shared/slot/operator-ports.js';
import type { Claim, ClaimStore, EffectLedger, LeaseRequest } from '../../shared/slot/ports.js';
import type { Slot } from '../../shared/slot/slot.js';

/** What a backend under the operator contract provides: the runtime ports and the operator port. */
export interface OperatorContractBackend {
  readonly claims: ClaimStore;
  readonly ledger: EffectLedger;
  readonly operator: OperatorStore;
}

const T0 = Date.parse('2026-11-30T06:00:05Z');
const LEASE = 60_000;
let slots = 0;

function freshSlot(): Slot {
  // Distinct windows keep tests independent even on a shared table or schema.
  const window = new Date(Date.parse('2026-11-30T06:00:00Z') + ++slots * 60_000);
  return { jobId: 'operator-contract', window: `${window.toISOString().slice(0, 19)}Z` };
}

function lease(owner: string, maxAttempts = 3): LeaseRequest {
  return {
    owner,
    leaseMs: LEASE,
    maxAttempts,
    expiresAtSeconds: Math.ceil(T0 / 1000) + 35 * 86_400,
    deadline: T0 + 6 * 3_600_000,
    delivery: { executionId: `exec-${owner}`, attemptNumber: 1, invocationId: `req-${owner}` },
  };
}

async function claim(store: ClaimStore, slot: Slot, owner: string, now: number): Promise<Claim> {
  const outcome = await store.claim(slot, lease(owner), now);
  if (outcome.kind !== 'claimed')
    throw new Error(`expected ${owner} to claim ${slot.window}, got ${outcome.kind}`);
  return outcome.claim;
}

const summary = (runs: number, inDoubt = 0) => ({
  done: 1,
  inDoubt,
  failed: 0,
  inDoubtKeys: [],
  failedKeys: [],
  runs,
});

/**
 * The operator port's contract, run against every backend that implements it: each write fenced on
 * the epoch the operator read, refused while a live lease holds, and never a path to running an
 * effect twice. A Postgres OperatorStore runs the same suite.
 */
export function describeOperatorContract(
  name: string,
  makeBackend: () => Promise<OperatorContractBackend>,
): void {
  describe(`${name}: releasing a slot`, () => {
    it('releases a slot whose holder crashed, so the next delivery claims it at the next epoch', async () => {
      const { claims, operator } = await makeBackend();
      const slot = freshSlot();
      await claim(claims, slot, 'crashed', T0);
      const after = T0 + LEASE + 1;
      const outcome = await operator.forceRelease(slot, {
        expectedEpoch: 1,
        now: after,
        evenIfLeaseLive: false,
      });
      expect(outcome).toMatchObject({ kind: 'ok', record: { state: 'RELEASED', epoch: 1 } });
      const next = await claims.claim(slot, lease('next'), after + 1);
      expect(next).toMatchObject({ kind: 'claimed', claim: { epoch: 2 } });
    });

    it('refuses to release while the lease holds, and leaves the holder running', async () => {
      const { claims, operator } = await makeBackend();
      const slot = freshSlot();
      const holder = await claim(claims, slot, 'live', T0);
      const outcome = await operator.forceRelease(slot, {
        expectedEpoch: 1,
        now: T0 + 1_000,
        evenIfLeaseLive: false,
      });
      expect(outcome).toMatchObject({ kind: 'refused', reason: 'lease-live', current: { state: 'RUNNING' } });
      expect(await claims.renew(holder, LEASE, T0 + 2_000)).toMatchObject({ kind: 'renewed' });
    });

    it('fences a live holder when forced: its completion is rejected and the next claim is epoch 2', async () => {
      const { claims, operator } = await makeBackend();
      const slot = freshSlot();
      const holder = await claim(claims, slot, 'zombie', T0);
      const outcome = await operator.forceRelease(slot, {
        expectedEpoch: 1,
        now: T0 + 1_000,
        evenIfLeaseLive: true,
      });
      expect(outcome).toMatchObject({ kind: 'ok', record: { state: 'RELEASED' } });
      expect(await claims.complete(holder, summary(1), T0 + 2_000)).toMatchObject({ kind: 'fenced' });
      expect(await claims.renew(holder, LEASE, T0 + 2_000)).toMatchObject({ kind: 'lost' });
      expect(await claims.claim(slot, lease('next'), T0 + 3_000)).toMatchObject({
        kind: 'claimed',
        claim: { epoch: 2 },
      });
    });

    it('changes nothing when the epoch it read has moved on (a takeover since), and says what is there', async () => {
      const { claims, operator } = await makeBackend();
      const slot = freshSlot();
      await claim(claims, slot, 'first', T0);
      await claim(claims, slot, 'second', T0 + LEASE + 1);
      const outcome = await operator.forceRelease(slot, {
        expectedEpoch: 1,
        now: T0 + LEASE + 2,
        evenIfLeaseLive: true,
      });
      expect(outcome).toMatchObject({
        kind: 'refused',
        reason: 'epoch-moved',
        current: { epoch: 2, state: 'RUNNING' },
      });
      expect(await claims.read(slot)).toMatchObject({ state: 'RUNNING', epoch: 2 });
    });

    it('gives a FAILED slot back with its failure count reset, so it gets maxAttempts fresh runs', async () => {
      const { claims, operator } = await makeBackend();
      const slot = freshSlot();
      const only = await claims.claim(slot, lease('a', 1), T0);
      if (only.kind !== 'claimed') throw new Error(only.kind);
      await claims.release(only.claim, { kind: 'error', message: 'boom' }, T0 + 1);
      expect(await claims.read(slot)).toMatchObject({ state: 'FAILED', failures: 1 });
      const outcome = await operator.forceRelease(slot, {
        expectedEpoch: 1,
        now: T0 + 2,
        evenIfLeaseLive: false,
      });
      expect(outcome).toMatchObject({ kind: 'ok', record: { state: 'RELEASED', failures: 0 } });
      expect(await claims.claim(slot, lease('b'), T0 + 3)).toMatchObject({
        kind: 'claimed',
        claim: { epoch: 2 },
      });
    });

    it('refuses to release a DONE slot (reopen it instead) and one that never ran', async () => {
      const { claims, operator } = await makeBackend();
      const slot = freshSlot();
      const done = await claim(claims, slot, 'a', T0);
      await claims.complete(done, summary(1), T0 + 1);
      const request = { expectedEpoch: 1, now: T0 + 2, evenIfLeaseLive: true };
      expect(await operator.forceRelease(slot, request)).toMatchObject({ kind: 'refused', reason: 'state' });
      expect(await operator.forceRelease(freshSlot(), request)).toEqual({ kind: 'absent' });
    });
  });

  describe(`${name}: reopening a slot`, () => {
    it('reopens a DONE slot: the next delivery runs at the next epoch and skips what is done', async () => {
      const { claims, ledger, operator } = await makeBackend();
      const slot = freshSlot();
      const first = await claim(claims, slot, 'a', T0);
      await ledger.reserve(first, 'aa01', { rerunInDoubt: false, now: T0 });
      await ledger.markDone(first, ['aa01']);
      await claims.complete(first, summary(1), T0 + 1);
      const outcome = await operator.reopen(slot, { expectedEpoch: 1, now: T0 + 2 });
      expect(outcome).toMatchObject({ kind: 'ok', record: { state: 'RELEASED', epoch: 1 } });
      expect(outcome.kind === 'ok' && outcome.record.completedAt).toBeUndefined();
      const second = await claim(claims, slot, 'b', T0 + 3);
      expect(second.epoch).toBe(2);
      expect(await ledger.reserve(second, 'aa01', { rerunInDoubt: false, now: T0 })).toEqual({
        kind: 'done',
      });
    });

    it('refuses to reopen a slot that is running or was reopened and claimed since', async () => {
      const { claims, operator } = await makeBackend();
      const slot = freshSlot();
      await claim(claims, slot, 'a', T0);
      expect(await operator.reopen(slot, { expectedEpoch: 1, now: T0 + 1 })).toMatchObject({
        kind: 'refused',
        reason: 'state',
      });
      expect(await operator.reopen(slot, { expectedEpoch: 7, now: T0 + 1 })).toMatchObject({
        kind: 'refused',
        reason: 'epoch-moved',
      });
    });
  });

  describe(`${name}: resolving an effect in doubt`, () => {
    /** A DONE slot at epoch 2 whose effect `key` was reserved at epoch 1 by a holder that crashed. */
    async function doneWithOneInDoubt(backend: OperatorContractBackend, key: string) {
      const slot = freshSlot();
      const crashed = await claim(backend.claims, slot, 'crashed', T0);
      await backend.ledger.reserve(crashed, key, { rerunInDoubt: false, now: T0 });
      const takeover = await claim(backend.claims, slot, 'takeover', T0 + LEASE + 1);
      expect(await backend.ledger.reserve(takeover, key, { rerunInDoubt: false, now: T0 })).toEqual({
        kind: 'in-doubt',
        epoch: 1,
      });
      await backend.claims.complete(takeover, summary(2, 1), T0 + LEASE + 2);
      return { slot, now: T0 + LEASE + 3 };
    }

    it('marks an effect done: no later run performs it, and the slot stays DONE', async () => {
      const backend = await makeBackend();
      const { slot, now } = await doneWithOneInDoubt(backend, 'bb01');
      const outcome = await backend.operator.resolveEffect(slot, 'bb01', 'done', { expectedEpoch: 2, now });
      expect(outcome).toMatchObject({
        kind: 'resolved',
        resolution: 'done',
        before: { state: 'RESERVED', epoch: 1 },
        slotReopened: false,
      });
      expect(await backend.ledger.read(slot, 'bb01')).toMatchObject({ state: 'DONE' });
      expect(await backend.claims.read(slot)).toMatchObject({ state: 'DONE', epoch: 2 });
    });

    it('clears an effect and reopens the DONE slot, so the next delivery performs it once', async () => {
      const backend = await makeBackend();
      const { slot, now } = await doneWithOneInDoubt(backend, 'cc01');
      const outcome = await backend.operator.resolveEffect(slot, 'cc01', 'clear', { expectedEpoch: 2, now });
      expect(outcome).toMatchObject({ kind: 'resolved', resolution: 'clear', slotReopened: true });
      expect(await backend.ledger.read(slot, 'cc01')).toBeUndefined();
      const rerun = await claim(backend.claims, slot, 'rerun', now + 1);
      expect(rerun.epoch).toBe(3);
      expect(await backend.ledger.reserve(rerun, 'cc01', { rerunInDoubt: false, now: T0 })).toEqual({
        kind: 'reserved',
        rerun: false,
        attempt: 1,
      });
    });

    it('changes nothing when the slot moved to another epoch since the operator read it', async () => {
      const backend = await makeBackend();
      const { slot, now } = await doneWithOneInDoubt(backend, 'dd01');
      const outcome = await backend.operator.resolveEffect(slot, 'dd01', 'clear', { expectedEpoch: 1, now });
      expect(outcome).toMatchObject({ kind: 'refused', reason: 'epoch-moved', current: { epoch: 2 } });
      expect(await backend.ledger.read(slot, 'dd01')).toMatchObject({ state: 'RESERVED', epoch: 1 });
    });

    it('refuses while a run holds the slot under a live lease', async () => {
      const backend = await makeBackend();
      const slot = freshSlot();
      const holder = await claim(backend.claims, slot, 'live', T0);
      await backend.ledger.reserve(holder, 'ee01', { rerunInDoubt: false, now: T0 });
      const outcome = await backend.operator.resolveEffect(slot, 'ee01', 'done', {
        expectedEpoch: 1,
        now: T0 + 1,
      });
      expect(outcome).toMatchObject({ kind: 'refused', reason: 'lease-live' });
      expect(await backend.ledger.read(slot, 'ee01')).toMatchObject({ state: 'RESERVED' });
    });

    it('answers an effect that is done or unknown instead of writing it', async () => {
      const backend = await makeBackend();
      const slot = freshSlot();
      const run = await claim(backend.claims, slot, 'a', T0);
      await backend.ledger.reserve(run, 'ff01', { rerunInDoubt: false, now: T0 });
      await backend.ledger.markDone(run, ['ff01']);
      await backend.claims.complete(run, summary(1), T0 + 1);
      const request = { expectedEpoch: 1, now: T0 + 2 };
      expect(await backend.operator.resolveEffect(slot, 'ff01', 'clear', request)).toMatchObject({
        kind: 'effect-not-in-doubt',
        current: { state: 'DONE' },
      });
      expect(await backend.operator.resolveEffect(slot, 'ff02', 'done', request)).toEqual({
        kind: 'effect-absent',
      });
      expect(await backend.operator.resolveEffect(freshSlot(), 'ff01', 'done', request)).toEqual({
        kind: 'absent',
      });
      expect(await backend.ledger.read(slot, 'ff01')).toMatchObject({ state: 'DONE' });
    });
  });
}
