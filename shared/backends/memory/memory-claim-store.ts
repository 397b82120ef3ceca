import { StoreError } from '../../errors.js';
import {
  claimOutcomeOfConflict,
  claimUntilAnswered,
  fencedBy,
  isOwnGrant,
  progressOf,
} from '../../slot/conflict-outcomes.js';
import { parseDoneMarks } from '../../slot/done-marks.js';
import type {
  Checkpoint,
  Claim,
  ClaimOutcome,
  ClaimStore,
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
import { SlotState } from '../../slot/ports.js';
import { canonicalSlot, type Slot, windowSlot } from '../../slot/slot.js';
import type {
  Condition,
  ConditionalWrite,
  MemoryTable,
  SlotItem,
  StoreOperation,
  WriteResult,
} from './memory-table.js';
import type { MemoryRequest, MemoryTransport } from './memory-transport.js';

/** The table a MemoryClaimStore writes and the transport its requests travel by. */
export interface MemoryClaimStoreOptions {
  readonly table: MemoryTable;
  readonly transport: MemoryTransport;
  /**
   * Return the item that failed a condition with the failure, as DynamoDB does when asked
   * (ReturnValuesOnConditionCheckFailure ALL_OLD). Off, a lost race costs a separate read, issued
   * after the write and therefore not atomic with it, as on dynalite.
   * @default true
   */
  readonly returnOldOnConflict?: boolean;
}

/** A slot record as this store reads it, with the maxAttempts the claimer wrote. */
export type MemorySlotRecord = SlotRecord & { readonly maxAttempts?: number };

/**
 * The slot half of the in-memory backend: DynamoDBClaimStore's conditions and outcomes, over a
 * MemoryTable. Each method issues the same requests the DynamoDB adapter does (one conditional
 * write; a read where that adapter reads), and reads a failed condition the same way: losing a race
 * is a value, and a write of ours whose reply was lost is recognised by its owner token when the
 * transport's retry meets it.
 */
export class MemoryClaimStore implements ClaimStore {
  readonly #table: MemoryTable;
  readonly #transport: MemoryTransport;
  readonly #returnOld: boolean;

  constructor(options: MemoryClaimStoreOptions) {
    this.#table = options.table;
    this.#transport = options.transport;
    this.#returnOld = options.returnOldOnConflict ?? true;
  }

  /*
   * Timeline of a claim (as in the DynamoDB adapter):
   *   t0      A: absent → RUNNING, epoch 1, leaseUntil t0+L                      → claimed
   *   t1      B: condition fails (RUNNING, lease live)                           → held (or done)
   *   t0+L+ε  B: condition passes (lease expired): epoch 2, owner B              → claimed, takeover
   *   A's later renew/complete (owner A, epoch 1) fail their conditions          → lost / fenced
   * The epoch is the current one plus one inside the same write. A write that committed but whose
   * reply was lost is retried by the transport, fails its condition on our own write and is
   * recognised below by its owner token.
   */
  async claim(slot: Slot, lease: LeaseRequest, now: number): Promise<ClaimOutcome> {
    const canonical = canonicalSlot(slot);
    return claimUntilAnswered(() => this.#claimOnce(canonical, lease, now), now);
  }

  async #claimOnce(slot: Slot, lease: LeaseRequest, now: number): Promise<ClaimOutcome | 'claimable'> {
    const leaseUntil = now + lease.leaseMs;
    const result = await this.#write(
      { operation: 'claim', slot },
      claimable(now, lease.takeoverSkewMs ?? 0),
      (old) => ({
        ...withoutRunFields(old),
        state: SlotState.Running,
        owner: lease.owner,
        epoch: (old?.epoch ?? 0) + 1,
        leaseUntil,
        attempts: (old?.attempts ?? 0) + 1,
        failures: old?.failures ?? 0,
        claimedAt: now,
        expiresAt: lease.expiresAtSeconds,
        jobId: slot.jobId,
        window: slot.window,
        executionId: lease.delivery.executionId ?? '',
        attemptNumber: lease.delivery.attemptNumber ?? 0,
        invocationId: lease.delivery.invocationId ?? '',
        backfilled: lease.delivery.backfilled === true,
        maxAttempts: lease.maxAttempts,
        deadline: old?.deadline ?? lease.deadline,
        noProgress: old?.noProgress ?? 0,
        ...(old?.keyVersion !== undefined || lease.keyVersion !== undefined
          ? { keyVersion: old?.keyVersion ?? lease.keyVersion }
          : {}),
        // A window's split is fixed by its first claim; a shard's own record carries none.
        ...(slot.shard === undefined ? { shards: old ? (old.shards ?? 1) : (lease.shards ?? 1) } : {}),
      }),
    );
    if (result.committed) {
      const old = result.old;
      const epoch = (old?.epoch ?? 0) + 1;
      const via = !old ? 'new' : old.state === SlotState.Running ? 'takeover' : 'retry';
      const previousHolder = via === 'takeover' ? old?.owner : undefined;
      return {
        kind: 'claimed',
        claim: {
          slot,
          owner: lease.owner,
          epoch,
          leaseEndsAt: leaseUntil,
          via,
          window: progressOf(
            old ? toRecord(slot, old) : undefined,
            lease.deadline,
            lease.keyVersion,
            slot.shard === undefined ? lease.shards : undefined,
          ),
        },
        ...(previousHolder ? { previousHolder } : {}),
      };
    }
    const current = await this.#current(slot, result.item);
    return current
      ? claimOutcomeOfConflict(slot, current, lease.owner, now, lease.takeoverSkewMs)
      : 'claimable';
  }

  async renew(claim: Claim, leaseMs: number, now: number): Promise<RenewOutcome> {
    const leaseUntil = now + leaseMs;
    const result = await this.#fencedWrite('renew', claim, (item) => ({ ...item, leaseUntil }));
    if (result.committed) return { kind: 'renewed', leaseEndsAt: leaseUntil };
    const current = await this.#current(claim.slot, result.item);
    if (current && isOwnGrant(current, claim) && current.state === SlotState.Running) {
      // Our own renewal committed and its reply was lost; the transport's retry then saw its own write.
      return { kind: 'renewed', leaseEndsAt: current.leaseEndsAt };
    }
    return { kind: 'lost', ...fencedBy(current) };
  }

  async checkpoint(
    claim: Claim,
    checkpoint: Checkpoint,
    progress: RunSummary,
    doneMarks?: DoneMarks,
  ): Promise<FinishOutcome> {
    const stored = {
      checkpoint: JSON.stringify(checkpoint),
      progress: JSON.stringify(progress),
      ...(doneMarks ? { doneMarks: JSON.stringify(doneMarks) } : {}),
    };
    return this.#finish('checkpoint', claim, SlotState.Running, (item) => ({ ...item, ...stored }));
  }

  async complete(claim: Claim, summary: WindowSummary, now: number): Promise<FinishOutcome> {
    const stored = JSON.stringify(summary);
    const state = summary.failed > 0 ? SlotState.Partial : SlotState.Done;
    return this.#finish('complete', claim, state, (item) => {
      const { leaseUntil: _removed, ...rest } = item;
      return { ...rest, state, summary: stored, completedAt: now };
    });
  }

  async release(claim: Claim, reason: ReleaseReason, now: number): Promise<FinishOutcome> {
    if (reason.kind === 'sharded') {
      return this.#finish('release', claim, SlotState.Sharded, (item) => {
        const { leaseUntil: _removed, ...rest } = item;
        return {
          ...rest,
          state: SlotState.Sharded,
          shards: reason.shards,
          finishedShards: item.finishedShards ?? [],
        };
      });
    }
    if (reason.kind !== 'error') {
      const state = reason.kind === 'stuck' ? SlotState.Stuck : SlotState.Released;
      return this.#finish('release', claim, state, (item) => {
        const { resumeAfter: _removed, ...rest } = item;
        return {
          ...rest,
          state,
          leaseUntil: now,
          noProgress: reason.runsWithoutProgress,
          ...(reason.checkpoint ? { checkpoint: JSON.stringify(reason.checkpoint) } : {}),
          ...(reason.kind === 'yield' && reason.resumeAfter !== undefined
            ? { resumeAfter: reason.resumeAfter }
            : {}),
          ...(reason.kind === 'stuck' ? { lastError: reason.reason.slice(0, 1000) } : {}),
        };
      });
    }
    // A failed run counts toward maxAttempts; the last allowed failure makes the slot FAILED. As in
    // the DynamoDB adapter, `failures` is read from the claim's own record first: nobody else writes
    // it while we hold the epoch, and the write below is fenced anyway.
    const record = await this.read(claim.slot);
    const failures = (record && isOwnGrant(record, claim) ? record.failures : 0) + 1;
    const maxAttempts = record?.maxAttempts ?? Number.POSITIVE_INFINITY;
    const state = failures >= maxAttempts ? SlotState.Failed : SlotState.Released;
    const lastError = reason.message.slice(0, 1000);
    return this.#finish('release', claim, state, (item) => ({
      ...item,
      state,
      failures,
      lastError,
      leaseUntil: now,
    }));
  }

  async shardFinished(
    window: Slot,
    shard: number,
  ): Promise<{ readonly shards: number; readonly finished: readonly number[] } | undefined> {
    const slot = windowSlot(canonicalSlot(window));
    const result = await this.#write({ operation: 'shardFinished', slot }, isSharded, (item) =>
      item
        ? {
            ...item,
            finishedShards: [...new Set([...(item.finishedShards ?? []), shard])].sort((a, b) => a - b),
          }
        : undefined,
    );
    const after = result.committed ? this.#table.getSlot(slot) : undefined;
    if (after?.state !== SlotState.Sharded) return undefined;
    return { shards: after.shards ?? 1, finished: after.finishedShards ?? [] };
  }

  async finishSharded(window: Slot, finish: WindowFinish, now: number): Promise<'ok' | 'finished'> {
    const slot = windowSlot(canonicalSlot(window));
    const result = await this.#write({ operation: 'complete', slot }, isSharded, (item) => {
      if (!item) return undefined;
      if (finish.kind === 'stuck')
        return { ...item, state: SlotState.Stuck, lastError: finish.reason.slice(0, 1000) };
      const state = finish.summary.failed > 0 ? SlotState.Partial : SlotState.Done;
      return { ...item, state, summary: JSON.stringify(finish.summary), completedAt: now };
    });
    return result.committed ? 'ok' : 'finished';
  }

  async read(slot: Slot): Promise<MemorySlotRecord | undefined> {
    slot = canonicalSlot(slot);
    const item = await this.#send({ operation: 'read', slot }, () => this.#table.getSlot(slot));
    return item ? toRecord(slot, item) : undefined;
  }

  async #finish(
    operation: StoreOperation,
    claim: Claim,
    target: SlotState,
    write: (item: SlotItem) => SlotItem,
  ): Promise<FinishOutcome> {
    const result = await this.#fencedWrite(operation, claim, write);
    if (result.committed) return { kind: 'ok' };
    const current = await this.#current(claim.slot, result.item);
    if (current && isOwnGrant(current, claim) && current.state === target) return { kind: 'ok' };
    return { kind: 'fenced', ...fencedBy(current) };
  }

  /** A write only the holder of this exact grant can make: owner, epoch and RUNNING. */
  #fencedWrite(
    operation: StoreOperation,
    claim: Claim,
    write: (item: SlotItem) => SlotItem,
  ): Promise<WriteResult<SlotItem>> {
    const by = { owner: claim.owner, epoch: claim.epoch };
    return this.#write({ operation, slot: canonicalSlot(claim.slot), by }, heldBy(claim), (item) =>
      // The condition guarantees the item exists; a write without it would be a broken condition.
      item ? write(item) : undefined,
    );
  }

  #write(
    request: MemoryRequest,
    condition: Condition<SlotItem>,
    write: (item: SlotItem | undefined) => SlotItem | undefined,
  ): Promise<WriteResult<SlotItem>> {
    const conditional: ConditionalWrite<SlotItem> = {
      operation: request.operation,
      slot: request.slot,
      ...(request.by ? { by: request.by } : {}),
      issuedAt: this.#table.version,
      condition,
      write,
      returnOldOnConflict: this.#returnOld,
    };
    return this.#send(request, () => this.#table.updateSlot(conditional));
  }

  /** The item that failed a condition: from the failure when the store returned it, else one read. */
  async #current(slot: Slot, item: SlotItem | undefined): Promise<MemorySlotRecord | undefined> {
    return item ? toRecord(slot, item) : this.read(slot);
  }

  async #send<R>(request: MemoryRequest, execute: () => R): Promise<R> {
    try {
      return await this.#transport.send(request, execute);
    } catch (error) {
      throw storeError(request.operation, request.slot, error);
    }
  }
}

/**
 * `attribute_not_exists(#state) OR (#state = :running AND #leaseUntil < :takeoverBefore) OR
 * (#state = :released AND (attribute_not_exists(#resumeAfter) OR #resumeAfter <= :now))`
 */
function claimable(now: number, takeoverSkewMs: number): Condition<SlotItem> {
  const takeoverBefore = now - takeoverSkewMs;
  return {
    expression:
      'attribute_not_exists(#state) OR (#state = :running AND #leaseUntil < :takeoverBefore) OR ' +
      '(#state = :released AND (attribute_not_exists(#resumeAfter) OR #resumeAfter <= :now))',
    holds: (item) =>
      !item ||
      (item.state === SlotState.Running &&
        item.leaseUntil !== undefined &&
        item.leaseUntil < takeoverBefore) ||
      (item.state === SlotState.Released && (item.resumeAfter === undefined || item.resumeAfter <= now)),
  };
}

/** `#state = :sharded` */
const isSharded: Condition<SlotItem> = {
  expression: '#state = :sharded',
  holds: (item) => item?.state === SlotState.Sharded,
};

/** What a new grant does not inherit from the run before it: its counts and its wait. */
function withoutRunFields(item: SlotItem | undefined): Partial<SlotItem> {
  if (!item) return {};
  const { progress: _progress, resumeAfter: _resumeAfter, ...rest } = item;
  return rest;
}

/** `#owner = :me AND #epoch = :epoch AND #state = :running` */
function heldBy(claim: Claim): Condition<SlotItem> {
  return {
    expression: '#owner = :me AND #epoch = :epoch AND #state = :running',
    holds: (item) =>
      item?.owner === claim.owner && item.epoch === claim.epoch && item.state === SlotState.Running,
  };
}

function toRecord(slot: Slot, item: SlotItem): MemorySlotRecord {
  return {
    slot,
    state: item.state,
    owner: item.owner,
    epoch: item.epoch,
    leaseEndsAt: item.leaseUntil ?? 0,
    attempts: item.attempts,
    failures: item.failures,
    delivery: {
      executionId: item.executionId,
      attemptNumber: item.attemptNumber,
      invocationId: item.invocationId,
      ...(item.backfilled ? { backfilled: true } : {}),
    },
    expiresAtSeconds: item.expiresAt,
    maxAttempts: item.maxAttempts,
    runsWithoutProgress: item.noProgress ?? 0,
    ...(item.summary ? { summary: JSON.parse(item.summary) as WindowSummary } : {}),
    ...(item.lastError ? { lastError: item.lastError } : {}),
    ...(item.completedAt ? { completedAt: item.completedAt } : {}),
    ...(item.deadline !== undefined ? { deadline: item.deadline } : {}),
    ...(item.checkpoint ? { checkpoint: JSON.parse(item.checkpoint) as Checkpoint } : {}),
    ...(item.progress ? { progress: JSON.parse(item.progress) as RunSummary } : {}),
    ...(item.resumeAfter !== undefined ? { resumeAfter: item.resumeAfter } : {}),
    ...(item.keyVersion !== undefined ? { keyVersion: item.keyVersion } : {}),
    ...(item.shards !== undefined ? { shards: item.shards } : {}),
    ...(item.finishedShards !== undefined ? { finishedShards: item.finishedShards } : {}),
    ...(item.doneMarks !== undefined ? { doneMarks: parseDoneMarks(item.doneMarks) } : {}),
  };
}

function storeError(operation: string, slot: Slot, cause: unknown): StoreError {
  const detail = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
  return new StoreError(
    operation,
    `in-memory store ${operation} of slot ${slot.jobId} ${slot.window} failed after the client's retries ` +
      `(${detail}); the slot is unchanged or ours, and the next delivery of this window will find out which`,
    { cause },
  );
}

function _assertNever(value: never): never {
  throw new StoreError('decode', `unexpected slot state ${String(value)}`);
}
