import { coveredByMarks } from './done-marks.js';
import type {
  Claim,
  ClaimOutcome,
  EffectRecord,
  ProviderWord,
  ProviderWordOutcome,
  ReserveOptions,
  ReserveOutcome,
  SlotRecord,
  WindowProgress,
} from './ports.js';
import { EffectState, SlotState } from './ports.js';
import type { Slot } from './slot.js';

/**
 * What a failed claim condition means, read from the slot record that made it fail. Shared by the
 * adapters that claim with a conditional write and then read (DynamoDB, the in-memory store), so
 * they cannot disagree on it. `claimable` means the record changed between the write and the read
 * (released, or its lease ran out): the caller tries the same write again.
 */
export function claimOutcomeOfConflict(
  slot: Slot,
  current: SlotRecord,
  owner: string,
  now: number,
  takeoverSkewMs = 0,
): ClaimOutcome | 'claimable' {
  switch (current.state) {
    case SlotState.Done:
    case SlotState.Partial:
      return {
        kind: 'done',
        state: current.state,
        completedAt: current.completedAt ?? 0,
        summary: current.summary,
      };
    case SlotState.Failed:
      return { kind: 'failed', attempts: current.attempts, lastError: current.lastError ?? '' };
    case SlotState.Stuck:
      return { kind: 'stuck', epoch: current.epoch, reason: current.lastError ?? '' };
    case SlotState.Sharded:
      return { kind: 'sharded', shards: current.shards ?? 1, finished: current.finishedShards ?? [] };
    case SlotState.Running:
      if (current.owner === owner) {
        // Our own claim committed and its reply was lost: it is ours, not a rival's.
        return {
          kind: 'claimed',
          claim: {
            slot,
            owner,
            epoch: current.epoch,
            leaseEndsAt: current.leaseEndsAt,
            via: 'new',
            window: progressOf(current, current.deadline ?? 0, current.keyVersion),
          },
        };
      }
      if (current.leaseEndsAt < now - takeoverSkewMs) return 'claimable';
      return { kind: 'held', holder: current.owner, epoch: current.epoch, leaseEndsAt: current.leaseEndsAt };
    case SlotState.Released:
      if (current.resumeAfter !== undefined && current.resumeAfter > now) {
        return { kind: 'waiting', until: current.resumeAfter };
      }
      return 'claimable';
    default:
      return current.state satisfies never;
  }
}

/**
 * The window's progress a claim hands its run, from the record the claim replaced (absent for a new
 * slot): the deadline the first claim stored (else the one this claim asked for), the checkpoint,
 * and the runs without progress so far.
 */
export function progressOf(
  record:
    | Pick<
        SlotRecord,
        'deadline' | 'checkpoint' | 'runsWithoutProgress' | 'keyVersion' | 'shards' | 'doneMarks'
      >
    | undefined,
  requestedDeadline: number,
  requestedKeyVersion?: string,
  requestedShards?: number,
): WindowProgress {
  const keyVersion = record?.keyVersion ?? requestedKeyVersion;
  // A window's split is fixed at its first claim; a record that predates splitting is not split.
  const shards = record ? (record.shards ?? 1) : requestedShards;
  return {
    deadline: record?.deadline ?? requestedDeadline,
    ...(record?.checkpoint ? { checkpoint: record.checkpoint } : {}),
    runsWithoutProgress: record?.runsWithoutProgress ?? 0,
    ...(keyVersion !== undefined ? { keyVersion } : {}),
    ...(shards !== undefined && shards > 1 ? { shards } : {}),
    ...(record?.doneMarks ? { doneMarks: record.doneMarks } : {}),
  };
}

/** True when the record is this very grant: the same owner token and epoch. */
export function isOwnGrant(record: SlotRecord, claim: Claim): boolean {
  return record.owner === claim.owner && record.epoch === claim.epoch;
}

/** Who fenced a rejected write, for the `lost` and `fenced` outcomes. */
export function fencedBy(current: SlotRecord | undefined) {
  return current ? { holder: current.owner, epoch: current.epoch, state: current.state } : {};
}

/** How often a claim is tried when the slot keeps turning claimable between write and read. */
const CLAIM_TRIES = 3;

/**
 * Runs one claim attempt until it gives an answer. A slot released (or whose lease ran out)
 * between a failed write and the read that explains it is claimable again: the same write is tried
 * once more rather than reporting a holder that is gone; after CLAIM_TRIES it is reported held.
 */
export async function claimUntilAnswered(
  claimOnce: () => Promise<ClaimOutcome | 'claimable'>,
  now: number,
): Promise<ClaimOutcome> {
  for (let attempt = 1; attempt <= CLAIM_TRIES; attempt++) {
    const outcome = await claimOnce();
    if (outcome !== 'claimable') return outcome;
  }
  return { kind: 'held', holder: '', epoch: 0, leaseEndsAt: now };
}

/**
 * What an effect reservation that met an existing record should do, read from that record. Shared by
 * the adapters that reserve with a conditional put and then read (DynamoDB, the in-memory store).
 * `retry` and `take-over` ask the caller to replace exactly `current` with a conditional write.
 */
export function reserveOutcomeOfConflict(
  current: EffectRecord,
  claim: Claim,
  options: ReserveOptions,
):
  | ReserveOutcome
  | { readonly kind: 'retry'; readonly current: EffectRecord }
  | { readonly kind: 'take-over'; readonly current: EffectRecord } {
  if (current.state === EffectState.Done) return { kind: 'done' };
  // Epochs are a shard's own: another shard's reservation or refusal is that shard's to see to.
  if (current.shard !== claim.slot.shard) return { kind: 'elsewhere', shard: current.shard };
  // An earlier epoch's reservation its done marks cover was performed: done.
  if (coveredByMarks(current, claim.window.doneMarks)) return { kind: 'done' };
  if (current.owner === claim.owner && current.epoch === claim.epoch) {
    if (current.state === EffectState.Reserved) {
      if (current.seq === undefined || options.seq === undefined || current.seq === options.seq) {
        // Our own reservation committed and its reply was lost; the client's retry met it.
        return { kind: 'reserved', rerun: false, attempt: current.attempts + 1 };
      }
      // Our own earlier reservation of the key, under another number: the runner reserves a key a
      // second time only once the first settled done (one still in flight or in doubt it skips
      // without asking), and this run's marks may not be written yet. Never perform it again.
      return { kind: 'done' };
    }
  } else if (current.epoch > claim.epoch) {
    // A later epoch reserved it, or recorded its refusal: that epoch holds the slot now.
    return { kind: 'fenced', epoch: current.epoch };
  }
  if (current.state === EffectState.Failed) {
    if (current.retryAt === undefined) return { kind: 'failed', attempts: current.attempts };
    if (current.retryAt > options.now) {
      return { kind: 'retry-later', retryAt: current.retryAt, attempts: current.attempts };
    }
    return { kind: 'retry', current };
  }
  if (!options.rerunInDoubt) return { kind: 'in-doubt', epoch: current.epoch };
  return { kind: 'take-over', current };
}

/**
 * What a provider's word that wrote nothing (its condition failed) came to, read from the record
 * that made it fail. Shared by every backend, so they cannot disagree on it: `done` for a DONE
 * record; `recorded` for one of the word's epoch that already says as much (the same outcome, a
 * duplicated event, or an acceptance, which a rejection never replaces); else `unknown`.
 */
export function providerWordOutcomeOfConflict(
  current: EffectRecord | undefined,
  word: ProviderWord,
): ProviderWordOutcome {
  if (current?.state === EffectState.Done) return 'done';
  const onRecord = current?.epoch === word.epoch ? current.provider?.outcome : undefined;
  return onRecord === 'accepted' || onRecord === word.outcome ? 'recorded' : 'unknown';
}
