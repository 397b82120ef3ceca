import { type App, type CfnElement, Duration, RemovalPolicy, Stack } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import * as sns from 'aws-cdk-lib/aws-sns';
import { describe, expect, it } from 'vitest';
import { ClaimsTable } from '../../infra/claims-table.js';
import { InfraValidationError } from '../../infra/infra-validation-error.js';
import { ScheduledJob, type ScheduledJobProps } from '../../infra/scheduled-job.js';
import type { JobSpec } from '../../shared/job/job-spec.js';
import { jobSpec, REPOSITORY_ROOT, stackWithoutBundling } from './fixtures.js';

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

/** The InfraValidationError `build` throws (fails the test if it throws nothing or something else). */
function validationError(build: (stack: Stack) => void): InfraValidationError {
  const stack = stackWithoutBundling();
  try {
    build(stack);
  } catch (error) {
    expect(error).toBeInstanceOf(InfraValidationError);
    return error as InfraValidationError;
  }
  throw new Error('expected an InfraValidationError, got none');
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
});

describe('ScheduledJob options', () => {
  it('sends every alarm to the one list of alarm actions', () => {
    const stack = stackWithoutBundling();
    const topic = sns.Topic.fromTopicArn(stack, 'Pager', 'arn:aws:sns:eu-west-1:123456789012:pager');
    const daily = jobSpec({ schedule: { expression: 'cron(0 6 * * ? *)', timeZone: 'UTC' } });
    const job = addJob(stack, 'job', daily, { alarmActions: [new actions.SnsAction(topic)] });
    const alarms = Template.fromStack(stack).findResources('AWS::CloudWatch::Alarm');
    expect(Object.keys(alarms)).toHaveLength(Object.keys(job.alarms).length);
    expect(Object.keys(alarms)).toHaveLength(7);
    for (const alarm of Object.values(alarms)) {
      expect(alarm.Properties.AlarmActions).toEqual(['arn:aws:sns:eu-west-1:123456789012:pager']);
    }
  });

  it('does not page from a missed-run alarm capped at 7 days (it would fire on every weekly run) unless asked', () => {
    const pager = (stack: Stack) =>
      new actions.SnsAction(
        sns.Topic.fromTopicArn(stack, 'Pager', 'arn:aws:sns:eu-west-1:123456789012:pager'),
      );
    const quiet = stackWithoutBundling();
    const weekly = addJob(quiet, 'job', jobSpec(), { alarmActions: [pager(quiet)] });
    const quietAlarms = Template.fromStack(quiet).toJSON().Resources;
    const missedRunId = quiet.resolve(
      quiet.getLogicalId(weekly.alarms.missedRun!.node.defaultChild as CfnElement),
    );
    expect(quietAlarms[missedRunId].Properties.AlarmActions).toBeUndefined();
    expect(quietAlarms[missedRunId].Properties.EvaluationPeriods).toBe(168);

    const loud = stackWithoutBundling();
    const paged = addJob(loud, 'job', jobSpec(), {
      alarmActions: [pager(loud)],
      pageOnCappedMissedRun: true,
    });
    const loudId = loud.resolve(loud.getLogicalId(paged.alarms.missedRun!.node.defaultChild as CfnElement));
    expect(Template.fromStack(loud).toJSON().Resources[loudId].Properties.AlarmActions).toEqual([
      'arn:aws:sns:eu-west-1:123456789012:pager',
    ]);
  });

  it('turns on the flexible window only when asked, and passes a payload in the input', () => {
    const stack = stackWithoutBundling();
    addJob(stack, 'job', jobSpec(), { flexibleTimeWindow: Duration.minutes(15), payload: { segment: 'eu' } });
    const schedule = Object.values(Template.fromStack(stack).findResources('AWS::Scheduler::Schedule'))[0]!;
    expect(schedule.Properties.FlexibleTimeWindow).toEqual({ Mode: 'FLEXIBLE', MaximumWindowInMinutes: 15 });
    expect(JSON.parse(schedule.Properties.Target.Input)).toEqual({
      jobId: 'weekly-report',
      scheduledTime: '<aws.scheduler.scheduled-time>',
      executionId: '<aws.scheduler.execution-id>',
      attemptNumber: '<aws.scheduler.attempt-number>',
      payload: { segment: 'eu' },
    });
  });

  it('applies the retry policy to Scheduler and to Lambda, whose retries follow maxAttempts', () => {
    const stack = stackWithoutBundling();
    addJob(stack, 'job', jobSpec({ maxAttempts: 1 }), {
      retry: { attempts: 3, maxEventAge: Duration.minutes(30) },
    });
    const template = Template.fromStack(stack);
    template.hasResourceProperties('AWS::Scheduler::Schedule', {
      Target: { RetryPolicy: { MaximumRetryAttempts: 3, MaximumEventAgeInSeconds: 1_800 } },
    });
    template.hasResourceProperties('AWS::Lambda::EventInvokeConfig', {
      MaximumRetryAttempts: 0,
      MaximumEventAgeInSeconds: 1_800,
    });
  });

  it('creates no missed-run alarm for a one-time schedule (there is no next run to miss)', () => {
    const stack = stackWithoutBundling();
    const job = addJob(
      stack,
      'job',
      jobSpec({ schedule: { expression: 'at(2099-01-01T09:00:00)', timeZone: 'UTC' } }),
    );
    expect(job.alarms.missedRun).toBeUndefined();
    Template.fromStack(stack).resourceCountIs('AWS::CloudWatch::Alarm', 6);
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
    addJob(stack, 'job', jobSpec());
    const template = Template.fromStack(stack);
    const fn = Object.values(template.findResources('AWS::Lambda::Function'))[0]!;
    expect(fn.Properties.Environment.Variables).not.toHaveProperty('SLOTGUARD_SES_FROM');
    expect(JSON.stringify(template.findResources('AWS::IAM::Policy'))).not.toContain('ses:');
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
