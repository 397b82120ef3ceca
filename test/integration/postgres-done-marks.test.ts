import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { coveredByMarksSql } from '../../shared/backends/postgres/sql.js';
import { ConfigurationError, StoreError } from '../../shared/errors.js';
import { coveredByMarks } from '../../shared/slot/done-marks.js';
import type { DoneMarks, EffectRecord, EffectState } from '../../shared/slot/ports.js';
import { runSummary } from '../contract/backend-contract.js';
import { leaseRequest, slotSequence, usePostgres } from '../helpers/postgres.js';

const postgres = usePostgres();

const freshSlot = slotSequence('marks-job');
const walking = { positions: { customers: 'c000004' }, walked: false };
const progress = runSummary(1, 0);

/** A window claimed on the caller's clock, at its own instant. */
async function claimedWindow() {
  const schema = await postgres.freshSchema();
  const backend = postgres.backend(schema, { leaseClock: 'caller' });
  const slot = freshSlot();
  const now = Date.parse(slot.window);
  const outcome = await backend.claims.claim(slot, leaseRequest('a', slot), now);
  if (outcome.kind !== 'claimed') throw new Error(`expected a claim, got ${outcome.kind}`);
  return { schema, backend, slot, now, claim: outcome.claim };
}

describe('Postgres done marks', () => {
  /*
   * The writes that must never touch a covered reservation check coverage in their own statement
   * (coveredByMarksSql); reads apply the one rule in TypeScript (coveredByMarks). They must agree
   * on every record and every set of marks, or a reservation would read DONE and be settled anyway.
   */
  it('covers exactly the reservations coveredByMarks covers, in SQL as in TypeScript', async () => {
    const seq = fc.integer({ min: 0, max: 12 });
    const epochMarks = fc.record({
      below: fc.integer({ min: -1, max: 12 }),
      open: fc.uniqueArray(seq, { maxLength: 5 }),
    });
    const marks = fc.option(fc.dictionary(fc.constantFrom('1', '2', '3'), epochMarks), { nil: undefined });
    const record = fc.record({
      state: fc.constantFrom<EffectState>('RESERVED', 'DONE', 'FAILED'),
      epoch: fc.integer({ min: 1, max: 4 }),
      seq: fc.option(seq, { nil: undefined }),
    });
    const cases = fc.array(fc.tuple(record, marks), { minLength: 1, maxLength: 50 });
    await fc.assert(
      fc.asyncProperty(cases, async (drawn) => {
        const rows = await postgres.sql<{ covered: boolean }>(
          `SELECT ${coveredByMarksSql('e.marks', 'e')} AS covered
           FROM unnest($1::jsonb[], $2::text[], $3::integer[], $4::bigint[]) WITH ORDINALITY
             AS e(marks, state, epoch, seq, n)
           ORDER BY e.n`,
          [
            drawn.map(([, m]) => (m === undefined ? null : JSON.stringify(m))),
            drawn.map(([r]) => r.state),
            drawn.map(([r]) => r.epoch),
            drawn.map(([r]) => r.seq ?? null),
          ],
        );
        const expected = drawn.map(([r, m]) =>
          coveredByMarks({ ...r, keyHash: 'k', owner: 'a', attempts: 0 } as EffectRecord, m as DoneMarks),
        );
        expect(rows.map((row) => row.covered)).toEqual(expected);
      }),
      { numRuns: 60 },
    );
  });

  it('stores each key of a batch under its own number, and refuses numbers that are not one per key', async () => {
    const { backend, slot, now, claim } = await claimedWindow();
    expect(
      await backend.ledger.reserveMany(claim, ['k2', 'k0', 'k1'], {
        rerunInDoubt: false,
        now,
        seqs: [2, 0, 1],
      }),
    ).toEqual([1, 2, 3].map(() => ({ kind: 'reserved', rerun: false, attempt: 1 })));
    for (const [keyHash, seq] of [
      ['k0', 0],
      ['k1', 1],
      ['k2', 2],
    ] as const) {
      expect(await backend.ledger.read(slot, keyHash)).toMatchObject({ state: 'RESERVED', seq });
    }
    await expect(
      backend.ledger.reserveMany(claim, ['k3', 'k4'], { rerunInDoubt: false, now, seqs: [3] }),
    ).rejects.toThrow(ConfigurationError);
    await expect(backend.ledger.reserve(claim, 'k3', { rerunInDoubt: false, now, seq: -1 })).rejects.toThrow(
      /given number -1 as its sequence number/,
    );
    expect(await backend.ledger.read(slot, 'k3')).toBeUndefined();
  });

  it('gives a refused effect retried by a later run that run’s number, which its own marks then cover', async () => {
    const { backend, slot, now, claim } = await claimedWindow();
    await backend.ledger.reserve(claim, 'k0', { rerunInDoubt: false, now, seq: 0 });
    await backend.ledger.recordFailure(claim, 'k0', {
      attempts: 1,
      retryAt: now + 1,
      reason: 'throttled',
      seq: 0,
    });
    await backend.claims.checkpoint(claim, walking, progress, { '1': { below: 1, open: [] } });
    expect(await backend.ledger.read(slot, 'k0')).toMatchObject({ state: 'FAILED', seq: 0 });
    await backend.claims.release(
      claim,
      { kind: 'yield', checkpoint: walking, runsWithoutProgress: 0 },
      now + 2,
    );
    const next = await backend.claims.claim(slot, leaseRequest('b', slot), now + 3);
    if (next.kind !== 'claimed') throw new Error(next.kind);
    expect(
      await backend.ledger.reserve(next.claim, 'k0', { rerunInDoubt: false, now: now + 3, seq: 5 }),
    ).toEqual({
      kind: 'reserved',
      rerun: false,
      attempt: 2,
    });
    expect(await backend.ledger.read(slot, 'k0')).toMatchObject({ state: 'RESERVED', epoch: 2, seq: 5 });
    const marks = { ...next.claim.window.doneMarks, '2': { below: 6, open: [] } };
    expect(await backend.claims.checkpoint(next.claim, walking, runSummary(2, 0), marks)).toEqual({
      kind: 'ok',
    });
    expect(await backend.ledger.read(slot, 'k0')).toMatchObject({ state: 'DONE', epoch: 2, seq: 5 });
  });

  it('refuses to store malformed marks, and reports stored ones it cannot read instead of trusting them', async () => {
    const { schema, backend, slot, claim } = await claimedWindow();
    const malformed = { '1': { below: 1.5, open: [] } };
    await expect(backend.claims.checkpoint(claim, walking, progress, malformed)).rejects.toThrow(
      ConfigurationError,
    );
    expect((await backend.claims.read(slot))?.doneMarks).toBeUndefined();

    await postgres.sql(`UPDATE ${schema}.slots SET done_marks = '{"1": {"below": 2}}' WHERE job_id = $1`, [
      slot.jobId,
    ]);
    await expect(backend.claims.read(slot)).rejects.toThrow(StoreError);
    await backend.ledger.reserve(claim, 'k0', { rerunInDoubt: false, now: claim.leaseEndsAt - 1, seq: 0 });
    await expect(backend.ledger.read(slot, 'k0')).rejects.toThrow(/done_marks could not be read/);
  });
});
