import { drainConcurrently } from '../shared/effects/concurrent-drain.js';
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
import { type Slot, windowOf, windowSlot } from '../shared/slot/slot.js';
import type { CliBackend } from './cli-backend.js';
import { iso } from './cli-support.js';
import type { CatalogJob } from './job-catalog.js';

/** A window (or one shard of it) as an operator sees it: its slot record and its effects, hashes only. */
export interface SlotView {
  readonly window: string;
  /** The shard this view is of. @default absent: the window itself */
  readonly shard?: number;
  /** How the window reads on the schedule's clocks: `Mon 2026-11-30 09:00 Europe/Moscow`. */
  readonly local: string;
  /**
   * MISSED: a past window with no record. UPCOMING: not yet due. PENDING: a shard whose message no
   * run has claimed yet.
   */
  readonly state: SlotState | 'MISSED' | 'UPCOMING' | 'PENDING';
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
  /** Not finished (RUNNING, RELEASED or SHARDED) and its deadline has passed. */
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
  /**
   * A window split into shards: how many, which have ended, and each shard's record.
   * @default absent: the window is not split (or this is a view of one shard)
   */
  readonly shards?: ShardsView;
  readonly effects: EffectsView;
  /**
   * What an operator should look at: missed, failed (the slot), stuck, partial, past deadline,
   * lease ended (RUNNING, holder gone), unfinished (RELEASED), in doubt; for a split window also its
   * shards that are stuck, failed or whose holder is gone (`stuck shards 2, 5`).
   */
  readonly problems: readonly string[];
}

/** A slot's effects by state, as `slots show` lists them (for a shard, the ones that shard wrote). */
export interface EffectsView {
  readonly done: readonly string[];
  /** Reserved and never recorded done, by a run that is over: may or may not have happened. */
  readonly inDoubt: readonly { readonly keyHash: string; readonly epoch: number; readonly shard?: number }[];
  /** Reserved by a run holding a live lease (the window's, or its shard's): under way. */
  readonly inFlight: readonly string[];
  /** Refused before they were performed: retried later (`retryAt`), or failed for good. */
  readonly failed: readonly FailedEffect[];
}

/** A split window's shards: the count its first claim fixed, those that ended, and each one's record. */
export interface ShardsView {
  readonly count: number;
  /** The shards the window's record counts as ended (DONE, PARTIAL, STUCK or FAILED), in order. */
  readonly finished: readonly number[];
  /**
   * Each shard's record, in shard order.
   * @default absent: not read (`slots list` reads them only while the window is SHARDED)
   */
  readonly records?: readonly ShardRow[];
}

/** One shard's record, as the table of `slots show` prints it. */
export interface ShardRow {
  readonly shard: number;
  /** PENDING: no record yet, its message not claimed. */
  readonly state: SlotState | 'PENDING';
  readonly holder?: string;
  readonly epoch?: number;
  readonly leaseEndsAt?: string;
  readonly leaseLive: boolean;
  /** @default absent: no record, or no run left one */
  readonly checkpoint?: Checkpoint;
  /** @default absent: no checkpoint yet */
  readonly progress?: RunSummary;
  /** @default absent: no record */
  readonly runsWithoutProgress?: number;
  /** Why it is STUCK or FAILED. @default absent: no error recorded */
  readonly lastError?: string;
  /** Its effects (the ones it wrote to the window's ledger), counted. */
  readonly effectCounts: EffectCounts;
}

/** Effects counted by state. */
export interface EffectCounts {
  readonly done: number;
  readonly inDoubt: number;
  readonly inFlight: number;
  readonly failed: number;
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

/** Which slot `viewSlot` reads, and how much of a split window. */
export interface ViewOptions {
  /** A shard of the window, in full. @default the window itself */
  readonly shard?: number;
  /**
   * A split window's shard records: `always`, or `while-split` (only while the window is SHARDED,
   * when they decide which reserved effects are under way; `slots list` reads no more).
   * @default 'always'
   */
  readonly shardRecords?: 'always' | 'while-split';
}

/** Shard records read at once: a window may have 1,000. */
const SHARD_READS_AT_ONCE = 16;

/** Reads one window's record (or one shard's) and its effects. */
export async function viewSlot(
  backend: CliBackend,
  spec: CatalogJob,
  window: number,
  now: number,
  options: ViewOptions = {},
): Promise<SlotView> {
  const windowOnly: Slot = { jobId: spec.id, window: windowOf(window) };
  const slot: Slot = options.shard === undefined ? windowOnly : { ...windowOnly, shard: options.shard };
  const timeZone = spec.schedule.timeZone ?? 'UTC';
  const record = await backend.slots.claims.read(slot);
  const local = describeInZone(window, timeZone);
  if (!record) {
    const state = slot.shard !== undefined ? 'PENDING' : window > now ? 'UPCOMING' : 'MISSED';
    return {
      window: slot.window,
      ...(slot.shard !== undefined ? { shard: slot.shard } : {}),
      local,
      state,
      leaseLive: false,
      backfilled: false,
      pastDeadline: false,
      effects: { done: [], inDoubt: [], inFlight: [], failed: [] },
      problems: state === 'MISSED' ? ['missed'] : [],
    };
  }
  const split = slot.shard === undefined && (record.shards ?? 1) > 1;
  const shardRecords =
    split && (options.shardRecords !== 'while-split' || record.state === SlotState.Sharded)
      ? await readShards(backend, windowOnly, record.shards ?? 1)
      : undefined;
  const leaseLive = isLive(record, now);
  const effects = await classifyEffects(backend, slot, record, shardRecords, now);
  const unfinished =
    record.state === SlotState.Running ||
    record.state === SlotState.Released ||
    record.state === SlotState.Sharded;
  const pastDeadline = unfinished && record.deadline !== undefined && now > record.deadline;
  const shards = split
    ? {
        count: record.shards ?? 1,
        finished: record.finishedShards ?? [],
        ...(shardRecords
          ? { records: shardRecords.map((r, i) => shardRow(i, r, effects.byShard, now)) }
          : {}),
      }
    : undefined;
  return {
    window: slot.window,
    ...(slot.shard !== undefined ? { shard: slot.shard } : {}),
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
    ...(shards ? { shards } : {}),
    effects: effects.all,
    problems: [
      ...problemsOf(record, leaseLive, pastDeadline, effects.all.inDoubt.length),
      ...(shards?.records ? shardProblems(shards.records) : []),
    ],
  } as SlotView;
}

/** A window's shard records, in shard order (undefined where a shard has none yet), 16 reads at a time. */
export async function readShards(
  backend: CliBackend,
  window: Slot,
  count: number,
): Promise<(SlotRecord | undefined)[]> {
  const records: (SlotRecord | undefined)[] = new Array(count);
  await drainConcurrently(
    Array.from({ length: count }, (_, shard) => shard),
    SHARD_READS_AT_ONCE,
    async (shard) => {
      records[shard] = await backend.slots.claims.read({ ...window, shard });
    },
  );
  return records;
}

function isLive(record: SlotRecord | undefined, now: number): boolean {
  return record?.state === SlotState.Running && record.leaseEndsAt >= now;
}

/**
 * The window's ledger (one for all its shards) by state: for a shard's view only the effects it
 * wrote. A reserved effect is under way while the run that reserved it holds a live lease (the
 * slot's own, or for a split window its shard's), else in doubt. A split window whose shard records
 * were not read has ended (every shard with it), so its reserved effects are in doubt.
 */
async function classifyEffects(
  backend: CliBackend,
  slot: Slot,
  record: SlotRecord,
  shardRecords: readonly (SlotRecord | undefined)[] | undefined,
  now: number,
): Promise<{ all: EffectsView; byShard: Map<number, EffectCounts> }> {
  // A finished or stuck slot makes no more retries, whatever its records' retry times say.
  const retriesGoOn = !TERMINAL_SLOT_STATES.includes(record.state);
  const done: string[] = [];
  const inDoubt: { keyHash: string; epoch: number; shard?: number }[] = [];
  const inFlight: string[] = [];
  const failed: FailedEffect[] = [];
  const byShard = new Map<number, EffectCounts>();
  const tally = (shard: number | undefined, state: keyof EffectCounts) => {
    if (shard === undefined) return;
    const counts = byShard.get(shard) ?? { done: 0, inDoubt: 0, inFlight: 0, failed: 0 };
    byShard.set(shard, { ...counts, [state]: counts[state] + 1 });
  };
  for await (const effect of backend.slots.ledger.list(windowSlot(slot))) {
    if (slot.shard !== undefined && effect.shard !== slot.shard) continue;
    if (effect.state === EffectState.Done) {
      done.push(effect.keyHash);
      tally(effect.shard, 'done');
    } else if (effect.state === EffectState.Failed) {
      failed.push({
        keyHash: effect.keyHash,
        attempts: effect.attempts,
        reason: effect.reason ?? 'unspecified',
        ...(effect.retryAt !== undefined && retriesGoOn ? { retryAt: iso(effect.retryAt) } : {}),
      });
      tally(effect.shard, 'failed');
    } else {
      // Whose lease decides: in a split window whose shards were read, the shard that reserved it.
      const holder = shardRecords
        ? effect.shard === undefined
          ? undefined
          : shardRecords[effect.shard]
        : record;
      if (isLive(holder, now) && effect.epoch === holder?.epoch) {
        inFlight.push(effect.keyHash);
        tally(effect.shard, 'inFlight');
      } else {
        inDoubt.push({
          keyHash: effect.keyHash,
          epoch: effect.epoch,
          ...(effect.shard !== undefined ? { shard: effect.shard } : {}),
        });
        tally(effect.shard, 'inDoubt');
      }
    }
  }
  return { all: { done, inDoubt, inFlight, failed }, byShard };
}

function shardRow(
  shard: number,
  record: SlotRecord | undefined,
  effects: ReadonlyMap<number, EffectCounts>,
  now: number,
): ShardRow {
  const effectCounts = effects.get(shard) ?? { done: 0, inDoubt: 0, inFlight: 0, failed: 0 };
  if (!record) return { shard, state: 'PENDING', leaseLive: false, effectCounts };
  return {
    shard,
    state: record.state,
    holder: record.owner,
    epoch: record.epoch,
    ...(record.state === SlotState.Running ? { leaseEndsAt: iso(record.leaseEndsAt) } : {}),
    leaseLive: isLive(record, now),
    ...(record.checkpoint ? { checkpoint: record.checkpoint } : {}),
    ...(record.progress ? { progress: record.progress } : {}),
    runsWithoutProgress: record.runsWithoutProgress,
    ...(record.lastError ? { lastError: record.lastError } : {}),
    effectCounts,
  };
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

/** `stuck shard 2`, `failed shards 3, 7`, `lease ended on shard 1`: one entry per kind, at most. */
function shardProblems(rows: readonly ShardRow[]): string[] {
  const which = (test: (row: ShardRow) => boolean) => rows.filter(test).map((row) => row.shard);
  const named = (shards: readonly number[]) =>
    `${shards.length === 1 ? 'shard' : 'shards'} ${shards.slice(0, 10).join(', ')}${shards.length > 10 ? ', …' : ''}`;
  const stuck = which((row) => row.state === SlotState.Stuck);
  const failed = which((row) => row.state === SlotState.Failed);
  const leaseEnded = which((row) => row.state === SlotState.Running && !row.leaseLive);
  return [
    ...(stuck.length ? [`stuck ${named(stuck)}`] : []),
    ...(failed.length ? [`failed ${named(failed)}`] : []),
    ...(leaseEnded.length ? [`lease ended on ${named(leaseEnded)}`] : []),
  ];
}

/** The command that delivers one window now: `slotguard backfill --job … --from <window> --to <window + 1 min>`. */
export function backfillCommand(slot: Slot): string {
  return `slotguard backfill --job ${slot.jobId} --from ${slot.window} --to ${windowOf(Date.parse(slot.window) + 60_000)}`;
}

/** The command that releases one slot: `slotguard slots release --job … --window …` (and `--shard N` for a shard). */
export function releaseCommand(slot: Slot): string {
  const shard = slot.shard === undefined ? '' : ` --shard ${slot.shard}`;
  return `slotguard slots release --job ${slot.jobId} --window ${slot.window}${shard}`;
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
