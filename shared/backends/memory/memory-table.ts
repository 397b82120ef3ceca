import {
  effectiveInWindow,
  parseDoneMarks,
  type WindowDoneMarks,
  windowDoneMarksOf,
} from '../../slot/done-marks.js';
import { EffectState, type ProviderWord, type SlotState } from '../../slot/ports.js';
import type { Slot } from '../../slot/slot.js';
import { effectShard, slotPartitionKey, slotSortKey } from '../dynamodb/table-layout.js';
import { ProtocolAudit } from './protocol-audit.js';

/** A slot item, attribute for attribute the DynamoDB adapter's (see dynamodb-claim-store.ts). */
export interface SlotItem {
  readonly state: SlotState;
  readonly owner: string;
  readonly epoch: number;
  /** Removed on completion, as `REMOVE #leaseUntil` does. */
  readonly leaseUntil?: number;
  readonly attempts: number;
  readonly failures: number;
  readonly claimedAt: number;
  readonly expiresAt: number;
  readonly jobId: string;
  readonly window: string;
  readonly executionId: string;
  readonly attemptNumber: number;
  readonly invocationId: string;
  /** Written by every claim: whether this delivery was a deliberate late fire (a backfill). */
  readonly backfilled: boolean;
  readonly maxAttempts: number;
  readonly completedAt?: number;
  /** The run summary as JSON, stored as DynamoDB stores it, so every read gets its own copy. */
  readonly summary?: string;
  readonly lastError?: string;
  /** Set by the first claim, kept by every later one. */
  readonly deadline?: number;
  /** The checkpoint as JSON. */
  readonly checkpoint?: string;
  /** The holder's counts at its last checkpoint, as JSON; removed by each claim. */
  readonly progress?: string;
  readonly noProgress?: number;
  /** Removed by each claim. */
  readonly resumeAfter?: number;
  /** Set by the first claim, kept by every later one. */
  readonly keyVersion?: string;
  /** A window's split, set by its first claim; and the shards finished so far (a set). */
  readonly shards?: number;
  readonly finishedShards?: readonly number[];
  /** Every epoch's done marks as JSON: written by checkpoints, kept by everything else. */
  readonly doneMarks?: string;
}

/** An effect item, as the DynamoDB adapter writes it. */
export interface EffectItem {
  readonly state: EffectState;
  readonly epoch: number;
  readonly owner: string;
  readonly expiresAt: number;
  /** Refused attempts so far; carried from a FAILED item to the reservation that retries it. */
  readonly attempts?: number;
  /** FAILED and retryable: not before this instant. */
  readonly retryAt?: number;
  readonly reason?: string;
  /** The shard whose run wrote it, in a sharded window. */
  readonly shard?: number;
  readonly reservedAt?: number;
  /** What the provider said of this reservation's message. */
  readonly provider?: ProviderWord;
  /** The reserving run's sequence number, which its done marks cover. */
  readonly seq?: number;
}

/** The port operation a write belongs to: the audit judges each write by it. */
export type StoreOperation =
  | 'claim'
  | 'renew'
  | 'complete'
  | 'release'
  | 'read'
  | 'reserve'
  | 'markDone'
  | 'recordFailure'
  | 'unreserve'
  | 'checkpoint'
  | 'shardFinished'
  | 'recordProviderWord'
  | 'settleInDoubt'
  | 'readEffect'
  | 'list'
  /** An operator's write (MemoryOperatorStore): never a run's, and allowed to reopen a finished slot. */
  | 'operator';

/** A condition on the current item, with the DynamoDB ConditionExpression it stands for. */
export interface Condition<I> {
  /** The expression as the DynamoDB adapter writes it, for logs and step traces. */
  readonly expression: string;
  holds(item: I | undefined): boolean;
}

/** One conditional write: PutItem, UpdateItem or DeleteItem with a ConditionExpression. */
export interface ConditionalWrite<I> {
  readonly operation: StoreOperation;
  readonly slot: Slot;
  /** The grant the write is made under, for the audit. */
  readonly by?: { readonly owner: string; readonly epoch: number };
  /**
   * The table's version when the caller issued the request. A request can arrive long after it was
   * issued (a slow network, a frozen process); the audit tells the two apart.
   */
  readonly issuedAt: number;
  /** Absent: unconditional. */
  readonly condition?: Condition<I>;
  /** The new item from the current one; undefined deletes it. */
  readonly write: (item: I | undefined) => I | undefined;
  /** ReturnValuesOnConditionCheckFailure ALL_OLD: a failed condition returns the item that failed it. */
  readonly returnOldOnConflict: boolean;
}

/** What a conditional write came to: committed (with the item it replaced), or the condition failed. */
export type WriteResult<I> =
  | { readonly committed: true; readonly old: I | undefined }
  /** `item` is present only when the write asked for it (returnOldOnConflict) and there was one. */
  | { readonly committed: false; readonly item: I | undefined };

/**
 * The items of an in-memory claims table: slots and effects, keyed as in DynamoDB. Every method is
 * synchronous, so a request applied to the table is atomic; when requests arrive, and whether their
 * replies come back, is up to the transport that carries them (see memory-transport.ts).
 *
 * The table audits every committed write against the protocol's invariants (see ProtocolAudit):
 * it behaves like DynamoDB, and it also says when what it was asked to accept broke the protocol.
 */
export class MemoryTable {
  readonly audit = new ProtocolAudit();
  readonly #slots = new Map<string, SlotItem>();
  readonly #effects = new Map<string, Map<string, EffectItem>>();
  #version = 0;

  /** Grows by one with every committed write; requests are stamped with it when issued. */
  get version(): number {
    return this.#version;
  }

  getSlot(slot: Slot): SlotItem | undefined {
    return this.#slots.get(slotKey(slot));
  }

  updateSlot(write: ConditionalWrite<SlotItem>): WriteResult<SlotItem> {
    const key = slotKey(write.slot);
    const current = this.#slots.get(key);
    if (write.condition && !write.condition.holds(current)) {
      return { committed: false, item: write.returnOldOnConflict ? current : undefined };
    }
    const next = write.write(current);
    if (next) this.#slots.set(key, next);
    else this.#slots.delete(key);
    this.#version++;
    this.audit.slotWritten(write, current, next, this.#version);
    return { committed: true, old: current };
  }

  /** The slot items of a window (its own and its shards'), as one DynamoDB query of its partition reads them. */
  #windowSlots(slot: Slot): [number | undefined, SlotItem][] {
    const found: [number | undefined, SlotItem][] = [];
    const prefix = `${windowKey(slot)}/`;
    for (const [key, item] of this.#slots) {
      if (!key.startsWith(prefix)) continue;
      const sortKey = key.slice(prefix.length);
      found.push([sortKey.startsWith('shard#') ? Number(sortKey.slice('shard#'.length)) : undefined, item]);
    }
    return found;
  }

  getEffect(slot: Slot, keyHash: string): EffectItem | undefined {
    return this.#effects.get(windowKey(slot))?.get(keyHash);
  }

  /** The done marks on a window's slot records (its own and its shards'), by shard. */
  windowDoneMarks(slot: Slot): WindowDoneMarks {
    return windowDoneMarksOf(
      this.#windowSlots(slot).map(([shard, item]) => [shard, parseDoneMarks(item.doneMarks)] as const),
    );
  }

  /**
   * An effect item as the ledger reads it: a reservation the done marks of its slot record cover
   * is DONE (effectiveInWindow). `getEffect` gives the item as stored, where such a reservation is
   * still RESERVED.
   */
  effectiveEffect(slot: Slot, keyHash: string): EffectItem | undefined {
    const item = this.getEffect(slot, keyHash);
    return item && effectiveItem(keyHash, item, this.windowDoneMarks(slot));
  }

  /** A window's effects as the ledger lists them (see effectiveEffect), in listEffects' order. */
  effectiveEffects(slot: Slot): [string, EffectItem][] {
    const marks = this.windowDoneMarks(slot);
    return this.listEffects(slot).map(([keyHash, item]) => [keyHash, effectiveItem(keyHash, item, marks)]);
  }

  updateEffect(keyHash: string, write: ConditionalWrite<EffectItem>): WriteResult<EffectItem> {
    const effects = this.#effectsOf(write.slot);
    const current = effects.get(keyHash);
    if (write.condition && !write.condition.holds(current)) {
      return { committed: false, item: write.returnOldOnConflict ? current : undefined };
    }
    const next = write.write(current);
    if (next) effects.set(keyHash, next);
    else effects.delete(keyHash);
    this.#version++;
    this.audit.effectWritten(write, keyHash, current, next);
    return { committed: true, old: current };
  }

  /** BatchWriteItem of unconditional puts: each item lands, none is left unprocessed. */
  putEffects(write: Omit<ConditionalWrite<EffectItem>, 'condition'>, keyHashes: readonly string[]): void {
    for (const keyHash of keyHashes) this.updateEffect(keyHash, write);
  }

  /** A window's effects in the order a DynamoDB query of its shards returns them: by shard, then key. */
  listEffects(slot: Slot): [string, EffectItem][] {
    return [...this.#effectsOf(slot)].sort(
      ([a], [b]) => effectShard(a) - effectShard(b) || (a < b ? -1 : a > b ? 1 : 0),
    );
  }

  /**
   * Deletes a slot record as DynamoDB's TTL would once it passes `expiresAt`. The runtime refuses
   * windows old enough for this to happen; tests call it to show what would follow if it did not.
   */
  expireSlot(slot: Slot): void {
    if (this.#slots.delete(slotKey(slot))) this.#version++;
  }

  /** A window's effects: one ledger per window, whichever shard writes to it. */
  #effectsOf(slot: Slot): Map<string, EffectItem> {
    const key = windowKey(slot);
    let effects = this.#effects.get(key);
    if (!effects) {
      effects = new Map();
      this.#effects.set(key, effects);
    }
    return effects;
  }
}

/**
 * `item` as it stands under `marks` (a window's, by shard): a DONE copy when they cover its
 * reservation, else `item` itself.
 */
export function effectiveItem(keyHash: string, item: EffectItem, marks: WindowDoneMarks): EffectItem {
  const record = effectiveInWindow({ ...item, keyHash, attempts: item.attempts ?? 0 }, marks);
  return record.state === item.state ? item : { ...item, state: EffectState.Done };
}

/** A slot record's key: the window's, or one of its shards' (as the DynamoDB sort key tells them apart). */
function slotKey(slot: Slot): string {
  return `${slotPartitionKey(slot.jobId, slot.window)}/${slotSortKey(slot.shard)}`;
}

function windowKey(slot: Slot): string {
  return slotPartitionKey(slot.jobId, slot.window);
}
