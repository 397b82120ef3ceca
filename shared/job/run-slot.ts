import { randomUUID } from 'node:crypto';
import type { Clock } from '../clock.js';
import { drainConcurrently } from '../effects/concurrent-drain.js';
import type { EffectKeyHasher } from '../effects/effect-key.js';
import { EffectRunner, InDoubtPolicy } from '../effects/effect-runner.js';
import { ConfigurationError, InvalidEventError } from '../errors.js';
import type { Claim, ClaimOutcome, ClaimStore, Delivery, EffectLedger, RunSummary } from '../slot/ports.js';
import type { Slot } from '../slot/slot.js';
import type { Log } from '../telemetry/log.js';
import { MetricName } from '../telemetry/metric-names.js';
import type { JobMetrics } from '../telemetry/metrics.js';
import type { JobContext, JobDefinition } from './job-definition.js';
import { JOB_DEFAULTS } from './job-spec.js';
import { LeaseKeeper } from './lease-keeper.js';

const DAY_MS = 86_400_000;

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
   * releases the slot cleanly for the next run to resume.
   * @default 30_000
   */
  readonly stopMarginMs?: number;
  /**
   * Effects performed at once by `onceEach`.
   * @default 16
   */
  readonly effectConcurrency?: number;
  /**
   * Failed runs of a window before its slot is marked FAILED.
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
  /** @default 25 */
  readonly markBatchSize?: number;
  /** @default 1_000 */
  readonly markFlushMs?: number;
}

/** What one delivery of a window came to. */
export type RunResult =
  | { readonly status: 'completed'; readonly epoch: number; readonly summary: RunSummary }
  /** Another holder has the slot, or it is done or failed: this fire stood down. */
  | { readonly status: 'duplicate'; readonly outcome: Exclude<ClaimOutcome, { kind: 'claimed' }> }
  /** Stopped with work left (Lambda time running out, or the store failing) and released the slot; a later run resumes. */
  | {
      readonly status: 'yielded';
      readonly epoch: number;
      readonly summary: RunSummary;
      readonly reason: 'time' | 'store-error';
    }
  /** The lease was lost or the completion was fenced: another holder owns the window now. */
  | { readonly status: 'fenced'; readonly epoch: number; readonly summary: RunSummary }
  /** The job threw; the slot was released for a retry (or marked FAILED after maxAttempts). */
  | {
      readonly status: 'failed';
      readonly epoch: number;
      readonly summary: RunSummary;
      readonly error: unknown;
    };

/** What `runSlot` runs: the job, its backend, clock, metrics and log, for one slot and delivery. */
export interface RunSlotArgs {
  readonly job: JobDefinition;
  readonly backend: SlotBackend;
  readonly clock: Clock;
  readonly metrics: JobMetrics;
  readonly log: Log;
  readonly slot: Slot;
  readonly delivery: Delivery;
  readonly payload?: unknown;
  readonly options?: RunOptions;
  /** Milliseconds left in this invocation (Lambda's getRemainingTimeInMillis). @default unbounded */
  readonly remainingTimeMs?: () => number;
}

/**
 * Claims the slot, keeps its lease, runs the job with guarded effects, and completes or releases
 * the slot. Every outcome is a value; it throws only for a store failure it cannot classify.
 */
export async function runSlot(args: RunSlotArgs): Promise<RunResult> {
  const { job, backend, clock, metrics, log, slot, delivery } = args;
  const o = resolveOptions(args.options);
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
      maxAttempts: o.maxAttempts,
      expiresAtSeconds: Math.ceil((windowMs + o.retentionDays * DAY_MS) / 1000),
      delivery,
    },
    claimSentAt,
  );
  if (outcome.kind !== 'claimed') {
    metrics.count(MetricName.DuplicateClaim);
    log.info('slot not claimed: this fire stands down', {
      window: slot.window,
      outcome: describeOutcome(outcome),
      ...delivery,
    });
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
  log.info('slot claimed', { window: slot.window, epoch: claim.epoch, via: claim.via, ...delivery });
  // Emitted now, not when the run ends: the missed-run alarm waits for ClaimAcquired, and a long
  // fan-out would otherwise hold it back for up to the Lambda's 15 minutes.
  await metrics.flush();

  const lease = new LeaseKeeper({
    store: backend.claims,
    clock,
    claim,
    claimSentAt,
    leaseMs: o.leaseMs,
    renewEveryMs: o.renewEveryMs,
    safetyMarginMs: o.leaseSafetyMarginMs,
    onLost: (error) => {
      metrics.count(MetricName.LeaseLost);
      log.warn('lease lost: reserving no further effect', {
        window: slot.window,
        epoch: claim.epoch,
        reason: error.message,
      });
    },
  });
  const remaining = args.remainingTimeMs;
  const effects = new EffectRunner({
    claim,
    ledger: backend.ledger,
    hashKey: backend.hashKey,
    metrics,
    clock,
    signal: lease.signal,
    mayReserve: () => {
      if (!lease.canReserve()) return 'lease-lost';
      if (remaining && remaining() < o.stopMarginMs) return 'time';
      return undefined;
    },
    inDoubtPolicy: o.inDoubtPolicy,
    markBatchSize: o.markBatchSize,
    markFlushMs: o.markFlushMs,
    onEffectError: (keyHash, error) =>
      log.warn('effect did not complete', { window: slot.window, effect: keyHash, error: errorText(error) }),
  });

  let jobError: unknown;
  try {
    await job.run(jobContext(args, claim, lease.signal, effects, o.effectConcurrency));
  } catch (error) {
    jobError = error;
  }
  // A job's own stray work (a `once` it did not await) reserves nothing once the run is finishing.
  effects.close();
  await effects.settle();
  lease.stop();
  return finish(args, claim, effects, jobError, lease.signal.aborted);
}

async function finish(
  args: RunSlotArgs,
  claim: Claim,
  effects: EffectRunner,
  jobError: unknown,
  leaseLost: boolean,
): Promise<RunResult> {
  const { backend, clock, metrics, log, slot } = args;
  const summary = effects.summary();
  const context = { window: slot.window, ...summary, inDoubtKeys: undefined };
  if (leaseLost || effects.stopReason === 'lease-lost') {
    // Neither complete nor release: the slot belongs to a later epoch now, or will once our lease
    // runs out. Any write we made here would be fenced anyway.
    log.warn('run ended without its lease', { ...context, notAttempted: effects.notAttempted });
    return { status: 'fenced', epoch: claim.epoch, summary };
  }
  if (jobError !== undefined) {
    const released = await backend.claims.release(
      claim,
      { kind: 'error', message: errorText(jobError) },
      clock.now(),
    );
    log.error('job failed; slot released for a retry', {
      ...context,
      error: errorText(jobError),
      release: released.kind,
    });
    return { status: 'failed', epoch: claim.epoch, summary, error: jobError };
  }
  if (effects.stopReason) {
    const released = await backend.claims.release(claim, { kind: 'yield' }, clock.now());
    if (released.kind === 'fenced') return { status: 'fenced', epoch: claim.epoch, summary };
    metrics.count(MetricName.RunYielded);
    log.warn('run stopped with work left; slot released for the next run to resume', {
      ...context,
      reason: effects.stopReason,
      notAttempted: effects.notAttempted,
    });
    return { status: 'yielded', epoch: claim.epoch, summary, reason: effects.stopReason };
  }
  const completed = await backend.claims.complete(claim, summary, clock.now());
  if (completed.kind === 'fenced') {
    log.error('completion rejected: a later epoch owns this slot', {
      ...context,
      currentEpoch: completed.epoch,
      currentState: completed.state,
    });
    return { status: 'fenced', epoch: claim.epoch, summary };
  }
  log.info('slot completed', { ...context, inDoubtKeys: summary.inDoubtKeys });
  return { status: 'completed', epoch: claim.epoch, summary };
}

function jobContext(
  args: RunSlotArgs,
  claim: Claim,
  signal: AbortSignal,
  effects: EffectRunner,
  defaultConcurrency: number,
): JobContext {
  return {
    slot: args.slot,
    scheduledTime: new Date(args.slot.window),
    epoch: claim.epoch,
    delivery: args.delivery,
    signal,
    payload: args.payload,
    log: args.log,
    once: (effectKey, effect) => effects.once(effectKey, effect),
    async onceEach(items, options, effect) {
      const concurrency = options.concurrency ?? defaultConcurrency;
      if (!Number.isInteger(concurrency) || concurrency < 1) {
        throw new ConfigurationError(
          'concurrency',
          `onceEach concurrency is ${concurrency}; use a whole number of at least 1`,
        );
      }
      await drainConcurrently(
        items,
        concurrency,
        (item) => effects.once(options.key(item), (signal) => effect(item, signal)),
        () => effects.stopping(),
      );
    },
  };
}

function resolveOptions(options: RunOptions = {}) {
  const leaseMs = options.leaseMs ?? JOB_DEFAULTS.leaseSeconds * 1000;
  const resolved = {
    leaseMs,
    renewEveryMs: options.renewEveryMs ?? Math.floor(leaseMs / 3),
    leaseSafetyMarginMs: options.leaseSafetyMarginMs ?? Math.floor(leaseMs / 6),
    stopMarginMs: options.stopMarginMs ?? 30_000,
    effectConcurrency: options.effectConcurrency ?? JOB_DEFAULTS.effectConcurrency,
    maxAttempts: options.maxAttempts ?? JOB_DEFAULTS.maxAttempts,
    retentionDays: options.retentionDays ?? JOB_DEFAULTS.retentionDays,
    inDoubtPolicy: options.inDoubtPolicy ?? InDoubtPolicy.Report,
    markBatchSize: options.markBatchSize ?? 25,
    markFlushMs: options.markFlushMs ?? 1_000,
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
  if (resolved.retentionDays < 2) {
    throw new ConfigurationError(
      'retentionDays',
      `retentionDays is ${resolved.retentionDays}; keep records at least 2 days (the scheduler retries for up to 24 hours)`,
    );
  }
  if (!Number.isInteger(resolved.maxAttempts) || resolved.maxAttempts < 1) {
    throw new ConfigurationError(
      'maxAttempts',
      `maxAttempts is ${resolved.maxAttempts}; use a whole number of at least 1`,
    );
  }
  if (resolved.markBatchSize < 1 || resolved.markBatchSize > 25) {
    throw new ConfigurationError(
      'markBatchSize',
      `markBatchSize is ${resolved.markBatchSize}; use 1 to 25 (BatchWriteItem's limit)`,
    );
  }
  return resolved;
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
        completedAt: new Date(outcome.completedAt).toISOString(),
        summary: outcome.summary,
      };
    case 'failed':
      return { kind: 'failed', attempts: outcome.attempts, lastError: outcome.lastError };
    default:
      return outcome satisfies never;
  }
}

function errorText(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
