import { describe, expect, it } from 'vitest';
import { DynamoClaimStore } from '../../shared/backends/dynamodb/dynamodb-claim-store.js';
import { DynamoOperatorStore } from '../../shared/backends/dynamodb/dynamodb-operator-store.js';
import type { ClaimStore } from '../../shared/slot/ports.js';
import type { Slot } from '../../shared/slot/slot.js';
import { auditWindows } from '../../shared/watchdog/window-audit.js';
import { useDynamo } from '../helpers/dynalite.js';
import { testBackend } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { lease } from './backend-contract.js';
import { describeWatchdogAudit } from './watchdog-audit-contract.js';
import { describeWatchdogInDoubt } from './watchdog-in-doubt-contract.js';

const dynamo = useDynamo();

const freshStore = async () =>
  new DynamoClaimStore({ client: dynamo.client(), tableName: await dynamo.freshTable('watchdog') });

describeWatchdogAudit('DynamoDB', freshStore);

describeWatchdogInDoubt('DynamoDB', async () => {
  const client = dynamo.client();
  const tableName = await dynamo.freshTable('watchdog');
  return { ...testBackend(client, tableName), operator: new DynamoOperatorStore({ client, tableName }) };
});

// Shards: DynamoDB only, until the other backends split windows too.
describe('DynamoDB: the watchdog audit of a window split into shards', () => {
  const HOUR = 3_600_000;
  const WINDOW: Slot = { jobId: 'weekly-report', window: '2026-11-30T06:00:00Z' };
  const CLAIMED = Date.parse('2026-11-30T06:00:05Z');
  const DEADLINE = Date.parse('2026-11-30T12:00:00Z');

  /** The window is due at 12:00, 6 hours after it. */
  const due = (owner: string, shards?: number) =>
    lease(owner, { deadline: DEADLINE, ...(shards ? { shards } : {}) });

  /** The window's coordinator split it in 4; shards 0 and 1 ended, 2 and 3 never did (their runs died). */
  async function splitHalfFinished(store: ClaimStore): Promise<void> {
    const coordinator = await store.claim(WINDOW, due('coordinator', 4), CLAIMED);
    if (coordinator.kind !== 'claimed') throw new Error(coordinator.kind);
    expect(await store.release(coordinator.claim, { kind: 'sharded', shards: 4 }, CLAIMED + 1)).toEqual({
      kind: 'ok',
    });
    const nothing = { done: 0, inDoubt: 0, failed: 0, inDoubtKeys: [], failedKeys: [], runs: 1 };
    for (const shard of [0, 1, 2, 3]) {
      const run = await store.claim({ ...WINDOW, shard }, due(`shard-${shard}`), CLAIMED + 2);
      if (run.kind !== 'claimed') throw new Error(run.kind);
      if (shard > 1) continue;
      await store.complete(run.claim, nothing, CLAIMED + 3);
      await store.shardFinished(WINDOW, shard);
    }
  }

  const audit = (store: ClaimStore, clock: ManualClock) =>
    auditWindows({
      jobId: WINDOW.jobId,
      schedule: { expression: 'cron(0 9 ? * MON *)', timeZone: 'Europe/Moscow' },
      deadlineMs: 6 * HOUR,
      graceMs: 15 * 60_000,
      lookbackMs: 48 * HOUR,
      now: clock.now(),
      claims: store,
    });

  it('pages a window still SHARDED past its deadline, saying how many of its shards finished', async () => {
    const store = await freshStore();
    await splitHalfFinished(store);
    const clock = new ManualClock(Date.parse('2026-11-30T08:00:00Z'));

    const during = await audit(store, clock);
    expect(during.windows.map((w) => [w.window, w.verdict, w.state])).toEqual([
      ['2026-11-30T06:00:00Z', 'pending', 'SHARDED'],
    ]);
    expect(during.windows[0]?.reason).toBe(
      'SHARDED, to finish by 2026-11-30T12:00:00Z, 2 of 4 shards finished',
    );
    expect(during.counts.incomplete).toBe(0);

    await clock.advance(4 * HOUR + 60_000);
    const after = await audit(store, clock);
    expect(after.windows.map((w) => [w.window, w.verdict, w.state])).toEqual([
      ['2026-11-30T06:00:00Z', 'incomplete', 'SHARDED'],
    ]);
    expect(after.windows[0]?.reason).toBe(
      'SHARDED past its deadline 2026-11-30T12:00:00Z (1 min ago), 2 of 4 shards finished',
    );
    expect(after.counts).toEqual({ ok: 0, partial: 0, missing: 0, incomplete: 1, pending: 0 });
  });

  it('reports a split window its last shard finished as ok, judged by the window record alone', async () => {
    const store = await freshStore();
    await splitHalfFinished(store);
    const done = { done: 12_400, inDoubt: 0, failed: 0, inDoubtKeys: [], failedKeys: [], runs: 5 };
    expect(await store.finishSharded(WINDOW, { kind: 'complete', summary: done }, CLAIMED + 60_000)).toBe(
      'ok',
    );
    const result = await audit(store, new ManualClock(Date.parse('2026-11-30T13:00:00Z')));
    expect(result.windows.map((w) => [w.verdict, w.state])).toEqual([['ok', 'DONE']]);
    expect(result.counts.incomplete).toBe(0);
  });
});
