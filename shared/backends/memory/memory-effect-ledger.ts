import { StoreError } from '../../errors.js';
import { providerWordOutcomeOfConflict, reserveOutcomeOfConflict } from '../../slot/conflict-outcomes.js';
import { effectiveInWindow, type WindowDoneMarks } from '../../slot/done-marks.js';
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
import { canonicalClaim, canonicalSlot, type Slot, windowSlot } from '../../slot/slot.js';
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

  async reserve(claim: Claim, keyHash: string, options: ReserveOptions): Promise<ReserveOutcome> {
    return this.#reserve(canonicalClaim(claim), keyHash, options, this.#table.version);
  }

  /**
   * `issuedAt` is when the caller asked, kept across the retries below: the audit dates a
   * reservation by the caller's decision (made under its lease), not by the adapter's follow-up.
   */
  async #reserve(
    claim: Claim,
    keyHash: string,
    options: ReserveOptions,
    issuedAt: number,
  ): Promise<ReserveOutcome> {
    const put = (condition: Condition<EffectItem>, attempts: number) =>
      this.#put(claim, keyHash, condition, attempts, issuedAt, options.now, options.seq);
    let result = await put(absent, 0);
    // Each round either writes or meets a record someone changed since the last read; a key
    // everyone keeps changing gives up after a few rounds, as a store error would.
    for (let round = 1; ; round++) {
      if (result.committed) return { kind: 'reserved', rerun: false, attempt: 1 };
      const current = result.item ? toRecord(keyHash, result.item) : await this.#readRaw(claim.slot, keyHash);
      if (!current) {
        // Unreserved in between: try the plain reservation again.
        result = await put(absent, 0);
      } else {
        const outcome = reserveOutcomeOfConflict(current, claim, options);
        if (outcome.kind === 'take-over') return this.#takeOver(claim, keyHash, outcome.current, put);
        if (outcome.kind !== 'retry') return outcome;
        result = await put(failedAs(current), current.attempts);
        if (result.committed) return { kind: 'reserved', rerun: false, attempt: current.attempts + 1 };
      }
      if (round === 5) {
        throw storeError('reserve', claim.slot, claim.epoch, new Error('the record changed five times'));
      }
    }
  }

  /**
   * Marks are unconditional batch puts, as on DynamoDB: only the holder that reserved a key marks
   * it, and DONE is the truth whoever writes it once the effect has happened.
   */
  async markDone(claim: Claim, keyHashes: readonly string[]): Promise<void> {
    claim = canonicalClaim(claim);
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

  async recordFailure(claim: Claim, keyHash: string, failure: EffectFailure): Promise<void> {
    claim = canonicalClaim(claim);
    // A failed condition is our own write whose reply was lost, or a reservation no longer ours:
    // either way there is nothing left for this claim to record.
    await this.#write(
      'recordFailure',
      claim,
      keyHash,
      reservedUnder(claim, failure.seq),
      () => ({
        ...this.#item(claim, EffectState.Failed),
        attempts: failure.attempts,
        reason: failure.reason,
        ...(failure.retryAt !== undefined ? { retryAt: failure.retryAt } : {}),
      }),
      this.#table.version,
    );
  }

  async unreserve(claim: Claim, keyHash: string): Promise<void> {
    claim = canonicalClaim(claim);
    // A failed condition is already-gone (our own delete whose reply was lost): nothing to release.
    await this.#write('unreserve', claim, keyHash, reservedBy(claim), () => undefined, this.#table.version);
  }

  async read(slot: Slot, keyHash: string): Promise<EffectRecord | undefined> {
    slot = canonicalSlot(slot);
    const record = await this.#readRaw(slot, keyHash);
    return record?.seq === undefined ? record : effectiveInWindow(record, await this.#marks(slot));
  }

  /** The record as stored, done marks not applied: what a conflict is judged by (with the claim's marks). */
  async #readRaw(slot: Slot, keyHash: string): Promise<EffectRecord | undefined> {
    const item = await this.#send({ operation: 'readEffect', slot, keyHash }, () =>
      this.#table.getEffect(slot, keyHash),
    );
    return item ? toRecord(keyHash, item) : undefined;
  }

  async *list(slot: Slot): AsyncIterable<EffectRecord> {
    slot = canonicalSlot(slot);
    const marks = await this.#marks(slot);
    const items = await this.#send({ operation: 'list', slot }, () => this.#table.listEffects(slot));
    for (const [keyHash, item] of items) yield effectiveInWindow(toRecord(keyHash, item), marks);
  }

  /** The done marks of the window's slot records, as one query of the window's partition reads them. */
  #marks(slot: Slot): Promise<WindowDoneMarks> {
    return this.#send({ operation: 'read', slot: windowSlot(slot) }, () => this.#table.windowDoneMarks(slot));
  }

  /** The opt-in re-run of an in-doubt effect: replace that exact stale reservation, or lose the race. */
  async #takeOver(
    claim: Claim,
    keyHash: string,
    stale: EffectRecord,
    put: (condition: Condition<EffectItem>, attempts: number) => Promise<WriteResult<EffectItem>>,
  ): Promise<ReserveOutcome> {
    const result = await put(reservedBy(stale), stale.attempts);
    if (result.committed) return { kind: 'reserved', rerun: true, attempt: stale.attempts + 1 };
    const current = await this.#readRaw(claim.slot, keyHash);
    if (current?.state === EffectState.Done) return { kind: 'done' };
    if (current && current.owner === claim.owner && current.epoch === claim.epoch) {
      return { kind: 'reserved', rerun: true, attempt: current.attempts + 1 };
    }
    return { kind: 'in-doubt', epoch: current?.epoch ?? stale.epoch };
  }

  /**
   * A reservation: RESERVED, stamped with the claim's epoch and owner and the refused attempts it
   * carries forward, if `condition` holds.
   */
  #put(
    claim: Claim,
    keyHash: string,
    condition: Condition<EffectItem>,
    attempts: number,
    issuedAt: number,
    reservedAt: number,
    seq: number | undefined,
  ): Promise<WriteResult<EffectItem>> {
    return this.#write(
      'reserve',
      claim,
      keyHash,
      condition,
      () => ({
        ...this.#item(claim, EffectState.Reserved),
        reservedAt,
        ...(attempts > 0 ? { attempts } : {}),
        ...(seq !== undefined ? { seq } : {}),
      }),
      issuedAt,
    );
  }

  async recordProviderWord(slot: Slot, keyHash: string, word: ProviderWord): Promise<ProviderWordOutcome> {
    const window = windowSlot(canonicalSlot(slot));
    const current = await this.read(window, keyHash);
    // DONE, or a reservation its run's done marks cover: performed, nothing to settle.
    if (current?.state === EffectState.Done) return 'done';
    // Only on the reservation the word is about; an accepted word is never replaced by a rejection.
    const result = await this.#send({ operation: 'recordProviderWord', slot: window, keyHash }, () =>
      this.#table.updateEffect(keyHash, {
        operation: 'recordProviderWord',
        slot: window,
        issuedAt: this.#table.version,
        condition: wordApplies(word),
        write: (item) => (item ? { ...item, provider: word } : undefined),
        returnOldOnConflict: true,
      }),
    );
    if (result.committed) return 'recorded';
    return providerWordOutcomeOfConflict(result.item && toRecord(keyHash, result.item), word);
  }

  async settleInDoubt(slot: Slot, stale: EffectRecord, to: 'done' | 'retry', now: number): Promise<boolean> {
    const window = windowSlot(canonicalSlot(slot));
    // A reservation its run's done marks cover was performed: never settled (a retry would send it again).
    if (stale.seq !== undefined && (await this.read(window, stale.keyHash))?.state === EffectState.Done)
      return false;
    const result = await this.#send(
      { operation: 'settleInDoubt', slot: window, keyHash: stale.keyHash },
      () =>
        this.#table.updateEffect(stale.keyHash, {
          operation: 'settleInDoubt',
          slot: window,
          issuedAt: this.#table.version,
          condition: reservedBy(stale),
          write: (item) =>
            item
              ? to === 'done'
                ? { ...item, state: EffectState.Done }
                : {
                    ...item,
                    state: EffectState.Failed,
                    attempts: stale.attempts + 1,
                    retryAt: now,
                    reason: 'not-accepted',
                  }
              : undefined,
          returnOldOnConflict: this.#returnOld,
        }),
    );
    return result.committed;
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
    return {
      state,
      epoch: claim.epoch,
      owner: claim.owner,
      expiresAt: this.#expiresAt(claim.slot),
      ...(claim.slot.shard !== undefined ? { shard: claim.slot.shard } : {}),
    };
  }

  async #send<R>(request: MemoryRequest, execute: () => R): Promise<R> {
    try {
      return await this.#transport.send(request, execute);
    } catch (error) {
      throw storeError(request.operation, request.slot, request.by?.epoch, error);
    }
  }
}

/**
 * `#epoch = :epoch AND #state <> :done AND (attribute_not_exists(#pOutcome) OR #pOutcome = :rejected)`
 * for an accepted word; `… AND attribute_not_exists(#pOutcome)` for a rejection.
 */
function wordApplies(word: ProviderWord): Condition<EffectItem> {
  return {
    expression: `#epoch = :epoch AND #state <> :done AND ${word.outcome === 'accepted' ? '(attribute_not_exists(#pOutcome) OR #pOutcome = :rejected)' : 'attribute_not_exists(#pOutcome)'}`,
    holds: (item) =>
      item !== undefined &&
      item.epoch === word.epoch &&
      item.state !== EffectState.Done &&
      (item.provider === undefined || (word.outcome === 'accepted' && item.provider.outcome === 'rejected')),
  };
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

/** reservedBy, and under that number (`#seq = :seq`, or `attribute_not_exists(#seq)` for none). */
function reservedUnder(
  holder: { readonly owner: string; readonly epoch: number },
  seq: number | undefined,
): Condition<EffectItem> {
  const ours = reservedBy(holder);
  return {
    expression: `${ours.expression} AND ${seq !== undefined ? '#seq = :seq' : 'attribute_not_exists(#seq)'}`,
    holds: (item) => ours.holds(item) && item?.seq === seq,
  };
}

/** `#state = :failed AND #epoch = :epoch AND #owner = :owner AND #attempts = :attempts`: that exact refusal. */
function failedAs(record: EffectRecord): Condition<EffectItem> {
  return {
    expression: '#state = :failed AND #epoch = :epoch AND #owner = :owner AND #attempts = :attempts',
    holds: (item) =>
      item?.state === EffectState.Failed &&
      item.epoch === record.epoch &&
      item.owner === record.owner &&
      (item.attempts ?? 0) === record.attempts,
  };
}

function by(claim: Claim) {
  return { owner: claim.owner, epoch: claim.epoch };
}

function toRecord(keyHash: string, item: EffectItem): EffectRecord {
  return {
    keyHash,
    state: item.state,
    epoch: item.epoch,
    owner: item.owner,
    attempts: item.attempts ?? 0,
    ...(item.retryAt !== undefined ? { retryAt: item.retryAt } : {}),
    ...(item.reason !== undefined ? { reason: item.reason } : {}),
    ...(item.shard !== undefined ? { shard: item.shard } : {}),
    ...(item.reservedAt !== undefined ? { reservedAt: item.reservedAt } : {}),
    ...(item.provider !== undefined ? { provider: item.provider } : {}),
    ...(item.seq !== undefined ? { seq: item.seq } : {}),
  };
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
