import { StoreError } from '../../errors.js';
import type { Claim, EffectLedger, EffectRecord, ReserveOutcome } from '../../slot/ports.js';
import { EffectState } from '../../slot/ports.js';
import type { Slot } from '../../slot/slot.js';
import type { Condition, EffectItem, MemoryTable, StoreOperation, WriteResult } from './memory-table.js';
import type { MemoryRequest, MemoryTransport } from './memory-transport.js';

/** The table a MemoryEffectLedger writes, the transport its requests travel by, and its TTL. */
export interface MemoryEffectLedgerOptions {
  readonly table: MemoryTable;
  readonly transport: MemoryTransport;
  /** Retention of effect records, as the TTL attribute's epoch seconds for a slot. */
  readonly expiresAtSeconds: (slot: Slot) => number;
  /** @default true (see MemoryClaimStoreOptions.returnOldOnConflict) */
  readonly returnOldOnConflict?: boolean;
}

/** BatchWriteItem's limit, kept so a batch of marks costs the same requests as on DynamoDB. */
const BATCH_LIMIT = 25;

/**
 * The effect half of the in-memory backend: DynamoEffectLedger's conditions and outcomes over a
 * MemoryTable.
 *
 * Timeline of one effect:
 *   reserve  put if absent: RESERVED, epoch e, owner o    → ours to perform
 *   perform  the caller sends the email
 *   mark     batched unconditional puts: DONE, epoch e    → later runs skip it
 * A crash between reserve and mark leaves RESERVED with epoch e; a later epoch reports it in doubt.
 */
export class MemoryEffectLedger implements EffectLedger {
  readonly #table: MemoryTable;
  readonly #transport: MemoryTransport;
  readonly #expiresAt: (slot: Slot) => number;
  readonly #returnOld: boolean;

  constructor(options: MemoryEffectLedgerOptions) {
    this.#table = options.table;
    this.#transport = options.transport;
    this.#expiresAt = options.expiresAtSeconds;
    this.#returnOld = options.returnOldOnConflict ?? true;
  }

  async reserve(claim: Claim, keyHash: string, options: { rerunInDoubt: boolean }): Promise<ReserveOutcome> {
    return this.#reserve(claim, keyHash, options, this.#table.version);
  }

  /**
   * `issuedAt` is when the caller asked, kept across the retries below: the audit dates a
   * reservation by the caller's decision (made under its lease), not by the adapter's follow-up.
   */
  async #reserve(
    claim: Claim,
    keyHash: string,
    options: { rerunInDoubt: boolean },
    issuedAt: number,
  ): Promise<ReserveOutcome> {
    const result = await this.#put(claim, keyHash, absent, issuedAt);
    if (result.committed) return { kind: 'reserved', rerun: false };
    const current = result.item ? toRecord(keyHash, result.item) : await this.read(claim.slot, keyHash);
    if (!current) return this.#reserve(claim, keyHash, options, issuedAt); // unreserved in between: try again
    if (current.state === EffectState.Done) return { kind: 'done' };
    if (current.owner === claim.owner && current.epoch === claim.epoch) {
      // Our own reservation committed and its reply was lost; the transport's retry met it.
      return { kind: 'reserved', rerun: false };
    }
    if (current.epoch > claim.epoch) return { kind: 'fenced', epoch: current.epoch };
    if (!options.rerunInDoubt) return { kind: 'in-doubt', epoch: current.epoch };
    return this.#takeOver(claim, keyHash, current, issuedAt);
  }

  /**
   * Marks are unconditional batch puts, as on DynamoDB: only the holder that reserved a key marks
   * it, and DONE is the truth whoever writes it once the effect has happened.
   */
  async markDone(claim: Claim, keyHashes: readonly string[]): Promise<void> {
    for (let start = 0; start < keyHashes.length; start += BATCH_LIMIT) {
      const batch = keyHashes.slice(start, start + BATCH_LIMIT);
      const issuedAt = this.#table.version;
      await this.#send({ operation: 'markDone', slot: claim.slot, by: by(claim), keys: batch.length }, () =>
        this.#table.putEffects(
          {
            operation: 'markDone',
            slot: claim.slot,
            by: by(claim),
            issuedAt,
            write: () => this.#item(claim, EffectState.Done),
            returnOldOnConflict: this.#returnOld,
          },
          batch,
        ),
      );
    }
  }

  async unreserve(claim: Claim, keyHash: string): Promise<void> {
    // A failed condition is already-gone (our own delete whose reply was lost): nothing to release.
    await this.#write('unreserve', claim, keyHash, reservedBy(claim), () => undefined, this.#table.version);
  }

  async read(slot: Slot, keyHash: string): Promise<EffectRecord | undefined> {
    const item = await this.#send({ operation: 'readEffect', slot, keyHash }, () =>
      this.#table.getEffect(slot, keyHash),
    );
    return item ? toRecord(keyHash, item) : undefined;
  }

  async *list(slot: Slot): AsyncIterable<EffectRecord> {
    const items = await this.#send({ operation: 'list', slot }, () => this.#table.listEffects(slot));
    for (const [keyHash, item] of items) yield toRecord(keyHash, item);
  }

  /** The opt-in re-run of an in-doubt effect: replace that exact stale reservation, or lose the race. */
  async #takeOver(
    claim: Claim,
    keyHash: string,
    stale: EffectRecord,
    issuedAt: number,
  ): Promise<ReserveOutcome> {
    const result = await this.#put(claim, keyHash, reservedBy(stale), issuedAt);
    if (result.committed) return { kind: 'reserved', rerun: true };
    const current = await this.read(claim.slot, keyHash);
    if (current?.state === EffectState.Done) return { kind: 'done' };
    if (current && current.owner === claim.owner && current.epoch === claim.epoch) {
      return { kind: 'reserved', rerun: true };
    }
    return { kind: 'in-doubt', epoch: current?.epoch ?? stale.epoch };
  }

  /** A reservation: RESERVED, stamped with the claim's epoch and owner, if `condition` holds. */
  #put(
    claim: Claim,
    keyHash: string,
    condition: Condition<EffectItem>,
    issuedAt: number,
  ): Promise<WriteResult<EffectItem>> {
    return this.#write(
      'reserve',
      claim,
      keyHash,
      condition,
      () => this.#item(claim, EffectState.Reserved),
      issuedAt,
    );
  }

  #write(
    operation: StoreOperation,
    claim: Claim,
    keyHash: string,
    condition: Condition<EffectItem>,
    write: (item: EffectItem | undefined) => EffectItem | undefined,
    issuedAt: number,
  ): Promise<WriteResult<EffectItem>> {
    return this.#send({ operation, slot: claim.slot, by: by(claim), keyHash }, () =>
      this.#table.updateEffect(keyHash, {
        operation,
        slot: claim.slot,
        by: by(claim),
        issuedAt,
        condition,
        write,
        returnOldOnConflict: this.#returnOld,
      }),
    );
  }

  #item(claim: Claim, state: EffectState): EffectItem {
    return { state, epoch: claim.epoch, owner: claim.owner, expiresAt: this.#expiresAt(claim.slot) };
  }

  async #send<R>(request: MemoryRequest, execute: () => R): Promise<R> {
    try {
      return await this.#transport.send(request, execute);
    } catch (error) {
      throw storeError(request.operation, request.slot, request.by?.epoch, error);
    }
  }
}

/** `attribute_not_exists(#state)` */
const absent: Condition<EffectItem> = {
  expression: 'attribute_not_exists(#state)',
  holds: (item) => item === undefined,
};

/** `#owner = :me AND #epoch = :epoch AND #state = :reserved`, for our own or a stale reservation. */
function reservedBy(holder: { readonly owner: string; readonly epoch: number }): Condition<EffectItem> {
  return {
    expression: '#owner = :owner AND #epoch = :epoch AND #state = :reserved',
    holds: (item) =>
      item?.owner === holder.owner && item.epoch === holder.epoch && item.state === EffectState.Reserved,
  };
}

function by(claim: Claim) {
  return { owner: claim.owner, epoch: claim.epoch };
}

function toRecord(keyHash: string, item: EffectItem): EffectRecord {
  return { keyHash, state: item.state, epoch: item.epoch, owner: item.owner };
}

function storeError(operation: string, slot: Slot, epoch: number | undefined, cause: unknown): StoreError {
  const detail = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
  const of = epoch === undefined ? '' : ` (epoch ${epoch})`;
  return new StoreError(
    operation,
    `in-memory store ${operation} of an effect of slot ${slot.jobId} ${slot.window}${of} failed after the ` +
      `client's retries (${detail})`,
    { cause },
  );
}
