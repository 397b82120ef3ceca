import { describe, expect, it } from 'vitest';
import { jobDeadlineMs } from '../../shared/watchdog/window-deadline.js';

const from = Date.parse('2026-11-30T00:00:00Z');
const MINUTE = 60_000;

describe("a job's window deadline", () => {
  it.each([
    ['rate(15 minutes)', 'UTC', 15 * MINUTE],
    ['cron(0 9 ? * MON *)', 'Europe/Moscow', 6 * 60 * MINUTE],
    ['cron(0 9 1 * ? *)', 'Europe/Moscow', 6 * 60 * MINUTE],
    // 09:00 then 10:00: the window must be over before the next one, an hour later, not 23 hours.
    ['cron(0 9,10 * * ? *)', 'UTC', 60 * MINUTE],
    ['at(2026-12-24T18:00:00)', 'Europe/Berlin', 6 * 60 * MINUTE],
  ])('does not let a window of %s (%s) run into the next one: %i ms', (expression, timeZone, expected) => {
    expect(jobDeadlineMs({ schedule: { expression, timeZone } }, from)).toBe(expected);
  });

  it('takes the deadline a job sets for itself over the default', () => {
    expect(jobDeadlineMs({ schedule: { expression: 'rate(15 minutes)' }, deadlineMinutes: 45 }, from)).toBe(
      45 * MINUTE,
    );
  });
});
