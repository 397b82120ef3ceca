import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { App, type CfnElement, Stack, Validations } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import type { CloudAssembly } from 'aws-cdk-lib/cx-api';
import { AwsSolutionsChecks } from 'cdk-nag';
import type { IConstruct } from 'constructs';
import { beforeAll, describe, expect, it } from 'vitest';
import { AppContext, buildApp, type SlotguardApp } from '../../infra/app.js';
import { CLAIMS_TABLE_ACTIONS } from '../../infra/claims-table.js';
import { DASHBOARD_ONLY } from '../../infra/paging.js';
import { RuntimeEnv } from '../../shared/job/runtime-env.js';
import { SesEventsEnv } from '../../shared/provider-events/ses-events-env.js';
import { emfMetrics } from '../../shared/telemetry/metrics.js';
import { resolvedEnvironment } from '../helpers/deployed-environment.js';
import { REPOSITORY_ROOT } from './fixtures.js';

/** The pager the example app's paging alarms notify here (AppContext.alarmTopicArn). */
const PAGER = 'arn:aws:sns:eu-west-1:123456789012:pager';

/** Template JSON as aws-cdk-lib/assertions types it. */
type Json = ReturnType<Template['toJSON']>;
type Resource = {
  Type: string;
  Properties: Json;
  DeletionPolicy?: string;
  UpdateReplacePolicy?: string;
};

let built: SlotguardApp;
let assembly: CloudAssembly;
let template: Template;
let synthMs: number;

// One synthesis of the example app, bundling both handlers with the local esbuild, shared by every
// test in this file. app.synth() runs cdk-nag's AwsSolutions checks and throws on any finding that
// is not acknowledged.
beforeAll(() => {
  // If bundling ever fell back to Docker, it would run this command and fail.
  process.env.CDK_DOCKER = join(tmpdir(), 'slotguard-docker-must-not-run');
  const started = performance.now();
  built = buildApp(
    new App({
      outdir: mkdtempSync(join(tmpdir(), 'slotguard-cdk-')),
      context: { [AppContext.alarmTopicArn]: PAGER, [AppContext.watchedSince]: '2026-12-01T00:00:00Z' },
    }),
  );
  assembly = built.app.synth();
  synthMs = performance.now() - started;
  template = Template.fromJSON(assembly.getStackArtifact(built.stack.artifactId).template);
});

function resources(type: string): [string, Resource][] {
  return Object.entries(template.findResources(type)) as [string, Resource][];
}

/** The one resource of `type` whose logical ID starts with the job's construct id (`weekly-report` -> `weeklyreport`). */
function jobResource(type: string, jobId: string, logicalIdPart = ''): Resource {
  const prefix = jobId.replaceAll('-', '') + logicalIdPart;
  const found = resources(type).filter(([logicalId]) => logicalId.startsWith(prefix));
  expect(found, `one ${type} for ${prefix}`).toHaveLength(1);
  return found[0]![1];
}

/** Every job's function, the watchdog's and the SES event recorder's: the functions ScheduledJob bundles. */
function slotguardFunctions(): Resource[] {
  const [first] = built.jobs;
  return [
    ...built.jobs.map((job) => job.function),
    first!.watchdog.function,
    first!.sesEventRecorder!.function,
  ].map((fn) => template.toJSON().Resources[logicalIdOf(fn)] as Resource);
}

/** The bundled module of a function in the assembly. */
function bundleOf(fn: Resource): string {
  const bundle = join(
    assembly.directory,
    `asset.${String(fn.Properties.Code.S3Key).replace(/\.zip$/, '')}`,
    'index.mjs',
  );
  expect(existsSync(bundle), bundle).toBe(true);
  return bundle;
}

function logicalIdOf(construct: IConstruct): string {
  return built.stack.resolve(built.stack.getLogicalId(construct.node.defaultChild as CfnElement)) as string;
}

describe('the example app, synthesised', () => {
  it('synthesises in-process its two jobs (two handlers, the watchdog and the recorder bundled)', () => {
    expect(built.jobs.map((job) => job.jobId)).toEqual(['weekly-report', 'payment-reminder']);
    // Reported, not asserted: a time limit here fails on a busy machine, not on a slow synth.
    console.info(`example app: synth with bundling and cdk-nag took ${Math.round(synthMs)} ms`);
  });

  it('bundles each handler into one minified ESM file with the local esbuild, never in Docker', () => {
    for (const fn of slotguardFunctions()) {
      const code = readFileSync(bundleOf(fn), 'utf8');
      expect(code.startsWith("import { createRequire } from 'node:module';")).toBe(true);
      expect(fn.Properties.Handler).toBe('index.handler');
    }
    for (const job of built.jobs) {
      const code = readFileSync(
        bundleOf(jobResource('AWS::Lambda::Function', job.jobId, 'Function')),
        'utf8',
      );
      // Minified: the code (before esbuild's trailing licence comments) is a few very long lines.
      const codeOnly = code.split('/*! Bundled license information')[0]!;
      expect(codeOnly.length / codeOnly.split('\n').length).toBeGreaterThan(1_000);
      // AWS SDK v3 stays external: the runtime provides it.
      expect(code).toMatch(/from\s*"@aws-sdk\/client-dynamodb"/);
    }
  });

  it('produces bundles that load as ES modules and export the handler (CommonJS dependencies find require)', () => {
    for (const fn of slotguardFunctions()) {
      const bundle = bundleOf(fn);
      // Lambda's runtime provides @aws-sdk/*; here the repository's node_modules stands in for it.
      const dir = mkdtempSync(join(tmpdir(), 'slotguard-bundle-'));
      symlinkSync(join(REPOSITORY_ROOT, 'node_modules'), join(dir, 'node_modules'));
      copyFileSync(bundle, join(dir, 'index.mjs'));
      const variables = fn.Properties.Environment.Variables as Record<string, unknown>;
      const env = {
        PATH: process.env.PATH,
        ...resolvedEnvironment(variables),
        AWS_REGION: 'eu-west-1',
      };
      const loaded = spawnSync(
        process.execPath,
        [
          '--input-type=module',
          '-e',
          `const m = await import(${JSON.stringify(join(dir, 'index.mjs'))}); console.log(typeof m.handler);`,
        ],
        { env, encoding: 'utf8' },
      );
      expect(loaded.status, loaded.stderr).toBe(0);
      // (The AWS SDK may print a Node-version notice on stderr; only errors matter.)
      expect(loaded.stderr).not.toMatch(/Error/);
      expect(loaded.stdout.trim()).toBe('function');
    }
  });

  it('runs every function on nodejs22.x or newer, on arm64', () => {
    for (const [, fn] of resources('AWS::Lambda::Function')) {
      const major = Number(/^nodejs(\d+)\.x$/.exec(fn.Properties.Runtime)?.[1]);
      expect(major).toBeGreaterThanOrEqual(22);
      expect(fn.Properties.Architectures).toEqual(['arm64']);
    }
  });

  it('fires the weekly report at Monday 09:00 Moscow time and the reminder every 15 minutes on the quarter hours, flexible window OFF', () => {
    expect(jobResource('AWS::Scheduler::Schedule', 'weekly-report', 'Schedule').Properties).toMatchObject({
      ScheduleExpression: 'cron(0 9 ? * MON *)',
      ScheduleExpressionTimezone: 'Europe/Moscow',
      FlexibleTimeWindow: { Mode: 'OFF' },
      State: 'ENABLED',
    });
    // rate(15 minutes), on the grid the local runner and the watchdog compute, not from the schedule's creation.
    expect(jobResource('AWS::Scheduler::Schedule', 'payment-reminder', 'Schedule').Properties).toMatchObject({
      ScheduleExpression: 'cron(0/15 * * * ? *)',
      ScheduleExpressionTimezone: 'UTC',
      FlexibleTimeWindow: { Mode: 'OFF' },
    });
    Annotations.fromStack(built.stack).hasInfo(
      '/Slotguard/payment-reminder',
      Match.stringLikeRegexp('rate\\(15 minutes\\) is deployed as cron\\(0/15 \\* \\* \\* \\? \\*\\) in UTC'),
    );
  });

  it("puts the job id and Scheduler's context attributes in every fire's input", () => {
    for (const job of built.jobs) {
      const input = JSON.parse(
        jobResource('AWS::Scheduler::Schedule', job.jobId, 'Schedule').Properties.Target.Input,
      );
      expect(input).toEqual({
        jobId: job.jobId,
        scheduledTime: '<aws.scheduler.scheduled-time>',
        executionId: '<aws.scheduler.execution-id>',
        attemptNumber: '<aws.scheduler.attempt-number>',
      });
    }
  });

  it("sends each window to the job's encrypted, TLS-only work queue, with Scheduler's retries and the dead-letter queue", () => {
    for (const job of built.jobs) {
      const queueId = logicalIdOf(job.deadLetterQueue);
      const target = jobResource('AWS::Scheduler::Schedule', job.jobId, 'Schedule').Properties.Target;
      expect(target.Arn).toEqual({ 'Fn::GetAtt': [logicalIdOf(job.workQueue), 'Arn'] });
      expect(target.RetryPolicy).toEqual({ MaximumRetryAttempts: 20, MaximumEventAgeInSeconds: 3_600 });
      expect(target.DeadLetterConfig).toEqual({ Arn: { 'Fn::GetAtt': [queueId, 'Arn'] } });
      // Direct asynchronous invokes (backfill) still retry through Lambda and dead-letter to the same queue.
      const fn = jobResource('AWS::Lambda::Function', job.jobId, 'Function');
      expect(fn.Properties.DeadLetterConfig).toEqual({ TargetArn: { 'Fn::GetAtt': [queueId, 'Arn'] } });
      expect(jobResource('AWS::Lambda::EventInvokeConfig', job.jobId).Properties).toMatchObject({
        MaximumRetryAttempts: 2,
        MaximumEventAgeInSeconds: 3_600,
      });
      for (const queue of [job.workQueue, job.deadLetterQueue]) {
        expect(template.toJSON().Resources[logicalIdOf(queue)].Properties).toMatchObject({
          SqsManagedSseEnabled: true,
          MessageRetentionPeriod: 14 * 86_400,
        });
      }
    }
    // weekly-report: 6 h deadline / 900 s timeout = 24 runs; payment-reminder: 15 min / 300 s = 3 runs.
    const redrive = (jobId: string) =>
      jobResource('AWS::SQS::Queue', jobId, 'WorkQueue').Properties as Record<string, unknown>;
    expect(redrive('weekly-report')).toMatchObject({
      VisibilityTimeout: 5_400,
      RedrivePolicy: { maxReceiveCount: 98 },
    });
    expect(redrive('payment-reminder')).toMatchObject({
      VisibilityTimeout: 1_800,
      RedrivePolicy: { maxReceiveCount: 56 },
    });
    template.resourcePropertiesCountIs(
      'AWS::SQS::QueuePolicy',
      {
        PolicyDocument: {
          Statement: Match.arrayWith([
            Match.objectLike({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } }),
          ]),
        },
      },
      // Each job's work queue and dead-letter queue, and the SES event recorder's dead-letter queue.
      5,
    );
  });

  it('runs each job one window per invocation from its work queue, two at a time, and terminates recursive loops', () => {
    for (const job of built.jobs) {
      expect(jobResource('AWS::Lambda::EventSourceMapping', job.jobId).Properties).toEqual({
        FunctionName: { Ref: logicalIdOf(job.function) },
        EventSourceArn: { 'Fn::GetAtt': [logicalIdOf(job.workQueue), 'Arn'] },
        BatchSize: 1,
        FunctionResponseTypes: ['ReportBatchItemFailures'],
        ScalingConfig: { MaximumConcurrency: 2 },
      });
      expect(jobResource('AWS::Lambda::Function', job.jobId, 'Function').Properties.RecursiveLoop).toBe(
        'Terminate',
      );
    }
  });

  it('watches every job every 15 minutes with one watchdog function, telling it the schedule, deadline and grace', () => {
    const watchdog = built.jobs[0]!.watchdog;
    for (const job of built.jobs) {
      const schedule = jobResource('AWS::Scheduler::Schedule', job.jobId, 'WatchdogSchedule').Properties;
      expect(schedule).toMatchObject({
        ScheduleExpression: 'rate(15 minutes)',
        GroupName: built.stack.resolve(watchdog.scheduleGroup.scheduleGroupName),
        Target: { Arn: { 'Fn::GetAtt': [logicalIdOf(watchdog.function), 'Arn'] } },
      });
      expect(JSON.parse(schedule.Target.Input)).toEqual({
        kind: 'watchdog',
        jobId: job.jobId,
        schedule: job.deployedSchedule,
        deadlineSeconds: job.deadline.toSeconds(),
        graceSeconds: 900,
        lookbackHours: 48,
        notBefore: '2026-12-01T00:00:00.000Z',
        // Both jobs' SES events are recorded: the watchdog records late acceptances done.
        confirmInDoubt: true,
      });
    }
    // The jobs', the watchdog's and the SES event recorder's.
    expect(resources('AWS::Lambda::Function')).toHaveLength(built.jobs.length + 2);
  });

  it('sets every variable the runtime reads', () => {
    const deployed = Object.values(RuntimeEnv).filter(
      (name) => name !== RuntimeEnv.effectKeySecret && name !== RuntimeEnv.dynamodbEndpoint,
    );
    for (const job of built.jobs) {
      const variables = jobResource('AWS::Lambda::Function', job.jobId, 'Function').Properties.Environment
        .Variables;
      expect(Object.keys(variables)).toEqual(expect.arrayContaining(deployed));
      expect(variables).toMatchObject({
        [RuntimeEnv.jobId]: job.jobId,
        [RuntimeEnv.leaseSeconds]: '60',
        [RuntimeEnv.maxAttempts]: '3',
        [RuntimeEnv.retentionDays]: '35',
        [RuntimeEnv.sesFromAddress]: 'reports@example.com',
        [RuntimeEnv.tableName]: { Ref: logicalIdOf(built.claims.table) },
        [RuntimeEnv.workQueueUrl]: { Ref: logicalIdOf(job.workQueue) },
        // weekly: capped at 6 hours; every 15 minutes: the gap to the next window.
        [RuntimeEnv.deadlineSeconds]: job.jobId === 'weekly-report' ? '21600' : '900',
        [RuntimeEnv.sesConfigurationSet]: { Ref: logicalIdOf(job.sesConfigurationSet!) },
        // An hour, or half the deadline when that is shorter (payment-reminder's 15 minutes).
        [RuntimeEnv.inDoubtGraceSeconds]: job.jobId === 'weekly-report' ? '3600' : '420',
        [RuntimeEnv.inDoubtAfterGrace]: 'report',
      });
      // The secret's value never reaches the template; the function reads it by ARN.
      expect(variables).not.toHaveProperty(RuntimeEnv.effectKeySecret);
    }
  });
});

describe("the example app: SES's events", () => {
  it("sends each job's email through a configuration set of its own, whose events one recorder writes onto both jobs' effects", () => {
    const recorder = built.jobs[0]!.sesEventRecorder!;
    expect(built.jobs.every((job) => job.sesEventRecorder === recorder)).toBe(true);
    expect(resources('AWS::SES::ConfigurationSet')).toHaveLength(built.jobs.length);
    for (const job of built.jobs) {
      const rule = jobResource('AWS::Events::Rule', job.jobId, 'SesEventsRule').Properties;
      expect(rule.EventPattern.detail).toEqual({ mail: { tags: { 'slotguard-job': [job.jobId] } } });
      expect(rule.Targets[0].Arn).toEqual({ 'Fn::GetAtt': [logicalIdOf(recorder.function), 'Arn'] });
    }
    const fn = template.toJSON().Resources[logicalIdOf(recorder.function)] as Resource;
    expect(fn.Properties.Environment.Variables).toMatchObject({
      [SesEventsEnv.jobIds]: 'weekly-report,payment-reminder',
      [RuntimeEnv.tableName]: { Ref: logicalIdOf(built.claims.table) },
    });
    const alarm = template.toJSON().Resources[logicalIdOf(recorder.eventsLostAlarm)] as Resource;
    expect(alarm.Properties.AlarmActions).toEqual([PAGER]);
  });
});

describe('the example app: IAM', () => {
  function statementsOf(jobId: string): Json[] {
    return jobResource('AWS::IAM::Policy', jobId, 'FunctionRoleDefaultPolicy').Properties.PolicyDocument
      .Statement;
  }

  it("confines each function to its own job's items, with item-level actions only (no Scan)", () => {
    for (const job of built.jobs) {
      const dynamo = statementsOf(job.jobId).filter((s) =>
        [s.Action].flat().some((a: string) => a.startsWith('dynamodb:')),
      );
      expect(dynamo).toEqual([
        {
          Effect: 'Allow',
          Action: [...CLAIMS_TABLE_ACTIONS],
          Resource: { 'Fn::GetAtt': [logicalIdOf(built.claims.table), 'Arn'] },
          Condition: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [`${job.jobId}#*`] } },
        },
      ]);
      expect(JSON.stringify(dynamo)).not.toContain('Scan');
    }
  });

  it("lets each function use its own work queue and no other job's", () => {
    for (const job of built.jobs) {
      const queues = statementsOf(job.jobId)
        .filter((s) => [s.Action].flat().some((a: string) => a.startsWith('sqs:')))
        .map((s) => JSON.stringify(s.Resource));
      const own = [job.workQueue, job.deadLetterQueue].map((q) =>
        JSON.stringify({ 'Fn::GetAtt': [logicalIdOf(q), 'Arn'] }),
      );
      expect(queues.length).toBe(3);
      for (const queue of queues) expect(own).toContain(queue);
    }
  });

  it("lets the watchdog GetItem the app's jobs' slot records, and confirm their in-doubt effects, and nothing else", () => {
    const watchdog = built.jobs[0]!.watchdog;
    const policy =
      template.toJSON().Resources[logicalIdOf(watchdog.function.role!.node.findChild('DefaultPolicy'))];
    expect(policy.Properties.PolicyDocument.Statement).toEqual([
      {
        Effect: 'Allow',
        Action: ['logs:CreateLogStream', 'logs:PutLogEvents'],
        Resource: { 'Fn::GetAtt': [logicalIdOf(watchdog.node.findChild('Logs')), 'Arn'] },
      },
      {
        Effect: 'Allow',
        Action: 'dynamodb:GetItem',
        Resource: { 'Fn::GetAtt': [logicalIdOf(built.claims.table), 'Arn'] },
        Condition: {
          'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['weekly-report#*', 'payment-reminder#*'] },
        },
      },
      {
        Effect: 'Allow',
        Action: ['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:UpdateItem'],
        Resource: { 'Fn::GetAtt': [logicalIdOf(built.claims.table), 'Arn'] },
        Condition: {
          'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['weekly-report#*', 'payment-reminder#*'] },
        },
      },
    ]);
  });

  it('has no wildcard action anywhere in the stack', () => {
    for (const [, policy] of resources('AWS::IAM::Policy')) {
      for (const statement of policy.Properties.PolicyDocument.Statement) {
        for (const action of [statement.Action].flat()) expect(action).not.toContain('*');
      }
    }
  });

  it('lets each function send email as the one SES identity, from the one address', () => {
    for (const job of built.jobs) {
      const ses = statementsOf(job.jobId).filter((s) => s.Action === 'ses:SendEmail');
      expect(ses).toHaveLength(1);
      expect(ses[0]!.Condition).toEqual({ StringEquals: { 'ses:FromAddress': 'reports@example.com' } });
      expect(JSON.stringify(ses[0]!.Resource)).toMatch(/:ses:.*:identity\/example\.com"/);
    }
  });

  it('lets each function read the effect-key secret by ARN, and nothing else in Secrets Manager', () => {
    const secretId = logicalIdOf(built.jobs[0]!.effectKeySecret);
    for (const job of built.jobs) {
      const secrets = statementsOf(job.jobId).filter((s) =>
        [s.Action].flat().some((a: string) => a.startsWith('secretsmanager:')),
      );
      expect(secrets).toEqual([
        {
          Effect: 'Allow',
          Action: ['secretsmanager:GetSecretValue', 'secretsmanager:DescribeSecret'],
          Resource: { Ref: secretId },
        },
      ]);
    }
  });

  it("lets only Scheduler, from this account and the job's own schedule group, send the job's windows", () => {
    for (const job of built.jobs) {
      const trust = jobResource('AWS::IAM::Role', job.jobId, 'SchedulerRole').Properties
        .AssumeRolePolicyDocument;
      expect(trust.Statement).toEqual([
        {
          Action: 'sts:AssumeRole',
          Effect: 'Allow',
          Principal: { Service: 'scheduler.amazonaws.com' },
          Condition: {
            StringEquals: { 'aws:SourceAccount': { Ref: 'AWS::AccountId' } },
            ArnEquals: { 'aws:SourceArn': { 'Fn::GetAtt': [logicalIdOf(job.scheduleGroup), 'Arn'] } },
          },
        },
      ]);
    }
  });
});

describe('the example app: claims table', () => {
  it('keeps the table on stack deletion and replacement, with point-in-time recovery and deletion protection', () => {
    const [[, table]] = resources('AWS::DynamoDB::Table') as [[string, Resource]];
    expect(table.DeletionPolicy).toBe('Retain');
    expect(table.UpdateReplacePolicy).toBe('Retain');
    expect(table.Properties).toMatchObject({
      BillingMode: 'PAY_PER_REQUEST',
      PointInTimeRecoverySpecification: { PointInTimeRecoveryEnabled: true },
      DeletionProtectionEnabled: true,
      SSESpecification: { SSEEnabled: true },
      TimeToLiveSpecification: { AttributeName: 'expiresAt', Enabled: true },
      KeySchema: [
        { AttributeName: 'pk', KeyType: 'HASH' },
        { AttributeName: 'sk', KeyType: 'RANGE' },
      ],
    });
  });

  it("keeps the claims table's logical ID, so a refactor of the constructs never replaces the table", () => {
    expect(resources('AWS::DynamoDB::Table').map(([logicalId]) => logicalId)).toEqual([
      'ClaimsTable6B243676',
    ]);
  });
});

describe('the example app: alarms', () => {
  function alarm(jobId: string, name: string): Json {
    return jobResource('AWS::CloudWatch::Alarm', jobId, name).Properties;
  }

  it.each(['weekly-report', 'payment-reminder'])(
    '%s: pages on a stuck window, a failed recipient, an effect in doubt and a failing provider, from its first occurrence',
    (jobId) => {
      const expected = (metricName: string) => ({
        Namespace: 'Slotguard',
        MetricName: metricName,
        Dimensions: [{ Name: 'JobId', Value: jobId }],
        Statistic: 'Sum',
        Period: 300,
        Threshold: 1,
        ComparisonOperator: 'GreaterThanOrEqualToThreshold',
        EvaluationPeriods: 1,
        TreatMissingData: 'notBreaching',
        AlarmActions: [PAGER],
      });
      expect(alarm(jobId, 'WindowStuckAlarm')).toMatchObject(expected('WindowStuck'));
      expect(alarm(jobId, 'EffectsFailedAlarm')).toMatchObject(expected('EffectFailed'));
      expect(alarm(jobId, 'EffectsInDoubtAlarm')).toMatchObject(expected('EffectInDoubt'));
      expect(alarm(jobId, 'ProviderFailingAlarm')).toMatchObject(expected('ProviderFailing'));
    },
  );

  it.each(['weekly-report', 'payment-reminder'])(
    "%s: pages on the watchdog's missing and incomplete windows, weekly or not, and has no missed-run alarm",
    (jobId) => {
      for (const [name, metricName] of [
        ['WindowMissingAlarm', 'WindowMissing'],
        ['WindowIncompleteAlarm', 'WindowIncomplete'],
      ]) {
        expect(alarm(jobId, name!)).toMatchObject({
          Namespace: 'Slotguard',
          MetricName: metricName,
          Dimensions: [{ Name: 'JobId', Value: jobId }],
          Statistic: 'Maximum',
          Period: 900,
          Threshold: 1,
          ComparisonOperator: 'GreaterThanOrEqualToThreshold',
          EvaluationPeriods: 1,
          TreatMissingData: 'notBreaching',
          AlarmActions: [PAGER],
        });
      }
      const names = resources('AWS::CloudWatch::Alarm')
        .map(([id]) => id)
        .filter((id) => id.startsWith(jobId.replaceAll('-', '')));
      expect(names.some((id) => /MissedRun|DuplicateClaims/.test(id))).toBe(false);
      expect(
        Annotations.fromStack(built.stack).findWarning('*', Match.stringLikeRegexp('missed-run')),
      ).toEqual([]);
    },
  );

  it("pages when the watchdog stops: the least-watched job's WatchdogRun under 1 for two runs, silence breaching", () => {
    const watchdog = built.jobs[0]!.watchdog;
    expect(built.jobs.every((job) => job.watchdog === watchdog)).toBe(true);
    const alarms = resources('AWS::CloudWatch::Alarm').filter(([id]) => id.startsWith('ClaimsTableWatchdog'));
    expect(alarms).toHaveLength(1);
    const properties = alarms[0]![1].Properties;
    expect(properties).toMatchObject({
      Threshold: 1,
      ComparisonOperator: 'LessThanThreshold',
      EvaluationPeriods: 2,
      DatapointsToAlarm: 2,
      TreatMissingData: 'breaching',
      AlarmActions: [PAGER],
    });
    expect(properties.Metrics.at(-1)).toEqual({
      Id: 'leastWatched',
      Expression: 'MIN(FILL(METRICS(), 0))',
      Label: 'WatchdogRun of the least-watched job',
      ReturnData: true,
    });
    expect(properties.Metrics.slice(0, -1).map((m: Json) => m.MetricStat.Metric.Dimensions[0].Value)).toEqual(
      ['weekly-report', 'payment-reminder'],
    );
  });

  it.each(['weekly-report', 'payment-reminder'])(
    '%s: pages on each new dead letter, a function error, a Scheduler target error and a dropped invocation',
    (jobId) => {
      const job = built.jobs.find((j) => j.jobId === jobId)!;
      const common = {
        Threshold: 1,
        ComparisonOperator: 'GreaterThanOrEqualToThreshold',
        TreatMissingData: 'notBreaching',
        AlarmActions: [PAGER],
      };
      const deadLetters = alarm(jobId, 'DeadLettersAlarm');
      expect(deadLetters).toMatchObject(common);
      // The expression itself is held in scheduled-job.test.ts; here, that it reads this job's queue.
      expect(deadLetters.Metrics.map((m: Json) => m.Expression ?? m.MetricStat.Metric.Dimensions)).toEqual([
        'DIFF(FILL(depth, 0))',
        [{ Name: 'QueueName', Value: { 'Fn::GetAtt': [logicalIdOf(job.deadLetterQueue), 'QueueName'] } }],
      ]);
      expect(alarm(jobId, 'FunctionErrorsAlarm')).toMatchObject({
        ...common,
        Namespace: 'AWS/Lambda',
        MetricName: 'Errors',
        Statistic: 'Sum',
        Dimensions: [{ Name: 'FunctionName', Value: { Ref: logicalIdOf(job.function) } }],
      });
      const group = [
        { Name: 'ScheduleGroup', Value: built.stack.resolve(job.scheduleGroup.scheduleGroupName) },
      ];
      expect(alarm(jobId, 'TargetErrorsAlarm')).toMatchObject({
        ...common,
        Namespace: 'AWS/Scheduler',
        MetricName: 'TargetErrorCount',
        Statistic: 'Sum',
        Dimensions: group,
      });
      expect(alarm(jobId, 'DroppedInvocationsAlarm')).toMatchObject({
        ...common,
        Namespace: 'AWS/Scheduler',
        MetricName: 'InvocationDroppedCount',
        Statistic: 'Sum',
        Dimensions: group,
      });
    },
  );

  it.each([
    ['weekly-report', 21_600 + 5_400],
    ['payment-reminder', 900 + 1_800],
  ])(
    '%s: shows a window message older than its deadline plus one visibility timeout, paging nobody',
    (jobId, threshold) => {
      const age = alarm(jobId, 'WorkQueueAgeAlarm');
      expect(age).toMatchObject({
        Namespace: 'AWS/SQS',
        MetricName: 'ApproximateAgeOfOldestMessage',
        Statistic: 'Maximum',
        Threshold: threshold,
        ComparisonOperator: 'GreaterThanThreshold',
      });
      expect(age.AlarmActions).toBeUndefined();
    },
  );

  it('wires the runtime to the alarm: the EMF line for one EffectFailed is exactly the metric the alarm watches', async () => {
    const lines: string[] = [];
    const metrics = emfMetrics({ jobId: 'weekly-report', write: (line) => lines.push(line) });
    metrics.count('EffectFailed');
    await metrics.flush();
    expect(lines).toHaveLength(1);
    const record = JSON.parse(lines[0]!);
    const [directive] = record._aws.CloudWatchMetrics;
    const emitted = {
      Namespace: directive.Namespace,
      MetricName: directive.Metrics.map((m: { Name: string }) => m.Name),
      Dimensions: directive.Dimensions.map((set: string[]) =>
        set.map((name) => ({ Name: name, Value: record[name] })),
      ),
      value: record.EffectFailed,
    };
    const watched = alarm('weekly-report', 'EffectsFailedAlarm');
    expect(emitted).toEqual({
      Namespace: watched.Namespace,
      MetricName: [watched.MetricName],
      Dimensions: [watched.Dimensions],
      value: 1,
    });
    expect(emitted.value).toBeGreaterThanOrEqual(watched.Threshold);
  });

  it('shows every job on one dashboard, with what only shows there: duplicates, yields, retries, runs per window', () => {
    const dashboards = resources('AWS::CloudWatch::Dashboard');
    expect(dashboards).toHaveLength(1);
    const body = JSON.stringify(dashboards[0]![1].Properties.DashboardBody);
    for (const job of built.jobs) {
      for (const title of ['claims', 'windows', 'effects', 'work queue', 'function', 'alarms']) {
        expect(body).toContain(`${job.jobId}: ${title}`);
      }
    }
    for (const metricName of Object.keys(DASHBOARD_ONLY).filter((name) => name !== 'workQueueDepth')) {
      expect(body, metricName).toContain(`\\"${metricName}\\"`);
    }
    for (const metricName of [
      'WindowStuck',
      'WindowMissing',
      'WindowIncomplete',
      'ProviderFailing',
      'EffectRetried',
    ]) {
      expect(body, metricName).toContain(`\\"${metricName}\\"`);
    }
    expect(body).toContain('IF(runs > FILL(yields, 0), runs / (runs - FILL(yields, 0)), runs)');
    expect(body).toContain('ApproximateAgeOfOldestMessage');
    // Each job's alarm widget: its 11 alarms and the watchdog's, by ARN.
    expect(body.match(/"alarms\\":\[/g)).toHaveLength(built.jobs.length);
  });
});

describe('the example app: cdk-nag AwsSolutions', () => {
  interface Acknowledgement {
    readonly path: string;
    readonly id: string;
    readonly reason: string;
  }

  function acknowledgements(root: IConstruct): Acknowledgement[] {
    return root.node.findAll().flatMap((construct) =>
      construct.node.metadata
        .filter((entry) => entry.type === Validations.ACKNOWLEDGED_RULES_METADATA_KEY)
        .flatMap((entry) =>
          Object.entries(entry.data as Record<string, string>).map(([id, reason]) => ({
            path: construct.node.path,
            id,
            reason,
          })),
        ),
    );
  }

  it('passes with no unacknowledged finding (synth would have thrown) and an empty validation report', () => {
    const report = JSON.parse(readFileSync(join(assembly.directory, 'validation-report.json'), 'utf8'));
    const findings = report.pluginReports.flatMap((r: { violations?: unknown[] }) => r.violations ?? []);
    expect(findings).toEqual([]);
  });

  it('acknowledges only these findings, each narrowly and with a one-line reason', () => {
    const acked = acknowledgements(built.app);
    // CDK records a bare rule id (the form cdk-nag's README uses) under its Annotation:: namespace.
    const summary = acked
      .map(
        ({ path, id }) =>
          `${path} ${id.replace(/^Annotation::/, '').replace(/<[A-Za-z0-9]+\.Arn>/, '<function>')}`,
      )
      .sort();
    expect(summary).toEqual(
      [
        'Slotguard/SlotguardEffectKeySecret AwsSolutions-SMG4',
        'Slotguard/payment-reminder/DeadLetterQueue AwsSolutions-SQS3',
        'Slotguard/weekly-report/DeadLetterQueue AwsSolutions-SQS3',
        'Slotguard/ClaimsTableWatchdog/SchedulerRole AwsSolutions-IAM5[Resource::<function>:*]',
        'Slotguard/ClaimsTableSesEventRecorder/DeadLetterQueue AwsSolutions-SQS3',
      ].sort(),
    );
    for (const { id, reason } of acked) {
      expect(reason.length).toBeGreaterThan(20);
      expect(reason).not.toContain('\n');
      // IAM findings are acknowledged per finding (cdk-nag 3's form of appliesTo), never for the whole rule.
      if (/IAM[45]/.test(id)) expect(id).toMatch(/\[.+\]$/);
    }
    // The watchdog's Scheduler role's acknowledgement names the watchdog's function, not any function.
    const ack = acked.find((a) => a.path === 'Slotguard/ClaimsTableWatchdog/SchedulerRole')!;
    expect(ack.id).toContain(`<${logicalIdOf(built.jobs[0]!.watchdog.function)}.Arn>:*`);
  });

  it('runs in this test process: a queue that allows plain HTTP fails synthesis with AwsSolutions-SQS4', () => {
    const app = new App({ outdir: mkdtempSync(join(tmpdir(), 'slotguard-nag-')) });
    const stack = new Stack(app, 'Control');
    const queue = new sqs.Queue(stack, 'Queue', { encryption: sqs.QueueEncryption.SQS_MANAGED });
    Validations.of(queue).acknowledge({
      id: 'AwsSolutions-SQS3',
      reason: 'A control queue for this test only.',
    });
    Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
    expect(() => app.synth()).toThrow(/AwsSolutions-SQS4/);
  });
});
