import { describe, expect, it } from 'vitest';
import { PostgresOperatorStore } from '../../shared/backends/postgres/index.js';
import { ConfigurationError } from '../../shared/errors.js';
import type { Claim, ClaimStore, LeaseRequest, WindowSummary } from '../../shared/slot/ports.js';
import type { Slot } from '../../shared/slot/slot.js';
import { leaseRequest, slotSequence, usePostgres } from '../helpers/postgres.js';
import { runSummary } from './backend-contract.js';
import { describeInDoubtResolverContract } from './in-doubt-resolver-contract.js';
import { describeOperatorContract } from './operator-contract.js';
import { describeWatchdogInDoubt } from './watchdog-in-doubt-contract.js';

const postgres = usePostgres();

/** The runtime stores and the operator store of a fresh schema, all on the caller's clock. */
async function openSchema() {
  const schema = await postgres.freshSchema();
  const pool = postgres.pool({ applicationName: `slotguard-test-${schema}` });
  const { claims, ledger } = postgres.backend(schema, { pool, leaseClock: 'caller' });
  return { claims, ledger, operator: new PostgresOperatorStore({ pool, schema, leaseClock: 'caller' }) };
}

// The contract claims at 2026 instants and moves time by passing later `now` values (a lease that
// ended, a live one a second in), which the database clock cannot follow: the runtime stores and
// the operator store all run on the caller's clock, as in postgres.contract.test.ts. The database
// clock's operator refusals are covered in test/integration/postgres-backend.test.ts.
describeOperatorContract('Postgres operator store, caller clock', openSchema);
describeInDoubtResolverContract('Postgres stores, caller clock', openSchema);
// Here rather than with the watchdog's audit, which starts a server of its own: the watchdog's
// confirmations are operator writes on this file's stores.
describeWatchdogInDoubt('Postgres, caller clock', openSchema);

const splitLease = (owner: string, slot: Slot, overrides: Partial<LeaseRequest> = {}) =>
  leaseRequest(owner, slot, { delivery: { invocationId: owner }, ...overrides });

/** Claims `slot` (a window split in two, or one of its shards) for `owner`, or throws. */
async function claimed(claims: ClaimStore, slot: Slot, owner: string, now: number): Promise<Claim> {
  const outcome = await claims.claim(slot, splitLease(owner, slot, { shards: 2 }), now);
  if (outcome.kind !== 'claimed') throw new Error(`expected ${owner} to claim, got ${outcome.kind}`);
  return outcome.claim;
}

/*
 * What the Postgres operator store does with a window split into shards (PostgresOperatorStore's
 * class comment): it acts on the whole window, gives its shards back with it, and refuses while
 * they are running it. The DynamoDB and memory operator stores do not know shards yet, so these
 * are not part of the shared contract.
 */
describe('Postgres operator store: sharded windows', () => {
  const LEASE = 60_000;
  const freshWindow = slotSequence('sharded-operator');
  const lease = splitLease;
  const summary = (done: number, inDoubt = 0, failed = 0): WindowSummary => ({
    done,
    inDoubt,
    failed,
    inDoubtKeys: [],
    failedKeys: [],
    runs: 1,
  });

  /** A window of two shards its coordinator has handed out (SHARDED at epoch 1), and when. */
  async function handedOut(claims: ClaimStore) {
    const window = freshWindow();
    const t0 = Date.parse(window.window) + 5_000;
    const coordinator = await claimed(claims, window, 'coordinator', t0);
    expect(await claims.release(coordinator, { kind: 'sharded', shards: 2 }, t0 + 1)).toEqual({ kind: 'ok' });
    return { window, t0, shard: (index: number) => ({ ...window, shard: index }) };
  }

  /** A shard's end as the runtime records it: on its window, and the last one finishes the window. */
  async function ended(claims: ClaimStore, window: Slot, shard: number, now: number, stuckReason?: string) {
    const sharded = await claims.shardFinished(window, shard);
    if (!sharded || sharded.finished.length < sharded.shards) return;
    const finish = stuckReason
      ? ({ kind: 'stuck', reason: stuckReason } as const)
      : ({ kind: 'complete', summary: summary(2) } as const);
    expect(await claims.finishSharded(window, finish, now)).toBe('ok');
  }

  it('refuses a write that names a shard, and says to act on the whole window', async () => {
    const { operator } = await openSchema();
    const shard = { ...freshWindow(), shard: 1 };
    const request = { expectedEpoch: 1, now: Date.parse(shard.window), deadline: Date.parse(shard.window) };
    const refusals = [
      operator.forceRelease(shard, { ...request, evenIfLeaseLive: false }),
      operator.reopen(shard, request),
      operator.redrive(shard, request),
      operator.resolveEffect(shard, 'k1', 'clear', request),
    ];
    for (const refusal of refusals) {
      await expect(refusal).rejects.toThrow(ConfigurationError);
      await expect(refusal).rejects.toThrow(/was given shard 1 of window .*: leave the shard out/);
    }
  });

  it('refuses to re-drive, reopen, release or clear an effect while the shards run the window, and leaves it to them', async () => {
    const { claims, ledger, operator } = await openSchema();
    const { window, t0, shard } = await handedOut(claims);
    const s0 = await claimed(claims, shard(0), 's0', t0 + 2);
    await ledger.reserve(s0, 'k1', { rerunInDoubt: false, now: t0 + 3 });
    await ledger.recordFailure(s0, 'k1', { attempts: 1, reason: 'rejected' });
    const now = t0 + 4;
    const request = { expectedEpoch: 1, now, deadline: now + 3_600_000 };
    const sharded = { kind: 'refused', reason: 'state', current: { state: 'SHARDED', shards: 2 } };
    expect(await operator.redrive(window, request)).toMatchObject({ ...sharded, cleared: [] });
    expect(await operator.reopen(window, request)).toMatchObject(sharded);
    expect(await operator.forceRelease(window, { ...request, evenIfLeaseLive: true })).toMatchObject(sharded);
    expect(await operator.resolveEffect(window, 'k1', 'clear', request)).toMatchObject(sharded);
    // Nothing moved: the refused effect is still there, and the shards finish the window as before.
    expect(await ledger.read(window, 'k1')).toMatchObject({ state: 'FAILED', shard: 0 });
    expect(await claims.complete(s0, summary(1, 0, 1), now + 1)).toEqual({ kind: 'ok' });
    await ended(claims, window, 0, now + 1);
    const s1 = await claimed(claims, shard(1), 's1', now + 2);
    expect(await claims.complete(s1, summary(1), now + 3)).toEqual({ kind: 'ok' });
    await ended(claims, window, 1, now + 3);
    expect(await claims.read(window)).toMatchObject({ state: 'DONE', epoch: 1, finishedShards: [0, 1] });
  });

  it('refuses to mark an effect done while the shard that reserved it still holds its lease', async () => {
    const { claims, ledger, operator } = await openSchema();
    const { window, t0, shard } = await handedOut(claims);
    const s1 = await claimed(claims, shard(1), 's1', t0 + 2);
    await ledger.reserve(s1, 'k1', { rerunInDoubt: false, now: t0 + 3 });
    const request = { expectedEpoch: 1, now: t0 + 4 };
    expect(await operator.resolveEffect(window, 'k1', 'done', request)).toMatchObject({
      kind: 'refused',
      reason: 'lease-live',
      current: { slot: { shard: 1 }, owner: 's1', epoch: 1, state: 'RUNNING' },
    });
    expect(await ledger.read(window, 'k1')).toMatchObject({ state: 'RESERVED', owner: 's1' });
    // Once the shard's holder is gone (its lease ended), the operator may say the email went.
    const later = { expectedEpoch: 1, now: t0 + 2 + LEASE + 1 };
    expect(await operator.resolveEffect(window, 'k1', 'done', later)).toMatchObject({
      kind: 'resolved',
      before: { keyHash: 'k1', shard: 1, epoch: 1 },
      slotReopened: false,
    });
    expect(await ledger.read(window, 'k1')).toMatchObject({ state: 'DONE' });
  });

  it('reopens a finished sharded window with every shard, so its next coordinator hands them out again and each walks its part anew', async () => {
    const { claims, operator } = await openSchema();
    const { window, t0, shard } = await handedOut(claims);
    for (const index of [0, 1]) {
      const run = await claimed(claims, shard(index), `s${index}`, t0 + 2);
      await claims.checkpoint(run, { positions: { customers: '400' }, walked: true }, runSummary(1, 2));
      expect(await claims.complete(run, summary(2), t0 + 3)).toEqual({ kind: 'ok' });
      await ended(claims, window, index, t0 + 3);
    }
    expect(await claims.read(window)).toMatchObject({ state: 'DONE', finishedShards: [0, 1] });

    const now = t0 + 10;
    const deadline = now + 6 * 3_600_000;
    const reopened = await operator.reopen(window, { expectedEpoch: 1, now, deadline });
    expect(reopened).toMatchObject({ kind: 'ok', record: { state: 'RELEASED', shards: 2, deadline } });
    expect(reopened.kind === 'ok' && reopened.record.finishedShards).toBeUndefined();
    for (const index of [0, 1]) {
      const record = await claims.read(shard(index));
      expect(record).toMatchObject({ state: 'RELEASED', epoch: 1, deadline });
      expect(record?.checkpoint).toBeUndefined();
    }
    // The window's next delivery splits it again, and each shard walks again at its next epoch.
    const coordinator = await claimed(claims, window, 'coordinator-2', now + 1);
    expect(coordinator).toMatchObject({ epoch: 2, via: 'retry', window: { shards: 2, deadline } });
    await claims.release(coordinator, { kind: 'sharded', shards: 2 }, now + 2);
    expect(await claims.claim(window, lease('late', window), now + 3)).toEqual({
      kind: 'sharded',
      shards: 2,
      finished: [],
    });
    const again = await claimed(claims, shard(0), 's0-again', now + 4);
    expect(again).toMatchObject({ epoch: 2, via: 'retry', window: { deadline } });
    expect(again.window.checkpoint).toBeUndefined();
  });

  it('re-drives a STUCK sharded window: clears every shard’s refused effects and gives every shard back', async () => {
    const { claims, ledger, operator } = await openSchema();
    const { window, t0, shard } = await handedOut(claims);
    const s0 = await claimed(claims, shard(0), 's0', t0 + 2);
    await ledger.reserve(s0, 'k0', { rerunInDoubt: false, now: t0 + 3 });
    await ledger.recordFailure(s0, 'k0', { attempts: 1, reason: 'rejected' });
    expect(await claims.complete(s0, summary(1, 0, 1), t0 + 4)).toEqual({ kind: 'ok' });
    await ended(claims, window, 0, t0 + 4);
    const s1 = await claimed(claims, shard(1), 's1', t0 + 2);
    const stuck = { kind: 'stuck', reason: 'past its deadline', runsWithoutProgress: 1 } as const;
    expect(await claims.release(s1, stuck, t0 + 5)).toEqual({ kind: 'ok' });
    await ended(claims, window, 1, t0 + 5, 'shard 1 of 2 ended STUCK: past its deadline');
    expect(await claims.read(window)).toMatchObject({ state: 'STUCK' });

    const now = t0 + 10;
    const deadline = now + 6 * 3_600_000;
    const outcome = await operator.redrive(window, { expectedEpoch: 1, now, deadline });
    expect(outcome).toMatchObject({
      kind: 'redriven',
      record: { state: 'RELEASED', epoch: 1, shards: 2, deadline },
      cleared: [{ keyHash: 'k0', state: 'FAILED', shard: 0, owner: 's0' }],
    });
    expect(await ledger.read(window, 'k0')).toBeUndefined();
    expect(await claims.read(shard(0))).toMatchObject({ state: 'RELEASED', epoch: 1, deadline });
    expect(await claims.read(shard(1))).toMatchObject({ state: 'RELEASED', epoch: 1, deadline });
  });

  it('refuses to re-drive while the window or one of its shards is RUNNING, its lease live or ended, before clearing anything', async () => {
    const { claims, ledger, operator } = await openSchema();
    const window = freshWindow();
    const t0 = Date.parse(window.window) + 5_000;
    // The coordinator sent the shard messages and froze before handing the window out.
    await claimed(claims, window, 'coordinator', t0);
    const s0 = await claimed(claims, { ...window, shard: 0 }, 's0', t0 + 1);
    await ledger.reserve(s0, 'k0', { rerunInDoubt: false, now: t0 + 2 });
    await ledger.recordFailure(s0, 'k0', { attempts: 1, reason: 'rejected' });
    expect(await claims.renew(s0, LEASE, t0 + LEASE - 1)).toMatchObject({ kind: 'renewed' });
    const redrive = (now: number) =>
      operator.redrive(window, { expectedEpoch: 1, now, deadline: now + 3_600_000 });

    // The coordinator's lease has ended, but it still holds the window RUNNING: release it first.
    const now = t0 + LEASE + 1;
    expect(await redrive(now)).toMatchObject({
      kind: 'refused',
      reason: 'running',
      current: { slot: window, owner: 'coordinator', state: 'RUNNING' },
      cleared: [],
    });
    expect(
      await operator.forceRelease(window, { expectedEpoch: 1, now, evenIfLeaseLive: false }),
    ).toMatchObject({ kind: 'ok', record: { state: 'RELEASED' } });
    // Shard 0's lease, renewed, is live; once it ends, its run still holds the shard RUNNING.
    expect(await redrive(now + 1)).toMatchObject({
      kind: 'refused',
      reason: 'lease-live',
      current: { slot: { shard: 0 }, owner: 's0', state: 'RUNNING' },
      cleared: [],
    });
    expect(await redrive(t0 + 2 * LEASE)).toMatchObject({
      kind: 'refused',
      reason: 'running',
      current: { slot: { shard: 0 }, owner: 's0', state: 'RUNNING' },
      cleared: [],
    });
    expect(await ledger.read(window, 'k0')).toMatchObject({ state: 'FAILED' });
    expect(await claims.read({ ...window, shard: 0 })).toMatchObject({ state: 'RUNNING', owner: 's0' });
  });

  it('refuses to clear an effect while the shard that reserved it is RUNNING, its lease ended, and marks it done', async () => {
    const { claims, ledger, operator } = await openSchema();
    const { window, t0, shard } = await handedOut(claims);
    const s0 = await claimed(claims, shard(0), 's0', t0 + 2);
    await ledger.reserve(s0, 'k0', { rerunInDoubt: false, now: t0 + 3 });
    // Shard 0's holder froze after sending k0; shard 1 ended.
    const s1 = await claimed(claims, shard(1), 's1', t0 + 2);
    expect(await claims.complete(s1, summary(1), t0 + 4)).toEqual({ kind: 'ok' });
    await ended(claims, window, 1, t0 + 4);

    const request = { expectedEpoch: 1, now: t0 + 2 + LEASE + 1, deadline: t0 + 3_600_000 };
    // A SHARDED window refuses any clear (its shards run it).
    expect(await operator.resolveEffect(window, 'k0', 'clear', request)).toMatchObject({
      kind: 'refused',
      reason: 'state',
    });
    // The shard's own rule holds on a finished window too, though no run finishes one whose shard is
    // still RUNNING: shard 0's end recorded here by hand.
    await ended(claims, window, 0, t0 + 5, 'shard 0 of 2 ended STUCK: its holder froze');
    expect(await claims.read(window)).toMatchObject({ state: 'STUCK' });
    expect(await operator.resolveEffect(window, 'k0', 'clear', request)).toMatchObject({
      kind: 'refused',
      reason: 'running',
      current: { slot: { shard: 0 }, owner: 's0', epoch: 1, state: 'RUNNING' },
    });
    expect(await ledger.read(window, 'k0')).toMatchObject({ state: 'RESERVED', owner: 's0' });
    // Marking it done never sends anything again: a holder past its lease does not refuse it.
    expect(await operator.resolveEffect(window, 'k0', 'done', request)).toMatchObject({ kind: 'resolved' });
    expect(await ledger.read(window, 'k0')).toMatchObject({ state: 'DONE' });
  });

  it('releases a STUCK sharded window with its STUCK shard, which resumes from its checkpoint, and leaves its DONE shard done', async () => {
    const { claims, operator } = await openSchema();
    const { window, t0, shard } = await handedOut(claims);
    const s0 = await claimed(claims, shard(0), 's0', t0 + 2);
    expect(await claims.complete(s0, summary(3), t0 + 3)).toEqual({ kind: 'ok' });
    await ended(claims, window, 0, t0 + 3);
    const s1 = await claimed(claims, shard(1), 's1', t0 + 2);
    const checkpoint = { positions: { customers: '1200' }, walked: false };
    const stuck = { kind: 'stuck', reason: 'no progress', checkpoint, runsWithoutProgress: 3 } as const;
    expect(await claims.release(s1, stuck, t0 + 4)).toEqual({ kind: 'ok' });
    await ended(claims, window, 1, t0 + 4, 'shard 1 of 2 ended STUCK: no progress');

    const now = t0 + 10;
    const deadline = now + 6 * 3_600_000;
    const request = { expectedEpoch: 1, now, deadline, evenIfLeaseLive: false };
    expect(await operator.forceRelease(window, request)).toMatchObject({
      kind: 'ok',
      record: { state: 'RELEASED', shards: 2, deadline },
    });
    expect(await claims.read(shard(0))).toMatchObject({ state: 'DONE', summary: summary(3) });
    expect(await claims.read(shard(1))).toMatchObject({
      state: 'RELEASED',
      checkpoint,
      runsWithoutProgress: 0,
      deadline,
    });
    // Handed out again, the window starts a fresh set: each shard reports its end anew.
    const coordinator = await claimed(claims, window, 'coordinator-2', now + 1);
    await claims.release(coordinator, { kind: 'sharded', shards: 2 }, now + 2);
    expect(await claims.shardFinished(window, 0)).toEqual({ shards: 2, finished: [0] });
    const resumed = await claimed(claims, shard(1), 's1-again', now + 3);
    expect(resumed).toMatchObject({ epoch: 2, via: 'retry', window: { checkpoint, deadline } });
  });

  it('clears an in-doubt effect of a finished sharded window and reopens the window with its shards', async () => {
    const { claims, ledger, operator } = await openSchema();
    const { window, t0, shard } = await handedOut(claims);
    // Shard 0's first run reserved k0 and died; its second found it in doubt and finished.
    const first = await claimed(claims, shard(0), 's0', t0 + 2);
    await ledger.reserve(first, 'k0', { rerunInDoubt: false, now: t0 + 3 });
    const second = await claimed(claims, shard(0), 's0b', t0 + 2 + LEASE + 1);
    expect(await claims.complete(second, summary(0, 1), t0 + LEASE + 4)).toEqual({ kind: 'ok' });
    await ended(claims, window, 0, t0 + LEASE + 4);
    const s1 = await claimed(claims, shard(1), 's1', t0 + LEASE + 5);
    expect(await claims.complete(s1, summary(1), t0 + LEASE + 6)).toEqual({ kind: 'ok' });
    await ended(claims, window, 1, t0 + LEASE + 6);

    const now = t0 + LEASE + 10;
    const request = { expectedEpoch: 1, now, deadline: now + 3_600_000 };
    expect(await operator.resolveEffect(window, 'k0', 'clear', request)).toMatchObject({
      kind: 'resolved',
      before: { keyHash: 'k0', shard: 0, epoch: 1, owner: 's0' },
      slotReopened: true,
    });
    expect(await ledger.read(window, 'k0')).toBeUndefined();
    expect(await claims.read(window)).toMatchObject({ state: 'RELEASED', shards: 2 });
    expect(await claims.read(shard(0))).toMatchObject({ state: 'RELEASED', epoch: 2 });
    expect(await claims.read(shard(1))).toMatchObject({ state: 'RELEASED', epoch: 1 });
  });
});

/*
 * A reservation its run's done marks cover was performed: the operator store reads it as DONE
 * under the slot rows it locks (the window's, and its shards'), and no operator write clears the marks.
 */
describe('Postgres operator store: done marks', () => {
  const freshWindow = slotSequence('marked-operator');
  const walking = { positions: { customers: 'c000002' }, walked: false };
  const summary: WindowSummary = {
    done: 1,
    inDoubt: 1,
    failed: 0,
    inDoubtKeys: ['k1'],
    failedKeys: [],
    runs: 1,
  };

  it('does not clear a reservation the done marks cover, so reopening the window never sends it again', async () => {
    const { claims, ledger, operator } = await openSchema();
    const window = freshWindow();
    const t0 = Date.parse(window.window) + 5_000;
    const run = await claims.claim(window, leaseRequest('a', window), t0);
    if (run.kind !== 'claimed') throw new Error(run.kind);
    for (const seq of [0, 1])
      await ledger.reserve(run.claim, `k${seq}`, { rerunInDoubt: false, now: t0, seq });
    const marks = { '1': { below: 2, open: [1] } };
    expect(await claims.checkpoint(run.claim, walking, runSummary(1, 1), marks)).toEqual({ kind: 'ok' });
    expect(await claims.complete(run.claim, summary, t0 + 1)).toEqual({ kind: 'ok' });

    const request = { expectedEpoch: 1, now: t0 + 2, deadline: t0 + 3_600_000 };
    expect(await operator.resolveEffect(window, 'k0', 'clear', request)).toMatchObject({
      kind: 'effect-not-in-doubt',
      current: { keyHash: 'k0', state: 'DONE', seq: 0 },
    });
    expect(await ledger.read(window, 'k0')).toMatchObject({ state: 'DONE' });
    expect(await claims.read(window)).toMatchObject({ state: 'DONE' });
    // The one left open is in doubt, and the operator may clear it: the window reopens, marks kept.
    expect(await operator.resolveEffect(window, 'k1', 'clear', request)).toMatchObject({
      kind: 'resolved',
      slotReopened: true,
    });
    expect(await claims.read(window)).toMatchObject({ state: 'RELEASED', doneMarks: marks });
    expect(await operator.redrive(window, request)).toMatchObject({ kind: 'redriven', cleared: [] });
    expect(await operator.redrive(window, { ...request, keyHashes: ['k0'] })).toMatchObject({
      kind: 'effects-not-failed',
      effects: [{ keyHash: 'k0', current: { state: 'DONE' } }],
    });
    const next = await claims.claim(window, leaseRequest('b', window), t0 + 3);
    expect(next).toMatchObject({ kind: 'claimed', claim: { epoch: 2, window: { doneMarks: marks } } });
    if (next.kind !== 'claimed') throw new Error(next.kind);
    expect(await ledger.reserve(next.claim, 'k0', { rerunInDoubt: true, now: t0 + 3, seq: 0 })).toEqual({
      kind: 'done',
    });
  });

  it("reads a shard's reservation by that shard's marks when resolving it", async () => {
    const { claims, ledger, operator } = await openSchema();
    const window = freshWindow();
    const t0 = Date.parse(window.window) + 5_000;
    const coordinator = await claimed(claims, window, 'coordinator', t0);
    expect(await claims.release(coordinator, { kind: 'sharded', shards: 2 }, t0 + 1)).toEqual({ kind: 'ok' });
    const s0 = await claimed(claims, { ...window, shard: 0 }, 's0', t0 + 2);
    const s1 = await claimed(claims, { ...window, shard: 1 }, 's1', t0 + 2);
    await ledger.reserve(s0, 'a0', { rerunInDoubt: false, now: t0 + 3, seq: 0 });
    await ledger.reserve(s1, 'b0', { rerunInDoubt: false, now: t0 + 3, seq: 0 });
    await claims.checkpoint(s0, walking, runSummary(1, 1), { '1': { below: 1, open: [] } });

    // Both shards' holders are gone (their leases ended): what each reserved is the operator's to resolve.
    const request = { expectedEpoch: 1, now: t0 + 2 + 60_001 };
    expect(await operator.resolveEffect(window, 'a0', 'done', request)).toMatchObject({
      kind: 'effect-not-in-doubt',
      current: { keyHash: 'a0', state: 'DONE', shard: 0 },
    });
    expect(await operator.resolveEffect(window, 'b0', 'done', request)).toMatchObject({
      kind: 'resolved',
      before: { keyHash: 'b0', shard: 1 },
    });
    expect(await ledger.read(window, 'b0')).toMatchObject({ state: 'DONE', shard: 1 });
  });
});
