import type { JobSchedule } from '../shared/schedule/fire-times.js';
import { describeInZone } from '../shared/schedule/time-zone.js';
import {
  type Checkpoint,
  type Delivery,
  EffectState,
  type RunSummary,
  type SlotRecord,
  SlotState,
  TERMINAL_SLOT_STATES,
  type WindowSummary,
} from '../shared/slot/ports.js';
import { type Slot, windowOf } from '../shared/slot/slot.js';
import type { CliBackend } from './cli-backend.js';
import { iso } from './cli-support.js';
import type { CatalogJob } from './job-catalog.js';

/** A window as an operator sees it: its slot record and its effects, hashes only. */
export interface SlotView {
  readonly window: string;
  /** How the window reads on the schedule's clocks: `Mon 2026-11-30 09:00 Europe/Moscow`. */
  readonly local: string;
  /** MISSED: a past window with no record. UPCOMING: not yet due. */
  readonly state: SlotState | 'MISSED' | 'UPCOMING';
  readonly holder?: string;
  readonly epoch?: number;
  readonly leaseEndsAt?: string;
  /** RUNNING with a lease that has not ended: a run is (or may be) working on it. */
  readonly leaseLive: boolean;
  readonly attempts?: number;
  readonly failures?: number;
  readonly delivery?: Delivery;
  readonly backfilled: boolean;
  readonly completedAt?: string;
  readonly summary?: WindowSummary;
  /** The last run's error; for a STUCK window, why continuation gave up. */
  readonly lastError?: string;
  /** When the window must be finished. @default absent: no record, or one written before deadlines */
  readonly deadline?: string;
  /** Not finished (RUNNING or RELEASED) and its deadline has passed. */
  readonly pastDeadline: boolean;
  /** RELEASED and waiting for refused effects' retries: not claimable before this. @default absent: not waiting */
  readonly resumeAfter?: string;
  /**
   * Where the next run resumes each resumable source, and whether the walk reached its end.
   * @default absent: no run left one (the next run walks from the start)
   */
  readonly checkpoint?: Checkpoint;
  /** The holder's counts at its last checkpoint: its run so far. @default absent: no checkpoint yet */
  readonly progress?: RunSummary;
  /** Consecutive runs that ended with work left and nothing achieved (STUCK at 3). @default absent: no record */
  readonly runsWithoutProgress?: number;
  readonly effects: {
    readonly done: readonly string[];
    /** Reserved and never recorded done, by a run that is over: may or may not have happened. */
    readonly inDoubt: readonly { readonly keyHash: string; readonly epoch: number }[];
    /** Reserved by the run holding the live lease: under way. */
    readonly inFlight: readonly string[];
    /** Refused before they were performed: retried later (`retryAt`), or failed for good. */
    readonly failed: readonly FailedEffect[];
  };
  /**
   * What an operator should look at: missed, failed (the slot), stuck, partial, past deadline,
   * lease ended (RUNNING, holder gone), unfinished (RELEASED), in doubt.
   */
  readonly problems: readonly string[];
}

/** An effect the provider refused, as `slots show` lists it. */
export interface FailedEffect {
  readonly keyHash: string;
  /** Attempts refused so far. */
  readonly attempts: number;
  /** Why it was last refused (throttled, rejected, quota…). */
  readonly reason: string;
  /** Its next retry, when a run will still make one. @default absent: failed for good */
  readonly retryAt?: string;
}

/** Reads one window's record and effects. `listEffects: false` skips the effect query (counts unknown). */
export async function viewSlot(
  backend: CliBackend,
  spec: CatalogJob,
  window: number,
  now: number,
): Promise<SlotView> {
  const slot: Slot = { jobId: spec.id, window: windowOf(window) };
  const timeZone = spec.schedule.timeZone ?? 'UTC';
  const record = await backend.slots.claims.read(slot);
  const local = describeInZone(window, timeZone);
  if (!record) {
    const state = window > now ? 'UPCOMING' : 'MISSED';
    return {
      window: slot.window,
      local,
      state,
      leaseLive: false,
      backfilled: false,
      pastDeadline: false,
      effects: { done: [], inDoubt: [], inFlight: [], failed: [] },
      problems: state === 'MISSED' ? ['missed'] : [],
    };
  }
  const leaseLive = record.state === SlotState.Running && record.leaseEndsAt >= now;
  // A finished or stuck window makes no more retries, whatever its records' retry times say.
  const retriesGoOn = !TERMINAL_SLOT_STATES.includes(record.state);
  const done: string[] = [];
  const inDoubt: { keyHash: string; epoch: number }[] = [];
  const inFlight: string[] = [];
  const failed: FailedEffect[] = [];
  for await (const effect of backend.slots.ledger.list(slot)) {
    if (effect.state === EffectState.Done) done.push(effect.keyHash);
    else if (effect.state === EffectState.Failed)
      failed.push({
        keyHash: effect.keyHash,
        attempts: effect.attempts,
        reason: effect.reason ?? 'unspecified',
        ...(effect.retryAt !== undefined && retriesGoOn ? { retryAt: iso(effect.retryAt) } : {}),
      });
    else if (leaseLive && effect.epoch === record.epoch) inFlight.push(effect.keyHash);
    else inDoubt.push({ keyHash: effect.keyHash, epoch: effect.epoch });
  }
  const unfinished = record.state === SlotState.Running || record.state === SlotState.Released;
  const pastDeadline = unfinished && record.deadline !== undefined && now > record.deadline;
  return {
    window: slot.window,
    local,
    state: record.state,
    holder: record.owner,
    epoch: record.epoch,
    leaseEndsAt: record.leaseEndsAt ? iso(record.leaseEndsAt) : undefined,
    leaseLive,
    attempts: record.attempts,
    failures: record.failures,
    delivery: record.delivery,
    backfilled: record.delivery.backfilled === true,
    ...(record.completedAt ? { completedAt: iso(record.completedAt) } : {}),
    ...(record.summary ? { summary: record.summary } : {}),
    ...(record.lastError ? { lastError: record.lastError } : {}),
    ...(record.deadline !== undefined ? { deadline: iso(record.deadline) } : {}),
    pastDeadline,
    ...(record.resumeAfter !== undefined && record.resumeAfter > now
      ? { resumeAfter: iso(record.resumeAfter) }
      : {}),
    ...(record.checkpoint ? { checkpoint: record.checkpoint } : {}),
    ...(record.progress ? { progress: record.progress } : {}),
    runsWithoutProgress: record.runsWithoutProgress,
    effects: { done, inDoubt, inFlight, failed },
    problems: problemsOf(record, leaseLive, pastDeadline, inDoubt.length),
  } as SlotView;
}

function problemsOf(
  record: SlotRecord,
  leaseLive: boolean,
  pastDeadline: boolean,
  inDoubt: number,
): string[] {
  const problems: string[] = [];
  if (record.state === SlotState.Failed) problems.push('failed');
  if (record.state === SlotState.Stuck) problems.push('stuck');
  if (record.state === SlotState.Partial) problems.push('partial');
  if (pastDeadline) problems.push('past deadline');
  if (record.state === SlotState.Running && !leaseLive) problems.push('lease ended');
  if (record.state === SlotState.Released) problems.push('unfinished');
  if (inDoubt > 0) problems.push('in doubt');
  return problems;
}

/** The command that delivers one window now: `slotguard backfill --job … --from <window> --to <window + 1 min>`. */
export function backfillCommand(slot: Slot): string {
  return `slotguard backfill --job ${slot.jobId} --from ${slot.window} --to ${windowOf(Date.parse(slot.window) + 60_000)}`;
}

/** The invocation part of an owner token (`replica-2/4f0c…` → `replica-2`). */
export function holderName(owner: string | undefined): string {
  if (!owner) return '-';
  const slash = owner.lastIndexOf('/');
  return slash > 0 ? owner.slice(0, slash) : owner;
}

/**
 * Checks that `window` is a fire time of the job's schedule; when it is not (a local time typed as
 * UTC, say), says which fire times are nearest, so the operator can correct it.
 */
export function windowNote(spec: CatalogJob, window: number, schedule: JobSchedule): string | undefined {
  const before = schedule.firesBetween(window - 8 * 86_400_000, window + 1).at(-1);
  if (before?.getTime() === window) return undefined;
  const after = schedule.nextFireAfter(window);
  const near = [before, after].filter((d): d is Date => d !== undefined).map((d) => windowOf(d));
  return (
    `note: ${windowOf(window)} is not a fire time of ${spec.id}'s schedule (${spec.schedule.expression} ` +
    `${spec.schedule.timeZone ?? 'UTC'})${near.length ? `; the nearest are ${near.join(' and ')}` : ''}`
  );
}
