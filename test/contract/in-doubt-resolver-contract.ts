import { describe, expect, it } from 'vitest';
import {
  type InDoubtResolverStores,
  type ResolverScope,
  resolveWindowInDoubt,
  type WindowInDoubtResolution,
} from '../../shared/operator/in-doubt-resolver.js';
import type { Claim, EffectRecord, ProviderWord } from '../../shared/slot/ports.js';
import type { Slot } from '../../shared/slot/slot.js';
import { RecordingLog } from '../helpers/harness.js';
import { claim, freshSlot, LEASE, type OperatorContractBackend, T0 } from './operator-contract.js';

const word = (outcome: ProviderWord['outcome'], event: string): ProviderWord => ({
  outcome,
  event,
  at: T0 + 1_000,
  epoch: 1,
  ...(outcome === 'accepted' ? { messageId: '0100018f-accepted' } : {}),
});

/**
 * The operator's in-doubt resolver (shared/operator/in-doubt-resolver.ts) on a backend's stores:
 * windows whose runs are over, settled by the provider's word on each reservation; windows still
 * running left to their runs. Every backend whose ledger records the provider's word runs it.
 */
export function describeInDoubtResolverContract(
  name: string,
  makeBackend: () => Promise<OperatorContractBackend>,
): void {
  /** A run at epoch 1 reserved `keys` and stopped; the provider spoke of the first two. */
  async function reservedWithWords(backend: OperatorContractBackend, keys: readonly string[]) {
    const slot = freshSlot();
    const run = await claim(backend.claims, slot, 'replica-1/run', T0);
    for (const key of keys) await backend.ledger.reserve(run, key, { rerunInDoubt: false, now: T0 });
    await backend.ledger.recordProviderWord(slot, keys[0]!, word('accepted', 'Send'));
    await backend.ledger.recordProviderWord(slot, keys[1]!, word('rejected', 'Reject'));
    return { slot, run };
  }

  /** The same, and the run finished the window DONE with those effects in doubt. */
  async function finishedWithWords(backend: OperatorContractBackend, keys: readonly string[]) {
    const { slot, run } = await reservedWithWords(backend, keys);
    const summary = { done: 0, inDoubt: keys.length, failed: 0, inDoubtKeys: keys, failedKeys: [], runs: 1 };
    expect(await backend.claims.complete(run, summary, T0 + 1)).toEqual({ kind: 'ok' });
    return slot;
  }

  const resolve = (
    stores: InDoubtResolverStores,
    slot: Slot,
    now: number,
    scope: ResolverScope = 'all',
    log = new RecordingLog(),
  ) => resolveWindowInDoubt({ stores, slot, scope, now, deadline: now + 3_600_000, log, by: 'operator' });

  const outcomes = (resolution: WindowInDoubtResolution) =>
    resolution.kind === 'resolved'
      ? resolution.effects.map((e) => [e.keyHash, e.outcome, e.refusal ?? null])
      : [];

  /** The three of reservedWithWords, settled with every outcome counted: confirmed, cleared, left. */
  function expectConfirmedClearedLeft(resolution: WindowInDoubtResolution, keys: readonly string[]) {
    expect(outcomes(resolution)).toEqual([
      [keys[0], 'marked-done', null],
      [keys[1], 'rerun', null],
      [keys[2], 'in-doubt', null],
    ]);
    expect(resolution.kind === 'resolved' && resolution.counts).toEqual({
      'marked-done': 1,
      rerun: 1,
      rejected: 0,
      'in-doubt': 1,
      refused: 0,
      'moved-on': 0,
    });
  }

  describe(`${name}: settling a finished window's effects in doubt by the provider's word`, () => {
    it("confirms the accepted effect off a DONE window's summary, reopens the window for the rejected one, which its next run sends alone, and leaves the silent one", async () => {
      const backend = await makeBackend();
      const { slot } = await reservedWithWords(backend, ['aa02', 'bb02', 'cc02']);
      // The takeover at epoch 2 found the three reserved and finished the window without them.
      const takeover = await claim(backend.claims, slot, 'replica-2/takeover', T0 + LEASE + 1);
      const finished = {
        done: 4,
        inDoubt: 3,
        failed: 0,
        inDoubtKeys: ['aa02', 'bb02', 'cc02'],
        failedKeys: [],
        runs: 2,
      };
      expect(await backend.claims.complete(takeover, finished, T0 + LEASE + 2)).toEqual({ kind: 'ok' });

      const now = T0 + 2 * 3_600_000;
      const log = new RecordingLog();
      const resolution = await resolve(backend, slot, now, 'all', log);

      expect(resolution).toMatchObject({
        kind: 'resolved',
        slotReopened: true,
        record: { state: 'DONE', epoch: 2 },
      });
      expectConfirmedClearedLeft(resolution, ['aa02', 'bb02', 'cc02']);
      // Each resolution logged by hash, with what the provider said; the silent one is the caller's to report.
      expect(log.lines.map((l) => [l.level, l.message, l.fields])).toEqual([
        [
          'info',
          'in-doubt effect confirmed by the provider after its window finished: marked done',
          {
            window: slot.window,
            keyHash: 'aa02',
            epoch: 1,
            by: 'operator',
            event: 'Send',
            messageId: '0100018f-accepted',
          },
        ],
        [
          'info',
          "in-doubt effect rejected by the provider: cleared, sent by the window's next run once the window is delivered",
          { window: slot.window, keyHash: 'bb02', epoch: 1, by: 'operator', event: 'Reject' },
        ],
      ]);
      expect(await backend.ledger.read(slot, 'aa02')).toMatchObject({ state: 'DONE', epoch: 1 });
      expect(await backend.ledger.read(slot, 'bb02')).toBeUndefined();
      expect(await backend.ledger.read(slot, 'cc02')).toMatchObject({ state: 'RESERVED', epoch: 1 });
      // Confirmed while the window was still DONE: its summary moved the effect from in doubt to done.
      expect(await backend.claims.read(slot)).toMatchObject({
        state: 'RELEASED',
        epoch: 2,
        deadline: now + 3_600_000,
        summary: { done: 5, inDoubt: 2, inDoubtKeys: ['bb02', 'cc02'] },
      });

      // The window's next run: the rejected one is its to send, the confirmed one done, the silent one still in doubt.
      const next = await claim(backend.claims, slot, 'replica-3/rerun', now + 1);
      expect(next).toMatchObject({ epoch: 3, via: 'retry' });
      const reserve = (key: string) =>
        backend.ledger.reserve(next, key, { rerunInDoubt: false, now: now + 2 });
      expect(await reserve('bb02')).toMatchObject({ kind: 'reserved', rerun: false, attempt: 1 });
      expect(await reserve('aa02')).toEqual({ kind: 'done' });
      expect(await reserve('cc02')).toEqual({ kind: 'in-doubt', epoch: 1 });
      await backend.ledger.markDone(next, ['bb02']);
      const rerun = { done: 6, inDoubt: 1, failed: 0, inDoubtKeys: ['cc02'], failedKeys: [], runs: 3 };
      expect(await backend.claims.complete(next, rerun, now + 3)).toEqual({ kind: 'ok' });

      // Nothing new said: a second pass writes nothing and reports the silent one again.
      const again = await resolve(backend, slot, now + 4);
      expect(again).toMatchObject({
        kind: 'resolved',
        slotReopened: false,
        record: { state: 'DONE', epoch: 3 },
      });
      expect(outcomes(again)).toEqual([['cc02', 'in-doubt', null]]);
      expect(again.kind === 'resolved' && again.effects[0]).toMatchObject({ epoch: 1, reservedAt: T0 });
      expect(await backend.claims.read(slot)).toMatchObject({ state: 'DONE', epoch: 3, summary: rerun });
    });

    it('counts an effect settled by someone else between its reading and its write as moved on, and writes nothing over it', async () => {
      const backend = await makeBackend();
      const slot = await finishedWithWords(backend, ['jj01', 'kk01']);
      // An operator marks both done by hand after the resolver listed them, before its writes.
      const racing: InDoubtResolverStores = {
        ...backend,
        ledger: {
          list: async function* (s) {
            const listed: EffectRecord[] = [];
            for await (const effect of backend.ledger.list(s)) listed.push(effect);
            for (const key of ['jj01', 'kk01'])
              await backend.operator.resolveEffect(slot, key, 'done', { expectedEpoch: 1, now: T0 + 2 });
            yield* listed;
          },
        },
      };

      const resolution = await resolve(racing, slot, T0 + 3);

      expect(outcomes(resolution)).toEqual([
        ['jj01', 'moved-on', null],
        ['kk01', 'moved-on', null],
      ]);
      expect(resolution.kind === 'resolved' && resolution.counts).toMatchObject({
        'marked-done': 0,
        rerun: 0,
        'moved-on': 2,
      });
      expect(await backend.ledger.read(slot, 'jj01')).toMatchObject({ state: 'DONE' });
      // The rejected one was not cleared over the operator's word, nor the window reopened.
      expect(await backend.ledger.read(slot, 'kk01')).toMatchObject({ state: 'DONE' });
      expect(await backend.claims.read(slot)).toMatchObject({
        state: 'DONE',
        epoch: 1,
        summary: { done: 2, inDoubt: 0, inDoubtKeys: [] },
      });
    });

    it('settles a STUCK window too, clearing the rejected effect without reopening it (a re-drive delivers it)', async () => {
      const backend = await makeBackend();
      const { slot, run } = await reservedWithWords(backend, ['aa01', 'bb01', 'cc01']);
      await backend.claims.release(
        run,
        { kind: 'stuck', reason: 'no progress in 3 consecutive runs', runsWithoutProgress: 3 },
        T0 + 1,
      );
      const resolution = await resolve(backend, slot, T0 + 2 * LEASE);
      expect(resolution).toMatchObject({ kind: 'resolved', slotReopened: false, record: { state: 'STUCK' } });
      expectConfirmedClearedLeft(resolution, ['aa01', 'bb01', 'cc01']);
      expect(await backend.ledger.read(slot, 'aa01')).toMatchObject({ state: 'DONE' });
      expect(await backend.ledger.read(slot, 'bb01')).toBeUndefined();
      expect(await backend.ledger.read(slot, 'cc01')).toMatchObject({ state: 'RESERVED', reservedAt: T0 });
      expect(await backend.claims.read(slot)).toMatchObject({ state: 'STUCK', epoch: 1 });
    });

    it('settles a FAILED window, whose runs will not come back either; confirm-only leaves the rejected one', async () => {
      const backend = await makeBackend();
      const slot = freshSlot();
      const run = await claim(backend.claims, slot, 'replica-1/run', T0, 1);
      for (const key of ['dd01', 'ee01'])
        await backend.ledger.reserve(run, key, { rerunInDoubt: false, now: T0 });
      await backend.ledger.recordProviderWord(slot, 'dd01', word('accepted', 'Delivery'));
      await backend.ledger.recordProviderWord(slot, 'ee01', word('rejected', 'Reject'));
      await backend.claims.release(run, { kind: 'error', message: 'TypeError: boom' }, T0 + 1);
      expect(await backend.claims.read(slot)).toMatchObject({ state: 'FAILED' });

      const resolution = await resolve(backend, slot, T0 + 2 * LEASE, 'confirm-only');
      expect(outcomes(resolution)).toEqual([
        ['dd01', 'marked-done', null],
        ['ee01', 'rejected', null],
      ]);
      expect(await backend.ledger.read(slot, 'ee01')).toMatchObject({ state: 'RESERVED' });
    });

    it('leaves a window its runs have not finished to them, reading no effect and writing nothing', async () => {
      const backend = await makeBackend();
      const { slot, run } = await reservedWithWords(backend, ['ff01', 'gg01']);
      expect(await resolve(backend, slot, T0 + 1_000)).toMatchObject({
        kind: 'not-finished',
        leaseLive: true,
        record: { state: 'RUNNING', epoch: 1 },
      });
      await backend.claims.release(run, { kind: 'yield', runsWithoutProgress: 0 }, T0 + 2_000);
      expect(await resolve(backend, slot, T0 + 3_000)).toMatchObject({
        kind: 'not-finished',
        leaseLive: false,
        record: { state: 'RELEASED' },
      });
      expect(await backend.ledger.read(slot, 'ff01')).toMatchObject({ state: 'RESERVED' });
      expect(await backend.ledger.read(slot, 'gg01')).toMatchObject({ state: 'RESERVED' });
      expect(await resolve(backend, freshSlot(), T0)).toEqual({ kind: 'absent' });
    });

    it('refuses every write once a run claimed the window after it was read, and says the epoch moved', async () => {
      const backend = await makeBackend();
      const slot = await finishedWithWords(backend, ['hh01', 'ii01']);
      // A store that answers the read, then sees the window reopened and claimed before the writes.
      let claimed: Claim | undefined;
      const racing: InDoubtResolverStores = {
        ...backend,
        claims: {
          read: async (s) => {
            const record = await backend.claims.read(s);
            if (!claimed) {
              await backend.operator.reopen(slot, { expectedEpoch: 1, now: T0 + 2 });
              claimed = await claim(backend.claims, slot, 'replica-2/next', T0 + 3);
            }
            return record;
          },
        },
      };
      const resolution = await resolve(racing, slot, T0 + 4);
      expect(outcomes(resolution)).toEqual([
        ['hh01', 'refused', 'epoch-moved'],
        ['ii01', 'refused', 'epoch-moved'],
      ]);
      expect(await backend.ledger.read(slot, 'hh01')).toMatchObject({ state: 'RESERVED', epoch: 1 });
      expect(await backend.ledger.read(slot, 'ii01')).toMatchObject({ state: 'RESERVED', epoch: 1 });
    });
  });
}
