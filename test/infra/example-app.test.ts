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
import { buildApp, type SlotguardApp } from '../../infra/app.js';
import { CLAIMS_TABLE_ACTIONS } from '../../infra/claims-table.js';
import { RuntimeEnv } from '../../shared/job/runtime-env.js';
import { emfMetrics } from '../../shared/telemetry/metrics.js';
import { REPOSITORY_ROOT } from './fixtures.js';

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
  built = buildApp(new App({ outdir: mkdtempSync(join(tmpdir(), 'slotguard-cdk-')) }));
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

function logicalIdOf(construct: IConstruct): string {
  return built.stack.resolve(built.stack.getLogicalId(construct.node.defaultChild as CfnElement)) as string;
}

describe('the example app, synthesised', () => {
  it('synthesises in-process within the time budget (two handlers bundled)', () => {
    expect(built.jobs.map((job) => job.jobId)).toEqual(['weekly-report', 'payment-reminder']);
    console.info(`example app: synth with bundling and cdk-nag took ${Math.round(synthMs)} ms`);
    expect(synthMs).toBeLessThan(30_000);
  });

  it('bundles each handler into one minified ESM file with the local esbuild, never in Docker', () => {
    for (const job of built.jobs) {
      const fn = jobResource('AWS::Lambda::Function', job.jobId, 'Function');
      const assetHash = String(fn.Properties.Code.S3Key).replace(/\.zip$/, '');
      const bundle = join(assembly.directory, `asset.${assetHash}`, 'index.mjs');
      expect(existsSync(bundle), bundle).toBe(true);
      const code = readFileSync(bundle, 'utf8');
      expect(code.startsWith("import { createRequire } from 'node:module';")).toBe(true);
      // Minified: the code (before esbuild's trailing licence comments) is a few very long lines.
      const codeOnly = code.split('/*! Bundled license information')[0]!;
      expect(codeOnly.length / codeOnly.split('\n').length).toBeGreaterThan(1_000);
      // AWS SDK v3 stays external: the runtime provides it.
      expect(code).toMatch(/from\s*"@aws-sdk\/client-dynamodb"/);
      expect(fn.Properties.Handler).toBe('index.handler');
    }
  });

  it('produces bundles that load as ES modules and export the handler (CommonJS dependencies find require)', () => {
    for (const job of built.jobs) {
      const fn = jobResource('AWS::Lambda::Function', job.jobId, 'Function');
      const bundle = join(
        assembly.directory,
        `asset.${String(fn.Properties.Code.S3Key).replace(/\.zip$/, '')}`,
        'index.mjs',
      );
      // Lambda's runtime provides @aws-sdk/*; here the repository's node_modules stands in for it.
      const dir = mkdtempSync(join(tmpdir(), 'slotguard-bundle-'));
      symlinkSync(join(REPOSITORY_ROOT, 'node_modules'), join(dir, 'node_modules'));
      copyFileSync(bundle, join(dir, 'index.mjs'));
      const variables = fn.Properties.Environment.Variables as Record<string, unknown>;
      const env = {
        PATH: process.env.PATH,
        ...Object.fromEntries(
          Object.entries(variables).map(([k, v]) => [k, typeof v === 'string' ? v : `resolved-${k}`]),
        ),
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

  it('fires the weekly report at Monday 09:00 Moscow time and the reminder every 15 minutes, flexible window OFF', () => {
    expect(jobResource('AWS::Scheduler::Schedule', 'weekly-report').Properties).toMatchObject({
      ScheduleExpression: 'cron(0 9 ? * MON *)',
      ScheduleExpressionTimezone: 'Europe/Moscow',
      FlexibleTimeWindow: { Mode: 'OFF' },
      State: 'ENABLED',
    });
    expect(jobResource('AWS::Scheduler::Schedule', 'payment-reminder').Properties).toMatchObject({
      ScheduleExpression: 'rate(15 minutes)',
      ScheduleExpressionTimezone: 'UTC',
      FlexibleTimeWindow: { Mode: 'OFF' },
    });
  });

  it("puts the job id and Scheduler's context attributes in every fire's input", () => {
    for (const job of built.jobs) {
      const input = JSON.parse(jobResource('AWS::Scheduler::Schedule', job.jobId).Properties.Target.Input);
      expect(input).toEqual({
        jobId: job.jobId,
        scheduledTime: '<aws.scheduler.scheduled-time>',
        executionId: '<aws.scheduler.execution-id>',
        attemptNumber: '<aws.scheduler.attempt-number>',
      });
    }
  });

  it('retries through Scheduler and Lambda, then dead-letters to the job’s encrypted, TLS-only queue', () => {
    for (const job of built.jobs) {
      const queueId = logicalIdOf(job.deadLetterQueue);
      const target = jobResource('AWS::Scheduler::Schedule', job.jobId).Properties.Target;
      expect(target.RetryPolicy).toEqual({ MaximumRetryAttempts: 20, MaximumEventAgeInSeconds: 3_600 });
      expect(target.DeadLetterConfig).toEqual({ Arn: { 'Fn::GetAtt': [queueId, 'Arn'] } });
      const fn = jobResource('AWS::Lambda::Function', job.jobId, 'Function');
      expect(fn.Properties.DeadLetterConfig).toEqual({ TargetArn: { 'Fn::GetAtt': [queueId, 'Arn'] } });
      expect(jobResource('AWS::Lambda::EventInvokeConfig', job.jobId).Properties).toMatchObject({
        MaximumRetryAttempts: 2,
        MaximumEventAgeInSeconds: 3_600,
      });
      expect(template.toJSON().Resources[queueId].Properties).toMatchObject({ SqsManagedSseEnabled: true });
    }
    template.resourcePropertiesCountIs(
      'AWS::SQS::QueuePolicy',
      {
        PolicyDocument: {
          Statement: Match.arrayWith([
            Match.objectLike({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } }),
          ]),
        },
      },
      2,
    );
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
      });
      // The secret's value never reaches the template; the function reads it by ARN.
      expect(variables).not.toHaveProperty(RuntimeEnv.effectKeySecret);
    }
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

  it("lets only Scheduler, from this account and the job's own schedule group, invoke the job's function", () => {
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
    '%s: pages on any duplicate claim or effect in doubt',
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
      });
      expect(alarm(jobId, 'DuplicateClaimsAlarm')).toMatchObject(expected('DuplicateClaim'));
      expect(alarm(jobId, 'EffectsInDoubtAlarm')).toMatchObject(expected('EffectInDoubt'));
    },
  );

  it('payment-reminder: alarms when no claim arrives within 15 minutes plus grace, treating silence as breaching', () => {
    // rate(15 minutes) + 15 minutes' grace = 30 min: six 5-minute buckets, plus one of slack.
    expect(alarm('payment-reminder', 'MissedRunAlarm')).toMatchObject({
      Namespace: 'Slotguard',
      MetricName: 'ClaimAcquired',
      Dimensions: [{ Name: 'JobId', Value: 'payment-reminder' }],
      Statistic: 'Sum',
      Period: 300,
      EvaluationPeriods: 7,
      DatapointsToAlarm: 7,
      Threshold: 1,
      ComparisonOperator: 'LessThanThreshold',
      TreatMissingData: 'breaching',
    });
  });

  it("weekly-report: looks back CloudWatch's maximum of 7 days in hourly buckets, and warns at synth that it is capped", () => {
    expect(alarm('weekly-report', 'MissedRunAlarm')).toMatchObject({
      MetricName: 'ClaimAcquired',
      Period: 3_600,
      EvaluationPeriods: 168,
      DatapointsToAlarm: 168,
      ComparisonOperator: 'LessThanThreshold',
      TreatMissingData: 'breaching',
    });
    Annotations.fromStack(built.stack).hasWarning(
      '/Slotguard/weekly-report',
      Match.stringLikeRegexp(
        'missed-run alarm of job .weekly-report. needs to look back 168.3 hours.*created without alarm actions',
      ),
    );
  });

  it.each(['weekly-report', 'payment-reminder'])(
    '%s: alarms on a dead letter, a function error, a Scheduler target error and a dropped invocation',
    (jobId) => {
      const job = built.jobs.find((j) => j.jobId === jobId)!;
      const common = {
        Threshold: 1,
        ComparisonOperator: 'GreaterThanOrEqualToThreshold',
        TreatMissingData: 'notBreaching',
      };
      expect(alarm(jobId, 'DeadLettersAlarm')).toMatchObject({
        ...common,
        Namespace: 'AWS/SQS',
        MetricName: 'ApproximateNumberOfMessagesVisible',
        Statistic: 'Maximum',
        Dimensions: [
          { Name: 'QueueName', Value: { 'Fn::GetAtt': [logicalIdOf(job.deadLetterQueue), 'QueueName'] } },
        ],
      });
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

  it('wires the runtime to the alarm: the EMF line for one DuplicateClaim is exactly the metric the alarm watches', async () => {
    const lines: string[] = [];
    const metrics = emfMetrics({ jobId: 'weekly-report', write: (line) => lines.push(line) });
    metrics.count('DuplicateClaim');
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
      value: record.DuplicateClaim,
    };
    const watched = alarm('weekly-report', 'DuplicateClaimsAlarm');
    expect(emitted).toEqual({
      Namespace: watched.Namespace,
      MetricName: [watched.MetricName],
      Dimensions: [watched.Dimensions],
      value: 1,
    });
    expect(emitted.value).toBeGreaterThanOrEqual(watched.Threshold);
  });

  it('shows every job on one dashboard, a row each', () => {
    const dashboards = resources('AWS::CloudWatch::Dashboard');
    expect(dashboards).toHaveLength(1);
    const body = JSON.stringify(dashboards[0]![1].Properties.DashboardBody);
    for (const job of built.jobs) expect(body).toContain(`### ${job.jobId}`);
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
        'Slotguard/payment-reminder/SchedulerRole AwsSolutions-IAM5[Resource::<function>:*]',
        'Slotguard/weekly-report/DeadLetterQueue AwsSolutions-SQS3',
        'Slotguard/weekly-report/SchedulerRole AwsSolutions-IAM5[Resource::<function>:*]',
      ].sort(),
    );
    for (const { id, reason } of acked) {
      expect(reason.length).toBeGreaterThan(20);
      expect(reason).not.toContain('\n');
      // IAM findings are acknowledged per finding (cdk-nag 3's form of appliesTo), never for the whole rule.
      if (/IAM[45]/.test(id)) expect(id).toMatch(/\[.+\]$/);
    }
    // Each Scheduler role's acknowledgement names its own job's function, not any function.
    for (const job of built.jobs) {
      const ack = acked.find((a) => a.path === `Slotguard/${job.jobId}/SchedulerRole`)!;
      expect(ack.id).toContain(`<${logicalIdOf(job.function)}.Arn>:*`);
    }
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
