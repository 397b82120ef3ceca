import { ConfigurationError, StoreError } from '../../errors.js';
import { providerWordOutcomeOfConflict, reserveOutcomeOfConflict } from '../../slot/conflict-outcomes.js';
import {
  coveredByMarks,
  effectiveInWindow,
  type WindowDoneMarks,
  windowDoneMarksOf,
} from '../../slot/done-marks.js';
import type {
  Claim,
  EffectFailure,
  EffectLedger,
  EffectRecord,
  ProviderWord,
  ProviderWordOutcome,
  ReserveOptions,
  ReserveOutcome,
} from '../../slot/ports.js';
import { EffectState } from '../../slot/ports.js';
import { canonicalClaim, canonicalSlot, describe, type Slot, windowSlot } from '../../slot/slot.js';
import { doneMarksOf, type LeaseClock, type PostgresClaimStore, shardParam } from './postgres-claim-store.js';
import { translateError } from './postgres-errors.js';
import type { PostgresExecutor } from './postgres-executor.js';
import { assertKeyHash, assertOwner, storableText } from './postgres-keys.js';
import type { SlotguardSql, SlotRowSql } from './sql.js';

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

/** An effect row as every read returns it (EFFECT_COLUMNS in sql.ts); the operator store's too. */
export type EffectRow = {
  readonly key_hash: string;
  readonly state: EffectState;
  readonly epoch: number;
  readonly owner: string;
  readonly attempts: number;
  readonly retry_at: Date | null;
  readonly reason: string | null;
  /** The shard whose run wrote it; NULL in a window that is not split. */
  readonly shard: number | null;
  /** The reserving run's clock (the database's, on a row reserved before schema version 4). */
  readonly reserved_at: Date;
  /** The provider's word on the reservation's message (all NULL until it says anything). */
  readonly provider_outcome: ProviderWord['outcome'] | null;
  readonly provider_event: string | null;
  readonly provider_at: Date | null;
  readonly provider_message_id: string | null;
  /** The reserving run's sequence number (bigint, which pg returns as text); NULL: none. */
  readonly seq: string | null;
};

/** Options of reserveMany: the port's, with a sequence number per key instead of one. */
export interface ReserveManyOptions extends Omit<ReserveOptions, 'seq'> {
  /**
   * Each key's sequence number (ReserveOptions.seq), in the order the keys are given; a key given
   * twice takes its first.
   * @default none: no marks cover these reservations
   */
  readonly seqs?: readonly number[];
}

type BatchRow = { readonly lease_held: boolean; readonly inserted: string[] };
type ReplaceRow = { readonly lease_held: boolean; readonly replaced: string[] };

/** A row read to be replaced as it was: a due retry of a refusal, or a re-run of an in-doubt effect. */
interface Replacement {
  readonly seen: EffectRecord;
  /** The opt-in re-run of an in-doubt effect (not a retry of a refused one). */
  readonly rerun: boolean;
}

/** Keys per statement for marks and reads: well under Postgres's parameter and array limits. */
const CHUNK = 1_000;
/** Rows per page when listing a window's effects. */
const PAGE = 1_000;
/** Longest refusal reason kept (a NotPerformedReason is a short word). */
const MAX_REASON_TEXT = 200;
/** Longest provider event name and message id kept (SES's are short words and ~60-character ids). */
const MAX_PROVIDER_TEXT = 200;

/**
 * The effect half of the Postgres backend: one row per (job, window, effect key hash). A sharded
 * window keeps one ledger, whichever shard writes to it: each row records the shard that wrote it,
 * each write checks the lease on the claim's own row (the shard's, for a shard's claim), and epochs
 * compare only within a shard (reserveOutcomeOfConflict answers another shard's row `elsewhere`).
 *
 * Timeline of one effect:
 *   reserve  one statement: lock the slot row FOR SHARE if our lease holds, then INSERT … ON
 *            CONFLICT DO NOTHING: RESERVED, epoch e, owner o                 → ours to perform
 *   perform  the caller sends the email
 *   mark     the run's done marks on its slot row (ClaimStore.checkpoint) cover its number, or,
 *            for a reservation made without one, UPDATE to DONE where it is ours → later runs skip it
 *   refused  UPDATE to FAILED (attempts, retry_at) where it is ours          → a later run retries it
 *   word     UPDATE of the provider_* columns from the provider's events (recordProviderWord),
 *            on the reservation of the word's epoch, by a recorder that holds no lease
 *   settle   UPDATE of a dead epoch's exact reservation, by that word (settleInDoubt):
 *            DONE, or FAILED due now                                          → the retry sends it
 * A crash between reserve and mark leaves RESERVED with epoch e; a later epoch reports it IN DOUBT
 * (the email may or may not have gone) instead of sending again. A holder that has been taken over
 * reserves nothing: the lease check in the same statement fails first. A batch abandoned at the
 * client-side deadline before its COMMIT was sent reserves nothing either, even once a frozen server
 * thaws (see PostgresExecutor.query); had it committed unseen, its keys would read as in doubt to
 * the next epoch although nothing was sent.
 *
 * Done marks: a RESERVED row whose number its epoch's marks cover (coveredByMarks) is DONE as it
 * stands. Reads apply the marks of the row's own slot row (the window's, or its shard's) after
 * reading the rows (effectiveInWindow); a reservation decides by the marks its claim was handed
 * (reserveOutcomeOfConflict), final for every earlier epoch since a fenced run's checkpoint never
 * lands; and the writes that must leave a covered reservation alone (the provider's word, settling
 * one in doubt, re-running one) check the stored marks in their own statement (coveredByMarksSql).
 *
 * A refused effect's `retry_at` is compared with the caller's `now` (ReserveOptions.now), on the
 * database lease clock too: the runner that recorded the refusal computed `retry_at` on its own
 * clock, and so does the run deciding whether it is due. Which clock judges a retry only moves it
 * by the skew between replicas; what keeps it from being performed twice is the replacement
 * conditioned on the exact row read, under the same lease check as every reservation.
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
  async reserve(claim: Claim, keyHash: string, options: ReserveOptions): Promise<ReserveOutcome> {
    const { seq, ...rest } = options;
    const [outcome] = await this.reserveMany(claim, [keyHash], {
      ...rest,
      ...(seq !== undefined ? { seqs: [seq] } : {}),
    });
    return outcome!;
  }

  /*
   * Timeline of a batch of reservations:
   *   1. sql.reserveEffects: under the lease check, insert every key; most are new → reserved
   *   2. the keys that met a row are read, and each row decided by the rules every backend shares
   *      (reserveOutcomeOfConflict): done (also when the claim's done marks cover it, or it is our
   *      own under another number), in doubt, fenced, retry-later, failed, or ours already
   *   3. rows to replace (a refusal due for its retry, an in-doubt effect re-run by policy):
   *      sql.replaceEffects, under the same lease check, each exactly as read
   *   4. a retry that lost its row to someone else since the read goes round again from 1
   * The common case (new keys) is statement 1 alone.
   */
  /**
   * Reserves several effects under one lease check, one statement for the lot in the common case.
   * Returns one outcome per key, in the order given (a key given twice gets the same outcome twice).
   */
  async reserveMany(
    claim: Claim,
    keyHashes: readonly string[],
    options: ReserveManyOptions,
  ): Promise<ReserveOutcome[]> {
    claim = checkedClaim(claim);
    for (const keyHash of keyHashes) assertKeyHash(keyHash);
    const seqOf = sequenceNumbers(keyHashes, options.seqs);
    const seqsOf = (keys: readonly string[]) => keys.map((keyHash) => seqOf.get(keyHash) ?? null);
    const outcomes = new Map<string, ReserveOutcome>();
    // Sorted, so overlapping batches lock their rows in one order and cannot deadlock.
    let pending = [...new Set(keyHashes)].sort();
    for (let round = 1; pending.length > 0; round++) {
      if (round > 5) {
        throw new StoreError(
          'reserve',
          `${pending.length} effects of ${describeClaim(claim)} changed under five reservations in a row; ` +
            'the run stops and a later run retries them',
        );
      }
      const batch = await this.#query<BatchRow>('reserve', claim, this.#rowsOf(claim).reserveEffects, [
        this.#checkLeaseEnd,
        pending,
        new Date(options.now),
        seqsOf(pending),
        ...shardParam(claim.slot),
      ]);
      if (!batch[0]?.lease_held) {
        await this.#fenceAll(claim, pending, outcomes);
        break;
      }
      const inserted = new Set(batch[0].inserted);
      for (const keyHash of inserted) outcomes.set(keyHash, { kind: 'reserved', rerun: false, attempt: 1 });
      const conflicts = pending.filter((keyHash) => !inserted.has(keyHash));
      pending = [];
      if (conflicts.length === 0) break;
      const current = await this.#readRows(claim.slot, conflicts, claim);
      const replacements: Replacement[] = [];
      for (const keyHash of conflicts) {
        const row = current.get(keyHash);
        // Gone since the insert met it (its holder unreserved it): try to reserve it again.
        if (!row) {
          pending.push(keyHash);
          continue;
        }
        const seq = seqOf.get(keyHash);
        const decided = reserveOutcomeOfConflict(toRecord(row), claim, {
          rerunInDoubt: options.rerunInDoubt,
          now: options.now,
          ...(seq !== undefined ? { seq } : {}),
        });
        if (decided.kind === 'take-over') replacements.push({ seen: decided.current, rerun: true });
        else if (decided.kind === 'retry') replacements.push({ seen: decided.current, rerun: false });
        else outcomes.set(keyHash, decided);
      }
      if (replacements.length > 0) {
        pending.push(...(await this.#replace(claim, replacements, outcomes, options.now, seqsOf)));
      }
      pending.sort();
    }
    return keyHashes.map((keyHash) => outcomes.get(keyHash)!);
  }

  /** Marks our own reservations done, a thousand keys a statement. */
  async markDone(claim: Claim, keyHashes: readonly string[]): Promise<void> {
    claim = checkedClaim(claim);
    for (const keyHash of keyHashes) assertKeyHash(keyHash);
    for (let start = 0; start < keyHashes.length; start += CHUNK) {
      await this.#query('markDone', claim, this.#sql.markEffectsDone, [
        keyHashes.slice(start, start + CHUNK),
        claim.slot.shard ?? null,
      ]);
    }
  }

  // Timeline: sql.recordEffectFailure.
  async recordFailure(claim: Claim, keyHash: string, failure: EffectFailure): Promise<void> {
    claim = checkedClaim(claim);
    assertKeyHash(keyHash);
    // Updating nothing is fine: our own write whose reply was lost, or a reservation a takeover made
    // its own; either way nothing is left for this claim to record.
    await this.#query('recordFailure', claim, this.#sql.recordEffectFailure, [
      keyHash,
      failure.attempts,
      failure.retryAt !== undefined ? new Date(failure.retryAt) : null,
      storableText(failure.reason, MAX_REASON_TEXT),
      failure.seq ?? null,
    ]);
  }

  async unreserve(claim: Claim, keyHash: string): Promise<void> {
    claim = checkedClaim(claim);
    assertKeyHash(keyHash);
    // Deleting nothing is fine: the reservation was already released (our own retried delete).
    await this.#query('unreserve', claim, this.#sql.unreserveEffect, [keyHash]);
  }

  async read(slot: Slot, keyHash: string): Promise<EffectRecord | undefined> {
    const window = windowSlot(canonicalSlot(slot));
    assertKeyHash(keyHash);
    return (await this.#readAsTheyStand(window, [keyHash])).get(keyHash);
  }

  /*
   * Each page as it stands (effectiveInWindow): the window's done marks are read once, when the
   * first reservation they could cover comes up (none for a window no run has marked by number),
   * after the page that holds it. Marks only ever cover more, so a row is never judged by marks
   * older than itself; a later page's rows may be newer than the marks, and a reservation that
   * marks written since would cover reads RESERVED, as it did a moment before.
   */
  async *list(slot: Slot): AsyncIterable<EffectRecord> {
    const window = windowSlot(canonicalSlot(slot));
    let marks: WindowDoneMarks | undefined;
    let after = '';
    for (;;) {
      let rows: EffectRow[];
      try {
        rows = await this.#executor.read<EffectRow>(this.#sql.listEffects, [
          window.jobId,
          window.window,
          after,
          PAGE,
        ]);
      } catch (error) {
        throw translateError('list', describeSlot(window), this.#schema, error);
      }
      const records = rows.map(toRecord);
      if (marks === undefined && records.some(coverable)) marks = await this.#doneMarks(window, null);
      for (const record of records) yield marks ? effectiveInWindow(record, marks) : record;
      if (rows.length < PAGE) return;
      after = rows[rows.length - 1]!.key_hash;
    }
  }

  // Timeline: sql.recordProviderWord; a miss is explained by the row as it stands now (DONE, also
  // when done marks cover it: `done`).
  async recordProviderWord(slot: Slot, keyHash: string, word: ProviderWord): Promise<ProviderWordOutcome> {
    const window = windowSlot(canonicalSlot(slot));
    assertKeyHash(keyHash);
    const written = await this.#write('recordProviderWord', window, this.#sql.recordProviderWord, [
      keyHash,
      word.epoch,
      word.outcome,
      storableText(word.event, MAX_PROVIDER_TEXT),
      new Date(word.at),
      storableText(word.messageId, MAX_PROVIDER_TEXT),
    ]);
    if (written) return 'recorded';
    const current = (await this.#readAsTheyStand(window, [keyHash])).get(keyHash);
    return providerWordOutcomeOfConflict(current, word);
  }

  // Timeline: sql.settleInDoubtDone and settleInDoubtRetry; a reservation done marks cover is not
  // in doubt, and neither statement settles it (false).
  async settleInDoubt(slot: Slot, stale: EffectRecord, to: 'done' | 'retry', now: number): Promise<boolean> {
    const window = windowSlot(canonicalSlot(slot));
    assertKeyHash(stale.keyHash);
    const reservation = [stale.keyHash, stale.epoch, stale.owner];
    return to === 'done'
      ? this.#write('settleInDoubt', window, this.#sql.settleInDoubtDone, reservation)
      : this.#write('settleInDoubt', window, this.#sql.settleInDoubtRetry, [
          ...reservation,
          stale.attempts + 1,
          new Date(now),
        ]);
  }

  /** A write to one effect row of a window, by whoever holds no claim; answers whether it matched. */
  async #write(operation: string, window: Slot, text: string, rest: unknown[]): Promise<boolean> {
    try {
      const rows = await this.#executor.query(text, [window.jobId, window.window, ...rest]);
      return rows.length > 0;
    } catch (error) {
      throw translateError(operation, `an effect of ${describeSlot(window)}`, this.#schema, error);
    }
  }

  /**
   * Replaces rows exactly as they were read, under the lease check (sql.replaceEffects). Returns the
   * keys of retries whose row changed since the read, for another round. An in-doubt re-run that
   * lost its row is answered from a fresh read, as the DynamoDB backend answers it: done, ours, or
   * still in doubt.
   */
  async #replace(
    claim: Claim,
    replacements: readonly Replacement[],
    outcomes: Map<string, ReserveOutcome>,
    now: number,
    seqsOf: (keys: readonly string[]) => (number | null)[],
  ): Promise<string[]> {
    const seen = replacements.map((r) => r.seen);
    const [row] = await this.#query<ReplaceRow>('reserve', claim, this.#rowsOf(claim).replaceEffects, [
      this.#checkLeaseEnd,
      seen.map((r) => r.keyHash),
      seen.map((r) => r.state),
      seen.map((r) => r.epoch),
      seen.map((r) => r.owner),
      seen.map((r) => r.attempts),
      new Date(now),
      seqsOf(seen.map((r) => r.keyHash)),
      ...shardParam(claim.slot),
    ]);
    if (!row?.lease_held) {
      await this.#fenceAll(
        claim,
        seen.map((r) => r.keyHash),
        outcomes,
      );
      return [];
    }
    const replaced = new Set(row.replaced);
    const retryAgain: string[] = [];
    const lostReruns: EffectRecord[] = [];
    for (const { seen: before, rerun } of replacements) {
      const attempt = before.attempts + 1;
      if (replaced.has(before.keyHash)) outcomes.set(before.keyHash, { kind: 'reserved', rerun, attempt });
      else if (rerun) lostReruns.push(before);
      else retryAgain.push(before.keyHash);
    }
    if (lostReruns.length === 0) return retryAgain;
    const current = await this.#readAsTheyStand(
      windowSlot(claim.slot),
      lostReruns.map((r) => r.keyHash),
      claim,
    );
    for (const stale of lostReruns) {
      const now = current.get(stale.keyHash);
      if (now?.state === EffectState.Done || (now && coveredByMarks(now, claim.window.doneMarks))) {
        outcomes.set(stale.keyHash, { kind: 'done' });
      } else if (now && now.owner === claim.owner && now.epoch === claim.epoch) {
        outcomes.set(stale.keyHash, { kind: 'reserved', rerun: true, attempt: now.attempts + 1 });
      } else outcomes.set(stale.keyHash, { kind: 'in-doubt', epoch: now?.epoch ?? stale.epoch });
    }
    return retryAgain;
  }

  /** Our lease no longer holds: every key is fenced, by the epoch now on the slot. */
  async #fenceAll(claim: Claim, keys: readonly string[], outcomes: Map<string, ReserveOutcome>) {
    const epoch = (await this.#claims.currentEpoch(claim.slot)) ?? claim.epoch;
    for (const keyHash of keys) outcomes.set(keyHash, { kind: 'fenced', epoch });
  }

  /**
   * Effect records as they stand (effectiveInWindow): a reservation the done marks of its slot row
   * cover reads DONE. The marks are read after the rows, and only those of the rows' own slot rows,
   * only when a row could be covered: one statement in the common case.
   */
  async #readAsTheyStand(
    window: Slot,
    keyHashes: readonly string[],
    claim?: Claim,
  ): Promise<Map<string, EffectRecord>> {
    const records = [...(await this.#readRows(window, keyHashes, claim)).values()].map(toRecord);
    const candidates = records.filter(coverable);
    if (candidates.length === 0) return new Map(records.map((record) => [record.keyHash, record]));
    const shards = [...new Set(candidates.flatMap((record) => record.shard ?? []))];
    const marks = await this.#doneMarks(window, shards);
    return new Map(records.map((record) => [record.keyHash, effectiveInWindow(record, marks)]));
  }

  /**
   * The done marks of a window's slot rows (sql.readDoneMarks): its own row's, and those of the
   * shards named (null: every shard's).
   */
  async #doneMarks(window: Slot, shards: readonly number[] | null): Promise<WindowDoneMarks> {
    let rows: { shard: number | null; done_marks: string }[];
    try {
      rows = await this.#executor.read(this.#sql.readDoneMarks, [window.jobId, window.window, shards]);
    } catch (error) {
      throw translateError('read', describeSlot(window), this.#schema, error);
    }
    return windowDoneMarksOf(
      rows.map((row) => [row.shard ?? undefined, doneMarksOf(row.done_marks)] as const),
    );
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

  /**
   * The reservation statements whose lease check is on the claim's own slot row: the window's, or
   * its shard's, which then take the shard as their last parameter (shardParam).
   */
  #rowsOf(claim: Claim): SlotRowSql {
    return claim.slot.shard === undefined ? this.#sql : this.#sql.shard;
  }

  /**
   * A statement of a canonical claim whose first four parameters are job, window, owner, epoch. The
   * marks, refusals and releases need no shard: they address the window's ledger, conditioned on
   * the reservation's owner token, which is one claim's own.
   */
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

/** Decodes an effect row into the port's record. */
export function toRecord(row: EffectRow): EffectRecord {
  return {
    keyHash: row.key_hash,
    state: row.state,
    epoch: row.epoch,
    owner: row.owner,
    attempts: row.attempts,
    ...(row.retry_at ? { retryAt: row.retry_at.getTime() } : {}),
    ...(row.reason !== null ? { reason: row.reason } : {}),
    ...(row.shard !== null ? { shard: row.shard } : {}),
    reservedAt: row.reserved_at.getTime(),
    ...(row.provider_outcome !== null ? { provider: providerWordOf(row, row.provider_outcome) } : {}),
    ...(row.seq !== null ? { seq: Number(row.seq) } : {}),
  };
}

/** Whether done marks could cover a record: a reservation made under a sequence number. */
const coverable = (record: EffectRecord) => record.state === EffectState.Reserved && record.seq !== undefined;

/**
 * Each key's sequence number, as reserveMany's options give them (the first, for a key given
 * twice), checked: a whole number from 0, as a run numbers its reservations.
 */
function sequenceNumbers(
  keyHashes: readonly string[],
  seqs: readonly number[] | undefined,
): ReadonlyMap<string, number> {
  const numbered = new Map<string, number>();
  if (seqs === undefined) return numbered;
  if (seqs.length !== keyHashes.length) {
    throw new ConfigurationError(
      'seqs',
      `reserveMany was given ${seqs.length} sequence numbers for ${keyHashes.length} keys; pass one per key, in the keys' order`,
    );
  }
  keyHashes.forEach((keyHash, i) => {
    const seq = seqs[i];
    if (!Number.isSafeInteger(seq) || (seq as number) < 0) {
      throw new ConfigurationError(
        'seq',
        `reservation of effect ${keyHash} was given ${describe(seq)} as its sequence number; a run numbers its reservations 0, 1, 2…`,
      );
    }
    if (!numbered.has(keyHash)) numbered.set(keyHash, seq as number);
  });
  return numbered;
}

/** The word on a row; its epoch is the row's, as a word is only ever written on its epoch's row. */
function providerWordOf(row: EffectRow, outcome: ProviderWord['outcome']): ProviderWord {
  return {
    outcome,
    event: row.provider_event ?? '',
    at: row.provider_at?.getTime() ?? 0,
    epoch: row.epoch,
    ...(row.provider_message_id !== null ? { messageId: row.provider_message_id } : {}),
  };
}

/** The claim as the statements take it: its slot canonical, its owner token storable. */
function checkedClaim(claim: Claim): Claim {
  const checked = canonicalClaim(claim);
  assertOwner(checked.owner);
  return checked;
}

const describeSlot = (slot: Slot) => `slot ${slot.jobId} ${slot.window}`;
const describeClaim = (claim: Claim) =>
  `an effect of slot ${claim.slot.jobId} ${claim.slot.window}${
    claim.slot.shard === undefined ? '' : ` shard ${claim.slot.shard}`
  } (epoch ${claim.epoch})`;
