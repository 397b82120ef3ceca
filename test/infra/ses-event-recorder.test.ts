import { App, type CfnElement, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as sns from 'aws-cdk-lib/aws-sns';
import { BUNDLING_STACKS } from 'aws-cdk-lib/cx-api';
import type { IConstruct } from 'constructs';
import { describe, expect, it } from 'vitest';
import { ClaimsTable } from '../../infra/claims-table.js';
import { CLOUDFORMATION_STACK_LIMITS } from '../../infra/cloudformation-limits.js';
import { ScheduledJob, type ScheduledJobProps } from '../../infra/scheduled-job.js';
import { SlotguardDashboard } from '../../infra/slotguard-dashboard.js';
import { SlotguardStacks } from '../../infra/slotguard-stacks.js';
import type { JobSpec } from '../../shared/job/job-spec.js';
import { RuntimeEnv } from '../../shared/job/runtime-env.js';
import { sesEventPattern } from '../../shared/provider-events/ses-events.js';
import { SesEventsEnv } from '../../shared/provider-events/ses-events-env.js';
import { jobSpec, REPOSITORY_ROOT, stackWithoutBundling, validationError } from './fixtures.js';

/** Template JSON as aws-cdk-lib/assertions types it. */
type Json = ReturnType<Template['toJSON']>;

const SES = { identity: 'example.com', fromAddress: 'reports@example.com' } as const;
const PAGER = 'arn:aws:sns:eu-west-1:123456789012:pager';

function addJob(stack: Stack, job: Partial<JobSpec>, props: Partial<ScheduledJobProps> = {}): ScheduledJob {
  const claims =
    (stack.node.tryFindChild('Claims') as ClaimsTable | undefined) ?? new ClaimsTable(stack, 'Claims');
  return new ScheduledJob(stack, job.id ?? 'weekly-report', {
    job: jobSpec(job),
    claims,
    ses: SES,
    projectRoot: REPOSITORY_ROOT,
    ...props,
  });
}

function pager(stack: Stack, arn = PAGER): actions.SnsAction {
  return new actions.SnsAction(sns.Topic.fromTopicArn(stack, `Topic-${arn.split(':').at(-1)}`, arn));
}

/** An ARN in the stack's partition, region and account, as CloudFormation gets it from Arn.format. */
function arnInStack(service: string, ...rest: unknown[]): Json {
  const prefix = ['arn:', { Ref: 'AWS::Partition' }, `:${service}:`, { Ref: 'AWS::Region' }, ':'];
  return { 'Fn::Join': ['', [...prefix, { Ref: 'AWS::AccountId' }, ...rest]] };
}

function logicalIdOf(construct: IConstruct): string {
  const stack = Stack.of(construct);
  const element = (construct.node.defaultChild ?? construct) as CfnElement;
  return stack.resolve(stack.getLogicalId(element)) as string;
}

function resourceOf(construct: IConstruct): Json {
  return Template.fromStack(Stack.of(construct)).toJSON().Resources[logicalIdOf(construct)];
}

/** The statements of a function role's default policy. */
function statementsOf(fn: { role?: IConstruct | undefined }): Json[] {
  return resourceOf(fn.role!.node.findChild('DefaultPolicy')).Properties.PolicyDocument.Statement;
}

describe("ScheduledJob with ses: SES's events recorded onto the effect records", () => {
  it('creates a configuration set per job that publishes Send, Reject and Rendering Failure to the default bus', () => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, {});
    const template = Template.fromStack(stack);

    template.resourceCountIs('AWS::SES::ConfigurationSet', 1);
    template.resourceCountIs('AWS::SES::ConfigurationSetEventDestination', 1);
    const [destination] = Object.values(template.findResources('AWS::SES::ConfigurationSetEventDestination'));
    expect(destination!.Properties).toEqual({
      ConfigurationSetName: { Ref: logicalIdOf(job.sesConfigurationSet!) },
      EventDestination: {
        Enabled: true,
        // SES publishes to the account's default bus and no other.
        EventBridgeDestination: {
          EventBusArn: arnInStack('events', ':event-bus/default'),
        },
        MatchingEventTypes: ['send', 'reject', 'renderingFailure'],
      },
    });
  });

  it("hands the job's events alone to the recorder, retrying for a day and dead-lettering what is left", () => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, {});
    const recorder = job.sesEventRecorder!;

    const rule = resourceOf(job.sesEventsRule!).Properties;
    expect(rule.EventPattern).toEqual(sesEventPattern('weekly-report'));
    expect(rule.EventPattern).toEqual({
      source: ['aws.ses'],
      'detail-type': ['Email Sent', 'Email Rejected', 'Email Rendering Failed'],
      detail: { mail: { tags: { 'slotguard-job': ['weekly-report'] } } },
    });
    expect(rule.Targets).toEqual([
      {
        Id: 'Target0',
        Arn: { 'Fn::GetAtt': [logicalIdOf(recorder.function), 'Arn'] },
        RetryPolicy: { MaximumRetryAttempts: 185, MaximumEventAgeInSeconds: 86_400 },
        DeadLetterConfig: { Arn: { 'Fn::GetAtt': [logicalIdOf(recorder.deadLetterQueue), 'Arn'] } },
      },
    ]);
    // Only this rule may invoke the recorder on the job's behalf.
    const permissions = Object.values(Template.fromStack(stack).findResources('AWS::Lambda::Permission'));
    expect(permissions.map((p) => p.Properties)).toEqual([
      {
        Action: 'lambda:InvokeFunction',
        FunctionName: { 'Fn::GetAtt': [logicalIdOf(recorder.function), 'Arn'] },
        Principal: 'events.amazonaws.com',
        SourceArn: { 'Fn::GetAtt': [logicalIdOf(job.sesEventsRule!), 'Arn'] },
      },
    ]);
    // Lambda's own retries of a failed event, then the same dead-letter queue.
    const invokeConfig = Object.values(
      Template.fromStack(stack).findResources('AWS::Lambda::EventInvokeConfig'),
    )
      .map((c) => c.Properties)
      .find((c) => JSON.stringify(c.FunctionName).includes(logicalIdOf(recorder.function)));
    expect(invokeConfig).toMatchObject({ MaximumRetryAttempts: 2, MaximumEventAgeInSeconds: 6 * 3_600 });
    expect(resourceOf(recorder.function).Properties.DeadLetterConfig).toEqual({
      TargetArn: { 'Fn::GetAtt': [logicalIdOf(recorder.deadLetterQueue), 'Arn'] },
    });
  });

  it("tells the job's function its configuration set, the grace period and what follows it", () => {
    const stack = stackWithoutBundling();
    const weekly = addJob(stack, {});
    const resending = addJob(stack, {
      id: 'payment-reminder',
      schedule: { expression: 'rate(15 minutes)' },
      inDoubtAfterGrace: 'resend',
    });
    const chosen = addJob(stack, { id: 'invoices', inDoubtGraceMinutes: 20 });

    const variables = (job: ScheduledJob) => resourceOf(job.function).Properties.Environment.Variables;
    expect(variables(weekly)).toMatchObject({
      [RuntimeEnv.sesConfigurationSet]: { Ref: logicalIdOf(weekly.sesConfigurationSet!) },
      [RuntimeEnv.inDoubtGraceSeconds]: '3600',
      [RuntimeEnv.inDoubtAfterGrace]: 'report',
    });
    // A 15-minute deadline: half of it, so the window still finishes after the last look.
    expect(variables(resending)).toMatchObject({
      [RuntimeEnv.inDoubtGraceSeconds]: '420',
      [RuntimeEnv.inDoubtAfterGrace]: 'resend',
    });
    expect(variables(chosen)[RuntimeEnv.inDoubtGraceSeconds]).toBe('1200');
    expect(
      [weekly.job, resending.job, chosen.job].map((j) => [j.inDoubtGraceMinutes, j.inDoubtAfterGrace]),
    ).toEqual([
      [60, 'report'],
      [7, 'resend'],
      [20, 'report'],
    ]);
  });

  it('lets the job send through its configuration set, as its From address only', () => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, {});
    const ses = statementsOf(job.function).filter((s) => JSON.stringify(s.Action).includes('ses:'));
    expect(ses).toEqual([
      {
        Effect: 'Allow',
        Action: 'ses:SendEmail',
        Resource: [
          arnInStack('ses', ':identity/example.com'),
          arnInStack('ses', ':configuration-set/', { Ref: logicalIdOf(job.sesConfigurationSet!) }),
        ],
        Condition: { StringEquals: { 'ses:FromAddress': 'reports@example.com' } },
      },
    ]);
  });

  it('creates no configuration set, rule or recorder, and sets no SES event variables, with recordEvents false', () => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, {}, { ses: { ...SES, recordEvents: false } });
    const template = Template.fromStack(stack);
    for (const type of [
      'AWS::SES::ConfigurationSet',
      'AWS::SES::ConfigurationSetEventDestination',
      'AWS::Events::Rule',
      'AWS::Lambda::Permission',
    ]) {
      template.resourceCountIs(type, 0);
    }
    expect([job.sesConfigurationSet, job.sesEventsRule, job.sesEventRecorder]).toEqual([
      undefined,
      undefined,
      undefined,
    ]);
    const variables = resourceOf(job.function).Properties.Environment.Variables;
    for (const name of [
      RuntimeEnv.sesConfigurationSet,
      RuntimeEnv.inDoubtGraceSeconds,
      RuntimeEnv.inDoubtAfterGrace,
    ]) {
      expect(variables).not.toHaveProperty(name);
    }
    expect(variables[RuntimeEnv.sesFromAddress]).toBe('reports@example.com');
    // Two functions: the job's and the watchdog's.
    template.resourceCountIs('AWS::Lambda::Function', 2);
  });
});

describe('the watchdog confirms late acceptances of the jobs whose SES events are recorded', () => {
  /** The watchdog schedule's event for `job`. */
  function watchdogEventOf(job: ScheduledJob): Record<string, unknown> {
    return JSON.parse(resourceOf(job.watchdogSchedule).Properties.Target.Input);
  }

  it('asks confirmInDoubt of the recording job alone, and may Query and UpdateItem only that job’s items', () => {
    const stack = stackWithoutBundling();
    const recording = addJob(stack, { id: 'weekly-report' });
    const silent = addJob(stack, { id: 'payment-reminder' }, { ses: { ...SES, recordEvents: false } });
    const claims = stack.node.findChild('Claims') as ClaimsTable;

    expect(watchdogEventOf(recording)).toMatchObject({ jobId: 'weekly-report', confirmInDoubt: true });
    expect(watchdogEventOf(silent)).toMatchObject({ jobId: 'payment-reminder' });
    expect(watchdogEventOf(silent)).not.toHaveProperty('confirmInDoubt');
    const dynamodb = statementsOf(recording.watchdog.function).filter((s) =>
      JSON.stringify(s.Action).includes('dynamodb:'),
    );
    expect(dynamodb).toEqual([
      {
        Effect: 'Allow',
        Action: 'dynamodb:GetItem',
        Resource: { 'Fn::GetAtt': [logicalIdOf(claims.table), 'Arn'] },
        Condition: {
          'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['weekly-report#*', 'payment-reminder#*'] },
        },
      },
      {
        Effect: 'Allow',
        Action: ['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:UpdateItem'],
        Resource: { 'Fn::GetAtt': [logicalIdOf(claims.table), 'Arn'] },
        Condition: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['weekly-report#*'] } },
      },
    ]);
  });
});

describe('SesEventRecorder: one per stack and claims backend, least privilege', () => {
  it('records every job of one backend with one function, which may update and read their items, Query their done marks alone, and nothing else', () => {
    const stack = stackWithoutBundling();
    const first = addJob(stack, {});
    const second = addJob(stack, { id: 'payment-reminder', schedule: { expression: 'rate(15 minutes)' } });
    const recorder = first.sesEventRecorder!;
    expect(second.sesEventRecorder).toBe(recorder);
    expect(recorder.node.path).toBe('Test/ClaimsSesEventRecorder');

    const claims = stack.node.findChild('Claims') as ClaimsTable;
    expect(statementsOf(recorder.function)).toEqual([
      {
        Effect: 'Allow',
        Action: ['logs:CreateLogStream', 'logs:PutLogEvents'],
        Resource: { 'Fn::GetAtt': [logicalIdOf(recorder.node.findChild('Logs')), 'Arn'] },
      },
      {
        Effect: 'Allow',
        Action: 'sqs:SendMessage',
        Resource: { 'Fn::GetAtt': [logicalIdOf(recorder.deadLetterQueue), 'Arn'] },
      },
      {
        Effect: 'Allow',
        Action: ['dynamodb:UpdateItem', 'dynamodb:GetItem'],
        Resource: { 'Fn::GetAtt': [logicalIdOf(claims.table), 'Arn'] },
        // One statement for both jobs: the second joined the first's condition.
        Condition: {
          'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['weekly-report#*', 'payment-reminder#*'] },
        },
      },
      {
        Effect: 'Allow',
        Action: 'dynamodb:Query',
        Resource: { 'Fn::GetAtt': [logicalIdOf(claims.table), 'Arn'] },
        // A Query that may name and return the key and the done marks, and nothing of an effect.
        Condition: {
          'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['weekly-report#*', 'payment-reminder#*'] },
          'ForAllValues:StringEquals': { 'dynamodb:Attributes': ['pk', 'sk', 'doneMarks'] },
          StringEqualsIfExists: { 'dynamodb:Select': 'SPECIFIC_ATTRIBUTES' },
        },
      },
    ]);
    const fn = resourceOf(recorder.function).Properties;
    expect(fn.Environment.Variables).toEqual({
      NODE_OPTIONS: '--enable-source-maps',
      [SesEventsEnv.jobIds]: 'weekly-report,payment-reminder',
      [RuntimeEnv.tableName]: { Ref: logicalIdOf(claims.table) },
    });
    expect(fn).toMatchObject({
      Runtime: 'nodejs24.x',
      Architectures: ['arm64'],
      MemorySize: 256,
      Timeout: 30,
    });
    // Its own role, whose only policy is the one above: no managed policy, no secret, no SES.
    expect(resourceOf(recorder.function.role!).Properties.ManagedPolicyArns).toBeUndefined();
  });

  it('lets EventBridge dead-letter only the rules of its jobs, in one statement, over TLS only', () => {
    const stack = stackWithoutBundling();
    const first = addJob(stack, {});
    const second = addJob(stack, { id: 'payment-reminder', schedule: { expression: 'rate(15 minutes)' } });
    const recorder = first.sesEventRecorder!;
    const policy = Object.values(Template.fromStack(stack).findResources('AWS::SQS::QueuePolicy')).find((p) =>
      JSON.stringify(p.Properties.Queues).includes(logicalIdOf(recorder.deadLetterQueue)),
    )!;
    expect(policy.Properties.PolicyDocument.Statement).toEqual([
      {
        Effect: 'Deny',
        Action: 'sqs:*',
        Principal: { AWS: '*' },
        Resource: { 'Fn::GetAtt': [logicalIdOf(recorder.deadLetterQueue), 'Arn'] },
        Condition: { Bool: { 'aws:SecureTransport': 'false' } },
      },
      {
        Sid: 'SesEventRulesDeadLetters',
        Effect: 'Allow',
        Action: 'sqs:SendMessage',
        Principal: { Service: 'events.amazonaws.com' },
        Resource: { 'Fn::GetAtt': [logicalIdOf(recorder.deadLetterQueue), 'Arn'] },
        Condition: {
          ArnEquals: {
            'aws:SourceArn': [first, second].map((job) => ({
              'Fn::GetAtt': [logicalIdOf(job.sesEventsRule!), 'Arn'],
            })),
          },
        },
      },
    ]);
    expect(resourceOf(recorder.deadLetterQueue).Properties).toMatchObject({
      SqsManagedSseEnabled: true,
      MessageRetentionPeriod: 14 * 86_400,
    });
  });

  it('pages each new dead letter (an SES event lost) to the union of its jobs’ alarm actions, each once', () => {
    const stack = stackWithoutBundling();
    const shared = pager(stack);
    const first = addJob(stack, {}, { alarmActions: [shared] });
    addJob(
      stack,
      { id: 'payment-reminder', schedule: { expression: 'rate(15 minutes)' } },
      { alarmActions: [shared, pager(stack, 'arn:aws:sns:eu-west-1:123456789012:payments')] },
    );
    const alarm = resourceOf(first.sesEventRecorder!.eventsLostAlarm).Properties;
    expect(alarm).toMatchObject({
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      Threshold: 1,
      EvaluationPeriods: 1,
      TreatMissingData: 'notBreaching',
      AlarmActions: [PAGER, 'arn:aws:sns:eu-west-1:123456789012:payments'],
    });
    expect(alarm.Metrics[0]).toMatchObject({ Expression: 'DIFF(FILL(depth, 0))', ReturnData: true });
    expect(alarm.Metrics[1].MetricStat).toMatchObject({
      Metric: { MetricName: 'ApproximateNumberOfMessagesVisible', Namespace: 'AWS/SQS' },
      Period: 300,
      Stat: 'Maximum',
    });
    expect(alarm.AlarmDescription).toContain('jobs weekly-report, payment-reminder');
    expect(alarm.AlarmDescription).toContain("docs/operations.md, 'ProviderEventsLost'");
  });

  it('refuses at synth more than five distinct alarm actions on the one ProviderEventsLost alarm', () => {
    const app = new App({ context: { [BUNDLING_STACKS]: [] } });
    const stack = new Stack(app, 'Test');
    for (let n = 1; n <= 6; n++) {
      addJob(
        stack,
        { id: `job-${n}` },
        { alarmActions: [pager(stack, `arn:aws:sns:eu-west-1:123456789012:team-${n}`)] },
      );
    }
    expect(() => app.synth()).toThrow(
      /ProviderEventsLost alarm of the SES event recorder of jobs job-1, job-2, job-3, job-4, job-5, job-6 would notify 6 alarm actions .* over CloudWatch's 5; give these jobs one SNS topic/,
    );
  });
});

describe('EffectInDoubt pages for what is left after the grace period; the dashboard shows what was settled', () => {
  it('keeps one EffectsInDoubt alarm per job on the count taken at the window’s finish', () => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, {}, { alarmActions: [pager(stack)] });
    const alarm = resourceOf(job.alarms.effectsInDoubt).Properties;
    expect(alarm).toMatchObject({
      MetricName: 'EffectInDoubt',
      Namespace: 'Slotguard',
      Dimensions: [{ Name: 'JobId', Value: 'weekly-report' }],
      Statistic: 'Sum',
      Threshold: 1,
      AlarmActions: [PAGER],
    });
    expect(alarm.AlarmDescription).toMatch(/still in doubt when their window finished/);
    expect(alarm.AlarmDescription).toMatch(/grace period/);
  });

  it('shows InDoubtConfirmed, InDoubtRejected, InDoubtResent and the recorder’s words beside the effects, and its alarm', () => {
    const stack = stackWithoutBundling();
    const job = addJob(stack, {});
    const dashboard = new SlotguardDashboard(stack, 'Dashboard');
    dashboard.addJob(job);
    const body = JSON.stringify(
      stack.resolve(
        Object.values(Template.fromStack(stack).findResources('AWS::CloudWatch::Dashboard'))[0]!.Properties
          .DashboardBody,
      ),
    );
    for (const name of [
      'EffectInDoubtFound',
      'InDoubtConfirmed',
      'InDoubtRejected',
      'InDoubtResent',
      'ProviderWordRecorded',
      'ProviderWordIgnored',
    ]) {
      expect(body, name).toContain(`\\"${name}\\"`);
    }
    expect(body).toContain(logicalIdOf(job.sesEventRecorder!.eventsLostAlarm));
  });
});

describe('ScheduledJob refuses in-doubt settings that cannot work, naming the prop, the value and the fix', () => {
  it.each([
    [
      { inDoubtGraceMinutes: 360 },
      /job\.inDoubtGraceMinutes is number 360, not a whole number of minutes shorter than the job's deadline \(360 minutes\).*set it below 360 \(leave it unset for 60\)/,
    ],
    [{ inDoubtGraceMinutes: 1.5 }, /job\.inDoubtGraceMinutes is number 1\.5, not a whole number of minutes/],
    [{ inDoubtGraceMinutes: -1 }, /job\.inDoubtGraceMinutes is number -1, not/],
    [
      { inDoubtAfterGrace: 'retry' as never },
      /job\.inDoubtAfterGrace is "retry"; set 'report' .* or 'resend'/,
    ],
  ])('refuses %j', (job, message) => {
    const error = validationError((stack) => addJob(stack, job));
    expect(error.message).toMatch(message);
    expect(error.prop).toBe(
      Object.keys(job)[0] === 'inDoubtAfterGrace' ? 'job.inDoubtAfterGrace' : 'job.inDoubtGraceMinutes',
    );
  });

  it.each([
    ['no ses prop', { ses: undefined }],
    ['ses.recordEvents false', { ses: { ...SES, recordEvents: false } }],
  ])('refuses a grace period for a job with %s: there is no word to wait for', (_, props) => {
    const error = validationError((stack) => addJob(stack, { inDoubtGraceMinutes: 30 }, props));
    expect(error.prop).toBe('job.inDoubtGraceMinutes');
    expect(error.message).toMatch(
      /job\.inDoubtGraceMinutes is number 30 but job 'weekly-report' records no SES events .* give the job an ses prop with recordEvents unset \(true\), or remove job\.inDoubtGraceMinutes/,
    );
  });
});

describe('a stack of jobs that record SES events, within CloudFormation’s limits', () => {
  /** The resource types of the one job stack of an app of `n` jobs that record SES events. */
  function jobStackOf(n: number): string[] {
    const app = new App({ context: { [BUNDLING_STACKS]: [] } });
    const stacks = new SlotguardStacks(app, 'Reports', { jobStacks: 1 });
    for (let i = 0; i < n; i++) {
      stacks.addJob({ job: jobSpec({ id: `job-${i}` }), ses: SES, projectRoot: REPOSITORY_ROOT });
    }
    const resources = Template.fromStack(stacks.jobStackOf('jobs-1')!).toJSON().Resources;
    return Object.values(resources).map((resource) => (resource as Json).Type as string);
  }

  it('holds 16 of them in one job stack of SlotguardStacks, each adding four resources for its events', () => {
    const perJob = jobStackOf(2).length - jobStackOf(1).length;
    const sixteen = jobStackOf(16);
    // 26 for a job that sends no email, and its configuration set, event destination, rule and invoke permission.
    expect(perJob).toBe(30);
    expect(sixteen.length).toBeLessThanOrEqual(CLOUDFORMATION_STACK_LIMITS.resources);
    for (const type of [
      'AWS::SES::ConfigurationSet',
      'AWS::SES::ConfigurationSetEventDestination',
      'AWS::Events::Rule',
      'AWS::Lambda::Permission',
    ]) {
      expect(
        sixteen.filter((t) => t === type),
        type,
      ).toHaveLength(16);
    }
    // The jobs', the watchdog's and the one recorder's.
    expect(sixteen.filter((t) => t === 'AWS::Lambda::Function')).toHaveLength(16 + 2);
  });
});
