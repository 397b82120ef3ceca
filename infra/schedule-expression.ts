import { Cron } from 'croner';
import type { ScheduleSpec } from '../shared/job/job-spec.js';

/**
 * Synth-time checks of an EventBridge Scheduler expression: is it well formed, does it fire at all
 * from now on, and how long can the gap between two fires be (the missed-run alarm's window).
 *
 * Cron expressions are checked with croner after translating AWS's 6-field form
 * (`minutes hours day-of-month month day-of-week year`). What this cannot check, and leaves to
 * Scheduler's own validation at deploy time:
 * - Scheduler's exact daylight-saving rules: croner runs a fixed-time job once after a skipped hour
 *   and once in a repeated hour, and the gaps computed here follow croner's rules.
 * - Numeric ranges that croner accepts more loosely than AWS (AWS years are 1970-2199).
 * - `rate()` unit plurality (`rate(1 minutes)` is accepted here).
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
}

/** An `at()` schedule: it fires once. */
export interface OneTimeSchedule {
  readonly kind: 'at';
  readonly expression: string;
  readonly timeZone: string;
  readonly nextFire: Date;
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

/** Why an expression was refused: what is wrong and what to do. */
export interface ScheduleProblem {
  /** Which part of the ScheduleSpec is wrong. */
  readonly field: 'expression' | 'timeZone';
  readonly problem: string;
  readonly fix: string;
}

/** The outcome of analysing a schedule: a bad expression is an expected outcome, not an exception. */
export type ScheduleAnalysis =
  | { readonly ok: true; readonly schedule: AnalysedSchedule }
  | ({ readonly ok: false } & ScheduleProblem);

/** Fires followed when measuring a cron's longest gap (about 0.5 s; a 15-minute cron covers 104 days). */
export const MAX_FIRES_WALKED = 10_000;
const HORIZON_MS = 400 * 24 * 3600 * 1000;

const RATE = /^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$/;
const CRON = /^cron\((.*)\)$/;
const AT = /^at\((\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\)$/;
const UNIT_MS: Record<string, number> = { minute: 60_000, hour: 3_600_000, day: 86_400_000 };

/**
 * Analyses `spec` as of `from`. `gapLimitMs` lets the cron walk stop as soon as one gap reaches
 * it (the caller caps there anyway), which keeps sparse crons cheap.
 */
export function analyseSchedule(
  spec: ScheduleSpec,
  from: Date,
  options: { readonly gapLimitMs?: number } = {},
): ScheduleAnalysis {
  const expression = spec.expression.trim();
  const timeZone = spec.timeZone ?? 'UTC';
  if (!isKnownTimeZone(timeZone)) {
    return {
      ok: false,
      field: 'timeZone',
      problem: `${JSON.stringify(timeZone)} is not a time zone this Node.js knows (Intl)`,
      fix: 'use an IANA name such as "Europe/Moscow" or "UTC"',
    };
  }
  const rate = RATE.exec(expression);
  if (rate) return analyseRate(expression, timeZone, Number(rate[1]), rate[2]!.replace(/s$/, ''), from);
  const cron = CRON.exec(expression);
  if (cron)
    return analyseCron(expression, timeZone, cron[1]!, from, options.gapLimitMs ?? Number.POSITIVE_INFINITY);
  if (AT.test(expression)) return analyseAt(expression, timeZone, from);
  return {
    ok: false,
    field: 'expression',
    problem: `${JSON.stringify(expression)} is not a Scheduler expression`,
    fix: 'write cron(minutes hours day-of-month month day-of-week year), rate(15 minutes) or at(2026-12-01T09:00:00)',
  };
}

function analyseRate(
  expression: string,
  timeZone: string,
  value: number,
  unit: string,
  from: Date,
): ScheduleAnalysis {
  if (value < 1) {
    return {
      ok: false,
      field: 'expression',
      problem: `${JSON.stringify(expression)} has a rate of ${value}`,
      fix: 'use a rate of at least 1, e.g. rate(1 minute)',
    };
  }
  const ms = value * UNIT_MS[unit]!;
  return {
    ok: true,
    schedule: {
      kind: 'rate',
      expression,
      timeZone,
      nextFire: new Date(from.getTime() + ms),
      longestGap: { ms, basis: 'exact' },
    },
  };
}

/** AWS cron fields, in order, with the characters AWS allows in each. */
const CRON_FIELDS = [
  { name: 'minutes', allowed: /^[0-9,\-*/]+$/ },
  { name: 'hours', allowed: /^[0-9,\-*/]+$/ },
  { name: 'day-of-month', allowed: /^[0-9,\-*/?LW]+$/ },
  { name: 'month', allowed: /^[0-9A-Za-z,\-*/]+$/ },
  { name: 'day-of-week', allowed: /^[0-9A-Za-z,\-*?L#]+$/ },
  { name: 'year', allowed: /^[0-9,\-*/]+$/ },
] as const;

function analyseCron(
  expression: string,
  timeZone: string,
  body: string,
  from: Date,
  gapLimitMs: number,
): ScheduleAnalysis {
  const fields = body.trim().split(/\s+/);
  const refuse = (problem: string, fix: string): ScheduleAnalysis => ({
    ok: false,
    field: 'expression',
    problem: `${JSON.stringify(expression)} ${problem}`,
    fix,
  });
  if (fields.length !== 6) {
    return refuse(
      `has ${fields.length} fields`,
      'AWS cron takes 6: cron(minutes hours day-of-month month day-of-week year), e.g. cron(0 9 ? * MON *)',
    );
  }
  for (const [i, field] of CRON_FIELDS.entries()) {
    if (!field.allowed.test(fields[i]!)) {
      return refuse(
        `has ${JSON.stringify(fields[i])} in the ${field.name} field`,
        `see the AWS cron reference for ${field.name}`,
      );
    }
  }
  const [, , dayOfMonth, month, dayOfWeek] = fields as [string, string, string, string, string, string];
  if ((dayOfMonth === '?') === (dayOfWeek === '?')) {
    return refuse(
      'sets both day-of-month and day-of-week, or neither',
      'put ? in exactly one of them, e.g. cron(0 9 ? * MON *) or cron(0 9 1 * ? *)',
    );
  }
  let cron: Cron;
  try {
    cron = new Cron(toCronerPattern(fields), {
      timezone: timeZone,
      mode: '7-part',
      // AWS numbers weekdays 1-7 from Sunday, as Quartz does.
      alternativeWeekdays: true,
      // AWS writes steps as 0/15; croner calls that a "sloppy" range.
      sloppyRanges: true,
      paused: true,
    });
  } catch (error) {
    return refuse(
      `cannot be read (${(error as Error).message})`,
      'correct the field named; see the AWS cron reference',
    );
  }
  const nextFire = cron.nextRun(from);
  if (!nextFire) {
    const impossibleDay = impossibleDayOfMonth(dayOfMonth, month);
    return refuse(
      `never fires after ${from.toISOString()}${impossibleDay ? ` (${impossibleDay})` : ''}`,
      'correct the day-of-month, month and year fields so that some date matches; for the last day of a month use L',
    );
  }
  return {
    ok: true,
    schedule: {
      kind: 'cron',
      expression,
      timeZone,
      nextFire,
      longestGap: longestCronGap(cron, nextFire, gapLimitMs),
    },
  };
}

/**
 * AWS `cron(m h dom mon dow y)` as a croner 7-part pattern (seconds first). The one AWS form croner
 * lacks is a bare `L` in day-of-week, Quartz for "the last day of the week": Saturday.
 */
function toCronerPattern(fields: readonly string[]): string {
  const [minutes, hours, dayOfMonth, month, dayOfWeek, year] = fields;
  return ['0', minutes, hours, dayOfMonth, month, dayOfWeek === 'L' ? '7' : dayOfWeek, year].join(' ');
}

/** Walks the fires of the coming year and returns the longest gap between two consecutive ones. */
function longestCronGap(cron: Cron, first: Date, gapLimitMs: number): LongestGap {
  const horizon = first.getTime() + HORIZON_MS;
  let previous = first;
  let longest = 0;
  for (let walked = 0; walked < MAX_FIRES_WALKED; walked++) {
    const next = cron.nextRun(previous);
    // A cron whose year field ends has no gap after its last fire; the alarm then sees silence.
    if (!next) return { ms: longest === 0 ? Number.POSITIVE_INFINITY : longest, basis: 'at-least' };
    longest = Math.max(longest, next.getTime() - previous.getTime());
    if (longest >= gapLimitMs) return { ms: longest, basis: 'at-least' };
    if (next.getTime() > horizon) return { ms: longest, basis: 'exact' };
    previous = next;
  }
  return { ms: longest, basis: 'at-least' };
}

const DAYS_IN_MONTH = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
const MONTH_NAMES = ['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC'];

/** For the error message: "day-of-month 31 does not occur in month 2" when that is why. */
function impossibleDayOfMonth(dayOfMonth: string, month: string): string | undefined {
  if (!/^\d+$/.test(dayOfMonth)) return undefined;
  const day = Number(dayOfMonth);
  const months = month
    .split(',')
    .map((m) => (/^\d+$/.test(m) ? Number(m) : MONTH_NAMES.indexOf(m.toUpperCase()) + 1));
  if (months.some((m) => m < 1 || m > 12)) return undefined;
  if (months.every((m) => day > DAYS_IN_MONTH[m - 1]!)) {
    return `day-of-month ${day} does not occur in month ${month}`;
  }
  return undefined;
}

function analyseAt(expression: string, timeZone: string, from: Date): ScheduleAnalysis {
  const local = expression.slice(3, -1);
  let fire: Date | null;
  try {
    fire = new Cron(local, { timezone: timeZone, paused: true }).nextRun(from);
  } catch (error) {
    return {
      ok: false,
      field: 'expression',
      problem: `${JSON.stringify(expression)} is not a valid date and time (${(error as Error).message})`,
      fix: 'write at(yyyy-mm-ddThh:mm:ss) in the schedule time zone',
    };
  }
  if (!fire) {
    return {
      ok: false,
      field: 'expression',
      problem: `${JSON.stringify(expression)} never fires: ${local} in ${timeZone} is before ${from.toISOString()}`,
      fix: 'move the date into the future, or remove the one-time job once it has run',
    };
  }
  return { ok: true, schedule: { kind: 'at', expression, timeZone, nextFire: fire } };
}

/** True when Intl knows the IANA time zone (the runtime and Scheduler read the same database). */
export function isKnownTimeZone(timeZone: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone });
    return true;
  } catch {
    return false;
  }
}
