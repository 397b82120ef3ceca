import type { ScheduleSpec } from '../job/job-spec.js';
import { LAST_CRON_YEAR } from './aws-cron-fields.js';
import { JobSchedule } from './fire-times.js';
import {
  type CronExpression,
  impossibleDayOfMonth,
  parseSchedule,
  type ScheduleProblem,
  wallClockCron,
} from './schedule-expression.js';
import { formatWallClock, instantsAtWallClock, wallClockAt } from './time-zone.js';

/**
 * Synth-time checks of an EventBridge Scheduler expression (the ScheduledJob construct's): is it
 * well formed, does it fire at all from now on, and how far apart and how close can two fires be
 * (the shortest gap bounds a job's default deadline). Fire times come from JobSchedule, the same computation the local
 * runner and the operator CLI use, so daylight-saving nights count as Scheduler runs them.
 *
 * Left to Scheduler's own validation at deploy time: `rate()` unit plurality (`rate(1 minutes)`).
 */

/** A parsed, checked schedule. */
export type AnalysedSchedule = RecurringSchedule | OneTimeSchedule;

/** A `rate()` or `cron()` schedule. */
export interface RecurringSchedule {
  readonly kind: 'rate' | 'cron';
  readonly expression: string;
  readonly timeZone: string;
  /** The first fire after the analysis time. For `rate()`, Scheduler starts counting at creation. */
  readonly nextFire: Date;
  /** The longest time between two consecutive fires over the coming year, as far as it was followed. */
  readonly longestGap: LongestGap;
  /**
   * The shortest time between two consecutive fires over the coming year: how long a window has
   * before the next one starts (a job's default deadline).
   */
  readonly shortestGap: ShortestGap;
}

/** An `at()` schedule: it fires once. */
export interface OneTimeSchedule {
  readonly kind: 'at';
  readonly expression: string;
  readonly timeZone: string;
  /** When it fires: the first instant its local time occurs. */
  readonly nextFire: Date;
  /**
   * True when `nextFire` is at or before the analysis time: the schedule has fired (or its time
   * went by before it was deployed), so there is nothing left for Scheduler to do.
   */
  readonly passed: boolean;
}

/** How far apart two consecutive fires can be. */
export interface LongestGap {
  readonly ms: number;
  /**
   * `exact`: every gap over the coming year was measured (or the gap is the rate itself).
   * `at-least`: the walk stopped once a gap reached the limit the caller cares about, or after
   * MAX_FIRES_WALKED fires; the true longest gap is this or longer.
   */
  readonly basis: 'exact' | 'at-least';
}

/** How close two consecutive fires can be. */
export interface ShortestGap {
  readonly ms: number;
  /**
   * `exact`: every gap over the coming year was measured (or the gap is the rate itself), or one
   * was a minute, the closest Scheduler fires. `at-most`: the walk stopped once the gap was down to
   * the floor the caller cares about, or after MAX_FIRES_WALKED fires; the true shortest gap is
   * this or shorter.
   */
  readonly basis: 'exact' | 'at-most';
}

export type { ScheduleProblem } from './schedule-expression.js';
export { checkTimeZone, isKnownTimeZone } from './time-zone.js';

/** The outcome of analysing a schedule: a bad expression is an expected outcome, not an exception. */
export type ScheduleAnalysis =
  | { readonly ok: true; readonly schedule: AnalysedSchedule }
  | ({ readonly ok: false } & ScheduleProblem);

/** Fires followed when measuring a cron's longest gap (a 15-minute cron covers 104 days). */
export const MAX_FIRES_WALKED = 10_000;
const HORIZON_MS = 400 * 24 * 3600 * 1000;

/**
 * Analyses `spec` as of `from`. `gapLimitMs` and `shortestGapFloorMs` let the cron walk stop as
 * soon as one gap reaches the limit and another is down to the floor (the caller caps there
 * anyway), which keeps sparse crons cheap; by default the walk measures the shortest gap down to a
 * minute.
 */
export function analyseSchedule(
  spec: ScheduleSpec,
  from: Date,
  options: { readonly gapLimitMs?: number; readonly shortestGapFloorMs?: number } = {},
): ScheduleAnalysis {
  const parsed = parseSchedule(spec);
  if (!parsed.ok) return parsed;
  const { expression, timeZone } = parsed;
  const base = { expression: expression.source, timeZone };
  switch (expression.kind) {
    case 'rate':
      return {
        ok: true,
        schedule: {
          kind: 'rate',
          ...base,
          nextFire: new Date(from.getTime() + expression.everyMs),
          longestGap: { ms: expression.everyMs, basis: 'exact' },
          shortestGap: { ms: expression.everyMs, basis: 'exact' },
        },
      };
    case 'at': {
      const [fire] = instantsAtWallClock(expression.wallClock, timeZone);
      if (fire === undefined) {
        return {
          ok: false,
          field: 'expression',
          problem: `${JSON.stringify(expression.source)} never fires: ${expression.local} does not exist in ${timeZone} (the clocks skip it that night)`,
          fix: 'move the time out of the hour the clocks skip',
        };
      }
      return {
        ok: true,
        schedule: { kind: 'at', ...base, nextFire: new Date(fire), passed: fire <= from.getTime() },
      };
    }
    case 'cron': {
      const fires = new JobSchedule(spec).firesAfter(from);
      const first = fires.next();
      if (first.done) return neverFires(expression, timeZone, from);
      return {
        ok: true,
        schedule: {
          kind: 'cron',
          ...base,
          nextFire: first.value,
          ...measureGaps(first.value, fires, {
            gapLimitMs: options.gapLimitMs ?? Number.POSITIVE_INFINITY,
            shortestGapFloorMs: options.shortestGapFloorMs ?? CLOSEST_FIRES_MS,
          }),
        },
      };
    }
    default:
      return expression satisfies never;
  }
}

/**
 * Why a cron has no fire after `from`: its fields match no date up to Scheduler's last year, or
 * every time they match is one the clocks skip (JobSchedule stops looking after
 * MAX_SKIPPED_IN_A_ROW of those in a row).
 */
function neverFires(expression: CronExpression, timeZone: string, from: Date): ScheduleAnalysis {
  const source = JSON.stringify(expression.source);
  const match = wallClockCron(expression.cronerPattern).nextRun(
    new Date(wallClockAt(from.getTime(), timeZone)),
  );
  if (match && match.getUTCFullYear() <= LAST_CRON_YEAR) {
    return {
      ok: false,
      field: 'expression',
      problem:
        `${source} never fires in ${timeZone}: every local time it matches is one the clocks jump over when ` +
        `they go forward (the first: ${formatWallClock(match.getTime())})`,
      fix: 'Scheduler skips a local time that does not exist; move the hours and minutes out of the skipped hour, or pick days on which the clocks do not change',
    };
  }
  const impossibleDay = impossibleDayOfMonth(expression);
  return {
    ok: false,
    field: 'expression',
    problem: `${source} never fires after ${from.toISOString()}${impossibleDay ? ` (${impossibleDay})` : ''}`,
    fix: 'correct the day-of-month, month and year fields so that some date matches; for the last day of a month use L',
  };
}

/** Cron fires are whole minutes: no two consecutive ones are closer than this. */
const CLOSEST_FIRES_MS = 60_000;

/**
 * Walks the fires of the coming year and measures the longest and the shortest gap between two
 * consecutive ones in one walk. It stops early once neither can matter more to the caller: the
 * longest has reached `limits.gapLimitMs` and the shortest is down to `limits.shortestGapFloorMs`.
 */
function measureGaps(
  first: Date,
  fires: Iterator<Date>,
  limits: { readonly gapLimitMs: number; readonly shortestGapFloorMs: number },
): { longestGap: LongestGap; shortestGap: ShortestGap } {
  const horizon = first.getTime() + HORIZON_MS;
  let previous = first;
  let longest = 0;
  let shortest = Number.POSITIVE_INFINITY;
  for (let walked = 0; walked < MAX_FIRES_WALKED; walked++) {
    const next = fires.next();
    // A cron whose year field ends has no gap after its last fire; the alarm then sees silence.
    if (next.done) {
      return {
        longestGap: { ms: longest === 0 ? Number.POSITIVE_INFINITY : longest, basis: 'at-least' },
        shortestGap: { ms: shortest, basis: 'exact' },
      };
    }
    const gap = next.value.getTime() - previous.getTime();
    longest = Math.max(longest, gap);
    shortest = Math.min(shortest, gap);
    if (next.value.getTime() > horizon) {
      return { longestGap: { ms: longest, basis: 'exact' }, shortestGap: { ms: shortest, basis: 'exact' } };
    }
    if (longest >= limits.gapLimitMs && shortest <= limits.shortestGapFloorMs) {
      return {
        longestGap: { ms: longest, basis: 'at-least' },
        shortestGap: { ms: shortest, basis: shortest <= CLOSEST_FIRES_MS ? 'exact' : 'at-most' },
      };
    }
    previous = next.value;
  }
  return { longestGap: { ms: longest, basis: 'at-least' }, shortestGap: { ms: shortest, basis: 'at-most' } };
}
