import type { Slot } from './slot.js';

/**
 * The ports every claims backend implements (DynamoDB, Postgres, the in-memory simulation store).
 * Losing a race is the normal case and comes back as a value; adapters throw only what the caller
 * cannot handle (a StoreError after the client's own retries).
 */

/** Slot states as stored. */
export const SlotState = {
  /** A holder is working under a lease. */
  Running: 'RUNNING',
  /** The run completed; further fires stand down. */
  Done: 'DONE',
  /** A holder gave the slot back (failed or out of time); the next fire may claim it. */
  Released: 'RELEASED',
  /** The run failed `maxAttempts` times; further fires stand down until an operator acts. */
  Failed: 'FAILED',
} as const;
export type SlotState = (typeof SlotState)[keyof typeof SlotState];

/** Who fired: recorded on the slot, never part of its key. */
export interface Delivery {
  /** `<aws.scheduler.execution-id>`: changes per attempt; Lambda's async duplicates repeat it. */
  readonly executionId?: string;
  /** `<aws.scheduler.attempt-number>`. */
  readonly attemptNumber?: number;
  /** The Lambda request id, or the local runner's replica name. */
  readonly invocationId?: string;
  /** Fired late on purpose for a missed window (the operator CLI's backfill, the local runner's catch-up). */
  readonly backfilled?: boolean;
}

/** What a claim asks for: the owner token, the lease and the record's retention. */
export interface LeaseRequest {
  /** A token unique to this invocation (not to the event: duplicates repeat the event). */
  readonly owner: string;
  /** How long the lease lasts from the moment the request is sent. */
  readonly leaseMs: number;
  /** Failed runs allowed before the slot is marked FAILED. */
  readonly maxAttempts: number;
  /** Retention: the record's expiry, in epoch seconds, for the store's TTL. */
  readonly expiresAtSeconds: number;
  readonly delivery: Delivery;
}

/** A granted claim: the lease and its fencing epoch. */
export interface Claim {
  readonly slot: Slot;
  readonly owner: string;
  /** The fencing token: grows by one on each new grant of this slot, never reused. */
  readonly epoch: number;
  /** The lease end as written, by the clock of the writer. */
  readonly leaseEndsAt: number;
  /** How the slot was obtained. */
  readonly via: 'new' | 'takeover' | 'retry';
}

/** Counts of one run, stored with DONE and reported in logs and metrics. */
export interface RunSummary {
  /** Effects this run performed. */
  readonly done: number;
  /** Effects found already done by an earlier run, skipped. */
  readonly skipped: number;
  /** Effects reserved by an earlier epoch and never marked done: not re-run, reported. */
  readonly inDoubt: number;
  /** Effects whose function failed without performing (released for a later run). */
  readonly failed: number;
  /** Up to 50 hashed keys of effects in doubt, for the operator. Never raw keys. */
  readonly inDoubtKeys: readonly string[];
  readonly epoch: number;
}

/** What a claim came to; losing the race is an answer, not an error. */
export type ClaimOutcome =
  | { readonly kind: 'claimed'; readonly claim: Claim; readonly previousHolder?: string }
  | { readonly kind: 'held'; readonly holder: string; readonly epoch: number; readonly leaseEndsAt: number }
  | { readonly kind: 'done'; readonly completedAt: number; readonly summary: RunSummary | undefined }
  | { readonly kind: 'failed'; readonly attempts: number; readonly lastError: string };

export type RenewOutcome =
  | { readonly kind: 'renewed'; readonly leaseEndsAt: number }
  | { readonly kind: 'lost'; readonly holder?: string; readonly epoch?: number; readonly state?: SlotState };

export type FinishOutcome =
  | { readonly kind: 'ok' }
  /** The slot moved on without us (taken over, or reaped): our write was rejected. */
  | {
      readonly kind: 'fenced';
      readonly holder?: string;
      readonly epoch?: number;
      readonly state?: SlotState;
    };

/** Why a holder gives its slot back. */
export type ReleaseReason =
  /** The run threw; counts toward maxAttempts. */
  | { readonly kind: 'error'; readonly message: string }
  /** The run stopped cleanly (time or lease margin) with work left; a later run resumes. */
  | { readonly kind: 'yield' };

/** What a backend stores per slot, for operators and tests. */
export interface SlotRecord {
  readonly slot: Slot;
  readonly state: SlotState;
  readonly owner: string;
  readonly epoch: number;
  readonly leaseEndsAt: number;
  readonly attempts: number;
  readonly failures: number;
  readonly delivery: Delivery;
  readonly summary?: RunSummary;
  readonly lastError?: string;
  readonly completedAt?: number;
  readonly expiresAtSeconds: number;
}

/** The slot half of a backend: one conditional write per claim, renewal, completion or release. */
export interface ClaimStore {
  /**
   * Claims the slot in one conditional write: granted when it is new, RELEASED, or RUNNING under an
   * expired lease (a takeover, epoch + 1). `now` is the claimer's clock reading.
   */
  claim(slot: Slot, lease: LeaseRequest, now: number): Promise<ClaimOutcome>;
  /** Extends the lease, conditioned on owner and epoch. */
  renew(claim: Claim, leaseMs: number, now: number): Promise<RenewOutcome>;
  /** Writes DONE with the summary, conditioned on owner and epoch. */
  complete(claim: Claim, summary: RunSummary, now: number): Promise<FinishOutcome>;
  /** Gives the slot back, conditioned on owner and epoch. */
  release(claim: Claim, reason: ReleaseReason, now: number): Promise<FinishOutcome>;
  /** Reads a slot record (strongly consistent), or undefined. */
  read(slot: Slot): Promise<SlotRecord | undefined>;
}

/** Effect states as stored. */
export const EffectState = { Reserved: 'RESERVED', Done: 'DONE' } as const;
export type EffectState = (typeof EffectState)[keyof typeof EffectState];

/** What reserving one effect came to. */
export type ReserveOutcome =
  /** Ours to perform (new, our own lost-response retry, or a re-run of an in-doubt one by policy). */
  | { readonly kind: 'reserved'; readonly rerun: boolean }
  /** Already performed by an earlier run: skip. */
  | { readonly kind: 'done' }
  /** Reserved by an earlier epoch and never marked done: may or may not have happened. */
  | { readonly kind: 'in-doubt'; readonly epoch: number }
  /** Reserved by a later epoch: we have been fenced out; reserve nothing more. */
  | { readonly kind: 'fenced'; readonly epoch: number };

/** One effect as stored: its hashed key, state and the epoch and owner that reserved it. */
export interface EffectRecord {
  readonly keyHash: string;
  readonly state: EffectState;
  readonly epoch: number;
  readonly owner: string;
}

/** The effect half of a backend: one conditional reservation per effect, marked done after it. */
export interface EffectLedger {
  /**
   * Reserves one effect with a conditional put (only if absent), stamped with the claim's epoch
   * and owner. `rerunInDoubt` takes over a reservation left by an earlier epoch.
   */
  reserve(claim: Claim, keyHash: string, options: { rerunInDoubt: boolean }): Promise<ReserveOutcome>;
  /** Marks reserved effects done. May be batched; marks only keys this claim reserved. */
  markDone(claim: Claim, keyHashes: readonly string[]): Promise<void>;
  /** Deletes our reservation after an effect that certainly did not happen, so a later run retries it. */
  unreserve(claim: Claim, keyHash: string): Promise<void>;
  /** Reads one effect record (strongly consistent). */
  read(slot: Slot, keyHash: string): Promise<EffectRecord | undefined>;
  /** Lists every effect record of a slot, for operators and tests. */
  list(slot: Slot): AsyncIterable<EffectRecord>;
}
