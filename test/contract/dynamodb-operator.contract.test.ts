import { describe, expect, it } from 'vitest';
import { DynamoOperatorStore } from '../../shared/backends/dynamodb/dynamodb-operator-store.js';
import type { Claim, ClaimStore } from '../../shared/slot/ports.js';
import type { Slot } from '../../shared/slot/slot.js';
import { useDynamo } from '../helpers/dynalite.js';
import { testBackend } from '../helpers/harness.js';
import { lease } from './backend-contract.js';
import { describeInDoubtResolverContract } from './in-doubt-resolver-contract.js';
import { describeOperatorContract } from './operator-contract.js';

const dynamo = useDynamo();

async function freshBackend() {
  const client = dynamo.client();
  const tableName = await dynamo.freshTable();
  return { ...testBackend(client, tableName), operator: new DynamoOperatorStore({ client, tableName }) };
}

describeOperatorContract('DynamoDB operator store', freshBackend);
describeInDoubtResolverContract('DynamoDB stores', freshBackend);

// Shards: the DynamoDB operator store only, until the other backends split windows too.
describe('DynamoDB operator store: a window split into shards', () => {
  const T0 = Date.parse('2026-11-30T06:00:05Z');
  const WINDOW: Slot = { jobId: 'operator-shards', window: '2026-11-30T06:00:00Z' };
  const FRESH_DEADLINE = T0 + 30 * 3_600_000;

  async function claimed(claims: ClaimStore, slot: Slot, owner: string, shards?: number): Promise<Claim> {
    const outcome = await claims.claim(slot, lease(owner, shards ? { shards } : {}), T0);
    if (outcome.kind !== 'claimed') throw new Error(`expected ${owner} to claim, got ${outcome.kind}`);
    return outcome.claim;
  }

  /** A window split into 2 shards: shard 0 DONE, shard 1 STUCK, both recorded as ended. */
  async function splitWithStuckShard(claims: ClaimStore) {
    const coordinator = await claimed(claims, WINDOW, 'coordinator', 2);
    expect(await claims.release(coordinator, { kind: 'sharded', shards: 2 }, T0 + 1)).toEqual({ kind: 'ok' });
    const first = await claimed(claims, { ...WINDOW, shard: 0 }, 'shard-0');
    const summary = { done: 3, inDoubt: 0, failed: 0, inDoubtKeys: [], failedKeys: [], runs: 1 };
    expect(await claims.complete(first, summary, T0 + 2)).toEqual({ kind: 'ok' });
    await claims.shardFinished(WINDOW, 0);
    const second = await claimed(claims, { ...WINDOW, shard: 1 }, 'shard-1');
    const stuck = {
      kind: 'stuck',
      reason: 'no progress in 3 consecutive runs',
      runsWithoutProgress: 3,
    } as const;
    expect(await claims.release(second, stuck, T0 + 3)).toEqual({ kind: 'ok' });
    return claims.shardFinished(WINDOW, 1);
  }

  it("releases a shard's own record (sk shard#0001), not its window's, and leaves the other shard alone", async () => {
    const { claims, operator } = await freshBackend();
    expect(await splitWithStuckShard(claims)).toEqual({ shards: 2, finished: [0, 1] });

    const outcome = await operator.forceRelease(
      { ...WINDOW, shard: 1 },
      { expectedEpoch: 1, now: T0 + 10, evenIfLeaseLive: false, deadline: FRESH_DEADLINE },
    );

    expect(outcome).toMatchObject({
      kind: 'ok',
      record: { state: 'RELEASED', epoch: 1, deadline: FRESH_DEADLINE },
    });
    expect(await claims.read({ ...WINDOW, shard: 1 })).toMatchObject({
      state: 'RELEASED',
      runsWithoutProgress: 0,
    });
    expect(await claims.read({ ...WINDOW, shard: 0 })).toMatchObject({ state: 'DONE', epoch: 1 });
    expect(await claims.read(WINDOW)).toMatchObject({
      state: 'SHARDED',
      epoch: 1,
      shards: 2,
      finishedShards: [0, 1],
    });
    // The released shard is claimable at the next epoch; its window's record did not move.
    expect(await claims.claim({ ...WINDOW, shard: 1 }, lease('shard-1b'), T0 + 11)).toMatchObject({
      kind: 'claimed',
      claim: { epoch: 2 },
    });
  });

  it('refuses a shard release fenced on a stale epoch, answering with the shard, not the window', async () => {
    const { claims, operator } = await freshBackend();
    await splitWithStuckShard(claims);
    const outcome = await operator.forceRelease(
      { ...WINDOW, shard: 1 },
      { expectedEpoch: 7, now: T0 + 10, evenIfLeaseLive: false },
    );
    expect(outcome).toMatchObject({
      kind: 'refused',
      reason: 'epoch-moved',
      current: { state: 'STUCK', epoch: 1, owner: 'shard-1' },
    });
    expect(await claims.read({ ...WINDOW, shard: 1 })).toMatchObject({ state: 'STUCK' });
  });

  it('gives a STUCK split window back without its finished shards, so its next split waits for every shard again', async () => {
    const { claims, operator } = await freshBackend();
    await splitWithStuckShard(claims);
    expect(
      await claims.finishSharded(WINDOW, { kind: 'stuck', reason: 'shard 1 of 2 ended STUCK' }, T0 + 4),
    ).toBe('ok');
    const request = { now: T0 + 10, evenIfLeaseLive: false, deadline: FRESH_DEADLINE };
    expect(
      await operator.forceRelease({ ...WINDOW, shard: 1 }, { ...request, expectedEpoch: 1 }),
    ).toMatchObject({
      kind: 'ok',
    });
    expect(await operator.forceRelease(WINDOW, { ...request, expectedEpoch: 1 })).toMatchObject({
      kind: 'ok',
      record: { state: 'RELEASED', shards: 2 },
    });
    expect((await claims.read(WINDOW))?.finishedShards).toBeUndefined();

    // Split again: the shard that had finished reports so at once, and the window waits for the other.
    const again = await claimed(claims, WINDOW, 'coordinator-2', 2);
    expect(again).toMatchObject({ epoch: 2, window: { shards: 2 } });
    await claims.release(again, { kind: 'sharded', shards: 2 }, T0 + 12);
    expect(await claims.shardFinished(WINDOW, 0)).toEqual({ shards: 2, finished: [0] });
    expect(await claims.read(WINDOW)).toMatchObject({ state: 'SHARDED', finishedShards: [0] });
  });
});
