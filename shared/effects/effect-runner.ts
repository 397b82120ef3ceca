import type { Clock } from '../clock.js';
import { EffectNotPerformedError, StoreError } from '../errors.js';
import type { Claim, EffectLedger, RunSummary } from '../slot/ports.js';
import { MetricName } from '../telemetry/metric-names.js';
import type { JobMetrics } from '../telemetry/metrics.js';
import type { EffectKeyHasher } from './effect-key.js';

/** What became of one guarded effect. */
export type EffectResult =
  /** Performed now and recorded done. */
  | 'done'
  /** Found done by an earlier run; not performed again. */
  | 'skipped'
  /** Reserved earlier and never marked done, or our own effect threw an unknown error: not retried. */
  | 'in-doubt'
  /** The effect said it did not happen (EffectNotPerformedError); released for a later run. */
  | 'failed'
  /** Not attempted: the run is stopping (lease lost, time running out, store unavailable). */
  | 'stopped';

/** What to do with an effect an earlier epoch reserved and never marked done. */
export const InDoubtPolicy = {
  /** Report it and leave it (the default: an email may already have gone). */
  Report: 'report',
  /** Run it again: only for effects that are themselves idempotent. */
  Rerun: 'rerun',
} as const;
export type InDoubtPolicy = (typeof InDoubtPolicy)[keyof typeof InDoubtPolicy];

/** Why the runner stopped taking new effects, if it did. */
export type StopReason = 'lease-lost' | 'time' | 'store-error';

export interface EffectRunnerOptions {
  readonly claim: Claim;
  readonly ledger: EffectLedger;
  readonly hashKey: EffectKeyHasher;
  readonly metrics: JobMetrics;
  readonly clock: Clock;
  readonly signal: AbortSignal;
  /** False once no new effect may be reserved; checked before every reservation. */
  readonly mayReserve: () => StopReason | undefined;
  readonly inDoubtPolicy: InDoubtPolicy;
  /** Marks flushed together: 25 is BatchWriteItem's limit. */
  readonly markBatchSize: number;
  /** A pending mark waits at most this long before it is flushed. */
  readonly markFlushMs: number;
  readonly onEffectError?: (keyHash: string, error: unknown) => void;
}

/** The most in-doubt key hashes a summary lists; the count is always exact. */
const LISTED_IN_DOUBT = 50;

/**
 * Runs guarded effects for one claim: reserve (conditional put), perform, mark done (batched). It
 * counts every outcome, so the run summary accounts for every effect it was handed.
 */
export class EffectRunner {
  readonly #o: EffectRunnerOptions;
  #done = 0;
  #skipped = 0;
  #inDoubt = 0;
  #failed = 0;
  readonly #inDoubtKeys: string[] = [];
  #pendingMarks: string[] = [];
  #flushing: Promise<void> = Promise.resolve();
  #cancelFlushTimer: (() => void) | undefined;
  #stopReason: StopReason | undefined;
  #notAttempted = 0;
  #unmarked = 0;
  #closed = false;
  /**
   * Keys this run is handling, or has handled without a durable outcome: reserving, in flight, mark
   * pending, or in doubt. A second `once()` for one of them (a list naming a recipient twice) is
   * skipped: the ledger would show it our own reservation, which it cannot tell from our own lost
   * reply, and perform it again. Bounded by the concurrency, a mark batch and this run's in-doubt count.
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

  /** Effects performed whose done marks could not be written. */
  get unmarked(): number {
    return this.#unmarked;
  }

  /** True when the runner will take no new effect. */
  stopping(): boolean {
    if (this.#stopReason) return true;
    const reason = this.#o.signal.aborted ? 'lease-lost' : this.#o.mayReserve();
    if (reason) this.#stopReason = reason;
    return this.#stopReason !== undefined;
  }

  /** Takes no new effect from now on: the run is finishing. Effects already under way finish. */
  close(): void {
    this.#closed = true;
  }

  /** Guards one effect: performs `perform` at most once for this key across every run of the slot. */
  async once(effectKey: string, perform: (signal: AbortSignal) => Promise<void>): Promise<EffectResult> {
    if (this.#closed || this.stopping()) {
      this.#notAttempted++;
      return 'stopped';
    }
    const keyHash = this.#o.hashKey(effectKey);
    if (this.#unsettled.has(keyHash)) {
      // The same key again in this run: already handled here.
      this.#skipped++;
      this.#o.metrics.count(MetricName.EffectSkipped);
      return 'skipped';
    }
    this.#unsettled.add(keyHash);
    let reservation: Awaited<ReturnType<EffectLedger['reserve']>>;
    try {
      reservation = await this.#o.ledger.reserve(this.#o.claim, keyHash, {
        rerunInDoubt: this.#o.inDoubtPolicy === InDoubtPolicy.Rerun,
      });
    } catch (error) {
      if (!(error instanceof StoreError)) throw error;
      // The reservation may or may not have committed. If it did, the next run finds it reserved by
      // this epoch and reports it in doubt; nothing was performed. Stop: the store is struggling.
      this.#stopReason ??= 'store-error';
      this.#notAttempted++;
      this.#o.onEffectError?.(keyHash, error);
      return 'stopped';
    }
    // A key in doubt stays remembered, so a second occurrence is not counted in doubt twice.
    if (reservation.kind === 'done' || reservation.kind === 'fenced') this.#unsettled.delete(keyHash);
    switch (reservation.kind) {
      case 'done':
        this.#skipped++;
        this.#o.metrics.count(MetricName.EffectSkipped);
        return 'skipped';
      case 'in-doubt':
        this.#recordInDoubt(keyHash);
        return 'in-doubt';
      case 'fenced':
        this.#stopReason = 'lease-lost';
        this.#notAttempted++;
        return 'stopped';
      case 'reserved':
        return this.#perform(keyHash, perform);
      default:
        return assertNever(reservation);
    }
  }

  /** Flushes pending marks; call before completing or releasing the slot. */
  async settle(): Promise<void> {
    this.#cancelFlushTimer?.();
    this.#cancelFlushTimer = undefined;
    await this.#flush();
    await this.#flushing;
  }

  summary(): RunSummary {
    return {
      done: this.#done,
      skipped: this.#skipped,
      inDoubt: this.#inDoubt,
      failed: this.#failed,
      inDoubtKeys: [...this.#inDoubtKeys],
      epoch: this.#o.claim.epoch,
    };
  }

  async #perform(keyHash: string, perform: (signal: AbortSignal) => Promise<void>): Promise<EffectResult> {
    try {
      await perform(this.#o.signal);
    } catch (error) {
      this.#o.onEffectError?.(keyHash, error);
      if (error instanceof EffectNotPerformedError) {
        await this.#o.ledger.unreserve(this.#o.claim, keyHash);
        this.#unsettled.delete(keyHash);
        this.#failed++;
        this.#o.metrics.count(MetricName.EffectFailed);
        return 'failed';
      }
      // The effect may have happened (a timeout after the provider accepted it): never re-run it.
      this.#recordInDoubt(keyHash);
      return 'in-doubt';
    }
    this.#done++;
    this.#o.metrics.count(MetricName.EffectDone);
    this.#pendingMarks.push(keyHash);
    if (this.#pendingMarks.length >= this.#o.markBatchSize) {
      await this.#flush();
    } else if (!this.#cancelFlushTimer) {
      this.#cancelFlushTimer = this.#o.clock.schedule(this.#o.markFlushMs, () => {
        this.#cancelFlushTimer = undefined;
        void this.#flush().catch(() => {});
      });
    }
    return 'done';
  }

  /** Writes the pending marks. Flushes are chained so a batch never races the one before it. */
  #flush(): Promise<void> {
    if (this.#pendingMarks.length === 0) return this.#flushing;
    const batch = this.#pendingMarks;
    this.#pendingMarks = [];
    // A mark that cannot be written leaves a performed effect reading as in doubt to a later run of
    // this window; it is counted (unmarked) and never retried as a send.
    this.#flushing = this.#flushing
      .then(() => this.#o.ledger.markDone(this.#o.claim, batch))
      .then(() => {
        for (const keyHash of batch) this.#unsettled.delete(keyHash);
      })
      .catch((error: unknown) => {
        this.#unmarked += batch.length;
        this.#o.onEffectError?.('(mark batch)', error);
      });
    return this.#flushing;
  }

  #recordInDoubt(keyHash: string): void {
    this.#inDoubt++;
    this.#o.metrics.count(MetricName.EffectInDoubt);
    if (this.#inDoubtKeys.length < LISTED_IN_DOUBT) this.#inDoubtKeys.push(keyHash);
  }
}

function assertNever(value: never): never {
  throw new Error(`unexpected reservation outcome ${JSON.stringify(value)}`);
}
