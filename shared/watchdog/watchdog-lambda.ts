import { type Clock, systemClock } from '../clock.js';
import { InvalidEventError } from '../errors.js';
import type { InDoubtResolverStores } from '../operator/in-doubt-resolver.js';
import type { ClaimStore } from '../slot/ports.js';
import { JOB_ID_PATTERN } from '../slot/slot.js';
import type { Log } from '../telemetry/log.js';
import type { JobMetrics } from '../telemetry/metrics.js';
import { safeErrorText } from '../telemetry/safe-error-text.js';
import { confirmInDoubt, type InDoubtConfirmation } from './in-doubt-confirmation.js';
import { EVENT_FIELD_OF_INPUT, parseWatchdogEvent, type WatchdogRequest } from './watchdog-event.js';
import {
  AuditInputError,
  auditWindows,
  countWatchdogMetrics,
  type WindowAudit,
  type WindowVerdict,
} from './window-audit.js';

/** The slot reads the watchdog's audit makes: nothing else of a claims backend. */
export type SlotReader = Pick<ClaimStore, 'read'>;

/** A store the handler is given, or a function that connects to it on first use (cold start). */
export type Connectable<T> = T | (() => Promise<T>);

/** What the watchdog's handler is built from. */
export interface WatchdogHandlerDeps {
  /**
   * Where the slot records are read, or a function that connects on first use (cold start). A
   * connection that fails is not kept: the next invocation tries again.
   */
  readonly claims: Connectable<SlotReader>;
  /**
   * What confirming in-doubt effects reads and writes (an event's `confirmInDoubt`): the slot
   * records, the job's effects, and the operator's writes. Connected on the first event that asks.
   * @default none: an event asking to confirm gets a warning in the log, and its audit as ever
   */
  readonly inDoubt?: Connectable<InDoubtResolverStores>;
  /** Metrics of one audit, with the audited job's JobId dimension; flushed before the handler returns. */
  readonly metrics: (jobId: string) => JobMetrics;
  /** The log lines of one audit, for the audited job. */
  readonly log: (jobId: string) => Log;
  /** @default the system clock */
  readonly clock?: Clock;
}

/** What the watchdog's handler returns: the audit's counts and the windows that page. */
export type WatchdogResponse =
  | {
      readonly status: 'audited';
      readonly jobId: string;
      /** The first instant audited. */
      readonly from: string;
      readonly counts: Readonly<Record<WindowVerdict, number>>;
      readonly missing: readonly string[];
      readonly incomplete: readonly string[];
      readonly partial: readonly string[];
      /**
       * What confirming in-doubt effects came to.
       * @default absent: the event did not ask, the watchdog cannot, or its stores did not answer (logged)
       */
      readonly inDoubt?: InDoubtConfirmation;
    }
  /** The event can never be audited (malformed, or an input the audit refuses); not retried. */
  | { readonly status: 'rejected'; readonly field: string; readonly message: string };

/**
 * The watchdog's Lambda handler: audits one job's windows per event (auditWindows), emits the
 * job's WindowMissing, WindowIncomplete and WatchdogRun, and logs each window that pages.
 *
 * A rejected event emits none of the three, so the WatchdogRun missing-data alarm pages for a
 * watchdog that is deployed but not watching. A store that does not answer is thrown, so Lambda's
 * retries (and, failing them, the same alarm) take it.
 *
 * An event with `confirmInDoubt` then confirms the effects finished windows still hold in doubt that
 * the provider has since accepted (confirmInDoubt: recorded done, InDoubtConfirmedLate), and never
 * sends anything again.
 * @example export const handler = createWatchdogHandler({ claims, metrics: (jobId) => emfMetrics({ jobId }), log: jsonLog });
 */
export function createWatchdogHandler(deps: WatchdogHandlerDeps) {
  const claims = connectOnce(deps.claims);
  const inDoubt = deps.inDoubt === undefined ? undefined : connectOnce(deps.inDoubt);
  const clock = deps.clock ?? systemClock;
  return async function handler(event: unknown): Promise<WatchdogResponse> {
    let request: WatchdogRequest;
    try {
      request = parseWatchdogEvent(event);
    } catch (error) {
      if (error instanceof InvalidEventError) return reject(deps, event, error.field, error.message);
      throw error;
    }
    const store = await claims();
    let audit: WindowAudit;
    try {
      audit = await auditWindows({ ...request, now: clock.now(), claims: store });
    } catch (error) {
      if (error instanceof AuditInputError)
        return reject(deps, event, EVENT_FIELD_OF_INPUT[error.input], error.message);
      throw error;
    }
    const metrics = deps.metrics(request.jobId);
    const log = deps.log(request.jobId);
    countWatchdogMetrics(audit, metrics);
    report(audit, log);
    const confirmed = request.confirmInDoubt ? await confirm(audit, inDoubt, clock, metrics, log) : undefined;
    await metrics.flush();
    const windows = (verdict: WindowVerdict) =>
      audit.windows.filter((w) => w.verdict === verdict).map((w) => w.window);
    return {
      status: 'audited',
      jobId: audit.jobId,
      from: new Date(audit.from).toISOString(),
      counts: audit.counts,
      missing: windows('missing'),
      incomplete: windows('incomplete'),
      partial: windows('partial'),
      ...(confirmed ? { inDoubt: confirmed } : {}),
    };
  };
}

/**
 * Confirms in-doubt effects after an audit (confirmInDoubt), never at the audit's expense: a store
 * that does not answer, or denies the writes, is logged and the audit's metrics still go out; the
 * next run, 15 minutes later, tries again.
 */
async function confirm(
  audit: WindowAudit,
  stores: (() => Promise<InDoubtResolverStores>) | undefined,
  clock: Clock,
  metrics: JobMetrics,
  log: Log,
): Promise<InDoubtConfirmation | undefined> {
  if (!stores) {
    log.warn(
      'watchdog event asks to confirm in-doubt effects, but this watchdog has no effect ledger or operator ' +
        'store for its backend (DynamoDB only, so far): only the audit ran',
      { jobId: audit.jobId },
    );
    return undefined;
  }
  try {
    return await confirmInDoubt({ audit, stores: await stores(), now: clock.now(), metrics, log });
  } catch (error) {
    log.error(
      "watchdog could not confirm in-doubt effects from the provider's word; the next run tries again",
      {
        error: safeErrorText(error),
      },
    );
    return undefined;
  }
}

/** One error line per window that pages (the alarm says how many; these say which), one summary line. */
function report(audit: WindowAudit, log: Log): void {
  for (const window of audit.windows) {
    if (window.verdict !== 'missing' && window.verdict !== 'incomplete') continue;
    log.error(window.verdict === 'missing' ? 'window missing' : 'window incomplete', {
      window: window.window,
      local: window.local,
      state: window.state ?? null,
      dueBy: new Date(window.dueBy).toISOString(),
      reason: window.reason,
    });
  }
  log.info('watchdog audit', {
    schedule: audit.expression,
    timeZone: audit.timeZone,
    from: new Date(audit.from).toISOString(),
    ...audit.counts,
  });
}

function reject(deps: WatchdogHandlerDeps, event: unknown, field: string, message: string): WatchdogResponse {
  const jobId =
    typeof event === 'object' && event !== null ? (event as { jobId?: unknown }).jobId : undefined;
  deps
    // Only a valid job id names the log: the field could be anything, an address included.
    .log(typeof jobId === 'string' && JOB_ID_PATTERN.test(jobId) ? jobId : 'watchdog')
    .error('watchdog event rejected: permanent, not retried; the job is not watched until it is fixed', {
      field,
      reason: message,
    });
  return { status: 'rejected', field, message };
}

/**
 * The store, connected on the first call and kept: a connection that fails is not kept, so the next
 * invocation tries again.
 */
function connectOnce<T>(store: Connectable<T>): () => Promise<T> {
  let connected: Promise<T> | undefined;
  return () => {
    connected ??= (
      typeof store === 'function' ? (store as () => Promise<T>)() : Promise.resolve(store)
    ).catch((error: unknown) => {
      connected = undefined;
      throw error;
    });
    return connected;
  };
}
