import { describe, expect, it } from 'vitest';
import { DynamoOperatorStore } from '../../shared/backends/dynamodb/dynamodb-operator-store.js';
import { memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import { MemoryOperatorStore } from '../../shared/backends/memory/memory-operator-store.js';
import { PostgresOperatorStore } from '../../shared/backends/postgres/index.js';
import { defineJob } from '../../shared/job/job-definition.js';
import type { SlotBackend } from '../../shared/job/run-slot.js';
import type { OperatorStore } from '../../shared/slot/operator-ports.js';
import { useDynamo } from '../helpers/dynalite.js';
import { testBackend } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { deliver, hashKey, START, WINDOW } from '../helpers/one-window.js';
import { usePostgres } from '../helpers/postgres.js';

/*
 * Found by a review of done marks: an operator's `effects resolve --rerun` on a RUNNING slot whose lease has
 * ended (allowed then: only a live lease refused it) deleted a reservation whose run was frozen, not
 * dead. Before done marks the thawed run's done mark was an unconditional put of DONE on the
 * effect's own item (DynamoDB, memory), which brought the record back as DONE. Now its mark is a
 * number in the slot's done marks: the slot is still RUNNING at its epoch, so the fenced checkpoint
 * is accepted, and it covered a seq whose record was gone. The next delivery found no record and
 * sent again. (On Postgres the mark was an UPDATE of the reservation's own row, a no-op once the row
 * was deleted, so there the hole predates done marks.)
 *
 * Fixed: a write that deletes effect records is refused while the slot is RUNNING at all (reason
 * `running`, HolderRule in shared/slot/operator-ports.ts); the operator releases the slot first,
 * which fences the holder: its checkpoint is rejected and it marks its sends done on their own records.
 */

const SLOT = { jobId: 'review-late-marks', window: WINDOW };
const LEASE_MS = 60_000;
const FIRST = 'first@example.test';
const SECOND = 'second@example.test';

function deferred() {
  let resolve: () => void = () => {};
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

const dynamo = useDynamo();
const postgres = usePostgres();

const backends: readonly {
  readonly name: string;
  readonly open: () => Promise<{ backend: SlotBackend; operator: OperatorStore }>;
}[] = [
  {
    name: 'memory',
    open: async () => {
      const backend = memoryBackend({ hashKey });
      return { backend, operator: new MemoryOperatorStore({ table: backend.table }) };
    },
  },
  {
    name: 'DynamoDB',
    open: async () => {
      const client = dynamo.client();
      const tableName = await dynamo.freshTable();
      return {
        backend: testBackend(client, tableName),
        operator: new DynamoOperatorStore({ client, tableName }),
      };
    },
  },
  {
    name: 'Postgres',
    open: async () => {
      // The caller's clock, as the operator contract runs: the test moves time by `now` values.
      const schema = await postgres.freshSchema();
      const pool = postgres.pool({ applicationName: `slotguard-review-${schema}` });
      return {
        backend: postgres.backend(schema, { pool, leaseClock: 'caller' }),
        operator: new PostgresOperatorStore({ pool, schema, leaseClock: 'caller' }),
      };
    },
  },
];

/**
 * Epoch 1 of SLOT on `backend`: it sends FIRST, and the process freezes before the call returns.
 * `thaw` lets it go on with a second left, so it stops after that email; `run` delivers the slot again.
 */
async function frozenAfterFirstEmail(backend: SlotBackend) {
  const clock = new ManualClock(START);
  const sent: string[] = [];
  const frozen = deferred();
  const thawing = deferred();
  let thawed = false;
  const job = defineJob({
    id: SLOT.jobId,
    run: (ctx) =>
      ctx.onceEach([FIRST, SECOND], { key: (to) => to, concurrency: 1 }, async (to) => {
        sent.push(to);
        // SES has accepted the first email; the process freezes before the call returns.
        if (sent.length === 1) {
          frozen.resolve();
          await thawing.promise;
        }
      }),
  });
  const run = (invocationId: string, remainingTimeMs?: () => number) =>
    deliver({
      job,
      backend,
      clock,
      slot: SLOT,
      invocationId,
      options: { leaseMs: LEASE_MS },
      ...(remainingTimeMs ? { remainingTimeMs } : {}),
    });
  const first = run('frozen', () => (thawed ? 1_000 : 900_000));
  await frozen.promise;
  const thaw = () => {
    thawed = true;
    thawing.resolve();
    return first;
  };
  return { clock, sent, run, thaw };
}

/** Ten minutes on by the operator's clock: the frozen run's lease is long over; SES shows nothing yet. */
const OPERATOR_NOW = START + 10 * 60_000;

describe.each(backends)('done marks and an operator, on $name', ({ open }) => {
  it('does not email a recipient twice when an operator clears the reservation of a frozen run whose marks land after the clear', async () => {
    const { backend, operator } = await open();
    const { clock, sent, run, thaw } = await frozenAfterFirstEmail(backend);

    // The slot is still RUNNING at epoch 1, its holder frozen, not dead: the clear is refused.
    const cleared = await operator.resolveEffect(SLOT, hashKey(FIRST), 'clear', {
      expectedEpoch: 1,
      now: OPERATOR_NOW,
    });
    expect(cleared).toMatchObject({
      kind: 'refused',
      reason: 'running',
      current: { state: 'RUNNING', epoch: 1, owner: expect.stringContaining('frozen') },
    });
    expect(await backend.ledger.read(SLOT, hashKey(FIRST))).toMatchObject({ state: 'RESERVED', epoch: 1 });

    expect(await thaw()).toMatchObject({ status: 'yielded', reason: 'time', summary: { done: 1 } });
    // The thawed run's marks were accepted: nothing had claimed the slot since.
    expect((await backend.claims.read(SLOT))?.doneMarks?.['1']).toEqual({ below: 1, open: [] });

    await clock.advance(1_000);
    const second = await run('next-delivery');

    expect(second).toMatchObject({ status: 'completed', epoch: 2 });
    expect(sent.filter((to) => to === FIRST)).toHaveLength(1);
  });

  it('does not email a recipient twice when the operator releases the frozen run as the refusal says, and it thaws before the clear', async () => {
    const { backend, operator } = await open();
    const { clock, sent, run, thaw } = await frozenAfterFirstEmail(backend);

    const request = { expectedEpoch: 1, now: OPERATOR_NOW };
    expect(await operator.forceRelease(SLOT, { ...request, evenIfLeaseLive: false })).toMatchObject({
      kind: 'ok',
      record: { state: 'RELEASED', epoch: 1 },
    });
    // Fenced: its checkpoint is rejected, and it marks its send done on the effect's own record.
    expect(await thaw()).toMatchObject({ status: 'fenced', epoch: 1 });
    expect((await backend.claims.read(SLOT))?.doneMarks).toBeUndefined();
    expect(await backend.ledger.read(SLOT, hashKey(FIRST))).toMatchObject({ state: 'DONE', epoch: 1 });
    expect(await operator.resolveEffect(SLOT, hashKey(FIRST), 'clear', request)).toMatchObject({
      kind: 'effect-not-in-doubt',
      current: { state: 'DONE' },
    });

    await clock.advance(1_000);
    expect(await run('next-delivery')).toMatchObject({ status: 'completed', epoch: 2 });
    expect(sent).toEqual([FIRST, SECOND]);
  });

  it('does not email a recipient twice when the operator releases and clears before the frozen run thaws: its fenced mark puts the record back', async () => {
    const { backend, operator } = await open();
    const { clock, sent, run, thaw } = await frozenAfterFirstEmail(backend);

    const request = { expectedEpoch: 1, now: OPERATOR_NOW };
    await operator.forceRelease(SLOT, { ...request, evenIfLeaseLive: false });
    // Released, the reservation reads in doubt, and an operator who wrongly believes it unsent clears it.
    expect(await operator.resolveEffect(SLOT, hashKey(FIRST), 'clear', request)).toMatchObject({
      kind: 'resolved',
    });
    expect(await backend.ledger.read(SLOT, hashKey(FIRST))).toBeUndefined();

    // The run thaws fenced: its send is marked DONE on the effect's own record, which it writes anew.
    expect(await thaw()).toMatchObject({ status: 'fenced', epoch: 1 });
    expect(await backend.ledger.read(SLOT, hashKey(FIRST))).toMatchObject({ state: 'DONE', epoch: 1 });

    await clock.advance(1_000);
    expect(await run('next-delivery')).toMatchObject({ status: 'completed', epoch: 2 });
    expect(sent).toEqual([FIRST, SECOND]);
  });
});
