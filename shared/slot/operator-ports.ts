import type { EffectRecord, SlotRecord } from './ports.js';
import type { Slot } from './slot.js';

/**
 * The writes an operator makes and a run never does: releasing a stuck slot, reopening a done one,
 * and resolving an effect left in doubt. Kept apart from the runtime ports so a function's code
 * cannot reach them. Every write is conditioned on the fencing epoch the operator read, so an
 * operator acting on a stale reading changes nothing and is told what is there now.
 */
export interface OperatorStore {
  /**
   * Gives a RUNNING or FAILED slot back (RELEASED, failure count reset) so the next delivery claims
   * it with epoch + 1. Refused while a RUNNING slot's lease is live unless `evenIfLeaseLive`: the
   * holder is then fenced (its renewals, marks and completion are rejected by epoch).
   */
  forceRelease(slot: Slot, request: ReleaseRequest): Promise<OperatorWriteOutcome>;
  /** Turns a DONE slot back into RELEASED, so the next delivery runs the effects not recorded done. */
  reopen(slot: Slot, request: OperatorRequest): Promise<OperatorWriteOutcome>;
  /**
   * Resolves an effect left in doubt: `done` records it performed (later runs skip it), `clear`
   * deletes its reservation so a later run performs it, and reopens the slot if it was DONE.
   * Refused while a run holds the slot under a live lease.
   */
  resolveEffect(
    slot: Slot,
    keyHash: string,
    resolution: EffectResolution,
    request: OperatorRequest,
  ): Promise<ResolveEffectOutcome>;
}

/** What the operator saw, and when. */
export interface OperatorRequest {
  /** The slot's epoch when the operator read it: the write is fenced on it. */
  readonly expectedEpoch: number;
  /** The operator's clock reading, compared with the lease end. */
  readonly now: number;
}

/** A release: what the operator saw, and whether a live lease may be broken. */
export interface ReleaseRequest extends OperatorRequest {
  /** Release even while the holder's lease is live (`slotguard slots release --force`). */
  readonly evenIfLeaseLive: boolean;
}

/** How an in-doubt effect is resolved. */
export const EffectResolution = {
  /** The effect happened (the provider's log shows it): record it done. */
  Done: 'done',
  /** The effect did not happen, or should happen again: delete the reservation. */
  Clear: 'clear',
} as const;
export type EffectResolution = (typeof EffectResolution)[keyof typeof EffectResolution];

/** What became of a release or a reopen. Losing to a newer epoch is an answer, not an error. */
export type OperatorWriteOutcome =
  /** Written; `record` is the slot as it now is. */
  | { readonly kind: 'ok'; readonly record: SlotRecord }
  | { readonly kind: 'absent' }
  /** Not written: the epoch moved on, the state does not allow it, or a live lease holds it. */
  | { readonly kind: 'refused'; readonly reason: RefusalReason; readonly current: SlotRecord };

/** What became of resolving an effect: resolved, or why nothing was written. */
export type ResolveEffectOutcome =
  | {
      readonly kind: 'resolved';
      readonly resolution: EffectResolution;
      /** The effect as it was before: who reserved it, at which epoch. */
      readonly before: EffectRecord;
      /** A `clear` on a DONE slot reopens it; false when the slot moved on meanwhile. */
      readonly slotReopened: boolean;
    }
  | { readonly kind: 'absent' }
  | { readonly kind: 'refused'; readonly reason: RefusalReason; readonly current: SlotRecord }
  | { readonly kind: 'effect-absent' }
  /** The effect is DONE, or changed between the operator's reading and the write. */
  | { readonly kind: 'effect-not-in-doubt'; readonly current: EffectRecord };

/** Why an operator write was refused. */
export type RefusalReason =
  /** The slot's epoch is not the one the operator read: someone claimed it since. */
  | 'epoch-moved'
  /** A holder's lease is live. */
  | 'lease-live'
  /** The slot's state does not allow this write (releasing a DONE slot, reopening a RUNNING one). */
  | 'state';
