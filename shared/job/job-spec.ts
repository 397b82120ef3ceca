import { defaultLeaseSafetyMarginMs } from '../slot/ports.js';
import type { AfterGrace } from './in-doubt-resolution.js';

/**
 * What a job is, as deployed: the one definition the CDK app synthesises and the local runner
 * fires, so what runs locally is what deploys. The code a job runs lives in its handler module
 * (`entry`); this is the schedule and the knobs around it.
 */
export interface JobSpec {
  /** The job id (see JOB_ID_PATTERN): part of every slot key, metric dimension and IAM condition. */
  readonly id: string;
  /** One line for dashboards and `--help`. */
  readonly description: string;
  readonly schedule: ScheduleSpec;
  /** The handler module (exports `handler`): absolute, or relative to ScheduledJob's project root. */
  readonly entry: string;
  /**
   * The lease a run holds on its slot; renewed in the background while it runs.
   * @default 60
   */
  readonly leaseSeconds?: number;
  /**
   * Effects performed at once by one run.
   * @default 16
   */
  readonly effectConcurrency?: number;
  /**
   * The Lambda timeout.
   * @default 900
   */
  readonly timeoutSeconds?: number;
  /**
   * Failed runs of one window before its slot is marked FAILED and further fires stand down.
   * @default 3
   */
  readonly maxAttempts?: number;
  /**
   * How long a window has to finish, in minutes after its scheduled time (after its first claim
   * when that comes later, so a late fire still gets the whole time). Until then a window that
   * stops with work left is resumed; past it, the next run finishes it as DONE or PARTIAL, or gives
   * it up as STUCK, and the watchdog reports it incomplete.
   * @default the earlier of the gap to the next window (the schedule's shortest gap) and 6 hours
   *   (`DEFAULT_DEADLINE_CAP_MINUTES`), but never shorter than the function timeout; see
   *   `defaultDeadlineSeconds`
   */
  readonly deadlineMinutes?: number;
  /**
   * Shards each window is split into: the window's first run sends one message per shard to the
   * job's work queue and each shard runs as its own fenced claim, in parallel, on the items whose
   * key hashes to it; the last shard to end finishes the window. A whole number from 1 to 1000
   * (`MAX_SHARDS`). The count is fixed on a window by its first claim, so changing it never re-splits
   * an open window. ScheduledJob raises `maxConcurrency` to at least this.
   * @default 1 (not split: one run at a time works through the window)
   */
  readonly shards?: number;
  /**
   * Each effect worker reserves its next recipient while its current email is being sent, so the
   * reservation's round trip hides behind the send before it (RunOptions.reserveAhead). A crash then
   * leaves up to one more recipient per worker reserved and never sent: in doubt, or settled as never
   * accepted from SES's events where the recorder is deployed. docs/design.md, "Reserving ahead".
   * @default false: at a job's SES quota (often 14/s) the send rate, not the reservation, bounds a
   *   run, so it buys nothing there; unthrottled 20 ms sends at concurrency 16 go 0.97× the
   *   unguarded loop's rate with it and 0.69× without (docs/benchmarks.md)
   */
  readonly reserveAhead?: boolean;
  /**
   * How long, in minutes after an email left in doubt was reserved (a run died between sending it
   * and recording it done), its window waits for the provider's word about it before judging it
   * without one (`inDoubtAfterGrace`). The window looks again a minute and five minutes after the
   * reservation, then at the end of this; SES reports an accepted message within seconds. Shorter
   * than the deadline, so the window can still act on what it finds. Deployed, it needs the job's
   * SES events recorded (ScheduledJob's `ses`, `recordEvents`); locally the SMTP server's log is
   * the word.
   * @default 60 when the job's SES events are recorded (at most half the deadline), else 0: nothing
   *   to wait for
   */
  readonly inDoubtGraceMinutes?: number;
  /**
   * What becomes of an email in doubt the provider said nothing of within `inDoubtGraceMinutes`.
   * `'report'`: it stays in doubt, and EffectInDoubt pages for a person to check. `'resend'`: it is
   * sent again. Probably safe, since SES reports a message it accepted within seconds, but its
   * events can be later still, or lost, and then the recipient gets the email twice.
   * @default 'report'
   */
  readonly inDoubtAfterGrace?: AfterGrace;
  /**
   * How long after a lease's end, by the clock of the run that would take it over, a crashed run's
   * window may be taken over: room for a replica whose clock runs fast (two runs can overlap only
   * when one clock is ahead by more than this plus the lease's safety margin; the effect ledger
   * still emails nobody twice then). A larger allowance delays every takeover of a crashed run by as
   * much. Seconds, to the millisecond, from 0 to less than `leaseSeconds`. See docs/operations.md,
   * "Clock skew and takeovers".
   * @default 2 (Lambda's clocks are kept well under a second apart by Amazon Time Sync), or a sixth
   *   of `leaseSeconds` when that is shorter (`defaultTakeoverSkewMs`)
   */
  readonly takeoverSkewSeconds?: number;
  /**
   * What to do with windows that passed while nothing fired (the local runner down, a schedule
   * paused): run none, the latest, or all of them, within a maximum lateness. Honoured by the local
   * runner when it starts and by the operator CLI's `backfill`. A deployed schedule never fires a
   * missed window by itself; the watchdog's WindowMissing alarm pages and an operator backfills.
   * @default { mode: 'once', maxLatenessMinutes: 1440 }
   */
  readonly catchUp?: CatchUpPolicy;
}

/** How missed windows are caught up; see JobSpec.catchUp. */
export interface CatchUpPolicy {
  /**
   * `skip`: leave every missed window missed (an operator may still backfill with an override).
   * `once`: run the most recent missed window only, as cron's "run once after downtime" does.
   * `all`: run every missed window, oldest first, each with its own scheduled time.
   */
  readonly mode: CatchUpMode;
  /**
   * Windows whose scheduled time is further back than this are not caught up; they are reported.
   * @default 1440 (a day)
   */
  readonly maxLatenessMinutes?: number;
}

/** The catch-up modes; see CatchUpPolicy.mode. */
export const CatchUpMode = { Skip: 'skip', Once: 'once', All: 'all' } as const;
export type CatchUpMode = (typeof CatchUpMode)[keyof typeof CatchUpMode];

/** An EventBridge Scheduler expression and its time zone. */
export interface ScheduleSpec {
  /** `cron(0 9 ? * MON *)`, `rate(15 minutes)` or `at(2026-12-01T09:00:00)`, as EventBridge Scheduler reads them. */
  readonly expression: string;
  /**
   * IANA time zone the expression is read in.
   * @default 'UTC'
   */
  readonly timeZone?: string;
}

/**
 * The longest default deadline: a window of a schedule that fires less often than this still has
 * to finish within 6 hours unless its JobSpec says otherwise.
 */
export const DEFAULT_DEADLINE_CAP_MINUTES = 360;

/**
 * A job's default deadline in seconds: the schedule's shortest gap between two fires (`undefined`
 * for a one-time schedule), capped at DEFAULT_DEADLINE_CAP_MINUTES, and raised to the function
 * timeout rounded up to a whole minute, so a window's first run can always use all of its time.
 */
export function defaultDeadlineSeconds(shortestGapMs: number | undefined, timeoutSeconds: number): number {
  const capSeconds = DEFAULT_DEADLINE_CAP_MINUTES * 60;
  const gapSeconds = shortestGapMs === undefined ? capSeconds : Math.floor(shortestGapMs / 1000);
  return Math.max(Math.min(gapSeconds, capSeconds), Math.ceil(timeoutSeconds / 60) * 60);
}

/**
 * The takeover skew allowance of a job that sets none: 2 s, sized for Lambda's synchronised clocks,
 * or the lease's default safety margin (a sixth of it) when that is shorter, so a short lease is not
 * held for long after it ended.
 */
export function defaultTakeoverSkewMs(leaseMs: number): number {
  return Math.min(2_000, defaultLeaseSafetyMarginMs(leaseMs));
}

/** Defaults applied wherever a JobSpec is read, by the runtime, the CDK constructs and the local runner. */
export const JOB_DEFAULTS = {
  leaseSeconds: 60,
  effectConcurrency: 16,
  timeoutSeconds: 900,
  maxAttempts: 3,
  shards: 1,
  retentionDays: 35,
  catchUp: { mode: CatchUpMode.Once, maxLatenessMinutes: 1440 },
} as const;
