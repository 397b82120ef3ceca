import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { App, type CfnElement, Duration, RemovalPolicy, Stack, Validations } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import * as sns from 'aws-cdk-lib/aws-sns';
import { BUNDLING_STACKS } from 'aws-cdk-lib/cx-api';
import { AwsSolutionsChecks } from 'cdk-nag';
import type { IConstruct } from 'constructs';
import { describe, expect, it } from 'vitest';
import { jobCatalog } from '../../functions/catalog.js';
import { ClaimsTable } from '../../infra/claims-table.js';
import { ALARM_PAGING, type AlarmKey } from '../../infra/paging.js';
import { ScheduledJob, type ScheduledJobProps, workQueueMaxReceiveCount } from '../../infra/scheduled-job.js';
import { SlotguardDashboard } from '../../infra/slotguard-dashboard.js';
import {
  DEFAULT_DEADLINE_CAP_MINUTES,
  defaultDeadlineSeconds,
  type JobSpec,
} from '../../shared/job/job-spec.js';
import { RuntimeEnv } from '../../shared/job/runtime-env.js';
import { jobDeadlineMs } from '../../shared/watchdog/window-deadline.js';
import { jobSpec, REPOSITORY_ROOT, stackWithoutBundling, validationError } from './fixtures.js';

/** Template JSON as aws-cdk-lib/assertions types it. */
type Json = ReturnType<Template['toJSON']>;

function addJob(
  stack: Stack,
  id: string,
  job: JobSpec,
  props: Partial<ScheduledJobProps> = {},
): ScheduledJob {
  const claims =
    (stack.node.tryFindChild('Claims') as ClaimsTable | undefined) ?? new ClaimsTable(stack, 'Claims');
  return new ScheduledJob(stack, id, { job, claims, projectRoot: REPOSITORY_ROOT, ...props });
}

function logicalIdOf(construct: IConstruct): string {
  const stack = Stack.of(construct);
  const element = (construct.node.defaultChild ?? construct) as CfnElement;
  return stack.resolve(stack.getLogicalId(element)) as string;
}

/** The resource `construct` synthesises to, from its stack's template. */
function resourceOf(stack: Stack, construct: IConstruct): Json {
  return Template.fromStack(stack).toJSON().Resources[logicalIdOf(construct)];
}

/** The statements of a job function role's default policy. */
function functionStatements(stack: Stack, job: ScheduledJob): Json[] {
  const policy = job.function.role!.node.findChild('DefaultPolicy');
  return resourceOf(stack, policy).Properties.PolicyDocument.Statement;
}

describe('ScheduledJob refuses props that cannot work, naming the construct, the prop, the value and the fix', () => {
  it('refuses a job id outside the allowlist (it becomes slot keys, metric dimensions and IAM conditions)', () => {
    const error = validationError((stack) => addJob(stack, 'bad', jobSpec({ id: 'Weekly_Report' })));
    expect(error.prop).toBe('job.id');
    expect(error.constructPath).toBe('Test/bad');
    expect(error.message).toBe(
      'ScheduledJob \'Test/bad\': job.id "Weekly_Report" is not a valid job id: it must match /^[a-z][a-z0-9-]{0,62}$/ ' +
        '(a lower-case letter, then up to 62 lower-case letters, digits or hyphens); rename the job, e.g. "weekly-report"',
    );
  });

  it('refuses two jobs with one id in the same app, even in different stacks, naming the first', () => {
    const error = validationError((stack) => {
      addJob(stack, 'first', jobSpec());
      addJob(new Stack(stack.node.root as App, 'Other'), 'second', jobSpec());
    });
    expect(error.prop).toBe('job.id');
    expect(error.message).toBe(
      "ScheduledJob 'Other/second': job.id \"weekly-report\" is already used by the ScheduledJob at 'Test/first'; " +
        'job ids are slot keys, metric dimensions and IAM conditions, so give each job in the app its own id',
    );
  });

  it('refuses a lease longer than the function timeout', () => {
    const error = validationError((stack) =>
      addJob(stack, 'job', jobSpec({ leaseSeconds: 1_200, timeoutSeconds: 900 })),
    );
    expect(error.prop).toBe('job.leaseSeconds');
    expect(error.message).toBe(
      "ScheduledJob 'Test/job': job.leaseSeconds is 1200, longer than the function timeout (job.timeoutSeconds 900): " +
        "a run killed by the timeout would keep its window's retries out until the lease ends; set job.leaseSeconds " +
        'to 900 or less (the runtime renews the lease while the run lasts)',
    );
  });

  it('refuses a cron that never fires (31 February)', () => {
    const error = validationError((stack) =>
      addJob(stack, 'job', jobSpec({ schedule: { expression: 'cron(0 9 31 2 ? *)', timeZone: 'UTC' } })),
    );
    expect(error.prop).toBe('job.schedule.expression');
    expect(error.message).toMatch(
      /^ScheduledJob 'Test\/job': job\.schedule\.expression "cron\(0 9 31 2 \? \*\)" never fires after \S+ \(day-of-month 31 does not occur in month 2\); correct the day-of-month, month and year fields so that some date matches; for the last day of a month use L$/,
    );
  });

  it('refuses an unknown time zone', () => {
    const error = validationError((stack) =>
      addJob(
        stack,
        'job',
        jobSpec({ schedule: { expression: 'cron(0 9 ? * MON *)', timeZone: 'Europe/Moskva' } }),
      ),
    );
    expect(error.prop).toBe('job.schedule.timeZone');
    expect(error.message).toBe(
      'ScheduledJob \'Test/job\': job.schedule.timeZone "Europe/Moskva" is not a name in the IANA time zone database ' +
        '(EventBridge Scheduler\'s); use an IANA name such as "Europe/Moscow", "America/New_York" or "UTC"',
    );
  });

  it('refuses a cron with both day fields set, pointing at ?', () => {
    const error = validationError((stack) =>
      addJob(stack, 'job', jobSpec({ schedule: { expression: 'cron(0 9 * * MON *)' } })),
    );
    expect(error.message).toBe(
      'ScheduledJob \'Test/job\': job.schedule.expression "cron(0 9 * * MON *)" sets both day-of-month and ' +
        'day-of-week, or neither; put ? in exactly one of them, e.g. cron(0 9 ? * MON *) or cron(0 9 1 * ? *)',
    );
  });

  it("refuses a timeout over Lambda's 900 seconds", () => {
    const error = validationError((stack) =>
      addJob(stack, 'job', jobSpec({ timeoutSeconds: 1_800, leaseSeconds: 60 })),
    );
    expect(error.prop).toBe('job.timeoutSeconds');
    expect(error.message).toMatch(
      /job\.timeoutSeconds is 1800, over Lambda's 900-second limit; set 900 or less/,
    );
  });

  it.each([
    [
      'job.effectConcurrency',
      { effectConcurrency: 0 },
      'job.effectConcurrency is number 0; set a whole number of 1 or more',
    ],
    [
      'job.maxAttempts',
      { maxAttempts: 1.5 },
      'job.maxAttempts is number 1.5; set a whole number of 1 or more',
    ],
    [
      'job.leaseSeconds',
      { leaseSeconds: -5 },
      'job.leaseSeconds is number -5; set a whole number of 1 or more',
    ],
  ] as const)('refuses %s that is not a positive whole number', (prop, overrides, message) => {
    const error = validationError((stack) => addJob(stack, 'job', jobSpec(overrides)));
    expect(error.prop).toBe(prop);
    expect(error.message).toBe(`ScheduledJob 'Test/job': ${message}`);
  });

  it.each([
    [{ takeoverSkewSeconds: 60 }, 'job.takeoverSkewSeconds is number 60'],
    [{ takeoverSkewSeconds: -1 }, 'job.takeoverSkewSeconds is number -1'],
    [{ takeoverSkewSeconds: 0.0005 }, 'job.takeoverSkewSeconds is number 0.0005'],
  ] as const)('refuses a takeover skew allowance a run cannot use: %j', (overrides, value) => {
    const error = validationError((stack) => addJob(stack, 'job', jobSpec(overrides)));
    expect(error.prop).toBe('job.takeoverSkewSeconds');
    expect(error.message).toBe(
      `ScheduledJob 'Test/job': ${value}; set seconds (to the millisecond) from 0 to less than job.leaseSeconds ` +
        '(60), or leave it out for 2',
    );
  });

  it('refuses retry attempts outside what Scheduler allows', () => {
    const error = validationError((stack) => addJob(stack, 'job', jobSpec(), { retry: { attempts: 500 } }));
    expect(error.prop).toBe('retry.attempts');
    expect(error.message).toBe(
      "ScheduledJob 'Test/job': retry.attempts is number 500; Scheduler allows a whole number from 0 to 185",
    );
  });

  it("refuses a maximum event age beyond Lambda's 6 hours", () => {
    const error = validationError((stack) =>
      addJob(stack, 'job', jobSpec(), { retry: { maxEventAge: Duration.hours(12) } }),
    );
    expect(error.prop).toBe('retry.maxEventAge');
    expect(error.message).toMatch(
      /retry\.maxEventAge is 43200 seconds; it must be between 60 seconds and 6 hours/,
    );
  });

  it('refuses a flexible window Scheduler does not take', () => {
    const error = validationError((stack) =>
      addJob(stack, 'job', jobSpec(), { flexibleTimeWindow: Duration.hours(25) }),
    );
    expect(error.prop).toBe('flexibleTimeWindow');
    expect(error.message).toMatch(
      /flexibleTimeWindow is 1500 minutes; Scheduler takes whole minutes from 1 to 1440/,
    );
  });

  it('refuses a From address outside the SES identity', () => {
    const error = validationError((stack) =>
      addJob(stack, 'job', jobSpec(), {
        ses: { identity: 'example.com', fromAddress: 'reports@example.org' },
      }),
    );
    expect(error.prop).toBe('ses.fromAddress');
    expect(error.message).toBe(
      'ScheduledJob \'Test/job\': ses.fromAddress "reports@example.org" is not at ses.identity "example.com"; ' +
        'use an address at the verified domain (or the verified address itself)',
    );
  });

  it('refuses a send-rate scope the runtime does not know, naming the two it takes', () => {
    const error = validationError((stack) =>
      addJob(stack, 'job', jobSpec(), {
        ses: {
          identity: 'example.com',
          fromAddress: 'reports@example.com',
          sendRateScope: 'account' as 'job',
        },
      }),
    );
    expect(error.prop).toBe('ses.sendRateScope');
    expect(error.message).toMatch(/ses.sendRateScope is "account"; set 'job' .* or 'process'/);
  });

  it('refuses a handler entry that does not exist, before bundling tries', () => {
    const error = validationError((stack) =>
      addJob(stack, 'job', jobSpec({ entry: 'functions/nope/handler.ts' })),
    );
    expect(error.prop).toBe('job.entry');
    expect(error.message).toMatch(
      /job\.entry "functions\/nope\/handler\.ts" is not a file under the project root/,
    );
  });

  it('refuses a memory size Lambda does not offer', () => {
    const error = validationError((stack) => addJob(stack, 'job', jobSpec(), { memorySize: 64 }));
    expect(error.message).toMatch(
      /memorySize is number 64; Lambda takes a whole number of MB from 128 to 10240/,
    );
  });

  it.each([
    [
      'a deadline shorter than the function timeout',
      { deadlineMinutes: 5, timeoutSeconds: 900 },
      {},
      "job.deadlineMinutes is 5, shorter than the function timeout (job.timeoutSeconds 900): a window's first run " +
        'could not use all of its time before the window is given up; set job.deadlineMinutes to 15 or more',
    ],
    [
      'a deadline longer than the work queue and the dead-letter queue can hold a window',
      { deadlineMinutes: 20_160 },
      {},
      "job.deadlineMinutes is 20160 (14.0 days), over 10080 (7 days): SQS keeps a window's message 14 days from " +
        'when the schedule sent it, dead-letter queue included, and a window given up at its deadline must leave ' +
        'the on-call a week to act on its dead letter; set job.deadlineMinutes to 10080 or less',
    ],
    [
      'a deadline longer than the records are kept',
      { deadlineMinutes: 4_320 },
      { retentionDays: 2 },
      "job.deadlineMinutes is 4320, longer than retentionDays (2, 2880 minutes) keeps the window's records: its slot " +
        'record could expire before the window ends, and a later run would start the window over; set ' +
        'job.deadlineMinutes to 2880 or less, or raise retentionDays',
    ],
    [
      'a deadline that is not a whole number of minutes',
      { deadlineMinutes: 90.5 },
      {},
      'job.deadlineMinutes is number 90.5; set a whole number of 1 or more',
    ],
  ] as const)('refuses %s', (_, job, props, message) => {
    const error = validationError((stack) => addJob(stack, 'job', jobSpec(job), props));
    expect(error.prop).toBe('job.deadlineMinutes');
    expect(error.message).toBe(`ScheduledJob 'Test/job': ${message}`);
  });

  it('refuses a maxConcurrency the SQS event source does not take (AWS allows 2 to 1000)', () => {
    const error = validationError((stack) => addJob(stack, 'job', jobSpec(), { maxConcurrency: 1 }));
    expect(error.prop).toBe('maxConcurrency');
    expect(error.message).toBe(
      "ScheduledJob 'Test/job': maxConcurrency is number 1; the SQS event source takes a whole number from 2 to " +
        "1000 (AWS's limits); leave it unset for 2",
    );
  });

  it.each([
    [0, 'number 0'],
    [1001, 'number 1001'],
    [2.5, 'number 2.5'],
  ])('refuses a shard count of %s (a whole number from 1 to 1000)', (shards, described) => {
    const error = validationError((stack) => addJob(stack, 'job', jobSpec({ shards })));
    expect(error.prop).toBe('job.shards');
    expect(error.message).toBe(
      `ScheduledJob 'Test/job': job.shards is ${described}; set a whole number from 1 to 1000: the parallel shards ` +
        'each window is split into (1, the default, runs a window in one run at a time)',
    );
  });

  it('refuses a maxConcurrency below the shard count: the shards would run in waves, not side by side', () => {
    const error = validationError((stack) =>
      addJob(stack, 'job', jobSpec({ shards: 8 }), { maxConcurrency: 4 }),
    );
    expect(error.prop).toBe('maxConcurrency');
    expect(error.message).toBe(
      "ScheduledJob 'Test/job': maxConcurrency is 4, below job.shards (8): a window's 8 shards would run 4 at a " +
        'time, in waves, each waiting for a whole run of the one before; set maxConcurrency to 8 or more (leave it ' +
        'unset for 8), or lower job.shards to 4',
    );
    // Out of AWS's range, the default it names is the shard count's.
    expect(
      validationError((stack) => addJob(stack, 'job', jobSpec({ shards: 8 }), { maxConcurrency: 1 })).message,
    ).toContain("(AWS's limits); leave it unset for 8");
  });

  it('refuses a missed-run grace shorter than the minute Scheduler fires within, or over a day', () => {
    const error = validationError((stack) =>
      addJob(stack, 'job', jobSpec(), { missedRunGrace: Duration.seconds(30) }),
    );
    expect(error.prop).toBe('missedRunGrace');
    expect(error.message).toBe(
      "ScheduledJob 'Test/job': missedRunGrace is number 30 seconds; set 1 minute to 24 hours: how long after its " +
        'scheduled time a window may have no record before the watchdog reports it missing (Scheduler fires within ' +
        'the minute)',
    );
    expect(
      validationError((stack) => addJob(stack, 'job', jobSpec(), { missedRunGrace: Duration.hours(25) }))
        .prop,
    ).toBe('missedRunGrace');
  });
});

describe('ScheduledJob options', () => {
  it('turns on the flexible window only when asked, and passes a payload in the input', () => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, 'job', jobSpec(), {
      flexibleTimeWindow: Duration.minutes(15),
      payload: { segment: 'eu' },
    });
    const schedule = resourceOf(stack, job.node.findChild('Schedule'));
    expect(schedule.Properties.FlexibleTimeWindow).toEqual({ Mode: 'FLEXIBLE', MaximumWindowInMinutes: 15 });
    expect(JSON.parse(schedule.Properties.Target.Input)).toEqual({
      jobId: 'weekly-report',
      scheduledTime: '<aws.scheduler.scheduled-time>',
      executionId: '<aws.scheduler.execution-id>',
      attemptNumber: '<aws.scheduler.attempt-number>',
      payload: { segment: 'eu' },
    });
  });

  it("applies the retry policy to Scheduler's sends, and maxAttempts to Lambda's retries of direct asynchronous invokes", () => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, 'job', jobSpec({ maxAttempts: 1 }), {
      retry: { attempts: 3, maxEventAge: Duration.minutes(30) },
    });
    expect(resourceOf(stack, job.node.findChild('Schedule')).Properties.Target.RetryPolicy).toEqual({
      MaximumRetryAttempts: 3,
      MaximumEventAgeInSeconds: 1_800,
    });
    Template.fromStack(stack).hasResourceProperties('AWS::Lambda::EventInvokeConfig', {
      FunctionName: { Ref: logicalIdOf(job.function) },
      MaximumRetryAttempts: 0,
      MaximumEventAgeInSeconds: 1_800,
    });
  });

  it('shares one generated effect-key secret between the jobs of a stack, or uses the one given', () => {
    const stack = stackWithoutBundling();
    const first = addJob(stack, 'first', jobSpec({ id: 'first' }));
    const second = addJob(stack, 'second', jobSpec({ id: 'second' }));
    expect(first.effectKeySecret).toBe(second.effectKeySecret);
    const own = new secretsmanager.Secret(stack, 'Own');
    const third = addJob(stack, 'third', jobSpec({ id: 'third' }), { effectKeySecret: own });
    expect(third.effectKeySecret).toBe(own);
    Template.fromStack(stack).resourceCountIs('AWS::SecretsManager::Secret', 2);
  });

  it('sets no SES variables and grants no SES action when the job does not send email', () => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, 'job', jobSpec());
    expect(resourceOf(stack, job.function).Properties.Environment.Variables).not.toHaveProperty(
      'SLOTGUARD_SES_FROM',
    );
    expect(JSON.stringify(Template.fromStack(stack).findResources('AWS::IAM::Policy'))).not.toContain('ses:');
  });
});

describe('ScheduledJob: the work queue', () => {
  it('sends each window to an encrypted, TLS-only work queue that redrives to the dead-letter queue', () => {
    const stack = stackWithoutBundling();
    // Deadline 6 hours, timeout 15 minutes: 24 runs, twice that plus 50 deliveries.
    const job = addJob(stack, 'job', jobSpec({ timeoutSeconds: 900 }));
    const queue = resourceOf(stack, job.workQueue);
    expect(queue.Properties).toEqual({
      SqsManagedSseEnabled: true,
      VisibilityTimeout: 5_400,
      MessageRetentionPeriod: 1_209_600,
      RedrivePolicy: {
        deadLetterTargetArn: { 'Fn::GetAtt': [logicalIdOf(job.deadLetterQueue), 'Arn'] },
        maxReceiveCount: 98,
      },
    });
    Template.fromStack(stack).hasResourceProperties('AWS::SQS::QueuePolicy', {
      Queues: [{ Ref: logicalIdOf(job.workQueue) }],
      PolicyDocument: {
        Statement: [
          Match.objectLike({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } }),
        ],
      },
    });
    const target = resourceOf(stack, job.node.findChild('Schedule')).Properties.Target;
    expect(target.Arn).toEqual({ 'Fn::GetAtt': [logicalIdOf(job.workQueue), 'Arn'] });
    expect(target.DeadLetterConfig).toEqual({
      Arn: { 'Fn::GetAtt': [logicalIdOf(job.deadLetterQueue), 'Arn'] },
    });
    expect(target.RetryPolicy).toEqual({ MaximumRetryAttempts: 20, MaximumEventAgeInSeconds: 3_600 });
  });

  it.each([
    [30, 604_800, 1000],
    [60, 21_600, 770],
    [300, 900, 56],
    [900, 21_600, 98],
  ])(
    'dead-letters a window after min(1000, 2 x ceil(deadline / timeout) + 50) deliveries: timeout %i s, deadline %i s -> %i',
    (timeout, deadline, count) => {
      expect(workQueueMaxReceiveCount(deadline, timeout)).toBe(count);
    },
  );

  it('consumes the queue one window per invocation, reporting each failure on its own, at most maxConcurrency at once', () => {
    const stack = stackWithoutBundling();
    const twoAtOnce = addJob(stack, 'default', jobSpec({ id: 'default' }));
    const tenAtOnce = addJob(stack, 'ten', jobSpec({ id: 'ten' }), { maxConcurrency: 10 });
    const mappings = Template.fromStack(stack).findResources('AWS::Lambda::EventSourceMapping');
    const of = (job: ScheduledJob) =>
      Object.values(mappings).filter(
        (m) =>
          JSON.stringify(m.Properties.FunctionName) === JSON.stringify({ Ref: logicalIdOf(job.function) }),
      );
    expect(of(twoAtOnce).map((m) => m.Properties)).toEqual([
      {
        FunctionName: { Ref: logicalIdOf(twoAtOnce.function) },
        EventSourceArn: { 'Fn::GetAtt': [logicalIdOf(twoAtOnce.workQueue), 'Arn'] },
        BatchSize: 1,
        FunctionResponseTypes: ['ReportBatchItemFailures'],
        ScalingConfig: { MaximumConcurrency: 2 },
      },
    ]);
    expect(of(tenAtOnce)[0]!.Properties.ScalingConfig).toEqual({ MaximumConcurrency: 10 });
  });

  it("lets the function change its messages' visibility and send continuations on its own queue only", () => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, 'job', jobSpec({ id: 'job' }));
    const other = addJob(stack, 'other', jobSpec({ id: 'other' }));
    const sqsStatements = functionStatements(stack, job).filter((s) =>
      [s.Action].flat().some((a: string) => a.startsWith('sqs:')),
    );
    const ownQueue = { 'Fn::GetAtt': [logicalIdOf(job.workQueue), 'Arn'] };
    expect(sqsStatements).toEqual([
      // Lambda's async dead-letter delivery, for direct invokes.
      {
        Effect: 'Allow',
        Action: 'sqs:SendMessage',
        Resource: { 'Fn::GetAtt': [logicalIdOf(job.deadLetterQueue), 'Arn'] },
      },
      // The event source's consume grant.
      {
        Effect: 'Allow',
        Action: [
          'sqs:ReceiveMessage',
          'sqs:ChangeMessageVisibility',
          'sqs:GetQueueUrl',
          'sqs:DeleteMessage',
          'sqs:GetQueueAttributes',
        ],
        Resource: ownQueue,
      },
      // The handler's heartbeat, retry delays and continuations.
      { Effect: 'Allow', Action: ['sqs:ChangeMessageVisibility', 'sqs:SendMessage'], Resource: ownQueue },
    ]);
    expect(JSON.stringify(sqsStatements)).not.toContain(logicalIdOf(other.workQueue));
  });

  it("shares the SES rate among every run of the job unless told to keep it per run, with no grant beyond the job's keys", () => {
    const stack = stackWithoutBundling();
    const ses = { identity: 'example.com', fromAddress: 'reports@example.com', maxSendRatePerSecond: 14 };
    const shared = addJob(stack, 'shared', jobSpec({ id: 'shared-rate' }), { ses });
    const perRun = addJob(stack, 'per-run', jobSpec({ id: 'per-run-rate' }), {
      ses: { ...ses, sendRateScope: 'process' },
    });
    expect(resourceOf(stack, shared.function).Properties.Environment.Variables).toMatchObject({
      [RuntimeEnv.sendRatePerSecond]: '14',
      [RuntimeEnv.sendRateScope]: 'job',
    });
    expect(resourceOf(stack, perRun.function).Properties.Environment.Variables).toMatchObject({
      [RuntimeEnv.sendRateScope]: 'process',
    });
    // The timeline's item is `<jobId>#ratelimit`: the job's LeadingKeys grant already covers it.
    const claims = functionStatements(stack, shared).find((statement) =>
      [statement.Action].flat().includes('dynamodb:UpdateItem'),
    );
    expect(claims?.Condition).toEqual({
      'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['shared-rate#*'] },
    });
  });

  it("sets the work queue's URL and the deadline for the runtime, and terminates recursive loops", () => {
    const stack = stackWithoutBundling();
    const job = addJob(
      stack,
      'job',
      jobSpec({ schedule: { expression: 'rate(15 minutes)' }, timeoutSeconds: 300 }),
    );
    const fn = resourceOf(stack, job.function).Properties;
    expect(fn.Environment.Variables).toMatchObject({
      [RuntimeEnv.workQueueUrl]: { Ref: logicalIdOf(job.workQueue) },
      [RuntimeEnv.deadlineSeconds]: '900',
    });
    expect(fn.RecursiveLoop).toBe('Terminate');
  });

  it('lets Scheduler send only to the work queue and the dead-letter queue, with no wildcard to acknowledge', () => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, 'job', jobSpec());
    const role = job.node.findChild('SchedulerRole') as iam.Role;
    const policy = resourceOf(stack, role.node.findChild('DefaultPolicy') as IConstruct);
    expect(policy.Properties.PolicyDocument.Statement).toEqual([
      {
        Effect: 'Allow',
        Action: 'sqs:SendMessage',
        Resource: { 'Fn::GetAtt': [logicalIdOf(job.workQueue), 'Arn'] },
      },
      {
        Effect: 'Allow',
        Action: 'sqs:SendMessage',
        Resource: { 'Fn::GetAtt': [logicalIdOf(job.deadLetterQueue), 'Arn'] },
      },
    ]);
  });
});

describe('ScheduledJob: shards', () => {
  /** The SQS statements of a job function's role, with the job's own queue ARNs named generically. */
  function sqsGrants(stack: Stack, job: ScheduledJob): Json[] {
    const statements = functionStatements(stack, job).filter((s) =>
      [s.Action].flat().some((a: string) => a.startsWith('sqs:')),
    );
    return JSON.parse(
      JSON.stringify(statements)
        .replaceAll(logicalIdOf(job.workQueue), '<work queue>')
        .replaceAll(logicalIdOf(job.deadLetterQueue), '<dead-letter queue>'),
    );
  }

  function eventSourceOf(stack: Stack, job: ScheduledJob): Json {
    const mappings = Object.values(
      Template.fromStack(stack).findResources('AWS::Lambda::EventSourceMapping'),
    );
    const own = mappings.filter(
      (m) => JSON.stringify(m.Properties.FunctionName) === JSON.stringify({ Ref: logicalIdOf(job.function) }),
    );
    expect(own).toHaveLength(1);
    return own[0]!.Properties;
  }

  it('tells the runtime the shard count, and runs every shard of a window at once by default', () => {
    const stack = stackWithoutBundling();
    const sharded = addJob(stack, 'sharded', jobSpec({ id: 'sharded', shards: 16 }));
    const single = addJob(stack, 'single', jobSpec({ id: 'single' }));
    // Two shards still get AWS's minimum of 2; a larger maxConcurrency is kept as given.
    const two = addJob(stack, 'two', jobSpec({ id: 'two', shards: 2 }));
    const wide = addJob(stack, 'wide', jobSpec({ id: 'wide', shards: 4 }), { maxConcurrency: 12 });
    const variables = (job: ScheduledJob) => resourceOf(stack, job.function).Properties.Environment.Variables;
    expect(variables(sharded)[RuntimeEnv.shards]).toBe('16');
    expect(variables(single)[RuntimeEnv.shards]).toBe('1');
    expect(sharded.job.shards).toBe(16);
    expect(single.job.shards).toBe(1);
    expect(eventSourceOf(stack, sharded).ScalingConfig).toEqual({ MaximumConcurrency: 16 });
    expect(eventSourceOf(stack, single).ScalingConfig).toEqual({ MaximumConcurrency: 2 });
    expect(eventSourceOf(stack, two).ScalingConfig).toEqual({ MaximumConcurrency: 2 });
    expect(eventSourceOf(stack, wide).ScalingConfig).toEqual({ MaximumConcurrency: 12 });
  });

  it('tells the runtime whether to reserve ahead: off unless the job asks', () => {
    const stack = stackWithoutBundling();
    const plain = addJob(stack, 'plain', jobSpec({ id: 'plain' }));
    const ahead = addJob(stack, 'ahead', jobSpec({ id: 'ahead', reserveAhead: true }));
    const variables = (job: ScheduledJob) => resourceOf(stack, job.function).Properties.Environment.Variables;
    expect(variables(plain)[RuntimeEnv.reserveAhead]).toBe('false');
    expect(variables(ahead)[RuntimeEnv.reserveAhead]).toBe('true');
    expect([plain.job.reserveAhead, ahead.job.reserveAhead]).toEqual([false, true]);
  });

  it('tells the runtime the takeover skew allowance: 2 s by default, a sixth of a short lease, or as set', () => {
    const stack = stackWithoutBundling();
    const plain = addJob(stack, 'plain', jobSpec({ id: 'plain' }));
    const short = addJob(stack, 'short', jobSpec({ id: 'short', leaseSeconds: 9 }));
    const skewed = addJob(stack, 'skewed', jobSpec({ id: 'skewed', takeoverSkewSeconds: 12.5 }));
    const variables = (job: ScheduledJob) => resourceOf(stack, job.function).Properties.Environment.Variables;
    expect(variables(plain)[RuntimeEnv.takeoverSkewSeconds]).toBe('2');
    expect(variables(short)[RuntimeEnv.takeoverSkewSeconds]).toBe('1.5');
    expect(variables(skewed)[RuntimeEnv.takeoverSkewSeconds]).toBe('12.5');
    expect(skewed.job.takeoverSkewSeconds).toBe(12.5);
  });

  it('adds no resource, no grant and no recursion allowance: the fan-out is a send to its own queue', () => {
    const singleStack = stackWithoutBundling();
    const single = addJob(singleStack, 'job', jobSpec({ id: 'job' }));
    const shardedStack = stackWithoutBundling();
    const sharded = addJob(shardedStack, 'job', jobSpec({ id: 'job', shards: 100 }));
    const count = (stack: Stack) => Object.keys(Template.fromStack(stack).toJSON().Resources).length;
    expect(count(shardedStack)).toBe(count(singleStack));
    // The coordinator's SendMessageBatch requests (authorised as sqs:SendMessage) are the grant a
    // direct invoke's continuation already had.
    expect(sqsGrants(shardedStack, sharded)).toEqual(sqsGrants(singleStack, single));
    expect(sqsGrants(shardedStack, sharded)).toContainEqual({
      Effect: 'Allow',
      Action: ['sqs:ChangeMessageVisibility', 'sqs:SendMessage'],
      Resource: { 'Fn::GetAtt': ['<work queue>', 'Arn'] },
    });
    expect(resourceOf(shardedStack, sharded.function).Properties.RecursiveLoop).toBe('Terminate');
    // Every shard's message is bounded like a window's: the shard is held to the window's deadline.
    expect(resourceOf(shardedStack, sharded.workQueue).Properties.RedrivePolicy.maxReceiveCount).toBe(
      resourceOf(singleStack, single.workQueue).Properties.RedrivePolicy.maxReceiveCount,
    );
  });

  it('says on the dashboard how a job splits its windows, and counts its runs per shard', () => {
    const stack = stackWithoutBundling();
    const sharded = addJob(stack, 'sharded', jobSpec({ id: 'sharded', shards: 4 }));
    const single = addJob(stack, 'single', jobSpec({ id: 'single' }));
    new SlotguardDashboard(stack, 'Dashboard', { jobs: [sharded, single] });
    expect(sharded.metricRunsPerWindow().label).toBe('runs per shard');
    expect(single.metricRunsPerWindow().label).toBe('runs per window');
    const body = JSON.stringify(Template.fromStack(stack).findResources('AWS::CloudWatch::Dashboard'));
    expect(body.match(/shards per window/g)).toEqual(['shards per window']);
    expect(body).toContain('deadline 360 min, 4 shards per window');
  });

  it('passes cdk-nag with a sharded job, with no acknowledgement beyond a single job’s', () => {
    const app = new App({ context: { [BUNDLING_STACKS]: [] } });
    const stack = new Stack(app, 'Test');
    addJob(stack, 'job', jobSpec({ shards: 32 }));
    Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
    const assembly = app.synth();
    const report = JSON.parse(readFileSync(join(assembly.directory, 'validation-report.json'), 'utf8'));
    const findings = report.pluginReports.flatMap((r: { violations?: unknown[] }) => r.violations ?? []);
    expect(findings).toEqual([]);
  });
});

describe('ScheduledJob: the schedule Scheduler gets', () => {
  it.each([
    ['rate(1 minute)', 'cron(* * * * ? *)'],
    ['rate(15 minutes)', 'cron(0/15 * * * ? *)'],
    ['rate(60 minutes)', 'cron(0 * * * ? *)'],
    ['rate(6 hours)', 'cron(0 0/6 * * ? *)'],
    ['rate(1 day)', 'cron(0 0 * * ? *)'],
  ])('deploys %s as %s in UTC, so the watchdog knows its windows', (rate, cron) => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, 'job', jobSpec({ schedule: { expression: rate, timeZone: 'Europe/Berlin' } }));
    expect(job.deployedSchedule).toEqual({ expression: cron, timeZone: 'UTC' });
    expect(resourceOf(stack, job.node.findChild('Schedule')).Properties).toMatchObject({
      ScheduleExpression: cron,
      ScheduleExpressionTimezone: 'UTC',
    });
    const input = JSON.parse(resourceOf(stack, job.watchdogSchedule).Properties.Target.Input);
    expect(input.schedule).toEqual({ expression: cron, timeZone: 'UTC' });
    expect(input).not.toHaveProperty('rateStart');
  });

  it('deploys a cron as written, in its own time zone', () => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, 'job', jobSpec());
    expect(job.deployedSchedule).toEqual({ expression: 'cron(0 9 ? * MON *)', timeZone: 'Europe/Moscow' });
  });

  it.each(['rate(7 minutes)', 'rate(5 hours)', 'rate(2 days)'])(
    'refuses %s, whose windows depend on when Scheduler created the schedule',
    (expression) => {
      const error = validationError((stack) => addJob(stack, 'job', jobSpec({ schedule: { expression } })));
      expect(error.prop).toBe('job.schedule.expression');
      expect(error.message).toBe(
        `ScheduledJob 'Test/job': job.schedule.expression ${JSON.stringify(expression)} cannot be watched: ` +
          'Scheduler counts a rate() from when its schedule is created, which synth cannot know, so the watchdog ' +
          'could not tell which windows it fires. A rate that divides an hour or a day is deployed as the UTC cron ' +
          'on the same grid (rate(15 minutes) as cron(0/15 * * * ? *)); use such a rate, or a cron() expression',
      );
    },
  );

  it('tells the watchdog not to judge windows before watchedSince, and refuses an invalid Date', () => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, 'job', jobSpec(), { watchedSince: new Date('2026-12-01T08:30:00Z') });
    const input = JSON.parse(resourceOf(stack, job.watchdogSchedule).Properties.Target.Input);
    expect(input.notBefore).toBe('2026-12-01T08:30:00.000Z');
    const error = validationError((other) =>
      addJob(other, 'job', jobSpec(), { watchedSince: new Date('yesterday') }),
    );
    expect(error.prop).toBe('watchedSince');
    expect(error.message).toMatch(
      /watchedSince is an invalid Date; give the instant the job was first deployed/,
    );
  });
});

describe('ScheduledJob: deadlines', () => {
  it.each([
    { label: 'a 15-minute rate', expression: 'rate(15 minutes)', timeoutSeconds: 300, seconds: 900 },
    {
      label: 'a weekly cron (capped at 6 hours)',
      expression: 'cron(0 9 ? * MON *)',
      timeoutSeconds: 900,
      seconds: 21_600,
    },
    {
      label: 'an hourly weekday cron (its shortest gap)',
      expression: 'cron(0 * ? * MON-FRI *)',
      timeoutSeconds: 900,
      seconds: 3_600,
    },
    {
      label: 'a per-minute cron (raised to the timeout)',
      expression: 'cron(* * * * ? *)',
      timeoutSeconds: 900,
      seconds: 900,
    },
    {
      label: 'a one-time job (6 hours)',
      expression: 'at(2099-01-01T09:00:00)',
      timeoutSeconds: 900,
      seconds: 21_600,
    },
  ])('gives $label a default deadline of $seconds s', ({ expression, timeoutSeconds, seconds }) => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, 'job', jobSpec({ schedule: { expression }, timeoutSeconds, leaseSeconds: 60 }));
    expect(job.deadline.toSeconds()).toBe(seconds);
    expect(job.job.deadlineMinutes).toBe(seconds / 60);
    expect(resourceOf(stack, job.function).Properties.Environment.Variables[RuntimeEnv.deadlineSeconds]).toBe(
      String(seconds),
    );
  });

  it.each(jobCatalog.map((job) => [job.id, job] as const))(
    'gives %s the deadline the operator CLI and the watchdog judge its windows by (jobDeadlineMs)',
    (id, spec) => {
      const job = addJob(stackWithoutBundling(), id, spec);
      expect(job.deadline.toMilliseconds()).toBe(jobDeadlineMs(spec));
    },
  );

  it('takes deadlineMinutes as given, and sizes the redrive count to it', () => {
    const stack = stackWithoutBundling();
    const job = addJob(
      stack,
      'job',
      jobSpec({ deadlineMinutes: 600, timeoutSeconds: 600, leaseSeconds: 60 }),
    );
    expect(job.deadline.toSeconds()).toBe(36_000);
    expect(resourceOf(stack, job.workQueue).Properties.RedrivePolicy.maxReceiveCount).toBe(2 * 60 + 50);
  });

  it('computes the default from the shortest gap, capped at 6 hours and raised to the timeout in whole minutes', () => {
    expect(defaultDeadlineSeconds(15 * 60_000, 300)).toBe(900);
    expect(defaultDeadlineSeconds(7 * 24 * 3_600_000, 900)).toBe(DEFAULT_DEADLINE_CAP_MINUTES * 60);
    expect(defaultDeadlineSeconds(undefined, 900)).toBe(21_600);
    expect(defaultDeadlineSeconds(60_000, 90)).toBe(120);
  });
});

describe('ScheduledJob: what pages', () => {
  const PAGER = 'arn:aws:sns:eu-west-1:123456789012:pager';

  it('gives the alarm actions to exactly the alarms ALARM_PAGING says page, and none to the others', () => {
    const stack = stackWithoutBundling();
    const topic = sns.Topic.fromTopicArn(stack, 'Pager', PAGER);
    const daily = jobSpec({ schedule: { expression: 'cron(0 6 * * ? *)', timeZone: 'UTC' } });
    const job = addJob(stack, 'job', daily, { alarmActions: [new actions.SnsAction(topic)] });
    const keys = Object.keys(job.alarms) as (keyof typeof job.alarms)[];
    // Every alarm but the watchdog's and the SES event recorder's, which are the stack's.
    const ofTheStack: AlarmKey[] = ['watchdogStopped', 'providerEventsLost'];
    expect(keys.sort()).toEqual(
      (Object.keys(ALARM_PAGING) as AlarmKey[]).filter((key) => !ofTheStack.includes(key)).sort(),
    );
    for (const key of keys) {
      const expected = ALARM_PAGING[key].pages ? [PAGER] : undefined;
      expect(resourceOf(stack, job.alarms[key]).Properties.AlarmActions, key).toEqual(expected);
    }
    // The job's alarms, and the watchdog's one for this job: no DuplicateClaim or missed-run alarm.
    Template.fromStack(stack).resourceCountIs('AWS::CloudWatch::Alarm', keys.length + 1);
    expect(keys.filter((key) => ALARM_PAGING[key].pages)).toHaveLength(10);
  });

  it('pages on a second dead letter while the first still sits: the alarm watches the rise of the depth, not the depth', () => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, 'job', jobSpec());
    const alarm = resourceOf(stack, job.alarms.deadLetters).Properties;
    // DIFF is each period's depth minus the period before's: 0 -> 1 is 1 (the first dead letter), 1 -> 1 is 0
    // (it sits; the alarm returns to OK), 1 -> 2 is 1 again (the second pages), whatever already sits.
    expect(alarm).toMatchObject({
      Threshold: 1,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      EvaluationPeriods: 1,
      TreatMissingData: 'notBreaching',
    });
    expect(alarm.Metrics).toEqual([
      { Id: 'expr_1', Expression: 'DIFF(FILL(depth, 0))', Label: 'dead letters arrived', ReturnData: true },
      {
        Id: 'depth',
        ReturnData: false,
        MetricStat: {
          Metric: {
            Namespace: 'AWS/SQS',
            MetricName: 'ApproximateNumberOfMessagesVisible',
            Dimensions: [
              { Name: 'QueueName', Value: { 'Fn::GetAtt': [logicalIdOf(job.deadLetterQueue), 'QueueName'] } },
            ],
          },
          Period: 300,
          Stat: 'Maximum',
        },
      },
    ]);
    expect(alarm).not.toHaveProperty('MetricName');
  });

  it('shows a window message waiting past its deadline and one visibility timeout on the dashboard, paging nobody', () => {
    const stack = stackWithoutBundling();
    const job = addJob(
      stack,
      'job',
      jobSpec({ schedule: { expression: 'rate(15 minutes)' }, timeoutSeconds: 300 }),
      {
        alarmActions: [new actions.SnsAction(sns.Topic.fromTopicArn(stack, 'Pager', PAGER))],
      },
    );
    expect(resourceOf(stack, job.alarms.workQueueAge).Properties).toMatchObject({
      Namespace: 'AWS/SQS',
      MetricName: 'ApproximateAgeOfOldestMessage',
      Dimensions: [{ Name: 'QueueName', Value: { 'Fn::GetAtt': [logicalIdOf(job.workQueue), 'QueueName'] } }],
      Statistic: 'Maximum',
      // 15 minutes' deadline plus 6 x 300 s of visibility timeout.
      Threshold: 900 + 1_800,
      ComparisonOperator: 'GreaterThanThreshold',
    });
    expect(resourceOf(stack, job.alarms.workQueueAge).Properties.AlarmActions).toBeUndefined();
  });
});

describe('ClaimsTable', () => {
  it('refuses a grant for a job id that would widen the LeadingKeys pattern', () => {
    const stack = stackWithoutBundling();
    const claims = new ClaimsTable(stack, 'Claims');
    const role = new iam.Role(stack, 'Role', { assumedBy: new iam.AccountRootPrincipal() });
    expect(() => claims.grantClaims(role, '*')).toThrow(
      "ClaimsTable 'Test/Claims': grantClaims jobId \"*\" does not match /^[a-z][a-z0-9-]{0,62}$/; pass the job's id " +
        '(1-63 lower-case letters, digits or hyphens, a letter first)',
    );
  });

  it('returns a grant limited to the job, with the item-level actions only', () => {
    const stack = stackWithoutBundling();
    const claims = new ClaimsTable(stack, 'Claims');
    const role = new iam.Role(stack, 'Role', { assumedBy: new iam.AccountRootPrincipal() });
    const grant = claims.grantClaims(role, 'invoice-sweep');
    expect(grant.success).toBe(true);
    Template.fromStack(stack).hasResourceProperties('AWS::IAM::Policy', {
      PolicyDocument: {
        Statement: [
          {
            Action: [
              'dynamodb:GetItem',
              'dynamodb:PutItem',
              'dynamodb:UpdateItem',
              'dynamodb:DeleteItem',
              'dynamodb:BatchWriteItem',
              'dynamodb:Query',
            ],
            Condition: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['invoice-sweep#*'] } },
            Resource: { 'Fn::GetAtt': [Match.stringLikeRegexp('^ClaimsTable'), 'Arn'] },
          },
        ],
      },
    });
  });

  it('refuses a slot-read grant for a job id that would widen the LeadingKeys pattern', () => {
    const stack = stackWithoutBundling();
    const claims = new ClaimsTable(stack, 'Claims');
    const role = new iam.Role(stack, 'Role', { assumedBy: new iam.AccountRootPrincipal() });
    expect(() => claims.grantSlotReads(role, 'weekly-*')).toThrow(
      'ClaimsTable \'Test/Claims\': grantSlotReads jobId "weekly-*" does not match /^[a-z][a-z0-9-]{0,62}$/; pass ' +
        "the job's id (1-63 lower-case letters, digits or hyphens, a letter first)",
    );
  });

  it("grants a reader GetItem on each of its jobs' items in one statement, and nothing else", () => {
    const stack = stackWithoutBundling();
    const claims = new ClaimsTable(stack, 'Claims');
    const reader = new iam.Role(stack, 'Reader', { assumedBy: new iam.AccountRootPrincipal() });
    const first = claims.grantSlotReads(reader, 'weekly-report');
    const second = claims.grantSlotReads(reader, 'payment-reminder');
    expect(first.success).toBe(true);
    expect(second).toBe(first);
    const policy = resourceOf(stack, reader.node.findChild('DefaultPolicy'));
    expect(policy.Properties.PolicyDocument.Statement).toEqual([
      {
        Effect: 'Allow',
        Action: 'dynamodb:GetItem',
        Resource: { 'Fn::GetAtt': [logicalIdOf(claims.table), 'Arn'] },
        Condition: {
          'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['weekly-report#*', 'payment-reminder#*'] },
        },
      },
    ]);
  });

  it('drops deletion protection only when asked to destroy the table, and takes a customer key', () => {
    const stack = stackWithoutBundling();
    new ClaimsTable(stack, 'Claims', {
      removalPolicy: RemovalPolicy.DESTROY,
      encryptionKey: new kms.Key(stack, 'Key', { enableKeyRotation: true }),
    });
    const template = Template.fromStack(stack);
    template.hasResource('AWS::DynamoDB::Table', {
      DeletionPolicy: 'Delete',
      Properties: Match.objectLike({
        DeletionProtectionEnabled: false,
        SSESpecification: { SSEEnabled: true, SSEType: 'KMS', KMSMasterKeyId: Match.anyValue() },
      }),
    });
  });
});
