/**
 * The six fields of an AWS cron expression, the values and wildcards each takes, as the EventBridge
 * Scheduler guide documents them (Schedule types, Cron-based schedules):
 *
 * | field        | values                    | wildcards     |
 * | ------------ | ------------------------- | ------------- |
 * | minutes      | 0-59                      | , - * /       |
 * | hours        | 0-23                      | , - * /       |
 * | day-of-month | 1-31                      | , - * ? / L W |
 * | month        | 1-12 or JAN-DEC           | , - * /       |
 * | day-of-week  | 1-7 or SUN-SAT (1 = SUN)  | , - * ? L #   |
 * | year         | 1970-2199                 | , - * /       |
 *
 * and, from the same guide: `?` in exactly one of day-of-month and day-of-week; with `#` the
 * day-of-week field holds one expression only (`3#1,6#3` is refused). Scheduler's cron is Quartz's,
 * whose rules decide what the guide leaves open: `L`, `LW` and `nW` stand alone in day-of-month,
 * `L` and `nL` alone in day-of-week, names in any case, `a-b/n` ranges with an increment.
 */

/** A cron field's name, as the AWS guide writes it. */
export type CronFieldName = 'minutes' | 'hours' | 'day-of-month' | 'month' | 'day-of-week' | 'year';

/** Why a field was refused: the reason reads after `has "…" in the <field> field, `. */
export interface CronFieldProblem {
  /** What is wrong, e.g. `which takes 1-7 (1 = SUN, 7 = SAT) or SUN-SAT: 8 is outside it`. */
  readonly reason: string;
  /** What to write instead. */
  readonly fix: string;
}

/** What one field takes. */
export interface CronFieldRule {
  readonly name: CronFieldName;
  /** The smallest and largest value. */
  readonly min: number;
  readonly max: number;
  /** Names for the values, from `min` on (JAN = 1, SUN = 1). */
  readonly names?: readonly string[];
  /** The values, for messages. */
  readonly values: string;
  /** The wildcards the guide lists for the field, space-separated. */
  readonly wildcards: string;
  /** What to write instead of a value out of range. */
  readonly rangeFix: string;
}

const MONTHS = ['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC'];
const WEEKDAYS = ['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'];

/** The last year Scheduler's year field takes: no schedule fires after 2199. */
export const LAST_CRON_YEAR = 2199;

/** The fields in the order AWS writes them. */
export const AWS_CRON_FIELDS: readonly CronFieldRule[] = [
  { name: 'minutes', min: 0, max: 59, values: '0-59', wildcards: ', - * /', rangeFix: 'use minutes 0 to 59' },
  { name: 'hours', min: 0, max: 23, values: '0-23', wildcards: ', - * /', rangeFix: 'use hours 0 to 23' },
  {
    name: 'day-of-month',
    min: 1,
    max: 31,
    values: '1-31',
    wildcards: ', - * ? / L W',
    rangeFix: 'use days 1 to 31, or L for the last day of the month',
  },
  {
    name: 'month',
    min: 1,
    max: 12,
    names: MONTHS,
    values: '1-12 or JAN-DEC',
    wildcards: ', - * /',
    rangeFix: 'use months 1 to 12 or JAN to DEC',
  },
  {
    name: 'day-of-week',
    min: 1,
    max: 7,
    names: WEEKDAYS,
    values: '1-7 (1 = SUN, 7 = SAT) or SUN-SAT',
    wildcards: ', - * ? L #',
    rangeFix: 'AWS counts weekdays 1 to 7 from Sunday: write 1 or SUN for Sunday, 7 or SAT for Saturday',
  },
  {
    name: 'year',
    min: 1970,
    max: LAST_CRON_YEAR,
    values: `1970-${LAST_CRON_YEAR}`,
    wildcards: ', - * /',
    rangeFix: `use years 1970 to ${LAST_CRON_YEAR}, or * for every year`,
  },
];

const REFERENCE = 'see "Cron-based schedules" in the EventBridge Scheduler User Guide';
const ITEM = /^(\*|[0-9A-Z]+|[0-9A-Z]+-[0-9A-Z]+)(?:\/([0-9]+))?$/;

/**
 * Checks one field as written in a six-field AWS cron expression (`fields`, for fixes that quote
 * the expression). Returns undefined when Scheduler takes it. `?` is only checked for being in the
 * right field here; that exactly one of the two day fields holds it is the caller's check.
 */
export function checkCronField(
  rule: CronFieldRule,
  text: string,
  fields: readonly string[],
): CronFieldProblem | undefined {
  const value = text.toUpperCase();
  const allows = (wildcard: string) => rule.wildcards.split(' ').includes(wildcard);
  if (value === '?') {
    return allows('?')
      ? undefined
      : {
          reason: 'where ? is not allowed (only day-of-month or day-of-week take it)',
          fix: 'write * for every value',
        };
  }
  const special = rule.name === 'day-of-month' ? dayOfMonthSpecial(rule, value) : undefined;
  if (special !== undefined) return special === 'ok' ? undefined : special;
  if (rule.name === 'day-of-week') {
    const weekday = dayOfWeekSpecial(rule, value, fields);
    if (weekday !== undefined) return weekday === 'ok' ? undefined : weekday;
  }
  for (const item of value.split(',')) {
    const problem = checkItem(rule, item, allows('/'));
    if (problem) return problem;
  }
  return undefined;
}

/** `L`, `LW` and `nW` in day-of-month: each only as the field's one value. */
function dayOfMonthSpecial(rule: CronFieldRule, value: string): CronFieldProblem | 'ok' | undefined {
  if (!/[LW]/.test(value)) return undefined;
  if (value === 'L' || value === 'LW') return 'ok';
  const weekdayNearest = /^([0-9]+)W$/.exec(value);
  if (weekdayNearest) return outOfRange(rule, Number(weekdayNearest[1])) ?? 'ok';
  return {
    reason:
      'where L and W stand alone: L (the last day), LW (the last weekday) or nW (the weekday nearest day n)',
    fix: 'write one of L, LW or a single nW such as 15W as the whole day-of-month field',
  };
}

/** `L`, `nL` and `n#k` in day-of-week: each only as the field's one value. */
function dayOfWeekSpecial(
  rule: CronFieldRule,
  value: string,
  fields: readonly string[],
): CronFieldProblem | 'ok' | undefined {
  if (value.includes('#')) {
    const nth = /^([0-9]+|[A-Z]+)#([0-9]+)$/.exec(value);
    if (!nth) {
      const items = value.split(',');
      const oneEach = items.map((item) => `cron(${[...fields.slice(0, 4), item, fields[5]].join(' ')})`);
      return {
        reason:
          'where # may only be the one expression: Scheduler reads a list with # as several expressions and refuses it',
        fix:
          items.length > 1 && items.every((item) => /^[0-9A-Z]+#[0-9]+$/.test(item))
            ? `create one schedule per nth weekday: ${oneEach.join(' and ')}`
            : 'write a single n#k, e.g. 6#3 for the third Friday',
      };
    }
    const weekday = weekdayOf(rule, nth[1]!);
    if (typeof weekday !== 'number') return weekday;
    const k = Number(nth[2]);
    if (k < 1 || k > 5) {
      return {
        reason: `where #${nth[2]} asks for a weekday's ${nth[2]}th time in a month; a month has 1 to 5 of each`,
        fix: 'write #1 to #5 after the weekday, or nL for the last one (6L: the last Friday)',
      };
    }
    return 'ok';
  }
  if (!value.includes('L')) return undefined;
  if (value === 'L') return 'ok';
  const last = /^([0-9]+|[A-Z]+?)L$/.exec(value);
  if (last) {
    const weekday = weekdayOf(rule, last[1]!);
    return typeof weekday === 'number' ? 'ok' : weekday;
  }
  return {
    reason:
      'where L stands alone: L (Saturday, the last day of the week) or nL (the last weekday n of the month)',
    fix: 'write L or a single nL such as 6L (the last Friday) as the whole day-of-week field',
  };
}

function weekdayOf(rule: CronFieldRule, text: string): number | CronFieldProblem {
  const value = fieldValue(rule, text);
  return typeof value === 'number' ? (outOfRange(rule, value) ?? value) : value;
}

/** One comma-separated item: `*`, `a`, `a-b`, each with an optional `/n`. */
function checkItem(rule: CronFieldRule, item: string, slashAllowed: boolean): CronFieldProblem | undefined {
  const match = ITEM.exec(item);
  if (!match) {
    return {
      reason: `which takes ${rule.values} and the wildcards ${rule.wildcards}: ${JSON.stringify(item)} is none of a value, a range a-b, * or an increment a/n`,
      fix: REFERENCE,
    };
  }
  const [, base, step] = match;
  if (step !== undefined) {
    if (!slashAllowed) {
      return {
        reason: `which takes no increments (/); ${rule.name} takes ${rule.wildcards}`,
        fix: 'list the values instead, e.g. MON,WED,FRI',
      };
    }
    const span = rule.max - rule.min + 1;
    if (Number(step) < 1 || Number(step) > span) {
      return {
        reason: `whose increment /${step} is outside 1-${span}`,
        fix: `use an increment from 1 to ${span}, e.g. 0/15 for every 15 minutes`,
      };
    }
  }
  if (base === '*') return undefined;
  const [from, to] = base!.split('-') as [string, string | undefined];
  const low = fieldValue(rule, from);
  if (typeof low !== 'number') return low;
  const lowProblem = outOfRange(rule, low);
  if (lowProblem) return lowProblem;
  if (to === undefined) return undefined;
  const high = fieldValue(rule, to);
  if (typeof high !== 'number') return high;
  const highProblem = outOfRange(rule, high);
  if (highProblem) return highProblem;
  if (high < low) {
    return {
      reason: `whose range ${from}-${to} runs backwards`,
      fix: `write it as two ranges: ${low}-${rule.max},${rule.min}-${high}`,
    };
  }
  return undefined;
}

/** A number, or a name where the field has names (any case, as Quartz reads them). */
function fieldValue(rule: CronFieldRule, text: string): number | CronFieldProblem {
  if (/^[0-9]+$/.test(text)) return Number(text);
  const index = rule.names?.indexOf(text) ?? -1;
  if (index >= 0) return rule.min + index;
  return {
    reason: `which takes ${rule.values}: ${JSON.stringify(text)} is not one of them`,
    fix: rule.names ? rule.rangeFix : `use numbers; only month and day-of-week take names`,
  };
}

function outOfRange(rule: CronFieldRule, value: number): CronFieldProblem | undefined {
  if (value >= rule.min && value <= rule.max) return undefined;
  return { reason: `which takes ${rule.values}: ${value} is outside it`, fix: rule.rangeFix };
}
