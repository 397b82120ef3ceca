import { ConfigurationError, StoreError } from '../../errors.js';
import { claimOutcomeOfConflict, progressOf } from '../../slot/conflict-outcomes.js';
import { parseDoneMarks } from '../../slot/done-marks.js';
import type {
  Checkpoint,
  Claim,
  ClaimOutcome,
  ClaimStore,
  Delivery,
  DoneMarks,
  FinishOutcome,
  LeaseRequest,
  ReleaseReason,
  RenewOutcome,
  RunSummary,
  SlotRecord,
  WindowFinish,
  WindowSummary,
} from '../../slot/ports.js';
import { defaultLeaseSafetyMarginMs, MAX_OPEN_MARKS, SlotState } from '../../slot/ports.js';
import {
  assertShard,
  canonicalClaim,
  canonicalSlot,
  describe,
  MAX_SHARDS,
  type Slot,
  windowSlot,
} from '../../slot/slot.js';
import { translateError } from './postgres-errors.js';
import {
  longestTimeout,
  type PostgresExecutor,
  type ResolvedTimeouts,
  type TransactionQuery,
} from './postgres-executor.js';
import { advisoryLockKey, assertOwner, storableText } from './postgres-keys.js';
import { shortestLeaseMs } from './postgres-settings.js';
import type { SlotguardSql, SlotRowSql } from './sql.js';

/**
 * Whose clock decides when a lease has ended.
 * - `'database'`: the database's (`clock_timestamp()`). A lease ends at the database time the claim
 *   or renewal ran, plus `leaseMs`; a claimer takes over only once the database's clock has passed
 *   that. The `now` each port call passes (the caller's clock) is recorded for diagnosis, never
 *   compared. Replicas whose clocks disagree by minutes still agree on who holds a slot.
 * - `'caller'`: the `now` each call passes, as the DynamoDB backend does. For a single clock that
 *   drives every caller: the contract suite and simulations, with a ManualClock.
 * Either way, the instants a caller computed itself (a yielded window's `resumeAfter`, a refused
 * effect's `retryAt`) are compared with the caller's `now`: see PostgresClaimStore.claim.
 */
export type LeaseClock = 'database' | 'caller';

/** Checks a `leaseClock` option; the error names the value and the two accepted. */
export function assertLeaseClock(leaseClock: unknown): asserts leaseClock is LeaseClock {
  if (leaseClock !== 'database' && leaseClock !== 'caller') {
    throw new ConfigurationError(
      'leaseClock',
      `leaseClock is ${JSON.stringify(leaseClock)}; use 'database' (production) or 'caller' (one injected clock)`,
    );
  }
}

/** What a PostgresClaimStore runs on; postgresBackend builds it. */
export interface PostgresClaimStoreOptions {
  readonly executor: PostgresExecutor;
  readonly sql: SlotguardSql;
  /** The schema, for error messages. */
  readonly schema: string;
  readonly leaseClock: LeaseClock;
  readonly timeouts: ResolvedTimeouts;
}

/** A slot row as the backend stores it: the port's record plus what only Postgres keeps. */
export interface PostgresSlotRecord extends SlotRecord {
  /** Failed runs allowed before FAILED, as the last claim stored it. */
  readonly maxAttempts: number;
  /** When the current grant was made, by the lease clock. */
  readonly claimedAt: number;
  /** The claimer's own clock when it sent the claim: compare with claimedAt to see its skew. */
  readonly claimerClock: number;
}

/** The columns the store reads back (see SLOT_COLUMNS in sql.ts). */
export type SlotRow = {
  readonly state: SlotState | null;
  readonly owner: string;
  readonly epoch: number;
  readonly lease_until: Date | null;
  readonly attempts: number;
  readonly failures: number;
  readonly max_attempts: number;
  readonly claimed_at: Date;
  readonly claimer_clock?: Date;
  readonly execution_id: string | null;
  readonly attempt_number: number | null;
  readonly invocation_id: string | null;
  readonly backfilled: boolean;
  readonly summary: WindowSummary | null;
  readonly last_error: string | null;
  readonly completed_at: Date | null;
  readonly expires_at: Date;
  readonly deadline: Date | null;
  readonly checkpoint: Checkpoint | null;
  readonly progress: RunSummary | null;
  readonly runs_without_progress: number;
  readonly key_version: string | null;
  readonly resume_after: Date | null;
  /** A window's row only: its split (NULL on a row an older build wrote), and the shards finished. */
  readonly shards?: number | null;
  readonly finished_shards?: number[] | null;
  /** Every epoch's done marks, as text (SLOT_COLUMNS casts them): checked by doneMarksOf. */
  readonly done_marks: string | null;
  readonly lease_expired?: boolean | null;
};

/** What the claim's upsert returns: the grant, and the window's progress as the replaced row had it. */
type GrantRow = Pick<
  SlotRow,
  'deadline' | 'checkpoint' | 'runs_without_progress' | 'key_version' | 'shards' | 'done_marks'
> & {
  readonly epoch: number;
  readonly lease_until: Date;
  readonly previous_owner: string | null;
  readonly previous_state: SlotState | null;
};

/** Longest error text kept on a slot. */
const MAX_ERROR_TEXT = 1_000;

/**
 * The slot half of the Postgres backend: one lease row per (job, window), granted by a single
 * conditional upsert that bumps the fencing epoch, and renewed, completed and released by updates
 * conditioned on owner, epoch and RUNNING. A transaction-scoped advisory lock orders claimers of
 * one slot; it is never what makes a grant safe.
 *
 * A shard of a sharded window is a slot of its own: its row is in `shard_slots`, keyed by (job,
 * window, shard), with its own epoch, lease, deadline, checkpoint and key version, and every
 * statement above has its twin there (sql.shard). The window's row records the split (`shards`,
 * fixed by its first claim), SHARDED once its coordinator has handed it out, and the set of shards
 * that reached their end; the shard that completes the set finishes the window.
 */
export class PostgresClaimStore implements ClaimStore {
  readonly #executor: PostgresExecutor;
  readonly #sql: SlotguardSql;
  readonly #schema: string;
  readonly #leaseClock: LeaseClock;
  readonly #timeouts: ResolvedTimeouts;

  constructor(options: PostgresClaimStoreOptions) {
    this.#executor = options.executor;
    this.#sql = options.sql;
    this.#schema = options.schema;
    this.#leaseClock = options.leaseClock;
    this.#timeouts = options.timeouts;
  }

  /** Which clock decides lease expiry. */
  get leaseClock(): LeaseClock {
    return this.#leaseClock;
  }

  /*
   * Timeline of a claim transaction:
   *   1. probe: try the slot's advisory lock; read the row as committed
   *      - DONE / PARTIAL / FAILED / STUCK                    → answer from the row, write nothing
   *      - RUNNING under someone's live lease                 → held
   *      - RELEASED with resume_after still ahead             → waiting
   *      - RUNNING under our own owner token                  → ours (a retried claim), write nothing
   *   2. lock not ours (another claimer of this slot is mid-claim): wait for it, bounded by
   *      lock_timeout, and read again; the winner's commit now answers most claimers without a write
   *   3. the conditional upsert (sql.claimSlot) grants, or matches nothing and leaves the row locked
   *      for the read that explains why
   * Steps 1 and 2 only save work: with the advisory lock ignored entirely, step 3 alone still grants
   * each epoch exactly once.
   *   4. COMMIT, sent only once the upsert's reply is in: a claim abandoned at the client-side
   *      deadline before that grants nothing, even when a frozen server thaws and runs the upsert
   *
   * The takeover skew allowance (`lease.takeoverSkewMs`) is applied on the caller's clock only, as
   * the DynamoDB backend applies it. On the database clock it is unnecessary: one clock, the
   * database's, both writes every lease end and judges every takeover, so no claimer's clock can
   * run ahead of the holder's. `resume_after` is judged by the caller's `now` on either clock: the
   * yielding run computed it on its own clock (the earliest retry of a refused effect, whose
   * `retry_at` the ledger also compares with the caller's clock), and a wait is a courtesy to the
   * provider, not what keeps two holders apart.
   */
  async claim(slot: Slot, lease: LeaseRequest, now: number): Promise<ClaimOutcome> {
    slot = canonicalSlot(slot);
    assertOwner(lease.owner);
    assertDeadline(lease.deadline);
    if (slot.shard === undefined && lease.shards !== undefined) assertSplit(lease.shards, 'lease.shards');
    this.#assertLeaseOutlastsTimeouts(lease);
    const key = advisoryLockKey(slot).toString();
    const at = this.#now(now);
    const takeoverBefore = this.#leaseClock === 'caller' ? new Date(now - (lease.takeoverSkewMs ?? 0)) : null;
    const rows = this.#rowsOf(slot);
    const shard = shardParam(slot);
    try {
      return await this.#executor.transaction(async (query) => {
        const [probe] = await query<SlotRow & { locked: boolean }>(rows.probeSlot, [
          key,
          slot.jobId,
          slot.window,
          takeoverBefore,
          ...shard,
        ]);
        let answer = probe?.state ? outcomeOfRow(slot, probe, lease.owner, now) : 'claimable';
        if (answer !== 'claimable') return answer;
        if (!probe?.locked) {
          await query(this.#sql.waitForClaimLock, [key]);
          answer = await this.#explain(query, slot, lease.owner, now, takeoverBefore);
          if (answer !== 'claimable') return answer;
        }
        // A lease that ends between the upsert's clock reading and the explaining read's is
        // claimable on the second try; no other state can change while the failed upsert holds
        // the row's lock.
        for (let attempt = 1; attempt <= 3; attempt++) {
          const [granted] = await query<GrantRow>(rows.claimSlot, [
            slot.jobId,
            slot.window,
            lease.owner,
            at,
            lease.leaseMs,
            lease.maxAttempts,
            new Date(now),
            storableText(lease.delivery.executionId, 256),
            lease.delivery.attemptNumber ?? null,
            storableText(lease.delivery.invocationId, 256),
            lease.expiresAtSeconds,
            lease.delivery.backfilled === true,
            new Date(lease.deadline),
            takeoverBefore,
            lease.keyVersion ?? null,
            // A window's split as its first claim asks for it; a shard's row stores which it is.
            slot.shard ?? lease.shards ?? 1,
          ]);
          if (granted) return grantedOutcome(slot, lease, granted);
          answer = await this.#explain(query, slot, lease.owner, now, takeoverBefore);
          if (answer !== 'claimable') return answer;
        }
        throw new StoreError(
          'claim',
          `claim of slot ${slot.jobId} ${slot.window} found it claimable three times and was refused three times; ` +
            'this should not happen, please report it with the slot row',
        );
      });
    } catch (error) {
      throw translateError('claim', describeSlot(slot), this.#schema, error);
    }
  }

  async renew(claim: Claim, leaseMs: number, now: number): Promise<RenewOutcome> {
    claim = canonicalClaim(claim);
    const rows = await this.#write('renew', claim, (sql) => sql.renewLease, [this.#now(now), leaseMs]);
    const renewed = rows[0] as { lease_until: Date } | undefined;
    if (renewed) return { kind: 'renewed', leaseEndsAt: renewed.lease_until.getTime() };
    return { kind: 'lost', ...fencedBy(await this.#readRow(claim.slot)) };
  }

  // Timeline: sql.checkpointSlot.
  async checkpoint(
    claim: Claim,
    checkpoint: Checkpoint,
    progress: RunSummary,
    doneMarks?: DoneMarks,
  ): Promise<FinishOutcome> {
    claim = canonicalClaim(claim);
    const rows = await this.#write('checkpoint', claim, (sql) => sql.checkpointSlot, [
      JSON.stringify(checkpoint),
      JSON.stringify(progress),
      doneMarks === undefined ? null : storableDoneMarks(doneMarks),
    ]);
    return rows.length > 0 ? { kind: 'ok' } : this.#explainFinish(claim, [SlotState.Running]);
  }

  async complete(claim: Claim, summary: WindowSummary, now: number): Promise<FinishOutcome> {
    claim = canonicalClaim(claim);
    const state = summary.failed > 0 ? SlotState.Partial : SlotState.Done;
    const rows = await this.#write('complete', claim, (sql) => sql.completeSlot, [
      this.#now(now),
      JSON.stringify(summary),
      state,
    ]);
    return rows.length > 0 ? { kind: 'ok' } : this.#explainFinish(claim, [state]);
  }

  async release(claim: Claim, reason: ReleaseReason, now: number): Promise<FinishOutcome> {
    claim = canonicalClaim(claim);
    if (reason.kind === 'sharded') return this.#handOut(claim, reason.shards);
    if (reason.kind === 'error') {
      // failures + 1 in the statement, FAILED once that reaches the max_attempts the claim stored.
      const rows = await this.#write('release', claim, (sql) => sql.failSlot, [
        this.#now(now),
        storableText(reason.message, MAX_ERROR_TEXT),
      ]);
      return rows.length > 0
        ? { kind: 'ok' }
        : this.#explainFinish(claim, [SlotState.Released, SlotState.Failed]);
    }
    const state = reason.kind === 'stuck' ? SlotState.Stuck : SlotState.Released;
    const resumeAfter = reason.kind === 'yield' ? reason.resumeAfter : undefined;
    const rows = await this.#write('release', claim, (sql) => sql.releaseSlot, [
      this.#now(now),
      state,
      reason.runsWithoutProgress,
      reason.checkpoint ? JSON.stringify(reason.checkpoint) : null,
      resumeAfter !== undefined ? new Date(resumeAfter) : null,
      reason.kind === 'stuck' ? storableText(reason.reason, MAX_ERROR_TEXT) : null,
    ]);
    return rows.length > 0 ? { kind: 'ok' } : this.#explainFinish(claim, [state]);
  }

  // Timeline: sql.releaseSharded.
  async #handOut(claim: Claim, shards: number): Promise<FinishOutcome> {
    if (claim.slot.shard !== undefined) {
      throw new ConfigurationError(
        'release',
        `${describeSlot(claim.slot)} was released as split into ${shards} shards, but it is itself a shard; ` +
          'only a window is split: release a shard as done, yielded, stuck or failed',
      );
    }
    assertSplit(shards, 'shards');
    try {
      const rows = await this.#executor.query(this.#sql.releaseSharded, [
        claim.slot.jobId,
        claim.slot.window,
        claim.owner,
        claim.epoch,
        shards,
      ]);
      return rows.length > 0 ? { kind: 'ok' } : this.#explainFinish(claim, [SlotState.Sharded]);
    } catch (error) {
      throw translateError('release', describeSlot(claim.slot), this.#schema, error);
    }
  }

  // Timeline: sql.shardFinished.
  async shardFinished(
    window: Slot,
    shard: number,
  ): Promise<{ readonly shards: number; readonly finished: readonly number[] } | undefined> {
    const slot = windowSlot(canonicalSlot(window));
    assertShard(shard, MAX_SHARDS);
    try {
      const [row] = await this.#executor.query<Pick<SlotRow, 'shards' | 'finished_shards'>>(
        this.#sql.shardFinished,
        [slot.jobId, slot.window, shard],
      );
      return row ? { shards: row.shards ?? 1, finished: row.finished_shards ?? [] } : undefined;
    } catch (error) {
      throw translateError('shardFinished', describeSlot(slot), this.#schema, error);
    }
  }

  // Timeline: sql.finishSharded.
  async finishSharded(window: Slot, finish: WindowFinish, now: number): Promise<'ok' | 'finished'> {
    const slot = windowSlot(canonicalSlot(window));
    const stuck = finish.kind === 'stuck';
    const state = stuck ? SlotState.Stuck : finish.summary.failed > 0 ? SlotState.Partial : SlotState.Done;
    try {
      const rows = await this.#executor.query(this.#sql.finishSharded, [
        slot.jobId,
        slot.window,
        state,
        stuck ? null : JSON.stringify(finish.summary),
        this.#now(now),
        stuck ? storableText(finish.reason, MAX_ERROR_TEXT) : null,
      ]);
      return rows.length > 0 ? 'ok' : 'finished';
    } catch (error) {
      throw translateError('finishSharded', describeSlot(slot), this.#schema, error);
    }
  }

  async read(slot: Slot): Promise<PostgresSlotRecord | undefined> {
    slot = canonicalSlot(slot);
    const row = await this.#readRow(slot);
    try {
      return row?.state ? toRecord(slot, row) : undefined;
    } catch (error) {
      throw translateError('read', describeSlot(slot), this.#schema, error);
    }
  }

  /** The epoch currently on a slot, or undefined when it has no row. */
  async currentEpoch(slot: Slot): Promise<number | undefined> {
    return (await this.#readRow(canonicalSlot(slot)))?.epoch;
  }

  async #readRow(slot: Slot): Promise<SlotRow | undefined> {
    try {
      const [row] = await this.#executor.read<SlotRow>(this.#rowsOf(slot).readSlot, [
        slot.jobId,
        slot.window,
        ...shardParam(slot),
      ]);
      return row;
    } catch (error) {
      throw translateError('read', describeSlot(slot), this.#schema, error);
    }
  }

  /**
   * A fenced write of a canonical claim, on its slot's row (the window's, or its shard's): the
   * statement's first four parameters are always job, window, owner, epoch, and a shard's statement
   * takes the shard last. The executor sends it inside BEGIN … COMMIT with COMMIT only after its
   * reply, so a renewal, completion or release abandoned at the client-side deadline while its
   * statement was unanswered never commits, even when the server thaws later; one whose COMMIT was
   * already sent may (the error says which).
   */
  async #write(
    operation: string,
    claim: Claim,
    statement: (rows: SlotRowSql) => string,
    rest: unknown[],
  ): Promise<unknown[]> {
    assertOwner(claim.owner);
    try {
      return await this.#executor.query(statement(this.#rowsOf(claim.slot)), [
        claim.slot.jobId,
        claim.slot.window,
        claim.owner,
        claim.epoch,
        ...rest,
        ...shardParam(claim.slot),
      ]);
    } catch (error) {
      throw translateError(operation, describeSlot(claim.slot), this.#schema, error);
    }
  }

  /** A finishing write matched no row: ours already (a retry after a lost reply), or fenced. */
  async #explainFinish(claim: Claim, ours: readonly SlotState[]): Promise<FinishOutcome> {
    const current = await this.#readRow(claim.slot);
    if (current?.state && isOurs(current, claim) && ours.includes(current.state)) return { kind: 'ok' };
    return { kind: 'fenced', ...fencedBy(current) };
  }

  async #explain(
    query: TransactionQuery,
    slot: Slot,
    owner: string,
    now: number,
    takeoverBefore: Date | null,
  ): Promise<ClaimOutcome | 'claimable'> {
    const [row] = await query<SlotRow>(this.#rowsOf(slot).readSlotForClaim, [
      slot.jobId,
      slot.window,
      takeoverBefore,
      ...shardParam(slot),
    ]);
    return row?.state ? outcomeOfRow(slot, row, owner, now) : 'claimable';
  }

  /** The `$now` parameter: NULL lets the statement read the database clock. */
  #now(now: number): Date | null {
    return this.#leaseClock === 'caller' ? new Date(now) : null;
  }

  /** The statements of a slot's row: the window's, or (for a shard) its own row's in shard_slots. */
  #rowsOf(slot: Slot): SlotRowSql {
    return slot.shard === undefined ? this.#sql : this.#sql.shard;
  }

  /**
   * A claim's lease must outlast what one call can take. The client-side deadline must fit in the
   * run's safety margin: a call still under way when the holder stops taking new effects (the
   * margin before its lease ends) is then given up before the lease ends, so a frozen server cannot
   * keep a run past its lease. And the lease must be three times the longest limit, so a stuck
   * statement or a frozen client's locks end while it still holds.
   */
  #assertLeaseOutlastsTimeouts(lease: LeaseRequest): void {
    const { leaseMs } = lease;
    const { deadlineMs } = this.#timeouts;
    const longest = longestTimeout(this.#timeouts);
    const shortest = shortestLeaseMs(this.#timeouts);
    const marginMs = lease.safetyMarginMs ?? defaultLeaseSafetyMarginMs(leaseMs);
    if (Number.isFinite(leaseMs) && deadlineMs > marginMs) {
      const [margin, fix] =
        lease.safetyMarginMs === undefined
          ? [`a sixth of the ${leaseMs} ms lease`, `or use a lease of at least ${shortest} ms`]
          : [
              `leaseSafetyMarginMs, of a ${leaseMs} ms lease`,
              `or raise leaseSafetyMarginMs to ${deadlineMs}`,
            ];
      throw new ConfigurationError(
        'timeouts.deadlineMs',
        `timeouts.deadlineMs is ${deadlineMs} but the run's lease safety margin is ${marginMs} ms (${margin}): a call ` +
          'still under way when the run stops taking new effects could outlast the lease; lower timeouts.deadlineMs ' +
          `to ${marginMs} or less, ${fix}`,
      );
    }
    if (!Number.isFinite(leaseMs) || leaseMs < 3 * longest) {
      const least = lease.safetyMarginMs === undefined ? shortest : 3 * longest;
      throw new ConfigurationError(
        'leaseMs',
        `leaseMs is ${leaseMs} but the Postgres timeouts (the server's limits and the client-side deadline) allow ` +
          `a single operation to take ${longest} ms; use a lease of at least ${least} ms or lower timeouts, ` +
          'so a stuck statement or a frozen server is given up on while the lease still holds',
      );
    }
  }
}

/**
 * What a slot row that a claim found means, by the rules every backend shares
 * (claimOutcomeOfConflict), except for one: whether someone else's lease has ended was judged in
 * the statement (`lease_expired`), by the lease clock.
 */
function outcomeOfRow(slot: Slot, row: SlotRow, owner: string, now: number): ClaimOutcome | 'claimable' {
  const record = toRecord(slot, row);
  if (record.state === SlotState.Running && record.owner !== owner) {
    if (row.lease_expired) return 'claimable';
    return { kind: 'held', holder: record.owner, epoch: record.epoch, leaseEndsAt: record.leaseEndsAt };
  }
  return claimOutcomeOfConflict(slot, record, owner, now);
}

function grantedOutcome(slot: Slot, lease: LeaseRequest, row: GrantRow): ClaimOutcome {
  const via = row.epoch === 1 ? 'new' : row.previous_state === SlotState.Running ? 'takeover' : 'retry';
  return {
    kind: 'claimed',
    claim: {
      slot,
      owner: lease.owner,
      epoch: row.epoch,
      leaseEndsAt: row.lease_until.getTime(),
      via,
      window: progressOf(windowFields(row), lease.deadline, lease.keyVersion),
    },
    ...(via === 'takeover' && row.previous_owner ? { previousHolder: row.previous_owner } : {}),
  };
}

/**
 * The window's progress columns of a row (and a window's split, and its done marks), as the port's
 * record spells them.
 */
function windowFields(
  row: Pick<
    SlotRow,
    'deadline' | 'checkpoint' | 'runs_without_progress' | 'key_version' | 'shards' | 'done_marks'
  >,
) {
  const doneMarks = doneMarksOf(row.done_marks);
  return {
    runsWithoutProgress: row.runs_without_progress,
    ...(row.key_version !== null && row.key_version !== undefined ? { keyVersion: row.key_version } : {}),
    ...(row.deadline ? { deadline: row.deadline.getTime() } : {}),
    ...(row.checkpoint ? { checkpoint: row.checkpoint } : {}),
    ...(row.shards !== null && row.shards !== undefined ? { shards: row.shards } : {}),
    ...(doneMarks ? { doneMarks } : {}),
  };
}

/**
 * A slot row's done marks as read back (text, NULL on a row no run has marked), checked with the
 * rule every backend reads them by: a malformed value is a StoreError, never marks taken on trust,
 * since a reservation they cover reads DONE and is never performed again.
 */
export function doneMarksOf(text: string | null | undefined): DoneMarks | undefined {
  try {
    return parseDoneMarks(text ?? undefined);
  } catch (error) {
    throw new StoreError(
      'read',
      `a slot row's done_marks could not be read: ${messageOf(error)}; only checkpoint writes them, and ` +
        'checks them first: report it with the slot row',
      { cause: error },
    );
  }
}

/**
 * Done marks as checkpoint stores them (JSON), checked first by the rule they are read back with:
 * what is stored is what every later run and reader trusts.
 */
function storableDoneMarks(doneMarks: DoneMarks): string {
  const text = JSON.stringify(doneMarks);
  try {
    parseDoneMarks(text);
  } catch (error) {
    throw new ConfigurationError(
      'doneMarks',
      `checkpoint refused the done marks it was given: ${messageOf(error)}; pass each epoch's { below, open }, keyed by the epoch ` +
        `in decimal, with whole numbers and at most ${MAX_OPEN_MARKS} open`,
      { cause: error },
    );
  }
  return text;
}

/** Decodes a slot row read with SLOT_COLUMNS and claimer_clock (the operator store's too). */
export function toRecord(slot: Slot, row: SlotRow): PostgresSlotRecord {
  const delivery: Delivery = {
    ...(row.execution_id !== null ? { executionId: row.execution_id } : {}),
    ...(row.attempt_number !== null ? { attemptNumber: row.attempt_number } : {}),
    ...(row.invocation_id !== null ? { invocationId: row.invocation_id } : {}),
    ...(row.backfilled ? { backfilled: true } : {}),
  };
  return {
    slot,
    state: row.state as SlotState,
    owner: row.owner,
    epoch: row.epoch,
    leaseEndsAt: leaseEnd(row),
    attempts: row.attempts,
    failures: row.failures,
    delivery,
    expiresAtSeconds: Math.round(row.expires_at.getTime() / 1000),
    maxAttempts: row.max_attempts,
    claimedAt: row.claimed_at.getTime(),
    claimerClock: row.claimer_clock?.getTime() ?? 0,
    ...windowFields(row),
    ...(row.progress ? { progress: row.progress } : {}),
    ...(row.resume_after ? { resumeAfter: row.resume_after.getTime() } : {}),
    ...(row.summary ? { summary: row.summary } : {}),
    ...(row.last_error !== null ? { lastError: row.last_error } : {}),
    ...(row.completed_at ? { completedAt: row.completed_at.getTime() } : {}),
    ...(row.finished_shards !== null && row.finished_shards !== undefined
      ? { finishedShards: row.finished_shards }
      : {}),
  };
}

const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error));

/** The lease end in epoch milliseconds; 0 once the slot is DONE (the lease is cleared). */
const leaseEnd = (row: SlotRow) => row.lease_until?.getTime() ?? 0;

function isOurs(row: SlotRow, claim: Claim): boolean {
  return row.owner === claim.owner && row.epoch === claim.epoch;
}

function fencedBy(row: SlotRow | undefined) {
  return row?.state ? { holder: row.owner, epoch: row.epoch, state: row.state } : {};
}

const describeSlot = (slot: Slot) =>
  `slot ${slot.jobId} ${slot.window}${slot.shard === undefined ? '' : ` shard ${slot.shard}`}`;

/** The parameter a shard's statement takes last (see slotRowStatements); none for a window's. */
export function shardParam(slot: Slot): number[] {
  return slot.shard === undefined ? [] : [slot.shard];
}

/** A window's split: 1 (not split) to MAX_SHARDS shards; the error names the value and the range. */
function assertSplit(shards: unknown, field: string): void {
  if (typeof shards !== 'number' || !Number.isInteger(shards) || shards < 1 || shards > MAX_SHARDS) {
    throw new ConfigurationError(
      field,
      `${field} is ${describe(shards)}; a window is split into a whole number of shards from 1 (not split) to ${MAX_SHARDS}`,
    );
  }
}

/** A claim's deadline must be an instant: it is stored, and every later run of the window is held to it. */
function assertDeadline(deadline: unknown): void {
  if (typeof deadline !== 'number' || !Number.isFinite(deadline)) {
    throw new ConfigurationError(
      'deadline',
      `lease deadline is ${describe(deadline)}; pass the instant the window must be finished by, in epoch milliseconds`,
    );
  }
}
