import { Cron } from 'croner';
import type { ScheduleSpec } from '../job/job-spec.js';
import { AWS_CRON_FIELDS, checkCronField } from './aws-cron-fields.js';
import { checkTimeZone } from './time-zone.js';

/**
 * EventBridge Scheduler expressions, read once for everything that needs them: the CDK constructs'
 * synth-time checks (infra/) and the local runner and operator CLI, which compute fire times from
 * them (fire-times.ts). One reading, so what the CDK accepts is what runs locally.
 *
 * Cron expressions are AWS's six fields (`minutes hours day-of-month month day-of-week year`),
 * translated to a croner pattern that croner evaluates on the wall clock; the time zone is applied
 * afterwards, by fire-times.ts, with Scheduler's daylight-saving rules.
 */

/** A `cron(…)` expression: matched on the wall clock of the schedule's zone. */
export interface CronExpression {
  readonly kind: 'cron';
  readonly source: string;
  /** The six AWS fields as written. */
  readonly fields: readonly string[];
  /** The same schedule as a croner 7-part pattern (seconds first). */
  readonly cronerPattern: string;
}

/** A `rate(…)` expression: every `everyMs`, counted from the schedule's start. */
export interface RateExpression {
  readonly kind: 'rate';
  readonly source: string;
  readonly value: number;
  readonly unit: 'minute' | 'hour' | 'day';
  readonly everyMs: number;
}

/** An `at(…)` expression: once, at a wall-clock time of the schedule's zone. */
export interface AtExpression {
  readonly kind: 'at';
  readonly source: string;
  /** The local date and time, UTC-coded (see time-zone.ts), floored to the minute. */
  readonly wallClock: number;
  /** As written: `2027-01-15T09:00:00`. */
  readonly local: string;
}

/** A Scheduler expression, read: one of the three kinds. */
export type ScheduleExpression = CronExpression | RateExpression | AtExpression;

/** Why an expression was refused: what is wrong and what to do. */
export interface ScheduleProblem {
  /** Which part of the ScheduleSpec is wrong. */
  readonly field: 'expression' | 'timeZone';
  readonly problem: string;
  readonly fix: string;
}

/** A spec read and checked: its expression and its zone. */
export interface ParsedSchedule {
  readonly expression: ScheduleExpression;
  readonly timeZone: string;
}

/** A bad expression is an expected outcome of reading one, not an exception. */
export type ScheduleParseResult =
  | ({ readonly ok: true } & ParsedSchedule)
  | ({ readonly ok: false } & ScheduleProblem);

const RATE = /^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$/;
const CRON = /^cron\((.*)\)$/;
const AT = /^at\((\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\)$/;
const UNIT_MS = { minute: 60_000, hour: 3_600_000, day: 86_400_000 } as const;

/**
 * Reads a ScheduleSpec as EventBridge Scheduler would: `cron(…)`, `rate(…)` or `at(…)`, in an IANA
 * time zone (UTC when none is given).
 * @example parseSchedule({ expression: 'cron(0 9 ? * MON *)', timeZone: 'Europe/Moscow' })
 */
export function parseSchedule(spec: ScheduleSpec): ScheduleParseResult {
  const source = spec.expression.trim();
  const timeZone = spec.timeZone ?? 'UTC';
  const zoneProblem = checkTimeZone(timeZone);
  if (zoneProblem) return { ok: false, field: 'timeZone', ...zoneProblem };
  const expression = parseExpression(source);
  return 'problem' in expression ? { ok: false, ...expression } : { ok: true, expression, timeZone };
}

function parseExpression(source: string): ScheduleExpression | ScheduleProblem {
  const rate = RATE.exec(source);
  if (rate) return parseRate(source, Number(rate[1]), rate[2]!.replace(/s$/, '') as RateExpression['unit']);
  const cron = CRON.exec(source);
  if (cron) return parseCron(source, cron[1]!);
  const at = AT.exec(source);
  if (at) return parseAt(source, at);
  return {
    field: 'expression',
    problem: `${JSON.stringify(source)} is not a Scheduler expression`,
    fix: 'write cron(minutes hours day-of-month month day-of-week year), rate(15 minutes) or at(2026-12-01T09:00:00)',
  };
}

function parseRate(
  source: string,
  value: number,
  unit: RateExpression['unit'],
): RateExpression | ScheduleProblem {
  if (value < 1) {
    return {
      field: 'expression',
      problem: `${JSON.stringify(source)} has a rate of ${value}`,
      fix: 'use a rate of at least 1, e.g. rate(1 minute)',
    };
  }
  return { kind: 'rate', source, value, unit, everyMs: value * UNIT_MS[unit] };
}

function parseCron(source: string, body: string): CronExpression | ScheduleProblem {
  const fields = body.trim().split(/\s+/);
  const refuse = (problem: string, fix: string): ScheduleProblem => ({
    field: 'expression',
    problem: `${JSON.stringify(source)} ${problem}`,
    fix,
  });
  if (fields.length !== 6) {
    return refuse(
      `has ${fields.length} fields`,
      'AWS cron takes 6: cron(minutes hours day-of-month month day-of-week year), e.g. cron(0 9 ? * MON *)',
    );
  }
  for (const [i, rule] of AWS_CRON_FIELDS.entries()) {
    const text = fields[i]!;
    const problem = checkCronField(rule, text, fields);
    if (problem)
      return refuse(`has ${JSON.stringify(text)} in the ${rule.name} field, ${problem.reason}`, problem.fix);
  }
  const [, , dayOfMonth, , dayOfWeek] = fields as [string, string, string, string, string, string];
  if ((dayOfMonth === '?') === (dayOfWeek === '?')) {
    return refuse(
      'sets both day-of-month and day-of-week, or neither',
      'put ? in exactly one of them, e.g. cron(0 9 ? * MON *) or cron(0 9 1 * ? *)',
    );
  }
  const cronerPattern = toCronerPattern(fields);
  try {
    wallClockCron(cronerPattern);
  } catch (error) {
    return refuse(
      `cannot be read (${(error as Error).message})`,
      'correct the field named; see the AWS cron reference',
    );
  }
  return { kind: 'cron', source, fields, cronerPattern };
}

/**
 * AWS `cron(m h dom mon dow y)` as a croner 7-part pattern (seconds first), upper-cased as Quartz
 * reads it. The one AWS form croner lacks is a bare `L` in day-of-week, Quartz for "the last day
 * of the week": Saturday.
 */
function toCronerPattern(fields: readonly string[]): string {
  const [minutes, hours, dayOfMonth, month, dayOfWeek, year] = fields.map((field) => field.toUpperCase());
  return ['0', minutes, hours, dayOfMonth, month, dayOfWeek === 'L' ? '7' : dayOfWeek, year].join(' ');
}

/**
 * A croner job that matches the pattern on the wall clock: in UTC, which has no daylight saving, so
 * croner's own DST rules never apply and every wall-clock minute exists exactly once. The schedule's
 * real zone is applied by the caller. croner's `legacyMode` (day-of-month OR day-of-week when both
 * are set) never comes into play either: AWS requires `?` in one of them, which croner reads as `*`.
 */
export function wallClockCron(cronerPattern: string): Cron {
  return new Cron(cronerPattern, {
    timezone: 'UTC',
    mode: '7-part',
    // AWS numbers weekdays 1-7 from Sunday, as Quartz does.
    alternativeWeekdays: true,
    // AWS writes steps as 0/15; croner calls that a "sloppy" range.
    sloppyRanges: true,
    paused: true,
  });
}

function parseAt(source: string, match: RegExpExecArray): AtExpression | ScheduleProblem {
  const [y, mo, d, h, mi, s] = match.slice(1).map(Number) as [number, number, number, number, number, number];
  const wall = new Date(0);
  wall.setUTCFullYear(y, mo - 1, d);
  wall.setUTCHours(h, mi, s, 0);
  const roundTrips =
    wall.getUTCFullYear() === y &&
    wall.getUTCMonth() === mo - 1 &&
    wall.getUTCDate() === d &&
    wall.getUTCHours() === h &&
    wall.getUTCMinutes() === mi &&
    wall.getUTCSeconds() === s;
  const local = source.slice(3, -1);
  if (!roundTrips) {
    return {
      field: 'expression',
      problem: `${JSON.stringify(source)} is not a valid date and time (${local} does not exist in the calendar)`,
      fix: 'write at(yyyy-mm-ddThh:mm:ss) in the schedule time zone',
    };
  }
  // Scheduler fires at minute granularity.
  return { kind: 'at', source, local, wallClock: wall.getTime() - s * 1000 };
}

/** For the error message: "day-of-month 31 does not occur in month 2" when that is why. */
export function impossibleDayOfMonth(expression: CronExpression): string | undefined {
  const [, , dayOfMonth, month] = expression.fields as [string, string, string, string];
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

const DAYS_IN_MONTH = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
const MONTH_NAMES = ['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC'];
