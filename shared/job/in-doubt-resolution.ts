import { ConfigurationError } from '../errors.js';
import { type EffectLedger, type EffectRecord, EffectState } from '../slot/ports.js';
import type { Slot } from '../slot/slot.js';
import type { Log } from '../telemetry/log.js';
import { MetricName } from '../telemetry/metric-names.js';
import type { JobMetrics } from '../telemetry/metrics.js';

/** What becomes of an in-doubt effect the provider has said nothing about once the grace period is over. */
export const AfterGrace = {
  /** It stays in doubt, counted and paged (`EffectInDoubt`), for a person to settle: the default. */
  Report: 'report',
  /**
   * It is sent again: probably safe, since a provider that accepted it has almost certainly said so
   * by then, but its events can be later still, and then the recipient gets it twice. Opt-in.
   */
  Resend: 'resend',
} as const;
export type AfterGrace = (typeof AfterGrace)[keyof typeof AfterGrace];

/**
 * How a window settles effects left in doubt (a run died between performing one and recording it
 * done) from the provider's own record of the message: its events (SES: Send, Delivery, Reject),
 * written onto the effect's record by `EffectLedger.recordProviderWord`.
 */
export interface InDoubtResolution {
  /**
   * How long after an effect's reservation to wait for the provider's word about it before judging
   * it without one. 0 when nothing reports the provider's word (an effect that is not an email
   * through a tagged sender): the window then waits for nothing. The ScheduledJob construct sets
   * 1 hour when the job's SES sends are recorded.
   * @default 0
   */
  readonly graceMs?: number;
  /** @default 'report' */
  readonly afterGrace?: AfterGrace;
}

/** The resolution settings with every default filled in, checked. */
export function resolveInDoubtResolution(options: InDoubtResolution = {}): Required<InDoubtResolution> {
  const resolved = { graceMs: options.graceMs ?? 0, afterGrace: options.afterGrace ?? AfterGrace.Report };
  if (!(resolved.graceMs >= 0) || !Number.isFinite(resolved.graceMs)) {
    throw new ConfigurationError(
      'inDoubtResolution.graceMs',
      `inDoubtResolution.graceMs is ${resolved.graceMs}; use 0 (no provider word to wait for) or a number of milliseconds, e.g. 3600000`,
    );
  }
  if (resolved.afterGrace !== AfterGrace.Report && resolved.afterGrace !== AfterGrace.Resend) {
    throw new ConfigurationError(
      'inDoubtResolution.afterGrace',
      `inDoubtResolution.afterGrace is '${String(resolved.afterGrace)}'; use 'report' (the default) or 'resend'`,
    );
  }
  return resolved;
}

/** How each in-doubt effect of a window (or shard) came out of one resolution pass. */
export interface ResolutionPass {
  /** The provider accepted its message: recorded done, never sent again. */
  readonly confirmed: number;
  /** The provider said it did not accept the message (SES Reject): due for a retry now. */
  readonly rejected: number;
  /** No word by the end of the grace period, and the job re-sends then: due for a retry now. */
  readonly resent: number;
  /** No word yet, inside the grace period: still in doubt, looked at again later. */
  readonly awaiting: number;
  /**
   * When to look again for the ones awaiting their word (epoch ms): the first look due, or the
   * last of those due within `lookTogetherMs` of it.
   */
  readonly lookAgainAt?: number;
}

/**
 * When to look again for a word about an effect reserved at `reservedAt`: a minute after it, five
 * minutes after it (SES reports within seconds, so most words are there by then), and at the end of
 * the grace period; the first of these still ahead of `now`.
 */
function nextLook(reservedAt: number, graceMs: number, now: number): number {
  const looks = [60_000, 300_000].filter((after) => after < graceMs).concat(graceMs);
  return reservedAt + (looks.find((after) => reservedAt + after > now) ?? graceMs);
}

/**
 * How far after the first look due the window waits to take later looks with it: a crashed run's
 * effects in doubt were reserved moments apart, and a look for each one on its own would be a run
 * (a window walk) for each one. A tenth of the grace period, at most a minute: a word is never
 * waited for much longer than the grace period says.
 */
function lookTogetherMs(graceMs: number): number {
  return Math.min(60_000, graceMs / 10);
}

/**
 * Settles what the provider's word can settle among `inDoubt` (the slot's RESERVED records, none of
 * them in flight: the run resolving has settled its own effects): accepted → DONE; rejected → FAILED
 * due now, so the window's retry sends it; no word past the grace period → FAILED due now when the
 * job re-sends, else left in doubt. Each settle is conditioned on the exact reservation read, so a
 * record that moved since (an operator, another resolver) is left alone. Counts and logs every
 * resolution by the effect's hash.
 */
export async function resolveInDoubt(args: {
  readonly ledger: EffectLedger;
  readonly slot: Slot;
  readonly inDoubt: readonly EffectRecord[];
  readonly resolution: Required<InDoubtResolution>;
  readonly now: number;
  readonly metrics: JobMetrics;
  readonly log: Log;
}): Promise<ResolutionPass> {
  const { ledger, slot, resolution, now, metrics, log } = args;
  let confirmed = 0;
  let rejected = 0;
  let resent = 0;
  let awaiting = 0;
  const looks: number[] = [];
  for (const record of args.inDoubt) {
    if (record.state !== EffectState.Reserved) continue;
    const word = record.provider?.epoch === record.epoch ? record.provider : undefined;
    const fields = { window: slot.window, keyHash: record.keyHash, epoch: record.epoch };
    if (word?.outcome === 'accepted') {
      if (await ledger.settleInDoubt(slot, record, 'done', now)) {
        confirmed++;
        metrics.count(MetricName.InDoubtConfirmed);
        log.info('in-doubt effect confirmed by the provider: done, not sent again', {
          ...fields,
          event: word.event,
          messageId: word.messageId,
        });
      }
      continue;
    }
    if (word?.outcome === 'rejected') {
      if (await ledger.settleInDoubt(slot, record, 'retry', now)) {
        rejected++;
        metrics.count(MetricName.InDoubtRejected);
        log.info('in-doubt effect rejected by the provider: due for a retry', {
          ...fields,
          event: word.event,
        });
      }
      continue;
    }
    // No word. A record from before reservations were timed has waited long enough.
    const graceEndsAt = (record.reservedAt ?? Number.NEGATIVE_INFINITY) + resolution.graceMs;
    if (now < graceEndsAt) {
      awaiting++;
      looks.push(nextLook(record.reservedAt ?? now, resolution.graceMs, now));
      continue;
    }
    if (
      resolution.afterGrace === AfterGrace.Resend &&
      (await ledger.settleInDoubt(slot, record, 'retry', now))
    ) {
      resent++;
      metrics.count(MetricName.InDoubtResent);
      log.warn(
        'in-doubt effect with no word from the provider after the grace period: sent again by policy',
        {
          ...fields,
          graceMs: resolution.graceMs,
        },
      );
    }
  }
  const first = looks.reduce((a, b) => Math.min(a, b), Number.POSITIVE_INFINITY);
  const together = first + lookTogetherMs(resolution.graceMs);
  const lookAgainAt = looks.reduce((a, b) => (b <= together ? Math.max(a, b) : a), first);
  return { confirmed, rejected, resent, awaiting, ...(looks.length > 0 ? { lookAgainAt } : {}) };
}
