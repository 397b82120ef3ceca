/**
 * Wall-clock arithmetic in IANA time zones, on Intl (the same tz database Lambda and EventBridge
 * Scheduler read), and the check of a zone's name against that database. A wall-clock time is
 * carried as the milliseconds it would be in UTC (`Date.UTC(y, m, d, h, mi)`), so calendar fields
 * are read with getUTC* and no local zone leaks in.
 */

import { IANA_TIME_ZONE_NAMES } from './iana-time-zones.js';

const MINUTE_MS = 60_000;
const HOUR_MS = 3_600_000;

const formatters = new Map<string, Intl.DateTimeFormat>();

function formatterFor(timeZone: string): Intl.DateTimeFormat {
  let formatter = formatters.get(timeZone);
  if (!formatter) {
    formatter = new Intl.DateTimeFormat('en-US', {
      timeZone,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
      era: 'short',
    });
    formatters.set(timeZone, formatter);
  }
  return formatter;
}

/** Why a time zone name was refused, and what to write instead. */
export interface TimeZoneProblem {
  readonly problem: string;
  readonly fix: string;
}

const SPELLING_BY_LOWER_CASE = new Map([...IANA_TIME_ZONE_NAMES].map((name) => [name.toLowerCase(), name]));

/**
 * Checks a time zone name as EventBridge Scheduler takes it: a name of the IANA time zone database
 * (a zone or one of its links, so `US/Eastern` and `EST` too), spelled as the database spells it.
 * Intl alone is too lenient to decide: it ignores case and knows ICU's own names (`PST`, `IST`),
 * which are not in the database. Returns undefined when the name is fine.
 * @example checkTimeZone('europe/moscow') // { problem: '… case-sensitive', fix: 'write "Europe/Moscow"' }
 */
export function checkTimeZone(timeZone: string): TimeZoneProblem | undefined {
  const quoted = JSON.stringify(timeZone);
  if (IANA_TIME_ZONE_NAMES.has(timeZone)) {
    if (intlZoneOf(timeZone) !== undefined) return undefined;
    return {
      problem: `${quoted} is an IANA time zone this Node.js's time zone data does not have yet`,
      fix: 'upgrade Node.js, or use another name for the same zone',
    };
  }
  const spelling = SPELLING_BY_LOWER_CASE.get(timeZone.toLowerCase());
  if (spelling !== undefined) {
    return {
      problem: `${quoted} is not a name in the IANA time zone database (EventBridge Scheduler's), whose names are case-sensitive`,
      fix: `write ${JSON.stringify(spelling)}`,
    };
  }
  const icuReading = intlZoneOf(timeZone);
  if (icuReading !== undefined && IANA_TIME_ZONE_NAMES.has(icuReading)) {
    return {
      problem: `${quoted} is not a name in the IANA time zone database (EventBridge Scheduler's); Node.js alone reads it as ${JSON.stringify(icuReading)}`,
      fix: `write ${JSON.stringify(icuReading)} if that is the zone meant`,
    };
  }
  return {
    problem: `${quoted} is not a name in the IANA time zone database (EventBridge Scheduler's)`,
    fix: 'use an IANA name such as "Europe/Moscow", "America/New_York" or "UTC"',
  };
}

/** True when Scheduler takes the name and fire times can be computed in it (see checkTimeZone). */
export function isKnownTimeZone(timeZone: string): boolean {
  return checkTimeZone(timeZone) === undefined;
}

/** The zone Intl reads a name as (case-insensitively, ICU names included), or undefined. */
function intlZoneOf(timeZone: string): string | undefined {
  try {
    return formatterFor(timeZone).resolvedOptions().timeZone;
  } catch {
    return undefined;
  }
}

/** The wall-clock time in `timeZone` at `instant`, as UTC-coded milliseconds (whole seconds). */
export function wallClockAt(instant: number, timeZone: string): number {
  const fields: Record<string, number> = {};
  let bce = false;
  for (const part of formatterFor(timeZone).formatToParts(new Date(instant))) {
    if (part.type === 'era') bce = part.value === 'BC' || part.value === 'B';
    else if (part.type !== 'literal') fields[part.type] = Number(part.value);
  }
  const year = bce ? 1 - fields.year! : fields.year!;
  const wall = new Date(0);
  wall.setUTCFullYear(year, fields.month! - 1, fields.day!);
  wall.setUTCHours(fields.hour!, fields.minute!, fields.second!, 0);
  return wall.getTime();
}

/** The zone's offset from UTC at `instant`, in milliseconds (Moscow: +3 h). */
export function offsetAt(instant: number, timeZone: string): number {
  const whole = instant - (((instant % 1000) + 1000) % 1000);
  return wallClockAt(whole, timeZone) - whole;
}

/**
 * Every instant at which the zone's clocks read `wall` (UTC-coded, as above): none when the time
 * falls in a daylight-saving gap (02:30 on a spring-forward night in Berlin), two when it falls in
 * a repeated hour (02:30 on the autumn night), earlier first; one otherwise.
 *
 * Offsets are sampled a day either side: no zone changes its offset twice within two days, so the
 * offsets in force around `wall` are among those samples.
 */
export function instantsAtWallClock(wall: number, timeZone: string): number[] {
  const before = offsetAt(wall - 24 * HOUR_MS, timeZone);
  const after = offsetAt(wall + 24 * HOUR_MS, timeZone);
  // The common case: no change within a day either side, so the wall-clock time occurs exactly once.
  if (before === after) return [wall - before];
  const instants: number[] = [];
  for (const offset of new Set([before, offsetAt(wall, timeZone), after])) {
    const instant = wall - offset;
    if (wallClockAt(instant, timeZone) === wall && !instants.includes(instant)) instants.push(instant);
  }
  return instants.sort((a, b) => a - b);
}

/** `2026-11-30 09:00` for a wall-clock value, for messages and tables. */
export function formatWallClock(wall: number): string {
  return new Date(wall).toISOString().slice(0, 16).replace('T', ' ');
}

/** How an instant reads on the zone's clocks: `Mon 2026-11-30 09:00 Europe/Moscow`. */
export function describeInZone(instant: number, timeZone: string): string {
  const wall = wallClockAt(instant, timeZone);
  const weekday = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'][new Date(wall).getUTCDay()];
  return `${weekday} ${formatWallClock(wall)} ${timeZone}`;
}

export { HOUR_MS, MINUTE_MS };
