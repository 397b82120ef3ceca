import { describe, expect, it } from 'vitest';
import { IANA_TIME_ZONE_NAMES } from '../../shared/schedule/iana-time-zones.js';
import { parseSchedule } from '../../shared/schedule/schedule-expression.js';
import { checkTimeZone } from '../../shared/schedule/time-zone.js';

/**
 * The rules of the EventBridge Scheduler guide ("Cron-based schedules", "Time zones on EventBridge
 * Scheduler"), row by row: what Scheduler takes is read, what it refuses is refused at synth with
 * the field, the value and the fix, instead of failing the deploy or (worse) firing on other days.
 */

function refusal(expression: string, timeZone = 'UTC') {
  const result = parseSchedule({ expression, timeZone });
  if (result.ok) throw new Error(`${expression} in ${timeZone} was accepted`);
  return result;
}

describe('cron fields: what Scheduler takes is read', () => {
  it.each([
    // Day-of-week: 1-7 from Sunday or SUN-SAT, in any case; L, nL and n#k alone.
    'cron(0 9 ? * MON *)',
    'cron(0 9 ? * 1 *)',
    'cron(0 9 ? * 7 *)',
    'cron(0 9 ? * SUN-SAT *)',
    'cron(0 9 ? * mon-fri *)',
    'cron(0 9 ? * 2,4,6 *)',
    'cron(0 9 ? * 6#3 *)',
    'cron(0 9 ? * FRI#5 *)',
    'cron(0 9 ? * 6L *)',
    'cron(0 9 ? * FRIL *)',
    'cron(0 9 ? * L *)',
    'cron(0 9 ? * * *)',
    // Day-of-month: 1-31, L, LW, nW.
    'cron(0 9 L * ? *)',
    'cron(0 9 LW * ? *)',
    'cron(0 9 15W * ? *)',
    'cron(0 9 1-31 * ? *)',
    'cron(0 9 1/7 * ? *)',
    // Minutes, hours, months: values, ranges, lists, increments.
    'cron(0/15 * * * ? *)',
    'cron(1/10 * * * ? *)',
    'cron(*/5 8-17 ? * MON-FRI *)',
    'cron(0-30/10 9 * * ? *)',
    'cron(59 23 31 12 ? *)',
    'cron(0 0 1 JAN,JUL ? *)',
    'cron(0 0 1 jan-jun/2 ? *)',
    // Year: 1970-2199.
    'cron(15 10 ? * 6L 2022-2023)',
    'cron(0 9 * * ? 1970)',
    'cron(0 9 * * ? 2199)',
    'cron(0 9 * * ? 1970-2199)',
    'cron(0 9 * * ? 2026/2)',
    'cron(0 9 * * ? 2026,2030)',
  ])('reads %s', (expression) => {
    const result = parseSchedule({ expression });
    expect(result.ok ? result.expression.kind : `${result.problem}; ${result.fix}`).toBe('cron');
  });
});

describe('cron fields: what Scheduler refuses is refused, naming the field, the value and the fix', () => {
  // [expression, field named, value quoted, problem, fix]
  const REFUSED: readonly [string, string, string, RegExp, RegExp][] = [
    // Day-of-week 8 fired on Sundays (croner wraps 8 to 1); 0 is not AWS's Sunday either.
    [
      'cron(0 9 ? * 8 *)',
      'day-of-week',
      '8',
      /takes 1-7 \(1 = SUN, 7 = SAT\) or SUN-SAT: 8 is outside it/,
      /1 or SUN for Sunday/,
    ],
    ['cron(0 9 ? * 0 *)', 'day-of-week', '0', /0 is outside it/, /1 or SUN for Sunday/],
    ['cron(0 9 ? * 2-8 *)', 'day-of-week', '2-8', /8 is outside it/, /7 or SAT for Saturday/],
    ['cron(0 9 ? * FUN *)', 'day-of-week', 'FUN', /"FUN" is not one of them/, /SUN for Sunday/],
    // # is one expression only (the guide's own example), with a weekday and 1-5.
    [
      'cron(0 9 ? * 3#1,6#3 *)',
      'day-of-week',
      '3#1,6#3',
      /# may only be the one expression/,
      /one schedule per nth weekday: cron\(0 9 \? \* 3#1 \*\) and cron\(0 9 \? \* 6#3 \*\)/,
    ],
    ['cron(0 9 ? * MON,3#1 *)', 'day-of-week', 'MON,3#1', /# may only be the one expression/, /a single n#k/],
    ['cron(0 9 ? * 6#6 *)', 'day-of-week', '6#6', /a month has 1 to 5 of each/, /#1 to #5/],
    ['cron(0 9 ? * 8#1 *)', 'day-of-week', '8#1', /8 is outside it/, /7 or SAT/],
    ['cron(0 9 ? * 2L,3 *)', 'day-of-week', '2L,3', /L stands alone/, /a single nL/],
    ['cron(0 9 ? * MON/2 *)', 'day-of-week', 'MON/2', /takes no increments/, /list the values/],
    // Day-of-month.
    ['cron(0 9 32 * ? *)', 'day-of-month', '32', /takes 1-31: 32 is outside it/, /days 1 to 31/],
    ['cron(0 9 0 * ? *)', 'day-of-month', '0', /0 is outside it/, /days 1 to 31/],
    ['cron(0 9 L,15 * ? *)', 'day-of-month', 'L,15', /L and W stand alone/, /L, LW or a single nW/],
    ['cron(0 9 1-5W * ? *)', 'day-of-month', '1-5W', /L and W stand alone/, /15W/],
    ['cron(0 9 32W * ? *)', 'day-of-month', '32W', /32 is outside it/, /days 1 to 31/],
    [
      'cron(0 9 MON * ? *)',
      'day-of-month',
      'MON',
      /"MON" is not one of them/,
      /only month and day-of-week take names/,
    ],
    // Minutes, hours, month.
    ['cron(60 9 * * ? *)', 'minutes', '60', /takes 0-59: 60 is outside it/, /minutes 0 to 59/],
    ['cron(0/0 9 * * ? *)', 'minutes', '0/0', /increment \/0 is outside 1-60/, /increment from 1 to 60/],
    ['cron(0 24 * * ? *)', 'hours', '24', /takes 0-23: 24 is outside it/, /hours 0 to 23/],
    ['cron(0 L * * ? *)', 'hours', 'L', /"L" is not one of them/, /only month and day-of-week take names/],
    ['cron(0 22-2 * * ? *)', 'hours', '22-2', /range 22-2 runs backwards/, /two ranges: 22-23,0-2/],
    ['cron(0 9 1,,2 * ? *)', 'day-of-month', '1,,2', /"" is none of a value/, /Cron-based schedules/],
    ['cron(0 9 * 13 ? *)', 'month', '13', /takes 1-12 or JAN-DEC: 13 is outside it/, /JAN to DEC/],
    ['cron(0 9 ? ? MON *)', 'month', '?', /where \? is not allowed/, /write \*/],
    // Year: 1970-2199 only.
    [
      'cron(0 9 * * ? 2200)',
      'year',
      '2200',
      /takes 1970-2199: 2200 is outside it/,
      /years 1970 to 2199, or \*/,
    ],
    ['cron(0 9 * * ? 1969)', 'year', '1969', /1969 is outside it/, /years 1970 to 2199/],
    ['cron(0 9 * * ? 2026-2300)', 'year', '2026-2300', /2300 is outside it/, /years 1970 to 2199/],
  ];

  it.each(REFUSED)('refuses %s in the %s field', (expression, field, value, problem, fix) => {
    const result = refusal(expression);
    expect(result.field).toBe('expression');
    expect(result.problem).toContain(
      `${JSON.stringify(expression)} has ${JSON.stringify(value)} in the ${field} field, `,
    );
    expect(result.problem).toMatch(problem);
    expect(result.fix).toMatch(fix);
  });
});

describe('time zones: the names of the IANA database, spelled as it spells them', () => {
  it.each([
    'Europe/Moscow',
    'UTC',
    'Etc/UTC',
    'America/Argentina/Buenos_Aires',
    'Etc/GMT+5',
    // Links the database keeps for older names, and its legacy zones: Scheduler reads the database.
    'EST',
    'EST5EDT',
    'US/Eastern',
    'Asia/Calcutta',
    'Asia/Kolkata',
    'Europe/Kiev',
    'Europe/Kyiv',
  ])('takes %s', (timeZone) => {
    const result = parseSchedule({ expression: 'rate(1 hour)', timeZone });
    expect(result.ok ? result.timeZone : `${result.problem}; ${result.fix}`).toBe(timeZone);
  });

  it.each([
    ['europe/moscow', /whose names are case-sensitive/, 'write "Europe/Moscow"'],
    ['EUROPE/MOSCOW', /whose names are case-sensitive/, 'write "Europe/Moscow"'],
    ['est', /whose names are case-sensitive/, 'write "EST"'],
    ['utc', /whose names are case-sensitive/, 'write "UTC"'],
    ['us/eastern', /whose names are case-sensitive/, 'write "US/Eastern"'],
    // ICU's own abbreviations, which Node.js alone would have taken.
    [
      'PST',
      /Node\.js alone reads it as "America\/Los_Angeles"/,
      'write "America/Los_Angeles" if that is the zone meant',
    ],
    ['IST', /Node\.js alone reads it as "Asia\/Calcutta"/, 'write "Asia/Calcutta" if that is the zone meant'],
    [
      'Mars/Olympus',
      /is not a name in the IANA time zone database/,
      'use an IANA name such as "Europe/Moscow"',
    ],
    ['Factory', /is not a name in the IANA time zone database/, 'use an IANA name such as "Europe/Moscow"'],
    ['+03:00', /is not a name in the IANA time zone database/, 'use an IANA name such as "Europe/Moscow"'],
  ])('refuses %s, naming the fix', (timeZone, problem, fix) => {
    const result = refusal('rate(1 hour)', timeZone);
    expect(result.field).toBe('timeZone');
    expect(result.problem).toContain(JSON.stringify(timeZone));
    expect(result.problem).toMatch(problem);
    expect(result.fix).toContain(fix);
  });

  it('takes all 597 names of tzdata 2025b and computes in each (Intl knows every one)', () => {
    const refused = [...IANA_TIME_ZONE_NAMES].filter((name) => checkTimeZone(name) !== undefined);
    expect(IANA_TIME_ZONE_NAMES.size).toBe(597);
    expect(refused).toEqual([]);
  });
});
