import {
  type AttributeValue,
  ConditionalCheckFailedException,
  DeleteItemCommand,
  type DynamoDBClient,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import { StoreError } from '../../errors.js';
import {
  type EffectResolution,
  failedEffectsToClear,
  guardWithHold,
  type HeldGuard,
  type HolderRule,
  type OperatorHold,
  type OperatorRequest,
  type OperatorStore,
  type OperatorWriteOutcome,
  type RedriveOutcome,
  type RedriveRequest,
  type RefusalReason,
  type ReleaseRequest,
  type ResolveEffectOutcome,
  refusalReason,
  underHold,
} from '../../slot/operator-ports.js';
import { type EffectRecord, EffectState, type SlotRecord, SlotState } from '../../slot/ports.js';
import { canonicalSlot, type Slot } from '../../slot/slot.js';
import { summaryWithEffectDone } from '../../slot/window-summary.js';
import { num, str } from './attribute-values.js';
import { SlotAttribute as A, DynamoClaimStore } from './dynamodb-claim-store.js';
import { DynamoEffectLedger } from './dynamodb-effect-ledger.js';
import { effectPartitionKey, slotPartitionKey, slotSortKey, TableLayout } from './table-layout.js';

/** The table the operator writes to, through the client given. */
export interface DynamoOperatorStoreOptions {
  readonly client: DynamoDBClient;
  readonly tableName: string;
}

/** Who last acted on a slot or an effect from outside a run, for whoever reads the item next. */
const OPERATOR_ACTION = 'operatorAction';
/** The effect ledger's attribute names (dynamodb-effect-ledger.ts writes them). */
const FX = { state: 'state', epoch: 'epoch', owner: 'owner', attempts: 'attempts' } as const;

/**
 * The operator's writes on the DynamoDB claims table: each one conditional UpdateItem or DeleteItem,
 * fenced on the epoch the operator read. A refused write is answered with the record as it is now.
 * Nothing here needs a transaction (dynalite, the test server, has none): where two items change,
 * the order is chosen so that a crash between the writes never makes an effect run twice. Every
 * write takes its slot as the runtime's ports do (canonicalSlot): one instant however its window is
 * spelled, and no job id or window that could make two slots one key.
 */
export class DynamoOperatorStore implements OperatorStore {
  readonly #client: DynamoDBClient;
  readonly #table: string;
  readonly #claims: DynamoClaimStore;
  readonly #ledger: DynamoEffectLedger;

  constructor(options: DynamoOperatorStoreOptions) {
    this.#client = options.client;
    this.#table = options.tableName;
    this.#claims = new DynamoClaimStore(options);
    this.#ledger = new DynamoEffectLedger({ ...options, expiresAtSeconds: () => 0 });
  }

  /*
   * Timeline of a forced release:
   *   t0  operator reads the slot: RUNNING, epoch 3, lease ended at t0 - 5 min (holder crashed)
   *   t1  UpdateItem if epoch = 3 AND (FAILED OR STUCK OR RUNNING with leaseUntil < t1)
   *       → RELEASED, failures 0, runs without progress 0, no retry wait, the new deadline if given
   *   t2  next delivery claims it (RELEASED): epoch 4, resumes from the checkpoint, skips every effect done
   * Had a delivery taken the slot over between t0 and t1, its epoch 4 fails the condition: the
   * operator is told, and the live run is left alone. With `evenIfLeaseLive` the lease clause goes;
   * the holder at epoch 3 is then fenced at its next renewal, mark or completion.
   */
  async forceRelease(slot: Slot, request: ReleaseRequest): Promise<OperatorWriteOutcome> {
    slot = canonicalSlot(slot);
    const releasable = request.evenIfLeaseLive
      ? '(#state = :running OR #state = :failed OR #state = :stuck)'
      : '(#state = :failed OR #state = :stuck OR (#state = :running AND #leaseUntil < :now))';
    return this.#slotWrite(slot, request, {
      action: request.evenIfLeaseLive ? 'force-released' : 'released',
      update: givingBack(request),
      condition: `#epoch = :expected AND ${releasable}`,
      values: {
        ':running': str(SlotState.Running),
        ':failed': str(SlotState.Failed),
        ':stuck': str(SlotState.Stuck),
      },
      isDone: (record) => record.state === SlotState.Released && record.epoch === request.expectedEpoch,
      refusal: (current) => refusalReason(current, request, 'live-lease'),
    });
  }

  /*
   * Timeline of a reopen:
   *   t0  operator reads the slot: DONE (or PARTIAL), epoch 2
   *   t1  UpdateItem if epoch = 2 AND state = DONE or PARTIAL → RELEASED (completedAt and the
   *       checkpoint removed, the new deadline if given)
   *   t2  next delivery claims it: epoch 3, walks the job from the start, skips every effect DONE,
   *       performs the ones cleared
   */
  async reopen(slot: Slot, request: OperatorRequest): Promise<OperatorWriteOutcome> {
    slot = canonicalSlot(slot);
    return this.#slotWrite(slot, request, {
      action: 'reopened',
      update: givingBack(request, { rewalk: true }),
      condition: '#epoch = :expected AND (#state = :done OR #state = :partial)',
      values: { ':done': str(SlotState.Done), ':partial': str(SlotState.Partial) },
      isDone: (record) => record.state === SlotState.Released && record.epoch === request.expectedEpoch,
      refusal: (current) => refusalReason(current, request, undefined),
    });
  }

  /*
   * Timeline of a re-drive (PARTIAL at epoch 2, effects bb and cc FAILED):
   *   t0  operator reads the slot: PARTIAL, epoch 2
   *   t1  UpdateItem on the slot if epoch = 2 AND not RUNNING (records the action): no run holds
   *       it, not even one past its lease (see HolderRule), and it is as the operator saw it. A
   *       RELEASED slot (claimable) is also held against claims until t3 (see #guard)
   *   t2  each FAILED effect: DeleteItem if it is still that exact refusal (FAILED, epoch, owner,
   *       attempts): a record a run re-reserved meanwhile is left to that run
   *   t3  UpdateItem if epoch = 2 AND not RUNNING → RELEASED, the new deadline, runs without
   *       progress 0, no checkpoint, no retry wait (which ends t1's hold)
   *   t4  a delivery claims it: epoch 3, walks the job, skips what is done, performs bb and cc
   * The effects go first: a crash between t2 and t3 leaves the slot PARTIAL with fewer failures on
   * record, and the same command run again finishes the job. A cleared effect was refused before it
   * was performed, so performing it at t4 is its first time.
   */
  async redrive(slot: Slot, request: RedriveRequest): Promise<RedriveOutcome> {
    slot = canonicalSlot(slot);
    const { outcome: guard, hold } = await this.#guard(slot, request, 'redrive');
    if (guard.kind === 'absent') return guard;
    if (guard.kind === 'refused') return { ...guard, cleared: [] };

    const failed = await failedEffectsToClear(this.#ledger, slot, request.keyHashes);
    if (!Array.isArray(failed)) {
      await this.#endHold(slot, request, hold);
      return failed;
    }
    const cleared: EffectRecord[] = [];
    for (const effect of failed) {
      if (await this.#deleteExactly(slot, effect)) cleared.push(effect);
    }

    const reopened = await this.#slotWrite(slot, request, {
      ...noHolder(request, 'running', 'redriven'),
      update: givingBack(request, { rewalk: true }),
      isDone: (record) => record.state === SlotState.Released && record.epoch === request.expectedEpoch,
    });
    switch (reopened.kind) {
      case 'ok':
        return { kind: 'redriven', record: reopened.record, cleared };
      case 'refused':
        return { ...reopened, cleared };
      case 'absent':
        return reopened;
      default:
        return reopened satisfies never;
    }
  }

  /*
   * Timeline of resolving an effect in doubt (RESERVED at epoch 1 by a holder that crashed):
   *   t0  operator reads slot (DONE, epoch 2) and effect (RESERVED, epoch 1, owner o1)
   *   t1  UpdateItem on the slot if epoch = 2 AND no run holds it (records the action): the slot is
   *       as the operator saw it, and no run is working on it. For `clear`, not RUNNING at all: a
   *       holder past its lease may be frozen, and its late done marks would cover the deleted
   *       reservation (see HolderRule); for `done`, no live lease
   *   t2  the effect: done → UpdateItem to DONE; clear → DeleteItem; both only if it is still that
   *       exact reservation (RESERVED, epoch 1, owner o1)
   *   t3  clear on a DONE or PARTIAL slot: reopen it, fenced on epoch 2, so a later delivery performs it;
   *       done on one: move the effect from in doubt to done in the window's stored summary
   *   t3' clear on a RELEASED slot: end t1's hold (see #guard)
   * A delivery claiming the slot between t1 and t2 would find the effect RESERVED by an earlier epoch
   * and leave it in doubt (never perform it): the effect runs at most once whichever write lands
   * first. For a `clear` it must not run at all: the delete would then remove a reservation the run
   * has passed by, and, with no reopen after a RELEASED slot, the run would finish the window
   * without it. A DONE or PARTIAL slot cannot be claimed; a RELEASED one is held against claims
   * from t1 to t3'.
   */
  async resolveEffect(
    slot: Slot,
    keyHash: string,
    resolution: EffectResolution,
    request: OperatorRequest,
  ): Promise<ResolveEffectOutcome> {
    slot = canonicalSlot(slot);
    if (resolution === 'done') {
      const guard = await this.#slotWrite(
        slot,
        request,
        noHolder(request, 'live-lease', `marked-done ${keyHash}`),
      );
      if (guard.kind !== 'ok') return guard;
      return this.#resolve(slot, keyHash, resolution, request, guard.record);
    }
    const { outcome: guard, hold } = await this.#guard(slot, request, `cleared ${keyHash}`);
    if (guard.kind !== 'ok') return guard;
    try {
      return await this.#resolve(slot, keyHash, resolution, request, guard.record);
    } finally {
      // Held only when the guard found the slot RELEASED, which t3 never reopens: t3' ends the hold.
      await this.#endHold(slot, request, hold);
    }
  }

  /** t2 and t3 of resolveEffect, after its guard let them go ahead on `guarded`. */
  async #resolve(
    slot: Slot,
    keyHash: string,
    resolution: EffectResolution,
    request: OperatorRequest,
    guarded: SlotRecord,
  ): Promise<ResolveEffectOutcome> {
    const before = await this.#ledger.read(slot, keyHash);
    if (!before) return { kind: 'effect-absent' };
    if (before.state !== EffectState.Reserved) return { kind: 'effect-not-in-doubt', current: before };
    const key = effectKey(slot, keyHash);
    const exactReservation = {
      ConditionExpression: '#state = :reserved AND #epoch = :epoch AND #owner = :owner',
      ExpressionAttributeNames: { '#state': FX.state, '#epoch': FX.epoch, '#owner': FX.owner },
    };
    const reservationValues = {
      ':reserved': str(EffectState.Reserved),
      ':epoch': num(before.epoch),
      ':owner': str(before.owner),
    };
    try {
      if (resolution === 'done') {
        await this.#client.send(
          new UpdateItemCommand({
            TableName: this.#table,
            Key: key,
            UpdateExpression: 'SET #state = :done, #operatorAction = :action',
            ...exactReservation,
            ExpressionAttributeNames: {
              ...exactReservation.ExpressionAttributeNames,
              '#operatorAction': OPERATOR_ACTION,
            },
            ExpressionAttributeValues: {
              ...reservationValues,
              ':done': str(EffectState.Done),
              ':action': str(`marked done by an operator at ${new Date(request.now).toISOString()}`),
            },
          }),
        );
      } else {
        await this.#client.send(
          new DeleteItemCommand({
            TableName: this.#table,
            Key: key,
            ...exactReservation,
            ExpressionAttributeValues: reservationValues,
          }),
        );
      }
    } catch (error) {
      if (!(error instanceof ConditionalCheckFailedException)) throw storeError('resolveEffect', slot, error);
      const current = await this.#ledger.read(slot, keyHash);
      // Our own write whose reply was lost, retried by the SDK, lands here too: the goal state counts.
      const reached = resolution === 'done' ? current?.state === EffectState.Done : current === undefined;
      if (!reached) return current ? { kind: 'effect-not-in-doubt', current } : { kind: 'effect-absent' };
    }

    let slotReopened = false;
    if (resolution === 'clear' && isFinished(guarded)) {
      slotReopened = (await this.reopen(slot, request)).kind === 'ok';
    }
    if (resolution === 'done') await this.#countDone(slot, keyHash, guarded, request);
    return { kind: 'resolved', resolution, before, slotReopened };
  }

  /*
   * Timeline of the guard of a clear or a re-drive (see OPERATOR_HOLD_MS):
   *   t0  operator reads the slot: RELEASED, epoch 2, retry wait w (or none)
   *   t1  UpdateItem if epoch = 2 AND RELEASED AND resumeAfter = w (or none)
   *       → resumeAfter = the later of w and now + OPERATOR_HOLD_MS: a claim is answered `waiting`
   *   t2  the operator's deletes
   *   t3  its last write ends the hold: the re-drive's give-back (no retry wait), or #endHold
   * Any other state but RUNNING or SHARDED cannot be claimed: the guard is then conditioned on the
   * state not RELEASED, and nothing is held. A slot that changed between t0 and t1 (reopened, its
   * wait changed) is read again. An operator that crashes after t1 leaves the hold to end by itself.
   */
  #guard(slot: Slot, request: OperatorRequest, action: string): Promise<HeldGuard> {
    const plain = noHolder(request, 'running', action);
    return guardWithHold(
      () => this.#claims.read(slot),
      (hold) =>
        this.#slotWrite(
          slot,
          request,
          hold
            ? {
                ...plain,
                update: 'SET #operatorAction = :action, #resumeAfter = :hold',
                condition: `#epoch = :expected AND #state = :released AND ${waitIs(hold.found)}`,
                values: { ':hold': num(hold.until), ...foundValue(hold) },
                isDone: underHold(request, hold),
              }
            : { ...plain, condition: `${plain.condition} AND #state <> :released` },
        ),
      request,
    );
  }

  /*
   * Timeline of a hold's end (t3' of a clear on a RELEASED slot, or a clear or re-drive that
   * answered without writing):
   *   t3' UpdateItem if epoch = 2 AND RELEASED AND resumeAfter = the hold → the wait found at t0
   *       back (or none)
   * A slot that moved on (the hold had ended by itself, and a run claimed it) is left alone.
   */
  async #endHold(slot: Slot, request: OperatorRequest, hold: OperatorHold | undefined): Promise<void> {
    if (!hold) return;
    await this.#slotWrite(slot, request, {
      action: 'hold-ended',
      update:
        hold.found !== undefined
          ? 'SET #operatorAction = :action, #resumeAfter = :found'
          : 'SET #operatorAction = :action REMOVE #resumeAfter',
      condition: '#epoch = :expected AND #state = :released AND #resumeAfter = :hold',
      values: { ':hold': num(hold.until), ...foundValue(hold) },
      isDone: () => true,
      refusal: (current) => refusalReason(current, request, undefined),
    });
  }

  /*
   * Timeline of the summary's count (t3 of a `done` on a DONE slot whose summary counts 2 in doubt):
   *   t3  UpdateItem if epoch = 2 AND state = DONE or PARTIAL AND summary = the one read
   *       → the same summary with 1 in doubt, one more done, the hash off its in-doubt list
   *   t3' another resolver's count landed first (the watchdog, a second operator): the condition
   *       fails; read the slot again and count on its summary, a few times at most
   * A reopened or re-claimed slot is left alone: its next finish counts the window afresh. A crash
   * between t2 and t3 leaves the summary counting the effect in doubt, as it did before.
   */
  async #countDone(slot: Slot, keyHash: string, read: SlotRecord, request: OperatorRequest): Promise<void> {
    let record: SlotRecord | undefined = read;
    for (let attempt = 0; attempt < 3 && record; attempt++) {
      if (!isFinished(record) || record.epoch !== request.expectedEpoch || !record.summary) return;
      const counted = summaryWithEffectDone(record.summary, keyHash);
      if (!counted) return;
      try {
        await this.#client.send(
          new UpdateItemCommand({
            TableName: this.#table,
            Key: slotKey(slot),
            UpdateExpression: 'SET #summary = :counted',
            ConditionExpression: '#epoch = :expected AND #state IN (:done, :partial) AND #summary = :read',
            ExpressionAttributeNames: { '#summary': A.summary, '#epoch': A.epoch, '#state': A.state },
            ExpressionAttributeValues: {
              ':counted': str(JSON.stringify(counted)),
              ':read': str(JSON.stringify(record.summary)),
              ':expected': num(request.expectedEpoch),
              ':done': str(SlotState.Done),
              ':partial': str(SlotState.Partial),
            },
          }),
        );
        return;
      } catch (error) {
        if (!(error instanceof ConditionalCheckFailedException))
          throw storeError('resolveEffect', slot, error);
        record = await this.#claims.read(slot);
      }
    }
  }

  /** Deletes a FAILED effect if it is still the refusal read; true when it is gone. */
  async #deleteExactly(slot: Slot, effect: EffectRecord): Promise<boolean> {
    const attempts = effect.attempts > 0 ? '#attempts = :attempts' : 'attribute_not_exists(#attempts)';
    try {
      await this.#client.send(
        new DeleteItemCommand({
          TableName: this.#table,
          Key: effectKey(slot, effect.keyHash),
          ConditionExpression: `#state = :failed AND #epoch = :epoch AND #owner = :owner AND ${attempts}`,
          ExpressionAttributeNames: {
            '#state': FX.state,
            '#epoch': FX.epoch,
            '#owner': FX.owner,
            '#attempts': FX.attempts,
          },
          ExpressionAttributeValues: {
            ':failed': str(EffectState.Failed),
            ':epoch': num(effect.epoch),
            ':owner': str(effect.owner),
            ...(effect.attempts > 0 ? { ':attempts': num(effect.attempts) } : {}),
          },
        }),
      );
      return true;
    } catch (error) {
      if (!(error instanceof ConditionalCheckFailedException)) throw storeError('redrive', slot, error);
      // Gone is what we wanted (our own delete whose reply was lost, retried by the SDK); anything
      // else is a record a run changed since: left to that run.
      return (await this.#ledger.read(slot, effect.keyHash)) === undefined;
    }
  }

  async #slotWrite(
    slot: Slot,
    request: OperatorRequest,
    write: {
      readonly action: string;
      readonly update: string;
      readonly condition: string;
      readonly values: Record<string, AttributeValue>;
      /** A failed condition that finds this record means the write had already happened. */
      readonly isDone: (record: SlotRecord) => boolean;
      readonly refusal: (current: SlotRecord) => RefusalReason;
    },
  ): Promise<OperatorWriteOutcome> {
    const names: Record<string, string> = { '#operatorAction': OPERATOR_ACTION };
    for (const name of Object.values(A)) names[`#${name}`] = name;
    try {
      await this.#client.send(
        new UpdateItemCommand({
          TableName: this.#table,
          Key: slotKey(slot),
          UpdateExpression: write.update,
          ConditionExpression: write.condition,
          ExpressionAttributeNames: Object.fromEntries(
            Object.entries(names).filter(
              ([placeholder]) => write.update.includes(placeholder) || write.condition.includes(placeholder),
            ),
          ),
          ExpressionAttributeValues: Object.fromEntries(
            Object.entries({
              ...write.values,
              ':zero': num(0),
              ...(request.deadline !== undefined ? { ':deadline': num(request.deadline) } : {}),
              ':expected': num(request.expectedEpoch),
              ':now': num(request.now),
              ':released': str(SlotState.Released),
              ':action': str(`${write.action} by an operator at ${new Date(request.now).toISOString()}`),
            }).filter(
              ([placeholder]) => write.update.includes(placeholder) || write.condition.includes(placeholder),
            ),
          ),
        }),
      );
    } catch (error) {
      if (!(error instanceof ConditionalCheckFailedException)) throw storeError(write.action, slot, error);
      const current = await this.#claims.read(slot);
      if (!current) return { kind: 'absent' };
      if (write.isDone(current)) return { kind: 'ok', record: current };
      return { kind: 'refused', reason: write.refusal(current), current };
    }
    const record = await this.#claims.read(slot);
    if (!record) return { kind: 'absent' };
    return { kind: 'ok', record };
  }
}

/** A slot item's key. A shard is a slot of its own (sk `shard#0003`): a write must land on it, not its window. */
function slotKey(slot: Slot): Record<string, AttributeValue> {
  return {
    [TableLayout.partitionKey]: str(slotPartitionKey(slot.jobId, slot.window)),
    [TableLayout.sortKey]: str(slotSortKey(slot.shard)),
  };
}

/** DONE or PARTIAL: finished, with a summary counted from the window's records. */
function isFinished(record: SlotRecord): boolean {
  return record.state === SlotState.Done || record.state === SlotState.Partial;
}

function effectKey(slot: Slot, keyHash: string): Record<string, AttributeValue> {
  return {
    [TableLayout.partitionKey]: str(effectPartitionKey(slot.jobId, slot.window, keyHash)),
    [TableLayout.sortKey]: str(keyHash),
  };
}

/**
 * The SET and REMOVE of a write that gives the slot back (see OperatorStore): RELEASED, failures and
 * runs without progress 0, no retry wait, the request's deadline if it has one. `rewalk` also drops
 * what a finished or re-driven window no longer needs: its completion time and its checkpoint.
 *
 * A split window's set of finished shards goes too: its next claim splits it again, and every shard
 * reports its end afresh (one that had finished, as soon as its message finds it done). A set kept
 * from before would count a shard released since as finished, and the window could be finished
 * while that shard's work is still to do.
 */
function givingBack(request: OperatorRequest, options: { readonly rewalk?: boolean } = {}): string {
  const sets = [
    '#state = :released',
    '#leaseUntil = :now',
    '#failures = :zero',
    '#noProgress = :zero',
    '#operatorAction = :action',
  ];
  if (request.deadline !== undefined) sets.push('#deadline = :deadline');
  const removes = [
    '#resumeAfter',
    '#finishedShards',
    ...(options.rewalk ? ['#completedAt', '#checkpoint', '#progress'] : []),
  ];
  return `SET ${sets.join(', ')} REMOVE ${removes.join(', ')}`;
}

/**
 * A slot write that changes nothing but the operator's note, conditioned on the epoch read and on no
 * run holding the slot as `rule` says: under a live lease, or (`running`) RUNNING at all, nor a
 * SHARDED window's shards, whose leases its record does not show (refused as `state`). The guard
 * before writes to a slot's effects.
 */
function noHolder(request: OperatorRequest, rule: HolderRule, action: string) {
  const free =
    rule === 'running'
      ? '#state <> :running AND #state <> :sharded'
      : 'NOT (#state = :running AND #leaseUntil >= :now)';
  return {
    action,
    update: 'SET #operatorAction = :action',
    condition: `#epoch = :expected AND attribute_exists(#state) AND ${free}`,
    values: { ':running': str(SlotState.Running), ':sharded': str(SlotState.Sharded) },
    isDone: (_record: SlotRecord) => false,
    refusal: (current: SlotRecord) => refusalReason(current, request, rule),
  };
}

/** The retry wait the guard found, as its condition. */
function waitIs(found: number | undefined): string {
  return found !== undefined ? '#resumeAfter = :found' : 'attribute_not_exists(#resumeAfter)';
}

function foundValue(hold: OperatorHold): Record<string, AttributeValue> {
  return hold.found !== undefined ? { ':found': num(hold.found) } : {};
}

function storeError(operation: string, slot: Slot, cause: unknown): StoreError {
  const detail = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
  return new StoreError(
    operation,
    `DynamoDB ${operation} of slot ${slot.jobId} ${slot.window} failed after the client's retries (${detail}); ` +
      'read the slot again (slotguard slots show) and retry',
    { cause },
  );
}
