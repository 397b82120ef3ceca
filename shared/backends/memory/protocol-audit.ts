import { EffectState, SlotState } from '../../slot/ports.js';
import type { Slot } from '../../slot/slot.js';
import { slotPartitionKey } from '../dynamodb/table-layout.js';
import type { ConditionalWrite, EffectItem, SlotItem } from './memory-table.js';

/** One grant of a slot, in commit order. */
export interface AuditedGrant {
  readonly slot: string;
  readonly epoch: number;
  readonly owner: string;
  /** The table version the grant committed at. */
  readonly version: number;
}

/**
 * A reservation committed for an epoch after a later epoch of its slot had been granted, and
 * issued after that grant too: the holder reserved on a lease that was no longer its own. The
 * ledger still stops a second send (the later epoch finds the key reserved and reports it in
 * doubt), but it means a holder trusted its lease too long; with replica clocks within the lease's
 * safety margin of each other it must never happen.
 */
export interface LateReservation {
  readonly slot: string;
  readonly keyHash: string;
  readonly epoch: number;
  readonly owner: string;
  readonly laterEpoch: number;
  /** Table version when the reservation was issued, and when the later epoch was granted. */
  readonly issuedAt: number;
  readonly laterGrantedAt: number;
}

/**
 * Watches every write an in-memory table commits and records what the protocol forbids, so a
 * simulation can assert the store never accepted it, however the runtime was interleaved:
 *
 * - epochs per slot only grow: each grant's epoch is above every earlier grant's;
 * - no write from a stale epoch is accepted: a renewal, completion or release commits only for
 *   the latest epoch granted;
 * - a slot is completed at most once, and a finished (DONE, PARTIAL) or STUCK slot is never written
 *   again, but by an operator (MemoryOperatorStore), whose reopening lets it be completed once more;
 * - a reservation never replaces one of the same or a later epoch, and a done mark lands only on a
 *   record its own claim reserved, or one whose reservation a resolver has since settled.
 *
 * A reservation by an older epoch that reaches an untouched key after a takeover is not a
 * violation: DynamoDB cannot condition a put on another item, so a request in flight when the
 * lease passed still lands. The audit counts those, and lists separately the ones issued after the
 * later grant (LateReservation).
 */
export class ProtocolAudit {
  readonly grants: AuditedGrant[] = [];
  readonly violations: string[] = [];
  readonly lateReservations: LateReservation[] = [];
  /** Reservations of an older epoch issued before a later grant and committed after it. */
  inFlightStaleReservations = 0;
  /**
   * Done marks that landed after a resolver had settled the reservation they were for
   * (settleInDoubt): a holder frozen between its send and its mark, whose effect a later epoch
   * found in doubt. Done marks are unconditional puts (BatchWriteItem), so the mark replaces
   * whatever the settle led to (DONE, FAILED, or a later epoch's reservation for the retry); the
   * send it records did happen.
   */
  doneMarksAfterSettle = 0;
  readonly #completions = new Map<string, number>();
  /** The reservations settleInDoubt replaced, as `keyHash epoch owner`. */
  readonly #settled = new Set<string>();

  /** The latest epoch granted for a slot (0 before the first grant). */
  latestEpoch(slot: Slot | string): number {
    const key = typeof slot === 'string' ? slot : slotName(slot);
    let latest = 0;
    for (const grant of this.grants) if (grant.slot === key && grant.epoch > latest) latest = grant.epoch;
    return latest;
  }

  /** Completions committed for a slot. */
  completions(slot: Slot): number {
    return this.#completions.get(slotName(slot)) ?? 0;
  }

  /** @internal Called by MemoryTable after each committed slot write. */
  slotWritten(
    write: ConditionalWrite<SlotItem>,
    before: SlotItem | undefined,
    after: SlotItem | undefined,
    version: number,
  ): void {
    const slot = slotName(write.slot);
    if (write.operation === 'operator') {
      // An operator reopens what runs may not: a slot given back may be completed once more.
      if (after?.state === SlotState.Released) this.#completions.delete(slot);
      return;
    }
    const by = write.by ? `owner ${write.by.owner} epoch ${write.by.epoch}` : 'an unknown writer';
    if (before && isFinished(before.state)) {
      this.violations.push(`${write.operation} by ${by} rewrote slot ${slot} after it was ${before.state}`);
    }
    if (write.operation === 'claim' && after) {
      const latest = this.latestEpoch(slot);
      if (after.epoch <= latest) {
        this.violations.push(
          `slot ${slot} granted epoch ${after.epoch} to ${after.owner} after epoch ${latest} had been granted: ` +
            'epochs must only grow',
        );
      }
      this.grants.push({ slot, epoch: after.epoch, owner: after.owner, version });
      return;
    }
    if (write.by && write.by.epoch < this.latestEpoch(slot)) {
      this.violations.push(
        `${write.operation} by stale ${by} was accepted on slot ${slot}, whose latest grant is epoch ` +
          `${this.latestEpoch(slot)}`,
      );
    }
    if (write.operation === 'complete' && after && isFinished(after.state)) {
      const count = (this.#completions.get(slot) ?? 0) + 1;
      this.#completions.set(slot, count);
      if (count > 1) this.violations.push(`slot ${slot} was completed ${count} times (last by ${by})`);
    }
  }

  /** @internal Called by MemoryTable after each committed effect write. */
  effectWritten(
    write: ConditionalWrite<EffectItem>,
    keyHash: string,
    before: EffectItem | undefined,
    after: EffectItem | undefined,
  ): void {
    const slot = slotName(write.slot);
    if (write.operation === 'settleInDoubt' && before?.state === EffectState.Reserved) {
      this.#settled.add(`${keyHash} ${before.epoch} ${before.owner}`);
    }
    const by = write.by;
    if (!by) return;
    if (write.operation === 'reserve') {
      // A refused effect (FAILED) is reserved again for its retry, by this epoch or a later one.
      if (before && before.state !== EffectState.Failed && before.epoch >= by.epoch) {
        this.violations.push(
          `reservation of ${keyHash} by epoch ${by.epoch} replaced one of epoch ${before.epoch} on slot ${slot}`,
        );
      }
      const later = this.grants.find((g) => g.slot === slot && g.epoch > by.epoch);
      if (!later) return;
      if (write.issuedAt >= later.version) {
        this.lateReservations.push({
          slot,
          keyHash,
          epoch: by.epoch,
          owner: by.owner,
          laterEpoch: later.epoch,
          issuedAt: write.issuedAt,
          laterGrantedAt: later.version,
        });
      } else {
        this.inFlightStaleReservations++;
      }
      return;
    }
    if (write.operation === 'markDone' && after?.state === EffectState.Done) {
      if (!before || before.owner !== by.owner || before.epoch !== by.epoch) {
        if (this.#settled.has(`${keyHash} ${by.epoch} ${by.owner}`)) {
          this.doneMarksAfterSettle++;
          return;
        }
        const found = before ? `${before.state} by epoch ${before.epoch}` : 'no record';
        this.violations.push(
          `done mark of ${keyHash} by epoch ${by.epoch} landed on ${found} on slot ${slot}: ` +
            'a claim marks only what it reserved',
        );
      }
    }
  }
}

/** DONE and PARTIAL end a window for good; STUCK waits for an operator. No run writes any of them. */
function isFinished(state: SlotState): boolean {
  return state === SlotState.Done || state === SlotState.Partial || state === SlotState.Stuck;
}

function slotName(slot: Slot | string): string {
  if (typeof slot === 'string') return slot;
  const window = slotPartitionKey(slot.jobId, slot.window);
  return slot.shard === undefined ? window : `${window}/shard ${slot.shard}`;
}
