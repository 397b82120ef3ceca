import { defaultDeadlineSeconds, JOB_DEFAULTS, type JobSpec } from '../job/job-spec.js';
import { JobSchedule } from '../schedule/fire-times.js';

/** Fires followed to find the shortest gap: a year of a weekly job, ten days of a 15-minute one. */
const FIRES_WALKED = 1_000;

/**
 * How long after its scheduled time a window of `job` must be finished: the job's own
 * `deadlineMinutes` when its spec sets one, else the earlier of the shortest gap between two of its
 * consecutive fires (a window should be over before the next one starts) and 6 hours, never
 * shorter than the function timeout: defaultDeadlineSeconds, the rule ScheduledJob applies to its
 * own measure of the gap for SLOTGUARD_DEADLINE_SECONDS and the watchdog event's deadlineSeconds.
 * The operator CLI judges and re-drives windows by it.
 * @example jobDeadlineMs({ schedule: { expression: 'rate(15 minutes)' } }) // 900_000
 */
export function jobDeadlineMs(
  job: Pick<JobSpec, 'schedule' | 'timeoutSeconds'> & { readonly deadlineMinutes?: number },
  from: number = Date.now(),
): number {
  if (job.deadlineMinutes !== undefined) return job.deadlineMinutes * 60_000;
  const gap = shortestGapMs(new JobSchedule(job.schedule), from);
  const timeoutSeconds = job.timeoutSeconds ?? JOB_DEFAULTS.timeoutSeconds;
  return defaultDeadlineSeconds(Number.isFinite(gap) ? gap : undefined, timeoutSeconds) * 1000;
}

/**
 * The shortest time between two consecutive fires from `from` on, over the next FIRES_WALKED fires
 * (Infinity for a schedule that fires once or never). Walked, not derived from the expression: a
 * cron's gaps differ (`0 9,10 * * ? *` is 1 h then 23 h) and daylight-saving nights change them.
 */
export function shortestGapMs(schedule: JobSchedule, from: number): number {
  let shortest = Number.POSITIVE_INFINITY;
  let previous: number | undefined;
  let walked = 0;
  for (const fire of schedule.firesAfter(from)) {
    const at = fire.getTime();
    if (previous !== undefined) shortest = Math.min(shortest, at - previous);
    previous = at;
    // A minute is as short as a gap gets: nothing further can lower it.
    if (++walked >= FIRES_WALKED || shortest <= 60_000) break;
  }
  return shortest;
}
