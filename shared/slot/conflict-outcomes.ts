import type { Claim, ClaimOutcome, SlotRecord } from './ports.js';
import { SlotState } from './ports.js';
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
): ClaimOutcome | 'claimable' {
  switch (current.state) {
    case SlotState.Done:
      return { kind: 'done', completedAt: current.completedAt ?? 0, summary: current.summary };
    case SlotState.Failed:
      return { kind: 'failed', attempts: current.attempts, lastError: current.lastError ?? '' };
    case SlotState.Running:
      if (current.owner === owner) {
        // Our own claim committed and its reply was lost: it is ours, not a rival's.
        return {
          kind: 'claimed',
          claim: { slot, owner, epoch: current.epoch, leaseEndsAt: current.leaseEndsAt, via: 'new' },
        };
      }
      if (current.leaseEndsAt < now) return 'claimable';
      return { kind: 'held', holder: current.owner, epoch: current.epoch, leaseEndsAt: current.leaseEndsAt };
    case SlotState.Released:
      return 'claimable';
    default:
      return current.state satisfies never;
  }
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
