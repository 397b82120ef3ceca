import { StoreError } from '../../errors.js';
import type { Claim, EffectLedger, EffectRecord, ReserveOutcome } from '../../slot/ports.js';
import { EffectState } from '../../slot/ports.js';
import type { Slot } from '../../slot/slot.js';
import type { LeaseClock, PostgresClaimStore } from './postgres-claim-store.js';
import { translateError } from './postgres-errors.js';
import type { PostgresExecutor } from './postgres-executor.js';
import { assertKeyHash, assertOwner, assertSlot } from './postgres-keys.js';
import type { SlotguardSql } from './sql.js';

/** What a PostgresEffectLedger runs on; postgresBackend builds it. */
export interface PostgresEffectLedgerOptions {
  readonly executor: PostgresExecutor;
  readonly sql: SlotguardSql;
  /** The schema, for error messages. */
  readonly schema: string;
  readonly leaseClock: LeaseClock;
  /** The claim store of the same schema, to name the epoch that fenced a reservation out. */
  readonly claims: PostgresClaimStore;
}

type EffectRow = {
  readonly key_hash: string;
  readonly state: EffectState;
  readonly epoch: number;
  readonly owner: string;
};

type BatchRow = { readonly lease_held: boolean; readonly inserted: string[] };
type TakeOverRow = { readonly lease_held: boolean; readonly taken: string[] };

/** Keys per statement for marks and reads: well under Postgres's parameter and array limits. */
const CHUNK = 1_000;
/** Rows per page when listing a window's effects. */
const PAGE = 1_000;

/**
 * The effect half of the Postgres backend: one row per (job, window, effect key hash).
 *
 * Timeline of one effect:
 *   reserve  one statement: lock the slot row FOR SHARE if our lease holds, then INSERT … ON
 *            CONFLICT DO NOTHING: RESERVED, epoch e, owner o                 → ours to perform
 *   perform  the caller sends the email
 *   mark     UPDATE to DONE where the reservation is ours                   → later runs skip it
 * A crash between reserve and mark leaves RESERVED with epoch e; a later epoch reports it IN DOUBT
 * (the email may or may not have gone) instead of sending again. A holder that has been taken over
 * reserves nothing: the lease check in the same statement fails first. A batch abandoned at the
 * client-side deadline before its COMMIT was sent reserves nothing either, even once a frozen server
 * thaws (see PostgresExecutor.query); had it committed unseen, its keys would read as in doubt to
 * the next epoch although nothing was sent.
 */
export class PostgresEffectLedger implements EffectLedger {
  readonly #executor: PostgresExecutor;
  readonly #sql: SlotguardSql;
  readonly #schema: string;
  readonly #checkLeaseEnd: boolean;
  readonly #claims: PostgresClaimStore;

  constructor(options: PostgresEffectLedgerOptions) {
    this.#executor = options.executor;
    this.#sql = options.sql;
    this.#schema = options.schema;
    // On the caller's clock there is no `now` here to judge the lease end by; the holder's own
    // LeaseKeeper stops it in time, and the epoch fences it exactly as in the DynamoDB backend.
    this.#checkLeaseEnd = options.leaseClock === 'database';
    this.#claims = options.claims;
  }

  /** The port's single-key reservation: a batch of one. */
  async reserve(claim: Claim, keyHash: string, options: { rerunInDoubt: boolean }): Promise<ReserveOutcome> {
    const [outcome] = await this.reserveMany(claim, [keyHash], options);
    return outcome!;
  }

  /**
   * Reserves several effects under one lease check, one statement for the lot in the common case.
   * Returns one outcome per key, in the order given (a key given twice gets the same outcome twice).
   */
  async reserveMany(
    claim: Claim,
    keyHashes: readonly string[],
    options: { rerunInDoubt: boolean },
  ): Promise<ReserveOutcome[]> {
    assertClaim(claim);
    for (const keyHash of keyHashes) assertKeyHash(keyHash);
    const outcomes = new Map<string, ReserveOutcome>();
    // Sorted, so overlapping batches lock their rows in one order and cannot deadlock.
    let pending = [...new Set(keyHashes)].sort();
    for (let round = 1; pending.length > 0; round++) {
      if (round > 5) {
        throw new StoreError(
          'reserve',
          `${pending.length} effects of ${describeClaim(claim)} were released by their holder each time they were read, ` +
            'five times in a row; try the run again',
        );
      }
      const batch = await this.#query<BatchRow>('reserve', claim, this.#sql.reserveEffects, [
        this.#checkLeaseEnd,
        pending,
      ]);
      if (!batch[0]?.lease_held) {
        await this.#fenceAll(claim, pending, outcomes);
        break;
      }
      const inserted = new Set(batch[0].inserted);
      for (const keyHash of inserted) outcomes.set(keyHash, { kind: 'reserved', rerun: false });
      const conflicts = pending.filter((keyHash) => !inserted.has(keyHash));
      pending = [];
      if (conflicts.length === 0) break;
      const current = await this.#readRows(claim.slot, conflicts, claim);
      const stale: EffectRow[] = [];
      for (const keyHash of conflicts) {
        const row = current.get(keyHash);
        // Gone since the insert met it (its holder unreserved it): try to reserve it again.
        if (!row) pending.push(keyHash);
        else if (isStale(row, claim) && options.rerunInDoubt) stale.push(row);
        else outcomes.set(keyHash, outcomeOfRow(row, claim));
      }
      if (stale.length > 0) await this.#takeOver(claim, stale, outcomes);
    }
    return keyHashes.map((keyHash) => outcomes.get(keyHash)!);
  }

  /** Marks our own reservations done, a thousand keys a statement. */
  async markDone(claim: Claim, keyHashes: readonly string[]): Promise<void> {
    assertClaim(claim);
    for (const keyHash of keyHashes) assertKeyHash(keyHash);
    for (let start = 0; start < keyHashes.length; start += CHUNK) {
      await this.#query('markDone', claim, this.#sql.markEffectsDone, [
        keyHashes.slice(start, start + CHUNK),
      ]);
    }
  }

  async unreserve(claim: Claim, keyHash: string): Promise<void> {
    assertClaim(claim);
    assertKeyHash(keyHash);
    // Deleting nothing is fine: the reservation was already released (our own retried delete).
    await this.#query('unreserve', claim, this.#sql.unreserveEffect, [keyHash]);
  }

  async read(slot: Slot, keyHash: string): Promise<EffectRecord | undefined> {
    assertSlot(slot);
    assertKeyHash(keyHash);
    const row = (await this.#readRows(slot, [keyHash])).get(keyHash);
    return row ? toRecord(row) : undefined;
  }

  async *list(slot: Slot): AsyncIterable<EffectRecord> {
    assertSlot(slot);
    let after = '';
    for (;;) {
      let rows: EffectRow[];
      try {
        rows = await this.#executor.read<EffectRow>(this.#sql.listEffects, [
          slot.jobId,
          slot.window,
          after,
          PAGE,
        ]);
      } catch (error) {
        throw translateError('list', describeSlot(slot), this.#schema, error);
      }
      for (const row of rows) yield toRecord(row);
      if (rows.length < PAGE) return;
      after = rows[rows.length - 1]!.key_hash;
    }
  }

  /**
   * The opt-in re-run of in-doubt effects: replace exactly the stale reservations read, under the
   * lease check. A key whose row changed in between is explained by reading it again.
   */
  async #takeOver(claim: Claim, stale: readonly EffectRow[], outcomes: Map<string, ReserveOutcome>) {
    const [row] = await this.#query<TakeOverRow>('reserve', claim, this.#sql.takeOverEffects, [
      this.#checkLeaseEnd,
      stale.map((r) => r.key_hash),
      stale.map((r) => r.epoch),
      stale.map((r) => r.owner),
    ]);
    const keys = stale.map((r) => r.key_hash);
    if (!row?.lease_held) return this.#fenceAll(claim, keys, outcomes);
    const taken = new Set(row.taken);
    for (const keyHash of taken) outcomes.set(keyHash, { kind: 'reserved', rerun: true });
    const lost = keys.filter((keyHash) => !taken.has(keyHash));
    if (lost.length === 0) return;
    const current = await this.#readRows(claim.slot, lost, claim);
    for (const r of stale) {
      if (taken.has(r.key_hash)) continue;
      const now = current.get(r.key_hash);
      if (now?.state === EffectState.Done) outcomes.set(r.key_hash, { kind: 'done' });
      else if (now && now.owner === claim.owner && now.epoch === claim.epoch) {
        outcomes.set(r.key_hash, { kind: 'reserved', rerun: true });
      } else outcomes.set(r.key_hash, { kind: 'in-doubt', epoch: now?.epoch ?? r.epoch });
    }
  }

  /** Our lease no longer holds: every key is fenced, by the epoch now on the slot. */
  async #fenceAll(claim: Claim, keys: readonly string[], outcomes: Map<string, ReserveOutcome>) {
    const epoch = (await this.#claims.currentEpoch(claim.slot)) ?? claim.epoch;
    for (const keyHash of keys) outcomes.set(keyHash, { kind: 'fenced', epoch });
  }

  async #readRows(slot: Slot, keyHashes: readonly string[], claim?: Claim): Promise<Map<string, EffectRow>> {
    const rows = new Map<string, EffectRow>();
    for (let start = 0; start < keyHashes.length; start += CHUNK) {
      let page: EffectRow[];
      try {
        page = await this.#executor.read<EffectRow>(this.#sql.readEffects, [
          slot.jobId,
          slot.window,
          keyHashes.slice(start, start + CHUNK),
        ]);
      } catch (error) {
        throw translateError('read', claim ? describeClaim(claim) : describeSlot(slot), this.#schema, error);
      }
      for (const row of page) rows.set(row.key_hash, row);
    }
    return rows;
  }

  /** A statement whose first five parameters are job, window, owner, epoch (and its own after). */
  async #query<R extends Record<string, unknown>>(
    operation: string,
    claim: Claim,
    text: string,
    rest: unknown[],
  ): Promise<R[]> {
    try {
      return await this.#executor.query<R>(text, [
        claim.slot.jobId,
        claim.slot.window,
        claim.owner,
        claim.epoch,
        ...rest,
      ]);
    } catch (error) {
      throw translateError(operation, describeClaim(claim), this.#schema, error);
    }
  }
}

/** A reservation an earlier epoch made and never marked done. */
function isStale(row: EffectRow, claim: Claim): boolean {
  return row.state === EffectState.Reserved && row.epoch < claim.epoch;
}

function outcomeOfRow(row: EffectRow, claim: Claim): ReserveOutcome {
  if (row.state === EffectState.Done) return { kind: 'done' };
  // Our own reservation: a key given twice, or a retry whose first try committed.
  if (row.owner === claim.owner && row.epoch === claim.epoch) return { kind: 'reserved', rerun: false };
  if (row.epoch > claim.epoch) return { kind: 'fenced', epoch: row.epoch };
  return { kind: 'in-doubt', epoch: row.epoch };
}

function toRecord(row: EffectRow): EffectRecord {
  return { keyHash: row.key_hash, state: row.state, epoch: row.epoch, owner: row.owner };
}

function assertClaim(claim: Claim): void {
  assertSlot(claim.slot);
  assertOwner(claim.owner);
}

const describeSlot = (slot: Slot) => `slot ${slot.jobId} ${slot.window}`;
const describeClaim = (claim: Claim) =>
  `an effect of slot ${claim.slot.jobId} ${claim.slot.window} (epoch ${claim.epoch})`;
