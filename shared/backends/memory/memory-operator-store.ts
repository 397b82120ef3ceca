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
import { canonicalSlot, type Slot, windowSlot } from '../../slot/slot.js';
import { summaryWithEffectDone } from '../../slot/window-summary.js';
import { MemoryClaimStore } from './memory-claim-store.js';
import { MemoryEffectLedger } from './memory-effect-ledger.js';
import type { Condition, EffectItem, MemoryTable, SlotItem, WriteResult } from './memory-table.js';
import { directTransport, type MemoryTransport } from './memory-transport.js';

/** The table a MemoryOperatorStore writes, and the transport its requests travel by. */
export interface MemoryOperatorStoreOptions {
  readonly table: MemoryTable;
  /** @default directTransport */
  readonly transport?: MemoryTransport;
}

/**
 * The operator's writes on the in-memory table, with DynamoOperatorStore's conditions, order and
 * outcomes: each write fenced on the epoch the operator read, a refused one answered with the slot
 * as it is now, and where two items change, the order that never makes an effect run twice. For
 * tests and the simulation, alongside memoryBackend on the same table.
 * @example
 * const backend = memoryBackend({ hashKey });
 * const operator = new MemoryOperatorStore({ table: backend.table });
 */
export class MemoryOperatorStore implements OperatorStore {
  readonly #table: MemoryTable;
  readonly #transport: MemoryTransport;
  readonly #claims: MemoryClaimStore;
  readonly #ledger: MemoryEffectLedger;

  constructor(options: MemoryOperatorStoreOptions) {
    this.#table = options.table;
    this.#transport = options.transport ?? directTransport;
    const shared = { table: this.#table, transport: this.#transport };
    this.#claims = new MemoryClaimStore(shared);
    this.#ledger = new MemoryEffectLedger({ ...shared, expiresAtSeconds: () => 0 });
  }

  // Timeline: DynamoOperatorStore.forceRelease.
  async forceRelease(slot: Slot, request: ReleaseRequest): Promise<OperatorWriteOutcome> {
    return this.#slotWrite(slot, {
      condition: (item) =>
        item.epoch === request.expectedEpoch &&
        (item.state === SlotState.Failed ||
          item.state === SlotState.Stuck ||
          (item.state === SlotState.Running &&
            (request.evenIfLeaseLive || (item.leaseUntil ?? 0) < request.now))),
      write: (item) => givenBack(item, request),
      isDone: releasedAt(request),
      refusal: (current) => refusalReason(current, request, 'live-lease'),
    });
  }

  // Timeline: DynamoOperatorStore.reopen.
  async reopen(slot: Slot, request: OperatorRequest): Promise<OperatorWriteOutcome> {
    return this.#slotWrite(slot, {
      condition: (item) => item.epoch === request.expectedEpoch && isFinished(item.state),
      write: (item) => givenBack(item, request, { rewalk: true }),
      isDone: releasedAt(request),
      refusal: (current) => refusalReason(current, request, undefined),
    });
  }

  // Timeline: DynamoOperatorStore.redrive.
  async redrive(slot: Slot, request: RedriveRequest): Promise<RedriveOutcome> {
    const { outcome: guard, hold } = await this.#guard(slot, request);
    if (guard.kind === 'absent') return guard;
    if (guard.kind === 'refused') return { ...guard, cleared: [] };

    const failed = await failedEffectsToClear(this.#ledger, slot, request.keyHashes);
    if (!Array.isArray(failed)) {
      await this.#endHold(slot, request, hold);
      return failed;
    }
    const cleared: EffectRecord[] = [];
    for (const effect of failed) {
      const deleted = await this.#effectWrite(slot, effect.keyHash, exactly(effect), () => undefined);
      // Gone is what we wanted; a record a run re-reserved meanwhile is left to that run.
      if (deleted.committed || (await this.#ledger.read(slot, effect.keyHash)) === undefined) {
        cleared.push(effect);
      }
    }

    // Gives the slot back without a retry wait: the hold ends here.
    const reopened = await this.#slotWrite(slot, {
      ...noHolder(request, 'running'),
      write: (item) => givenBack(item, request, { rewalk: true }),
      isDone: releasedAt(request),
    });
    if (reopened.kind === 'ok') return { kind: 'redriven', record: reopened.record, cleared };
    return reopened.kind === 'refused' ? { ...reopened, cleared } : reopened;
  }

  // Timeline: DynamoOperatorStore.resolveEffect, and #countDone for the window's summary.
  async resolveEffect(
    slot: Slot,
    keyHash: string,
    resolution: EffectResolution,
    request: OperatorRequest,
  ): Promise<ResolveEffectOutcome> {
    if (resolution === 'done') {
      const guard = await this.#slotWrite(slot, noHolder(request, 'live-lease'));
      if (guard.kind !== 'ok') return guard;
      return this.#resolve(slot, keyHash, resolution, request, guard.record);
    }
    const { outcome: guard, hold } = await this.#guard(slot, request);
    if (guard.kind !== 'ok') return guard;
    try {
      return await this.#resolve(slot, keyHash, resolution, request, guard.record);
    } finally {
      // Held only when the guard found the slot RELEASED, which is never reopened: this ends the hold.
      await this.#endHold(slot, request, hold);
    }
  }

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
    const written = await this.#effectWrite(slot, keyHash, exactly(before), (item) =>
      resolution === 'done' && item ? { ...item, state: EffectState.Done } : undefined,
    );
    if (!written.committed) {
      const current = await this.#ledger.read(slot, keyHash);
      // Our own write whose reply was lost, retried by the transport, lands here too: the goal state counts.
      const reached = resolution === 'done' ? current?.state === EffectState.Done : current === undefined;
      if (!reached) return current ? { kind: 'effect-not-in-doubt', current } : { kind: 'effect-absent' };
    }

    let slotReopened = false;
    if (resolution === 'clear' && isFinished(guarded.state)) {
      slotReopened = (await this.reopen(slot, request)).kind === 'ok';
    }
    if (resolution === 'done') {
      // One atomic write here, where DynamoDB compares the summary it read: a reopened or re-claimed
      // slot is left alone, its next finish counts the window afresh.
      await this.#slotWrite(slot, {
        condition: (item) => item.epoch === request.expectedEpoch && isFinished(item.state),
        write: (item) => {
          const summary = item.summary ? summaryWithEffectDone(JSON.parse(item.summary), keyHash) : undefined;
          return summary ? { ...item, summary: JSON.stringify(summary) } : item;
        },
        isDone: () => false,
        refusal: (current) => refusalReason(current, request, 'live-lease'),
      });
    }
    return { kind: 'resolved', resolution, before, slotReopened };
  }

  // Timeline: DynamoOperatorStore.#guard.
  #guard(slot: Slot, request: OperatorRequest): Promise<HeldGuard> {
    const plain = noHolder(request, 'running');
    return guardWithHold(
      () => this.#claims.read(canonicalSlot(slot)),
      (hold) =>
        this.#slotWrite(
          slot,
          hold
            ? {
                ...plain,
                condition: (item) =>
                  item.epoch === request.expectedEpoch &&
                  item.state === SlotState.Released &&
                  item.resumeAfter === hold.found,
                write: (item) => ({ ...item, resumeAfter: hold.until }),
                isDone: underHold(request, hold),
              }
            : { ...plain, condition: (item) => plain.condition(item) && item.state !== SlotState.Released },
        ),
      request,
    );
  }

  // Timeline: DynamoOperatorStore.#endHold.
  async #endHold(slot: Slot, request: OperatorRequest, hold: OperatorHold | undefined): Promise<void> {
    if (!hold) return;
    await this.#slotWrite(slot, {
      condition: underHold(request, hold),
      write: ({ resumeAfter: _hold, ...item }) =>
        hold.found !== undefined ? { ...item, resumeAfter: hold.found } : item,
      isDone: () => true,
      refusal: (current) => refusalReason(current, request, undefined),
    });
  }

  async #slotWrite(
    slot: Slot,
    write: {
      readonly condition: (item: SlotItem) => boolean;
      readonly write: (item: SlotItem) => SlotItem;
      /** A failed condition that finds this record means the write had already happened. */
      readonly isDone: (record: SlotRecord) => boolean;
      readonly refusal: (current: SlotRecord) => RefusalReason;
    },
  ): Promise<OperatorWriteOutcome> {
    slot = canonicalSlot(slot);
    const result: WriteResult<SlotItem> = await this.#send(slot, () =>
      this.#table.updateSlot({
        operation: 'operator',
        slot,
        issuedAt: this.#table.version,
        condition: {
          expression: 'the operator write’s condition (see DynamoOperatorStore)',
          holds: (item) => item !== undefined && write.condition(item),
        },
        write: (item) => (item ? write.write(item) : undefined),
        returnOldOnConflict: false,
      }),
    );
    const current = await this.#claims.read(slot);
    if (!current) return { kind: 'absent' };
    if (result.committed || write.isDone(current)) return { kind: 'ok', record: current };
    return { kind: 'refused', reason: write.refusal(current), current };
  }

  #effectWrite(
    slot: Slot,
    keyHash: string,
    condition: Condition<EffectItem>,
    write: (item: EffectItem | undefined) => EffectItem | undefined,
  ): Promise<WriteResult<EffectItem>> {
    const window = windowSlot(canonicalSlot(slot));
    return this.#send(window, () =>
      this.#table.updateEffect(keyHash, {
        operation: 'operator',
        slot: window,
        issuedAt: this.#table.version,
        condition,
        write,
        returnOldOnConflict: false,
      }),
    );
  }

  async #send<R>(slot: Slot, execute: () => R): Promise<R> {
    try {
      return await this.#transport.send({ operation: 'operator', slot }, execute);
    } catch (cause) {
      const detail = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
      throw new StoreError(
        'operator',
        `in-memory store operator write on slot ${slot.jobId} ${slot.window} failed (${detail}); read the slot ` +
          'again and retry',
        { cause },
      );
    }
  }
}

/** DONE or PARTIAL: finished, with a summary counted from the window's records. */
function isFinished(state: SlotState): boolean {
  return state === SlotState.Done || state === SlotState.Partial;
}

/** The slot given back (see OperatorStore): DynamoOperatorStore's `givingBack`, on an item. */
function givenBack(item: SlotItem, request: OperatorRequest, options: { rewalk?: boolean } = {}): SlotItem {
  const { resumeAfter: _wait, finishedShards: _finished, ...kept } = item;
  const { completedAt: _completed, checkpoint: _checkpoint, progress: _progress, ...rewalked } = kept;
  return {
    ...(options.rewalk ? rewalked : kept),
    state: SlotState.Released,
    leaseUntil: request.now,
    failures: 0,
    noProgress: 0,
    ...(request.deadline !== undefined ? { deadline: request.deadline } : {}),
  };
}

/**
 * A write that changes nothing, conditioned on the epoch read and on no run holding the slot as
 * `rule` says (DynamoOperatorStore's `noHolder`): for `running`, nor a SHARDED window's shards.
 */
function noHolder(request: OperatorRequest, rule: HolderRule) {
  const held = (item: SlotItem) =>
    rule === 'running'
      ? item.state === SlotState.Running || item.state === SlotState.Sharded
      : item.state === SlotState.Running && (item.leaseUntil ?? 0) >= request.now;
  return {
    condition: (item: SlotItem) => item.epoch === request.expectedEpoch && !held(item),
    write: (item: SlotItem) => item,
    isDone: () => false,
    refusal: (current: SlotRecord) => refusalReason(current, request, rule),
  };
}

function releasedAt(request: OperatorRequest) {
  return (record: SlotRecord) =>
    record.state === SlotState.Released && record.epoch === request.expectedEpoch;
}

/** That exact record still: state, epoch, owner and refused attempts. */
function exactly(record: EffectRecord): Condition<EffectItem> {
  return {
    expression: '#state = :state AND #epoch = :epoch AND #owner = :owner AND #attempts = :attempts',
    holds: (item) =>
      item?.state === record.state &&
      item.epoch === record.epoch &&
      item.owner === record.owner &&
      (item.attempts ?? 0) === record.attempts,
  };
}
