import type { Stack } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { ClaimsTable } from '../../infra/claims-table.js';
import { InfraValidationError } from '../../infra/infra-validation-error.js';
import { ScheduledJob } from '../../infra/scheduled-job.js';
import type { ScheduleSpec } from '../../shared/job/job-spec.js';
import { jobSpec, REPOSITORY_ROOT, stackWithoutBundling } from './fixtures.js';

function addJob(stack: Stack, schedule: ScheduleSpec): ScheduledJob {
  return new ScheduledJob(stack, 'job', {
    job: jobSpec({ schedule }),
    claims: new ClaimsTable(stack, 'Claims'),
    projectRoot: REPOSITORY_ROOT,
  });
}

function synthError(schedule: ScheduleSpec): InfraValidationError {
  try {
    addJob(stackWithoutBundling(), schedule);
  } catch (error) {
    expect(error).toBeInstanceOf(InfraValidationError);
    return error as InfraValidationError;
  }
  throw new Error(`${JSON.stringify(schedule)} synthesised`);
}

describe('ScheduledJob: a one-time job whose time has passed', () => {
  it('synthesises with a warning and no Scheduler schedule, so the stack can be deployed again after it fired', () => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, { expression: 'at(2020-01-15T09:00:00)', timeZone: 'Europe/Moscow' });

    expect(job.schedule).toBeUndefined();
    expect(job.analysedSchedule).toMatchObject({ kind: 'at', passed: true });
    const template = Template.fromStack(stack);
    // Only the watchdog's schedule for the job, which still reports its window if it never ran.
    expect(
      Object.values(template.findResources('AWS::Scheduler::Schedule')).map((s) => s.Properties.Description),
    ).toEqual(['slotguard watchdog of job weekly-report']);
    // The rest of the job stays: its function, queue and alarms, beside the watchdog's function and alarm.
    template.resourceCountIs('AWS::Lambda::Function', 2);
    template.resourceCountIs('AWS::CloudWatch::Alarm', Object.keys(job.alarms).length + 1);
    const warnings = Annotations.fromStack(stack).findWarning('/Test/job', Match.anyValue());
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.entry.data).toMatch(
      /^job\.schedule\.expression "at\(2020-01-15T09:00:00\)" \(Europe\/Moscow\) of job 'weekly-report' was due at 2020-01-15T06:00:00Z, before this synth: no EventBridge Scheduler schedule is created for it.* \[ack: slotguard:atInPast\]$/,
    );
  });

  it('still creates the schedule, without a warning, while the time is ahead', () => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, { expression: 'at(2099-01-15T09:00:00)', timeZone: 'Europe/Moscow' });

    expect(job.schedule).toBeDefined();
    Template.fromStack(stack).hasResourceProperties('AWS::Scheduler::Schedule', {
      ScheduleExpression: 'at(2099-01-15T09:00:00)',
      ScheduleExpressionTimezone: 'Europe/Moscow',
    });
    expect(Annotations.fromStack(stack).findWarning('/Test/job', Match.anyValue())).toHaveLength(0);
  });

  it('refuses a one-time job whose local time the clocks skip (it would never fire)', () => {
    const error = synthError({ expression: 'at(2099-03-29T02:30:00)', timeZone: 'Europe/Berlin' });
    expect(error.prop).toBe('job.schedule.expression');
    expect(error.message).toContain('2099-03-29T02:30:00 does not exist in Europe/Berlin');
  });
});

describe('ScheduledJob refuses, at synth, the expressions and zones Scheduler refuses', () => {
  it.each([
    [
      { expression: 'cron(0 9 ? * 8 *)', timeZone: 'UTC' },
      'job.schedule.expression',
      'job.schedule.expression "cron(0 9 ? * 8 *)" has "8" in the day-of-week field, which takes 1-7 (1 = SUN, 7 = SAT) ' +
        'or SUN-SAT: 8 is outside it; AWS counts weekdays 1 to 7 from Sunday: write 1 or SUN for Sunday, 7 or SAT for Saturday',
    ],
    [
      { expression: 'cron(0 9 ? * 3#1,6#3 *)', timeZone: 'UTC' },
      'job.schedule.expression',
      'job.schedule.expression "cron(0 9 ? * 3#1,6#3 *)" has "3#1,6#3" in the day-of-week field, where # may only be ' +
        'the one expression: Scheduler reads a list with # as several expressions and refuses it; create one schedule ' +
        'per nth weekday: cron(0 9 ? * 3#1 *) and cron(0 9 ? * 6#3 *)',
    ],
    [
      { expression: 'cron(0 9 1 1 ? 2200)', timeZone: 'UTC' },
      'job.schedule.expression',
      'job.schedule.expression "cron(0 9 1 1 ? 2200)" has "2200" in the year field, which takes 1970-2199: 2200 is ' +
        'outside it; use years 1970 to 2199, or * for every year',
    ],
    [
      { expression: 'cron(0 9 ? * MON *)', timeZone: 'europe/moscow' },
      'job.schedule.timeZone',
      'job.schedule.timeZone "europe/moscow" is not a name in the IANA time zone database (EventBridge Scheduler\'s), ' +
        'whose names are case-sensitive; write "Europe/Moscow"',
    ],
    [
      { expression: 'cron(0 9 ? * MON *)', timeZone: 'PST' },
      'job.schedule.timeZone',
      'job.schedule.timeZone "PST" is not a name in the IANA time zone database (EventBridge Scheduler\'s); Node.js ' +
        'alone reads it as "America/Los_Angeles"; write "America/Los_Angeles" if that is the zone meant',
    ],
  ])('refuses %j', (schedule, prop, message) => {
    const error = synthError(schedule);
    expect(error.prop).toBe(prop);
    expect(error.message).toBe(`ScheduledJob 'Test/job': ${message}`);
  });

  it('passes a legacy zone name of the IANA database (EST) through to Scheduler as written', () => {
    const stack = stackWithoutBundling();
    addJob(stack, { expression: 'cron(0 9 ? * MON *)', timeZone: 'EST' });
    Template.fromStack(stack).hasResourceProperties('AWS::Scheduler::Schedule', {
      ScheduleExpressionTimezone: 'EST',
    });
  });
});
