import { type App, type CfnElement, Duration, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as sns from 'aws-cdk-lib/aws-sns';
import type { IConstruct } from 'constructs';
import { describe, expect, it } from 'vitest';
import { ClaimsTable } from '../../infra/claims-table.js';
import { ScheduledJob, type ScheduledJobProps } from '../../infra/scheduled-job.js';
import { JOBS_PER_STOPPED_ALARM } from '../../infra/slotguard-watchdog.js';
import { emfMetrics } from '../../shared/telemetry/metrics.js';
import { createWatchdogHandler } from '../../shared/watchdog/watchdog-lambda.js';
import { EmfRecorder, RecordingLog } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { jobSpec, REPOSITORY_ROOT, stackWithoutBundling } from './fixtures.js';

/** Template JSON as aws-cdk-lib/assertions types it. */
type Json = ReturnType<Template['toJSON']>;

function logicalIdOf(construct: IConstruct): string {
  const stack = Stack.of(construct);
  const element = (construct.node.defaultChild ?? construct) as CfnElement;
  return stack.resolve(stack.getLogicalId(element)) as string;
}

function addJob(stack: Stack, id: string, claims: ClaimsTable, props: Partial<ScheduledJobProps> = {}) {
  return new ScheduledJob(stack, id, {
    job: jobSpec({ id, ...props.job }),
    claims,
    projectRoot: REPOSITORY_ROOT,
    ...props,
  });
}

function pager(stack: Stack, name: string): actions.SnsAction {
  return new actions.SnsAction(
    sns.Topic.fromTopicArn(stack, `Topic-${name}`, `arn:aws:sns:eu-west-1:123456789012:${name}`),
  );
}

/** Every CloudWatch alarm of the watchdog's, by logical ID. */
function stoppedAlarms(stack: Stack): [string, Json][] {
  return Object.entries(Template.fromStack(stack).findResources('AWS::CloudWatch::Alarm')).filter(
    ([, alarm]) => JSON.stringify(alarm.Properties.Metrics ?? []).includes('WatchdogRun'),
  );
}

describe('SlotguardWatchdog: one per stack and claims backend', () => {
  it('serves every job of one backend with one function, and gives a second backend its own', () => {
    const stack = stackWithoutBundling();
    const claims = new ClaimsTable(stack, 'Claims');
    const other = new ClaimsTable(stack, 'OtherClaims');
    const first = addJob(stack, 'first', claims);
    const second = addJob(stack, 'second', claims);
    const third = addJob(stack, 'third', other);
    expect(second.watchdog).toBe(first.watchdog);
    expect(third.watchdog).not.toBe(first.watchdog);
    expect([first.watchdog.node.path, third.watchdog.node.path]).toEqual([
      'Test/ClaimsWatchdog',
      'Test/OtherClaimsWatchdog',
    ]);
    // Three jobs and two watchdogs.
    Template.fromStack(stack).resourceCountIs('AWS::Lambda::Function', 5);
    Template.fromStack(stack).resourceCountIs('AWS::Scheduler::ScheduleGroup', 5);
  });

  it('gives a job in another stack a watchdog in that stack, even on a shared backend', () => {
    const stack = stackWithoutBundling();
    const claims = new ClaimsTable(stack, 'Claims');
    const here = addJob(stack, 'here', claims);
    const elsewhere = addJob(new Stack(stack.node.root as App, 'Elsewhere'), 'elsewhere', claims);
    expect(Stack.of(elsewhere.watchdog)).not.toBe(Stack.of(here.watchdog));
    expect(elsewhere.watchdog.node.path).toBe('Elsewhere/ClaimsWatchdog');
  });

  it('retries a failed run never (the next one comes in 15 minutes) and lets only its own schedule group invoke it', () => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, 'job', new ClaimsTable(stack, 'Claims'));
    const template = Template.fromStack(stack);
    const fn = template.toJSON().Resources[logicalIdOf(job.watchdog.function)];
    expect(fn.Properties).toMatchObject({ Timeout: 120, MemorySize: 256, Architectures: ['arm64'] });
    template.hasResourceProperties('AWS::Lambda::EventInvokeConfig', {
      FunctionName: { Ref: logicalIdOf(job.watchdog.function) },
      MaximumRetryAttempts: 0,
    });
    const role = template.toJSON().Resources[logicalIdOf(job.watchdog.node.findChild('SchedulerRole'))];
    expect(role.Properties.AssumeRolePolicyDocument.Statement[0].Condition).toEqual({
      StringEquals: { 'aws:SourceAccount': { Ref: 'AWS::AccountId' } },
      ArnEquals: { 'aws:SourceArn': { 'Fn::GetAtt': [logicalIdOf(job.watchdog.scheduleGroup), 'Arn'] } },
    });
  });
});

describe("SlotguardWatchdog: each job's schedule", () => {
  it("tells the watchdog the job's schedule, deadline and missed-run grace every 15 minutes, in the job's own construct", () => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, 'job', new ClaimsTable(stack, 'Claims'), {
      job: jobSpec({ id: 'job', schedule: { expression: 'cron(0 6 1 * ? *)', timeZone: 'Europe/Berlin' } }),
      missedRunGrace: Duration.minutes(40),
    });
    expect(job.watchdogSchedule.node.path).toBe('Test/job/WatchdogSchedule');
    const schedule = Template.fromStack(stack).toJSON().Resources[logicalIdOf(job.watchdogSchedule)];
    expect(schedule.Properties.ScheduleExpression).toBe('rate(15 minutes)');
    expect(schedule.Properties.Target.RetryPolicy).toEqual({
      MaximumRetryAttempts: 3,
      MaximumEventAgeInSeconds: 900,
    });
    // No notBefore: watchedSince is not set.
    expect(JSON.parse(schedule.Properties.Target.Input)).toEqual({
      kind: 'watchdog',
      jobId: 'job',
      schedule: { expression: 'cron(0 6 1 * ? *)', timeZone: 'Europe/Berlin' },
      deadlineSeconds: 21_600,
      graceSeconds: 2_400,
      lookbackHours: 48,
    });
  });

  it('looks back past a long deadline by a day, so a window is still watched once it is due to be finished', () => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, 'job', new ClaimsTable(stack, 'Claims'), {
      job: jobSpec({ id: 'job', deadlineMinutes: 3 * 1440 }),
    });
    const schedule = Template.fromStack(stack).toJSON().Resources[logicalIdOf(job.watchdogSchedule)];
    // 72 hours and 15 minutes, rounded up, plus a day.
    expect(JSON.parse(schedule.Properties.Target.Input).lookbackHours).toBe(73 + 24);
  });
});

describe('SlotguardWatchdog: the input, read by the watchdog handler itself', () => {
  it('is audited for a rate, a weekly cron and a one-time job alike, each run counting WatchdogRun (no rejected event, no WatchdogStopped)', async () => {
    const stack = stackWithoutBundling();
    const claims = new ClaimsTable(stack, 'Claims');
    const since = new Date('2026-11-30T00:00:00Z');
    const jobs = [
      addJob(stack, 'reminder', claims, {
        job: jobSpec({ id: 'reminder', schedule: { expression: 'rate(15 minutes)' }, timeoutSeconds: 300 }),
        watchedSince: since,
      }),
      addJob(stack, 'weekly', claims, { job: jobSpec({ id: 'weekly' }), watchedSince: since }),
      addJob(stack, 'once', claims, {
        job: jobSpec({ id: 'once', schedule: { expression: 'at(2099-01-01T09:00:00)' } }),
      }),
    ];
    const resources = Template.fromStack(stack).toJSON().Resources;
    const emf = new EmfRecorder();
    const handler = createWatchdogHandler({
      // A backend with no records: every window due is missing.
      claims: { read: async () => undefined },
      metrics: (jobId) => emfMetrics({ jobId, write: emf.write }),
      log: () => new RecordingLog(),
      clock: new ManualClock(Date.parse('2026-11-30T10:00:00Z')),
    });
    const responses = [];
    for (const job of jobs) {
      responses.push(
        await handler(JSON.parse(resources[logicalIdOf(job.watchdogSchedule)].Properties.Target.Input)),
      );
    }
    expect(responses.map((r) => r.status)).toEqual(['audited', 'audited', 'audited']);
    // Since 00:00, the quarter hours due by 09:45 (10:00 minus the grace) are missing: 40 of them. The weekly
    // window of Monday 30 November 06:00Z is missing too; the one-time job is not due.
    expect(emf.records.map((r) => [r.JobId, r.WindowMissing, r.WatchdogRun])).toEqual([
      ['reminder', 40, 1],
      ['weekly', 1, 1],
      ['once', 0, 1],
    ]);
  });
});

describe('SlotguardWatchdog: the WatchdogStopped alarm', () => {
  it("notifies the union of its jobs' alarm actions, each once", () => {
    const stack = stackWithoutBundling();
    const claims = new ClaimsTable(stack, 'Claims');
    const oncall = pager(stack, 'oncall');
    addJob(stack, 'first', claims, { alarmActions: [oncall] });
    addJob(stack, 'second', claims, { alarmActions: [oncall, pager(stack, 'team')] });
    addJob(stack, 'quiet', claims);
    const alarms = stoppedAlarms(stack);
    expect(alarms).toHaveLength(1);
    expect(alarms[0]![1].Properties.AlarmActions).toEqual([
      'arn:aws:sns:eu-west-1:123456789012:oncall',
      'arn:aws:sns:eu-west-1:123456789012:team',
    ]);
  });

  it(`watches at most ${JOBS_PER_STOPPED_ALARM} jobs per alarm (CloudWatch's limit on metrics in one expression)`, () => {
    const stack = stackWithoutBundling();
    const claims = new ClaimsTable(stack, 'Claims');
    const jobs = Array.from({ length: JOBS_PER_STOPPED_ALARM + 1 }, (_, i) =>
      addJob(stack, `job-${i}`, claims),
    );
    const alarms = stoppedAlarms(stack);
    expect(alarms.map(([, alarm]) => alarm.Properties.Metrics.length)).toEqual([
      JOBS_PER_STOPPED_ALARM + 1,
      2,
    ]);
    const watchdog = jobs[0]!.watchdog;
    expect(watchdog.alarms).toHaveLength(2);
    expect(watchdog.stoppedAlarmOf('job-10')).toBe(watchdog.alarms[1]);
    expect(watchdog.stoppedAlarmOf('job-9')).toBe(watchdog.alarms[0]);
    expect(watchdog.stoppedAlarmOf('not-watched')).toBeUndefined();
    const last = alarms[1]![1].Properties.Metrics;
    expect(last[0].MetricStat.Metric.Dimensions).toEqual([{ Name: 'JobId', Value: 'job-10' }]);
    expect(last[1].Expression).toBe('MIN(FILL(METRICS(), 0))');
  });

  it("refuses at synth to notify more than CloudWatch's 5 actions, naming the jobs and the fix", () => {
    const stack = stackWithoutBundling();
    const claims = new ClaimsTable(stack, 'Claims');
    for (let i = 0; i < 3; i++) {
      addJob(stack, `job-${i}`, claims, { alarmActions: [pager(stack, `a${i}`), pager(stack, `b${i}`)] });
    }
    expect(() => Template.fromStack(stack)).toThrow(
      /the WatchdogStopped alarm of jobs job-0, job-1, job-2 would notify 6 alarm actions \(the union of their alarmActions\), over CloudWatch's 5; give these jobs one SNS topic that fans out to your pagers/,
    );
  });
});
