import { drainConcurrently } from '../effects/concurrent-drain.js';
import { InvalidEventError, SlotguardError } from '../errors.js';
import { JOB_DEFAULTS, type ScheduleSpec } from '../job/job-spec.js';
import { JobSchedule, ScheduleError } from '../schedule/fire-times.js';
import { describeInZone } from '../schedule/time-zone.js';
import { type ClaimStore, type SlotRecord, SlotState } from '../slot/ports.js';
import { assertJobId, windowOf } from '../slot/slot.js';
import { MetricName } from '../telemetry/metric-names.js';
import type { JobMetrics } from '../telemetry/metrics.js';
import { safeErrorText } from '../telemetry/safe-error-text.js';

const MINUTE_MS = 60_000;
const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;

/** What the watchdog makes of one window the schedule produced. */
export const WindowVerdict = {
  /** DONE: every effect recorded (or in doubt, which EffectInDoubt reports). */
  Ok: 'ok',
  /** PARTIAL: finished with effects that failed for good. EffectFailed paged; not counted incomplete. */
  Partial: 'partial',
  /** No slot record, and its scheduled time plus the grace has passed: WindowMissing. */
  Missing: 'missing',
  /** STUCK or FAILED, or not finished past its deadline: WindowIncomplete. */
  Incomplete: 'incomplete',
  /** Not due to be judged yet: within the grace (no record) or before its deadline (under way). */
  Pending: 'pending',
} as const;
export type WindowVerdict = (typeof WindowVerdict)[keyof typeof WindowVerdict];

/** How much one audit does, and what it accepts. */
export const AUDIT_LIMITS = {
  /** Windows one audit reads (one slot read each); a schedule firing more often needs a shorter lookback. */
  maxWindows: 1_000,
  /**
   * How far back an audit may look: slot records are kept `retentionDays` (35) from their window,
   * and TTL may delete them any time after, so an older window with no record proves nothing.
   */
  maxLookbackMs: (JOB_DEFAULTS.retentionDays - 1) * DAY_MS,
  /** The shortest deadline a run accepts (RunOptions.deadlineMs). */
  minDeadlineMs: MINUTE_MS,
  /** Slot reads in flight at once. */
  readConcurrency: 8,
} as const;

/** The inputs of an audit an operator or a deployment chooses, as named in the error that refuses one. */
export type AuditInput = 'jobId' | 'schedule' | 'rateStart' | 'notBefore' | 'deadline' | 'grace' | 'lookback';

/**
 * An audit input that cannot work: a malformed schedule, a deadline under a minute, a lookback
 * past the records' retention, or one that holds more windows than an audit reads. The message says
 * what was received and what to give instead, in words that fit the Lambda event and the CLI alike.
 */
export class AuditInputError extends SlotguardError {
  readonly input: AuditInput;
  constructor(input: AuditInput, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.input = input;
  }
}

/** What auditWindows reads and how it judges. */
export interface AuditWindowsArgs {
  readonly jobId: string;
  /** The job's schedule, as its JobSpec (and its Scheduler schedule) has it. */
  readonly schedule: ScheduleSpec;
  /**
   * Where a `rate()` schedule counts from (epoch ms): Scheduler counts from the schedule's
   * StartDate (else its creation), so a deployed watchdog must be given the instant the job's
   * schedule starts at, or it expects windows the schedule never produces. Ignored for cron and at.
   * @default 0 (1970-01-01T00:00:00Z), the local runner's origin
   */
  readonly rateStart?: number;
  /**
   * No window scheduled before this instant (epoch ms) is expected: the job's first deployment,
   * or its schedule's StartDate. Keeps a freshly deployed job from reporting the windows of the
   * lookback that came before it as missing.
   * @default the whole lookback is judged
   */
  readonly notBefore?: number;
  /** How long after its scheduled time a window must be finished, for records that carry no deadline. */
  readonly deadlineMs: number;
  /** How long after its scheduled time a window may have no record before it is missing. */
  readonly graceMs: number;
  /** How far back from `now` the schedule's windows are audited. */
  readonly lookbackMs: number;
  /** The audit's clock reading (epoch ms). */
  readonly now: number;
  /** Where the slot records are read: any backend's claim store. */
  readonly claims: Pick<ClaimStore, 'read'>;
}

/** One window of the schedule, judged. */
export interface AuditedWindow {
  /** The canonical window (`2026-11-30T06:00:00Z`), as its slot is keyed. */
  readonly window: string;
  /** How the window reads on the schedule's clocks: `Mon 2026-11-30 09:00 Europe/Moscow`. */
  readonly local: string;
  readonly verdict: WindowVerdict;
  /** The slot's state; absent when the window has no record. */
  readonly state?: SlotState;
  /**
   * When the window is (or was) judged, epoch ms: its scheduled time plus the grace while it has no
   * record, else its deadline (the record's, or the scheduled time plus `deadlineMs`).
   */
  readonly dueBy: number;
  /** One sentence for an operator: what is on record and why it got its verdict. Never a raw address. */
  readonly reason: string;
  /**
   * Effects a finished window's stored summary counts in doubt.
   * @default absent: not finished, or finished without a summary (STUCK, FAILED)
   */
  readonly inDoubt?: number;
}

/** An audit of one job's windows over the lookback. */
export interface WindowAudit {
  readonly jobId: string;
  readonly expression: string;
  readonly timeZone: string;
  /** The first instant audited (epoch ms): `now - lookback`, or `notBefore` when later. */
  readonly from: number;
  readonly now: number;
  /** Every window the schedule produced in [from, now], earliest first. */
  readonly windows: readonly AuditedWindow[];
  /** Windows per verdict. */
  readonly counts: Readonly<Record<WindowVerdict, number>>;
}

/**
 * Lists the windows `schedule` produced over the lookback (the shared schedule code: its zone and
 * Scheduler's daylight-saving rules), reads each one's slot record, and judges it: ok (DONE),
 * partial (PARTIAL), missing (no record past the grace), incomplete (STUCK, FAILED, or not finished
 * past its deadline) or pending. It writes nothing and emits nothing: countWatchdogMetrics turns the
 * audit into the job's metrics, `slotguard watchdog` prints it.
 * @throws AuditInputError for an input that cannot work; a StoreError when the store does not answer
 * @example const audit = await auditWindows({ jobId, schedule, deadlineMs, graceMs, lookbackMs, now: Date.now(), claims });
 */
export async function auditWindows(args: AuditWindowsArgs): Promise<WindowAudit> {
  const { jobId, now, graceMs, deadlineMs } = args;
  const { schedule, from, fires } = planAudit(args);

  const windows: AuditedWindow[] = new Array(fires.length);
  await drainConcurrently(
    fires.map((fire, i) => ({ fire: fire.getTime(), i })),
    AUDIT_LIMITS.readConcurrency,
    async ({ fire, i }) => {
      const window = windowOf(fire);
      const record = await args.claims.read({ jobId, window });
      windows[i] = {
        window,
        local: describeInZone(fire, schedule.timeZone),
        ...judge(record, fire, now, graceMs, deadlineMs),
      };
    },
  );
  const counts = { ok: 0, partial: 0, missing: 0, incomplete: 0, pending: 0 };
  for (const window of windows) counts[window.verdict]++;
  return {
    jobId,
    expression: schedule.expression.source,
    timeZone: schedule.timeZone,
    from,
    now,
    windows,
    counts,
  };
}

/** What an audit will read: the schedule, the first instant audited, and the windows in between. */
export interface AuditPlan {
  readonly schedule: JobSchedule;
  readonly from: number;
  readonly fires: readonly Date[];
}

/**
 * Checks an audit's inputs and lists the windows it would read, without reading any: a caller can
 * refuse a bad input before it connects to a store.
 * @throws AuditInputError for an input that cannot work
 */
export function planAudit(args: Omit<AuditWindowsArgs, 'claims'>): AuditPlan {
  checkInputs(args);
  const schedule = scheduleOf(args);
  const from = Math.max(args.now - args.lookbackMs, args.notBefore ?? Number.NEGATIVE_INFINITY);
  const fires = schedule.firesBetween(from, args.now + 1, AUDIT_LIMITS.maxWindows + 1);
  if (fires.length > AUDIT_LIMITS.maxWindows) throw tooManyWindows(args, schedule, from, fires);
  return { schedule, from, fires };
}

/**
 * Counts an audit into the job's metrics (dimension JobId): WindowMissing and WindowIncomplete,
 * zero included, so their alarms always have a data point, and WatchdogRun, whose absence pages
 * when the watchdog itself stops running.
 */
export function countWatchdogMetrics(audit: WindowAudit, metrics: JobMetrics): void {
  metrics.count(MetricName.WindowMissing, audit.counts.missing);
  metrics.count(MetricName.WindowIncomplete, audit.counts.incomplete);
  metrics.count(MetricName.WatchdogRun);
}

type Judgement = Pick<AuditedWindow, 'verdict' | 'state' | 'dueBy' | 'reason' | 'inDoubt'>;

function judge(
  record: SlotRecord | undefined,
  scheduled: number,
  now: number,
  graceMs: number,
  deadlineMs: number,
): Judgement {
  if (!record) {
    const dueBy = scheduled + graceMs;
    return now < dueBy
      ? { verdict: 'pending', dueBy, reason: `no slot record yet; missing if there is none by ${iso(dueBy)}` }
      : {
          verdict: 'missing',
          dueBy,
          reason:
            `no slot record ${duration(now - scheduled)} after its scheduled time (grace ${duration(graceMs)}): ` +
            'the schedule did not fire, or no delivery of it ran',
        };
  }
  const state = record.state;
  const dueBy = record.deadline ?? scheduled + deadlineMs;
  const inDoubt = record.summary ? { inDoubt: record.summary.inDoubt } : {};
  switch (state) {
    case SlotState.Done:
      return { verdict: 'ok', state, dueBy, reason: `DONE${summaryText(record)}`, ...inDoubt };
    case SlotState.Partial:
      return {
        verdict: 'partial',
        state,
        dueBy,
        reason: `PARTIAL${summaryText(record)}: effects that failed for good page through EffectFailed`,
        ...inDoubt,
      };
    case SlotState.Stuck:
      return {
        verdict: 'incomplete',
        state,
        dueBy,
        reason: `STUCK: ${safeErrorText(record.lastError ?? 'continuation gave up')}`,
      };
    case SlotState.Failed:
      return {
        verdict: 'incomplete',
        state,
        dueBy,
        reason: `FAILED after ${record.failures} failed runs${record.lastError ? `: ${safeErrorText(record.lastError)}` : ''}`,
      };
    case SlotState.Running:
    case SlotState.Released:
    case SlotState.Sharded: {
      const waiting =
        state === SlotState.Sharded
          ? `, ${record.finishedShards?.length ?? 0} of ${record.shards ?? '?'} shards finished`
          : record.resumeAfter !== undefined && record.resumeAfter > now
            ? `, waiting for retries (or an operator's hold) until ${iso(record.resumeAfter)}`
            : '';
      return now > dueBy
        ? {
            verdict: 'incomplete',
            state,
            dueBy,
            reason: `${state} past its deadline ${iso(dueBy)} (${duration(now - dueBy)} ago)${waiting}`,
          }
        : { verdict: 'pending', state, dueBy, reason: `${state}, to finish by ${iso(dueBy)}${waiting}` };
    }
    default:
      return state satisfies never;
  }
}

function summaryText(record: SlotRecord): string {
  const s = record.summary;
  if (!s) return '';
  return `: ${s.done} done, ${s.inDoubt} in doubt, ${s.failed} failed over ${s.runs} runs`;
}

function checkInputs(args: Omit<AuditWindowsArgs, 'claims'>): void {
  try {
    assertJobId(args.jobId);
  } catch (cause) {
    if (cause instanceof InvalidEventError) throw new AuditInputError('jobId', cause.message, { cause });
    throw cause;
  }
  if (!(args.deadlineMs >= AUDIT_LIMITS.minDeadlineMs)) {
    throw new AuditInputError(
      'deadline',
      `a deadline of ${duration(args.deadlineMs)} is too short: a window is given at least a minute to finish; ` +
        "give the job's deadline (the earlier of the gap to its next window and 6 h, unless its JobSpec sets one)",
    );
  }
  if (!(args.graceMs >= 0)) {
    throw new AuditInputError(
      'grace',
      `a grace of ${duration(args.graceMs)} cannot be negative; give how long after its scheduled time a ` +
        'window may have no record (15 min suits Scheduler and Lambda retries)',
    );
  }
  if (!(args.lookbackMs > 0) || args.lookbackMs > AUDIT_LIMITS.maxLookbackMs) {
    throw new AuditInputError(
      'lookback',
      `a lookback of ${duration(args.lookbackMs)} is not more than zero and at most ${duration(AUDIT_LIMITS.maxLookbackMs)}: ` +
        `slot records are certain to be kept only ${JOB_DEFAULTS.retentionDays} days minus one, so an older window ` +
        'without a record proves nothing; give 48 h, or at most that',
    );
  }
  for (const [input, value] of [
    ['rateStart', args.rateStart],
    ['notBefore', args.notBefore],
  ] as const) {
    if (value !== undefined && !Number.isFinite(value)) {
      throw new AuditInputError(
        input,
        `${input} is ${String(value)}; give an instant (epoch ms, or ISO 8601)`,
      );
    }
  }
}

function scheduleOf(args: Omit<AuditWindowsArgs, 'claims'>): JobSchedule {
  try {
    return new JobSchedule(args.schedule, args.rateStart !== undefined ? { rateStart: args.rateStart } : {});
  } catch (cause) {
    if (!(cause instanceof ScheduleError)) throw cause;
    throw new AuditInputError(
      'schedule',
      `the schedule ${JSON.stringify(args.schedule.expression)} (${args.schedule.timeZone ?? 'UTC'}) of job ` +
        `'${args.jobId}' cannot be read: ${cause.message}`,
      { cause },
    );
  }
}

function tooManyWindows(
  args: Omit<AuditWindowsArgs, 'claims'>,
  schedule: JobSchedule,
  from: number,
  fires: readonly Date[],
): AuditInputError {
  // Counting every window of a runaway range would be the work the cap is there to avoid: the first
  // maxWindows + 1 of them tell how much of the lookback fits.
  const covered = (fires.at(-1)?.getTime() ?? args.now) - from;
  const fitting = Math.max(HOUR_MS, Math.floor(covered / HOUR_MS) * HOUR_MS);
  return new AuditInputError(
    'lookback',
    `${schedule.expression.source} (${schedule.timeZone}) fires more than ${AUDIT_LIMITS.maxWindows} times in a ` +
      `${duration(args.lookbackMs)} lookback, more windows than one audit reads; shorten the lookback to ` +
      `${duration(fitting)} or less (the watchdog runs every 15 minutes, so a short lookback still sees every window)`,
  );
}

/** `2026-11-30T06:00:00Z` */
function iso(millis: number): string {
  return windowOf(millis);
}

/** A duration as an operator reads it: `48 h`, `15 min`, `2 d 3 h`, `30 s`. */
export function duration(ms: number): string {
  if (!Number.isFinite(ms)) return String(ms);
  const sign = ms < 0 ? '-' : '';
  let rest = Math.abs(ms);
  if (rest < MINUTE_MS) return `${sign}${Math.round(rest / 1000)} s`;
  const days = Math.floor(rest / DAY_MS);
  rest -= days * DAY_MS;
  const hours = Math.floor(rest / HOUR_MS);
  rest -= hours * HOUR_MS;
  const minutes = Math.floor(rest / MINUTE_MS);
  // Days alone read badly under three: 48 h, not 2 d.
  const parts =
    days >= 3
      ? [`${days} d`, hours ? `${hours} h` : '']
      : [
          days * 24 + hours ? `${days * 24 + hours} h` : '',
          minutes && days * 24 + hours < 24 ? `${minutes} min` : '',
        ];
  return `${sign}${parts.filter(Boolean).join(' ')}`;
}
