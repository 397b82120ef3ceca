import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { App, type CfnElement, Stack, Validations } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as rds from 'aws-cdk-lib/aws-rds';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { BUNDLING_STACKS } from 'aws-cdk-lib/cx-api';
import type { IConstruct } from 'constructs';
import { beforeAll, describe, expect, it } from 'vitest';
import { jobCatalog } from '../../functions/catalog.js';
import { ClaimsTable } from '../../infra/claims-table.js';
import { buildPostgresExample, type PostgresExample } from '../../infra/examples/postgres-app.js';
import { InfraValidationError } from '../../infra/infra-validation-error.js';
import { PostgresClaims, type PostgresClaimsProps, PostgresEndpoint } from '../../infra/postgres-claims.js';
import { ScheduledJob } from '../../infra/scheduled-job.js';
import type { JobSpec } from '../../shared/job/job-spec.js';
import { BACKEND_ENV, PostgresRuntimeEnv, RuntimeEnv } from '../../shared/job/runtime-env.js';
import { jobSpec, REPOSITORY_ROOT, stackWithoutBundling } from './fixtures.js';

/** Template JSON as aws-cdk-lib/assertions types it. */
type Json = ReturnType<Template['toJSON']>;

/** An app that synthesises without bundling: these tests are about the template. */
function appWithoutBundling(): App {
  return new App({
    context: { [BUNDLING_STACKS]: [] },
    outdir: mkdtempSync(join(tmpdir(), 'slotguard-pg-cdk-')),
  });
}

/** The example, synthesised (cdk-nag runs in synth and throws on an unacknowledged finding). */
function synthesiseExample(options: Parameters<typeof buildPostgresExample>[1]) {
  const started = performance.now();
  const example = buildPostgresExample(appWithoutBundling(), options);
  const assembly = example.app.synth();
  const ms = performance.now() - started;
  const template = Template.fromJSON(assembly.getStackArtifact(example.stack.artifactId).template);
  const report = JSON.parse(readFileSync(join(assembly.directory, 'validation-report.json'), 'utf8'));
  return { example, template, report, ms };
}

function logicalId(construct: IConstruct): string {
  const stack = Stack.of(construct);
  return stack.resolve(stack.getLogicalId(construct.node.defaultChild as CfnElement)) as string;
}

function functionOf(template: Template, job: ScheduledJob): Json {
  return template.toJSON().Resources[logicalId(job.function)];
}

/** The statements of the function role's default policy. */
function roleStatements(template: Template, job: ScheduledJob): Json[] {
  const policies = template.findResources('AWS::IAM::Policy');
  const [policy] = Object.entries(policies).filter(([id]) =>
    id.startsWith(`${job.node.id.replaceAll('-', '')}FunctionRoleDefaultPolicy`),
  );
  return policy![1].Properties.PolicyDocument.Statement;
}

/** Every alarm of `job`, keyed by its construct id, as CloudFormation gets it. */
function alarmsOf(template: Template, job: ScheduledJob): Record<string, Json> {
  const prefix = job.node.id.replaceAll('-', '');
  return Object.fromEntries(
    Object.entries(template.findResources('AWS::CloudWatch::Alarm')).flatMap(([id, alarm]) => {
      const name = new RegExp(`^${prefix}(\\w+Alarm)[0-9A-F]{8}$`).exec(id)?.[1];
      return name ? [[name, alarm.Properties]] : [];
    }),
  );
}

/** The findings acknowledged in `root`, as `path rule`, CDK's own CloudFormation checks left out. */
function acknowledgements(root: IConstruct): string[] {
  return root.node
    .findAll()
    .flatMap((construct) =>
      construct.node.metadata
        .filter((entry) => entry.type === Validations.ACKNOWLEDGED_RULES_METADATA_KEY)
        .flatMap((entry) => Object.keys(entry.data as Record<string, string>))
        .filter((id) => id.startsWith('Annotation::AwsSolutions'))
        .map(
          (id) =>
            `${construct.node.path} ${id.replace(/^Annotation::/, '').replace(/<[A-Za-z0-9]+\.Arn>/, '<function>')}`,
        ),
    )
    .sort();
}

describe('the Postgres example (Aurora Serverless v2, RDS Proxy, IAM authentication), synthesised', () => {
  let example: PostgresExample;
  let template: Template;
  let report: { pluginReports: { violations?: unknown[] }[] };

  beforeAll(() => {
    const synthesised = synthesiseExample({ auth: 'iam', via: 'proxy' });
    ({ example, template, report } = synthesised);
    console.info(`Postgres example (proxy, IAM): synth with cdk-nag took ${Math.round(synthesised.ms)} ms`);
  });

  it('passes cdk-nag AwsSolutions with only the DynamoDB app’s acknowledgements plus one per VPC function (its ENI actions)', () => {
    expect(report.pluginReports.flatMap((r) => r.violations ?? [])).toEqual([]);
    expect(acknowledgements(example.app)).toEqual(
      [
        'SlotguardPostgres/SlotguardEffectKeySecret AwsSolutions-SMG4',
        'SlotguardPostgres/ClaimsWatchdog/SchedulerRole AwsSolutions-IAM5[Resource::<function>:*]',
        'SlotguardPostgres/ClaimsWatchdog/NetworkInterfacePolicy AwsSolutions-IAM5[Resource::*]',
        'SlotguardPostgres/ClaimsSesEventRecorder/DeadLetterQueue AwsSolutions-SQS3',
        'SlotguardPostgres/ClaimsSesEventRecorder/NetworkInterfacePolicy AwsSolutions-IAM5[Resource::*]',
        ...['payment-reminder', 'weekly-report'].flatMap((job) => [
          `SlotguardPostgres/${job}/DeadLetterQueue AwsSolutions-SQS3`,
          `SlotguardPostgres/${job}/NetworkInterfacePolicy AwsSolutions-IAM5[Resource::*]`,
        ]),
      ].sort(),
    );
  });

  it('runs the watchdog in the VPC too, let in to the proxy once for all its jobs, connecting as slotguard', () => {
    const watchdog = example.jobs[0]!.watchdog;
    expect(example.jobs.every((job) => job.watchdog === watchdog)).toBe(true);
    const fn = template.toJSON().Resources[logicalId(watchdog.function)];
    expect(fn.Properties.VpcConfig.SubnetIds).toEqual(
      example.vpc.privateSubnets.map((subnet) => ({ Ref: logicalId(subnet) })),
    );
    expect(fn.DependsOn).toContain(logicalId(watchdog.node.findChild('NetworkInterfacePolicy')));
    const group = logicalId(watchdog.function.connections.securityGroups[0]!);
    const ingress = Object.values(
      template.findResources('AWS::EC2::SecurityGroupIngress', {
        Properties: { SourceSecurityGroupId: { 'Fn::GetAtt': [group, 'GroupId'] } },
      }),
    );
    expect(ingress.map((rule) => rule.Properties)).toEqual([
      {
        Description: 'slotguard watchdog SlotguardPostgres/ClaimsWatchdog/Function to Postgres',
        GroupId: { 'Fn::GetAtt': [logicalId(example.proxy.connections.securityGroups[0]!), 'GroupId'] },
        IpProtocol: 'tcp',
        FromPort: 5432,
        ToPort: 5432,
        SourceSecurityGroupId: { 'Fn::GetAtt': [group, 'GroupId'] },
      },
    ]);
    const policy =
      template.toJSON().Resources[logicalId(watchdog.function.role!.node.findChild('DefaultPolicy'))];
    expect(
      policy.Properties.PolicyDocument.Statement.filter((s: Json) => s.Action === 'rds-db:connect'),
    ).toHaveLength(1);
    expect(fn.Properties.Environment.Variables).toMatchObject({
      [BACKEND_ENV]: 'postgres',
      [PostgresRuntimeEnv.host]: { 'Fn::GetAtt': [logicalId(example.proxy), 'Endpoint'] },
      [PostgresRuntimeEnv.iamAuth]: 'true',
      [PostgresRuntimeEnv.user]: 'slotguard',
    });
  });

  it('runs the SES event recorder in the VPC too, let in to the proxy once for all its jobs, with no DynamoDB and no effect-key secret', () => {
    const recorder = example.jobs[0]!.sesEventRecorder!;
    expect(example.jobs.every((job) => job.sesEventRecorder === recorder)).toBe(true);
    const fn = template.toJSON().Resources[logicalId(recorder.function)];
    expect(fn.Properties.VpcConfig.SubnetIds).toEqual(
      example.vpc.privateSubnets.map((subnet) => ({ Ref: logicalId(subnet) })),
    );
    expect(fn.DependsOn).toContain(logicalId(recorder.node.findChild('NetworkInterfacePolicy')));
    const group = logicalId(recorder.function.connections.securityGroups[0]!);
    const ingress = Object.values(
      template.findResources('AWS::EC2::SecurityGroupIngress', {
        Properties: { SourceSecurityGroupId: { 'Fn::GetAtt': [group, 'GroupId'] } },
      }),
    );
    expect(ingress.map((rule) => rule.Properties.Description)).toEqual([
      'slotguard SES event recorder SlotguardPostgres/ClaimsSesEventRecorder/Function to Postgres',
    ]);
    const statements: Json[] =
      template.toJSON().Resources[logicalId(recorder.function.role!.node.findChild('DefaultPolicy'))]
        .Properties.PolicyDocument.Statement;
    const actions = statements.flatMap((statement) => [statement.Action].flat()).sort();
    expect(actions).toEqual([
      'logs:CreateLogStream',
      'logs:PutLogEvents',
      'rds-db:connect',
      'sqs:SendMessage',
    ]);
    expect(fn.Properties.Environment.Variables).toMatchObject({
      [BACKEND_ENV]: 'postgres',
      [PostgresRuntimeEnv.host]: { 'Fn::GetAtt': [logicalId(example.proxy), 'Endpoint'] },
      [PostgresRuntimeEnv.iamAuth]: 'true',
      [PostgresRuntimeEnv.user]: 'slotguard',
      SLOTGUARD_RECORDED_JOBS: 'weekly-report,payment-reminder',
    });
    expect(fn.Properties.Environment.Variables).not.toHaveProperty(RuntimeEnv.tableName);
  });

  it("runs each function in the VPC's private subnets, with a security group of its own", () => {
    const privateSubnets = example.vpc.privateSubnets.map((subnet) => ({ Ref: logicalId(subnet) }));
    const groups = new Set<string>();
    for (const job of example.jobs) {
      const vpcConfig = functionOf(template, job).Properties.VpcConfig;
      expect(vpcConfig.SubnetIds).toEqual(privateSubnets);
      expect(vpcConfig.SecurityGroupIds).toHaveLength(1);
      groups.add(JSON.stringify(vpcConfig.SecurityGroupIds[0]));
    }
    expect(groups.size).toBe(example.jobs.length);
  });

  it("lets each function's security group in to the proxy on 5432 and nowhere else; only the proxy and rotation reach the cluster", () => {
    const proxyGroup = logicalId(example.proxy.connections.securityGroups[0]!);
    for (const job of example.jobs) {
      const functionGroup = job.function.connections.securityGroups[0]!;
      const fromFunction = Object.values(
        template.findResources('AWS::EC2::SecurityGroupIngress', {
          Properties: { SourceSecurityGroupId: { 'Fn::GetAtt': [logicalId(functionGroup), 'GroupId'] } },
        }),
      );
      expect(fromFunction.map((rule) => rule.Properties)).toEqual([
        {
          Description: `slotguard job ${job.jobId} to Postgres`,
          GroupId: { 'Fn::GetAtt': [proxyGroup, 'GroupId'] },
          IpProtocol: 'tcp',
          FromPort: 5432,
          ToPort: 5432,
          SourceSecurityGroupId: { 'Fn::GetAtt': [logicalId(functionGroup), 'GroupId'] },
        },
      ]);
    }
    const intoCluster = Object.values(
      template.findResources('AWS::EC2::SecurityGroupIngress', {
        Properties: {
          GroupId: { 'Fn::GetAtt': [logicalId(example.cluster.connections.securityGroups[0]!), 'GroupId'] },
        },
      }),
    ).map((rule) => JSON.stringify(rule.Properties.SourceSecurityGroupId));
    expect(intoCluster).toHaveLength(3);
    expect(intoCluster).toContain(JSON.stringify({ 'Fn::GetAtt': [proxyGroup, 'GroupId'] }));
    for (const job of example.jobs) expect(intoCluster.join()).not.toContain(job.jobId.replaceAll('-', ''));
  });

  it("grants rds-db:connect as slotguard on the proxy's resource id, and no secret but the effect key", () => {
    for (const job of example.jobs) {
      const statements = roleStatements(template, job);
      expect(statements.filter((s) => s.Action === 'rds-db:connect')).toEqual([
        {
          Effect: 'Allow',
          Action: 'rds-db:connect',
          Resource: {
            'Fn::Join': [
              '',
              [
                'arn:',
                { Ref: 'AWS::Partition' },
                ':rds-db:',
                { Ref: 'AWS::Region' },
                ':',
                { Ref: 'AWS::AccountId' },
                ':dbuser:',
                {
                  'Fn::Select': [
                    6,
                    { 'Fn::Split': [':', { 'Fn::GetAtt': [logicalId(example.proxy), 'DBProxyArn'] }] },
                  ],
                },
                '/slotguard',
              ],
            ],
          },
        },
      ]);
      const secretReads = statements.filter((s) =>
        [s.Action].flat().includes('secretsmanager:GetSecretValue'),
      );
      expect(secretReads.map((s) => s.Resource)).toEqual([{ Ref: logicalId(job.effectKeySecret) }]);
    }
  });

  it('grants the VPC network-interface actions in a policy of its own that the function waits for, never an AWS managed policy', () => {
    for (const job of example.jobs) {
      const policyId = logicalId(job.node.findChild('NetworkInterfacePolicy'));
      const policy = template.toJSON().Resources[policyId];
      expect(policy.Properties.PolicyDocument.Statement).toEqual([
        {
          Effect: 'Allow',
          Action: [
            'ec2:CreateNetworkInterface',
            'ec2:DescribeNetworkInterfaces',
            'ec2:DescribeSubnets',
            'ec2:DeleteNetworkInterface',
            'ec2:AssignPrivateIpAddresses',
            'ec2:UnassignPrivateIpAddresses',
          ],
          Resource: '*',
        },
      ]);
      expect(policy.Properties.Roles).toEqual([{ Ref: logicalId(job.function.role!) }]);
      // Lambda checks these permissions when it creates a function in a VPC.
      expect(functionOf(template, job).DependsOn).toContain(policyId);
    }
    template.resourcePropertiesCountIs(
      'AWS::IAM::Role',
      { ManagedPolicyArns: Match.arrayWith([Match.stringLikeRegexp('AWSLambdaVPCAccessExecutionRole')]) },
      0,
    );
  });

  it("sets the variables the Postgres runtime reads (IAM authentication through the proxy) and none of DynamoDB's", () => {
    for (const job of example.jobs) {
      const variables = functionOf(template, job).Properties.Environment.Variables;
      expect(variables).toMatchObject({
        [RuntimeEnv.jobId]: job.jobId,
        [BACKEND_ENV]: 'postgres',
        [PostgresRuntimeEnv.host]: { 'Fn::GetAtt': [logicalId(example.proxy), 'Endpoint'] },
        [PostgresRuntimeEnv.port]: '5432',
        [PostgresRuntimeEnv.database]: 'app',
        [PostgresRuntimeEnv.schema]: 'slotguard',
        [PostgresRuntimeEnv.ssl]: 'true',
        [PostgresRuntimeEnv.iamAuth]: 'true',
        [PostgresRuntimeEnv.user]: 'slotguard',
      });
      expect(variables).not.toHaveProperty(PostgresRuntimeEnv.secretArn);
      expect(variables).not.toHaveProperty(RuntimeEnv.tableName);
      // RDS Proxy presents an ACM certificate, which Node trusts without the runtime's CA bundle.
      expect(variables).not.toHaveProperty('NODE_EXTRA_CA_CERTS');
    }
  });

  it('creates exactly the alarms a DynamoDB-backed job gets, metric for metric', () => {
    const stack = new Stack(appWithoutBundling(), 'SlotguardPostgres');
    const claims = new ClaimsTable(stack, 'Claims');
    const dynamoJobs = jobCatalog.map(
      (job) =>
        new ScheduledJob(stack, job.id, {
          job,
          claims,
          ses: { identity: 'example.com', fromAddress: 'reports@example.com' },
          projectRoot: REPOSITORY_ROOT,
        }),
    );
    const dynamoTemplate = Template.fromStack(stack);
    for (const [index, job] of example.jobs.entries()) {
      const alarms = alarmsOf(template, job);
      expect(Object.keys(alarms).sort()).toEqual(
        [
          'DeadLettersAlarm',
          'DroppedInvocationsAlarm',
          'EffectsFailedAlarm',
          'EffectsInDoubtAlarm',
          'FunctionErrorsAlarm',
          'ProviderFailingAlarm',
          'TargetErrorsAlarm',
          'WindowIncompleteAlarm',
          'WindowMissingAlarm',
          'WindowStuckAlarm',
          'WorkQueueAgeAlarm',
        ].sort(),
      );
      // Same construct paths in both stacks, so even the dimensions' references agree.
      expect(alarms).toEqual(alarmsOf(dynamoTemplate, dynamoJobs[index]!));
    }
  });
});

describe('the Postgres example with the user secret, straight to the cluster', () => {
  let example: PostgresExample;
  let template: Template;

  beforeAll(() => {
    const synthesised = synthesiseExample({ auth: 'secret', via: 'cluster' });
    ({ example, template } = synthesised);
    expect(
      synthesised.report.pluginReports.flatMap((r: { violations?: unknown[] }) => r.violations ?? []),
    ).toEqual([]);
    console.info(
      `Postgres example (cluster, secret): synth with cdk-nag took ${Math.round(synthesised.ms)} ms`,
    );
  });

  it("lets each function read the user's secret by ARN, and grants no rds-db:connect", () => {
    const userSecret = logicalId(example.userSecret.node.findChild('Attachment'));
    for (const job of example.jobs) {
      const statements = roleStatements(template, job);
      const secretReads = statements.filter((s) =>
        [s.Action].flat().includes('secretsmanager:GetSecretValue'),
      );
      expect(secretReads).toEqual([
        {
          Effect: 'Allow',
          Action: ['secretsmanager:GetSecretValue', 'secretsmanager:DescribeSecret'],
          Resource: { Ref: userSecret },
        },
        {
          Effect: 'Allow',
          Action: ['secretsmanager:GetSecretValue', 'secretsmanager:DescribeSecret'],
          Resource: { Ref: logicalId(job.effectKeySecret) },
        },
      ]);
      expect(JSON.stringify(statements)).not.toContain('rds-db:connect');
      expect(functionOf(template, job).Properties.Environment.Variables).toMatchObject({
        [PostgresRuntimeEnv.secretArn]: { Ref: userSecret },
        [PostgresRuntimeEnv.host]: { 'Fn::GetAtt': [logicalId(example.cluster), 'Endpoint.Address'] },
        [PostgresRuntimeEnv.port]: { 'Fn::GetAtt': [logicalId(example.cluster), 'Endpoint.Port'] },
        // The cluster's certificate is from the RDS CAs: the runtime's CA bundle is loaded for it.
        NODE_EXTRA_CA_CERTS: '/var/runtime/ca-cert.pem',
      });
      expect(functionOf(template, job).Properties.Environment.Variables).not.toHaveProperty(
        PostgresRuntimeEnv.iamAuth,
      );
    }
  });

  it("lets each function's security group in to the cluster on the cluster's port (5433)", () => {
    const clusterGroup = logicalId(example.cluster.connections.securityGroups[0]!);
    for (const job of example.jobs) {
      template.hasResourceProperties('AWS::EC2::SecurityGroupIngress', {
        Description: `slotguard job ${job.jobId} to Postgres`,
        GroupId: { 'Fn::GetAtt': [clusterGroup, 'GroupId'] },
        SourceSecurityGroupId: {
          'Fn::GetAtt': [logicalId(job.function.connections.securityGroups[0]!), 'GroupId'],
        },
        FromPort: { 'Fn::GetAtt': [logicalId(example.cluster), 'Endpoint.Port'] },
        ToPort: { 'Fn::GetAtt': [logicalId(example.cluster), 'Endpoint.Port'] },
      });
    }
  });
});

/** A stack with an imported VPC, for the endpoint and validation tests. */
function stackWithVpc(): { stack: Stack; vpc: ec2.IVpc } {
  const stack = stackWithoutBundling();
  const vpc = ec2.Vpc.fromVpcAttributes(stack, 'Vpc', {
    vpcId: 'vpc-0123456789abcdef0',
    availabilityZones: ['eu-west-1a'],
    privateSubnetIds: ['subnet-0123456789abcdef0'],
  });
  return { stack, vpc };
}

function addJob(stack: Stack, claims: PostgresClaims, job: Partial<JobSpec> = {}): ScheduledJob {
  return new ScheduledJob(stack, 'job', { job: jobSpec(job), claims, projectRoot: REPOSITORY_ROOT });
}

describe('PostgresClaims: the other endpoints', () => {
  it('grants rds-db:connect on an RDS instance’s resource id and lets the function in to its security group', () => {
    const { stack, vpc } = stackWithVpc();
    const instance = new rds.DatabaseInstance(stack, 'Instance', {
      engine: rds.DatabaseInstanceEngine.postgres({ version: rds.PostgresEngineVersion.VER_17 }),
      vpc,
      iamAuthentication: true,
      storageEncrypted: true,
    });
    const job = addJob(
      stack,
      new PostgresClaims(stack, 'Claims', {
        endpoint: PostgresEndpoint.fromInstance(instance),
        databaseName: 'app',
        iamAuthUser: 'slotguard',
        vpc,
      }),
    );
    const template = Template.fromStack(stack);

    const grant = roleStatements(template, job).filter((s) => s.Action === 'rds-db:connect');
    expect(grant).toHaveLength(1);
    expect(JSON.stringify(grant[0]!.Resource)).toContain(
      `{"Fn::GetAtt":["${logicalId(instance)}","DbiResourceId"]},"/slotguard"`,
    );
    template.hasResourceProperties('AWS::EC2::SecurityGroupIngress', {
      GroupId: { 'Fn::GetAtt': [logicalId(instance.connections.securityGroups[0]!), 'GroupId'] },
      SourceSecurityGroupId: {
        'Fn::GetAtt': [logicalId(job.function.connections.securityGroups[0]!), 'GroupId'],
      },
      FromPort: { 'Fn::GetAtt': [logicalId(instance), 'Endpoint.Port'] },
    });
  });

  it('connects to a host by name: rds-db:connect on the resource id given, ingress to the security group given', () => {
    const { stack, vpc } = stackWithVpc();
    const job = addJob(
      stack,
      new PostgresClaims(stack, 'Claims', {
        endpoint: PostgresEndpoint.fromHost({
          hostname: 'db.internal.example',
          port: 6432,
          securityGroups: [ec2.SecurityGroup.fromSecurityGroupId(stack, 'DbSg', 'sg-0123456789abcdef0')],
          iamResourceId: 'prx-0123456789abcdef0',
          rdsCertificate: false,
        }),
        databaseName: 'app',
        schema: 'jobs',
        iamAuthUser: 'slotguard',
        vpc,
      }),
    );
    const template = Template.fromStack(stack);

    expect(roleStatements(template, job).filter((s) => s.Action === 'rds-db:connect')).toEqual([
      {
        Effect: 'Allow',
        Action: 'rds-db:connect',
        Resource: {
          'Fn::Join': [
            '',
            [
              'arn:',
              { Ref: 'AWS::Partition' },
              ':rds-db:',
              { Ref: 'AWS::Region' },
              ':',
              { Ref: 'AWS::AccountId' },
              ':dbuser:prx-0123456789abcdef0/slotguard',
            ],
          ],
        },
      },
    ]);
    template.hasResourceProperties('AWS::EC2::SecurityGroupIngress', {
      GroupId: 'sg-0123456789abcdef0',
      FromPort: 6432,
      ToPort: 6432,
    });
    expect(functionOf(template, job).Properties.Environment.Variables).toMatchObject({
      [PostgresRuntimeEnv.host]: 'db.internal.example',
      [PostgresRuntimeEnv.port]: '6432',
      [PostgresRuntimeEnv.schema]: 'jobs',
    });
  });

  it('warns at synth, and adds no ingress, when it does not know the endpoint’s security groups', () => {
    const { stack, vpc } = stackWithVpc();
    addJob(
      stack,
      new PostgresClaims(stack, 'Claims', {
        endpoint: PostgresEndpoint.fromHost({ hostname: 'db.internal.example' }),
        databaseName: 'app',
        secret: secretsmanager.Secret.fromSecretNameV2(stack, 'Secret', 'slotguard-user'),
        vpc,
      }),
    );

    Template.fromStack(stack).resourceCountIs('AWS::EC2::SecurityGroupIngress', 0);
    Annotations.fromStack(stack).hasWarning(
      '/Test/Claims',
      Match.stringLikeRegexp(
        'does not know the security groups of host db.internal.example.*on port 5432 yourself',
      ),
    );
  });
});

describe('PostgresClaims refuses props that cannot work, naming the construct, the prop, the value and the fix', () => {
  /** The InfraValidationError `build` throws (fails the test if it throws nothing or something else). */
  function validationError(build: (stack: Stack, vpc: ec2.IVpc) => void): InfraValidationError {
    const { stack, vpc } = stackWithVpc();
    try {
      build(stack, vpc);
    } catch (error) {
      expect(error).toBeInstanceOf(InfraValidationError);
      return error as InfraValidationError;
    }
    throw new Error('expected an InfraValidationError, got none');
  }

  const props = (vpc: ec2.IVpc, overrides: Partial<PostgresClaimsProps> = {}): PostgresClaimsProps => ({
    endpoint: PostgresEndpoint.fromHost({ hostname: 'db.internal.example', iamResourceId: 'db-ABCDEFGHIJ' }),
    databaseName: 'app',
    iamAuthUser: 'slotguard',
    vpc,
    ...overrides,
  });

  it('refuses neither a secret nor IAM authentication', () => {
    const error = validationError(
      (stack, vpc) => new PostgresClaims(stack, 'Claims', props(vpc, { iamAuthUser: undefined })),
    );
    expect(error.prop).toBe('secret');
    expect(error.message).toBe(
      "PostgresClaims 'Test/Claims': neither secret nor iamAuthUser is set; set secret (an RDS database secret with " +
        'username and password) or iamAuthUser (the database user the functions connect as with IAM database authentication)',
    );
  });

  it('refuses both a secret and IAM authentication (the runtime would not know which to use)', () => {
    const error = validationError(
      (stack, vpc) =>
        new PostgresClaims(
          stack,
          'Claims',
          props(vpc, { secret: secretsmanager.Secret.fromSecretNameV2(stack, 'Secret', 'slotguard-user') }),
        ),
    );
    expect(error.prop).toBe('iamAuthUser');
    expect(error.message).toBe(
      'PostgresClaims \'Test/Claims\': both secret and iamAuthUser "slotguard" are set; set one: secret for password ' +
        'authentication, or iamAuthUser for IAM database authentication',
    );
  });

  it('refuses a schema name the Postgres backend would refuse at run time', () => {
    const error = validationError(
      (stack, vpc) => new PostgresClaims(stack, 'Claims', props(vpc, { schema: 'pg_slotguard' })),
    );
    expect(error.prop).toBe('schema');
    expect(error.message).toBe(
      'PostgresClaims \'Test/Claims\': schema "pg_slotguard" is not a usable schema name: use 1-63 lower-case letters, ' +
        'digits or underscores, a letter or underscore first and not "pg_" (for example "slotguard")',
    );
  });

  it('refuses an IAM user name with a wildcard, which would let the functions connect as any user', () => {
    const error = validationError(
      (stack, vpc) => new PostgresClaims(stack, 'Claims', props(vpc, { iamAuthUser: '*' })),
    );
    expect(error.prop).toBe('iamAuthUser');
    expect(error.message).toBe(
      'PostgresClaims \'Test/Claims\': iamAuthUser "*" is not a database user name slotguard grants rds-db:connect for: ' +
        'it must match /^[A-Za-z_][A-Za-z0-9_]{0,62}$/ (a wildcard would let the functions connect as any user); ' +
        'give the one user, e.g. "slotguard"',
    );
  });

  it('refuses IAM authentication without TLS', () => {
    const error = validationError(
      (stack, vpc) => new PostgresClaims(stack, 'Claims', props(vpc, { ssl: false })),
    );
    expect(error.prop).toBe('ssl');
    expect(error.message).toBe(
      'PostgresClaims \'Test/Claims\': ssl is false with iamAuthUser "slotguard"; RDS accepts IAM authentication ' +
        'tokens over TLS only: leave ssl unset (true)',
    );
  });

  it('refuses IAM authentication to a host whose resource id it was not given', () => {
    const error = validationError(
      (stack, vpc) =>
        new PostgresClaims(
          stack,
          'Claims',
          props(vpc, { endpoint: PostgresEndpoint.fromHost({ hostname: 'db.internal.example' }) }),
        ),
    );
    expect(error.prop).toBe('endpoint');
    expect(error.message).toBe(
      'PostgresClaims \'Test/Claims\': iamAuthUser "slotguard" needs the resource id of host db.internal.example, but ' +
        'fromHost was given no iamResourceId (the prx-, cluster- or db- id); or use secret instead',
    );
  });

  it('refuses an empty database name', () => {
    const error = validationError(
      (stack, vpc) => new PostgresClaims(stack, 'Claims', props(vpc, { databaseName: '' })),
    );
    expect(error.prop).toBe('databaseName');
    expect(error.message).toBe(
      "PostgresClaims 'Test/Claims': databaseName \"\" is not a PostgreSQL database name; give the database's name, " +
        '1-63 characters (for example "app")',
    );
  });

  it('refuses a job whose lease is too short for its client-side deadline to fit its safety margin (every claim would fail)', () => {
    // 20 s is three session timeouts, but its margin (a sixth) is shorter than the 5 s deadline.
    const error = validationError((stack, vpc) =>
      addJob(stack, new PostgresClaims(stack, 'Claims', props(vpc)), { leaseSeconds: 20 }),
    );
    expect(error.prop).toBe('job.leaseSeconds');
    expect(error.constructPath).toBe('Test/job');
    expect(error.message).toBe(
      "ScheduledJob 'Test/job': job.leaseSeconds is 20, shorter than the Postgres backend's minimum of 30 (its " +
        "client-side deadline, 5000 ms, must fit in the run's safety margin, a sixth of the lease, and the lease must " +
        'be three times its longest session timeout): every claim would be refused; set job.leaseSeconds to 30 or more',
    );
  });
});
