import { InvalidEventError } from '../errors.js';
import type { Claim } from './ports.js';

/**
 * Job ids are part of every storage key, metric dimension and IAM condition, so they are held to a
 * small documented alphabet: a lower-case letter, then up to 62 lower-case letters, digits or
 * hyphens (`weekly-report`, `invoice-sweep-eu`). No `#`, which separates key parts.
 */
export const JOB_ID_PATTERN = /^[a-z][a-z0-9-]{0,62}$/;

/** A (job, window) slot: the unit that runs at most once. */
export interface Slot {
  readonly jobId: string;
  /**
   * The window, as the canonical UTC ISO-8601 instant the schedule fired for
   * (`2026-11-30T06:00:00Z`). It comes from the schedule's own scheduled-time, never from
   * Date.now(), so a retry a day later lands in the same slot.
   */
  readonly window: string;
  /**
   * One shard of a sharded window (0 to shards − 1): its own fenced sub-claim, with its own epoch
   * and lease, run by its own invocation. Absent for the window itself.
   */
  readonly shard?: number;
}

/** The most shards a window may be split into. */
export const MAX_SHARDS = 1_000;

/** Checks a job id against the allowlist; the error names the value and the rule. */
export function assertJobId(jobId: unknown, field = 'jobId'): asserts jobId is string {
  if (typeof jobId !== 'string' || !JOB_ID_PATTERN.test(jobId)) {
    throw new InvalidEventError(
      field,
      `${field} ${describe(jobId)} is not a valid job id: use 1-63 characters, a lower-case letter first, ` +
        'then lower-case letters, digits or hyphens (for example "weekly-report")',
    );
  }
}

const ISO_INSTANT = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$/;

/**
 * Parses the scheduled time EventBridge Scheduler places in the target input
 * (`<aws.scheduler.scheduled-time>`, e.g. `2026-11-30T06:00:00Z`) and returns the canonical window
 * string (UTC, whole seconds). Anything else is a permanent error.
 */
export function parseScheduledTime(value: unknown, field = 'scheduledTime'): string {
  if (typeof value !== 'string') {
    throw new InvalidEventError(
      field,
      `${field} is ${describe(value)}; the target input must carry "<aws.scheduler.scheduled-time>" as a string`,
    );
  }
  const match = ISO_INSTANT.exec(value);
  const millis = match ? Date.parse(value) : Number.NaN;
  if (!match || Number.isNaN(millis) || !calendarFieldsRoundTrip(match)) {
    throw new InvalidEventError(
      field,
      `${field} ${describe(value)} is not an ISO-8601 instant such as "2026-11-30T06:00:00Z"; ` +
        'pass the schedule context attribute "<aws.scheduler.scheduled-time>" unchanged',
    );
  }
  return windowOf(millis);
}

/**
 * The slot every backend stores for `slot`: the job id checked against JOB_ID_PATTERN (so no `#`
 * can make two slots one key) and the window canonicalised, so one instant spelled `…Z`, `….000Z`
 * or `+01:00` is one slot on every backend. Called at each adapter's edge; anything else is an
 * InvalidEventError (permanent).
 */
export function canonicalSlot(slot: Slot): Slot {
  assertJobId(slot.jobId);
  if (slot.shard !== undefined) assertShard(slot.shard, MAX_SHARDS);
  const window = parseScheduledTime(slot.window, 'window');
  return window === slot.window ? slot : { ...slot, window };
}

/** The window a shard belongs to: the slot without its shard. */
export function windowSlot(slot: Slot): Slot {
  return slot.shard === undefined ? slot : { jobId: slot.jobId, window: slot.window };
}

/** Checks a shard index (0 to count − 1); the error names the value and the range. */
export function assertShard(shard: unknown, count: number, field = 'shard'): asserts shard is number {
  if (typeof shard !== 'number' || !Number.isInteger(shard) || shard < 0 || shard >= count) {
    throw new InvalidEventError(
      field,
      `${field} is ${describe(shard)}; a shard is a whole number from 0 to ${count - 1}`,
    );
  }
}

/** A claim whose slot is canonical (see canonicalSlot): the same claim when it already is. */
export function canonicalClaim(claim: Claim): Claim {
  const slot = canonicalSlot(claim.slot);
  return slot === claim.slot ? claim : { ...claim, slot };
}

/** The canonical window string for an instant: UTC, whole seconds, `Z`. */
export function windowOf(instant: Date | number): string {
  const millis = typeof instant === 'number' ? instant : instant.getTime();
  return `${new Date(millis - (millis % 1000)).toISOString().slice(0, 19)}Z`;
}

/** `Date.parse` rolls 2026-02-31 over to March; a scheduled time must name a real calendar instant. */
function calendarFieldsRoundTrip(match: RegExpExecArray): boolean {
  const [, y, mo, d, h, mi, s] = match.map(Number) as number[];
  if (mo! < 1 || mo! > 12 || h! > 23 || mi! > 59 || s! > 59) return false;
  const daysInMonth = new Date(Date.UTC(y!, mo!, 0)).getUTCDate();
  return d! >= 1 && d! <= daysInMonth;
}

/** A short, safe rendering of a received value for an error message. */
export function describe(value: unknown): string {
  if (value === undefined) return 'missing';
  if (value === null) return 'null';
  if (typeof value === 'string') {
    const shown = value.length > 80 ? `${value.slice(0, 80)}…` : value;
    return JSON.stringify(shown);
  }
  if (typeof value === 'object') return Array.isArray(value) ? 'an array' : 'an object';
  return `${typeof value} ${String(value)}`;
}
