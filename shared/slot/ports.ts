import type { Slot } from './slot.js';

/**
 * The ports every claims backend implements (DynamoDB, Postgres, the in-memory simulation store).
 * Losing a race is the normal case and comes back as a value; adapters throw only what the caller
 * cannot handle (a StoreError after the client's own retries, an InvalidEventError for a slot that
 * cannot be a key).
 */

/** Slot states as stored. */
export const SlotState = {
  /** A holder is working under a lease. */
  Running: 'RUNNING',
  /** The window finished: every effect done (or in doubt, reported); further fires stand down. */
  Done: 'DONE',
  /**
   * The window finished, but some effects failed permanently (refused on every retry, or still
   * refused at the deadline). Terminal like DONE; the failed hashes are listed and `EffectFailed` pages.
   */
  Partial: 'PARTIAL',
  /** A holder gave the slot back (out of time, waiting for a retry, or failed); the next run resumes it. */
  Released: 'RELEASED',
  /** The run failed `maxAttempts` times; further fires stand down until an operator acts. */
  Failed: 'FAILED',
  /**
   * Continuation gave up: no progress in `maxRunsWithoutProgress` runs, or the deadline passed with
   * work left. Further fires stand down; `WindowStuck` pages and an operator re-drives the window.
   */
  Stuck: 'STUCK',
  /**
   * A window split into shards: its coordinator handed the work to shard messages. Each shard is a
   * slot of its own; the window finishes (DONE, PARTIAL or STUCK) when its last shard does.
   */
  Sharded: 'SHARDED',
} as const;
export type SlotState = (typeof SlotState)[keyof typeof SlotState];

/** States no run leaves on its own: only an operator reopens them. */
export const TERMINAL_SLOT_STATES: readonly SlotState[] = [
  SlotState.Done,
  SlotState.Partial,
  SlotState.Failed,
  SlotState.Stuck,
];

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
  /** A continuation of a window an earlier run yielded, not a fire of the schedule. */
  readonly continuation?: boolean;
}

/**
 * A run stops taking new effects a sixth of its lease before the lease ends by its own clock, unless
 * told otherwise (RunOptions.leaseSafetyMarginMs): room for an effect already under way, and for
 * every store call it makes to end before the lease does.
 */
export const LEASE_SAFETY_MARGIN_DIVISOR = 6;

/** A lease's safety margin when none is set: a sixth of it (LEASE_SAFETY_MARGIN_DIVISOR), whole milliseconds. */
export function defaultLeaseSafetyMarginMs(leaseMs: number): number {
  return Math.floor(leaseMs / LEASE_SAFETY_MARGIN_DIVISOR);
}

/** What a claim asks for: the owner token, the lease and the record's retention. */
export interface LeaseRequest {
  /** A token unique to this invocation (not to the event: duplicates repeat the event). */
  readonly owner: string;
  /** How long the lease lasts from the moment the request is sent. */
  readonly leaseMs: number;
  /**
   * How long before the lease ends the holder stops taking new effects. A store whose calls can
   * hang (Postgres's client-side deadline) refuses a lease whose margin is shorter than its
   * longest call, so a call under way when the margin begins ends before the lease does.
   * @default defaultLeaseSafetyMarginMs(leaseMs): a sixth of the lease
   */
  readonly safetyMarginMs?: number;
  /** Failed runs allowed before the slot is marked FAILED. */
  readonly maxAttempts: number;
  /** Retention: the record's expiry, in epoch seconds, for the store's TTL. */
  readonly expiresAtSeconds: number;
  /**
   * A RUNNING slot is taken over only once its lease ended more than this long ago by the claimer's
   * clock: room for a claimer whose clock runs fast. Stores that judge leases by their own clock
   * (Postgres on the database clock) need none.
   * @default 0
   */
  readonly takeoverSkewMs?: number;
  /**
   * The effect-key version this run hashes with. The first claim stores it and every later claim
   * is handed the stored one, so a window keeps one key version from its first run to its last,
   * whatever rotation happens meanwhile.
   * @default none: windows are not pinned (a single, never-rotated key)
   */
  readonly keyVersion?: string;
  /**
   * Shards to split the window into (a window claim only). The first claim stores it and every
   * later claim is handed the stored one, so a changed setting never re-splits an open window.
   * @default 1 (not split)
   */
  readonly shards?: number;
  /**
   * When the window must be finished, in epoch milliseconds. Stored by the first claim and kept by
   * every later one, so continuations cannot push it back.
   */
  readonly deadline: number;
  readonly delivery: Delivery;
}

/**
 * Where a window's work stands between runs: written by the holder (fenced on owner and epoch)
 * as effects settle, and handed to the next claim of the window.
 */
export interface Checkpoint {
  /**
   * Per resumable source, by its name: a position such that every item up to it has an outcome on
   * record (done, in doubt, or failed). A continuation reads the source after it.
   */
  readonly positions: Readonly<Record<string, string>>;
  /**
   * The job's walk ran to the end at least once: what is left is at most failed effects waiting for
   * their retry. A window past its deadline in this phase ends PARTIAL rather than STUCK.
   */
  readonly walked: boolean;
}

/**
 * One run's done marks, written with its checkpoint instead of a write per effect: every effect this
 * epoch reserved with a sequence number below `below` was performed, except the sequence numbers in
 * `open` (still in flight when the marks were written, or in doubt) and effects recorded on their
 * own (FAILED). A reservation this covers reads DONE; one it does not cover stays RESERVED: in doubt
 * once its run is over.
 */
export interface EpochDoneMarks {
  /** Every sequence number below this was performed, except `open`. */
  readonly below: number;
  /** Sequence numbers below `below` whose effects are not known performed. At most MAX_OPEN_MARKS. */
  readonly open: readonly number[];
}

/** The most open sequence numbers one run's marks list: the slot record stays small. */
export const MAX_OPEN_MARKS = 64;

/**
 * A window's (or a shard's) done marks by epoch, as decimal strings: each run adds its own. Stored
 * apart from the checkpoint and never cleared while the window's effect records live, because a
 * reservation these cover reads DONE only through them.
 */
export type DoneMarks = Readonly<Record<string, EpochDoneMarks>>;

/** A window's progress as a claim finds it, from the slot record the claim replaced. */
export interface WindowProgress {
  /** When the window must be finished (epoch ms), as the first claim stored it. */
  readonly deadline: number;
  /** Where the last run left off, if it left a checkpoint. */
  readonly checkpoint?: Checkpoint;
  /** Consecutive earlier runs that ended with work left and nothing achieved. */
  readonly runsWithoutProgress: number;
  /** The effect-key version the window was pinned to by its first claim, if any. */
  readonly keyVersion?: string;
  /** Shards the window is split into, as its first claim stored it (a window claim only). */
  readonly shards?: number;
  /** Done marks of earlier epochs of this slot: what their reservations came to. */
  readonly doneMarks?: DoneMarks;
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
  /** The window's progress as the claim found it. */
  readonly window: WindowProgress;
}

/** Counts of one run, reported in its logs, its metrics and its result. */
export interface RunSummary {
  /** Effects this run performed. */
  readonly done: number;
  /** Effects found already done by an earlier run, skipped. */
  readonly skipped: number;
  /** Effects reserved by an earlier epoch and never marked done: not re-run, reported. */
  readonly inDoubt: number;
  /** Effects that failed permanently in this run (refused on their last allowed attempt, or an unusable key). */
  readonly failed: number;
  /** Effects refused before sending that a later run retries (backoff), or found waiting for one. */
  readonly retrying: number;
  /** Up to 50 hashed keys of effects in doubt, for the operator. Never raw keys. */
  readonly inDoubtKeys: readonly string[];
  /** Up to 50 hashed keys of effects that failed permanently. */
  readonly failedKeys: readonly string[];
  readonly epoch: number;
}

/**
 * What a window came to, counted from its effect records when it finished: exact whatever crashes,
 * takeovers and continuations happened on the way. Stored with DONE or PARTIAL.
 */
export interface WindowSummary {
  /** Effects recorded done. */
  readonly done: number;
  /** Effects reserved and never recorded done: may or may not have happened. */
  readonly inDoubt: number;
  /** Effects that failed permanently: not performed. */
  readonly failed: number;
  /** Up to 50 hashed keys of the effects in doubt. */
  readonly inDoubtKeys: readonly string[];
  /** Up to 50 hashed keys of the effects that failed. */
  readonly failedKeys: readonly string[];
  /** Runs granted the slot (its epoch when it finished). */
  readonly runs: number;
}

/** What a claim came to; losing the race is an answer, not an error. */
export type ClaimOutcome =
  | { readonly kind: 'claimed'; readonly claim: Claim; readonly previousHolder?: string }
  | { readonly kind: 'held'; readonly holder: string; readonly epoch: number; readonly leaseEndsAt: number }
  /** Finished: DONE, or PARTIAL with permanent failures. */
  | {
      readonly kind: 'done';
      readonly state: typeof SlotState.Done | typeof SlotState.Partial;
      readonly completedAt: number;
      readonly summary: WindowSummary | undefined;
    }
  | { readonly kind: 'failed'; readonly attempts: number; readonly lastError: string }
  | { readonly kind: 'stuck'; readonly epoch: number; readonly reason: string }
  /** Released by a run waiting for failed effects' backoff: not claimable before `until`. */
  | { readonly kind: 'waiting'; readonly until: number }
  /** Split into shards: the shards run it; `finished` lists those that reached their end. */
  | { readonly kind: 'sharded'; readonly shards: number; readonly finished: readonly number[] };

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

/** Why a holder gives its slot back, and what it leaves for the next run. */
export type ReleaseReason =
  /** The run threw; counts toward maxAttempts. */
  | { readonly kind: 'error'; readonly message: string }
  /**
   * The run stopped with work left (time, lease margin, a failing store or provider, or failed
   * effects waiting for their retry); a later run resumes from `checkpoint`.
   */
  | {
      readonly kind: 'yield';
      readonly checkpoint?: Checkpoint;
      /** Consecutive runs, this one included, that ended with work left and nothing achieved. */
      readonly runsWithoutProgress: number;
      /** Not claimable before this instant (epoch ms): the earliest retry of a failed effect. */
      readonly resumeAfter?: number;
    }
  /** The window's coordinator handed its work to `shards` shard messages: SHARDED. */
  | { readonly kind: 'sharded'; readonly shards: number }
  /** Continuation gives up on the window (no progress, or past its deadline): STUCK, for an operator. */
  | {
      readonly kind: 'stuck';
      readonly reason: string;
      readonly checkpoint?: Checkpoint;
      readonly runsWithoutProgress: number;
    };

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
  readonly summary?: WindowSummary;
  readonly lastError?: string;
  readonly completedAt?: number;
  readonly expiresAtSeconds: number;
  /** When the window must be finished (epoch ms). Absent on records written before deadlines existed. */
  readonly deadline?: number;
  readonly checkpoint?: Checkpoint;
  /** The holder's counts at its last checkpoint (its run so far), for operators watching a long run. */
  readonly progress?: RunSummary;
  readonly runsWithoutProgress: number;
  /** A released window waiting for failed effects' backoff: not claimable before this (epoch ms). */
  readonly resumeAfter?: number;
  /** The effect-key version the window is pinned to. */
  readonly keyVersion?: string;
  /** A sharded window: how many shards, and which have reached their end. */
  readonly shards?: number;
  readonly finishedShards?: readonly number[];
  /** Every epoch's done marks (see DoneMarks). */
  readonly doneMarks?: DoneMarks;
}

/** How a sharded window ends, once its last shard has. */
export type WindowFinish =
  | { readonly kind: 'complete'; readonly summary: WindowSummary }
  | { readonly kind: 'stuck'; readonly reason: string };

/** The slot half of a backend: one conditional write per claim, renewal, completion or release. */
export interface ClaimStore {
  /**
   * Claims the slot in one conditional write: granted when it is new, RELEASED (and not waiting),
   * or RUNNING under an expired lease (a takeover, epoch + 1). `now` is the claimer's clock reading.
   */
  claim(slot: Slot, lease: LeaseRequest, now: number): Promise<ClaimOutcome>;
  /** Extends the lease, conditioned on owner and epoch. */
  renew(claim: Claim, leaseMs: number, now: number): Promise<RenewOutcome>;
  /**
   * Records where the run stands (conditioned on owner and epoch): the checkpoint the next run
   * resumes from, this run's counts so far and, when given, the slot's done marks (every epoch's:
   * the claim's `window.doneMarks` with this epoch's added), replacing the stored ones.
   */
  checkpoint(
    claim: Claim,
    checkpoint: Checkpoint,
    progress: RunSummary,
    doneMarks?: DoneMarks,
  ): Promise<FinishOutcome>;
  /**
   * Finishes the window, conditioned on owner and epoch: DONE, or PARTIAL when `summary.failed` is
   * more than zero.
   */
  complete(claim: Claim, summary: WindowSummary, now: number): Promise<FinishOutcome>;
  /** Gives the slot back (or marks it STUCK), conditioned on owner and epoch. */
  release(claim: Claim, reason: ReleaseReason, now: number): Promise<FinishOutcome>;
  /** Reads a slot record (strongly consistent), or undefined. */
  read(slot: Slot): Promise<SlotRecord | undefined>;
  /**
   * Records on a SHARDED window that `shard` reached its end (idempotent: a set). Answers the
   * window's shard count and every shard finished so far, or undefined when the window is not
   * SHARDED (finished already, or reopened by an operator).
   */
  shardFinished(
    window: Slot,
    shard: number,
  ): Promise<{ readonly shards: number; readonly finished: readonly number[] } | undefined>;
  /**
   * Finishes a SHARDED window (DONE or PARTIAL by the summary's failures, or STUCK), only while it is
   * SHARDED: of shards finishing at the same moment exactly one finishes the window (`ok`); the
   * others are told it is `finished` already.
   */
  finishSharded(window: Slot, finish: WindowFinish, now: number): Promise<'ok' | 'finished'>;
}

/** Effect states as stored. */
export const EffectState = {
  /** Reserved by a run: performed or about to be, or in doubt once that run is over. */
  Reserved: 'RESERVED',
  /** Performed and recorded. */
  Done: 'DONE',
  /** Refused before it was performed: retried after `retryAt`, or permanently failed. */
  Failed: 'FAILED',
} as const;
export type EffectState = (typeof EffectState)[keyof typeof EffectState];

/** One effect as stored: its hashed key, state, the epoch and owner that wrote it, and its refusals. */
export interface EffectRecord {
  readonly keyHash: string;
  readonly state: EffectState;
  readonly epoch: number;
  readonly owner: string;
  /** Attempts refused so far (0 for an effect never refused). */
  readonly attempts: number;
  /** FAILED and retryable: not before this instant (epoch ms). Absent when the failure is permanent. */
  readonly retryAt?: number;
  /** Why it was last refused (a NotPerformedReason), for FAILED records. */
  readonly reason?: string;
  /** The shard whose run wrote it, in a sharded window: epochs compare only within one shard. */
  readonly shard?: number;
  /** When the reservation was made, by the reserving run's clock (epoch ms). */
  readonly reservedAt?: number;
  /** What the provider said of the message this reservation sent, if it said anything yet. */
  readonly provider?: ProviderWord;
  /**
   * The reserving run's sequence number for it (RESERVED records): the run's done marks cover it
   * by this. Absent: no marks cover it; only an individual done mark settles it.
   */
  readonly seq?: number;
}

/**
 * The provider's own record of a message an effect sent, from its events (SES: Send, Delivery,
 * Bounce, Complaint mean it accepted the message; Reject and Rendering Failure mean it did not).
 */
export interface ProviderWord {
  readonly outcome: 'accepted' | 'rejected';
  /** The provider's event type, as it named it (`Send`, `Delivery`, `Reject`…). */
  readonly event: string;
  readonly messageId?: string;
  /** When the provider says it happened (epoch ms). */
  readonly at: number;
  /** The epoch whose send the event is about: a word only ever applies to that reservation. */
  readonly epoch: number;
}

/** What recording a provider's word came to. */
export type ProviderWordOutcome =
  /** Written on the effect's record (or the record already had it: a duplicated event). */
  | 'recorded'
  /** The effect is DONE already: nothing to settle, nothing written. */
  | 'done'
  /** No such effect, or its record is of another epoch's reservation: nothing written. */
  | 'unknown';

/** A refusal to record: the attempt that was refused, and when (if ever) to try again. */
export interface EffectFailure {
  /** Attempts refused so far, this one included. */
  readonly attempts: number;
  /** Retry not before this instant (epoch ms); absent: failed permanently. */
  readonly retryAt?: number;
  /** Why (a NotPerformedReason, or `invalid-key`). */
  readonly reason: string;
  /**
   * The number of the reservation refused (`ReserveOptions.seq`); absent for one made without a
   * number. The write lands only on that reservation: a run reserves a key again once its refusal
   * is due, and a late copy of the first refusal's write (a timed-out request the store still
   * applied) must not turn the second reservation, already performed, FAILED.
   */
  readonly seq?: number;
}

export type ReserveOutcome =
  /**
   * Ours to perform (new, our own lost-response retry, a re-run of an in-doubt one by policy, or a
   * due retry of a refused one). `attempt` counts from 1, refused attempts included.
   */
  | { readonly kind: 'reserved'; readonly rerun: boolean; readonly attempt: number }
  /** Already performed by an earlier run: skip. */
  | { readonly kind: 'done' }
  /** Reserved by an earlier epoch and never marked done: may or may not have happened. */
  | { readonly kind: 'in-doubt'; readonly epoch: number }
  /** Reserved by a later epoch: we have been fenced out; reserve nothing more. */
  | { readonly kind: 'fenced'; readonly epoch: number }
  /** Refused earlier and not due for its retry until `retryAt`. */
  | { readonly kind: 'retry-later'; readonly retryAt: number; readonly attempts: number }
  /** Refused on its last allowed attempt: failed permanently, not performed. */
  | { readonly kind: 'failed'; readonly attempts: number }
  /** Another shard of the window holds it (reserved, or refused and waiting): that shard sees to it. */
  | { readonly kind: 'elsewhere'; readonly shard: number | undefined };

export interface ReserveOptions {
  /** Take over a reservation left by an earlier epoch (effects that are themselves idempotent). */
  readonly rerunInDoubt: boolean;
  /** The caller's clock reading: a failed effect whose `retryAt` has passed is reserved again. */
  readonly now: number;
  /**
   * The run's sequence number for this reservation, stored on the record so the run's done marks
   * can cover it. A run numbers its reservations 0, 1, 2…; a key is reserved under one number.
   * @default none: the record is covered by no marks, only by markDone
   */
  readonly seq?: number;
}

/** The effect half of a backend: one conditional reservation per effect, marked done after it. */
export interface EffectLedger {
  /**
   * Reserves one effect with a conditional write (only if absent, or FAILED and due for a retry),
   * stamped with the claim's epoch and owner.
   */
  reserve(claim: Claim, keyHash: string, options: ReserveOptions): Promise<ReserveOutcome>;
  /**
   * Marks reserved effects done one by one. May be batched; marks only keys this claim reserved. A
   * run marks its effects with done marks on its slot instead (ClaimStore.checkpoint); this is for
   * reservations no marks can cover (made without a sequence number).
   */
  markDone(claim: Claim, keyHashes: readonly string[]): Promise<void>;
  /**
   * Records that our reservation's effect was refused before it was performed (conditioned on the
   * reservation being ours, under `failure.seq`): FAILED, retried by a later run after `retryAt`,
   * or permanently.
   */
  recordFailure(claim: Claim, keyHash: string, failure: EffectFailure): Promise<void>;
  /** Deletes our reservation of an effect that was never attempted (the run stopped before sending). */
  unreserve(claim: Claim, keyHash: string): Promise<void>;
  /**
   * Reads one effect record (strongly consistent), as it stands: a reservation the slot's done
   * marks cover reads DONE (effectiveRecord).
   */
  read(slot: Slot, keyHash: string): Promise<EffectRecord | undefined>;
  /**
   * Lists every effect record of a slot, for the window's summary, operators and tests, as they
   * stand: reservations the done marks of the window's slot records cover read DONE.
   */
  list(slot: Slot): AsyncIterable<EffectRecord>;
  /**
   * Writes what the provider said of an effect's message onto its record: only on a RESERVED or
   * FAILED record of the word's epoch, never on a DONE one (nor a reservation done marks cover); an `accepted` word is never replaced by
   * a `rejected` one (SES may report both for one message: Send, then Bounce).
   */
  recordProviderWord(slot: Slot, keyHash: string, word: ProviderWord): Promise<ProviderWordOutcome>;
  /**
   * Settles a reservation left in doubt, conditioned on it being exactly `stale` still (state,
   * epoch, owner): `done` when the provider accepted its message; `retry` (FAILED, due at `now`, one
   * attempt more) when it did not, or by the job's policy after the grace period, so the window's
   * retry sends it. Answers whether it was written.
   */
  settleInDoubt(slot: Slot, stale: EffectRecord, to: 'done' | 'retry', now: number): Promise<boolean>;
}
