import { type EffectLedger, type EffectRecord, EffectState, type WindowSummary } from '../slot/ports.js';
import type { Slot } from '../slot/slot.js';

/** The most hashed keys a window summary lists per list; the counts are always exact. */
const LISTED_KEYS = 50;

/** The most in-doubt records one tally hands to a resolution pass; a later pass takes the rest. */
export const IN_DOUBT_RECORDS_PER_PASS = 5_000;

/** A window's effect records, counted: what it came to so far, and what still waits for a retry. */
export interface WindowTally {
  readonly done: number;
  readonly inDoubt: number;
  /** Failed for good. */
  readonly failed: number;
  /** Refused and waiting for a retry (FAILED with a retryAt). */
  readonly waiting: number;
  /** The earliest retry among those waiting. */
  readonly earliestRetryAt?: number;
  /** Waiting retries already due at `now`, by key hash: a retry pass performs these. */
  readonly due: ReadonlySet<string>;
  readonly inDoubtKeys: readonly string[];
  readonly failedKeys: readonly string[];
  readonly waitingKeys: readonly string[];
  /** The in-doubt (RESERVED) records themselves, at most IN_DOUBT_RECORDS_PER_PASS: what resolution reads. */
  readonly inDoubtRecords: readonly EffectRecord[];
}

/**
 * Reads every effect record of the window once and counts it as it stands: DONE (or a reservation
 * its run's done marks cover: the ledger reads it DONE) is done, RESERVED is in doubt (the holder
 * that reserved it is over: the run tallying has written its own marks), FAILED is failed
 * for good or waiting for its retry. Exact whatever crashes, takeovers and continuations came before,
 * because it counts what is on record rather than what runs reported. For a shard's slot, only the
 * records that shard wrote.
 */
export async function tallyWindow(ledger: EffectLedger, slot: Slot, now: number): Promise<WindowTally> {
  let done = 0;
  let inDoubt = 0;
  let failed = 0;
  let waiting = 0;
  let earliestRetryAt: number | undefined;
  const due = new Set<string>();
  const inDoubtKeys: string[] = [];
  const failedKeys: string[] = [];
  const waitingKeys: string[] = [];
  const inDoubtRecords: EffectRecord[] = [];
  for await (const record of ledger.list(slot)) {
    // A shard counts its own: the ledger is the window's, and every shard writes to it.
    if (slot.shard !== undefined && record.shard !== slot.shard) continue;
    switch (record.state) {
      case EffectState.Done:
        done++;
        break;
      case EffectState.Reserved:
        inDoubt++;
        if (inDoubtKeys.length < LISTED_KEYS) inDoubtKeys.push(record.keyHash);
        if (inDoubtRecords.length < IN_DOUBT_RECORDS_PER_PASS) inDoubtRecords.push(record);
        break;
      case EffectState.Failed:
        if (record.retryAt === undefined) {
          failed++;
          if (failedKeys.length < LISTED_KEYS) failedKeys.push(record.keyHash);
          break;
        }
        waiting++;
        if (waitingKeys.length < LISTED_KEYS) waitingKeys.push(record.keyHash);
        if (record.retryAt <= now) due.add(record.keyHash);
        if (earliestRetryAt === undefined || record.retryAt < earliestRetryAt)
          earliestRetryAt = record.retryAt;
        break;
      default:
        return record.state satisfies never;
    }
  }
  return {
    done,
    inDoubt,
    failed,
    waiting,
    ...(earliestRetryAt !== undefined ? { earliestRetryAt } : {}),
    due,
    inDoubtKeys,
    failedKeys,
    waitingKeys,
    inDoubtRecords,
  };
}

/**
 * The summary a finished window stores. Effects still waiting for a retry when the window has to
 * finish (its deadline came first) count as failed: they were not performed.
 */
export function windowSummary(tally: WindowTally, runs: number): WindowSummary {
  return {
    done: tally.done,
    inDoubt: tally.inDoubt,
    failed: tally.failed + tally.waiting,
    inDoubtKeys: tally.inDoubtKeys,
    failedKeys: [...tally.failedKeys, ...tally.waitingKeys].slice(0, LISTED_KEYS),
    runs,
  };
}
