import {
  type AttributeValue,
  ConditionalCheckFailedException,
  type DynamoDBClient,
  GetItemCommand,
  QueryCommand,
  type QueryCommandOutput,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import { StoreError } from '../../errors.js';
import {
  claimOutcomeOfConflict,
  claimUntilAnswered,
  fencedBy,
  isOwnGrant,
  progressOf,
} from '../../slot/conflict-outcomes.js';
import { parseDoneMarks, type WindowDoneMarks, windowDoneMarksOf } from '../../slot/done-marks.js';
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
import { conflictItem, num, str } from './attribute-values.js';
import { shardOfSlotSortKey, slotPartitionKey, slotSortKey, TableLayout } from './table-layout.js';

export interface DynamoClaimStoreOptions {
  readonly client: DynamoDBClient;
  readonly tableName: string;
  /**
   * Ask DynamoDB to return the current item when a condition fails (ReturnValuesOnConditionCheckFailure
   * ALL_OLD), saving the GetItem that otherwise follows a lost race. Servers that ignore it (dynalite)
   * cost that one consistent read more.
   * @default true
   */
  readonly returnOldOnConflict?: boolean;
}

/**
 * Attribute names of a slot item, kept in one place so every expression uses the same spelling
 * (the operator store, dynamodb-operator-store.ts, writes the same item).
 */
export const SlotAttribute = {
  state: 'state',
  owner: 'owner',
  epoch: 'epoch',
  leaseUntil: 'leaseUntil',
  attempts: 'attempts',
  failures: 'failures',
  executionId: 'executionId',
  attemptNumber: 'attemptNumber',
  invocationId: 'invocationId',
  backfilled: 'backfilled',
  claimedAt: 'claimedAt',
  completedAt: 'completedAt',
  summary: 'summary',
  lastError: 'lastError',
  jobId: 'jobId',
  window: 'window',
  maxAttempts: 'maxAttempts',
  /** When the window must be finished (epoch ms): set by the first claim, kept by later ones. */
  deadline: 'deadline',
  /** The checkpoint the next run resumes from (JSON). */
  checkpoint: 'checkpoint',
  /** The holder's counts at its last checkpoint (JSON); removed by each claim. */
  progress: 'progress',
  /** Consecutive runs that ended with work left and nothing achieved. */
  noProgress: 'noProgress',
  /** A released window waiting for failed effects' backoff is not claimable before this (epoch ms). */
  resumeAfter: 'resumeAfter',
  /** The effect-key version the window's effects are hashed with: set by the first claim, kept. */
  keyVersion: 'keyVersion',
  /** A window's split (set by its first claim), and the shards that reached their end (a number set). */
  shards: 'shards',
  finishedShards: 'finishedShards',
  /** Which shard a shard item is (absent on a window's item). */
  shard: 'shard',
  /**
   * Every epoch's done marks (JSON, a few dozen bytes a run): written by checkpoints, never removed,
   * since the item's reservations read DONE only through them. The effect ledger reads them.
   */
  doneMarks: TableLayout.doneMarksAttribute,
  expiresAt: TableLayout.ttlAttribute,
} as const;
const A = SlotAttribute;

const NAMES = Object.fromEntries(Object.values(A).map((name) => [`#${name}`, name]));

/**
 * The slot half of the DynamoDB backend: one item per (job, window), claimed, renewed, completed
 * and released by conditional UpdateItem. Nothing here depends on transactions, on ALL_OLD being
 * honoured, or on TTL having deleted anything.
 */
export class DynamoClaimStore implements ClaimStore {
  readonly #client: DynamoDBClient;
  readonly #table: string;
  readonly #returnOld: boolean;

  constructor(options: DynamoClaimStoreOptions) {
    this.#client = options.client;
    this.#table = options.tableName;
    this.#returnOld = options.returnOldOnConflict ?? true;
  }

  /*
   * Timeline of a claim:
   *   t0  A: UpdateItem (absent → RUNNING, epoch 1, leaseUntil t0+L)            → claimed
   *   t1  B: same write; condition fails (RUNNING, lease live)                   → held (or done)
   *   t0+L+ε B: same write; condition passes (lease expired): epoch 2, owner B   → claimed, takeover
   *   A's later renew/complete (owner A, epoch 1) fail their conditions          → lost / fenced
   * The epoch is `if_not_exists(epoch, 0) + 1` inside the same write, so it grows by exactly one per
   * grant with no read first. A write that committed but whose response was lost is retried by the
   * SDK, fails the condition, and is recognised below as ours by its owner token.
   */
  async claim(slot: Slot, lease: LeaseRequest, now: number): Promise<ClaimOutcome> {
    const canonical = canonicalSlot(slot);
    return claimUntilAnswered(() => this.#claimOnce(canonical, lease, now), now);
  }

  async #claimOnce(slot: Slot, lease: LeaseRequest, now: number): Promise<ClaimOutcome | 'claimable'> {
    const leaseUntil = now + lease.leaseMs;
    const values: Record<string, AttributeValue> = {
      ':running': str(SlotState.Running),
      ':released': str(SlotState.Released),
      ':owner': str(lease.owner),
      ':now': num(now),
      ':takeoverBefore': num(now - (lease.takeoverSkewMs ?? 0)),
      ':leaseUntil': num(leaseUntil),
      ':zero': num(0),
      ':one': num(1),
      ':expiresAt': num(lease.expiresAtSeconds),
      ':jobId': str(slot.jobId),
      ':window': str(slot.window),
      ':executionId': str(lease.delivery.executionId ?? ''),
      ':attemptNumber': num(lease.delivery.attemptNumber ?? 0),
      ':invocationId': str(lease.delivery.invocationId ?? ''),
      ':maxAttempts': num(lease.maxAttempts),
      ':backfilled': { BOOL: lease.delivery.backfilled === true },
      ':deadline': num(lease.deadline),
      ...(lease.keyVersion !== undefined ? { ':keyVersion': str(lease.keyVersion) } : {}),
      ...(slot.shard === undefined ? { ':shards': num(lease.shards ?? 1) } : { ':shard': num(slot.shard) }),
    };
    const pinKey =
      lease.keyVersion !== undefined ? ', #keyVersion = if_not_exists(#keyVersion, :keyVersion)' : '';
    // A window's split is fixed by its first claim; a shard's item says which shard it is.
    const split =
      slot.shard === undefined ? ', #shards = if_not_exists(#shards, :shards)' : ', #shard = :shard';
    const isNew = 'attribute_not_exists(#state)';
    const isExpiredLease = '(#state = :running AND #leaseUntil < :takeoverBefore)';
    const isReleased =
      '(#state = :released AND (attribute_not_exists(#resumeAfter) OR #resumeAfter <= :now))';
    try {
      const result = await this.#client.send(
        new UpdateItemCommand({
          TableName: this.#table,
          Key: this.#key(slot),
          UpdateExpression:
            'SET #state = :running, #owner = :owner, #epoch = if_not_exists(#epoch, :zero) + :one, ' +
            '#leaseUntil = :leaseUntil, #attempts = if_not_exists(#attempts, :zero) + :one, ' +
            '#failures = if_not_exists(#failures, :zero), #claimedAt = :now, #expiresAt = :expiresAt, ' +
            '#jobId = :jobId, #window = :window, #executionId = :executionId, ' +
            '#attemptNumber = :attemptNumber, #invocationId = :invocationId, #maxAttempts = :maxAttempts, ' +
            '#backfilled = :backfilled, #deadline = if_not_exists(#deadline, :deadline), ' +
            `#noProgress = if_not_exists(#noProgress, :zero)${pinKey}${split} REMOVE #progress, #resumeAfter`,
          ConditionExpression: `${isNew} OR ${isExpiredLease} OR ${isReleased}`,
          ExpressionAttributeNames: pick(NAMES, [
            A.state,
            A.owner,
            A.epoch,
            A.leaseUntil,
            A.attempts,
            A.failures,
            A.claimedAt,
            A.expiresAt,
            A.jobId,
            A.window,
            A.executionId,
            A.attemptNumber,
            A.invocationId,
            A.maxAttempts,
            A.backfilled,
            A.deadline,
            A.noProgress,
            A.progress,
            A.resumeAfter,
            ...(pinKey ? [A.keyVersion] : []),
            slot.shard === undefined ? A.shards : A.shard,
          ]),
          ExpressionAttributeValues: values,
          ReturnValues: 'ALL_OLD',
          ...this.#returnOldOnConflict(),
        }),
      );
      const old = result.Attributes;
      const previousState = old?.[A.state]?.S;
      const epoch = (old ? num$(old, A.epoch) : 0) + 1;
      const via = !old || !previousState ? 'new' : previousState === SlotState.Running ? 'takeover' : 'retry';
      const previousHolder = via === 'takeover' ? old?.[A.owner]?.S : undefined;
      return {
        kind: 'claimed',
        claim: {
          slot,
          owner: lease.owner,
          epoch,
          leaseEndsAt: leaseUntil,
          via,
          window: progressOf(
            old && previousState ? toRecord(slot, old) : undefined,
            lease.deadline,
            lease.keyVersion,
            slot.shard === undefined ? lease.shards : undefined,
          ),
        },
        ...(previousHolder ? { previousHolder } : {}),
      };
    } catch (error) {
      if (!(error instanceof ConditionalCheckFailedException)) throw storeError('claim', slot, error);
      const current = await this.#current(slot, error);
      return current
        ? claimOutcomeOfConflict(slot, current, lease.owner, now, lease.takeoverSkewMs)
        : 'claimable';
    }
  }

  async renew(claim: Claim, leaseMs: number, now: number): Promise<RenewOutcome> {
    const leaseUntil = now + leaseMs;
    try {
      await this.#fencedUpdate(claim, 'SET #leaseUntil = :leaseUntil', { ':leaseUntil': num(leaseUntil) }, [
        A.leaseUntil,
      ]);
      return { kind: 'renewed', leaseEndsAt: leaseUntil };
    } catch (error) {
      if (!(error instanceof ConditionalCheckFailedException)) throw storeError('renew', claim.slot, error);
      const current = await this.#current(claim.slot, error);
      if (current && isOwnGrant(current, claim) && current.state === SlotState.Running) {
        // Our own renewal committed and its response was lost; the SDK's retry then saw its own write.
        return { kind: 'renewed', leaseEndsAt: current.leaseEndsAt };
      }
      return { kind: 'lost', ...fencedBy(current) };
    }
  }

  /*
   * A checkpoint is the same fenced UpdateItem with or without done marks: marks of a run that was
   * taken over never land (its owner and epoch fail the condition), and a write without marks
   * leaves the stored ones as they are.
   */
  async checkpoint(
    claim: Claim,
    checkpoint: Checkpoint,
    progress: RunSummary,
    doneMarks?: DoneMarks,
  ): Promise<FinishOutcome> {
    const marks = doneMarks === undefined ? '' : ', #doneMarks = :doneMarks';
    return this.#finish(
      claim,
      SlotState.Running,
      `SET #checkpoint = :checkpoint, #progress = :progress${marks}`,
      {
        ':checkpoint': str(JSON.stringify(checkpoint)),
        ':progress': str(JSON.stringify(progress)),
        ...(doneMarks === undefined ? {} : { ':doneMarks': str(JSON.stringify(doneMarks)) }),
      },
      [A.checkpoint, A.progress, ...(doneMarks === undefined ? [] : [A.doneMarks])],
    );
  }

  async complete(claim: Claim, summary: WindowSummary, now: number): Promise<FinishOutcome> {
    const state = summary.failed > 0 ? SlotState.Partial : SlotState.Done;
    return this.#finish(
      claim,
      state,
      'SET #state = :finished, #summary = :summary, #completedAt = :now REMOVE #leaseUntil',
      { ':finished': str(state), ':summary': str(JSON.stringify(summary)), ':now': num(now) },
      [A.state, A.summary, A.completedAt, A.leaseUntil],
    );
  }

  async release(claim: Claim, reason: ReleaseReason, now: number): Promise<FinishOutcome> {
    if (reason.kind === 'sharded') {
      return this.#finish(
        claim,
        SlotState.Sharded,
        'SET #state = :sharded, #shards = :shards REMOVE #leaseUntil',
        { ':sharded': str(SlotState.Sharded), ':shards': num(reason.shards) },
        [A.state, A.shards, A.leaseUntil],
      );
    }
    if (reason.kind !== 'error') return this.#releaseForLater(claim, reason, now);
    // A failed run counts toward maxAttempts; the last allowed failure makes the slot FAILED so
    // further fires stand down instead of failing forever. `failures` is read from the claim's own
    // record: nobody else writes it while we hold the epoch.
    const record = await this.read(claim.slot);
    const failures = (record && isOwnGrant(record, claim) ? record.failures : 0) + 1;
    const maxAttempts = record?.maxAttempts ?? Number.POSITIVE_INFINITY;
    const state = failures >= maxAttempts ? SlotState.Failed : SlotState.Released;
    return this.#finish(
      claim,
      state,
      'SET #state = :next, #failures = :failures, #lastError = :lastError, #leaseUntil = :now',
      {
        ':next': str(state),
        ':failures': num(failures),
        ':lastError': str(reason.message.slice(0, 1000)),
        ':now': num(now),
      },
      [A.state, A.failures, A.lastError, A.leaseUntil],
    );
  }

  /** A yield (RELEASED, maybe waiting for a retry) or giving up (STUCK), with what the next run needs. */
  #releaseForLater(
    claim: Claim,
    reason: Exclude<ReleaseReason, { kind: 'error' | 'sharded' }>,
    now: number,
  ): Promise<FinishOutcome> {
    const state = reason.kind === 'stuck' ? SlotState.Stuck : SlotState.Released;
    const sets = ['#state = :next', '#leaseUntil = :now', '#noProgress = :noProgress'];
    const names: string[] = [A.state, A.leaseUntil, A.noProgress, A.resumeAfter];
    const values: Record<string, AttributeValue> = {
      ':next': str(state),
      ':now': num(now),
      ':noProgress': num(reason.runsWithoutProgress),
    };
    if (reason.checkpoint) {
      sets.push('#checkpoint = :checkpoint');
      names.push(A.checkpoint);
      values[':checkpoint'] = str(JSON.stringify(reason.checkpoint));
    }
    const resumeAfter = reason.kind === 'yield' ? reason.resumeAfter : undefined;
    if (resumeAfter !== undefined) {
      sets.push('#resumeAfter = :resumeAfter');
      values[':resumeAfter'] = num(resumeAfter);
    }
    if (reason.kind === 'stuck') {
      sets.push('#lastError = :lastError');
      names.push(A.lastError);
      values[':lastError'] = str(reason.reason.slice(0, 1000));
    }
    const remove = resumeAfter === undefined ? ' REMOVE #resumeAfter' : '';
    return this.#finish(claim, state, `SET ${sets.join(', ')}${remove}`, values, names);
  }

  /*
   * Timeline of a sharded window's end:
   *   shard i done:  UpdateItem ADD finishedShards {i} if SHARDED  (a set: a retried add is a no-op)
   *   the add that makes the set whole is followed by one finishSharded, conditioned on SHARDED:
   *   of two shards finishing at once both may try, exactly one writes DONE, PARTIAL or STUCK.
   */
  async shardFinished(
    window: Slot,
    shard: number,
  ): Promise<{ readonly shards: number; readonly finished: readonly number[] } | undefined> {
    const slot = windowSlot(canonicalSlot(window));
    try {
      const result = await this.#client.send(
        new UpdateItemCommand({
          TableName: this.#table,
          Key: this.#key(slot),
          UpdateExpression: 'ADD #finishedShards :shard',
          ConditionExpression: '#state = :sharded',
          ExpressionAttributeNames: pick(NAMES, [A.finishedShards, A.state]),
          ExpressionAttributeValues: {
            ':shard': { NS: [String(shard)] },
            ':sharded': str(SlotState.Sharded),
          },
          ReturnValues: 'ALL_NEW',
        }),
      );
      const item = result.Attributes ?? {};
      return { shards: num$(item, A.shards) || 1, finished: finishedOf(item) };
    } catch (error) {
      if (error instanceof ConditionalCheckFailedException) return undefined;
      throw storeError('shardFinished', slot, error);
    }
  }

  async finishSharded(window: Slot, finish: WindowFinish, now: number): Promise<'ok' | 'finished'> {
    const slot = windowSlot(canonicalSlot(window));
    const state =
      finish.kind === 'stuck'
        ? SlotState.Stuck
        : finish.summary.failed > 0
          ? SlotState.Partial
          : SlotState.Done;
    const [update, values, names] =
      finish.kind === 'stuck'
        ? [
            'SET #state = :next, #lastError = :reason',
            { ':reason': str(finish.reason.slice(0, 1000)) },
            [A.lastError],
          ]
        : [
            'SET #state = :next, #summary = :summary, #completedAt = :now',
            { ':summary': str(JSON.stringify(finish.summary)), ':now': num(now) },
            [A.summary, A.completedAt],
          ];
    try {
      await this.#client.send(
        new UpdateItemCommand({
          TableName: this.#table,
          Key: this.#key(slot),
          UpdateExpression: update,
          ConditionExpression: '#state = :sharded',
          ExpressionAttributeNames: pick(NAMES, [A.state, ...names]),
          ExpressionAttributeValues: { ...values, ':next': str(state), ':sharded': str(SlotState.Sharded) },
        }),
      );
      return 'ok';
    } catch (error) {
      if (error instanceof ConditionalCheckFailedException) return 'finished';
      throw storeError('finishSharded', slot, error);
    }
  }

  async read(slot: Slot): Promise<(SlotRecord & { maxAttempts?: number }) | undefined> {
    slot = canonicalSlot(slot);
    try {
      const result = await this.#client.send(
        new GetItemCommand({ TableName: this.#table, Key: this.#key(slot), ConsistentRead: true }),
      );
      return result.Item ? toRecord(slot, result.Item) : undefined;
    } catch (error) {
      throw storeError('read', slot, error);
    }
  }

  async #finish(
    claim: Claim,
    target: SlotState,
    update: string,
    values: Record<string, AttributeValue>,
    names: readonly string[],
  ): Promise<FinishOutcome> {
    try {
      await this.#fencedUpdate(claim, update, values, names);
      return { kind: 'ok' };
    } catch (error) {
      if (!(error instanceof ConditionalCheckFailedException))
        throw storeError(finishOperation(target), claim.slot, error);
      const current = await this.#current(claim.slot, error);
      if (current && isOwnGrant(current, claim) && current.state === target) return { kind: 'ok' };
      return { kind: 'fenced', ...fencedBy(current) };
    }
  }

  /** An update that only the holder of this exact grant can make: owner, epoch and RUNNING. */
  #fencedUpdate(
    claim: Claim,
    update: string,
    values: Record<string, AttributeValue>,
    names: readonly string[],
  ) {
    return this.#client.send(
      new UpdateItemCommand({
        TableName: this.#table,
        Key: this.#key(claim.slot),
        UpdateExpression: update,
        ConditionExpression: '#owner = :me AND #epoch = :epoch AND #state = :running',
        ExpressionAttributeNames: pick(NAMES, [A.owner, A.epoch, A.state, ...names]),
        ExpressionAttributeValues: {
          ...values,
          ':me': str(claim.owner),
          ':epoch': num(claim.epoch),
          ':running': str(SlotState.Running),
        },
        ...this.#returnOldOnConflict(),
      }),
    );
  }

  /** The item that made a condition fail: from the error when the server sent it, else one consistent read. */
  async #current(slot: Slot, error: ConditionalCheckFailedException) {
    const item = conflictItem(error);
    return item ? toRecord(slot, item) : this.read(slot);
  }

  #returnOldOnConflict() {
    return this.#returnOld ? { ReturnValuesOnConditionCheckFailure: 'ALL_OLD' as const } : {};
  }

  #key(slot: Slot): Record<string, AttributeValue> {
    slot = canonicalSlot(slot);
    return {
      [TableLayout.partitionKey]: str(slotPartitionKey(slot.jobId, slot.window)),
      [TableLayout.sortKey]: str(slotSortKey(slot.shard)),
    };
  }
}

/**
 * The done marks of every slot item of `slot`'s window (the window's own and its shards'), by
 * shard: one strongly consistent Query of the window's slot partition, projecting the sort key and
 * the marks. Effect items have partitions of their own, so none is read. It costs a read unit per
 * 4 KB of the window's slot items (the projection saves bytes on the wire, not units): one for a
 * window that is not split.
 */
export async function readWindowDoneMarks(
  client: DynamoDBClient,
  tableName: string,
  slot: Slot,
): Promise<WindowDoneMarks> {
  slot = canonicalSlot(slot);
  const recorded: (readonly [number | undefined, DoneMarks | undefined])[] = [];
  let startKey: Record<string, AttributeValue> | undefined;
  do {
    let page: QueryCommandOutput;
    try {
      page = await client.send(
        new QueryCommand({
          TableName: tableName,
          KeyConditionExpression: '#pk = :pk',
          // Named, not all: what the SES event recorder's grant allows (ClaimsTable.grantDoneMarkReads).
          Select: 'SPECIFIC_ATTRIBUTES',
          ProjectionExpression: '#sk, #doneMarks',
          ExpressionAttributeNames: {
            '#pk': TableLayout.partitionKey,
            '#sk': TableLayout.sortKey,
            '#doneMarks': A.doneMarks,
          },
          ExpressionAttributeValues: { ':pk': str(slotPartitionKey(slot.jobId, slot.window)) },
          ConsistentRead: true,
          ExclusiveStartKey: startKey,
        }),
      );
    } catch (error) {
      throw storeError('readDoneMarks', slot, error);
    }
    for (const item of page.Items ?? []) {
      recorded.push([
        shardOfSlotSortKey(item[TableLayout.sortKey]?.S ?? ''),
        parseDoneMarks(item[A.doneMarks]?.S),
      ]);
    }
    startKey = page.LastEvaluatedKey;
  } while (startKey);
  return windowDoneMarksOf(recorded);
}

/** The shards a window item lists as finished, in order. */
function finishedOf(item: Record<string, AttributeValue>): number[] {
  return (item[A.finishedShards]?.NS ?? []).map(Number).sort((a, b) => a - b);
}

function toRecord(slot: Slot, item: Record<string, AttributeValue>): SlotRecord & { maxAttempts?: number } {
  const summary = item[A.summary]?.S;
  const lastError = item[A.lastError]?.S;
  const completedAt = item[A.completedAt]?.N;
  const checkpoint = item[A.checkpoint]?.S;
  const progress = item[A.progress]?.S;
  const doneMarks = parseDoneMarks(item[A.doneMarks]?.S);
  return {
    slot,
    state: (item[A.state]?.S ?? SlotState.Released) as SlotState,
    owner: item[A.owner]?.S ?? '',
    epoch: num$(item, A.epoch),
    leaseEndsAt: num$(item, A.leaseUntil),
    attempts: num$(item, A.attempts),
    failures: num$(item, A.failures),
    delivery: {
      executionId: item[A.executionId]?.S ?? '',
      attemptNumber: num$(item, A.attemptNumber),
      invocationId: item[A.invocationId]?.S ?? '',
      ...(item[A.backfilled]?.BOOL ? { backfilled: true } : {}),
    },
    expiresAtSeconds: num$(item, A.expiresAt),
    runsWithoutProgress: num$(item, A.noProgress),
    ...(item[A.deadline]?.N ? { deadline: num$(item, A.deadline) } : {}),
    ...(checkpoint ? { checkpoint: JSON.parse(checkpoint) as Checkpoint } : {}),
    ...(progress ? { progress: JSON.parse(progress) as RunSummary } : {}),
    ...(item[A.resumeAfter]?.N ? { resumeAfter: num$(item, A.resumeAfter) } : {}),
    ...(item[A.keyVersion]?.S !== undefined ? { keyVersion: item[A.keyVersion]?.S } : {}),
    ...(item[A.shards]?.N ? { shards: num$(item, A.shards) } : {}),
    ...(item[A.finishedShards]?.NS ? { finishedShards: finishedOf(item) } : {}),
    ...(doneMarks ? { doneMarks } : {}),
    ...(summary ? { summary: JSON.parse(summary) as WindowSummary } : {}),
    ...(lastError ? { lastError } : {}),
    ...(completedAt ? { completedAt: Number(completedAt) } : {}),
    ...(item[A.maxAttempts]?.N ? { maxAttempts: Number(item[A.maxAttempts]?.N) } : {}),
  };
}

function num$(item: Record<string, AttributeValue>, name: string): number {
  const value = item[name]?.N;
  return value === undefined ? 0 : Number(value);
}

function pick(names: Record<string, string>, wanted: readonly string[]): Record<string, string> {
  return Object.fromEntries(wanted.map((name) => [`#${name}`, names[`#${name}`] ?? name]));
}

function storeError(operation: string, slot: Slot, cause: unknown): StoreError {
  const detail = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
  return new StoreError(
    operation,
    `DynamoDB ${operation} of slot ${slot.jobId} ${slot.window} failed after the client's retries (${detail}); ` +
      'the slot is unchanged or ours, and the next delivery of this window will find out which',
    { cause },
  );
}

/** The operation a finishing write is reported as in a StoreError. */
function finishOperation(target: SlotState): string {
  if (target === SlotState.Running) return 'checkpoint';
  return target === SlotState.Done || target === SlotState.Partial ? 'complete' : 'release';
}
