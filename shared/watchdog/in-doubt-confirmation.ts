import {
  countOutcomes,
  type InDoubtEffectResult,
  InDoubtOutcome,
  type InDoubtResolverStores,
  ResolverScope,
  resolveWindowInDoubt,
} from '../operator/in-doubt-resolver.js';
import { SlotState } from '../slot/ports.js';
import type { Log } from '../telemetry/log.js';
import { MetricName } from '../telemetry/metric-names.js';
import type { JobMetrics } from '../telemetry/metrics.js';
import type { WindowAudit } from './window-audit.js';

/** How much one watchdog run confirms. */
export const CONFIRMATION_LIMITS = {
  /**
   * Finished windows whose effects one run reads (one listing of the window's effects each), the
   * latest first: a run has two minutes, and the next one comes 15 minutes later for the rest.
   */
  windowsPerRun: 24,
  /** Hashes still in doubt named in a window's log line; the count is always exact. */
  listedKeys: 20,
} as const;

/** What one watchdog run confirmed. */
export interface InDoubtConfirmation {
  /** Finished windows whose summary counted effects in doubt, and whose effects were read. */
  readonly windows: number;
  /** Such windows left for a later run (over CONFIRMATION_LIMITS.windowsPerRun). */
  readonly deferred: number;
  /** Effects the provider accepted, recorded done (InDoubtConfirmedLate). */
  readonly confirmed: number;
  /** Effects the provider did not accept: left for `slotguard effects resolve --auto`, which re-runs them. */
  readonly rejected: number;
  /** Effects with no word from the provider, or refused: still in doubt. */
  readonly stillInDoubt: number;
}

/**
 * The watchdog's safe half of in-doubt resolution, after its audit: in each window the audit found
 * DONE or PARTIAL with effects in doubt on its summary (no further read for any other window), the
 * effects the provider has since accepted are recorded done (resolveWindowInDoubt,
 * ResolverScope.ConfirmOnly), which also takes them off the window's summary. Nothing is ever made to
 * be sent again here: a re-send needs the window delivered, which is an operator's
 * (`effects resolve --auto`, then backfill) or the job's own runs' to do, never the watchdog's.
 * Counts InDoubtConfirmedLate (zero included), and logs one line per window with what is still in
 * doubt; each confirmation is logged by hash.
 * @throws StoreError when a store does not answer; what was confirmed before stays confirmed
 */
export async function confirmInDoubt(args: {
  readonly audit: WindowAudit;
  readonly stores: InDoubtResolverStores;
  readonly now: number;
  readonly metrics: JobMetrics;
  readonly log: Log;
}): Promise<InDoubtConfirmation> {
  const { audit, stores, now, log } = args;
  const candidates = audit.windows
    .filter((w) => (w.state === SlotState.Done || w.state === SlotState.Partial) && (w.inDoubt ?? 0) > 0)
    .reverse();
  const looked = candidates.slice(0, CONFIRMATION_LIMITS.windowsPerRun);
  const effects: InDoubtEffectResult[] = [];
  for (const window of looked) {
    const resolution = await resolveWindowInDoubt({
      stores,
      slot: { jobId: audit.jobId, window: window.window },
      scope: ResolverScope.ConfirmOnly,
      now,
      log,
      by: 'watchdog',
    });
    if (resolution.kind !== 'resolved') continue;
    effects.push(...resolution.effects);
    const { counts } = resolution;
    const left = resolution.effects.filter((e) => !settled(e));
    log.info('watchdog: in-doubt effects of a finished window, by the provider’s word', {
      window: window.window,
      confirmed: counts[InDoubtOutcome.MarkedDone],
      rejected: counts[InDoubtOutcome.Rejected],
      stillInDoubt: counts[InDoubtOutcome.InDoubt] + counts[InDoubtOutcome.Refused],
      keyHashes: left.slice(0, CONFIRMATION_LIMITS.listedKeys).map((e) => e.keyHash),
    });
  }
  const counts = countOutcomes(effects);
  args.metrics.count(MetricName.InDoubtConfirmedLate, counts[InDoubtOutcome.MarkedDone]);
  return {
    windows: looked.length,
    deferred: candidates.length - looked.length,
    confirmed: counts[InDoubtOutcome.MarkedDone],
    rejected: counts[InDoubtOutcome.Rejected],
    stillInDoubt: counts[InDoubtOutcome.InDoubt] + counts[InDoubtOutcome.Refused],
  };
}

/** No longer in doubt, whoever settled it. */
function settled(effect: InDoubtEffectResult): boolean {
  return effect.outcome === InDoubtOutcome.MarkedDone || effect.outcome === InDoubtOutcome.MovedOn;
}
