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
import { usePostgres } from '../helpers/postgres.js';
import { deliver, hashKey, START, WINDOW } from './review-fixtures.js';

/*
 * Review of done marks: an operator's `effects resolve --rerun` on a RUNNING slot whose lease has
 * ended (allowed: only a live lease refuses it) deletes a reservation whose run is frozen, not dead.
 * Before done marks the thawed run's done mark was an unconditional put of DONE on the effect's own
 * item (DynamoDB, memory), which brought the record back as DONE. Now its mark is a number in the
 * slot's done marks: the slot is still RUNNING at its epoch, so the fenced checkpoint is accepted,
 * and it covers a seq whose record is gone. The next delivery finds no record and sends again.
 * (On Postgres the mark was an UPDATE of the reservation's own row, a no-op once the row was
 * deleted, so there the hole predates done marks.)
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

describe.each(backends)('done marks and an operator, on $name', ({ open }) => {
  it('does not email a recipient twice when an operator clears the reservation of a frozen run whose marks land after the clear', async () => {
    const { backend, operator } = await open();
    const clock = new ManualClock(START);
    const sent: string[] = [];
    const frozen = deferred();
    const thaw = deferred();
    let thawed = false;
    const job = defineJob({
      id: SLOT.jobId,
      run: (ctx) =>
        ctx.onceEach([FIRST, SECOND], { key: (to) => to, concurrency: 1 }, async (to) => {
          sent.push(to);
          // SES has accepted the first email; the process freezes before the call returns.
          if (sent.length === 1) {
            frozen.resolve();
            await thaw.promise;
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

    // Epoch 1: the invocation thaws with a second left, so it stops after its first email.
    const first = run('frozen', () => (thawed ? 1_000 : 900_000));
    await frozen.promise;

    // Ten minutes on by the operator's clock the lease is long over; SES shows nothing yet.
    const cleared = await operator.resolveEffect(SLOT, hashKey(FIRST), 'clear', {
      expectedEpoch: 1,
      now: START + 10 * 60_000,
    });
    expect(cleared.kind).toBe('resolved');

    thawed = true;
    thaw.resolve();
    expect(await first).toMatchObject({ status: 'yielded', reason: 'time', summary: { done: 1 } });
    // The thawed run's marks were accepted: nothing had claimed the slot since.
    expect((await backend.claims.read(SLOT))?.doneMarks?.['1']).toEqual({ below: 1, open: [] });

    await clock.advance(1_000);
    const second = await run('next-delivery');

    expect(second).toMatchObject({ status: 'completed', epoch: 2 });
    expect(sent.filter((to) => to === FIRST)).toHaveLength(1);
  });
});
