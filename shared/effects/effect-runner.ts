import type { Clock } from '../clock.js';
import { EffectNotPerformedError, NotPerformedReason, StoreError } from '../errors.js';
import type { Claim, EffectLedger, ReserveOutcome, RunSummary } from '../slot/ports.js';
import { MetricName } from '../telemetry/metric-names.js';
import type { JobMetrics } from '../telemetry/metrics.js';
import { withEffectContext } from './effect-context.js';
import type { EffectKeyHasher } from './effect-key.js';
import type { RunMarks } from './run-marks.js';

/** What became of one guarded effect. */
export type EffectResult =
  /** Performed now and recorded done. */
  | 'done'
  /** Found done by an earlier run; not performed again. */
  | 'skipped'
  /** Reserved earlier and never marked done, or our own effect threw an unknown error: not retried. */
  | 'in-doubt'
  /** Refused before it was performed (EffectNotPerformedError), or found waiting: a later run retries it. */
  | 'retrying'
  /** Refused on its last allowed attempt, or its key is unusable: failed for good, not performed. */
  | 'failed'
  /** Not attempted: the run is stopping (lease lost, time running out, store or provider failing). */
  | 'stopped'
  /** Not this pass's concern: a retry pass passes by every effect that is not due. */
  | 'passed';

/** What a reservation came to, as the step that performs its effect (or reports why it will not). */
export type EffectStep = (perform: (signal: AbortSignal) => Promise<void>) => Promise<EffectResult>;

/** The step of an effect whose outcome is already known: it performs nothing. */
export function settledStep(result: EffectResult | Promise<EffectResult>): EffectStep {
  const settled = Promise.resolve(result);
  return () => settled;
}

/** What to do with an effect an earlier epoch reserved and never marked done. */
export const InDoubtPolicy = {
  /** Report it and leave it (the default: an email may already have gone). */
  Report: 'report',
  /** Run it again: only for effects that are themselves idempotent. */
  Rerun: 'rerun',
} as const;
export type InDoubtPolicy = (typeof InDoubtPolicy)[keyof typeof InDoubtPolicy];

/** Why the runner stopped taking new effects, if it did. */
export type StopReason = 'lease-lost' | 'time' | 'store-error' | 'provider-failing';

/** How an effect the provider refused before performing it is retried by later runs. */
export interface EffectRetryPolicy {
  /**
   * Attempts per effect, the refused ones included, before it fails for good.
   * @default 5
   */
  readonly maxAttempts?: number;
  /**
   * The wait before the first retry, in milliseconds.
   * @default 60_000
   */
  readonly firstDelayMs?: number;
  /**
   * Each later wait is this many times the one before (1, 4, 16, 64 minutes by default: the fifth
   * attempt comes 85 minutes after the first).
   * @default 4
   */
  readonly backoffRate?: number;
}

/** The retry policy with every default filled in. */
export const DEFAULT_EFFECT_RETRY: Required<EffectRetryPolicy> = {
  maxAttempts: 5,
  firstDelayMs: 60_000,
  backoffRate: 4,
};

export interface EffectRunnerOptions {
  readonly claim: Claim;
  readonly ledger: EffectLedger;
  readonly hashKey: EffectKeyHasher;
  readonly metrics: JobMetrics;
  readonly clock: Clock;
  readonly signal: AbortSignal;
  /**
   * The signal each effect is handed, when it is not `signal`: one that also aborts when the
   * invocation is nearly out of time, ending waits that have sent nothing.
   * @default signal
   */
  readonly effectSignal?: AbortSignal;
  /** Why no new effect may be reserved, if one may not; asked before every reservation. */
  readonly mayReserve: () => StopReason | undefined;
  readonly inDoubtPolicy: InDoubtPolicy;
  readonly retry: Required<EffectRetryPolicy>;
  /**
   * Consecutive failures of one kind (a refusal reason, or an unknown error's name) after which the
   * run stops: a provider that refuses or fails everything is not asked 12,400 times.
   */
  readonly failureStreakLimit: number;
  /** The run's done marks: each reservation is numbered here and settled here. */
  readonly marks: RunMarks;
  readonly onEffectError?: (keyHash: string, error: unknown) => void;
  /** An effect was performed: its done mark goes with a coming checkpoint. */
  readonly onPerformed?: () => void;
}

/** The most hashed keys a summary lists per list; the counts are always exact. */
const LISTED_KEYS = 50;

/**
 * Runs guarded effects for one claim: reserve (conditional put, numbered), perform, then settle the
 * number in the run's done marks (written with its checkpoints, not one write per effect) or record
 * the refusal for a later retry. It counts every outcome, so the run summary accounts for every
 * effect it was handed.
 */
export class EffectRunner {
  readonly #o: EffectRunnerOptions;
  #done = 0;
  #skipped = 0;
  #inDoubt = 0;
  #failed = 0;
  #retrying = 0;
  /** Refusals this run wrote to the ledger (retryable or final): progress toward a finished window. */
  #failuresRecorded = 0;
  #earliestRetryAt: number | undefined;
  readonly #inDoubtKeys: string[] = [];
  readonly #failedKeys: string[] = [];
  #stopReason: StopReason | undefined;
  #notAttempted = 0;
  #closed = false;
  #only: ReadonlySet<string> | undefined;
  #streak: { kind: string; length: number } | undefined;
  /**
   * Keys this run is handling, or has handled without a settled outcome: reserving, in flight, or in
   * doubt. A second `once()` for one of them (a list naming a recipient twice) is skipped without a
   * request. One already performed meets its own reservation under another number, which the ledger
   * answers `done`. Bounded by the concurrency and this run's in-doubt count.
   */
  readonly #unsettled = new Set<string>();

  constructor(options: EffectRunnerOptions) {
    this.#o = options;
  }

  /** Why the runner stopped, once it has. */
  get stopReason(): StopReason | undefined {
    return this.#stopReason;
  }

  /** Effects handed to the runner and not attempted because it was stopping. */
  get notAttempted(): number {
    return this.#notAttempted;
  }

  /** Refusals recorded in the ledger by this run. */
  get failuresRecorded(): number {
    return this.#failuresRecorded;
  }

  /** The earliest retry this run recorded or found waiting, if any. */
  get earliestRetryAt(): number | undefined {
    return this.#earliestRetryAt;
  }

  /** True when the runner will take no new effect. */
  stopping(): boolean {
    if (this.#stopReason) return true;
    const reason = this.#o.signal.aborted ? 'lease-lost' : this.#o.mayReserve();
    if (reason) this.#stopReason = reason;
    return this.#stopReason !== undefined;
  }

  /**
   * Takes no new effect from now on, for `reason`: a failure outside any one effect (the store
   * failing a read the run needs). Effects already under way finish.
   */
  stop(reason: Exclude<StopReason, 'lease-lost'>): void {
    this.#stopReason ??= reason;
  }

  /** Takes no new effect from now on: the run is finishing. Effects already under way finish. */
  close(): void {
    this.#closed = true;
  }

  /**
   * Restricts the runner to effects whose key hashes are in `keyHashes` (a retry pass over a walk
   * already done); every other key passes by without a request. `undefined` lifts the restriction.
   */
  restrictTo(keyHashes: ReadonlySet<string> | undefined): void {
    this.#only = keyHashes;
  }

  /** The hash an effect key is stored under, or undefined for a key that cannot be one (empty). */
  hashOf(effectKey: string): string | undefined {
    return typeof effectKey === 'string' && effectKey.length > 0 ? this.#o.hashKey(effectKey) : undefined;
  }

  /** Guards one effect: performs `perform` at most once for this key across every run of the slot. */
  once(effectKey: string, perform: (signal: AbortSignal) => Promise<void>): Promise<EffectResult> {
    return this.onceHashed(this.hashOf(effectKey), perform);
  }

  /** `once` for a key already hashed with hashOf (undefined: the key was unusable). */
  async onceHashed(
    keyHash: string | undefined,
    perform: (signal: AbortSignal) => Promise<void>,
  ): Promise<EffectResult> {
    return (await this.reserveHashed(keyHash))(perform);
  }

  /**
   * The first half of onceHashed: reserves the effect now and answers the step that performs it
   * (or reports what the reservation came to). A run reserving ahead calls this for its next effect
   * while the current one is being performed; the step must then be taken, or the reservation
   * stays in doubt.
   */
  async reserveHashed(keyHash: string | undefined): Promise<EffectStep> {
    if (this.#closed || this.stopping()) {
      this.#notAttempted++;
      return settledStep('stopped');
    }
    if (keyHash === undefined) return settledStep(this.#invalidKey());
    if (this.#only && !this.#only.has(keyHash)) return settledStep('passed');
    if (this.#unsettled.has(keyHash)) {
      // A retry pass meeting a key this run already handled (found in doubt, or still settling):
      // counted once already, and not this pass's to retry; a later run's retry pass retries it.
      if (this.#only) return settledStep('passed');
      // The same key again in this run: already handled here.
      this.#skipped++;
      this.#o.metrics.count(MetricName.EffectSkipped);
      return settledStep('skipped');
    }
    this.#unsettled.add(keyHash);
    const seq = this.#o.marks.take();
    let reservation: ReserveOutcome;
    try {
      reservation = await this.#o.ledger.reserve(this.#o.claim, keyHash, {
        rerunInDoubt: this.#o.inDoubtPolicy === InDoubtPolicy.Rerun,
        now: this.#o.clock.now(),
        seq,
      });
    } catch (error) {
      if (!(error instanceof StoreError)) throw error;
      // The reservation may or may not have committed. If it did, the next run finds it reserved by
      // this epoch, uncovered by its marks, and reports it in doubt; nothing was performed. Stop:
      // the store is struggling.
      this.#o.marks.inDoubt(seq);
      this.#stopReason ??= 'store-error';
      this.#notAttempted++;
      this.#o.onEffectError?.(keyHash, error);
      return settledStep('stopped');
    }
    // A key in doubt stays remembered, so a second occurrence is not counted in doubt twice.
    if (reservation.kind !== 'reserved' && reservation.kind !== 'in-doubt') this.#unsettled.delete(keyHash);
    // Only a granted reservation stands under our number.
    if (reservation.kind !== 'reserved') this.#o.marks.closed(seq);
    switch (reservation.kind) {
      case 'done':
        this.#skipped++;
        this.#o.metrics.count(MetricName.EffectSkipped);
        return settledStep('skipped');
      case 'in-doubt':
        this.#recordInDoubt(keyHash);
        return settledStep('in-doubt');
      case 'fenced':
        this.#stopReason = 'lease-lost';
        this.#notAttempted++;
        return settledStep('stopped');
      case 'retry-later':
        this.#countRetrying(reservation.retryAt);
        return settledStep('retrying');
      case 'failed':
        this.#countFailed(keyHash);
        return settledStep('failed');
      case 'elsewhere':
        // Another shard's to perform or report: this shard passes it by, uncounted.
        return settledStep('passed');
      case 'reserved': {
        const { attempt } = reservation;
        return (perform) => this.#perform(keyHash, seq, attempt, perform);
      }
      default:
        return assertNever(reservation);
    }
  }

  summary(): RunSummary {
    return {
      done: this.#done,
      skipped: this.#skipped,
      inDoubt: this.#inDoubt,
      failed: this.#failed,
      retrying: this.#retrying,
      inDoubtKeys: [...this.#inDoubtKeys],
      failedKeys: [...this.#failedKeys],
      epoch: this.#o.claim.epoch,
    };
  }

  async #perform(
    keyHash: string,
    seq: number,
    attempt: number,
    perform: (signal: AbortSignal) => Promise<void>,
  ): Promise<EffectResult> {
    const { slot, epoch } = this.#o.claim;
    const context = {
      jobId: slot.jobId,
      window: slot.window,
      keyHash,
      epoch,
      ...(slot.shard !== undefined ? { shard: slot.shard } : {}),
    };
    try {
      // A sender tags its message with the effect it performs, so the provider's events can settle it.
      await withEffectContext(context, () => perform(this.#o.effectSignal ?? this.#o.signal));
    } catch (error) {
      this.#o.onEffectError?.(keyHash, error);
      if (error instanceof EffectNotPerformedError) return this.#refused(keyHash, seq, attempt, error);
      // The effect may have happened (a timeout after the provider accepted it): never re-run it,
      // and never let the marks cover it.
      this.#o.marks.inDoubt(seq);
      this.#recordInDoubt(keyHash);
      this.#countStreak(`error:${error instanceof Error ? error.name : typeof error}`);
      return 'in-doubt';
    }
    this.#streak = undefined;
    this.#done++;
    this.#o.metrics.count(MetricName.EffectDone);
    this.#unsettled.delete(keyHash);
    this.#o.marks.performed(seq, keyHash);
    this.#o.onPerformed?.();
    return 'done';
  }

  /**
   * The provider refused before performing: record it FAILED with the attempt count, retryable after
   * a backoff or, on the last allowed attempt, for good. A refusal because the run itself cancelled
   * the wait was no attempt at all: the effect is recorded FAILED with the attempts it already had,
   * due at once, and a later run performs it.
   */
  async #refused(
    keyHash: string,
    seq: number,
    attempt: number,
    error: EffectNotPerformedError,
  ): Promise<EffectResult> {
    const { ledger, claim, retry } = this.#o;
    try {
      if (error.reason === NotPerformedReason.Cancelled) {
        // Nothing was attempted: put the effect back as it was before this reservation (its refused
        // attempts so far), due at once. Never delete the reservation: a later epoch may already
        // have met it and counted it in doubt, or a checkpoint passed it; a deleted record would
        // drop the effect from the window without a trace.
        await ledger.recordFailure(claim, keyHash, {
          attempts: attempt - 1,
          retryAt: this.#o.clock.now(),
          reason: NotPerformedReason.Cancelled,
          seq,
        });
        this.#o.marks.closed(seq);
        this.#unsettled.delete(keyHash);
        this.#notAttempted++;
        return 'stopped';
      }
      const final = attempt >= retry.maxAttempts;
      const retryAt = final
        ? undefined
        : this.#o.clock.now() + retry.firstDelayMs * retry.backoffRate ** (attempt - 1);
      await ledger.recordFailure(claim, keyHash, {
        attempts: attempt,
        reason: error.reason,
        seq,
        ...(retryAt !== undefined ? { retryAt } : {}),
      });
      this.#o.marks.closed(seq);
      this.#unsettled.delete(keyHash);
      this.#failuresRecorded++;
      // A recipient the provider rejects says nothing about the next one (a suppressed or bad
      // address): ten of them in a row are ten failed recipients, not a failing provider.
      if (error.reason === NotPerformedReason.Rejected) this.#streak = undefined;
      else this.#countStreak(`refused:${error.reason}`);
      if (retryAt === undefined) {
        this.#countFailed(keyHash);
        return 'failed';
      }
      this.#countRetrying(retryAt);
      this.#o.metrics.count(MetricName.EffectRetried);
      return 'retrying';
    } catch (storeError) {
      if (!(storeError instanceof StoreError)) throw storeError;
      // The reservation stays ours and uncovered: later runs read it as in doubt, and so does this one.
      this.#o.marks.inDoubt(seq);
      this.#o.onEffectError?.(keyHash, storeError);
      this.#stopReason ??= 'store-error';
      this.#recordInDoubt(keyHash);
      return 'in-doubt';
    }
  }

  /** An empty key cannot tell one effect from another: that effect fails, on record, and the run goes on. */
  async #invalidKey(): Promise<EffectResult> {
    const keyHash = this.#o.hashKey('');
    this.#o.onEffectError?.(
      keyHash,
      new Error('an effect key is empty; key each effect by what makes it unique'),
    );
    try {
      const reservation = await this.#o.ledger.reserve(this.#o.claim, keyHash, {
        rerunInDoubt: false,
        now: this.#o.clock.now(),
      });
      if (reservation.kind === 'reserved') {
        await this.#o.ledger.recordFailure(this.#o.claim, keyHash, {
          attempts: reservation.attempt,
          reason: 'invalid-key',
        });
        this.#failuresRecorded++;
      }
    } catch (error) {
      if (!(error instanceof StoreError)) throw error;
      this.#stopReason ??= 'store-error';
    }
    this.#countFailed(keyHash);
    return 'failed';
  }

  #recordInDoubt(keyHash: string): void {
    this.#inDoubt++;
    this.#o.metrics.count(MetricName.EffectInDoubtFound);
    if (this.#inDoubtKeys.length < LISTED_KEYS) this.#inDoubtKeys.push(keyHash);
  }

  #countFailed(keyHash: string): void {
    this.#failed++;
    this.#o.metrics.count(MetricName.EffectFailed);
    if (this.#failedKeys.length < LISTED_KEYS) this.#failedKeys.push(keyHash);
  }

  #countRetrying(retryAt: number): void {
    this.#retrying++;
    if (this.#earliestRetryAt === undefined || retryAt < this.#earliestRetryAt)
      this.#earliestRetryAt = retryAt;
  }

  /** One more failure of `kind` in a row; the limit stops the run. */
  #countStreak(kind: string): void {
    this.#streak =
      this.#streak?.kind === kind ? { kind, length: this.#streak.length + 1 } : { kind, length: 1 };
    if (this.#streak.length >= this.#o.failureStreakLimit) this.#stopReason ??= 'provider-failing';
  }
}

function assertNever(value: never): never {
  throw new Error(`unexpected reservation outcome ${JSON.stringify(value)}`);
}
