import type { Pool } from 'pg';
import { ConfigurationError, StoreError } from '../../errors.js';
import { effectiveInWindow, type WindowDoneMarks, windowDoneMarksOf } from '../../slot/done-marks.js';
import type {
  EffectResolution,
  HolderRule,
  OperatorRequest,
  OperatorStore,
  OperatorWriteOutcome,
  RedriveOutcome,
  RedriveRequest,
  RefusalReason,
  ReleaseRequest,
  ResolveEffectOutcome,
} from '../../slot/operator-ports.js';
import { type EffectRecord, EffectState, SlotState } from '../../slot/ports.js';
import { canonicalSlot, type Slot } from '../../slot/slot.js';
import { summaryWithEffectDone } from '../../slot/window-summary.js';
import { DEFAULT_SCHEMA } from './postgres-backend.js';
import {
  assertLeaseClock,
  doneMarksOf,
  type LeaseClock,
  type SlotRow,
  toRecord,
} from './postgres-claim-store.js';
import { type EffectRow, toRecord as toEffectRecord } from './postgres-effect-ledger.js';
import { translateError } from './postgres-errors.js';
import {
  PostgresExecutor,
  type PostgresTimeouts,
  resolveTimeouts,
  type TransactionQuery,
} from './postgres-executor.js';
import { assertKeyHash } from './postgres-keys.js';
import { assertSchemaName, type SlotguardSql, sqlFor } from './sql.js';

/** Where the operator store writes, and how. */
export interface PostgresOperatorStoreOptions {
  /** The pool statements run on: createPostgresPool's, or your own. */
  readonly pool: Pool;
  /**
   * The schema holding slotguard's tables, migrated to SCHEMA_VERSION 5 or later.
   * @default 'slotguard'
   */
  readonly schema?: string;
  /**
   * Whose clock decides whether a run's lease is live: use the runtime's setting. On 'database' the
   * request's `now` is not compared (the database's clock is, as for claims); 'caller' compares the
   * request's `now`, for a single injected clock (tests).
   * @default 'database'
   */
  readonly leaseClock?: LeaseClock;
  /**
   * Session limits of each operator transaction, and its client-side deadline: an operator's write
   * to a frozen server fails with a PostgresDeadlineError instead of hanging the CLI, and one given
   * up on before its COMMIT was sent never commits.
   * @default { statementMs: 5000, lockMs: 2000, idleInTransactionMs: 5000, deadlineMs: 5000, scope: 'transaction' }
   */
  readonly timeouts?: PostgresTimeouts;
  /**
   * Tries per operation on a dropped connection, deadlock or lock timeout.
   * @default 3
   */
  readonly attempts?: number;
}

/** An effect row as the operator reads it: the ledger's columns and the operator's note. */
type OperatorEffectRow = EffectRow & { readonly operator_action: string | null };

/** A slot row read to explain a write that matched nothing. */
type ExplainRow = SlotRow & { readonly lease_live: boolean | null };

/** A shard's row as an operator's write on its window locks it (sql.lockShardsForOperator). */
type ShardRow = ExplainRow & { readonly shard: number };

/** Why nothing was written: the answers every operator write shares. */
type Refusal = Extract<OperatorWriteOutcome, { kind: 'absent' | 'refused' }>;

/**
 * The operator's writes on the Postgres schema, with the semantics of DynamoOperatorStore: each one
 * fenced on the epoch the operator read, and a refused write answered with the slot as it is now.
 *
 * Where the DynamoDB store sequences conditional writes on two items and orders them so a crash in
 * between never runs an effect twice, this one runs them in one transaction: resolving an effect
 * locks the slot row first, so no claim or reservation of that slot can interleave, and a failure
 * anywhere leaves nothing written.
 *
 * Windows that finish across runs: a STUCK slot is released like a FAILED one, a PARTIAL slot
 * reopens like a DONE one (also when an effect of it is cleared), and a re-drive clears a window's
 * FAILED effects and gives it back in the same transaction. Every write that gives a slot back
 * resets its failures and runs without progress, drops its retry wait and takes the request's
 * deadline; a reopen and a re-drive also drop its checkpoint, so the next run walks the job again.
 * None of them touches the window's done marks, by which the reservations they cover read DONE.
 * A FAILED effect is not in doubt (it was refused before it was performed): resolveEffect answers
 * it effect-not-in-doubt, and a re-drive is what clears it. So it answers a reservation the done
 * marks of its slot row cover (performed), read under that row's lock.
 *
 * A sharded window is operated on as a whole: every write names the window, and one that names a
 * shard is refused with a ConfigurationError that says so. A write that gives a sharded window back
 * gives back its shards with it, in the same transaction, and the window forgets which shards had
 * finished, so its next delivery's coordinator hands out every shard again and each reports its
 * end afresh (a shard still at its end does at once):
 * - forceRelease (a STUCK window, or a coordinator's RUNNING or FAILED one) also releases every
 *   STUCK or FAILED shard, its checkpoint kept; DONE, PARTIAL and running shards stay as they are.
 * - reopen (DONE or PARTIAL) gives every shard back for a re-walk, as the window's own row is.
 * - redrive deletes the window's FAILED effects, whichever shard refused them, and gives every shard
 *   back for a re-walk; refused, naming the shard, while a run holds one RUNNING (lease-live while
 *   its lease is live, running once it has ended: see HolderRule).
 * - resolveEffect checks the shard that wrote the effect, naming it: a `done` is refused while its
 *   run's lease is live, a `clear` while it is RUNNING at all; a `clear` on a finished window
 *   reopens it, shards and all.
 * While a window is SHARDED its shards are running it: forceRelease, reopen and redrive are refused
 * (`state`), and so is a `clear`, which no shard already at its end would ever perform; `done`
 * is allowed. Wait for the last shard to finish the window (DONE, PARTIAL or STUCK), then act.
 * @example
 * const operator = new PostgresOperatorStore({ pool: createPostgresPool({ connectionString }), schema: 'slotguard' });
 * await operator.forceRelease(slot, { expectedEpoch: record.epoch, now: Date.now(), evenIfLeaseLive: false });
 */
export class PostgresOperatorStore implements OperatorStore {
  readonly #executor: PostgresExecutor;
  readonly #sql: SlotguardSql;
  readonly #schema: string;
  readonly #leaseClock: LeaseClock;

  constructor(options: PostgresOperatorStoreOptions) {
    const schema = options.schema ?? DEFAULT_SCHEMA;
    assertSchemaName(schema);
    const leaseClock = options.leaseClock ?? 'database';
    assertLeaseClock(leaseClock);
    this.#schema = schema;
    this.#leaseClock = leaseClock;
    this.#sql = sqlFor(schema);
    this.#executor = new PostgresExecutor({
      pool: options.pool,
      timeouts: resolveTimeouts(options.timeouts),
      ...(options.attempts !== undefined ? { attempts: options.attempts } : {}),
    });
  }

  // Timeline: sql.forceReleaseSlot, and sql.releaseShards for a sharded window.
  async forceRelease(slot: Slot, request: ReleaseRequest): Promise<OperatorWriteOutcome> {
    slot = windowOnly(slot, 'forceRelease');
    const action = this.#actionText(request.evenIfLeaseLive ? 'force-released' : 'released', request);
    return this.#slotWrite(
      'forceRelease',
      slot,
      request,
      this.#sql.forceReleaseSlot,
      'live-lease',
      [action, request.evenIfLeaseLive, deadlineOf(request)],
      this.#sql.releaseShards,
    );
  }

  // Timeline: sql.reopenSlot, and sql.rewalkShards for a sharded window.
  async reopen(slot: Slot, request: OperatorRequest): Promise<OperatorWriteOutcome> {
    slot = windowOnly(slot, 'reopen');
    const action = this.#actionText('reopened', request);
    // A live lease is not why a reopen is refused: only a DONE or PARTIAL slot reopens, and neither
    // has one (nor has a shard of it: each had reached its end for the window to finish).
    return this.#slotWrite(
      'reopen',
      slot,
      request,
      this.#sql.reopenSlot,
      undefined,
      [action, deadlineOf(request)],
      this.#sql.rewalkShards,
    );
  }

  /*
   * Timeline of a re-drive (PARTIAL at epoch 2, effects bb and cc FAILED), one transaction:
   *   t0  operator reads the slot: PARTIAL, epoch 2
   *   t1  sql.lockSlotForOperator: the slot row, locked, only if still epoch 2 and not RUNNING (its
   *       lease live or ended: HolderRule), nor any of its shards; a claim, a reservation or a
   *       retry of this window now waits for the operator's commit
   *   t2  named effects: locked and read (sql.lockEffects); one that is not FAILED → answered,
   *       nothing written. Then sql.deleteFailedEffects: bb and cc, as they are under the lock
   *   t3  sql.redriveSlot → RELEASED, the new deadline, runs without progress 0, no checkpoint
   *   t4  a delivery claims it: epoch 3, walks the job, skips what is done, performs bb and cc once
   * Unlike the DynamoDB store's separate writes, no run can re-reserve an effect between its read and
   * its deletion, and a failure anywhere leaves nothing written. If COMMIT's reply is lost, the
   * executor runs the transaction again: the slot is RELEASED at the same epoch and re-driven again,
   * with nothing left to clear (a named effect then reads as gone: effects-not-failed).
   */
  async redrive(slot: Slot, request: RedriveRequest): Promise<RedriveOutcome> {
    slot = windowOnly(slot, 'redrive');
    const named = request.keyHashes ? [...new Set(request.keyHashes)] : undefined;
    for (const keyHash of named ?? []) assertKeyHash(keyHash);
    const base = this.#params(slot, request);
    const sql = this.#sql;
    return this.#transaction('redrive', slot, async (query): Promise<RedriveOutcome> => {
      const [guarded] = await query<SlotRow>(sql.lockSlotForOperator, [...base, true]);
      if (!guarded) {
        const refusal = await this.#refusal(query, slot, request, 'running');
        return refusal.kind === 'absent' ? refusal : { ...refusal, cleared: [] };
      }
      // Its shards are running it: a re-walk now would race them (see the class comment).
      if (guarded.state === SlotState.Sharded) {
        return { kind: 'refused', reason: 'state', current: toRecord(slot, guarded), cleared: [] };
      }
      const shards = await this.#lockShards(query, slot, guarded, request);
      const held = heldShard(slot, shards.rows.values(), 'running');
      if (held) return { ...held, cleared: [] };
      if (named) {
        const rows = await query<OperatorEffectRow>(sql.lockEffects, [slot.jobId, slot.window, named]);
        const marks = windowDoneMarks(guarded, shards.rows.values());
        const found = new Map(
          rows.map((row) => [row.key_hash, effectiveInWindow(toEffectRecord(row), marks)]),
        );
        const notFailed = named
          .map((keyHash) => ({ keyHash, current: found.get(keyHash) }))
          .filter(({ current }) => current?.state !== EffectState.Failed);
        if (notFailed.length > 0) return { kind: 'effects-not-failed', effects: notFailed };
      }
      const cleared = await query<EffectRow>(sql.deleteFailedEffects, [
        slot.jobId,
        slot.window,
        named ?? null,
      ]);
      const action = this.#actionText(`redriven (${cleared.length} failed effects cleared)`, request);
      const [released] = await query<SlotRow>(sql.redriveSlot, [...base, action, deadlineOf(request)]);
      if (!released) {
        throw new StoreError(
          'redrive',
          `slot ${slot.jobId} ${slot.window} changed while locked; this should not happen, please report it with the slot row`,
        );
      }
      if (shards.split) await this.#giveBackShards(query, sql.rewalkShards, slot, request, action);
      return { kind: 'redriven', record: toRecord(slot, released), cleared: cleared.map(toEffectRecord) };
    });
  }

  /*
   * Timeline of resolving an effect in doubt (RESERVED at epoch 1 by a holder that crashed), one
   * transaction:
   *   t0  operator reads slot (DONE, epoch 2) and effect (RESERVED, epoch 1, owner o1)
   *   t1  sql.lockSlotForOperator: the slot row, locked, only if still epoch 2 and no run holds it
   *       (for `clear` not RUNNING at all, for `done` under no live lease: HolderRule); then the
   *       shards, and the one that wrote the effect by the same rule
   *   t2  the effect, locked and read: absent or DONE → answered, nothing written; else
   *       sql.markEffectDoneByOperator or sql.clearEffect on that exact reservation
   *   t3  clear on a DONE or PARTIAL slot: sql.reopenSlot (fenced on epoch 2, with the request's
   *       deadline); otherwise sql.noteOperatorAction
   * A delivery that fires meanwhile waits on the slot row's lock and then claims epoch 3, seeing the
   * effect DONE or gone: never performed twice, and (unlike the DynamoDB store's separate writes)
   * the reopen cannot be lost to a run that completed between t2 and t3.
   * If COMMIT's reply is lost, the executor runs the transaction again: a `done` finds its own mark
   * (operator_action) and answers resolved; a `clear` finds the effect gone and answers
   * effect-absent, which is what is there, and nothing runs twice.
   */
  async resolveEffect(
    slot: Slot,
    keyHash: string,
    resolution: EffectResolution,
    request: OperatorRequest,
  ): Promise<ResolveEffectOutcome> {
    slot = windowOnly(slot, 'resolveEffect');
    assertKeyHash(keyHash);
    const base = this.#params(slot, request);
    const sql = this.#sql;
    const effectAction = `marked done by an operator at ${iso(request.now)}`;
    const rule: HolderRule = resolution === 'clear' ? 'running' : 'live-lease';
    return this.#transaction('resolveEffect', slot, async (query): Promise<ResolveEffectOutcome> => {
      const [guarded] = await query<SlotRow>(sql.lockSlotForOperator, [...base, rule === 'running']);
      if (!guarded) return this.#refusal(query, slot, request, rule);
      // A cleared effect of a shard already at its end would never be performed (see the class comment).
      if (guarded.state === SlotState.Sharded && resolution === 'clear') {
        return { kind: 'refused', reason: 'state', current: toRecord(slot, guarded) };
      }
      // Shards before effects, the order every operator write locks in; a shard's reservations
      // lock its row before they touch an effect, so none can change one meanwhile.
      const shards = await this.#lockShards(query, slot, guarded, request);

      const key = [slot.jobId, slot.window, keyHash];
      const [row] = await query<OperatorEffectRow>(sql.lockEffects, [slot.jobId, slot.window, [keyHash]]);
      if (!row) return { kind: 'effect-absent' };
      // The run that wrote it holds its shard: it may still perform or mark it.
      const holder = row.shard === null ? undefined : shards.rows.get(row.shard);
      if (holder && holdsBy(holder, rule)) return shardHeld(slot, holder);
      // What the operator resolved: a reservation (also when this is our own mark, committed by a
      // try whose reply was lost, and the row already reads DONE).
      const before: EffectRecord = { ...toEffectRecord(row), state: EffectState.Reserved };
      // The effect as it stands: a reservation its run's done marks cover was performed. The rows
      // the marks are on are locked above, so no checkpoint changes them meanwhile.
      const current = effectiveInWindow(toEffectRecord(row), windowDoneMarks(guarded, shards.rows.values()));
      // Only a reservation is in doubt: DONE happened, FAILED was refused before it was performed.
      if (current.state !== EffectState.Reserved) {
        // Our own mark, committed by a try whose reply was lost: the goal state counts.
        const ours = resolution === 'done' && row.operator_action === effectAction;
        return ours
          ? { kind: 'resolved', resolution, before, slotReopened: false }
          : { kind: 'effect-not-in-doubt', current };
      }

      const reservation = [...key, row.epoch, row.owner];
      const written =
        resolution === 'done'
          ? await query(sql.markEffectDoneByOperator, [...reservation, effectAction])
          : await query(sql.clearEffect, reservation);
      // Both rows are locked by this transaction, so the exact reservation just read is still there.
      if (written.length === 0) {
        throw new StoreError(
          'resolveEffect',
          `effect ${keyHash} of slot ${slot.jobId} ${slot.window} changed while locked; this should not happen, ` +
            'please report it with the effect row',
        );
      }

      const slotAction = this.#actionText(
        `${resolution === 'done' ? 'marked-done' : 'cleared'} ${keyHash}`,
        request,
      );
      let slotReopened = false;
      if (resolution === 'clear' && FINISHED.includes(guarded.state)) {
        slotReopened = (await query(sql.reopenSlot, [...base, slotAction, deadlineOf(request)])).length > 0;
        if (slotReopened && shards.split) {
          await this.#giveBackShards(query, sql.rewalkShards, slot, request, slotAction);
        }
      } else {
        // A finished window's summary counted the effect in doubt; it is done now. The row is locked,
        // so no other resolver counts on it meanwhile.
        const counted =
          resolution === 'done' && FINISHED.includes(guarded.state) && guarded.summary
            ? summaryWithEffectDone(guarded.summary, keyHash)
            : undefined;
        await query(sql.noteOperatorAction, [
          slot.jobId,
          slot.window,
          request.expectedEpoch,
          slotAction,
          counted ? JSON.stringify(counted) : null,
        ]);
      }
      return { kind: 'resolved', resolution, before, slotReopened };
    });
  }

  /**
   * One conditional UPDATE of the slot row, and when it matches nothing the read that explains it
   * (`rule`: which holder the UPDATE's condition refuses), in one transaction. `rest` follows the
   * four parameters every operator statement starts with;
   * its first is the action noted on the row. A sharded window's shards are given back with it by
   * `shardsText` (see #giveBackShards), in the same transaction.
   */
  async #slotWrite(
    operation: string,
    slot: Slot,
    request: OperatorRequest,
    text: string,
    rule: HolderRule | undefined,
    rest: [action: string, ...unknown[]],
    shardsText: string,
  ): Promise<OperatorWriteOutcome> {
    const params = [...this.#params(slot, request), ...rest];
    return this.#transaction(operation, slot, async (query) => {
      const [written] = await query<SlotRow>(text, params);
      if (written) {
        if (isSplit(written)) await this.#giveBackShards(query, shardsText, slot, request, rest[0]);
        return { kind: 'ok', record: toRecord(slot, written) };
      }
      const answer = await this.#refusal(query, slot, request, rule);
      // A RELEASED slot at the epoch read: this write (a try whose reply was lost) or the holder's
      // own release got there first. Either way the slot is where the operator wanted it.
      const { current } = answer.kind === 'refused' ? answer : {};
      if (current?.state === SlotState.Released && current.epoch === request.expectedEpoch) {
        return { kind: 'ok', record: current };
      }
      return answer;
    });
  }

  /**
   * Explains a write that matched no row with the slot as it is now, read in the same transaction:
   * as refusalReason does, the lease judged by the store's clock. `rule`: which holder refuses this
   * write (none: a holder is never why).
   */
  async #refusal(
    query: TransactionQuery,
    slot: Slot,
    request: OperatorRequest,
    rule: HolderRule | undefined,
  ): Promise<Refusal> {
    const [row] = await query<ExplainRow>(this.#sql.readSlotForOperator, [
      slot.jobId,
      slot.window,
      this.#now(request),
    ]);
    if (!row) return { kind: 'absent' };
    const current = toRecord(slot, row);
    const reason: RefusalReason =
      current.epoch !== request.expectedEpoch
        ? 'epoch-moved'
        : rule !== undefined && holdsBy(row, rule)
          ? heldReason(row)
          : 'state';
    return { kind: 'refused', reason, current };
  }

  /**
   * Locks the shards of a sharded window (after its own row: the order every operator write takes),
   * each with whether a run's lease on it is live. Nothing for a window that is not split.
   */
  async #lockShards(
    query: TransactionQuery,
    slot: Slot,
    window: SlotRow,
    request: OperatorRequest,
  ): Promise<{ split: boolean; rows: ReadonlyMap<number, ShardRow> }> {
    if (!isSplit(window)) return { split: false, rows: new Map() };
    const rows = await query<ShardRow>(this.#sql.lockShardsForOperator, [
      slot.jobId,
      slot.window,
      this.#now(request),
    ]);
    return { split: true, rows: new Map(rows.map((row) => [row.shard, row])) };
  }

  /**
   * Gives a sharded window's shards back with it (sql.releaseShards or sql.rewalkShards), with the
   * window's action and deadline, inside the transaction that gave the window back.
   */
  async #giveBackShards(
    query: TransactionQuery,
    text: string,
    slot: Slot,
    request: OperatorRequest,
    action: string,
  ): Promise<void> {
    await query(text, [slot.jobId, slot.window, this.#now(request), action, deadlineOf(request)]);
  }

  async #transaction<T>(
    operation: string,
    slot: Slot,
    work: (query: TransactionQuery) => Promise<T>,
  ): Promise<T> {
    try {
      return await this.#executor.transaction(work);
    } catch (error) {
      throw translateError(operation, `slot ${slot.jobId} ${slot.window}`, this.#schema, error);
    }
  }

  /** The parameters every operator statement starts with: job, window (canonical), expected epoch, now. */
  #params(slot: Slot, request: OperatorRequest): unknown[] {
    if (!Number.isSafeInteger(request.expectedEpoch) || request.expectedEpoch < 0) {
      throw new ConfigurationError(
        'expectedEpoch',
        `expectedEpoch is ${request.expectedEpoch}; pass the whole-number epoch of the slot as just read`,
      );
    }
    if (request.deadline !== undefined && !Number.isFinite(request.deadline)) {
      throw new ConfigurationError(
        'deadline',
        `deadline is ${request.deadline}; pass the window's new deadline in epoch milliseconds, or leave it out to keep the window's`,
      );
    }
    return [slot.jobId, slot.window, request.expectedEpoch, this.#now(request)];
  }

  /** The `$now` parameter: NULL lets the statement read the database clock. */
  #now(request: OperatorRequest): Date | null {
    return this.#leaseClock === 'caller' ? new Date(request.now) : null;
  }

  #actionText(action: string, request: OperatorRequest): string {
    return `${action} by an operator at ${iso(request.now)}`;
  }
}

/**
 * The slot an operator's write acts on, canonical: a window. A shard is run, finished and given back
 * with its window (see PostgresOperatorStore), so a write naming one is refused, naming the fix.
 */
function windowOnly(slot: Slot, operation: string): Slot {
  slot = canonicalSlot(slot);
  if (slot.shard !== undefined) {
    throw new ConfigurationError(
      'slot',
      `${operation} was given shard ${slot.shard} of window ${slot.window} of job '${slot.jobId}'; an operator acts on ` +
        'the whole window, whose shards are given back with it: leave the shard out',
    );
  }
  return slot;
}

/**
 * The done marks of a window's slot rows as an operator's write locked them: the window's own, and
 * its shards' (none for a window that is not split), by shard as effectiveInWindow reads them.
 */
function windowDoneMarks(window: SlotRow, shards: Iterable<ShardRow>): WindowDoneMarks {
  return windowDoneMarksOf([
    [undefined, doneMarksOf(window.done_marks)],
    ...[...shards].map((shard) => [shard.shard, doneMarksOf(shard.done_marks)] as const),
  ]);
}

/** Whether a window's row says it is split into shards (rows of older builds are not). */
const isSplit = (row: SlotRow) => (row.shards ?? 1) > 1;

/**
 * The refusal for the first of a window's shards a run holds by `rule` (one under a live lease
 * before one past its lease), or undefined when none is held.
 */
function heldShard(
  slot: Slot,
  shards: Iterable<ShardRow>,
  rule: HolderRule,
): (Refusal & { kind: 'refused' }) | undefined {
  const rows = [...shards];
  const holder = rows.find((row) => row.lease_live === true) ?? rows.find((row) => holdsBy(row, rule));
  return holder ? shardHeld(slot, holder) : undefined;
}

/** A write refused because a run holds one of the window's shards: that shard, as it is. */
function shardHeld(slot: Slot, row: ShardRow): Refusal & { kind: 'refused' } {
  return { kind: 'refused', reason: heldReason(row), current: toRecord({ ...slot, shard: row.shard }, row) };
}

/** Whether a run holds the row as `rule` counts holders (HolderRule): under a live lease, or RUNNING at all. */
function holdsBy(row: ExplainRow, rule: HolderRule): boolean {
  return row.lease_live === true || (rule === 'running' && row.state === SlotState.Running);
}

/** Why a row a run holds refuses a write: its lease is live, or it is still RUNNING past it. */
const heldReason = (row: ExplainRow): RefusalReason => (row.lease_live === true ? 'lease-live' : 'running');

/** The `$deadline` parameter of a write that gives the slot back: NULL keeps the window's. */
const deadlineOf = (request: OperatorRequest) =>
  request.deadline !== undefined ? new Date(request.deadline) : null;

/** The finished states a reopen turns back into RELEASED (sql.reopenSlot). */
const FINISHED: readonly (SlotState | null)[] = [SlotState.Done, SlotState.Partial];

/** The operator's clock reading as text, for the note left on the row (never compared). */
const iso = (now: number) => (Number.isFinite(now) ? new Date(now).toISOString() : String(now));
