import { initOnce } from '../job/lambda-handler.js';
import type { EffectLedger, ProviderWordOutcome } from '../slot/ports.js';
import type { Log } from '../telemetry/log.js';
import { MetricName } from '../telemetry/metric-names.js';
import type { JobMetrics } from '../telemetry/metrics.js';
import { safeErrorText } from '../telemetry/safe-error-text.js';
import { type IgnoredBecause, readSesEvent } from './ses-events.js';

/** What the recorder needs of a claims backend: the one write, nothing else. */
export type ProviderWordLedger = Pick<EffectLedger, 'recordProviderWord'>;

/** What the SES event recorder's handler is built from. */
export interface SesEventRecorderDeps {
  /**
   * Where effect records live, or a function that connects on first use (cold start). A connection
   * that fails is not kept: the next invocation tries again.
   */
  readonly ledger: ProviderWordLedger | (() => Promise<ProviderWordLedger>);
  /** The jobs whose events this recorder records; any other job's are ignored. */
  readonly jobIds: ReadonlySet<string>;
  /** Metrics of one event, with its job's JobId dimension; flushed before the handler returns. */
  readonly metrics: (jobId: string) => JobMetrics;
  /** Log lines about one event: its job's, or the recorder's own (`undefined`) when it names none. */
  readonly log: (jobId: string | undefined) => Log;
}

/** What the recorder's handler returns (EventBridge invokes it asynchronously and reads nothing). */
export type SesEventResponse =
  /** The word is on the effect's record (a duplicated event finds it there: recorded again, harmlessly). */
  | { readonly status: 'recorded'; readonly jobId: string; readonly keyHash: string }
  /** Nothing written: the effect was done already, or no record of the word's epoch exists. */
  | {
      readonly status: 'not-recorded';
      readonly jobId: string;
      readonly keyHash: string;
      readonly ledger: Exclude<ProviderWordOutcome, 'recorded'>;
    }
  /** An event that settles nothing here: untagged, another job's, or of a type that names no message. */
  | { readonly status: 'ignored'; readonly reason: IgnoredBecause; readonly jobId?: string }
  /** An event that can never be recorded: logged without the event, dropped, never retried. */
  | {
      readonly status: 'rejected';
      readonly field: string;
      readonly message: string;
      readonly jobId?: string;
    };

/**
 * The SES event recorder's Lambda handler: reads one SES email sending event (readSesEvent) and
 * writes what SES said (accepted or not) onto the record of the effect the message's tags name,
 * through `EffectLedger.recordProviderWord`: only onto a reservation of the word's epoch that is not
 * done, so an event that comes late, twice or for a record already settled changes nothing that
 * matters. It records only; the window's runs settle what is in doubt from the words on record.
 *
 * Every event is counted under its job: `ProviderWordRecorded`, or `ProviderWordIgnored` for one
 * that wrote nothing (done already, the usual case; unknown; another job's; malformed). A malformed
 * event is logged by field, never whole (SES events carry the recipients' addresses), and answered,
 * not thrown: a retry cannot fix it. A store that fails is thrown, so Lambda's retries and then the
 * dead-letter queue (which pages) take the event.
 * @example export const handler = createSesEventRecorder({ ledger, jobIds, metrics: (jobId) => emfMetrics({ jobId }), log: jsonLog });
 */
export function createSesEventRecorder(deps: SesEventRecorderDeps) {
  const ledger = initOnce(() =>
    typeof deps.ledger === 'function' ? deps.ledger() : Promise.resolve(deps.ledger),
  );
  return async function handler(event: unknown): Promise<SesEventResponse> {
    const reading = readSesEvent(event, deps.jobIds);
    if (reading.kind !== 'word') {
      const response: SesEventResponse =
        reading.kind === 'ignored'
          ? { status: 'ignored', reason: reading.reason, ...jobOf(reading.jobId) }
          : { status: 'rejected', field: reading.field, message: reading.message, ...jobOf(reading.jobId) };
      report(deps, response);
      if (reading.jobId !== undefined) await count(deps, reading.jobId, MetricName.ProviderWordIgnored);
      return response;
    }
    const { effect, word } = reading;
    const slot = {
      jobId: effect.jobId,
      window: effect.window,
      ...(effect.shard !== undefined ? { shard: effect.shard } : {}),
    };
    let outcome: ProviderWordOutcome;
    try {
      outcome = await (await ledger()).recordProviderWord(slot, effect.keyHash, word);
    } catch (error) {
      deps.log(effect.jobId).error('provider word not recorded: the store failed; the event is retried', {
        window: effect.window,
        effect: effect.keyHash,
        epoch: effect.epoch,
        event: word.event,
        error: safeErrorText(error),
      });
      throw error;
    }
    const response: SesEventResponse =
      outcome === 'recorded'
        ? { status: 'recorded', jobId: effect.jobId, keyHash: effect.keyHash }
        : { status: 'not-recorded', jobId: effect.jobId, keyHash: effect.keyHash, ledger: outcome };
    // A done effect is the usual case (the run marked it before SES reported): no line for it,
    // unless SES rejected it after all (a Reject after its Send: SES found a virus and delivered
    // nothing), which a person should see, since nothing sends it again.
    const rejectedWhenDone = outcome === 'done' && word.outcome === 'rejected';
    if (outcome !== 'done' || rejectedWhenDone) {
      const line = rejectedWhenDone
        ? 'provider rejected a message whose effect is done: the recipient got nothing and it is not sent again'
        : outcome === 'recorded'
          ? 'provider word recorded'
          : 'provider word for no open reservation';
      deps.log(effect.jobId)[outcome === 'recorded' ? 'info' : 'warn'](line, {
        window: effect.window,
        effect: effect.keyHash,
        epoch: effect.epoch,
        ...(effect.shard !== undefined ? { shard: effect.shard } : {}),
        event: word.event,
        outcome: word.outcome,
        ...(word.messageId ? { messageId: word.messageId } : {}),
      });
    }
    await count(
      deps,
      effect.jobId,
      outcome === 'recorded' ? MetricName.ProviderWordRecorded : MetricName.ProviderWordIgnored,
    );
    return response;
  };
}

/** One line for an event that wrote nothing: a warning when ignored, an error when malformed. */
function report(deps: SesEventRecorderDeps, response: SesEventResponse): void {
  const log = deps.log('jobId' in response ? response.jobId : undefined);
  if (response.status === 'ignored') {
    log.warn('SES event ignored', { reason: response.reason });
  } else if (response.status === 'rejected') {
    log.error('SES event rejected: permanent, not retried', {
      field: response.field,
      reason: response.message,
    });
  }
}

async function count(deps: SesEventRecorderDeps, jobId: string, name: MetricName): Promise<void> {
  const metrics = deps.metrics(jobId);
  metrics.count(name);
  await metrics.flush();
}

function jobOf(jobId: string | undefined): { jobId?: string } {
  return jobId === undefined ? {} : { jobId };
}
