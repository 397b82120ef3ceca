const MINUTE_MS = 60_000;
const MINUTES_PER_HOUR = 60;
const HOURS_PER_DAY = 24;

/**
 * The UTC cron that fires on the same instants as `rate(everyMs)` counted from
 * 1970-01-01T00:00:00Z, or undefined when there is none: the rate must divide an hour (1, 2, 3, 4,
 * 5, 6, 10, 12, 15, 20, 30 minutes) or a day (1, 2, 3, 4, 6, 8, 12 hours, or 1 day).
 *
 * Why a rate is deployed this way: Scheduler counts a `rate()` schedule from its StartDate, else
 * from its creation, and refuses a StartDate more than 5 minutes in the past, so no synthesised
 * template can say where a deployed rate's windows fall; the watchdog must know them. On the 1970
 * grid they are also the windows the local runner and the operator CLI compute for the same JobSpec
 * (JobSchedule's default `rateStart`).
 *
 * @example rateAsUtcCron(15 * 60_000) // 'cron(0/15 * * * ? *)'
 */
export function rateAsUtcCron(everyMs: number): string | undefined {
  if (!Number.isInteger(everyMs / MINUTE_MS) || everyMs <= 0) return undefined;
  const minutes = everyMs / MINUTE_MS;
  if (minutes === 1) return 'cron(* * * * ? *)';
  if (minutes < MINUTES_PER_HOUR) {
    return MINUTES_PER_HOUR % minutes === 0 ? `cron(0/${minutes} * * * ? *)` : undefined;
  }
  const hours = minutes / MINUTES_PER_HOUR;
  if (!Number.isInteger(hours)) return undefined;
  if (hours === 1) return 'cron(0 * * * ? *)';
  if (hours < HOURS_PER_DAY) return HOURS_PER_DAY % hours === 0 ? `cron(0 0/${hours} * * ? *)` : undefined;
  return hours === HOURS_PER_DAY ? 'cron(0 0 * * ? *)' : undefined;
}
