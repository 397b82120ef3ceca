import { describe, expect, it } from 'vitest';
import { InvalidEventError } from '../../shared/errors.js';
import type { Claim, ClaimStore, EffectLedger, LeaseRequest, RunSummary } from '../../shared/slot/ports.js';
import type { Slot } from '../../shared/slot/slot.js';

/** What a backend under contract provides: its two ports, fresh for each test. */
export interface ContractBackend {
  readonly claims: ClaimStore;
  readonly ledger: EffectLedger;
}

const T0 = Date.parse('2026-11-30T06:00:05Z');
const LEASE = 60_000;
const DEADLINE = T0 + 6 * 3_600_000;
let slots = 0;

function freshSlot(): Slot {
  // Distinct windows keep tests independent even on a shared table or schema.
  return {
    jobId: 'contract-job',
    window: new Date(Date.parse('2026-11-30T06:00:00Z') + ++slots * 60_000)
      .toISOString()
      .slice(0, 19)
      .concat('Z'),
  };
}

/**
 * A lease request for `owner` as the contract suites make them: a 60 s lease, 3 attempts, the window
 * due 6 hours after 2026-11-30T06:00:05Z, unless `overrides` say otherwise (`shards`, `deadline`).
 */
export function lease(owner: string, overrides: Partial<LeaseRequest> = {}): LeaseRequest {
  return {
    owner,
    leaseMs: LEASE,
    maxAttempts: 3,
    expiresAtSeconds: Math.ceil(T0 / 1000) + 35 * 86_400,
    deadline: DEADLINE,
    delivery: { executionId: `exec-${owner}`, attemptNumber: 1, invocationId: `req-${owner}` },
    ...overrides,
  };
}

async function claimOrFail(store: ClaimStore, slot: Slot, owner: string, now: number): Promise<Claim> {
  const outcome = await store.claim(slot, lease(owner), now);
  if (outcome.kind !== 'claimed')
    throw new Error(`expected ${owner} to claim ${slot.window}, got ${outcome.kind}`);
  return outcome.claim;
}

/** A run's counts: `done` effects performed, nothing else. */
export const runSummary = (epoch: number, done: number): RunSummary => ({
  done,
  skipped: 0,
  inDoubt: 0,
  failed: 0,
  retrying: 0,
  inDoubtKeys: [],
  failedKeys: [],
  epoch,
});

const summary = (runs: number) => ({ done: 3, inDoubt: 0, failed: 0, inDoubtKeys: [], failedKeys: [], runs });

/**
 * One claim-and-ledger contract, run unchanged against every backend (DynamoDB, Postgres, the
 * simulation's in-memory store), so they cannot drift apart in what they guarantee.
 */
export function describeBackendContract(name: string, makeBackend: () => Promise<ContractBackend>): void {
  describe(`${name}: slot claims`, () => {
    it('grants a new slot at epoch 1 and records the delivery', async () => {
      const { claims } = await makeBackend();
      const slot = freshSlot();
      const outcome = await claims.claim(slot, lease('a'), T0);
      expect(outcome).toMatchObject({
        kind: 'claimed',
        claim: { epoch: 1, owner: 'a', via: 'new', leaseEndsAt: T0 + LEASE },
      });
      const record = await claims.read(slot);
      expect(record).toMatchObject({
        state: 'RUNNING',
        owner: 'a',
        epoch: 1,
        attempts: 1,
        delivery: { executionId: 'exec-a', attemptNumber: 1 },
      });
    });

    it('tells a second claimer who holds a live lease, and until when', async () => {
      const { claims } = await makeBackend();
      const slot = freshSlot();
      await claimOrFail(claims, slot, 'a', T0);
      const outcome = await claims.claim(slot, lease('b'), T0 + 1_000);
      expect(outcome).toEqual({ kind: 'held', holder: 'a', epoch: 1, leaseEndsAt: T0 + LEASE });
    });

    it('lets exactly one of 50 concurrent claimers win a new slot', async () => {
      const { claims } = await makeBackend();
      const slot = freshSlot();
      const outcomes = await Promise.all(
        Array.from({ length: 50 }, (_, i) => claims.claim(slot, lease(`r${i}`), T0)),
      );
      expect(outcomes.filter((o) => o.kind === 'claimed')).toHaveLength(1);
      expect(outcomes.filter((o) => o.kind === 'held')).toHaveLength(49);
    });

    it('takes over an expired lease with the next epoch and names the previous holder', async () => {
      const { claims } = await makeBackend();
      const slot = freshSlot();
      await claimOrFail(claims, slot, 'a', T0);
      const outcome = await claims.claim(slot, lease('b'), T0 + LEASE + 1);
      expect(outcome).toMatchObject({
        kind: 'claimed',
        claim: { epoch: 2, owner: 'b', via: 'takeover' },
        previousHolder: 'a',
      });
    });

    it('takes over a lease only once it ended more than the skew allowance ago by the claimer', async () => {
      const { claims } = await makeBackend();
      const slot = freshSlot();
      await claimOrFail(claims, slot, 'a', T0);
      // A claimer whose clock runs 1.5 s fast sees the lease ended 1 s ago: within a 2 s allowance.
      const skewed = lease('b', { takeoverSkewMs: 2_000 });
      expect(await claims.claim(slot, skewed, T0 + LEASE + 1_000)).toMatchObject({
        kind: 'held',
        holder: 'a',
      });
      expect(await claims.claim(slot, skewed, T0 + LEASE + 2_001)).toMatchObject({
        kind: 'claimed',
        claim: { epoch: 2, via: 'takeover' },
      });
    });

    it('never grants an epoch twice: five takeovers give epochs 1 to 6', async () => {
      const { claims } = await makeBackend();
      const slot = freshSlot();
      const epochs: number[] = [];
      for (let i = 0; i <= 5; i++) {
        epochs.push((await claimOrFail(claims, slot, `h${i}`, T0 + i * (LEASE + 1))).epoch);
      }
      expect(epochs).toEqual([1, 2, 3, 4, 5, 6]);
    });

    it('recognises its own claim when the write committed but the reply was lost', async () => {
      const { claims } = await makeBackend();
      const slot = freshSlot();
      await claimOrFail(claims, slot, 'a', T0);
      // The SDK's retry of the same request: same owner token, condition now fails on our own write.
      const retry = await claims.claim(slot, lease('a'), T0);
      expect(retry).toMatchObject({ kind: 'claimed', claim: { epoch: 1, owner: 'a' } });
    });

    it('renews for the holder and reports a takeover to the fenced holder', async () => {
      const { claims } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      expect(await claims.renew(a, LEASE, T0 + 20_000)).toEqual({
        kind: 'renewed',
        leaseEndsAt: T0 + 20_000 + LEASE,
      });
      // Renewed: no takeover at the old lease end.
      expect(await claims.claim(slot, lease('b'), T0 + LEASE + 1)).toMatchObject({
        kind: 'held',
        holder: 'a',
      });
      const b = await claimOrFail(claims, slot, 'b', T0 + 20_000 + LEASE + 1);
      expect(b.epoch).toBe(2);
      expect(await claims.renew(a, LEASE, T0 + 100_000)).toMatchObject({
        kind: 'lost',
        holder: 'b',
        epoch: 2,
        state: 'RUNNING',
      });
    });

    it('completes with a summary; later fires find it done', async () => {
      const { claims } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      expect(await claims.complete(a, summary(1), T0 + 5_000)).toEqual({ kind: 'ok' });
      const later = await claims.claim(slot, lease('b'), T0 + 10 * LEASE);
      expect(later).toEqual({ kind: 'done', state: 'DONE', completedAt: T0 + 5_000, summary: summary(1) });
      // A retried completion (lost reply) is still ok, not fenced.
      expect(await claims.complete(a, summary(1), T0 + 5_000)).toEqual({ kind: 'ok' });
    });

    it("rejects a stale holder's completion and release after a takeover", async () => {
      const { claims } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      await claimOrFail(claims, slot, 'b', T0 + LEASE + 1);
      expect(await claims.complete(a, summary(1), T0 + LEASE + 2)).toMatchObject({
        kind: 'fenced',
        holder: 'b',
        epoch: 2,
      });
      expect(
        await claims.release(a, { kind: 'yield', runsWithoutProgress: 0 }, T0 + LEASE + 3),
      ).toMatchObject({
        kind: 'fenced',
        epoch: 2,
      });
      expect(await claims.read(slot)).toMatchObject({ state: 'RUNNING', owner: 'b', epoch: 2 });
    });

    it('hands a yielded slot to the next claimer at once, with the next epoch', async () => {
      const { claims } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      expect(await claims.release(a, { kind: 'yield', runsWithoutProgress: 0 }, T0 + 1_000)).toEqual({
        kind: 'ok',
      });
      const b = await claims.claim(slot, lease('b'), T0 + 1_001);
      expect(b).toMatchObject({ kind: 'claimed', claim: { epoch: 2, via: 'retry' } });
      expect(await claims.read(slot)).toMatchObject({ failures: 0, attempts: 2 });
    });

    it('marks the slot FAILED after maxAttempts failed runs, and later fires stand down', async () => {
      const { claims } = await makeBackend();
      const slot = freshSlot();
      for (let attempt = 1; attempt <= 3; attempt++) {
        const c = await claimOrFail(claims, slot, `a${attempt}`, T0 + attempt);
        expect(await claims.release(c, { kind: 'error', message: `boom ${attempt}` }, T0 + attempt)).toEqual({
          kind: 'ok',
        });
      }
      expect(await claims.claim(slot, lease('late'), T0 + 10)).toEqual({
        kind: 'failed',
        attempts: 3,
        lastError: 'boom 3',
      });
      expect(await claims.read(slot)).toMatchObject({ state: 'FAILED', failures: 3 });
    });
  });

  describe(`${name}: effect ledger`, () => {
    it('reserves a key once; a second claim of the same epoch and owner sees its own reservation', async () => {
      const { claims, ledger } = await makeBackend();
      const a = await claimOrFail(claims, freshSlot(), 'a', T0);
      expect(await ledger.reserve(a, 'k1', { rerunInDoubt: false, now: T0 })).toEqual({
        kind: 'reserved',
        rerun: false,
        attempt: 1,
      });
      expect(await ledger.reserve(a, 'k1', { rerunInDoubt: false, now: T0 })).toEqual({
        kind: 'reserved',
        rerun: false,
        attempt: 1,
      });
      expect(await ledger.read(a.slot, 'k1')).toMatchObject({ state: 'RESERVED', epoch: 1, owner: 'a' });
    });

    it('lets exactly one of 40 concurrent reservations of one key through', async () => {
      const { claims, ledger } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      const b = await claimOrFail(claims, slot, 'b', T0 + LEASE + 1);
      const outcomes = await Promise.all(
        Array.from({ length: 40 }, (_, i) =>
          ledger.reserve(i % 2 ? a : b, 'contended', { rerunInDoubt: false, now: T0 }),
        ),
      );
      const record = await ledger.read(slot, 'contended');
      const winner = record?.owner === 'a' ? 1 : 0;
      // Every reservation by the winning claim is its own (lost-reply recognition); every one by the
      // other claim loses: in doubt when the earlier epoch won, fenced when the later one did.
      expect(record?.state).toBe('RESERVED');
      expect(outcomes.filter((o, i) => i % 2 === winner && o.kind === 'reserved')).toHaveLength(20);
      expect(
        outcomes.filter((o, i) => i % 2 !== winner && o.kind === (winner ? 'in-doubt' : 'fenced')),
      ).toHaveLength(20);
    });

    it('skips a key marked done, in every later epoch', async () => {
      const { claims, ledger } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      await ledger.reserve(a, 'k1', { rerunInDoubt: false, now: T0 });
      await ledger.markDone(a, ['k1']);
      const b = await claimOrFail(claims, slot, 'b', T0 + LEASE + 1);
      expect(await ledger.reserve(b, 'k1', { rerunInDoubt: false, now: T0 })).toEqual({ kind: 'done' });
      expect(await ledger.reserve(b, 'k1', { rerunInDoubt: true, now: T0 })).toEqual({ kind: 'done' });
    });

    it('reports a reservation an earlier epoch never marked done as in doubt, and re-runs it only by policy', async () => {
      const { claims, ledger } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      await ledger.reserve(a, 'k1', { rerunInDoubt: false, now: T0 });
      await ledger.reserve(a, 'k2', { rerunInDoubt: false, now: T0 });
      const b = await claimOrFail(claims, slot, 'b', T0 + LEASE + 1);
      expect(await ledger.reserve(b, 'k1', { rerunInDoubt: false, now: T0 })).toEqual({
        kind: 'in-doubt',
        epoch: 1,
      });
      expect(await ledger.read(slot, 'k1')).toMatchObject({ state: 'RESERVED', epoch: 1 });
      expect(await ledger.reserve(b, 'k2', { rerunInDoubt: true, now: T0 })).toEqual({
        kind: 'reserved',
        rerun: true,
        attempt: 1,
      });
      expect(await ledger.read(slot, 'k2')).toMatchObject({ state: 'RESERVED', epoch: 2, owner: 'b' });
    });

    it('tells an earlier epoch it is fenced when a later epoch holds the key', async () => {
      const { claims, ledger } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      const b = await claimOrFail(claims, slot, 'b', T0 + LEASE + 1);
      await ledger.reserve(b, 'k1', { rerunInDoubt: false, now: T0 });
      expect(await ledger.reserve(a, 'k1', { rerunInDoubt: false, now: T0 })).toEqual({
        kind: 'fenced',
        epoch: 2,
      });
    });

    it('releases a reservation whose effect did not happen, so a later run can perform it', async () => {
      const { claims, ledger } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      await ledger.reserve(a, 'k1', { rerunInDoubt: false, now: T0 });
      await ledger.unreserve(a, 'k1');
      expect(await ledger.read(slot, 'k1')).toBeUndefined();
      const b = await claimOrFail(claims, slot, 'b', T0 + LEASE + 1);
      expect(await ledger.reserve(b, 'k1', { rerunInDoubt: false, now: T0 })).toEqual({
        kind: 'reserved',
        rerun: false,
        attempt: 1,
      });
    });

    it('marks in batches larger than one request and lists every record of the window', async () => {
      const { claims, ledger } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      const keys = Array.from({ length: 60 }, (_, i) => `${(i % 16).toString(16)}key${i}`);
      for (const key of keys) await ledger.reserve(a, key, { rerunInDoubt: false, now: T0 });
      await ledger.markDone(a, keys.slice(0, 53));
      const listed = [];
      for await (const record of ledger.list(slot)) listed.push(record);
      expect(listed).toHaveLength(60);
      expect(listed.filter((r) => r.state === 'DONE')).toHaveLength(53);
      expect(listed.filter((r) => r.state === 'RESERVED')).toHaveLength(7);
      expect(new Set(listed.map((r) => r.keyHash))).toEqual(new Set(keys));
    });
  });

  describe(`${name}: done marks`, () => {
    const at = (seq: number) => ({ rerunInDoubt: false, now: T0, seq });
    const walking = { positions: { customers: 'c000004' }, walked: false };

    /** Run `a` (epoch 1) reserved k0…k4 as numbers 0…4 and checkpointed marks: below 4, 2 open. */
    async function markedRun() {
      const { claims, ledger } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      for (let seq = 0; seq < 5; seq++) await ledger.reserve(a, `k${seq}`, at(seq));
      const marks = { '1': { below: 4, open: [2] } };
      expect(await claims.checkpoint(a, walking, runSummary(1, 3), marks)).toEqual({ kind: 'ok' });
      return { claims, ledger, slot, a, marks };
    }

    async function states(ledger: EffectLedger, slot: Slot): Promise<Record<string, string>> {
      const listed: Record<string, string> = {};
      for await (const record of ledger.list(slot)) listed[record.keyHash] = record.state;
      return listed;
    }

    it('reads a reservation its epoch marks done as DONE, and one they leave open or pass by as RESERVED', async () => {
      const { claims, ledger, slot, marks } = await markedRun();
      expect(await claims.read(slot)).toMatchObject({ doneMarks: marks, checkpoint: walking });
      expect(await ledger.read(slot, 'k0')).toMatchObject({ state: 'DONE', epoch: 1, seq: 0 });
      expect(await ledger.read(slot, 'k2')).toMatchObject({ state: 'RESERVED', epoch: 1, seq: 2 });
      expect(await ledger.read(slot, 'k4')).toMatchObject({ state: 'RESERVED', epoch: 1, seq: 4 });
      expect(await states(ledger, slot)).toEqual({
        k0: 'DONE',
        k1: 'DONE',
        k2: 'RESERVED',
        k3: 'DONE',
        k4: 'RESERVED',
      });
    });

    it('hands a later epoch the marks: it skips what they cover and finds the rest in doubt, re-running it only by policy', async () => {
      const { claims, ledger, slot, marks } = await markedRun();
      const b = await claimOrFail(claims, slot, 'b', T0 + LEASE + 1);
      expect(b.window.doneMarks).toEqual(marks);
      expect(await ledger.reserve(b, 'k1', at(0))).toEqual({ kind: 'done' });
      expect(await ledger.reserve(b, 'k3', { ...at(1), rerunInDoubt: true })).toEqual({ kind: 'done' });
      expect(await ledger.reserve(b, 'k2', at(2))).toEqual({ kind: 'in-doubt', epoch: 1 });
      expect(await ledger.reserve(b, 'k4', { ...at(3), rerunInDoubt: true })).toEqual({
        kind: 'reserved',
        rerun: true,
        attempt: 1,
      });
      expect(await ledger.read(slot, 'k4')).toMatchObject({ state: 'RESERVED', epoch: 2, seq: 3 });
    });

    it("keeps every epoch's marks through a yield, the next run's own marks and the window's completion", async () => {
      const { claims, ledger, slot, a, marks } = await markedRun();
      await claims.release(a, { kind: 'yield', checkpoint: walking, runsWithoutProgress: 0 }, T0 + 1_000);
      const b = await claimOrFail(claims, slot, 'b', T0 + 2_000);
      expect(b.window.doneMarks).toEqual(marks);
      await ledger.reserve(b, 'k5', at(0));
      const both = { ...marks, '2': { below: 1, open: [] } };
      expect(await claims.checkpoint(b, walking, runSummary(2, 1), both)).toEqual({ kind: 'ok' });
      expect(await claims.complete(b, summary(2), T0 + 3_000)).toEqual({ kind: 'ok' });
      expect(await claims.read(slot)).toMatchObject({ state: 'DONE', doneMarks: both });
      expect((await states(ledger, slot)).k5).toBe('DONE');
      expect((await states(ledger, slot)).k1).toBe('DONE');
    });

    it("rejects a fenced epoch's marks and keeps the live holder's", async () => {
      const { claims, slot, a, marks } = await markedRun();
      const b = await claimOrFail(claims, slot, 'b', T0 + LEASE + 1);
      expect(
        await claims.checkpoint(a, walking, runSummary(1, 5), { '1': { below: 5, open: [] } }),
      ).toMatchObject({
        kind: 'fenced',
        epoch: 2,
      });
      expect((await claims.read(slot))?.doneMarks).toEqual(marks);
      expect(await claims.checkpoint(b, walking, runSummary(2, 0))).toEqual({ kind: 'ok' });
      expect((await claims.read(slot))?.doneMarks).toEqual(marks);
    });

    it('covers no reservation made without a number: only a done mark of its own settles it', async () => {
      const { claims, ledger } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      await ledger.reserve(a, 'k0', { rerunInDoubt: false, now: T0 });
      await claims.checkpoint(a, walking, runSummary(1, 1), { '1': { below: 10, open: [] } });
      expect(await ledger.read(slot, 'k0')).toMatchObject({ state: 'RESERVED' });
      await ledger.markDone(a, ['k0']);
      expect(await ledger.read(slot, 'k0')).toMatchObject({ state: 'DONE' });
    });

    it('tells a run meeting its own earlier reservation under another number that it is done, and its lost reply that it is its own', async () => {
      const { claims, ledger } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      expect(await ledger.reserve(a, 'k0', at(7))).toEqual({ kind: 'reserved', rerun: false, attempt: 1 });
      expect(await ledger.reserve(a, 'k0', at(7))).toEqual({ kind: 'reserved', rerun: false, attempt: 1 });
      expect(await ledger.reserve(a, 'k0', at(9))).toEqual({ kind: 'done' });
      expect(await ledger.read(slot, 'k0')).toMatchObject({ state: 'RESERVED', seq: 7 });
    });

    it('records no provider word on a reservation the marks cover, and settles none: it is done', async () => {
      const { ledger, slot } = await markedRun();
      const word = { outcome: 'rejected', event: 'Reject', at: T0 + 30, epoch: 1 } as const;
      expect(await ledger.recordProviderWord(slot, 'k1', word)).toBe('done');
      expect((await ledger.read(slot, 'k1'))?.provider).toBeUndefined();
      expect(await ledger.recordProviderWord(slot, 'k2', word)).toBe('recorded');
      const raw = { keyHash: 'k1', state: 'RESERVED', epoch: 1, owner: 'a', attempts: 0, seq: 1 } as const;
      expect(await ledger.settleInDoubt(slot, raw, 'retry', T0 + LEASE + 2)).toBe(false);
      expect(await ledger.read(slot, 'k1')).toMatchObject({ state: 'DONE' });
    });

    it("reads a shard's reservations by that shard's marks only", async () => {
      const { claims, ledger } = await makeBackend();
      const window = freshSlot();
      const s0 = await claimOrFail(claims, { ...window, shard: 0 }, 's0', T0);
      const s1 = await claimOrFail(claims, { ...window, shard: 1 }, 's1', T0);
      await ledger.reserve(s0, 'a0', at(0));
      await ledger.reserve(s1, 'b0', at(0));
      await claims.checkpoint(s0, walking, runSummary(1, 1), { '1': { below: 1, open: [] } });
      expect(await ledger.read(window, 'a0')).toMatchObject({ state: 'DONE', shard: 0 });
      expect(await ledger.read(window, 'b0')).toMatchObject({ state: 'RESERVED', shard: 1 });
      expect(await states(ledger, window)).toEqual({ a0: 'DONE', b0: 'RESERVED' });
      expect(await ledger.reserve(s1, 'a0', at(1))).toEqual({ kind: 'elsewhere', shard: 0 });
    });
  });

  describe(`${name}: one rule for keys`, () => {
    it('stores one instant as one slot however its window is spelled', async () => {
      const { claims, ledger } = await makeBackend();
      const slot = freshSlot();
      const instant = Date.parse(slot.window);
      const a = await claimOrFail(claims, slot, 'a', T0);
      expect(a.slot.window).toBe(slot.window);
      const spellings = [
        new Date(instant).toISOString(), // ….000Z
        `${new Date(instant + 3_600_000).toISOString().slice(0, 19)}+01:00`,
        `${new Date(instant).toISOString().slice(0, 19)}.4Z`,
      ];
      for (const window of spellings) {
        expect(
          await claims.claim({ jobId: slot.jobId, window }, lease('b'), T0 + 1_000),
          window,
        ).toMatchObject({
          kind: 'held',
          holder: 'a',
        });
      }
      await ledger.reserve(a, 'k1', { rerunInDoubt: false, now: T0 });
      expect(await ledger.read({ jobId: slot.jobId, window: spellings[1]! }, 'k1')).toMatchObject({
        owner: 'a',
      });
      expect(await claims.read({ jobId: slot.jobId, window: spellings[0]! })).toMatchObject({
        owner: 'a',
        epoch: 1,
      });
    });

    it('refuses a job id or window that could make two slots one key', async () => {
      const { claims } = await makeBackend();
      const window = '2026-11-30T06:00:00Z';
      for (const slot of [
        { jobId: 'a#2026-11-30T06:00:00Z', window },
        { jobId: 'a', window: '2026-11-30T06:00:00Z#b' },
        { jobId: 'Weekly', window },
        { jobId: 'a', window: 'yesterday' },
      ]) {
        await expect(claims.claim(slot, lease('a'), T0), JSON.stringify(slot)).rejects.toBeInstanceOf(
          InvalidEventError,
        );
      }
    });
  });

  describe(`${name}: windows across runs`, () => {
    it('keeps the deadline the first claim stored, whatever later claims ask for', async () => {
      const { claims } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      expect(a.window).toEqual({ deadline: DEADLINE, runsWithoutProgress: 0 });
      await claims.release(a, { kind: 'yield', runsWithoutProgress: 0 }, T0 + 1_000);
      const b = await claims.claim(slot, lease('b', { deadline: DEADLINE + 3_600_000 }), T0 + 2_000);
      expect(b).toMatchObject({ kind: 'claimed', claim: { epoch: 2, window: { deadline: DEADLINE } } });
      expect(await claims.read(slot)).toMatchObject({ deadline: DEADLINE });
    });

    it('pins the effect-key version the first claim stored, whatever later claims hash with', async () => {
      const { claims } = await makeBackend();
      const slot = freshSlot();
      const a = await claims.claim(slot, lease('a', { keyVersion: 'v1' }), T0);
      expect(a).toMatchObject({ kind: 'claimed', claim: { window: { keyVersion: 'v1' } } });
      if (a.kind !== 'claimed') return;
      await claims.release(a.claim, { kind: 'yield', runsWithoutProgress: 0 }, T0 + 1_000);
      const b = await claims.claim(slot, lease('b', { keyVersion: 'v2' }), T0 + 2_000);
      expect(b).toMatchObject({ kind: 'claimed', claim: { epoch: 2, window: { keyVersion: 'v1' } } });
      expect(await claims.read(slot)).toMatchObject({ keyVersion: 'v1' });
      const unpinned = freshSlot();
      const c = await claims.claim(unpinned, lease('c'), T0);
      expect(c.kind === 'claimed' && c.claim.window.keyVersion).toBe(undefined);
    });

    it("hands the next run the checkpoint and the runs without progress, and rejects a stale holder's checkpoint", async () => {
      const { claims } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      const checkpoint = { positions: { customers: 'c000120' }, walked: false };
      expect(await claims.checkpoint(a, checkpoint, runSummary(1, 120))).toEqual({ kind: 'ok' });
      expect(await claims.read(slot)).toMatchObject({ checkpoint, progress: { done: 120, epoch: 1 } });
      const moved = { positions: { customers: 'c000300' }, walked: false };
      await claims.release(a, { kind: 'yield', checkpoint: moved, runsWithoutProgress: 2 }, T0 + 1_000);
      const b = await claimOrFail(claims, slot, 'b', T0 + 2_000);
      expect(b.window).toEqual({ deadline: DEADLINE, checkpoint: moved, runsWithoutProgress: 2 });
      // The new holder's progress starts from nothing; the old holder can no longer write.
      expect((await claims.read(slot))?.progress).toBeUndefined();
      expect(await claims.checkpoint(a, checkpoint, runSummary(1, 130))).toMatchObject({
        kind: 'fenced',
        epoch: 2,
      });
      expect((await claims.read(slot))?.checkpoint).toEqual(moved);
    });

    it('keeps a window waiting for a retry unclaimable until its time, then hands it on', async () => {
      const { claims } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      const resumeAfter = T0 + 120_000;
      await claims.release(a, { kind: 'yield', runsWithoutProgress: 0, resumeAfter }, T0 + 1_000);
      expect(await claims.read(slot)).toMatchObject({ state: 'RELEASED', resumeAfter });
      expect(await claims.claim(slot, lease('early'), T0 + 60_000)).toEqual({
        kind: 'waiting',
        until: resumeAfter,
      });
      const b = await claims.claim(slot, lease('b'), resumeAfter);
      expect(b).toMatchObject({ kind: 'claimed', claim: { epoch: 2, via: 'retry' } });
      expect((await claims.read(slot))?.resumeAfter).toBeUndefined();
    });

    it('ends a window STUCK for good: later fires stand down and are told why', async () => {
      const { claims } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      expect(
        await claims.release(
          a,
          { kind: 'stuck', reason: 'no progress in 3 runs', runsWithoutProgress: 3 },
          T0 + 1,
        ),
      ).toEqual({ kind: 'ok' });
      expect(await claims.claim(slot, lease('b'), T0 + 10 * LEASE)).toEqual({
        kind: 'stuck',
        epoch: 1,
        reason: 'no progress in 3 runs',
      });
      expect(await claims.read(slot)).toMatchObject({ state: 'STUCK', runsWithoutProgress: 3 });
    });

    it('finishes a window with permanent failures as PARTIAL, not DONE', async () => {
      const { claims } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      const partial = { ...summary(1), failed: 2, failedKeys: ['f1', 'f2'] };
      expect(await claims.complete(a, partial, T0 + 5_000)).toEqual({ kind: 'ok' });
      expect(await claims.claim(slot, lease('b'), T0 + 10 * LEASE)).toEqual({
        kind: 'done',
        state: 'PARTIAL',
        completedAt: T0 + 5_000,
        summary: partial,
      });
      expect(await claims.read(slot)).toMatchObject({ state: 'PARTIAL' });
    });
  });

  describe(`${name}: refused effects`, () => {
    it('retries a refused effect only once its retry time has passed, counting attempts', async () => {
      const { claims, ledger } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      await ledger.reserve(a, 'k1', { rerunInDoubt: false, now: T0 });
      await ledger.recordFailure(a, 'k1', { attempts: 1, retryAt: T0 + 60_000, reason: 'throttled' });
      expect(await ledger.read(slot, 'k1')).toMatchObject({
        state: 'FAILED',
        attempts: 1,
        retryAt: T0 + 60_000,
        reason: 'throttled',
      });
      const b = await claimOrFail(claims, slot, 'b', T0 + LEASE + 1);
      expect(await ledger.reserve(b, 'k1', { rerunInDoubt: false, now: T0 + 30_000 })).toEqual({
        kind: 'retry-later',
        retryAt: T0 + 60_000,
        attempts: 1,
      });
      expect(await ledger.reserve(b, 'k1', { rerunInDoubt: false, now: T0 + 60_000 })).toEqual({
        kind: 'reserved',
        rerun: false,
        attempt: 2,
      });
      expect(await ledger.read(slot, 'k1')).toMatchObject({ state: 'RESERVED', epoch: 2, attempts: 1 });
      // Its own retried request meets its own reservation: still the same attempt.
      expect(await ledger.reserve(b, 'k1', { rerunInDoubt: false, now: T0 + 60_000 })).toEqual({
        kind: 'reserved',
        rerun: false,
        attempt: 2,
      });
      await ledger.recordFailure(b, 'k1', { attempts: 2, reason: 'rejected' });
      const c = await claimOrFail(claims, slot, 'c', T0 + 3 * LEASE);
      expect(await ledger.reserve(c, 'k1', { rerunInDoubt: true, now: T0 + 10 * LEASE })).toEqual({
        kind: 'failed',
        attempts: 2,
      });
    });

    it('lets exactly one of 30 concurrent retries of a due refusal through, across two epochs', async () => {
      const { claims, ledger } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      await ledger.reserve(a, 'k1', { rerunInDoubt: false, now: T0 });
      await ledger.recordFailure(a, 'k1', { attempts: 1, retryAt: T0 + 1_000, reason: 'throttled' });
      const b = await claimOrFail(claims, slot, 'b', T0 + LEASE + 1);
      const outcomes = await Promise.all(
        Array.from({ length: 30 }, (_, i) =>
          ledger.reserve(i % 2 ? a : b, 'k1', { rerunInDoubt: false, now: T0 + LEASE + 2 }),
        ),
      );
      const record = await ledger.read(slot, 'k1');
      expect(record?.state).toBe('RESERVED');
      const winner = record?.owner === 'a' ? 1 : 0;
      expect(outcomes.filter((o, i) => i % 2 === winner && o.kind === 'reserved')).toHaveLength(15);
      expect(outcomes.filter((o, i) => i % 2 !== winner && o.kind === 'reserved')).toHaveLength(0);
    });

    it('fences an earlier epoch that meets a refusal a later epoch recorded', async () => {
      const { claims, ledger } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      const b = await claimOrFail(claims, slot, 'b', T0 + LEASE + 1);
      await ledger.reserve(b, 'k1', { rerunInDoubt: false, now: T0 });
      await ledger.recordFailure(b, 'k1', { attempts: 1, retryAt: T0, reason: 'throttled' });
      expect(await ledger.reserve(a, 'k1', { rerunInDoubt: false, now: T0 + LEASE + 2 })).toEqual({
        kind: 'fenced',
        epoch: 2,
      });
    });

    it('records a refusal only on its own reservation', async () => {
      const { claims, ledger } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      await ledger.reserve(a, 'k1', { rerunInDoubt: false, now: T0 });
      const b = await claimOrFail(claims, slot, 'b', T0 + LEASE + 1);
      await ledger.reserve(b, 'k1', { rerunInDoubt: true, now: T0 + LEASE + 1 });
      await ledger.recordFailure(a, 'k1', { attempts: 1, reason: 'throttled' });
      expect(await ledger.read(slot, 'k1')).toMatchObject({ state: 'RESERVED', epoch: 2, owner: 'b' });
      await ledger.markDone(b, ['k1']);
      await ledger.recordFailure(b, 'k1', { attempts: 1, reason: 'throttled' });
      expect(await ledger.read(slot, 'k1')).toMatchObject({ state: 'DONE', epoch: 2 });
    });

    it("records a refusal only under its reservation's number: a late copy of it never fails the run's later reservation of the key", async () => {
      const { claims, ledger } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      await ledger.reserve(a, 'k1', { rerunInDoubt: false, now: T0, seq: 0 });
      const refusal = { attempts: 1, retryAt: T0 + 1_000, reason: 'throttled', seq: 0 };
      await ledger.recordFailure(a, 'k1', refusal);
      // Due again, the same run reserves the key under a new number, and performs it.
      expect(await ledger.reserve(a, 'k1', { rerunInDoubt: false, now: T0 + 1_000, seq: 7 })).toEqual({
        kind: 'reserved',
        rerun: false,
        attempt: 2,
      });
      // The first refusal's write, applied again late (a timed-out request the store still took).
      await ledger.recordFailure(a, 'k1', refusal);
      expect(await ledger.read(slot, 'k1')).toMatchObject({ state: 'RESERVED', epoch: 1, seq: 7 });
      // Its own refusal, under its own number, still lands; so does one of a reservation with no number.
      await ledger.recordFailure(a, 'k1', { attempts: 2, retryAt: T0 + 5_000, reason: 'throttled', seq: 7 });
      expect(await ledger.read(slot, 'k1')).toMatchObject({ state: 'FAILED', attempts: 2 });
      await ledger.reserve(a, 'k2', { rerunInDoubt: false, now: T0 });
      await ledger.recordFailure(a, 'k2', { attempts: 1, reason: 'invalid-key', seq: 3 });
      expect(await ledger.read(slot, 'k2')).toMatchObject({ state: 'RESERVED' });
      await ledger.recordFailure(a, 'k2', { attempts: 1, reason: 'invalid-key' });
      expect(await ledger.read(slot, 'k2')).toMatchObject({ state: 'FAILED', reason: 'invalid-key' });
    });
  });

  describe(`${name}: the provider's word`, () => {
    /** A window whose run `a` (epoch 1) reserved k1 and died; `b` (epoch 2) took it over. */
    async function leftInDoubt() {
      const { claims, ledger } = await makeBackend();
      const slot = freshSlot();
      const a = await claimOrFail(claims, slot, 'a', T0);
      await ledger.reserve(a, 'k1', { rerunInDoubt: false, now: T0 + 10 });
      const b = await claimOrFail(claims, slot, 'b', T0 + LEASE + 1);
      return { claims, ledger, slot, a, b };
    }
    const accepted = { outcome: 'accepted', event: 'Send', messageId: 'm-1', at: T0 + 20, epoch: 1 } as const;
    const rejected = { outcome: 'rejected', event: 'Reject', at: T0 + 30, epoch: 1 } as const;

    it('stores when a reservation was made and what the provider said of its message', async () => {
      const { ledger, slot } = await leftInDoubt();
      expect(await ledger.read(slot, 'k1')).toMatchObject({ state: 'RESERVED', reservedAt: T0 + 10 });
      expect(await ledger.recordProviderWord(slot, 'k1', accepted)).toBe('recorded');
      // A duplicated event finds its own word: recorded again, nothing changes.
      expect(await ledger.recordProviderWord(slot, 'k1', accepted)).toBe('recorded');
      expect((await ledger.read(slot, 'k1'))?.provider).toEqual(accepted);
    });

    it('never lets a rejection replace an acceptance, but lets an acceptance replace a rejection', async () => {
      const { ledger, slot } = await leftInDoubt();
      expect(await ledger.recordProviderWord(slot, 'k1', rejected)).toBe('recorded');
      expect(await ledger.recordProviderWord(slot, 'k1', accepted)).toBe('recorded');
      expect(await ledger.recordProviderWord(slot, 'k1', { ...rejected, event: 'Bounce' })).toBe('recorded');
      expect((await ledger.read(slot, 'k1'))?.provider).toEqual(accepted);
    });

    it("writes a word only on its own epoch's reservation, never on a done record or a missing one", async () => {
      const { ledger, slot, b } = await leftInDoubt();
      expect(await ledger.recordProviderWord(slot, 'k1', { ...accepted, epoch: 2 })).toBe('unknown');
      expect(await ledger.recordProviderWord(slot, 'nobody', accepted)).toBe('unknown');
      expect(await ledger.read(slot, 'nobody')).toBeUndefined();
      await ledger.reserve(b, 'k2', { rerunInDoubt: false, now: T0 });
      await ledger.markDone(b, ['k2']);
      expect(await ledger.recordProviderWord(slot, 'k2', { ...accepted, epoch: 2 })).toBe('done');
      expect((await ledger.read(slot, 'k2'))?.provider).toBeUndefined();
      expect((await ledger.read(slot, 'k1'))?.provider).toBeUndefined();
    });

    it('settles an accepted in-doubt effect done: no later run sends it', async () => {
      const { ledger, slot, b } = await leftInDoubt();
      await ledger.recordProviderWord(slot, 'k1', accepted);
      const stale = await ledger.read(slot, 'k1');
      if (!stale) throw new Error('k1 not reserved');
      expect(await ledger.settleInDoubt(slot, stale, 'done', T0 + LEASE + 2)).toBe(true);
      expect(await ledger.read(slot, 'k1')).toMatchObject({ state: 'DONE', provider: accepted });
      expect(await ledger.reserve(b, 'k1', { rerunInDoubt: true, now: T0 + LEASE + 3 })).toEqual({
        kind: 'done',
      });
    });

    it('settles a never-accepted in-doubt effect as a refusal due now, so the next reservation sends it', async () => {
      const { ledger, slot, b } = await leftInDoubt();
      const stale = await ledger.read(slot, 'k1');
      if (!stale) throw new Error('k1 not reserved');
      const now = T0 + LEASE + 2;
      expect(await ledger.settleInDoubt(slot, stale, 'retry', now)).toBe(true);
      expect(await ledger.read(slot, 'k1')).toMatchObject({
        state: 'FAILED',
        attempts: 1,
        retryAt: now,
        reason: 'not-accepted',
      });
      expect(await ledger.reserve(b, 'k1', { rerunInDoubt: false, now })).toEqual({
        kind: 'reserved',
        rerun: false,
        attempt: 2,
      });
      expect(await ledger.read(slot, 'k1')).toMatchObject({ state: 'RESERVED', epoch: 2, owner: 'b' });
    });

    it('answers a duplicated rejection recorded, so the recorder does not report a known effect as unknown', async () => {
      const { ledger, slot } = await leftInDoubt();
      expect(await ledger.recordProviderWord(slot, 'k1', rejected)).toBe('recorded');
      expect(await ledger.recordProviderWord(slot, 'k1', { ...rejected, at: T0 + 40 })).toBe('recorded');
      expect((await ledger.read(slot, 'k1'))?.provider).toEqual(rejected);
    });

    it("drops a rejected send's word when the effect is reserved again, so the new send is not read as rejected", async () => {
      const { ledger, slot, b } = await leftInDoubt();
      await ledger.recordProviderWord(slot, 'k1', rejected);
      const stale = await ledger.read(slot, 'k1');
      if (!stale) throw new Error('k1 not reserved');
      const now = T0 + LEASE + 2;
      expect(await ledger.settleInDoubt(slot, stale, 'retry', now)).toBe(true);
      expect(await ledger.read(slot, 'k1')).toMatchObject({ state: 'FAILED', provider: rejected });
      await ledger.reserve(b, 'k1', { rerunInDoubt: false, now: now + 5 });
      const again = await ledger.read(slot, 'k1');
      expect(again).toMatchObject({ state: 'RESERVED', epoch: 2, reservedAt: now + 5 });
      expect(again?.provider).toBeUndefined();
    });

    it('settles only the exact reservation it read: one of several resolvers wins', async () => {
      const { ledger, slot } = await leftInDoubt();
      const stale = await ledger.read(slot, 'k1');
      if (!stale) throw new Error('k1 not reserved');
      const settled = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          ledger.settleInDoubt(slot, stale, i % 2 ? 'done' : 'retry', T0 + LEASE + 2),
        ),
      );
      expect(settled.filter(Boolean)).toHaveLength(1);
      expect(['DONE', 'FAILED']).toContain((await ledger.read(slot, 'k1'))?.state);
    });

    it('leaves alone a record re-run since it was read: the stale reservation is gone', async () => {
      const { ledger, slot, b } = await leftInDoubt();
      const stale = await ledger.read(slot, 'k1');
      if (!stale) throw new Error('k1 not reserved');
      await ledger.reserve(b, 'k1', { rerunInDoubt: true, now: T0 + LEASE + 1 });
      expect(await ledger.settleInDoubt(slot, stale, 'done', T0 + LEASE + 2)).toBe(false);
      expect(await ledger.settleInDoubt(slot, stale, 'retry', T0 + LEASE + 2)).toBe(false);
      expect(await ledger.read(slot, 'k1')).toMatchObject({ state: 'RESERVED', epoch: 2, owner: 'b' });
    });
  });

  describe(`${name}: sharded windows`, () => {
    it("stores a window's shard count at its first claim; a changed setting never re-splits it", async () => {
      const { claims } = await makeBackend();
      const slot = freshSlot();
      const a = await claims.claim(slot, lease('a', { shards: 4 }), T0);
      expect(a).toMatchObject({ kind: 'claimed', claim: { window: { shards: 4 } } });
      if (a.kind !== 'claimed') return;
      await claims.release(a.claim, { kind: 'yield', runsWithoutProgress: 0 }, T0 + 1);
      expect(await claims.claim(slot, lease('b', { shards: 8 }), T0 + 2)).toMatchObject({
        kind: 'claimed',
        claim: { window: { shards: 4 } },
      });
      const unsplit = freshSlot();
      const c = await claims.claim(unsplit, lease('c'), T0);
      if (c.kind === 'claimed')
        await claims.release(c.claim, { kind: 'yield', runsWithoutProgress: 0 }, T0 + 1);
      const d = await claims.claim(unsplit, lease('d', { shards: 8 }), T0 + 2);
      expect(d.kind === 'claimed' && d.claim.window.shards).toBe(undefined);
    });

    it('keeps each shard a fenced slot of its own, apart from its window and from the other shards', async () => {
      const { claims } = await makeBackend();
      const window = freshSlot();
      const s0 = await claimOrFail(claims, { ...window, shard: 0 }, 's0', T0);
      const s1 = await claimOrFail(claims, { ...window, shard: 1 }, 's1', T0);
      expect([s0.epoch, s1.epoch, s0.slot.shard, s1.slot.shard]).toEqual([1, 1, 0, 1]);
      expect(await claims.claim({ ...window, shard: 0 }, lease('late'), T0 + 1)).toMatchObject({
        kind: 'held',
        holder: 's0',
      });
      expect(await claims.read(window)).toBeUndefined();
      const taken = await claimOrFail(claims, { ...window, shard: 1 }, 's1b', T0 + LEASE + 2_001);
      expect(taken.epoch).toBe(2);
      expect(await claims.read({ ...window, shard: 0 })).toMatchObject({ owner: 's0', epoch: 1 });
    });

    it('hands a window to its shards, records each end once, and lets exactly one shard finish it', async () => {
      const { claims } = await makeBackend();
      const window = freshSlot();
      const coordinator = await claims.claim(window, lease('coord', { shards: 3 }), T0);
      if (coordinator.kind !== 'claimed') throw new Error(coordinator.kind);
      expect(await claims.release(coordinator.claim, { kind: 'sharded', shards: 3 }, T0 + 1)).toEqual({
        kind: 'ok',
      });
      expect(await claims.claim(window, lease('late', { shards: 3 }), T0 + 2)).toEqual({
        kind: 'sharded',
        shards: 3,
        finished: [],
      });
      expect(await claims.shardFinished(window, 2)).toEqual({ shards: 3, finished: [2] });
      expect(await claims.shardFinished(window, 2)).toEqual({ shards: 3, finished: [2] });
      await claims.shardFinished(window, 0);
      expect(await claims.shardFinished(window, 1)).toEqual({ shards: 3, finished: [0, 1, 2] });
      const done = { ...summary(5), done: 7 };
      const racers = await Promise.all(
        Array.from({ length: 10 }, () =>
          claims.finishSharded(window, { kind: 'complete', summary: done }, T0 + 9),
        ),
      );
      expect(racers.filter((r) => r === 'ok')).toHaveLength(1);
      expect(await claims.read(window)).toMatchObject({ state: 'DONE', summary: done, shards: 3 });
      expect(await claims.shardFinished(window, 1)).toBeUndefined();
      expect(await claims.finishSharded(window, { kind: 'stuck', reason: 'late' }, T0 + 10)).toBe('finished');
    });

    it("compares epochs only within a shard: another shard's reservation is elsewhere, not fenced", async () => {
      const { claims, ledger } = await makeBackend();
      const window = freshSlot();
      const s0 = await claimOrFail(claims, { ...window, shard: 0 }, 's0', T0);
      await claimOrFail(claims, { ...window, shard: 1 }, 's1', T0);
      const s1 = await claimOrFail(claims, { ...window, shard: 1 }, 's1b', T0 + LEASE + 2_001);
      expect(s1.epoch).toBe(2);
      await ledger.reserve(s1, 'k1', { rerunInDoubt: false, now: T0 });
      expect(await ledger.reserve(s0, 'k1', { rerunInDoubt: true, now: T0 })).toEqual({
        kind: 'elsewhere',
        shard: 1,
      });
      await ledger.reserve(s0, 'k2', { rerunInDoubt: false, now: T0 });
      expect(await ledger.reserve(s1, 'k2', { rerunInDoubt: false, now: T0 })).toEqual({
        kind: 'elsewhere',
        shard: 0,
      });
      await ledger.markDone(s0, ['k2']);
      expect(await ledger.reserve(s1, 'k2', { rerunInDoubt: false, now: T0 })).toEqual({ kind: 'done' });
      expect(await ledger.read(window, 'k1')).toMatchObject({ state: 'RESERVED', epoch: 2, shard: 1 });
    });
  });
}
