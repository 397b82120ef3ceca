import type { Cron } from 'croner';
import { SlotguardError } from '../errors.js';
import type { ScheduleSpec } from '../job/job-spec.js';
import { LAST_CRON_YEAR } from './aws-cron-fields.js';
import {
  type AtExpression,
  type ParsedSchedule,
  parseSchedule,
  type ScheduleExpression,
  type ScheduleProblem,
  wallClockCron,
} from './schedule-expression.js';
import { HOUR_MS, instantsAtWallClock, MINUTE_MS, wallClockAt } from './time-zone.js';

/** A schedule that cannot be read; carries the problem and the fix. */
export class ScheduleError extends SlotguardError {
  readonly field: ScheduleProblem['field'];
  readonly problem: string;
  readonly fix: string;
  constructor(problem: ScheduleProblem) {
    super(`${problem.problem}; ${problem.fix}`);
    this.field = problem.field;
    this.problem = problem.problem;
    this.fix = problem.fix;
  }
}

/** How a JobSchedule counts; every field has a default. */
export interface JobScheduleOptions {
  /**
   * Where a `rate()` schedule starts counting. Deployed, Scheduler counts from the schedule's
   * creation (or its StartDate); locally, a fixed origin keeps every replica and every restart on
   * the same windows. Floored to the minute.
   * @default 1970-01-01T00:00:00Z, so rate(15 minutes) fires at :00, :15, :30 and :45
   */
  readonly rateStart?: Date | number;
}

/**
 * Walls this far before a start are also matched: a fall-back night replays up to an hour (two in
 * some historical zones), so a wall-clock time earlier than the start's can still be in the future.
 */
const WALL_LOOKBEHIND_MS = 3 * HOUR_MS;

/**
 * Cron matches in a row that fall in skipped local times after which a walk stops. More than a
 * whole skipped day of a per-minute cron (1,440: Samoa skipped 30 December 2011), so no real gap
 * ends a walk early; a cron that only ever matches skipped times (`cron(* 2 ? 3 1L *)` in Berlin,
 * the hour the clocks jump over) stops after this many instead of reading every match to croner's
 * year 3000 (58,000 matches, seconds of work).
 */
export const MAX_SKIPPED_IN_A_ROW = 1_500;

/**
 * When a schedule fires, with EventBridge Scheduler's semantics:
 * - `cron()` matches minutes on the wall clock of the schedule's zone (`?`, `L`, `W`, `#`, year);
 *   a local time that does not exist (the hour skipped when clocks go forward) is skipped, and a
 *   local time that occurs twice (when clocks go back) fires once, at its first occurrence.
 * - `rate()` fires every interval from its start, whatever the zone's clocks do.
 * - `at()` fires once at its local time (never, if that time falls in a skipped hour; at the first
 *   occurrence if it is repeated).
 * Every fire is a whole minute, as the slot window Scheduler stamps into the event. A cron's fires
 * end with 2199, Scheduler's last year, or once MAX_SKIPPED_IN_A_ROW matches in a row fall in
 * skipped local times (a cron that only matches those never fires).
 *
 * croner matches the cron fields on a UTC wall clock (no DST there, so croner's own DST rules, which
 * move a fixed-time job out of a gap and run interval jobs twice in a repeated hour, never apply);
 * each matching wall-clock time is then placed in the zone here.
 * @example new JobSchedule({ expression: 'cron(0 9 ? * MON *)', timeZone: 'Europe/Moscow' }).firesBetween(from, to)
 */
export class JobSchedule {
  readonly expression: ScheduleExpression;
  readonly timeZone: string;
  readonly #rateStart: number;
  readonly #cron: Cron | undefined;

  /** @throws ScheduleError when the spec cannot be read (the message says why and what to write). */
  constructor(spec: ScheduleSpec, options: JobScheduleOptions = {}) {
    const parsed = parseOrThrow(spec);
    this.expression = parsed.expression;
    this.timeZone = parsed.timeZone;
    const start = options.rateStart === undefined ? 0 : Number(options.rateStart);
    this.#rateStart = start - (((start % MINUTE_MS) + MINUTE_MS) % MINUTE_MS);
    this.#cron = this.expression.kind === 'cron' ? wallClockCron(this.expression.cronerPattern) : undefined;
  }

  /** The fires in [from, to), earliest first. `limit` stops early (a runaway range). */
  firesBetween(from: Date | number, to: Date | number, limit = Number.POSITIVE_INFINITY): Date[] {
    const end = Number(to);
    const fires: Date[] = [];
    for (const fire of this.firesAfter(Number(from) - 1)) {
      if (fire.getTime() >= end || fires.length >= limit) break;
      fires.push(fire);
    }
    return fires;
  }

  /**
   * The latest fire at or before `at`, looked for as far back as `lookbackMs`: the fire a timer that
   * went off at `at` belongs to, however late it went off.
   * @default lookbackMs 400 days, which every recurring schedule but a yearly cron fires within
   */
  lastFireAtOrBefore(at: Date | number, lookbackMs = 400 * 24 * HOUR_MS): Date | undefined {
    const end = Number(at) + 1;
    // Widening windows: a frequent schedule is found in the first hour, without listing a year of fires.
    for (let span = HOUR_MS; ; span = Math.min(span * 8, lookbackMs)) {
      const last = this.firesBetween(end - span, end).at(-1);
      if (last !== undefined || span >= lookbackMs) return last;
    }
  }

  /** The first fire strictly after `after`, or undefined if the schedule never fires again. */
  nextFireAfter(after: Date | number): Date | undefined {
    for (const fire of this.firesAfter(after)) return fire;
    return undefined;
  }

  /** Every fire strictly after `after`, earliest first, for as long as the schedule fires. */
  *firesAfter(after: Date | number): Generator<Date> {
    const afterMs = Number(after);
    switch (this.expression.kind) {
      case 'rate':
        yield* this.#rateFires(afterMs, this.expression.everyMs);
        return;
      case 'at':
        yield* this.#atFire(afterMs, this.expression);
        return;
      case 'cron':
        yield* this.#cronFires(afterMs);
        return;
      default:
        return this.expression satisfies never;
    }
  }

  *#rateFires(afterMs: number, everyMs: number): Generator<Date> {
    const k = afterMs < this.#rateStart ? 0 : Math.floor((afterMs - this.#rateStart) / everyMs) + 1;
    for (let fire = this.#rateStart + k * everyMs; ; fire += everyMs) yield new Date(fire);
  }

  *#atFire(afterMs: number, at: AtExpression): Generator<Date> {
    const [first] = instantsAtWallClock(at.wallClock, this.timeZone);
    if (first !== undefined && first > afterMs) yield new Date(first);
  }

  /*
   * Wall-clock matches come out of croner in order; placed in the zone (none in a gap, the first of
   * two in a repeated hour), they stay in order: the first instant a clock reads a later time is
   * never before the first instant it reads an earlier one that exists. The walk ends with
   * Scheduler's last year, or after MAX_SKIPPED_IN_A_ROW matches in skipped times.
   */
  *#cronFires(afterMs: number): Generator<Date> {
    const cron = this.#cron!;
    let wall = wallClockAt(afterMs, this.timeZone) - WALL_LOOKBEHIND_MS;
    let skippedInARow = 0;
    for (;;) {
      const match = cron.nextRun(new Date(wall));
      if (!match || match.getUTCFullYear() > LAST_CRON_YEAR) return;
      wall = match.getTime();
      const [first] = instantsAtWallClock(wall, this.timeZone);
      if (first === undefined) {
        if (++skippedInARow >= MAX_SKIPPED_IN_A_ROW) return;
        continue;
      }
      skippedInARow = 0;
      if (first > afterMs) yield new Date(first);
    }
  }
}

function parseOrThrow(spec: ScheduleSpec): ParsedSchedule {
  const parsed = parseSchedule(spec);
  if (!parsed.ok) throw new ScheduleError(parsed);
  return parsed;
}
