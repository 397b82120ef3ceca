import { InvalidEventError } from '../errors.js';
import type { ScheduleSpec } from '../job/job-spec.js';
import { assertJobId, describe } from '../slot/slot.js';

/**
 * The input of a job's watchdog schedule (one Scheduler schedule per job, `rate(15 minutes)`,
 * targeting the stack's watchdog function): the job's spec as the watchdog needs it.
 * ```json
 * { "kind": "watchdog", "jobId": "weekly-report",
 *   "schedule": { "expression": "cron(0 9 ? * MON *)", "timeZone": "Europe/Moscow" },
 *   "deadlineSeconds": 21600, "graceSeconds": 900, "lookbackHours": 48 }
 * ```
 */
export interface WatchdogEvent {
  /** Always `watchdog`: tells a watchdog event from a job's scheduler event sent to the wrong function. */
  readonly kind: 'watchdog';
  readonly jobId: string;
  /** The job's schedule exactly as its own Scheduler schedule has it. */
  readonly schedule: ScheduleSpec;
  /** The job's deadline (the same value as its function's SLOTGUARD_DEADLINE_SECONDS). */
  readonly deadlineSeconds: number;
  /**
   * How long after its scheduled time a window may have no slot record before it is missing.
   * @default 900
   */
  readonly graceSeconds?: number;
  /**
   * How far back the job's windows are audited, in hours.
   * @default 48
   */
  readonly lookbackHours?: number;
  /**
   * `rate()` jobs only, and required for them: the instant (ISO 8601) the job's Scheduler schedule
   * counts from, its StartDate. Without it the watchdog cannot know which windows a rate() schedule
   * produced.
   * @default none: refused for a rate() schedule, unused by cron() and at()
   */
  readonly rateStart?: string;
  /**
   * No window before this instant (ISO 8601) is expected: the job's first deployment, or its
   * schedule's StartDate.
   * @default the whole lookback is judged
   */
  readonly notBefore?: string;
  /**
   * After the audit, confirm the effects finished windows (DONE, PARTIAL) still hold in doubt whose
   * message the provider has since accepted (its word on their records, from SES's events): each is
   * recorded done, and its window's summary counts it so. Nothing is ever sent again from the
   * watchdog. Needs the watchdog's function to read the job's effects and write its slot and effect
   * records (DynamoDB: Query and UpdateItem as well as GetItem on the job's items).
   * @default false: the watchdog only reads slot records
   */
  readonly confirmInDoubt?: boolean;
}

/** The defaults of a watchdog event's optional fields. */
export const WATCHDOG_EVENT_DEFAULTS = { graceSeconds: 900, lookbackHours: 48 } as const;

/** A watchdog event, checked and in milliseconds: what auditWindows takes, less the clock and the store. */
export interface WatchdogRequest {
  readonly jobId: string;
  readonly schedule: ScheduleSpec;
  readonly deadlineMs: number;
  readonly graceMs: number;
  readonly lookbackMs: number;
  /** See WatchdogEvent.rateStart, in epoch ms. @default absent (cron() and at() schedules) */
  readonly rateStart?: number;
  /** See WatchdogEvent.notBefore, in epoch ms. @default absent: the whole lookback is judged */
  readonly notBefore?: number;
  /** See WatchdogEvent.confirmInDoubt. */
  readonly confirmInDoubt: boolean;
}

/** The event field each audit input comes from, for the message that rejects it. */
export const EVENT_FIELD_OF_INPUT = {
  jobId: 'jobId',
  schedule: 'schedule',
  rateStart: 'rateStart',
  notBefore: 'notBefore',
  deadline: 'deadlineSeconds',
  grace: 'graceSeconds',
  lookback: 'lookbackHours',
} as const;

/**
 * Checks a watchdog event's shape and converts it to milliseconds. Every failure is an
 * InvalidEventError naming the field, the value received and what to send: the event is the
 * watchdog schedule's fixed input, so retrying it can never help. Ranges (a deadline under a
 * minute, a lookback past the records' retention) are the audit's to check, in one place.
 */
export function parseWatchdogEvent(event: unknown): WatchdogRequest {
  if (typeof event !== 'object' || event === null || Array.isArray(event)) {
    throw new InvalidEventError(
      'event',
      `the event is ${describe(event)}; a watchdog schedule sends an object with kind "watchdog", jobId and schedule`,
    );
  }
  const fields = event as Record<string, unknown>;
  if (fields.kind !== 'watchdog') {
    throw new InvalidEventError(
      'kind',
      `kind is ${describe(fields.kind)}; this function is the watchdog and takes {"kind":"watchdog", …} from a ` +
        "job's watchdog schedule: a job's own schedule must target the job's function or queue",
    );
  }
  assertJobId(fields.jobId);
  const schedule = scheduleSpec(fields.schedule);
  const deadlineSeconds = number(fields.deadlineSeconds, 'deadlineSeconds', 'seconds');
  if (deadlineSeconds === undefined) {
    throw new InvalidEventError(
      'deadlineSeconds',
      "deadlineSeconds is missing; send the job's deadline in seconds (its function's SLOTGUARD_DEADLINE_SECONDS)",
    );
  }
  const graceSeconds = number(fields.graceSeconds, 'graceSeconds', 'seconds');
  const lookbackHours = number(fields.lookbackHours, 'lookbackHours', 'hours');
  if (fields.confirmInDoubt !== undefined && typeof fields.confirmInDoubt !== 'boolean') {
    throw new InvalidEventError(
      'confirmInDoubt',
      `confirmInDoubt is ${describe(fields.confirmInDoubt)}; send true (confirm in-doubt effects the provider ` +
        'accepted) or false, as a JSON boolean, or leave it out',
    );
  }
  const rateStart = instant(fields.rateStart, 'rateStart');
  const notBefore = instant(fields.notBefore, 'notBefore');
  if (rateStart === undefined && /^\s*rate\s*\(/.test(schedule.expression)) {
    throw new InvalidEventError(
      'rateStart',
      `rateStart is missing for ${JSON.stringify(schedule.expression)}; a rate() schedule counts from its StartDate, ` +
        "so send the instant the job's schedule starts at (ISO 8601, e.g. 2026-12-01T00:00:00Z), the same as its StartDate",
    );
  }
  return {
    jobId: fields.jobId,
    schedule,
    deadlineMs: deadlineSeconds * 1000,
    graceMs: (graceSeconds ?? WATCHDOG_EVENT_DEFAULTS.graceSeconds) * 1000,
    lookbackMs: (lookbackHours ?? WATCHDOG_EVENT_DEFAULTS.lookbackHours) * 3_600_000,
    confirmInDoubt: fields.confirmInDoubt === true,
    ...(rateStart !== undefined ? { rateStart } : {}),
    ...(notBefore !== undefined ? { notBefore } : {}),
  };
}

function scheduleSpec(value: unknown): ScheduleSpec {
  const fields = typeof value === 'object' && value !== null && !Array.isArray(value) ? value : undefined;
  const { expression, timeZone } = (fields ?? {}) as Record<string, unknown>;
  if (typeof expression !== 'string' || (timeZone !== undefined && typeof timeZone !== 'string')) {
    throw new InvalidEventError(
      'schedule',
      `schedule is ${fields ? `{ expression: ${describe(expression)}, timeZone: ${describe(timeZone)} }` : describe(value)}; ` +
        `send the job's schedule as its JobSpec has it, e.g. {"expression":"cron(0 9 ? * MON *)","timeZone":"Europe/Moscow"}`,
    );
  }
  return timeZone === undefined ? { expression } : { expression, timeZone };
}

function number(value: unknown, field: string, unit: string): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    throw new InvalidEventError(
      field,
      `${field} is ${describe(value)}; send a number of ${unit} (JSON number, not a string)`,
    );
  }
  return value;
}

function instant(value: unknown, field: string): number | undefined {
  if (value === undefined) return undefined;
  const millis = typeof value === 'string' ? Date.parse(value) : Number.NaN;
  if (Number.isNaN(millis) || !/^\d{4}-\d{2}-\d{2}T.*(Z|[+-]\d{2}:\d{2})$/.test(value as string)) {
    throw new InvalidEventError(
      field,
      `${field} is ${describe(value)}; send an ISO 8601 instant with its zone, e.g. 2026-12-01T00:00:00Z`,
    );
  }
  return millis;
}
