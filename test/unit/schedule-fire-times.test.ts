import { Cron } from 'croner';
import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import { JobSchedule, MAX_SKIPPED_IN_A_ROW, ScheduleError } from '../../shared/schedule/fire-times.js';
import { parseSchedule } from '../../shared/schedule/schedule-expression.js';
import { instantsAtWallClock, wallClockAt } from '../../shared/schedule/time-zone.js';

const fires = (expression: string, timeZone: string, from: string, to: string, rateStart?: string) =>
  new JobSchedule({ expression, timeZone }, rateStart ? { rateStart: Date.parse(rateStart) } : {})
    .firesBetween(Date.parse(from), Date.parse(to))
    .map((fire) => `${fire.toISOString().slice(0, 16)}Z`);

/**
 * Each row: an expression in a zone, a range, and the fires EventBridge Scheduler makes in it (UTC).
 * The 2026 changes (Intl's tz database): Berlin 29 Mar 02:00→03:00 and 25 Oct 03:00→02:00;
 * New York 8 Mar 02:00→03:00 and 1 Nov 02:00→01:00; Sydney 5 Apr 03:00→02:00 and 4 Oct
 * 02:00→03:00; Santiago 4/5 Apr 24:00→23:00 and 6 Sep 00:00→01:00; Lord Howe, whose clocks move
 * by 30 minutes, 5 Apr 02:00→01:30 and 4 Oct 02:00→02:30.
 */
const TABLE: readonly [string, string, string, string, string, readonly string[]][] = [
  // Northern hemisphere, spring: the skipped local time does not fire at all.
  [
    'skips a daily 02:30 on the Berlin spring-forward night',
    'cron(30 2 * * ? *)',
    'Europe/Berlin',
    '2026-03-27T00:00:00Z',
    '2026-03-31T00:00:00Z',
    ['2026-03-27T01:30Z', '2026-03-28T01:30Z', '2026-03-30T00:30Z'],
  ],
  [
    'keeps every existing half hour of a 30-minute cron through the Berlin gap',
    'cron(0/30 * * * ? *)',
    'Europe/Berlin',
    '2026-03-29T00:00:00Z',
    '2026-03-29T02:00:00Z',
    ['2026-03-29T00:00Z', '2026-03-29T00:30Z', '2026-03-29T01:00Z', '2026-03-29T01:30Z'],
  ],
  // Northern hemisphere, autumn: a repeated local time fires once, at its first occurrence.
  [
    'fires a daily 02:30 once on the Berlin fall-back night, at the first 02:30',
    'cron(30 2 * * ? *)',
    'Europe/Berlin',
    '2026-10-24T00:00:00Z',
    '2026-10-27T00:00:00Z',
    ['2026-10-24T00:30Z', '2026-10-25T00:30Z', '2026-10-26T01:30Z'],
  ],
  [
    'does not repeat the replayed hour of a 30-minute cron in Berlin',
    'cron(0/30 * * * ? *)',
    'Europe/Berlin',
    '2026-10-25T00:00:00Z',
    '2026-10-25T02:30:00Z',
    ['2026-10-25T00:00Z', '2026-10-25T00:30Z', '2026-10-25T02:00Z'],
  ],
  [
    'fires a Sunday 01:30 once when New York falls back',
    'cron(30 1 ? * SUN *)',
    'America/New_York',
    '2026-10-25T00:00:00Z',
    '2026-11-09T00:00:00Z',
    ['2026-10-25T05:30Z', '2026-11-01T05:30Z', '2026-11-08T06:30Z'],
  ],
  [
    'never fires a one-day cron whose only time New York skips',
    'cron(15 2 8 3 ? 2026)',
    'America/New_York',
    '2026-01-01T00:00:00Z',
    '2027-01-01T00:00:00Z',
    [],
  ],
  // Southern hemisphere: the clocks go forward in October and back in April.
  [
    'skips a Sunday 02:30 on the Sydney spring-forward night (October)',
    'cron(30 2 ? * SUN *)',
    'Australia/Sydney',
    '2026-09-26T00:00:00Z',
    '2026-10-12T00:00:00Z',
    ['2026-09-26T16:30Z', '2026-10-10T15:30Z'],
  ],
  [
    'fires a daily 02:30 once when Sydney falls back (April)',
    'cron(30 2 * * ? *)',
    'Australia/Sydney',
    '2026-04-03T00:00:00Z',
    '2026-04-06T00:00:00Z',
    ['2026-04-03T15:30Z', '2026-04-04T15:30Z', '2026-04-05T16:30Z'],
  ],
  [
    'skips a daily 00:30 on the Santiago night whose midnight hour does not exist',
    'cron(30 0 * * ? *)',
    'America/Santiago',
    '2026-09-05T00:00:00Z',
    '2026-09-08T00:00:00Z',
    ['2026-09-05T04:30Z', '2026-09-07T03:30Z'],
  ],
  [
    'fires a daily 23:30 once when Santiago replays the hour before midnight',
    'cron(30 23 * * ? *)',
    'America/Santiago',
    '2026-04-04T00:00:00Z',
    '2026-04-07T00:00:00Z',
    ['2026-04-04T02:30Z', '2026-04-05T02:30Z', '2026-04-06T03:30Z'],
  ],
  // A 30-minute shift.
  [
    'skips a daily 02:15 in the half hour Lord Howe skips',
    'cron(15 2 * * ? *)',
    'Australia/Lord_Howe',
    '2026-10-02T00:00:00Z',
    '2026-10-05T00:00:00Z',
    ['2026-10-02T15:45Z', '2026-10-04T15:15Z'],
  ],
  [
    'fires a daily 01:45 once in the half hour Lord Howe replays',
    'cron(45 1 * * ? *)',
    'Australia/Lord_Howe',
    '2026-04-03T00:00:00Z',
    '2026-04-06T00:00:00Z',
    ['2026-04-03T14:45Z', '2026-04-04T14:45Z', '2026-04-05T15:15Z'],
  ],
  [
    'keeps a 15-minute cron firing across the Lord Howe gap, without the skipped quarter hours',
    'cron(0/15 * * * ? *)',
    'Australia/Lord_Howe',
    '2026-10-03T15:00:00Z',
    '2026-10-03T16:00:00Z',
    ['2026-10-03T15:00Z', '2026-10-03T15:15Z', '2026-10-03T15:30Z', '2026-10-03T15:45Z'],
  ],
  // The special characters and the year, in zones.
  [
    'reads L as the last day of a leap February, in Berlin',
    'cron(0 9 L 2 ? 2028)',
    'Europe/Berlin',
    '2028-01-01T00:00:00Z',
    '2029-01-01T00:00:00Z',
    ['2028-02-29T08:00Z'],
  ],
  [
    'reads 1W on a Saturday as the Monday after (W never leaves the month), in New York',
    'cron(0 9 1W 8 ? 2026)',
    'America/New_York',
    '2026-07-01T00:00:00Z',
    '2026-09-01T00:00:00Z',
    ['2026-08-03T13:00Z'],
  ],
  [
    'reads 2#1 as the first Monday, whose Sydney morning is the UTC day before',
    'cron(0 10 ? * 2#1 2027)',
    'Australia/Sydney',
    '2027-01-01T00:00:00Z',
    '2027-02-01T00:00:00Z',
    ['2027-01-03T23:00Z', '2027-01-31T23:00Z'],
  ],
  [
    'reads 6L as the last Friday of the month, in Santiago',
    'cron(0 18 ? * 6L 2026)',
    'America/Santiago',
    '2026-12-01T00:00:00Z',
    '2027-01-01T00:00:00Z',
    ['2026-12-25T21:00Z'],
  ],
  [
    'stops when the year field runs out',
    'cron(0 12 1 1 ? 2027-2028)',
    'Europe/Berlin',
    '2026-01-01T00:00:00Z',
    '2031-01-01T00:00:00Z',
    ['2027-01-01T11:00Z', '2028-01-01T11:00Z'],
  ],
  [
    'reads ? in day-of-month with a weekday list, MON-FRI, across a weekend',
    'cron(0 8 ? * MON-FRI *)',
    'UTC',
    '2026-11-27T00:00:00Z',
    '2026-12-01T00:00:00Z',
    ['2026-11-27T08:00Z', '2026-11-30T08:00Z'],
  ],
];

describe('JobSchedule: cron with Scheduler’s daylight-saving rules', () => {
  it.each(TABLE)('%s', (_name, expression, timeZone, from, to, expected) => {
    expect(fires(expression, timeZone, from, to)).toEqual(expected);
  });

  it('differs from croner’s own rules, which is why the zone is applied after matching', () => {
    // croner moves a fixed-time job out of the gap (03:00 CEST) and runs interval jobs twice in the
    // replayed hour; Scheduler skips the first and runs the second once.
    const croner = new Cron('0 30 2 * * *', { timezone: 'Europe/Berlin', paused: true });
    expect(croner.nextRun(new Date('2026-03-28T12:00:00Z'))?.toISOString()).toBe('2026-03-29T01:00:00.000Z');
    expect(
      fires('cron(30 2 * * ? *)', 'Europe/Berlin', '2026-03-28T12:00:00Z', '2026-03-30T12:00:00Z'),
    ).toEqual(['2026-03-30T00:30Z']);
    const everyHalfHour = new Cron('0 */30 * * * *', { timezone: 'Europe/Berlin', paused: true });
    expect(everyHalfHour.nextRuns(4, new Date('2026-10-25T00:15:00Z')).map((d) => d.toISOString())).toContain(
      '2026-10-25T01:00:00.000Z',
    );
  });
});

describe('JobSchedule: a cron that only matches local times the clocks skip', () => {
  /** How many wall-clock matches croner is asked for while `run` runs. */
  function matchesRead(run: () => void): number {
    const nextRun = vi.spyOn(Cron.prototype, 'nextRun');
    try {
      run();
      return nextRun.mock.calls.length;
    } finally {
      nextRun.mockRestore();
    }
  }

  it('stops after MAX_SKIPPED_IN_A_ROW skipped matches instead of reading every match to croner’s year 3000', () => {
    // Every minute of the hour Berlin skips on the last Sunday of March: 60 a year, none exists.
    const schedule = new JobSchedule({ expression: 'cron(* 2 ? 3 1L *)', timeZone: 'Europe/Berlin' });
    let fires: Date[] = [];
    const read = matchesRead(() => {
      fires = schedule.firesBetween(Date.parse('2026-01-01T00:00:00Z'), Date.parse('2900-01-01T00:00:00Z'));
    });
    expect(fires).toEqual([]);
    // Unbounded, the walk read 58,380 matches (974 years × 60), several seconds of work.
    expect(read).toBe(MAX_SKIPPED_IN_A_ROW);
    expect(read).toBeLessThan(2_000);
  });

  it('walks through a whole skipped day of a per-minute cron (Samoa, 30 December 2011) without stopping', () => {
    // Apia went from 29 December 23:59 (UTC-10) straight to 31 December 00:00 (UTC+14).
    expect(
      fires('cron(* * * * ? *)', 'Pacific/Apia', '2011-12-30T09:58:00Z', '2011-12-30T10:02:00Z'),
    ).toEqual(['2011-12-30T09:58Z', '2011-12-30T09:59Z', '2011-12-30T10:00Z', '2011-12-30T10:01Z']);
  });

  it('ends with Scheduler’s last year, 2199', () => {
    const schedule = new JobSchedule({ expression: 'cron(0 9 1 1 ? *)', timeZone: 'UTC' });
    expect(schedule.nextFireAfter(Date.parse('2199-01-01T09:00:00Z'))).toBeUndefined();
    expect(schedule.nextFireAfter(Date.parse('2198-06-01T00:00:00Z'))?.toISOString()).toBe(
      '2199-01-01T09:00:00.000Z',
    );
  });
});

describe('JobSchedule: rate and at', () => {
  it('fires a rate on its grid, counted from the Unix epoch by default, whatever the zone’s clocks do', () => {
    expect(
      fires('rate(15 minutes)', 'Europe/Berlin', '2026-03-29T00:50:00Z', '2026-03-29T01:20:00Z'),
    ).toEqual(['2026-03-29T01:00Z', '2026-03-29T01:15Z']);
  });

  it('counts a daily rate in 24-hour steps from its start, so its local time moves with daylight saving', () => {
    expect(
      fires(
        'rate(1 day)',
        'Europe/Berlin',
        '2026-03-27T00:00:00Z',
        '2026-03-31T00:00:00Z',
        '2026-03-28T08:00:42Z',
      ),
    ).toEqual(['2026-03-28T08:00Z', '2026-03-29T08:00Z', '2026-03-30T08:00Z']);
  });

  it('fires a one-time schedule at its local time, at the first occurrence of a repeated one, never in a gap', () => {
    expect(
      fires('at(2027-01-15T09:00:30)', 'Europe/Moscow', '2027-01-01T00:00:00Z', '2028-01-01T00:00:00Z'),
    ).toEqual(['2027-01-15T06:00Z']);
    expect(
      fires('at(2026-10-25T02:30:00)', 'Europe/Berlin', '2026-01-01T00:00:00Z', '2027-01-01T00:00:00Z'),
    ).toEqual(['2026-10-25T00:30Z']);
    expect(
      fires('at(2026-03-29T02:30:00)', 'Europe/Berlin', '2026-01-01T00:00:00Z', '2027-01-01T00:00:00Z'),
    ).toEqual([]);
  });

  it('gives the next fire strictly after a fire time, and none after a one-time schedule has fired', () => {
    const weekly = new JobSchedule({ expression: 'cron(0 9 ? * MON *)', timeZone: 'Europe/Moscow' });
    expect(weekly.nextFireAfter(Date.parse('2026-11-30T06:00:00Z'))?.toISOString()).toBe(
      '2026-12-07T06:00:00.000Z',
    );
    const once = new JobSchedule({ expression: 'at(2027-01-15T09:00:00)', timeZone: 'UTC' });
    expect(once.nextFireAfter(Date.parse('2027-01-15T09:00:00Z'))).toBeUndefined();
  });

  it('refuses what Scheduler would refuse, saying what to write', () => {
    expect(() => new JobSchedule({ expression: 'cron(0 9 * * MON *)' })).toThrow(ScheduleError);
    expect(() => new JobSchedule({ expression: 'cron(0 9 * * MON *)' })).toThrow(
      /put \? in exactly one of them/,
    );
    expect(() => new JobSchedule({ expression: 'rate(1 week)' })).toThrow(/rate\(15 minutes\)/);
    expect(() => new JobSchedule({ expression: 'at(2026-02-30T09:00:00)' })).toThrow(
      /does not exist in the calendar/,
    );
    expect(parseSchedule({ expression: 'rate(5 minutes)', timeZone: 'Mars/Olympus' })).toMatchObject({
      ok: false,
      field: 'timeZone',
    });
  });
});

describe('JobSchedule: the fire a late timer belongs to', () => {
  const lordHowe = new JobSchedule({ expression: 'cron(0/30 1 * * ? *)', timeZone: 'Australia/Lord_Howe' });

  it('maps a timer that went off at the repeated 01:30 to the first one, the only fire', () => {
    // 4 April 2026, 14:30Z is 01:30 LHDT; 15:00Z is 01:30 again (LHST), not a fire of its own.
    expect(lordHowe.lastFireAtOrBefore(Date.parse('2026-04-04T15:10:00Z'))?.toISOString()).toBe(
      '2026-04-04T14:30:00.000Z',
    );
    expect(lordHowe.lastFireAtOrBefore(Date.parse('2026-04-04T14:30:00Z'))?.toISOString()).toBe(
      '2026-04-04T14:30:00.000Z',
    );
    expect(lordHowe.lastFireAtOrBefore(Date.parse('2026-04-04T14:29:59Z'))?.toISOString()).toBe(
      '2026-04-04T14:00:00.000Z',
    );
  });

  it('looks back as far as a yearly cron needs, and finds nothing before a one-time schedule', () => {
    const yearly = new JobSchedule({ expression: 'cron(0 9 1 1 ? *)', timeZone: 'UTC' });
    expect(yearly.lastFireAtOrBefore(Date.parse('2026-12-31T23:59:00Z'))?.toISOString()).toBe(
      '2026-01-01T09:00:00.000Z',
    );
    const once = new JobSchedule({ expression: 'at(2027-01-15T09:00:00)', timeZone: 'UTC' });
    expect(once.lastFireAtOrBefore(Date.parse('2027-01-15T08:59:00Z'))).toBeUndefined();
    expect(once.lastFireAtOrBefore(Date.parse('2027-03-01T00:00:00Z'))?.toISOString()).toBe(
      '2027-01-15T09:00:00.000Z',
    );
  });
});

describe('JobSchedule: properties', () => {
  const zones = [
    'Europe/Berlin',
    'America/New_York',
    'Australia/Sydney',
    'America/Santiago',
    'Australia/Lord_Howe',
  ];

  it('fires a daily cron at most once per local day, at its local time, on whole minutes, in order', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 59 }),
        fc.integer({ min: 0, max: 23 }),
        fc.constantFrom(...zones),
        (minute, hour, timeZone) => {
          const list = new JobSchedule({
            expression: `cron(${minute} ${hour} * * ? *)`,
            timeZone,
          }).firesBetween(Date.parse('2026-01-01T00:00:00Z'), Date.parse('2027-01-01T00:00:00Z'));
          const days = new Set<string>();
          let previous = 0;
          for (const fire of list) {
            const wall = new Date(wallClockAt(fire.getTime(), timeZone));
            expect([wall.getUTCHours(), wall.getUTCMinutes()]).toEqual([hour, minute]);
            expect(fire.getTime() % 60_000).toBe(0);
            expect(fire.getTime()).toBeGreaterThan(previous);
            previous = fire.getTime();
            const day = wall.toISOString().slice(0, 10);
            expect(days.has(day)).toBe(false);
            days.add(day);
          }
          // Every day of the year but the ones where that local time does not exist.
          const missing = 365 - list.length;
          expect(missing).toBeGreaterThanOrEqual(0);
          expect(missing).toBeLessThanOrEqual(1);
        },
      ),
      { numRuns: 15 },
    );
  });

  it('places every wall-clock time at zero, one or two instants that read it back', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: Date.parse('2026-01-01T00:00:00Z'), max: Date.parse('2027-01-01T00:00:00Z') }),
        fc.constantFrom(...zones),
        (millis, timeZone) => {
          const wall = millis - (millis % 60_000);
          const instants = instantsAtWallClock(wall, timeZone);
          expect(instants.length).toBeLessThanOrEqual(2);
          for (const instant of instants) expect(wallClockAt(instant, timeZone)).toBe(wall);
        },
      ),
      { numRuns: 300 },
    );
  });
});
