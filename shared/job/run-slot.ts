import { randomUUID } from 'node:crypto';
import type { Clock } from '../clock.js';
import { drainAhead, drainConcurrently, type TwoStep } from '../effects/concurrent-drain.js';
import type { EffectKeyHasher, EffectKeyRing } from '../effects/effect-key.js';
import {
  DEFAULT_EFFECT_RETRY,
  type EffectRetryPolicy,
  EffectRunner,
  InDoubtPolicy,
  type StopReason,
  settledStep,
} from '../effects/effect-runner.js';
import {
  isResumable,
  type ResumableSource,
  type ShardOfWindow,
  shardOfKeyHash,
  sourceName,
  WalkWatermark,
} from '../effects/resumable-source.js';
import { RunMarks } from '../effects/run-marks.js';
import { ConfigurationError, InvalidEventError, StoreError } from '../errors.js';
import {
  type Claim,
  type ClaimOutcome,
  type ClaimStore,
  type Delivery,
  defaultLeaseSafetyMarginMs,
  type EffectLedger,
  type FinishOutcome,
  type RunSummary,
  SlotState,
  type WindowFinish,
  type WindowSummary,
} from '../slot/ports.js';
import { assertShard, canonicalSlot, MAX_SHARDS, type Slot, windowSlot } from '../slot/slot.js';
import type { Log } from '../telemetry/log.js';
import { MetricName } from '../telemetry/metric-names.js';
import type { JobMetrics } from '../telemetry/metrics.js';
import { safeErrorText } from '../telemetry/safe-error-text.js';
import { Checkpointer } from './checkpointer.js';
import {
  type InDoubtResolution,
  type ResolutionPass,
  resolveInDoubt,
  resolveInDoubtResolution,
} from './in-doubt-resolution.js';
import type { JobContext, JobDefinition } from './job-definition.js';
import { defaultTakeoverSkewMs, JOB_DEFAULTS } from './job-spec.js';
import { LeaseKeeper } from './lease-keeper.js';
import { tallyWindow, type WindowTally, windowSummary } from './window-tally.js';

const DAY_MS = 86_400_000;
const HOUR_MS = 3_600_000;

/** The backend a run uses: claims, effects, and how effect keys are hashed. */
export interface SlotBackend {
  readonly claims: ClaimStore;
  readonly ledger: EffectLedger;
  readonly hashKey: EffectKeyHasher;
}

/** Tuning of one run. Every field has a default that suits a Lambda run. */
export interface RunOptions {
  /**
   * The lease on the slot. A holder that dies is taken over this long after its last renewal.
   * @default 60_000
   */
  readonly leaseMs?: number;
  /**
   * How often the lease is renewed.
   * @default a third of leaseMs
   */
  readonly renewEveryMs?: number;
  /**
   * New effects stop this long before the lease ends by the local clock (room for clock skew and
   * an effect already under way).
   * @default a sixth of leaseMs
   */
  readonly leaseSafetyMarginMs?: number;
  /**
   * New effects stop when the Lambda has less than this left, so the run flushes its marks and
   * releases the slot cleanly for a continuation to resume.
   * @default 30_000, or a quarter of the time the invocation had left when it claimed the slot if
   *   that is less (a 10-second invocation stops 2.5 s before its end instead of before it starts)
   */
  readonly stopMarginMs?: number;
  /**
   * Effects performed at once by `onceEach`.
   * @default 16
   */
  readonly effectConcurrency?: number;
  /**
   * Failed runs (the job threw) of a window before its slot is marked FAILED.
   * @default 3
   */
  readonly maxAttempts?: number;
  /**
   * How long slot and effect records are kept (DynamoDB TTL), counted from the window. Must exceed
   * the schedule's maximum event age by at least a day: a window older than retention minus a day
   * is refused, because its record may already be gone and a second run could not be told apart
   * from the first.
   * @default 35
   */
  readonly retentionDays?: number;
  /** @default 'report' */
  readonly inDoubtPolicy?: InDoubtPolicy;
  /**
   * How effects left in doubt are settled from the provider's word before the window finishes
   * (docs/design.md, "In doubt, resolved from the provider's record").
   * @default no grace period; effects still in doubt after the words are applied are reported
   */
  readonly inDoubtResolution?: InDoubtResolution;
  /**
   * The run writes its done marks (with its checkpoint) once this many effects were performed since
   * the last write: a crash leaves at most this many performed effects, plus those in flight, in doubt.
   * @default 25
   */
  readonly markBatchSize?: number;
  /** …or this long after an effect was performed, whichever comes first. @default 1_000 */
  readonly markFlushMs?: number;
  /**
   * How long after its scheduled time (or its first claim, if that came later: a backfill) a window
   * must be finished. Past it, continuation stops: the window ends STUCK (work left) or PARTIAL
   * (only refused effects left) and pages. The ScheduledJob construct sets the earlier of the gap
   * to the next window and 6 hours.
   * @default 6 hours
   */
  readonly deadlineMs?: number;
  /**
   * Consecutive runs of a window that end with work left and nothing achieved before it is STUCK.
   * @default 3
   */
  readonly maxRunsWithoutProgress?: number;
  /** How refused effects are retried. @default 5 attempts, 1, 4, 16 and 64 minutes apart */
  readonly effectRetry?: EffectRetryPolicy;
  /**
   * A lease is taken over only once it ended this long ago by the claimer's clock. Two runs can
   * overlap only when one's clock is faster than the other's by more than this plus the lease's
   * safety margin (12 s with the defaults); the effect ledger still sends nobody twice then. Lambda's
   * clocks are synchronised (Amazon Time Sync) to well under a second, so the default is small; a
   * larger allowance delays every takeover of a crashed run by as much.
   * @default 2_000, or the lease's safety margin (a sixth of it) when that is shorter
   */
  readonly takeoverSkewMs?: number;
  /**
   * Shards a new window of this job is split into: each is its own fenced sub-claim, run by its own
   * invocation, in parallel. The count is stored on the window's record by its first claim, so a
   * changed setting never re-splits an open window. More than 1 needs `fanOut` (the work queue).
   * @default 1
   */
  readonly shards?: number;
  /**
   * Each effect worker reserves its next effect while its current one is being performed, so the
   * reservation's round trip hides behind the send before it. A crash then leaves up to one more
   * effect per worker reserved and never performed: reported in doubt (or settled as never accepted
   * from the provider's word, where that is recorded). docs/design.md, "Reserving ahead".
   * @default false
   */
  readonly reserveAhead?: boolean;
  /**
   * Consecutive failures of one kind (a refusal reason, or an unknown error) that stop a run: the
   * provider is failing, and asking it 12,400 times helps nobody.
   * @default 10
   */
  readonly failureStreakLimit?: number;
}

/** Why a run stopped with work left. */
export type YieldReason = Exclude<StopReason, 'lease-lost'> | 'retry-wait';

/** What one delivery of a window came to. */
export type RunResult =
  /** The window finished: DONE, or PARTIAL with permanent failures. */
  | {
      readonly status: 'completed';
      readonly state: 'DONE' | 'PARTIAL';
      readonly epoch: number;
      readonly summary: RunSummary;
      readonly window: WindowSummary;
    }
  /** The window was split: one message per shard went out, and the shards run it from here. */
  | { readonly status: 'sharded'; readonly epoch: number; readonly shards: number }
  /** Another holder has the slot, or it is finished, failed, stuck or waiting: this fire stood down. */
  | { readonly status: 'duplicate'; readonly outcome: Exclude<ClaimOutcome, { kind: 'claimed' }> }
  /**
   * Stopped with work left and released the slot: a continuation resumes it, at once or (waiting
   * for refused effects' retries, or after a failing provider) not before `resumeAfter`.
   */
  | {
      readonly status: 'yielded';
      readonly epoch: number;
      readonly summary: RunSummary;
      readonly reason: YieldReason;
      readonly resumeAfter?: number;
    }
  /** Continuation gave up (no progress in N runs, or past the deadline): STUCK, paged. */
  | {
      readonly status: 'stuck';
      readonly epoch: number;
      readonly summary: RunSummary;
      readonly reason: string;
    }
  /**
   * Our lease ran out by our own clock before a renewal succeeded; what we still held was given
   * back (`released`), so the next run need not wait for the lease to end.
   */
  | {
      readonly status: 'lease-lost';
      readonly epoch: number;
      readonly summary: RunSummary;
      readonly released: boolean;
    }
  /** Another holder took the window over (a renewal, reservation, checkpoint or completion was rejected). */
  | { readonly status: 'fenced'; readonly epoch: number; readonly summary: RunSummary }
  /** The job threw; the slot was released for a retry, or marked FAILED after maxAttempts. */
  | {
      readonly status: 'failed';
      readonly epoch: number;
      readonly summary: RunSummary;
      readonly error: unknown;
      /** What the slot is now: RELEASED for a retry, FAILED for good, or fenced (taken over meanwhile). */
      readonly slotState: 'RELEASED' | 'FAILED' | 'fenced';
    };

/** What `runSlot` runs: the job, its backend, clock, metrics and log, for one slot and delivery. */
/** One shard of a sharded window, as its message names it: which, of how many, and what the window pinned. */
export interface ShardAssignment {
  readonly index: number;
  readonly count: number;
  /** The window's effect-key version: every shard hashes with it, so a key lands in one shard. */
  readonly keyVersion?: string;
  /** The window's deadline (epoch ms): every shard is held to it. */
  readonly deadline?: number;
}

/** What a sharded window's coordinator hands out: one message per shard. */
export interface ShardPlan {
  readonly shards: number;
  readonly keyVersion?: string;
  readonly deadline: number;
}

export interface RunSlotArgs {
  readonly job: JobDefinition;
  readonly backend: SlotBackend;
  readonly clock: Clock;
  readonly metrics: JobMetrics;
  readonly log: Log;
  /** The window, or (with `shard`) the window whose shard this run is. */
  readonly slot: Slot;
  /** This run is one shard of a sharded window. @default the window itself */
  readonly shard?: ShardAssignment;
  /**
   * Sends one message per shard of a window being split (the work queue). Required for a job with
   * more than one shard. If it throws, the window is given back and `runSlot` throws its error.
   */
  readonly fanOut?: (plan: ShardPlan) => Promise<void>;
  readonly delivery: Delivery;
  readonly payload?: unknown;
  readonly options?: RunOptions;
  /** Milliseconds left in this invocation (Lambda's getRemainingTimeInMillis). @default unbounded */
  readonly remainingTimeMs?: () => number;
  /** Called once the slot is claimed (the SQS engine's first visibility heartbeat). */
  readonly onClaimed?: (claim: Claim) => void;
  /**
   * The effect-key versions: a new window is pinned to the current one, and every run of a window
   * hashes with the version it was pinned to.
   * @default none: every window hashes with `backend.hashKey`
   */
  readonly keyRing?: EffectKeyRing;
  /** Called after each successful lease renewal (the SQS engine keeps its message invisible with it). */
  readonly onLeaseRenewed?: (leaseEndsAt: number) => void;
}

type ResolvedRunOptions = ReturnType<typeof resolveRunOptions>;

/**
 * Claims the slot, keeps its lease, runs the job with guarded effects, and then completes the
 * window, releases it for a continuation, or gives up on it (STUCK). Every outcome is a value; it
 * throws only for a configuration that cannot work (before any claim), a store failure it cannot
 * classify, or a split window whose shard messages could not all be sent (after giving it back).
 */
export async function runSlot(input: RunSlotArgs): Promise<RunResult> {
  // Configuration first: a value that cannot work must never cost a window one of its attempts.
  const o = resolveRunOptions(input.options);
  const shard = input.shard;
  if (shard) assertShard(shard.index, shard.count);
  if (o.shards > 1 && !input.fanOut && !shard) {
    throw new ConfigurationError(
      'shards',
      `job '${input.slot.jobId}' is set to ${o.shards} shards but this invocation has no work queue to send them to; ` +
        'deploy through ScheduledJob (which gives each job its queue) or set shards to 1',
    );
  }
  // From here on `slot` (and args.slot) is the slot this run claims: the window, or one of its shards.
  const slot = canonicalSlot(
    shard ? { ...windowSlot(input.slot), shard: shard.index } : windowSlot(input.slot),
  );
  const args: RunSlotArgs = { ...input, slot };
  const { job, backend, clock, metrics, log, delivery } = args;
  const windowMs = Date.parse(slot.window);
  const now = clock.now();
  assertWindowClaimable(slot, windowMs, now, o.retentionDays);

  const owner = `${(delivery.invocationId ?? 'local').slice(0, 64)}/${randomUUID()}`;
  const claimSentAt = now;
  const outcome = await backend.claims.claim(
    slot,
    {
      owner,
      leaseMs: o.leaseMs,
      safetyMarginMs: o.leaseSafetyMarginMs,
      maxAttempts: o.maxAttempts,
      expiresAtSeconds: Math.ceil((windowMs + o.retentionDays * DAY_MS) / 1000),
      // From the scheduled time, or from now for a window first claimed late (a backfill): its
      // record keeps the first claim's deadline, so continuations cannot move it.
      // A shard is held to its window's deadline and key version, as the window's claim pinned them.
      deadline: shard?.deadline ?? Math.max(windowMs, now) + o.deadlineMs,
      takeoverSkewMs: o.takeoverSkewMs,
      ...(shard?.keyVersion !== undefined
        ? { keyVersion: shard.keyVersion }
        : args.keyRing
          ? { keyVersion: args.keyRing.current }
          : {}),
      ...(shard ? {} : { shards: o.shards }),
      delivery,
    },
    claimSentAt,
  );
  if (outcome.kind !== 'claimed') {
    // A continuation arriving before its window's retry time, or after it finished, is the engine
    // working as designed; only a fire of the schedule that finds its slot taken is a duplicate.
    if (outcome.kind !== 'waiting' && !delivery.continuation) metrics.count(MetricName.DuplicateClaim);
    log.info('slot not claimed: this delivery stands down', {
      window: slot.window,
      outcome: describeOutcome(outcome),
      ...delivery,
    });
    // A shard found at its end (a retried message after a crash) makes sure its window heard of it.
    if (slot.shard !== undefined && isShardEnd(outcome)) await shardEnded(args, slot);
    // A SHARDED window's message, back after its coordinator died, records the shards that ended.
    if (outcome.kind === 'sharded') await recordEndedShards(args, outcome.shards, outcome.finished);
    return { status: 'duplicate', outcome };
  }
  const claim = outcome.claim;
  metrics.count(MetricName.ClaimAcquired);
  if (claim.via === 'takeover') {
    metrics.count(MetricName.LeaseTakeover);
    log.warn('took over a slot whose lease had expired', {
      window: slot.window,
      epoch: claim.epoch,
      previousHolder: outcome.previousHolder,
    });
  }
  log.info('slot claimed', {
    window: slot.window,
    epoch: claim.epoch,
    via: claim.via,
    deadline: new Date(claim.window.deadline).toISOString(),
    resumeFrom: claim.window.checkpoint,
    ...delivery,
  });
  args.onClaimed?.(claim);
  // Emitted now, not when the run ends: a long fan-out would otherwise hold it back for up to the
  // Lambda's 15 minutes.
  await metrics.flush();

  // A window split into shards is not walked here: its coordinator hands it to one message per shard.
  const shards = claim.window.shards ?? 1;
  if (slot.shard === undefined && shards > 1) return splitWindow(args, claim, shards);

  // The window hashes with the key version its first claim pinned, whatever is current now.
  let hashKey: EffectKeyHasher;
  try {
    hashKey = await windowHasher(args, claim);
  } catch (error) {
    return keyUnavailable(args, o, claim, error);
  }

  const lease = new LeaseKeeper({
    store: backend.claims,
    clock,
    claim,
    claimSentAt,
    leaseMs: o.leaseMs,
    renewEveryMs: o.renewEveryMs,
    safetyMarginMs: o.leaseSafetyMarginMs,
    ...(args.onLeaseRenewed ? { onRenewed: args.onLeaseRenewed } : {}),
    onLost: (error) => {
      metrics.count(MetricName.LeaseLost);
      log.warn('lease lost: reserving no further effect', {
        window: slot.window,
        epoch: claim.epoch,
        loss: error.loss,
        reason: error.message,
      });
    },
  });
  const remaining = args.remainingTimeMs;
  // A fixed 30 s margin would stop a short invocation before its first effect, and every run of
  // the window would then make no progress until it went STUCK.
  const stopMarginMs =
    args.options?.stopMarginMs ??
    (remaining ? Math.min(o.stopMarginMs, Math.floor(remaining() / 4)) : o.stopMarginMs);
  // Sends already reserved can queue behind the send rate longer than the margin (16 workers at one
  // email a second need 16 s). With half the margin left their waits are cancelled: the invocation
  // ends before Lambda stops it, and each is put back due at once (nothing was sent) instead of
  // left reserved, in doubt. A send already under way is not cancelled (see EmailSender).
  const sendsCut = remaining ? cutSendsAt(clock, remaining() - stopMarginMs / 2) : undefined;
  let checkpointer: Checkpointer | undefined;
  const marks = new RunMarks();
  const effects = new EffectRunner({
    claim,
    ledger: backend.ledger,
    hashKey,
    metrics,
    clock,
    signal: lease.signal,
    ...(sendsCut ? { effectSignal: AbortSignal.any([lease.signal, sendsCut.signal]) } : {}),
    mayReserve: () => {
      if (!lease.canReserve()) return 'lease-lost';
      // `<= 0` too: a margin scaled down to nothing must not let a run with no time left start.
      if (remaining && (remaining() <= 0 || remaining() < stopMarginMs)) return 'time';
      return undefined;
    },
    inDoubtPolicy: o.inDoubtPolicy,
    retry: o.effectRetry,
    failureStreakLimit: o.failureStreakLimit,
    marks,
    onEffectError: (keyHash, error) =>
      log.warn('effect did not complete', {
        window: slot.window,
        effect: keyHash,
        error: safeErrorText(error),
      }),
    onPerformed: () => checkpointer?.performed(),
  });
  checkpointer = new Checkpointer({
    store: backend.claims,
    claim,
    clock,
    marks,
    everyPerformed: o.markBatchSize,
    performedWithinMs: o.markFlushMs,
    progress: () => effects.summary(),
    onFenced: (message) => lease.fence(message),
    markEach: async (keyHashes) => {
      if (keyHashes.length > 0) await backend.ledger.markDone(claim, keyHashes);
    },
    onWriteFailed: (error, unrecorded) =>
      log.warn('checkpoint not written: performed effects not on record yet', {
        window: slot.window,
        unrecorded,
        error: safeErrorText(error),
      }),
  });
  const run: RunState = { args, o, claim, lease, effects, checkpointer };

  if (now > claim.window.deadline) {
    // Past its deadline: no more continuing. Nothing is walked; what is on record decides.
    lease.stop();
    sendsCut?.cancel();
    return finishPastDeadline(run);
  }
  let jobError: unknown;
  try {
    await job.run(jobContext(run));
  } catch (error) {
    jobError = error;
  }
  // A job's own stray work (a `once` it did not await) reserves nothing once the run is finishing.
  effects.close();
  sendsCut?.cancel();
  await checkpointer.stop();
  lease.stop();
  return finish(run, jobError);
}

/** A signal that aborts `inMs` from now on `clock` (at once if that is not ahead), and its cancel. */
function cutSendsAt(clock: Clock, inMs: number): { readonly signal: AbortSignal; cancel(): void } {
  const controller = new AbortController();
  const cut = () => controller.abort(new Error('the invocation is nearly out of time'));
  if (inMs <= 0) cut();
  const cancel = inMs > 0 ? clock.schedule(inMs, cut) : () => {};
  return { signal: controller.signal, cancel };
}

/**
 * The coordinator of a sharded window: sends one message per shard (each carries the window's
 * deadline and key version), then marks the window SHARDED, which hands it to its shards: from then
 * on each shard's message keeps its shard alive, and the last shard to end finishes the window. A
 * crash before SHARDED leaves the window RUNNING: the takeover sends the shard messages again, and
 * a shard claimed twice runs once (each shard is its own fenced slot).
 */
async function splitWindow(args: RunSlotArgs, claim: Claim, shards: number): Promise<RunResult> {
  const { backend, clock, log, slot } = args;
  const summary = emptySummary(claim.epoch);
  const fanOut = args.fanOut;
  try {
    if (!fanOut) {
      throw new ConfigurationError(
        'shards',
        `window ${slot.window} of job '${slot.jobId}' is split into ${shards} shards, but this invocation has no ` +
          'work queue to send them to; run it through its work queue',
      );
    }
    await fanOut({
      shards,
      deadline: claim.window.deadline,
      ...(claim.window.keyVersion !== undefined ? { keyVersion: claim.window.keyVersion } : {}),
    });
  } catch (error) {
    // Some shards' messages may be out, and those shards run; the window is not SHARDED, so it is
    // given back, like a run that made no progress, and the run fails: the queue or its grant is
    // broken, which must count as an error (and back off), not pass as a yield. The retry claims
    // the window again and sends every shard's message; a shard sent twice still runs once.
    const noProgress = claim.window.runsWithoutProgress + 1;
    await backend.claims.release(claim, { kind: 'yield', runsWithoutProgress: noProgress }, clock.now());
    log.error('could not send the shards of a window; slot released for a retry', {
      window: slot.window,
      shards,
      error: safeErrorText(error),
    });
    throw error;
  }
  const handed = await backend.claims.release(claim, { kind: 'sharded', shards }, clock.now());
  // Still our grant, but no longer RUNNING: our mark landed (its reply was lost) and the shards may
  // have finished the window before the retry saw it. Only a takeover fences a coordinator.
  const ours = handed.kind === 'fenced' && handed.holder === claim.owner && handed.epoch === claim.epoch;
  if (handed.kind === 'fenced' && !ours) return { status: 'fenced', epoch: claim.epoch, summary };
  log.info('window split: its shards run it', { window: slot.window, shards, epoch: claim.epoch });
  await recordEndedShards(args, shards, []);
  return { status: 'sharded', epoch: claim.epoch, shards };
}

/** A shard's claim outcome that says the shard has reached its end. */
function isShardEnd(outcome: ClaimOutcome): boolean {
  return outcome.kind === 'done' || outcome.kind === 'stuck' || outcome.kind === 'failed';
}

/**
 * A shard reached its end: record it on its window, and if it was the last, finish the window.
 * Idempotent: a retried shard message repeats it harmlessly. A window not SHARDED yet (its
 * coordinator is still sending) refuses the record; the coordinator makes up for it.
 */
async function shardEnded(args: RunSlotArgs, shardSlot: Slot): Promise<void> {
  const window = windowSlot(shardSlot);
  const sharded = await args.backend.claims.shardFinished(window, shardSlot.shard ?? 0);
  if (sharded && sharded.finished.length >= sharded.shards) await finishSplitWindow(args, sharded.shards);
}

/**
 * Records on a SHARDED window the end of every shard whose record says it ended but which is not
 * listed as finished, and finishes the window when none is left. A shard that ended before its
 * window was SHARDED (it ran while its coordinator was still sending the other messages, or before
 * a takeover's coordinator had marked it) could not record itself, and its message is gone: its
 * record was written before the SHARDED mark, so a read after the mark finds it, and a shard that
 * ends later records itself. Run by the coordinator once it has marked the window, and by any
 * later delivery of the window that finds it SHARDED (the coordinator may have died in between).
 */
async function recordEndedShards(
  args: RunSlotArgs,
  shards: number,
  finished: readonly number[],
): Promise<void> {
  const { backend, slot } = args;
  const unrecorded = Array.from({ length: shards }, (_, index) => index).filter((i) => !finished.includes(i));
  const records = await Promise.all(unrecorded.map((shard) => backend.claims.read({ ...slot, shard })));
  let listed = finished.length;
  for (const [i, record] of records.entries()) {
    if (!isShardEndState(record?.state)) continue;
    const sharded = await backend.claims.shardFinished(slot, unrecorded[i] ?? 0);
    // Finished meanwhile (or reopened): nothing of this window is left to record.
    if (!sharded) return;
    listed = sharded.finished.length;
  }
  if (listed >= shards) await finishSplitWindow(args, shards);
}

/** A shard record's state that says the shard has reached its end. */
function isShardEndState(state: SlotState | undefined): boolean {
  return (
    state === SlotState.Done ||
    state === SlotState.Partial ||
    state === SlotState.Stuck ||
    state === SlotState.Failed
  );
}

/**
 * Finishes a window every shard of which has ended: STUCK when a shard is STUCK or FAILED (naming
 * it), else DONE or PARTIAL counted from the window's whole ledger, which every shard wrote to. Two
 * shards ending at once may both get here; the store lets exactly one finish the window.
 */
async function finishSplitWindow(args: RunSlotArgs, shards: number): Promise<void> {
  const { backend, clock, metrics, log } = args;
  const window = windowSlot(args.slot);
  const records = await Promise.all(
    Array.from({ length: shards }, (_, index) => backend.claims.read({ ...window, shard: index })),
  );
  // The set says every shard ended once; the records must say so now. A shard given back since
  // (RELEASED) or running again is not finished: its own end adds it to the set again and retries this.
  const reopened = records.findIndex((r) => r != null && !isShardEndState(r.state));
  if (reopened >= 0) {
    log.info('every shard reported in, but one is running again: the window waits for it', {
      window: window.window,
      shard: reopened,
      state: records[reopened]?.state,
    });
    return;
  }
  const unfinished = records.findIndex((r) => r?.state === 'STUCK' || r?.state === 'FAILED' || !r);
  const runs = records.reduce((n, r) => n + (r?.epoch ?? 0), 0);
  const now = clock.now();
  const finish: WindowFinish =
    unfinished >= 0
      ? {
          kind: 'stuck',
          reason: `shard ${unfinished} of ${shards} ended ${records[unfinished]?.state ?? 'without a record'}: ${
            records[unfinished]?.lastError ?? ''
          }`,
        }
      : { kind: 'complete', summary: windowSummary(await tallyWindow(backend.ledger, window, now), runs) };
  const finished = await backend.claims.finishSharded(window, finish, now);
  if (finished !== 'ok') return;
  if (finish.kind === 'stuck') {
    metrics.count(MetricName.WindowStuck);
    log.error('sharded window STUCK: one of its shards could not finish', {
      window: window.window,
      reason: finish.reason,
    });
  } else {
    log.info('sharded window completed by its last shard', {
      window: window.window,
      state: finish.summary.failed > 0 ? 'PARTIAL' : 'DONE',
      totals: finish.summary,
    });
  }
}

/** The hasher of the key version the window is pinned to (the backend's own when there is no ring). */
async function windowHasher(args: RunSlotArgs, claim: Claim): Promise<EffectKeyHasher> {
  const ring = args.keyRing;
  if (!ring) return args.backend.hashKey;
  return ring.hasher(claim.window.keyVersion ?? ring.current);
}

/**
 * The window's key version cannot be read. Never run with another key: its done effects would look
 * new. A version that is gone for good (a ConfigurationError) makes the window STUCK at once, for
 * an operator; a failed read (Secrets Manager throttling) gives the slot back like a run that made
 * no progress, STUCK after `maxRunsWithoutProgress` of them.
 */
async function keyUnavailable(
  args: RunSlotArgs,
  o: ResolvedRunOptions,
  claim: Claim,
  error: unknown,
): Promise<RunResult> {
  const { backend, clock, metrics, log, slot } = args;
  const summary = emptySummary(claim.epoch);
  const noProgress = claim.window.runsWithoutProgress + 1;
  const stuck = error instanceof ConfigurationError || noProgress >= o.maxRunsWithoutProgress;
  const reason = `effect-key version ${claim.window.keyVersion ?? '(current)'} unavailable: ${safeErrorText(error)}`;
  const retryAt = clock.now() + o.effectRetry.firstDelayMs;
  const released = await backend.claims.release(
    claim,
    stuck
      ? { kind: 'stuck', reason, runsWithoutProgress: noProgress }
      : {
          kind: 'yield',
          runsWithoutProgress: noProgress,
          resumeAfter: clock.now() + o.effectRetry.firstDelayMs,
        },
    clock.now(),
  );
  if (released.kind === 'fenced') return { status: 'fenced', epoch: claim.epoch, summary };
  log.error(
    stuck
      ? 'window STUCK: its effect-key version cannot be read'
      : 'effect-key version unreadable; slot released',
    {
      window: slot.window,
      epoch: claim.epoch,
      reason,
    },
  );
  if (!stuck) {
    metrics.count(MetricName.RunYielded);
    return { status: 'yielded', epoch: claim.epoch, summary, reason: 'store-error', resumeAfter: retryAt };
  }
  metrics.count(MetricName.WindowStuck);
  return { status: 'stuck', epoch: claim.epoch, summary, reason };
}

function emptySummary(epoch: number): RunSummary {
  return { done: 0, skipped: 0, inDoubt: 0, failed: 0, retrying: 0, inDoubtKeys: [], failedKeys: [], epoch };
}

/** Everything a run's finish needs. */
interface RunState {
  readonly args: RunSlotArgs;
  readonly o: ResolvedRunOptions;
  readonly claim: Claim;
  readonly lease: LeaseKeeper;
  readonly effects: EffectRunner;
  readonly checkpointer: Checkpointer;
}

async function finish(run: RunState, jobError: unknown): Promise<RunResult> {
  const { args, claim, lease, effects, checkpointer } = run;
  const { backend, clock, log, slot } = args;
  const summary = effects.summary();
  const context = { window: slot.window, ...summary, inDoubtKeys: undefined, failedKeys: undefined };
  if (lease.signal.aborted || effects.stopReason === 'lease-lost') {
    if (lease.loss !== 'expired') {
      log.warn('run ended fenced: a later epoch holds the window', {
        ...context,
        notAttempted: effects.notAttempted,
      });
      return { status: 'fenced', epoch: claim.epoch, summary };
    }
    // Our renewals were too slow, not overtaken: the slot may still be RUNNING at our epoch. Give it
    // back (fenced on owner and epoch, so a takeover that came first is left alone) rather than make
    // the next run wait out a lease nobody is using.
    const released = await releaseQuietly(
      backend.claims,
      claim,
      {
        kind: 'yield',
        checkpoint: checkpointer.current(),
        runsWithoutProgress: runsWithoutProgress(run, 'store-error'),
      },
      clock.now(),
    );
    log.warn('run ended without its lease: released what it still held', {
      ...context,
      released: released === 'ok',
      notAttempted: effects.notAttempted,
    });
    if (released === 'fenced') return { status: 'fenced', epoch: claim.epoch, summary };
    return { status: 'lease-lost', epoch: claim.epoch, summary, released: released === 'ok' };
  }
  if (jobError !== undefined) {
    const released = await backend.claims.release(
      claim,
      { kind: 'error', message: safeErrorText(jobError) },
      clock.now(),
    );
    const after = released.kind === 'fenced' ? 'fenced' : await stateAfterFailure(backend.claims, slot);
    log.error(
      after === 'FAILED'
        ? `job failed on its last allowed attempt (${run.o.maxAttempts}); the slot is FAILED until an operator acts`
        : after === 'fenced'
          ? 'job failed; a later epoch had already taken the slot over'
          : 'job failed; slot released for a retry',
      { ...context, error: safeErrorText(jobError), slotState: after },
    );
    if (after === 'FAILED' && slot.shard !== undefined) await shardEnded(args, slot);
    return { status: 'failed', epoch: claim.epoch, summary, error: jobError, slotState: after };
  }
  const stopReason = effects.stopReason;
  if (stopReason) return yieldOrGiveUp(run, stopReason);
  checkpointer.markWalked();
  return finishWalked(run);
}

/** The run stopped with work left: release for a continuation, or give up (STUCK) when it must. */
async function yieldOrGiveUp(run: RunState, reason: Exclude<StopReason, 'lease-lost'>): Promise<RunResult> {
  const { args, o, claim, effects, checkpointer } = run;
  const { backend, clock, metrics, log, slot } = args;
  const summary = effects.summary();
  const now = clock.now();
  const noProgress = runsWithoutProgress(run, reason);
  const checkpoint = checkpointer.current();
  if (now > claim.window.deadline && !checkpoint.walked) {
    return giveUp(
      run,
      `the window's deadline ${new Date(claim.window.deadline).toISOString()} passed with work left`,
      noProgress,
    );
  }
  if (now > claim.window.deadline) return finishWalked(run);
  if (noProgress >= o.maxRunsWithoutProgress) {
    return giveUp(
      run,
      `no progress in ${noProgress} consecutive runs (the last stopped: ${reason})`,
      noProgress,
    );
  }
  // A provider failing everything is not asked again at once: the next run waits a retry delay.
  const resumeAfter = reason === 'provider-failing' ? now + o.effectRetry.firstDelayMs : undefined;
  const released = await backend.claims.release(
    claim,
    { kind: 'yield', checkpoint, runsWithoutProgress: noProgress, ...(resumeAfter ? { resumeAfter } : {}) },
    now,
  );
  if (released.kind === 'fenced') return { status: 'fenced', epoch: claim.epoch, summary };
  metrics.count(MetricName.RunYielded);
  if (reason === 'provider-failing') metrics.count(MetricName.ProviderFailing);
  log.warn('run stopped with work left; slot released for a continuation', {
    window: slot.window,
    ...summary,
    reason,
    notAttempted: effects.notAttempted,
    runsWithoutProgress: noProgress,
    ...(resumeAfter ? { resumeAfter: new Date(resumeAfter).toISOString() } : {}),
  });
  return {
    status: 'yielded',
    epoch: claim.epoch,
    summary,
    reason,
    ...(resumeAfter ? { resumeAfter } : {}),
  };
}

/**
 * The job's walk is over (this run's, or an earlier one's): count the window's records. Refused
 * effects still waiting for a retry keep it open until their retry time; past the deadline they
 * count as failed, and the window finishes PARTIAL.
 */
async function finishWalked(run: RunState): Promise<RunResult> {
  const { args, claim, effects, checkpointer } = run;
  const { backend, clock, metrics, log, slot } = args;
  const summary = effects.summary();
  const now = clock.now();
  const { tally, resolved } = await tallyResolved(run, now);
  const deadline = claim.window.deadline;
  // Effects in doubt whose provider has not spoken yet hold the window open until their grace ends.
  const awaitingWordUntil = resolved.awaiting > 0 ? resolved.lookAgainAt : undefined;
  if ((tally.waiting > 0 || awaitingWordUntil !== undefined) && now <= deadline) {
    // Not before the earliest retry or look for a word; at the deadline at the latest, where the
    // window finishes.
    const wake = Math.min(
      tally.waiting > 0 ? (tally.earliestRetryAt ?? now) : Number.POSITIVE_INFINITY,
      awaitingWordUntil ?? Number.POSITIVE_INFINITY,
    );
    const resumeAfter = Math.min(Math.max(wake, now), deadline + 1);
    const released = await backend.claims.release(
      claim,
      {
        kind: 'yield',
        checkpoint: checkpointer.current(),
        // Waiting for a retry is not a run without progress; but a run that achieved something
        // breaks the streak, or the next runs' faults could declare a moving window STUCK.
        runsWithoutProgress: madeProgress(run) ? 0 : claim.window.runsWithoutProgress,
        resumeAfter,
      },
      now,
    );
    if (released.kind === 'fenced') return { status: 'fenced', epoch: claim.epoch, summary };
    metrics.count(MetricName.RunYielded);
    log.info(
      tally.waiting > 0
        ? 'walk finished; refused effects wait for their retry'
        : "walk finished; effects in doubt wait for the provider's word",
      {
        window: slot.window,
        ...summary,
        waiting: tally.waiting,
        awaitingWord: resolved.awaiting,
        resumeAfter: new Date(resumeAfter).toISOString(),
      },
    );
    return { status: 'yielded', epoch: claim.epoch, summary, reason: 'retry-wait', resumeAfter };
  }
  const window = windowSummary(tally, claim.epoch);
  const completed = await backend.claims.complete(claim, window, now);
  if (completed.kind === 'ok' && slot.shard !== undefined) await shardEnded(args, slot);
  if (completed.kind === 'fenced') {
    log.error('completion rejected: a later epoch owns this slot', {
      window: slot.window,
      ...summary,
      currentEpoch: completed.epoch,
      currentState: completed.state,
    });
    return { status: 'fenced', epoch: claim.epoch, summary };
  }
  const state = window.failed > 0 ? 'PARTIAL' : 'DONE';
  if (tally.waiting > 0) {
    // Their retry did not come before the deadline: counted failed now, and paged as such.
    metrics.count(MetricName.EffectFailed, tally.waiting);
  }
  // What no word and no grace period could settle: a person decides (it pages).
  if (tally.inDoubt > 0) metrics.count(MetricName.EffectInDoubt, tally.inDoubt);
  const fields = { window: slot.window, state, run: { ...summary }, totals: window };
  if (state === 'PARTIAL') log.error('window finished with effects that failed for good', fields);
  else log.info('window completed', fields);
  return { status: 'completed', state, epoch: claim.epoch, summary, window };
}

/**
 * Counts the window's (or shard's) records, after settling what the provider's word settles among
 * those in doubt; counted again whenever a pass settled something, so the totals are what is on
 * record. A pass takes at most IN_DOUBT_RECORDS_PER_PASS records, so a huge backlog takes several.
 */
async function tallyResolved(
  run: RunState,
  now: number,
): Promise<{ tally: WindowTally; resolved: ResolutionPass }> {
  const { args, o } = run;
  const { backend, slot, metrics, log } = args;
  let tally = await tallyWindow(backend.ledger, slot, now);
  let resolved: ResolutionPass = { confirmed: 0, rejected: 0, resent: 0, awaiting: 0 };
  while (tally.inDoubtRecords.length > 0) {
    const pass = await resolveInDoubt({
      ledger: backend.ledger,
      slot,
      inDoubt: tally.inDoubtRecords,
      resolution: o.inDoubtResolution,
      now,
      metrics,
      log,
    });
    resolved = {
      ...pass,
      confirmed: resolved.confirmed + pass.confirmed,
      rejected: resolved.rejected + pass.rejected,
      resent: resolved.resent + pass.resent,
    };
    if (pass.confirmed + pass.rejected + pass.resent === 0) break;
    tally = await tallyWindow(backend.ledger, slot, now);
  }
  return { tally, resolved };
}

/** Claimed after its deadline: finish what only waits for retries, give up on the rest. */
async function finishPastDeadline(run: RunState): Promise<RunResult> {
  if (run.claim.window.checkpoint?.walked) return finishWalked(run);
  return giveUp(
    run,
    `claimed after the window's deadline ${new Date(run.claim.window.deadline).toISOString()} with work left`,
    run.claim.window.runsWithoutProgress,
  );
}

/** Marks the window STUCK: no more continuations, a page, an operator. */
async function giveUp(run: RunState, reason: string, noProgress: number): Promise<RunResult> {
  const { args, claim, effects, checkpointer } = run;
  const { backend, clock, metrics, log, slot } = args;
  const summary = effects.summary();
  const released = await backend.claims.release(
    claim,
    { kind: 'stuck', reason, checkpoint: checkpointer.current(), runsWithoutProgress: noProgress },
    clock.now(),
  );
  if (released.kind === 'fenced') return { status: 'fenced', epoch: claim.epoch, summary };
  if (slot.shard !== undefined) await shardEnded(args, slot);
  metrics.count(MetricName.WindowStuck);
  log.error('window STUCK: continuation stopped, an operator must re-drive it', {
    window: slot.window,
    ...summary,
    inDoubtKeys: undefined,
    failedKeys: undefined,
    reason,
  });
  return { status: 'stuck', epoch: claim.epoch, summary, reason };
}

/**
 * Consecutive runs without progress, this one included. Progress is something durable: an effect
 * performed, a refusal recorded (its retries are bounded), or a checkpoint moved. A run the provider
 * stopped achieved nothing, whatever it recorded.
 */
function runsWithoutProgress(run: RunState, reason: StopReason): number {
  const progressed = reason !== 'provider-failing' && madeProgress(run);
  return progressed ? 0 : run.claim.window.runsWithoutProgress + 1;
}

/** True when the run did something durable: an effect performed, a refusal recorded, a checkpoint moved. */
function madeProgress(run: RunState): boolean {
  const { effects, checkpointer } = run;
  return effects.summary().done > 0 || effects.failuresRecorded > 0 || checkpointer.moved;
}

async function releaseQuietly(
  store: ClaimStore,
  claim: Claim,
  reason: Parameters<ClaimStore['release']>[1],
  now: number,
): Promise<FinishOutcome['kind'] | 'unreachable'> {
  try {
    return (await store.release(claim, reason, now)).kind;
  } catch {
    // The store that made us lose the lease may still be failing: the lease then runs out by itself.
    return 'unreachable';
  }
}

async function stateAfterFailure(store: ClaimStore, slot: Slot): Promise<'RELEASED' | 'FAILED'> {
  const record = await store.read(slot).catch(() => undefined);
  return record?.state === 'FAILED' ? 'FAILED' : 'RELEASED';
}

function jobContext(run: RunState): JobContext {
  const { args, claim, lease, effects, o } = run;
  const shard = args.shard ? { index: args.shard.index, count: args.shard.count } : undefined;
  return {
    slot: args.slot,
    scheduledTime: new Date(args.slot.window),
    epoch: claim.epoch,
    delivery: args.delivery,
    signal: lease.signal,
    payload: args.payload,
    log: args.log,
    ...(shard ? { shard } : {}),
    once: (effectKey, effect) => effects.once(effectKey, effect),
    async onceEach(items, options, effect) {
      const concurrency = options.concurrency ?? o.effectConcurrency;
      assertConcurrency(concurrency, 'onceEach concurrency');
      const mine = shard && options.split !== 'source' ? keyHashInShard(shard) : () => true;
      if (!isResumable(items)) {
        await drainEffects(run, items, concurrency, {
          prepare: async (item) => {
            const keyHash = effects.hashOf(options.key(item));
            return mine(keyHash) ? effects.reserveHashed(keyHash) : passedBy;
          },
          finish: (item, step) => step((signal) => effect(item, signal)),
        });
        return;
      }
      await walkResumable(run, items, options.key, concurrency, effect, mine);
    },
  };
}

/** The step of an effect that is not this run's (another shard's key). */
const passedBy = settledStep('passed');

/**
 * Drains items through the runner, one reservation ahead per worker when the run reserves ahead
 * (RunOptions.reserveAhead): the next effect is reserved while the current one is performed.
 */
function drainEffects<T, P>(
  run: RunState,
  items: AsyncIterable<T> | Iterable<T>,
  concurrency: number,
  steps: TwoStep<T, P>,
): Promise<void> {
  const stop = () => run.effects.stopping();
  if (run.o.reserveAhead) return drainAhead(items, concurrency, steps, stop);
  return drainConcurrently(
    items,
    concurrency,
    async (item) => steps.finish(item, await steps.prepare(item)),
    stop,
  );
}

/**
 * Walks a resumable source from the checkpoint, checkpointing as effects settle; then, if the walk
 * began part-way (a continuation), goes back over the source once for refused effects now due for
 * their retry, which a walk from the checkpoint never meets. The retry pass writes no checkpoint.
 */
async function walkResumable<T>(
  run: RunState,
  source: ResumableSource<T>,
  key: (item: T) => string,
  concurrency: number,
  effect: (item: T, signal: AbortSignal) => Promise<void>,
  mine: (keyHash: string | undefined) => boolean,
): Promise<void> {
  const { effects, checkpointer, args } = run;
  const name = sourceName(source);
  const start = checkpointer.startOf(name);
  const watermark = new WalkWatermark(start);
  checkpointer.track(name, watermark);
  await drainEffects(run, source.read(start), concurrency, {
    prepare: async (item) => {
      // Pulled in order: the watermark numbers items as the source yields them.
      const seq = watermark.pulled(source.position(item));
      const keyHash = effects.hashOf(key(item));
      return { seq, keyHash, step: mine(keyHash) ? await effects.reserveHashed(keyHash) : passedBy };
    },
    finish: async (item, { seq, keyHash, step }) => {
      const result = await step((signal) => effect(item, signal));
      watermark.settled(seq, keyHash, result);
      checkpointer.settled();
    },
  });
  if (start === undefined || effects.stopping()) return;
  let due: ReadonlySet<string>;
  try {
    ({ due } = await tallyWindow(args.backend.ledger, args.slot, args.clock.now()));
  } catch (error) {
    // The store failing this read costs the retry pass, as a failed reservation would: the run
    // yields (store-error) rather than failing the job, which would count toward maxAttempts.
    if (!(error instanceof StoreError)) throw error;
    effects.stop('store-error');
    return;
  }
  if (due.size === 0) return;
  args.log.info('retrying refused effects that are due', { window: args.slot.window, due: due.size });
  effects.restrictTo(due);
  try {
    await drainConcurrently(
      source.read(undefined),
      concurrency,
      (item) => effects.once(key(item), (signal) => effect(item, signal)),
      () => effects.stopping(),
    );
  } finally {
    effects.restrictTo(undefined);
  }
}

/** Whether a key, by its hash, is this shard's (an unusable key, with no hash, is shard 0's to report). */
function keyHashInShard(shard: ShardOfWindow): (keyHash: string | undefined) => boolean {
  return (keyHash) => (keyHash === undefined ? 0 : shardOfKeyHash(keyHash, shard.count)) === shard.index;
}

/** Fills in and checks every run option, before anything is claimed; the error names the option. */
export function resolveRunOptions(options: RunOptions = {}) {
  const leaseMs = options.leaseMs ?? JOB_DEFAULTS.leaseSeconds * 1000;
  const resolved = {
    leaseMs,
    renewEveryMs: options.renewEveryMs ?? Math.floor(leaseMs / 3),
    leaseSafetyMarginMs: options.leaseSafetyMarginMs ?? defaultLeaseSafetyMarginMs(leaseMs),
    stopMarginMs: options.stopMarginMs ?? 30_000,
    effectConcurrency: options.effectConcurrency ?? JOB_DEFAULTS.effectConcurrency,
    maxAttempts: options.maxAttempts ?? JOB_DEFAULTS.maxAttempts,
    retentionDays: options.retentionDays ?? JOB_DEFAULTS.retentionDays,
    inDoubtPolicy: options.inDoubtPolicy ?? InDoubtPolicy.Report,
    inDoubtResolution: resolveInDoubtResolution(options.inDoubtResolution),
    markBatchSize: options.markBatchSize ?? 25,
    markFlushMs: options.markFlushMs ?? 1_000,
    deadlineMs: options.deadlineMs ?? 6 * HOUR_MS,
    maxRunsWithoutProgress: options.maxRunsWithoutProgress ?? 3,
    effectRetry: { ...DEFAULT_EFFECT_RETRY, ...options.effectRetry },
    failureStreakLimit: options.failureStreakLimit ?? 10,
    takeoverSkewMs: options.takeoverSkewMs ?? defaultTakeoverSkewMs(leaseMs),
    shards: options.shards ?? 1,
    reserveAhead: options.reserveAhead ?? false,
  };
  if (!Number.isFinite(leaseMs) || leaseMs < 1_000) {
    throw new ConfigurationError(
      'leaseMs',
      `leaseMs is ${leaseMs}; use at least 1000 (one second), 60000 suits a Lambda run`,
    );
  }
  if (resolved.renewEveryMs <= 0 || resolved.renewEveryMs >= leaseMs - resolved.leaseSafetyMarginMs) {
    throw new ConfigurationError(
      'renewEveryMs',
      `renewEveryMs is ${resolved.renewEveryMs} for a ${leaseMs} ms lease with a ${resolved.leaseSafetyMarginMs} ms margin; ` +
        'renew well before the lease ends, e.g. every third of it',
    );
  }
  if (!(resolved.retentionDays >= 2)) {
    throw new ConfigurationError(
      'retentionDays',
      `retentionDays is ${resolved.retentionDays}; keep records at least 2 days (the scheduler retries for up to 24 hours)`,
    );
  }
  wholeNumber('maxAttempts', resolved.maxAttempts, 1);
  wholeNumber('shards', resolved.shards, 1);
  if (resolved.shards > MAX_SHARDS) {
    throw new ConfigurationError(
      'shards',
      `shards is ${resolved.shards}; split a window into at most ${MAX_SHARDS}`,
    );
  }
  wholeNumber('maxRunsWithoutProgress', resolved.maxRunsWithoutProgress, 1);
  wholeNumber('failureStreakLimit', resolved.failureStreakLimit, 1);
  wholeNumber('effectRetry.maxAttempts', resolved.effectRetry.maxAttempts, 1);
  assertConcurrency(resolved.effectConcurrency, 'effectConcurrency');
  if (resolved.markBatchSize < 1 || resolved.markBatchSize > 25) {
    throw new ConfigurationError(
      'markBatchSize',
      `markBatchSize is ${resolved.markBatchSize}; use 1 to 25 (a crash leaves up to this many performed effects in doubt)`,
    );
  }
  if (!(resolved.takeoverSkewMs >= 0) || resolved.takeoverSkewMs >= leaseMs) {
    throw new ConfigurationError(
      'takeoverSkewMs',
      `takeoverSkewMs is ${resolved.takeoverSkewMs}; use 0 or more and less than the lease (${leaseMs} ms)`,
    );
  }
  if (!(resolved.deadlineMs >= 60_000)) {
    throw new ConfigurationError(
      'deadlineMs',
      `deadlineMs is ${resolved.deadlineMs}; give a window at least a minute (60000) to finish`,
    );
  }
  if (!(resolved.effectRetry.firstDelayMs >= 0) || !(resolved.effectRetry.backoffRate >= 1)) {
    throw new ConfigurationError(
      'effectRetry',
      `effectRetry is ${JSON.stringify(options.effectRetry)}; use firstDelayMs ≥ 0 and backoffRate ≥ 1`,
    );
  }
  return resolved;
}

function wholeNumber(name: string, value: number, min: number): void {
  if (!Number.isInteger(value) || value < min) {
    throw new ConfigurationError(name, `${name} is ${value}; use a whole number of at least ${min}`);
  }
}

function assertConcurrency(concurrency: number, name: string): void {
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    throw new ConfigurationError(
      name === 'effectConcurrency' ? 'effectConcurrency' : 'concurrency',
      `${name} is ${concurrency}; use a whole number of at least 1`,
    );
  }
}

/**
 * A window can be claimed only while its record is certain to exist if it ran: not older than the
 * retention minus a day (TTL may be reaping it), and not more than a day in the future.
 */
function assertWindowClaimable(slot: Slot, windowMs: number, now: number, retentionDays: number): void {
  if (now - windowMs > (retentionDays - 1) * DAY_MS) {
    throw new InvalidEventError(
      'scheduledTime',
      `window ${slot.window} of job '${slot.jobId}' is older than the ${retentionDays}-day retention minus a day, so ` +
        'whether it already ran can no longer be known; raise retentionDays before backfilling windows this old',
    );
  }
  if (windowMs - now > DAY_MS) {
    throw new InvalidEventError(
      'scheduledTime',
      `window ${slot.window} of job '${slot.jobId}' is more than a day in the future; pass the schedule's own "<aws.scheduler.scheduled-time>"`,
    );
  }
}

function describeOutcome(outcome: Exclude<ClaimOutcome, { kind: 'claimed' }>): Record<string, unknown> {
  switch (outcome.kind) {
    case 'held':
      return {
        kind: 'held',
        holder: outcome.holder,
        epoch: outcome.epoch,
        leaseEndsAt: new Date(outcome.leaseEndsAt).toISOString(),
      };
    case 'done':
      return {
        kind: 'done',
        state: outcome.state,
        completedAt: new Date(outcome.completedAt).toISOString(),
        summary: outcome.summary,
      };
    case 'failed':
      return { kind: 'failed', attempts: outcome.attempts, lastError: outcome.lastError };
    case 'stuck':
      return { kind: 'stuck', epoch: outcome.epoch, reason: outcome.reason };
    case 'waiting':
      return { kind: 'waiting', until: new Date(outcome.until).toISOString() };
    case 'sharded':
      return { kind: 'sharded', shards: outcome.shards, finished: outcome.finished };
    default:
      return outcome satisfies never;
  }
}
