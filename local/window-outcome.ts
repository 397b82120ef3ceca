import type { LocalJob } from '../functions/local-jobs.js';
import type { SlotBackend } from '../shared/job/run-slot.js';
import { type EffectRecord, EffectState, type SlotRecord, SlotState } from '../shared/slot/ports.js';
import { type Slot, windowOf } from '../shared/slot/slot.js';
import type { MailTally } from './smtp-sink.js';

/**
 * What one window came to for its recipients, read from the SMTP server (what arrived) and the
 * store (what the ledger and the slot record say): `npm start -- --json`'s last line.
 */
export interface WindowOutcome {
  /** Emails the SMTP server accepted for the window. */
  readonly delivered: number;
  /** Emails beyond the first to any recipient. */
  readonly duplicates: number;
  /** Effects reserved and never recorded done: each may or may not have gone. */
  readonly inDoubt: number;
  /**
   * Effects the provider refused for good; in a finished window (DONE or PARTIAL) also those whose
   * retry the deadline cut off, as the window's summary counts them.
   */
  readonly failed: number;
  /**
   * Recipients with no outcome: not delivered, not in doubt, not failed. In a window that is not
   * finished this includes refused emails still waiting for their retry, and every recipient the
   * runs have not reached.
   */
  readonly unfinished: number;
  /**
   * Runs granted the window's slot: its epoch (one per claim, continuation or takeover); for a
   * window split into shards, its coordinator's runs and every shard's (each shard's epoch), as
   * the local runner's table counts them.
   */
  readonly runs: number;
  /** Shards the window was split into, as its record says: 1 when it was not split. */
  readonly shards: number;
}

/**
 * Counts a window's recipients by outcome: each of the job's recipients is delivered (the SMTP
 * server got mail for it from the window's sender), else in doubt or failed by its ledger record,
 * else unfinished.
 */
export async function windowOutcome(args: {
  readonly job: LocalJob;
  readonly window: Date;
  readonly backend: SlotBackend;
  /** What the SMTP server accepted from the window's sender. */
  readonly mail: MailTally;
}): Promise<WindowOutcome> {
  const { job, window, backend, mail } = args;
  const slot = { jobId: job.spec.id, window: windowOf(window) };
  const record = await backend.claims.read(slot);
  const finished = record?.state === SlotState.Done || record?.state === SlotState.Partial;
  const failedForGood = (effect: EffectRecord) =>
    effect.state === EffectState.Failed && (finished || effect.retryAt === undefined);
  const effects = new Map<string, EffectRecord>();
  let inDoubt = 0;
  let failed = 0;
  for await (const effect of backend.ledger.list(slot)) {
    effects.set(effect.keyHash, effect);
    if (effect.state === EffectState.Reserved) inDoubt++;
    if (failedForGood(effect)) failed++;
  }
  let unfinished = 0;
  for await (const { key, address } of job.effects(window)) {
    if ((mail.recipients.get(address) ?? 0) > 0) continue;
    const effect = effects.get(backend.hashKey(key));
    if (effect?.state === EffectState.Reserved || (effect && failedForGood(effect))) continue;
    unfinished++;
  }
  return {
    delivered: mail.total,
    duplicates: mail.duplicates,
    inDoubt,
    failed,
    unfinished,
    runs: await runsOf(backend, slot, record),
    shards: record?.shards ?? 1,
  };
}

/** The window's runs: its epoch, plus each shard's when it was split (a shard's record is its own). */
async function runsOf(backend: SlotBackend, window: Slot, record: SlotRecord | undefined): Promise<number> {
  if (!record) return 0;
  const shards = record.shards ?? 1;
  if (shards <= 1) return record.summary?.runs ?? record.epoch;
  const records = await Promise.all(
    Array.from({ length: shards }, (_, shard) => backend.claims.read({ ...window, shard })),
  );
  return records.reduce((runs, shard) => runs + (shard?.epoch ?? 0), record.epoch);
}
