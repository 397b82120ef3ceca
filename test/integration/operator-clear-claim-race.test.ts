import { describe, expect, it } from 'vitest';
import { DynamoOperatorStore } from '../../shared/backends/dynamodb/dynamodb-operator-store.js';
import { memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import { MemoryOperatorStore } from '../../shared/backends/memory/memory-operator-store.js';
import { EffectNotPerformedError, NotPerformedReason } from '../../shared/errors.js';
import { defineJob } from '../../shared/job/job-definition.js';
import type { RunResult, SlotBackend } from '../../shared/job/run-slot.js';
import type { OperatorStore } from '../../shared/slot/operator-ports.js';
import { useDynamo } from '../helpers/dynalite.js';
import { testBackend } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { deliver, hashKey, START, WINDOW } from '../helpers/one-window.js';

/*
 * Found by a second review of done marks: on DynamoDB and memory, an operator's `clear` and `redrive` are several writes
 * without a transaction: t1 a guard on the slot (its epoch, not RUNNING), t2 the delete of the
 * effect record, t3 a reopen (a clear only if the guard saw the slot finished). Operators release a
 * RUNNING slot before they clear, so the slot is often RELEASED, which any delivery may claim
 * between t1 and t2 (the released run's continuation is due at once). That run met the record
 * still there (in doubt, or refused for good) and passed it by, the operator's delete removed it,
 * and the window finished without the email, though the operator was told it was resolved. The
 * guard now holds a RELEASED slot against claims until the operator's last write (OPERATOR_HOLD_MS).
 */

const FIRST = 'first@example.test';
const UNSURE = 'unsure@example.test';
const LAST = 'last@example.test';

/** A backend whose operator runs `between` just before its second write (the delete after the guard). */
type RacingBackend = (between: () => Promise<void>) => Promise<{
  readonly backend: SlotBackend;
  readonly operator: OperatorStore;
}>;

/** Delivers `slot` of `job` by invocation id, with a 10-minute lease and, if given, the time left. */
function deliveries(base: Pick<Parameters<typeof deliver>[0], 'job' | 'backend' | 'clock' | 'slot'>) {
  return (invocationId: string, remainingTimeMs?: () => number) =>
    deliver({
      ...base,
      invocationId,
      options: { leaseMs: 600_000 },
      ...(remainingTimeMs ? { remainingTimeMs } : {}),
    });
}

const dynamo = useDynamo();

const backends: Record<string, RacingBackend> = {
  memory: async (between) => {
    const backend = memoryBackend({ hashKey });
    let writes = 0;
    const operator = new MemoryOperatorStore({
      table: backend.table,
      transport: {
        async send(request, execute) {
          if (request.operation === 'operator' && ++writes === 2) await between();
          return execute();
        },
      },
    });
    return { backend, operator };
  },
  DynamoDB: async (between) => {
    const tableName = await dynamo.freshTable();
    const backend = testBackend(dynamo.client(), tableName);
    const client = dynamo.client();
    let writes = 0;
    client.middlewareStack.add(
      (next, context) => async (args) => {
        const write =
          context.commandName === 'UpdateItemCommand' || context.commandName === 'DeleteItemCommand';
        if (write && ++writes === 2) await between();
        return next(args);
      },
      { step: 'initialize', name: 'operatorClaimRace' },
    );
    return { backend, operator: new DynamoOperatorStore({ client, tableName }) };
  },
};

for (const [name, racing] of Object.entries(backends)) {
  describe(`${name}: an operator's writes on a released slot, and a delivery between them`, () => {
    /**
     * A window whose first run sends FIRST, leaves UNSURE as `unsure` says, and yields before LAST
     * (out of time); the operator then resolves UNSURE with `act`, and the released run's
     * continuation is delivered between the operator's guard and its delete.
     */
    async function raceTheOperator(
      unsure: 'in-doubt' | 'rejected',
      act: (
        operator: OperatorStore,
        slot: { jobId: string; window: string },
        now: number,
      ) => Promise<unknown>,
    ) {
      const clock = new ManualClock(START);
      const slot = { jobId: `operator-claim-race-${unsure}`, window: WINDOW };
      const sent: string[] = [];
      let firstRun = true;
      const job = defineJob({
        id: slot.jobId,
        run: (ctx) =>
          ctx.onceEach([FIRST, UNSURE, LAST], { key: (to) => to, concurrency: 1 }, async (to) => {
            if (to === UNSURE && firstRun) {
              firstRun = false;
              // Three minutes to an answer: the invocation is then nearly out of time, and yields before LAST.
              await clock.advance(180_000);
              if (unsure === 'rejected')
                throw new EffectNotPerformedError('address rejected', {
                  reason: NotPerformedReason.Rejected,
                });
              throw new Error('socket hang up');
            }
            sent.push(to);
          }),
      });
      let continuation: Promise<RunResult> | undefined;
      const { backend, operator } = await racing(async () => {
        continuation = run('continuation');
        await continuation;
      });
      const run = deliveries({ job, backend, clock, slot });

      expect(await run('run-1', () => START + 200_000 - clock.now())).toMatchObject({
        status: 'yielded',
        reason: 'time',
      });
      expect(await backend.claims.read(slot)).toMatchObject({ state: 'RELEASED', epoch: 1 });

      const resolved = await act(operator, slot, clock.now());
      // The continuation met the operator's hold: it is told to come back, and changed nothing.
      expect(await continuation).toMatchObject({ status: 'duplicate', outcome: { kind: 'waiting' } });
      expect(await backend.claims.read(slot)).toMatchObject({ state: 'RELEASED', epoch: 1 });
      expect((await backend.claims.read(slot))?.resumeAfter).toBeUndefined();

      // Its message comes back, and later ones, until the window is finished for good.
      for (let delivery = 1; delivery <= 3; delivery++) {
        await clock.advance(60_000);
        await run(`later-${delivery}`);
      }
      return { resolved, sent, slot: await backend.claims.read(slot) };
    }

    it('sends the email a clear resolved once, and ends the window DONE, when a delivery claims between the guard and the delete', async () => {
      const { resolved, sent, slot } = await raceTheOperator('in-doubt', (operator, slot, now) =>
        operator.resolveEffect(slot, hashKey(UNSURE), 'clear', { expectedEpoch: 1, now }),
      );
      expect(resolved).toMatchObject({ kind: 'resolved', slotReopened: false });
      expect(sent).toEqual([FIRST, UNSURE, LAST]);
      expect(slot).toMatchObject({ state: 'DONE', summary: { done: 3, inDoubt: 0, failed: 0 } });
    });

    it('sends the email a redrive cleared once, and ends the window DONE, when a delivery claims between the guard and the delete', async () => {
      const { resolved, sent, slot } = await raceTheOperator('rejected', (operator, slot, now) =>
        operator.redrive(slot, { expectedEpoch: 1, now, deadline: now + 6 * 3_600_000 }),
      );
      expect(resolved).toMatchObject({ kind: 'redriven', cleared: [{ keyHash: hashKey(UNSURE) }] });
      expect(sent).toEqual([FIRST, UNSURE, LAST]);
      expect(slot).toMatchObject({ state: 'DONE', summary: { done: 3, inDoubt: 0, failed: 0 } });
    });
  });

  describe(`${name}: an operator's hold on a released slot`, () => {
    it('ends its hold when it has nothing to write: a clear of a key with no record, a redrive naming one that is not FAILED', async () => {
      const { backend, operator } = await racing(async () => {});
      const clock = new ManualClock(START);
      const slot = { jobId: 'operator-hold-ends', window: WINDOW };
      const sent: string[] = [];
      const job = defineJob({
        id: slot.jobId,
        run: (ctx) =>
          ctx.onceEach([FIRST, LAST], { key: (to) => to, concurrency: 1 }, async (to) => {
            sent.push(to);
          }),
      });
      const run = deliveries({ job, backend, clock, slot });
      // No time left: the run yields before its first email, and the slot is RELEASED with no wait.
      expect(await run('run-1', () => 0)).toMatchObject({ status: 'yielded', reason: 'time' });
      const request = { expectedEpoch: 1, now: clock.now() };

      expect(await operator.resolveEffect(slot, hashKey('nobody@example.test'), 'clear', request)).toEqual({
        kind: 'effect-absent',
      });
      expect(await backend.claims.read(slot)).toMatchObject({ state: 'RELEASED', epoch: 1 });
      expect((await backend.claims.read(slot))?.resumeAfter).toBeUndefined();
      expect(
        await operator.redrive(slot, {
          ...request,
          deadline: request.now + 6 * 3_600_000,
          keyHashes: [hashKey(FIRST)],
        }),
      ).toMatchObject({
        kind: 'effects-not-failed',
      });
      expect((await backend.claims.read(slot))?.resumeAfter).toBeUndefined();

      // Not held: the next delivery claims the slot at once and finishes the window.
      expect(await run('run-2')).toMatchObject({ status: 'completed', epoch: 2 });
      expect(sent).toEqual([FIRST, LAST]);
    });

    it('puts back the wait a released slot already had (a refused email due later) when its clear ends', async () => {
      const { backend, operator } = await racing(async () => {});
      const clock = new ManualClock(START);
      const slot = { jobId: 'operator-hold-keeps-wait', window: WINDOW };
      const THROTTLED = 'throttled@example.test';
      const job = defineJob({
        id: slot.jobId,
        run: (ctx) =>
          ctx.onceEach([UNSURE, THROTTLED], { key: (to) => to, concurrency: 1 }, async (to) => {
            if (to === UNSURE) throw new Error('socket hang up');
            throw new EffectNotPerformedError('slow down', { reason: NotPerformedReason.Throttled });
          }),
      });
      const first = await deliver({
        job,
        backend,
        clock,
        slot,
        invocationId: 'run-1',
        options: { leaseMs: 600_000 },
      });
      expect(first).toMatchObject({ status: 'yielded', reason: 'retry-wait' });
      const waiting = await backend.claims.read(slot);
      expect(waiting).toMatchObject({ state: 'RELEASED', epoch: 1 });
      const wait = waiting?.resumeAfter;
      expect(wait).toBeGreaterThan(clock.now());

      const request = { expectedEpoch: 1, now: clock.now() };
      expect(await operator.resolveEffect(slot, hashKey(UNSURE), 'clear', request)).toMatchObject({
        kind: 'resolved',
        slotReopened: false,
      });
      // The hold (five minutes, longer than the wait) is gone, and the refused email's wait is back.
      expect(await backend.claims.read(slot)).toMatchObject({
        state: 'RELEASED',
        epoch: 1,
        resumeAfter: wait,
      });
    });
  });
}
