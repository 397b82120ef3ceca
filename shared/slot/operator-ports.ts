import { type EffectLedger, type EffectRecord, EffectState, type SlotRecord, SlotState } from './ports.js';
import type { Slot } from './slot.js';

/**
 * The writes an operator makes and a run never does: releasing a stuck slot, reopening a done one,
 * resolving an effect left in doubt, and re-driving a window whose effects failed. Kept apart from
 * the runtime ports so a function's code cannot reach them. Every write is conditioned on the
 * fencing epoch the operator read, so an operator acting on a stale reading changes nothing and is
 * told what is there now.
 *
 * Every write that gives a slot back (RELEASED) also resets its runs without progress to 0 and
 * drops its retry wait (`resumeAfter`), and takes the request's `deadline` when given: a window
 * released past its old deadline would otherwise be claimed, found late, and made STUCK again at once.
 */
export interface OperatorStore {
  /**
   * Gives a RUNNING, FAILED or STUCK slot back (RELEASED, failure count reset) so the next delivery
   * claims it with epoch + 1 and resumes from its checkpoint. Refused while a RUNNING slot's lease is
   * live unless `evenIfLeaseLive`: the holder is then fenced (its renewals, marks and completion are
   * rejected by epoch).
   */
  forceRelease(slot: Slot, request: ReleaseRequest): Promise<OperatorWriteOutcome>;
  /**
   * Turns a DONE or PARTIAL slot back into RELEASED, without its checkpoint (a walk resumed from it
   * would never meet the effects an operator cleared), so the next delivery walks the job again,
   * skipping every effect done, and performs the ones not recorded done.
   */
  reopen(slot: Slot, request: OperatorRequest): Promise<OperatorWriteOutcome>;
  /**
   * Resolves an effect left in doubt: `done` records it performed (later runs skip it), `clear`
   * deletes its reservation so a later run performs it, and reopens the slot if it was DONE or
   * PARTIAL. `done` is refused while a run holds the slot under a live lease; `clear` while a run
   * holds it RUNNING at all (see HolderRule): release it first.
   */
  resolveEffect(
    slot: Slot,
    keyHash: string,
    resolution: EffectResolution,
    request: OperatorRequest,
  ): Promise<ResolveEffectOutcome>;
  /**
   * Re-drives a window: deletes its FAILED effect records (every one, or the `keyHashes` named,
   * each only if it is still the exact refusal read), then gives the slot back as RELEASED with the
   * request's deadline, its runs without progress 0 and no checkpoint, whatever its state but
   * RUNNING (PARTIAL, STUCK, DONE, FAILED, RELEASED). The next delivery walks the
   * job again: it skips what is done, leaves what is in doubt in doubt, and performs the cleared
   * effects, which were refused before they were performed, so each happens at most once. Refused,
   * before anything is deleted, when the epoch moved or while a run holds the slot RUNNING, its
   * lease live or ended (see HolderRule): release it first.
   */
  redrive(slot: Slot, request: RedriveRequest): Promise<RedriveOutcome>;
}

/** What the operator saw, and when. */
export interface OperatorRequest {
  /** The slot's epoch when the operator read it: the write is fenced on it. */
  readonly expectedEpoch: number;
  /** The operator's clock reading, compared with the lease end. */
  readonly now: number;
  /**
   * For a write that gives the slot back: the window's new deadline (epoch ms), usually now plus
   * the job's deadline.
   * @default the deadline the window's first claim stored stays
   */
  readonly deadline?: number;
}

/** A release: what the operator saw, and whether a live lease may be broken. */
export interface ReleaseRequest extends OperatorRequest {
  /** Release even while the holder's lease is live (`slotguard slots release --force`). */
  readonly evenIfLeaseLive: boolean;
}

/** A re-drive: what the operator saw, the window's new deadline, and which failed effects to clear. */
export interface RedriveRequest extends OperatorRequest {
  /** The window's new deadline (epoch ms): a re-driven window is given the job's deadline again, from now. */
  readonly deadline: number;
  /**
   * The FAILED effects to clear, by hash; a named effect that is not FAILED refuses the whole
   * re-drive before anything is written.
   * @default every FAILED effect of the window
   */
  readonly keyHashes?: readonly string[];
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
  /** Not written: the epoch moved on, the state does not allow it, or a run holds the slot. */
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

/** What became of a re-drive. Losing to a newer epoch or a live lease is an answer, not an error. */
export type RedriveOutcome =
  /** Given back: `record` is the slot as it now is; `cleared` the FAILED effects deleted, as they were. */
  | { readonly kind: 'redriven'; readonly record: SlotRecord; readonly cleared: readonly EffectRecord[] }
  | { readonly kind: 'absent' }
  /**
   * Not given back: a run holds the slot, or the epoch moved. Refused before any effect was deleted, unless
   * the epoch moved while they were (`cleared` then lists them: the run that moved it performs them).
   */
  | {
      readonly kind: 'refused';
      readonly reason: RefusalReason;
      readonly current: SlotRecord;
      readonly cleared: readonly EffectRecord[];
    }
  /** A named effect is not FAILED (done, in doubt, or unknown): nothing was written. */
  | {
      readonly kind: 'effects-not-failed';
      readonly effects: readonly { readonly keyHash: string; readonly current: EffectRecord | undefined }[];
    };

/** Why an operator write was refused. */
export type RefusalReason =
  /** The slot's epoch is not the one the operator read: someone claimed it since. */
  | 'epoch-moved'
  /** A holder's lease is live. */
  | 'lease-live'
  /**
   * A holder's lease has ended but it still holds the slot RUNNING, and the write would delete effect
   * records (see HolderRule): release the slot first (OperatorStore.forceRelease), then write again.
   */
  | 'running'
  /** The slot's state does not allow this write (releasing a DONE slot, reopening a RUNNING one). */
  | 'state';

/**
 * Which holder of a RUNNING slot refuses an operator write.
 * - `live-lease`: one whose lease is live (a release; marking an effect done, which never makes
 *   anything run again).
 * - `running`: any, its lease ended too: a write that deletes effect records (`clear`, a re-drive).
 *   A holder past its lease may be frozen, not dead. While the slot is RUNNING at its epoch, its
 *   late checkpoint is accepted, and the done marks it carries cover reservations by number: one an
 *   operator deleted meanwhile is gone from the ledger, and the next run performs it a second time.
 *   A release fences the holder (its checkpoint is rejected, and it marks its sends done on their
 *   own records instead), so the write is allowed once the slot is released. A SHARDED window is
 *   held by its shards, whose leases its own record does not show: refused too (as `state`).
 */
export type HolderRule = 'live-lease' | 'running';

/**
 * Why an operator write fenced on `request` was refused, from the slot as it is now, for a store that
 * judges leases by the request's clock: the epoch moved; a holder refuses it by `rule`; else the
 * slot's state. Without a rule no holder is the reason (a reopen: only a finished slot reopens).
 */
export function refusalReason(
  current: SlotRecord,
  request: OperatorRequest,
  rule: HolderRule | undefined,
): RefusalReason {
  if (current.epoch !== request.expectedEpoch) return 'epoch-moved';
  if (rule === undefined || current.state !== SlotState.Running) return 'state';
  if (current.leaseEndsAt >= request.now) return 'lease-live';
  return rule === 'running' ? 'running' : 'state';
}

/**
 * How long an operator's `clear` or `redrive` holds a RELEASED slot against claims (its retry wait,
 * `resumeAfter`, set to the operator's now plus this) while it deletes effect records and gives the
 * slot back. Without transactions (DynamoDB, memory) these are several writes: a run claiming
 * between them would pass a record as in doubt (or refused) that the next write deletes, and
 * finish the window without it. A claim meeting the hold is answered `waiting`, and its message
 * comes back after it. The operator's last write ends the hold; one that crashed before it leaves
 * the hold to end by itself. Five minutes: far longer than the writes take, and long enough to
 * dominate the clock skew between the operator's machine and the function's.
 */
export const OPERATOR_HOLD_MS = 5 * 60_000;

/** The hold an operator's guard put on a RELEASED slot: until when, and the retry wait it found. */
export interface OperatorHold {
  readonly until: number;
  /** The slot's own retry wait before the hold, restored when the hold ends without a reopen. */
  readonly found?: number;
}

/** A guard's outcome, and the hold it put on the slot if it found it RELEASED. */
export interface HeldGuard {
  readonly outcome: OperatorWriteOutcome;
  readonly hold?: OperatorHold;
}

/** Still RELEASED at the epoch the operator read, under its hold: the condition that ends the hold. */
export function underHold(request: OperatorRequest, hold: OperatorHold) {
  return (record: Pick<SlotRecord, 'state' | 'epoch' | 'resumeAfter'>): boolean =>
    record.state === SlotState.Released &&
    record.epoch === request.expectedEpoch &&
    record.resumeAfter === hold.until;
}

/**
 * The guard of a `clear` or a `redrive` on a store without transactions: reads the slot, then
 * writes the guard `write` builds for what it read, a hold for a RELEASED slot (claimable: see
 * OPERATOR_HOLD_MS), a plain guard conditioned on not RELEASED for any other. The condition covers
 * what was read, so a slot that became RELEASED (an operator's reopen) or whose wait changed since
 * is read again; a few times at most, then the refusal is the answer.
 */
export async function guardWithHold(
  read: () => Promise<SlotRecord | undefined>,
  write: (hold: OperatorHold | undefined) => Promise<OperatorWriteOutcome>,
  request: OperatorRequest,
): Promise<HeldGuard> {
  let outcome: OperatorWriteOutcome = { kind: 'absent' };
  for (let attempt = 0; attempt < 3; attempt++) {
    const seen = await read();
    if (!seen) return { outcome: { kind: 'absent' } };
    const hold =
      seen.state === SlotState.Released && seen.epoch === request.expectedEpoch
        ? {
            until: Math.max(seen.resumeAfter ?? 0, request.now + OPERATOR_HOLD_MS),
            ...(seen.resumeAfter !== undefined ? { found: seen.resumeAfter } : {}),
          }
        : undefined;
    outcome = await write(hold);
    if (outcome.kind !== 'refused') return { outcome, ...(hold && outcome.kind === 'ok' ? { hold } : {}) };
    const { current } = outcome;
    const changedUnderUs =
      current.epoch === request.expectedEpoch &&
      current.state !== SlotState.Running &&
      current.state !== SlotState.Sharded;
    if (!changedUnderUs) return { outcome };
  }
  return { outcome };
}

/**
 * The FAILED effects a re-drive clears (see OperatorStore.redrive), as an adapter without
 * transactions reads them before it deletes each one: every one of the window, or the `keyHashes`
 * named, all of which must be FAILED (else the answer names the ones that are not, and nothing is
 * to be written).
 */
export async function failedEffectsToClear(
  ledger: Pick<EffectLedger, 'read' | 'list'>,
  slot: Slot,
  keyHashes: readonly string[] | undefined,
): Promise<EffectRecord[] | Extract<RedriveOutcome, { kind: 'effects-not-failed' }>> {
  const failed: EffectRecord[] = [];
  if (!keyHashes) {
    for await (const effect of ledger.list(slot)) {
      if (effect.state === EffectState.Failed) failed.push(effect);
    }
    return failed;
  }
  const found = await Promise.all(
    [...new Set(keyHashes)].map(async (keyHash) => ({ keyHash, current: await ledger.read(slot, keyHash) })),
  );
  const notFailed = found.filter(({ current }) => current?.state !== EffectState.Failed);
  if (notFailed.length > 0) return { kind: 'effects-not-failed', effects: notFailed };
  return found.map(({ current }) => current!);
}
