import { describe, expect, it } from 'vitest';
import { InvalidEventError } from '../../shared/errors.js';
import type { OperatorStore } from '../../shared/slot/operator-ports.js';
import type { Claim, ClaimStore, EffectLedger, LeaseRequest } from '../../shared/slot/ports.js';
import type { Slot } from '../../shared/slot/slot.js';
import { runSummary } from './backend-contract.js';

/** What a backend under the operator contract provides: the runtime ports and the operator port. */
export interface OperatorContractBackend {
  readonly claims: ClaimStore;
  readonly ledger: EffectLedger;
  readonly operator: OperatorStore;
}

/** When the contracts' first claims are made: five seconds into the first window. */
export const T0 = Date.parse('2026-11-30T06:00:05Z');
/** The contracts' lease. */
export const LEASE = 60_000;
let slots = 0;

/** A window no other test of the run uses: distinct windows keep tests independent even on a shared table or schema. */
export function freshSlot(): Slot {
  const window = new Date(Date.parse('2026-11-30T06:00:00Z') + ++slots * 60_000);
  return { jobId: 'operator-contract', window: `${window.toISOString().slice(0, 19)}Z` };
}

/** A lease request for `owner`, with the job's 6-hour deadline from T0. */
export function lease(owner: string, maxAttempts = 3): LeaseRequest {
  return {
    owner,
    leaseMs: LEASE,
    maxAttempts,
    expiresAtSeconds: Math.ceil(T0 / 1000) + 35 * 86_400,
    deadline: T0 + 6 * 3_600_000,
    delivery: { executionId: `exec-${owner}`, attemptNumber: 1, invocationId: `req-${owner}` },
  };
}

/** `owner` claims `slot` at `now`; anything but a claim fails the test. */
export async function claim(
  store: ClaimStore,
  slot: Slot,
  owner: string,
  now: number,
  maxAttempts = 3,
): Promise<Claim> {
  const outcome = await store.claim(slot, lease(owner, maxAttempts), now);
  if (outcome.kind !== 'claimed')
    throw new Error(`expected ${owner} to claim ${slot.window}, got ${outcome.kind}`);
  return outcome.claim;
}

const summary = (runs: number, inDoubt = 0, failed = 0) => ({
  done: 1,
  inDoubt,
  failed,
  inDoubtKeys: [],
  failedKeys: [],
  runs,
});

/** The deadline an operator's write gives a window: the job's 6 hours again, from the write. */
const FRESH_DEADLINE = T0 + 30 * 3_600_000;

/**
 * The operator port's contract, run against every backend that implements it: each write fenced on
 * the epoch the operator read, refused while a live lease holds, and never a path to running an
 * effect twice. A Postgres OperatorStore runs the same suite.
 */
export function describeOperatorContract(
  name: string,
  makeBackend: () => Promise<OperatorContractBackend>,
): void {
  describe(`${name}: one rule for keys`, () => {
    it('acts on the one slot of an instant however the operator spells its window', async () => {
      const { claims, ledger, operator } = await makeBackend();
      const slot = freshSlot();
      const instant = Date.parse(slot.window);
      // As the CLI's user may type them: ….000Z, +01:00, and a fraction the slot drops.
      const [millis, plusOne, fraction] = [
        new Date(instant).toISOString(),
        `${new Date(instant + 3_600_000).toISOString().slice(0, 19)}+01:00`,
        `${slot.window.slice(0, 19)}.4Z`,
      ].map((window) => ({ jobId: slot.jobId, window })) as [Slot, Slot, Slot];
      // A holder crashed with an effect reserved and never marked.
      const crashed = await claim(claims, slot, 'crashed', T0);
      await ledger.reserve(crashed, 'aa01', { rerunInDoubt: false, now: T0 });
      const after = T0 + LEASE + 1;
      expect(
        await operator.forceRelease(millis, { expectedEpoch: 1, now: after, evenIfLeaseLive: false }),
      ).toMatchObject({ kind: 'ok', record: { state: 'RELEASED', epoch: 1 } });
      const next = await claim(claims, slot, 'next', after + 1);
      expect(next.epoch).toBe(2);
      expect(await ledger.reserve(next, 'aa01', { rerunInDoubt: false, now: after + 1 })).toEqual({
        kind: 'in-doubt',
        epoch: 1,
      });
      await claims.complete(next, summary(2, 1), after + 2);
      expect(
        await operator.resolveEffect(plusOne, 'aa01', 'done', { expectedEpoch: 2, now: after + 3 }),
      ).toMatchObject({ kind: 'resolved', resolution: 'done', before: { state: 'RESERVED', epoch: 1 } });
      expect(await ledger.read(slot, 'aa01')).toMatchObject({ state: 'DONE' });
      expect(await operator.reopen(fraction, { expectedEpoch: 2, now: after + 4 })).toMatchObject({
        kind: 'ok',
        record: { state: 'RELEASED', epoch: 2 },
      });
      const third = await claim(claims, slot, 'third', after + 5);
      await claims.release(
        third,
        { kind: 'stuck', reason: 'no progress in 3 consecutive runs', runsWithoutProgress: 3 },
        after + 6,
      );
      expect(
        await operator.redrive(millis, { expectedEpoch: 3, now: after + 7, deadline: FRESH_DEADLINE }),
      ).toMatchObject({ kind: 'redriven', cleared: [], record: { state: 'RELEASED', epoch: 3 } });
      // Every write landed on the slot the runs use, under its own key.
      expect(await claims.read(slot)).toMatchObject({
        state: 'RELEASED',
        epoch: 3,
        deadline: FRESH_DEADLINE,
        runsWithoutProgress: 0,
      });
    });

    it('refuses a job id or window that could make two slots one key, whichever write is asked', async () => {
      const { operator } = await makeBackend();
      const window = '2026-11-30T06:00:00Z';
      const request = { expectedEpoch: 1, now: T0, deadline: FRESH_DEADLINE };
      for (const slot of [
        { jobId: 'a#2026-11-30T06:00:00Z', window },
        { jobId: 'a', window: '2026-11-30T06:00:00Z#b' },
        { jobId: 'Weekly', window },
        { jobId: 'a', window: 'yesterday' },
      ]) {
        const writes = {
          forceRelease: () => operator.forceRelease(slot, { ...request, evenIfLeaseLive: true }),
          reopen: () => operator.reopen(slot, request),
          resolveEffect: () => operator.resolveEffect(slot, 'aa01', 'clear', request),
          redrive: () => operator.redrive(slot, request),
        };
        for (const [write, attempt] of Object.entries(writes)) {
          await expect(attempt(), `${write} ${JSON.stringify(slot)}`).rejects.toBeInstanceOf(
            InvalidEventError,
          );
        }
      }
    });
  });

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

    it('releases a STUCK slot with a fresh deadline and no runs without progress, so its next run resumes instead of going STUCK again', async () => {
      const { claims, operator } = await makeBackend();
      const slot = freshSlot();
      const stuck = await claim(claims, slot, 'a', T0);
      const checkpoint = { positions: { customers: '6200' }, walked: false };
      await claims.release(
        stuck,
        { kind: 'stuck', reason: 'no progress in 3 consecutive runs', checkpoint, runsWithoutProgress: 3 },
        T0 + 1,
      );
      const outcome = await operator.forceRelease(slot, {
        expectedEpoch: 1,
        now: T0 + 2,
        evenIfLeaseLive: false,
        deadline: FRESH_DEADLINE,
      });
      expect(outcome).toMatchObject({
        kind: 'ok',
        record: { state: 'RELEASED', epoch: 1, runsWithoutProgress: 0, deadline: FRESH_DEADLINE },
      });
      const next = await claim(claims, slot, 'b', T0 + 3);
      expect(next).toMatchObject({
        epoch: 2,
        window: { deadline: FRESH_DEADLINE, checkpoint, runsWithoutProgress: 0 },
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

    it('reopens a PARTIAL slot with a fresh deadline and without its checkpoint, so the next run walks the job again', async () => {
      const { claims, operator } = await makeBackend();
      const slot = freshSlot();
      const first = await claim(claims, slot, 'a', T0);
      await claims.checkpoint(first, { positions: { customers: '12400' }, walked: true }, runSummary(1, 1));
      await claims.complete(first, summary(1, 0, 2), T0 + 1);
      expect(await claims.read(slot)).toMatchObject({ state: 'PARTIAL' });
      const outcome = await operator.reopen(slot, {
        expectedEpoch: 1,
        now: T0 + 2,
        deadline: FRESH_DEADLINE,
      });
      expect(outcome).toMatchObject({ kind: 'ok', record: { state: 'RELEASED', deadline: FRESH_DEADLINE } });
      expect(outcome.kind === 'ok' && outcome.record.checkpoint).toBeUndefined();
      const second = await claim(claims, slot, 'b', T0 + 3);
      expect(second.window).toEqual({ deadline: FRESH_DEADLINE, runsWithoutProgress: 0 });
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
    async function doneWithOneInDoubt(backend: OperatorContractBackend, key: string, failed = 0) {
      const slot = freshSlot();
      const crashed = await claim(backend.claims, slot, 'crashed', T0);
      await backend.ledger.reserve(crashed, key, { rerunInDoubt: false, now: T0 });
      const takeover = await claim(backend.claims, slot, 'takeover', T0 + LEASE + 1);
      expect(await backend.ledger.reserve(takeover, key, { rerunInDoubt: false, now: T0 })).toEqual({
        kind: 'in-doubt',
        epoch: 1,
      });
      const counted = { ...summary(2, 1, failed), inDoubtKeys: [key] };
      await backend.claims.complete(takeover, counted, T0 + LEASE + 2);
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

    it('moves an effect marked done from in doubt to done in the window’s stored summary, once', async () => {
      const backend = await makeBackend();
      const { slot, now } = await doneWithOneInDoubt(backend, 'bc01');
      expect((await backend.claims.read(slot))?.summary).toMatchObject({
        done: 1,
        inDoubt: 1,
        inDoubtKeys: ['bc01'],
      });
      const request = { expectedEpoch: 2, now };
      expect(await backend.operator.resolveEffect(slot, 'bc01', 'done', request)).toMatchObject({
        kind: 'resolved',
      });
      const counted = { done: 2, inDoubt: 0, failed: 0, inDoubtKeys: [], failedKeys: [], runs: 2 };
      expect((await backend.claims.read(slot))?.summary).toEqual(counted);
      // A second resolution, later (the watchdog after an operator), finds it done and counts nothing again.
      const later = { expectedEpoch: 2, now: now + 60_000 };
      expect(await backend.operator.resolveEffect(slot, 'bc01', 'done', later)).toMatchObject({
        kind: 'effect-not-in-doubt',
      });
      expect((await backend.claims.read(slot))?.summary).toEqual(counted);
    });

    it('counts an effect marked done that the summary counted in doubt without listing it (past the 50 it lists)', async () => {
      const backend = await makeBackend();
      const slot = freshSlot();
      const crashed = await claim(backend.claims, slot, 'crashed', T0);
      for (const key of ['bd01', 'bd02']) {
        await backend.ledger.reserve(crashed, key, { rerunInDoubt: false, now: T0 });
      }
      const takeover = await claim(backend.claims, slot, 'takeover', T0 + LEASE + 1);
      // Listed: bd01 only, as a summary lists its first 50 of more.
      const counted = { done: 0, inDoubt: 2, failed: 0, inDoubtKeys: ['bd01'], failedKeys: [], runs: 2 };
      await backend.claims.complete(takeover, counted, T0 + LEASE + 2);
      const request = { expectedEpoch: 2, now: T0 + LEASE + 3 };
      await backend.operator.resolveEffect(slot, 'bd02', 'done', request);
      expect((await backend.claims.read(slot))?.summary).toMatchObject({
        done: 1,
        inDoubt: 1,
        inDoubtKeys: ['bd01'],
      });
      await backend.operator.resolveEffect(slot, 'bd01', 'done', request);
      expect((await backend.claims.read(slot))?.summary).toMatchObject({
        done: 2,
        inDoubt: 0,
        inDoubtKeys: [],
      });
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

    it('reopens a PARTIAL slot too when an effect in doubt is cleared, so the next delivery performs it', async () => {
      const backend = await makeBackend();
      const { slot, now } = await doneWithOneInDoubt(backend, 'cd01', 1);
      expect(await backend.claims.read(slot)).toMatchObject({ state: 'PARTIAL' });
      const outcome = await backend.operator.resolveEffect(slot, 'cd01', 'clear', {
        expectedEpoch: 2,
        now,
        deadline: FRESH_DEADLINE,
      });
      expect(outcome).toMatchObject({ kind: 'resolved', slotReopened: true });
      expect(await backend.claims.read(slot)).toMatchObject({ state: 'RELEASED', deadline: FRESH_DEADLINE });
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

    /*
     * A holder whose lease ended may be frozen, not dead: until the slot is released its late
     * checkpoint is accepted, and the done marks it carries cover its reservations by number, so a
     * reservation cleared meanwhile would read as never sent and be sent again.
     */
    describe('while a holder past its lease still holds the slot RUNNING', () => {
      /** A slot RUNNING at epoch 1 whose holder reserved `key` (seq 0) and froze; the time its lease is over. */
      async function frozenHolder(backend: OperatorContractBackend, key: string) {
        const slot = freshSlot();
        const holder = await claim(backend.claims, slot, 'frozen', T0);
        await backend.ledger.reserve(holder, key, { rerunInDoubt: false, now: T0, seq: 0 });
        return { slot, holder, now: T0 + LEASE + 1 };
      }

      it('refuses to clear an effect while the slot is RUNNING with an expired lease, answering running: release it first', async () => {
        const backend = await makeBackend();
        const { slot, holder, now } = await frozenHolder(backend, 'ea01');
        const outcome = await backend.operator.resolveEffect(slot, 'ea01', 'clear', {
          expectedEpoch: 1,
          now,
        });
        expect(outcome).toMatchObject({
          kind: 'refused',
          reason: 'running',
          current: { state: 'RUNNING', epoch: 1, owner: 'frozen' },
        });
        expect(await backend.ledger.read(slot, 'ea01')).toMatchObject({ state: 'RESERVED', epoch: 1 });
        // The holder thaws: its marks are accepted and cover what it sent, which stays done.
        const marks = { '1': { below: 1, open: [] } };
        const walking = { positions: { customers: '1' }, walked: false };
        expect(await backend.claims.checkpoint(holder, walking, runSummary(1, 1), marks)).toEqual({
          kind: 'ok',
        });
        expect(await backend.ledger.read(slot, 'ea01')).toMatchObject({ state: 'DONE' });
      });

      it('clears the same effect once the slot is released, and the released holder’s late marks are rejected', async () => {
        const backend = await makeBackend();
        const { slot, holder, now } = await frozenHolder(backend, 'eb01');
        const request = { expectedEpoch: 1, now };
        expect(
          await backend.operator.forceRelease(slot, { ...request, evenIfLeaseLive: false }),
        ).toMatchObject({
          kind: 'ok',
          record: { state: 'RELEASED', epoch: 1 },
        });
        expect(await backend.operator.resolveEffect(slot, 'eb01', 'clear', request)).toMatchObject({
          kind: 'resolved',
          resolution: 'clear',
          before: { state: 'RESERVED', epoch: 1, owner: 'frozen' },
          slotReopened: false,
        });
        expect(await backend.ledger.read(slot, 'eb01')).toBeUndefined();
        const marks = { '1': { below: 1, open: [] } };
        const walking = { positions: { customers: '1' }, walked: false };
        expect(await backend.claims.checkpoint(holder, walking, runSummary(1, 1), marks)).toMatchObject({
          kind: 'fenced',
        });
        const next = await claim(backend.claims, slot, 'next', now + 1);
        expect(next.epoch).toBe(2);
        expect(
          await backend.ledger.reserve(next, 'eb01', { rerunInDoubt: false, now: now + 1, seq: 0 }),
        ).toEqual({ kind: 'reserved', rerun: false, attempt: 1 });
      });

      it('marks an effect done while the slot is RUNNING with an expired lease: that never sends it again', async () => {
        const backend = await makeBackend();
        const { slot, now } = await frozenHolder(backend, 'ec01');
        expect(
          await backend.operator.resolveEffect(slot, 'ec01', 'done', { expectedEpoch: 1, now }),
        ).toMatchObject({ kind: 'resolved', resolution: 'done', slotReopened: false });
        expect(await backend.ledger.read(slot, 'ec01')).toMatchObject({ state: 'DONE' });
        expect(await backend.claims.read(slot)).toMatchObject({ state: 'RUNNING', epoch: 1 });
      });
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

  describe(`${name}: re-driving a window`, () => {
    /**
     * A PARTIAL window at epoch 1: `done` performed, `refused` refused for good, `waiting` refused and
     * still waiting for a retry when the deadline came (counted failed), `doubt` reserved and never marked.
     */
    async function partialWindow(backend: OperatorContractBackend) {
      const slot = freshSlot();
      const run = await claim(backend.claims, slot, 'a', T0);
      const reserve = (key: string) => backend.ledger.reserve(run, key, { rerunInDoubt: false, now: T0 });
      for (const key of ['aa01', 'bb01', 'cc01', 'dd01']) await reserve(key);
      await backend.ledger.markDone(run, ['aa01']);
      await backend.ledger.recordFailure(run, 'bb01', { attempts: 5, reason: 'rejected' });
      await backend.ledger.recordFailure(run, 'cc01', {
        attempts: 2,
        retryAt: T0 + 60_000,
        reason: 'throttled',
      });
      await backend.claims.checkpoint(run, { positions: { customers: '4' }, walked: true }, runSummary(1, 1));
      await backend.claims.complete(run, summary(1, 1, 2), T0 + 1);
      return slot;
    }

    it('clears the FAILED effects, reopens the window with a fresh deadline, and the next run performs them once and skips the rest', async () => {
      const backend = await makeBackend();
      const slot = await partialWindow(backend);
      const outcome = await backend.operator.redrive(slot, {
        expectedEpoch: 1,
        now: T0 + 2,
        deadline: FRESH_DEADLINE,
      });
      expect(outcome.kind).toBe('redriven');
      if (outcome.kind !== 'redriven') return;
      expect(outcome.cleared.map((e) => [e.keyHash, e.state, e.attempts, e.reason]).sort()).toEqual([
        ['bb01', 'FAILED', 5, 'rejected'],
        ['cc01', 'FAILED', 2, 'throttled'],
      ]);
      expect(outcome.record).toMatchObject({
        state: 'RELEASED',
        epoch: 1,
        deadline: FRESH_DEADLINE,
        runsWithoutProgress: 0,
      });
      expect(outcome.record.checkpoint).toBeUndefined();
      expect(outcome.record.completedAt).toBeUndefined();
      expect(await backend.ledger.read(slot, 'bb01')).toBeUndefined();
      expect(await backend.ledger.read(slot, 'cc01')).toBeUndefined();

      const rerun = await claim(backend.claims, slot, 'b', T0 + 3);
      expect(rerun).toMatchObject({ epoch: 2, window: { deadline: FRESH_DEADLINE, runsWithoutProgress: 0 } });
      expect(rerun.window.checkpoint).toBeUndefined();
      const reserve = (key: string) =>
        backend.ledger.reserve(rerun, key, { rerunInDoubt: false, now: T0 + 3 });
      expect(await reserve('aa01')).toEqual({ kind: 'done' });
      expect(await reserve('bb01')).toEqual({ kind: 'reserved', rerun: false, attempt: 1 });
      expect(await reserve('cc01')).toEqual({ kind: 'reserved', rerun: false, attempt: 1 });
      // In doubt stays in doubt: a re-drive never sends what may have gone.
      expect(await reserve('dd01')).toEqual({ kind: 'in-doubt', epoch: 1 });
    });

    it('clears only the effects named, and writes nothing when one named is not FAILED', async () => {
      const backend = await makeBackend();
      const slot = await partialWindow(backend);
      const request = { expectedEpoch: 1, now: T0 + 2, deadline: FRESH_DEADLINE };
      const refused = await backend.operator.redrive(slot, {
        ...request,
        keyHashes: ['bb01', 'aa01', 'ee01'],
      });
      expect(refused).toMatchObject({
        kind: 'effects-not-failed',
        effects: [
          { keyHash: 'aa01', current: { state: 'DONE' } },
          { keyHash: 'ee01', current: undefined },
        ],
      });
      expect(await backend.ledger.read(slot, 'bb01')).toMatchObject({ state: 'FAILED' });
      expect(await backend.claims.read(slot)).toMatchObject({ state: 'PARTIAL', epoch: 1 });

      const one = await backend.operator.redrive(slot, { ...request, keyHashes: ['bb01'] });
      expect(one).toMatchObject({
        kind: 'redriven',
        cleared: [{ keyHash: 'bb01' }],
        record: { state: 'RELEASED' },
      });
      expect(await backend.ledger.read(slot, 'bb01')).toBeUndefined();
      expect(await backend.ledger.read(slot, 'cc01')).toMatchObject({ state: 'FAILED', attempts: 2 });
    });

    it('re-drives a STUCK window, and one re-driven already whose delivery never came', async () => {
      const backend = await makeBackend();
      const slot = freshSlot();
      const run = await claim(backend.claims, slot, 'a', T0);
      await backend.claims.release(
        run,
        { kind: 'stuck', reason: "the window's deadline passed with work left", runsWithoutProgress: 1 },
        T0 + 1,
      );
      const request = { expectedEpoch: 1, now: T0 + 2, deadline: FRESH_DEADLINE };
      expect(await backend.operator.redrive(slot, request)).toMatchObject({
        kind: 'redriven',
        cleared: [],
        record: { state: 'RELEASED', deadline: FRESH_DEADLINE, runsWithoutProgress: 0 },
      });
      expect(await backend.operator.redrive(slot, { ...request, now: T0 + 3 })).toMatchObject({
        kind: 'redriven',
        record: { state: 'RELEASED', epoch: 1 },
      });
    });

    it('refuses while a run holds the slot RUNNING, its lease live or ended, and when the epoch moved, deleting nothing; re-drives once it is released', async () => {
      const backend = await makeBackend();
      const slot = freshSlot();
      const holder = await claim(backend.claims, slot, 'holder', T0);
      await backend.ledger.reserve(holder, 'ff01', { rerunInDoubt: false, now: T0 });
      await backend.ledger.recordFailure(holder, 'ff01', {
        attempts: 1,
        retryAt: T0 + 60_000,
        reason: 'throttled',
      });
      const request = { expectedEpoch: 1, now: T0 + 1_000, deadline: FRESH_DEADLINE };
      expect(await backend.operator.redrive(slot, request)).toMatchObject({
        kind: 'refused',
        reason: 'lease-live',
        cleared: [],
        current: { state: 'RUNNING' },
      });
      expect(await backend.operator.redrive(slot, { ...request, expectedEpoch: 2 })).toMatchObject({
        kind: 'refused',
        reason: 'epoch-moved',
        cleared: [],
      });
      // Its lease ended, but the holder may only be frozen: release it first.
      const later = { ...request, now: T0 + LEASE + 1 };
      expect(await backend.operator.redrive(slot, later)).toMatchObject({
        kind: 'refused',
        reason: 'running',
        cleared: [],
        current: { state: 'RUNNING', epoch: 1, owner: 'holder' },
      });
      expect(await backend.ledger.read(slot, 'ff01')).toMatchObject({ state: 'FAILED' });
      expect(await backend.operator.redrive(freshSlot(), request)).toEqual({ kind: 'absent' });

      expect(await backend.operator.forceRelease(slot, { ...later, evenIfLeaseLive: false })).toMatchObject({
        kind: 'ok',
      });
      expect(await backend.operator.redrive(slot, later)).toMatchObject({
        kind: 'redriven',
        cleared: [{ keyHash: 'ff01' }],
        record: { state: 'RELEASED', epoch: 1, deadline: FRESH_DEADLINE },
      });
    });

    it('refuses to clear an effect or re-drive while the window is SHARDED: its shards run it', async () => {
      const backend = await makeBackend();
      const window = freshSlot();
      const coordinator = await backend.claims.claim(window, { ...lease('coordinator'), shards: 2 }, T0);
      if (coordinator.kind !== 'claimed') throw new Error(coordinator.kind);
      expect(await backend.claims.release(coordinator.claim, { kind: 'sharded', shards: 2 }, T0 + 1)).toEqual(
        {
          kind: 'ok',
        },
      );
      const shard = await backend.claims.claim({ ...window, shard: 0 }, lease('shard-0'), T0 + 2);
      if (shard.kind !== 'claimed') throw new Error(shard.kind);
      await backend.ledger.reserve(shard.claim, 'ga01', { rerunInDoubt: false, now: T0 + 2 });
      await backend.ledger.reserve(shard.claim, 'gb01', { rerunInDoubt: false, now: T0 + 2 });
      await backend.ledger.recordFailure(shard.claim, 'gb01', { attempts: 5, reason: 'rejected' });

      // Shard 0's lease has ended; it may be frozen, and the window's record holds no lease to show it.
      const request = { expectedEpoch: 1, now: T0 + 2 + LEASE + 1, deadline: FRESH_DEADLINE };
      const sharded = { kind: 'refused', reason: 'state', current: { state: 'SHARDED', epoch: 1 } };
      expect(await backend.operator.resolveEffect(window, 'ga01', 'clear', request)).toMatchObject(sharded);
      expect(await backend.operator.redrive(window, request)).toMatchObject({ ...sharded, cleared: [] });
      expect(await backend.ledger.read(window, 'ga01')).toMatchObject({
        state: 'RESERVED',
        owner: 'shard-0',
      });
      expect(await backend.ledger.read(window, 'gb01')).toMatchObject({ state: 'FAILED' });
      expect(await backend.claims.read(window)).toMatchObject({ state: 'SHARDED', epoch: 1 });
    });

    it("keeps a window's done marks through a redrive: what they cover stays done", async () => {
      const backend = await makeBackend();
      const slot = freshSlot();
      const run = await claim(backend.claims, slot, 'a', T0);
      const numbered = (seq: number) => ({ rerunInDoubt: false, now: T0, seq });
      // aa02 performed, bb02 refused for good, dd02 sent and never heard of: marks below 3, 2 open.
      await backend.ledger.reserve(run, 'aa02', numbered(0));
      await backend.ledger.reserve(run, 'bb02', numbered(1));
      await backend.ledger.reserve(run, 'dd02', numbered(2));
      await backend.ledger.recordFailure(run, 'bb02', { attempts: 5, reason: 'rejected', seq: 1 });
      const marks = { '1': { below: 3, open: [2] } };
      const walked = { positions: { customers: '3' }, walked: true };
      expect(await backend.claims.checkpoint(run, walked, runSummary(1, 1), marks)).toEqual({ kind: 'ok' });
      expect(await backend.claims.complete(run, summary(1, 1, 1), T0 + 1)).toEqual({ kind: 'ok' });

      const outcome = await backend.operator.redrive(slot, {
        expectedEpoch: 1,
        now: T0 + 2,
        deadline: FRESH_DEADLINE,
      });
      expect(outcome).toMatchObject({
        kind: 'redriven',
        cleared: [{ keyHash: 'bb02' }],
        record: { state: 'RELEASED', doneMarks: marks },
      });
      expect(await backend.ledger.read(slot, 'aa02')).toMatchObject({ state: 'DONE', epoch: 1, seq: 0 });
      expect(await backend.ledger.read(slot, 'dd02')).toMatchObject({ state: 'RESERVED', epoch: 1, seq: 2 });

      const rerun = await claim(backend.claims, slot, 'b', T0 + 3);
      expect(rerun.window.doneMarks).toEqual(marks);
      const reserve = (key: string, seq: number) =>
        backend.ledger.reserve(rerun, key, { rerunInDoubt: false, now: T0 + 3, seq });
      expect(await reserve('aa02', 0)).toEqual({ kind: 'done' });
      expect(await reserve('bb02', 1)).toEqual({ kind: 'reserved', rerun: false, attempt: 1 });
      expect(await reserve('dd02', 2)).toEqual({ kind: 'in-doubt', epoch: 1 });
    });
  });
}
