import { Cron } from 'croner';
import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import { type AnalysedSchedule, analyseSchedule } from '../../shared/schedule/schedule-analysis.js';

const FROM = new Date('2026-11-29T12:00:00Z');
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

function analysed(expression: string, timeZone = 'UTC', gapLimitMs?: number): AnalysedSchedule {
  const result = analyseSchedule(
    { expression, timeZone },
    FROM,
    gapLimitMs === undefined ? {} : { gapLimitMs },
  );
  if (!result.ok) throw new Error(`${result.problem}; ${result.fix}`);
  return result.schedule;
}

function refusal(expression: string, timeZone = 'UTC') {
  const result = analyseSchedule({ expression, timeZone }, FROM);
  if (result.ok) throw new Error(`${expression} was accepted`);
  return result;
}

function nextFires(expression: string, timeZone: string, count: number): string[] {
  const fires: string[] = [];
  let from = FROM;
  for (let i = 0; i < count; i++) {
    // Only the next fire matters here: a 1 ms gap limit and no floor stop the gap walk at once.
    const result = analyseSchedule({ expression, timeZone }, from, {
      gapLimitMs: 1,
      shortestGapFloorMs: Number.POSITIVE_INFINITY,
    });
    if (!result.ok) throw new Error(result.problem);
    fires.push(result.schedule.nextFire.toISOString());
    from = result.schedule.nextFire;
  }
  return fires;
}

describe('analyseSchedule: AWS cron read through croner', () => {
  it('fires the weekly report on Mondays at 09:00 Moscow time (06:00Z), 7 days apart', () => {
    const schedule = analysed('cron(0 9 ? * MON *)', 'Europe/Moscow');
    expect(schedule.kind).toBe('cron');
    expect(schedule.nextFire.toISOString()).toBe('2026-11-30T06:00:00.000Z');
    expect(schedule.kind !== 'at' && schedule.longestGap).toEqual({ ms: 7 * DAY, basis: 'exact' });
  });

  it('refuses a cron that never fires (31 February), naming the impossible day and the fix', () => {
    const result = refusal('cron(0 9 31 2 ? *)');
    expect(result.field).toBe('expression');
    expect(result.problem).toBe(
      '"cron(0 9 31 2 ? *)" never fires after 2026-11-29T12:00:00.000Z (day-of-month 31 does not occur in month 2)',
    );
    expect(result.fix).toMatch(/for the last day of a month use L/);
  });

  it('refuses a cron whose year field lies in the past', () => {
    expect(refusal('cron(0 9 1 1 ? 2020)').problem).toMatch(/never fires after/);
  });

  it('reads L in day-of-month as the last day of the month', () => {
    expect(nextFires('cron(0 9 L * ? *)', 'UTC', 3)).toEqual([
      '2026-11-30T09:00:00.000Z',
      '2026-12-31T09:00:00.000Z',
      '2027-01-31T09:00:00.000Z',
    ]);
  });

  it('reads W as the weekday nearest the day (15 May 2027 is a Saturday: Friday the 14th; 15 Aug a Sunday: the 16th)', () => {
    expect(analysed('cron(0 9 15W 5 ? 2027)').nextFire.toISOString()).toBe('2027-05-14T09:00:00.000Z');
    expect(analysed('cron(0 9 15W 8 ? 2027)').nextFire.toISOString()).toBe('2027-08-16T09:00:00.000Z');
  });

  it('numbers weekdays as AWS does (1 = Sunday) and reads # as the nth weekday: 6#3 = third Friday', () => {
    expect(nextFires('cron(0 9 ? * 6#3 *)', 'UTC', 2)).toEqual([
      '2026-12-18T09:00:00.000Z',
      '2027-01-15T09:00:00.000Z',
    ]);
    // FROM is Sunday 29 November, 12:00Z: Sunday (1) 09:00 has passed, so the next is a week on.
    expect(analysed('cron(0 9 ? * 1 *)').nextFire.toISOString()).toBe('2026-12-06T09:00:00.000Z');
  });

  it('reads 6L as the last Friday and a bare L in day-of-week as Saturday', () => {
    expect(analysed('cron(0 9 ? * 6L *)').nextFire.toISOString()).toBe('2026-12-25T09:00:00.000Z');
    expect(analysed('cron(0 9 ? * L *)').nextFire.toISOString()).toBe('2026-12-05T09:00:00.000Z');
  });

  it('reads AWS steps written 0/15', () => {
    expect(nextFires('cron(0/15 * * * ? *)', 'UTC', 2)).toEqual([
      '2026-11-29T12:15:00.000Z',
      '2026-11-29T12:30:00.000Z',
    ]);
  });

  it('measures the weekend as the longest gap of a weekday schedule', () => {
    const schedule = analysed('cron(0 9 ? * MON-FRI *)');
    expect(schedule.kind !== 'at' && schedule.longestGap).toEqual({ ms: 3 * DAY, basis: 'exact' });
  });

  it('counts the daylight-saving hour in a Berlin weekly schedule (7 days and 1 hour at the autumn change)', () => {
    const schedule = analysed('cron(0 9 ? * MON *)', 'Europe/Berlin');
    expect(schedule.kind !== 'at' && schedule.longestGap).toEqual({ ms: 7 * DAY + HOUR, basis: 'exact' });
  });

  it('stops walking once the longest gap reaches the limit the caller cares about and the shortest is a minute', () => {
    // Every minute of 09:00-09:59 on the 1st: a minute apart, then a month.
    const schedule = analysed('cron(* 9 1 * ? *)', 'UTC', 7 * DAY);
    expect(schedule.kind !== 'at' && schedule.longestGap.basis).toBe('at-least');
    expect(schedule.kind !== 'at' && schedule.shortestGap).toEqual({ ms: 60_000, basis: 'exact' });
  });

  it('keeps walking past the longest-gap limit until the shortest gap is known (a monthly cron twice an hour)', () => {
    // 09:00 and 10:00 on the 1st. From 12:00 on 29 November the first gap is a month, over the limit;
    // stopping there would miss the hour between the two fires.
    const schedule = analysed('cron(0 9,10 1 * ? *)', 'UTC', 7 * DAY);
    expect(schedule.kind !== 'at' && schedule.shortestGap).toEqual({ ms: HOUR, basis: 'exact' });
    expect(schedule.kind !== 'at' && schedule.longestGap.basis).toBe('exact');
  });

  it('measures the shortest gap of a weekday schedule across the weekend: a day', () => {
    const schedule = analysed('cron(0 9 ? * MON-FRI *)');
    expect(schedule.kind !== 'at' && schedule.shortestGap).toEqual({ ms: DAY, basis: 'exact' });
  });

  it('counts the daylight-saving hour in a Berlin daily schedule: 23 hours at the spring change', () => {
    const schedule = analysed('cron(30 9 * * ? *)', 'Europe/Berlin');
    expect(schedule.kind !== 'at' && schedule.shortestGap).toEqual({ ms: DAY - HOUR, basis: 'exact' });
  });

  it('reports the shortest gap as at most what it saw when the caller asks for no more than a floor', () => {
    const schedule = analyseSchedule({ expression: 'cron(0 * ? * MON-FRI *)', timeZone: 'UTC' }, FROM, {
      gapLimitMs: HOUR,
      shortestGapFloorMs: 2 * HOUR,
    });
    if (!schedule.ok || schedule.schedule.kind === 'at') throw new Error('expected a recurring schedule');
    expect(schedule.schedule.shortestGap).toEqual({ ms: HOUR, basis: 'at-most' });
  });

  it.each([
    // The last Sunday of March is Berlin's spring-forward day: 02:00-02:59 does not exist.
    ['cron(30 2 ? 3 1L *)', '2027-03-28 02:30'],
    // The fifth Sunday of March, when there is one, is the last.
    ['cron(30 2 ? 3 SUN#5 *)', '2030-03-31 02:30'],
    // Every minute of that hour: 60 skipped matches a year, read 1,500 at most.
    ['cron(* 2 ? 3 1L *)', '2027-03-28 02:00'],
  ])('refuses %s in Berlin, which only matches the hour the clocks skip, saying so', (expression, first) => {
    const nextRun = vi.spyOn(Cron.prototype, 'nextRun');
    try {
      const result = refusal(expression, 'Europe/Berlin');
      expect(result.problem).toBe(
        `"${expression}" never fires in Europe/Berlin: every local time it matches is one the clocks jump over ` +
          `when they go forward (the first: ${first})`,
      );
      expect(result.fix).toMatch(/move the hours and minutes out of the skipped hour/);
      // The unbounded search read up to 58,000 matches (to croner's year 3000): seconds at synth.
      expect(nextRun.mock.calls.length).toBeLessThan(2_000);
    } finally {
      nextRun.mockRestore();
    }
  });

  it.each([
    ['cron(0 9 * * MON *)', /sets both day-of-month and day-of-week/],
    ['cron(0 9 ? * ? *)', /sets both day-of-month and day-of-week, or neither/],
    ['cron(0 9 * * ?)', /has 5 fields/],
    ['cron(0 9 ? * MON * *)', /has 7 fields/],
    ['cron(0 9# ? * MON *)', /has "9#" in the hours field/],
    ['cron(0 25 ? * MON *)', /has "25" in the hours field, which takes 0-23/],
  ])('refuses %s', (expression, problem) => {
    expect(refusal(expression).problem).toMatch(problem);
  });
});

describe('analyseSchedule: rate and at', () => {
  it('takes the rate itself as the longest and the shortest gap', () => {
    const schedule = analysed('rate(15 minutes)');
    expect(schedule.kind !== 'at' && schedule.longestGap).toEqual({ ms: 15 * 60_000, basis: 'exact' });
    expect(schedule.kind !== 'at' && schedule.shortestGap).toEqual({ ms: 15 * 60_000, basis: 'exact' });
    expect(analysed('rate(1 day)').kind).toBe('rate');
  });

  it('refuses a rate of zero', () => {
    expect(refusal('rate(0 minutes)').fix).toMatch(/at least 1/);
  });

  it('fires a one-time schedule at its local time in its zone', () => {
    const schedule = analysed('at(2027-01-15T09:00:00)', 'Europe/Moscow');
    expect(schedule).toMatchObject({ kind: 'at', nextFire: new Date('2027-01-15T06:00:00Z') });
  });

  it('marks a one-time schedule whose time has passed, for the construct to leave out, with when it was due', () => {
    expect(analysed('at(2026-01-15T09:00:00)', 'Europe/Moscow')).toEqual({
      kind: 'at',
      expression: 'at(2026-01-15T09:00:00)',
      timeZone: 'Europe/Moscow',
      nextFire: new Date('2026-01-15T06:00:00Z'),
      passed: true,
    });
    expect(analysed('at(2026-11-29T12:01:00)')).toMatchObject({ kind: 'at', passed: false });
  });

  it('refuses an expression of no known kind, listing the three', () => {
    expect(refusal('every monday').fix).toMatch(/cron\(.*\), rate\(15 minutes\) or at\(/);
  });

  it('refuses a time zone outside the IANA database, naming it', () => {
    const result = refusal('rate(1 hour)', 'Europe/Atlantis');
    expect(result).toMatchObject({ field: 'timeZone' });
    expect(result.problem).toContain('"Europe/Atlantis"');
    expect(result.fix).toMatch(/IANA name/);
  });
});

describe('analyseSchedule: properties', () => {
  it('gives every daily UTC cron a longest and a shortest gap of exactly one day', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 59 }), fc.integer({ min: 0, max: 23 }), (minute, hour) => {
        const schedule = analysed(`cron(${minute} ${hour} * * ? *)`);
        expect(schedule.kind !== 'at' && schedule.longestGap).toEqual({ ms: DAY, basis: 'exact' });
        expect(schedule.kind !== 'at' && schedule.shortestGap).toEqual({ ms: DAY, basis: 'exact' });
      }),
      { numRuns: 25 },
    );
  });

  it('gives every rate its own length as the longest gap', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 10_000 }),
        fc.constantFrom('minutes', 'hours', 'days'),
        (n, unit) => {
          const schedule = analysed(`rate(${n} ${unit})`);
          const unitMs = { minutes: 60_000, hours: HOUR, days: DAY }[unit];
          expect(schedule.kind !== 'at' && schedule.longestGap.ms).toBe(n * unitMs);
        },
      ),
    );
  });
});
