import { describe, expect, it } from 'vitest';
import { StoreError } from '../../shared/errors.js';
import type { OperatorStore } from '../../shared/slot/operator-ports.js';
import type { Claim, ClaimStore, EffectLedger, LeaseRequest, ProviderWord } from '../../shared/slot/ports.js';
import type { Slot } from '../../shared/slot/slot.js';
import { emfMetrics } from '../../shared/telemetry/metrics.js';
import type { WatchdogEvent } from '../../shared/watchdog/watchdog-event.js';
import { createWatchdogHandler } from '../../shared/watchdog/watchdog-lambda.js';
import { EmfRecorder, RecordingLog } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';

/** What a backend under this contract provides: the runtime ports and the operator port. */
export interface WatchdogInDoubtBackend {
  readonly claims: ClaimStore;
  readonly ledger: EffectLedger;
  readonly operator: OperatorStore;
}

const HOUR = 3_600_000;
/** weekly-report's window of Monday 23 November, 09:00 in Moscow. */
const WINDOW: Slot = { jobId: 'weekly-report', window: '2026-11-23T06:00:00Z' };
const CLAIMED = Date.parse('2026-11-23T06:00:05Z');
const WEEKLY: WatchdogEvent = {
  kind: 'watchdog',
  jobId: 'weekly-report',
  schedule: { expression: 'cron(0 9 ? * MON *)', timeZone: 'Europe/Moscow' },
  deadlineSeconds: 21_600,
  lookbackHours: 8 * 24,
  notBefore: '2026-11-23T00:00:00Z',
};
const CONFIRMING: WatchdogEvent = { ...WEEKLY, confirmInDoubt: true };
/** A week on, after the window finished and before the next one is due. */
const NOW = Date.parse('2026-11-30T05:00:00Z');

function lease(owner: string): LeaseRequest {
  return {
    owner,
    leaseMs: 60_000,
    maxAttempts: 3,
    expiresAtSeconds: Math.ceil(CLAIMED / 1000) + 35 * 86_400,
    deadline: CLAIMED + 6 * HOUR,
    delivery: { invocationId: owner },
  };
}

async function claim(claims: ClaimStore, owner: string, now: number): Promise<Claim> {
  const outcome = await claims.claim(WINDOW, lease(owner), now);
  if (outcome.kind !== 'claimed') throw new Error(`expected ${owner} to claim, got ${outcome.kind}`);
  return outcome.claim;
}

/**
 * The window DONE at epoch 2 with three effects in doubt: a run reserved aa01, bb01 and cc01 at
 * epoch 1 and died; its takeover found them reserved and finished without them. Then SES's events
 * came: aa01 delivered, bb01 rejected; of cc01 nothing.
 */
async function finishedWithThreeInDoubt(backend: WatchdogInDoubtBackend) {
  const crashed = await claim(backend.claims, 'replica-1/crashed', CLAIMED);
  for (const key of ['aa01', 'bb01', 'cc01']) {
    await backend.ledger.reserve(crashed, key, { rerunInDoubt: false, now: CLAIMED });
  }
  const takeover = await claim(backend.claims, 'replica-2/takeover', CLAIMED + 61_000);
  const summary = {
    done: 12_397,
    inDoubt: 3,
    failed: 0,
    inDoubtKeys: ['aa01', 'bb01', 'cc01'],
    failedKeys: [],
    runs: 2,
  };
  expect(await backend.claims.complete(takeover, summary, CLAIMED + 20 * 60_000)).toEqual({ kind: 'ok' });
  const word = (outcome: ProviderWord['outcome'], event: string): ProviderWord => ({
    outcome,
    event,
    at: CLAIMED + 30 * 60_000,
    epoch: 1,
    ...(outcome === 'accepted' ? { messageId: '0100018f-aa01' } : {}),
  });
  expect(await backend.ledger.recordProviderWord(WINDOW, 'aa01', word('accepted', 'Delivery'))).toBe(
    'recorded',
  );
  expect(await backend.ledger.recordProviderWord(WINDOW, 'bb01', word('rejected', 'Reject'))).toBe(
    'recorded',
  );
}

/**
 * The watchdog's safe half of in-doubt resolution (shared/watchdog/in-doubt-confirmation.ts)
 * through its handler, against a backend's claim store, effect ledger and operator store: what the
 * provider accepted after a window finished is recorded done and leaves the window's summary;
 * nothing is ever made to be sent again.
 */
export function describeWatchdogInDoubt(name: string, makeBackend: () => Promise<WatchdogInDoubtBackend>) {
  function watchdog(backend: WatchdogInDoubtBackend, stores: Partial<WatchdogInDoubtBackend> = {}) {
    const emf = new EmfRecorder();
    const log = new RecordingLog();
    const handler = createWatchdogHandler({
      claims: backend.claims,
      inDoubt: { ...backend, ...stores },
      metrics: (jobId) => emfMetrics({ jobId, write: emf.write }),
      log: () => log,
      clock: new ManualClock(NOW),
    });
    return { handler, emf, log };
  }

  describe(`${name}: the watchdog confirming effects in doubt`, () => {
    it("confirms what the provider accepted after the window finished: done, off the summary's in-doubt count, counted once", async () => {
      const backend = await makeBackend();
      await finishedWithThreeInDoubt(backend);
      const { handler, emf, log } = watchdog(backend);

      const response = await handler(CONFIRMING);

      expect(response).toMatchObject({
        status: 'audited',
        counts: { ok: 1, partial: 0, missing: 0, incomplete: 0, pending: 0 },
        inDoubt: { windows: 1, deferred: 0, confirmed: 1, rejected: 1, stillInDoubt: 1 },
      });
      expect(await backend.ledger.read(WINDOW, 'aa01')).toMatchObject({ state: 'DONE', epoch: 1 });
      // Rejected is not sent again from here: it stays in doubt for `effects resolve --auto`.
      expect(await backend.ledger.read(WINDOW, 'bb01')).toMatchObject({ state: 'RESERVED', epoch: 1 });
      expect(await backend.ledger.read(WINDOW, 'cc01')).toMatchObject({ state: 'RESERVED', epoch: 1 });
      expect(await backend.claims.read(WINDOW)).toMatchObject({
        state: 'DONE',
        epoch: 2,
        summary: { done: 12_398, inDoubt: 2, inDoubtKeys: ['bb01', 'cc01'] },
      });
      expect(emf.records).toHaveLength(1);
      expect(emf.records[0]).toMatchObject({
        JobId: 'weekly-report',
        InDoubtConfirmedLate: 1,
        WatchdogRun: 1,
      });
      expect(log.lines.map((l) => [l.level, l.message, l.fields.keyHash ?? l.fields.keyHashes])).toEqual([
        ['info', 'watchdog audit', undefined],
        ['info', 'in-doubt effect confirmed by the provider after its window finished: marked done', 'aa01'],
        [
          'warn',
          'in-doubt effect rejected by the provider: left for slotguard effects resolve --auto',
          'bb01',
        ],
        ['info', 'watchdog: in-doubt effects of a finished window, by the provider’s word', ['bb01', 'cc01']],
      ]);
      expect(log.lines[1]?.fields).toMatchObject({
        window: WINDOW.window,
        epoch: 1,
        by: 'watchdog',
        event: 'Delivery',
        messageId: '0100018f-aa01',
      });

      // The next run, 15 minutes later, finds nothing new to confirm.
      const again = await handler(CONFIRMING);
      expect(again).toMatchObject({ inDoubt: { windows: 1, confirmed: 0, rejected: 1, stillInDoubt: 1 } });
      expect(emf.sum('InDoubtConfirmedLate')).toBe(1);
      expect((await backend.claims.read(WINDOW))?.summary).toMatchObject({ done: 12_398, inDoubt: 2 });
    });

    it('reads no effect unless its event asks, nor those of a window whose summary counts none in doubt', async () => {
      const backend = await makeBackend();
      await finishedWithThreeInDoubt(backend);
      let lists = 0;
      const ledger: Pick<EffectLedger, 'list'> = {
        list: (slot) => {
          lists++;
          return backend.ledger.list(slot);
        },
      };
      const { handler, emf } = watchdog(backend, { ledger: ledger as EffectLedger });

      const audited = await handler(WEEKLY);
      expect(audited).toMatchObject({ status: 'audited', counts: { ok: 1 } });
      expect(audited).not.toHaveProperty('inDoubt');
      expect(lists).toBe(0);
      expect(await backend.ledger.read(WINDOW, 'aa01')).toMatchObject({ state: 'RESERVED' });
      expect(emf.withMetric('InDoubtConfirmedLate')).toEqual([]);

      // Settled by hand since (all three marked done), the summary counts none: nothing to read.
      for (const key of ['aa01', 'bb01', 'cc01']) {
        await backend.operator.resolveEffect(WINDOW, key, 'done', { expectedEpoch: 2, now: NOW });
      }
      expect((await backend.claims.read(WINDOW))?.summary).toMatchObject({ done: 12_400, inDoubt: 0 });
      expect(await handler(CONFIRMING)).toMatchObject({
        inDoubt: { windows: 0, confirmed: 0, rejected: 0, stillInDoubt: 0 },
      });
      expect(lists).toBe(0);
      expect(emf.sum('InDoubtConfirmedLate')).toBe(0);
      expect(emf.withMetric('InDoubtConfirmedLate')).toHaveLength(1);
    });

    it('still reports its audit when the store refuses the confirming writes, and says so in the log', async () => {
      const backend = await makeBackend();
      await finishedWithThreeInDoubt(backend);
      const operator: Pick<OperatorStore, 'resolveEffect'> = {
        resolveEffect: async () => {
          throw new StoreError(
            'resolveEffect',
            'AccessDeniedException: not authorized to perform dynamodb:UpdateItem',
          );
        },
      };
      const { handler, emf, log } = watchdog(backend, { operator: operator as OperatorStore });

      const response = await handler(CONFIRMING);

      expect(response).toMatchObject({ status: 'audited', counts: { ok: 1 } });
      expect(response).not.toHaveProperty('inDoubt');
      expect(emf.records[0]).toMatchObject({ WatchdogRun: 1, WindowMissing: 0, WindowIncomplete: 0 });
      expect(log.lines.filter((l) => l.level === 'error')).toEqual([
        {
          level: 'error',
          message:
            "watchdog could not confirm in-doubt effects from the provider's word; the next run tries again",
          fields: { error: expect.stringContaining('not authorized to perform dynamodb:UpdateItem') },
        },
      ]);
      expect(await backend.ledger.read(WINDOW, 'aa01')).toMatchObject({ state: 'RESERVED' });
    });
  });
}
