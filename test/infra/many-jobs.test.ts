import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { App, type CfnElement, Stack, Validations } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { BUNDLING_STACKS, type CloudAssembly } from 'aws-cdk-lib/cx-api';
import { AwsSolutionsChecks } from 'cdk-nag';
import type { IConstruct } from 'constructs';
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { CLOUDFORMATION_STACK_LIMITS } from '../../infra/cloudformation-limits.js';
import type { ScheduledJob } from '../../infra/scheduled-job.js';
import { jobStackNumber, SlotguardStacks, type SlotguardStacksProps } from '../../infra/slotguard-stacks.js';
import { JOBS_PER_STOPPED_ALARM } from '../../infra/slotguard-watchdog.js';
import type { JobSpec } from '../../shared/job/job-spec.js';
import { RuntimeEnv } from '../../shared/job/runtime-env.js';
import { jobSpec, REPOSITORY_ROOT } from './fixtures.js';

/** Template JSON as aws-cdk-lib/assertions types it. */
type Json = ReturnType<Template['toJSON']>;

/** CloudFormation resources of one job on a ClaimsTable, outside a VPC (docs/cdk.md, "Resources"). */
const RESOURCES_PER_JOB = 26;
/** The watchdog's function, role, policy, log group, async-invoke config, schedule group, scheduler role and policy. */
const RESOURCES_PER_WATCHDOG = 8;

/** The catalog's two handlers, so that 100 functions need 2 bundles (and the watchdog's a third). */
const HANDLERS = ['functions/weekly-report/handler.ts', 'functions/payment-reminder/handler.ts'] as const;

function jobIds(count: number): string[] {
  return Array.from({ length: count }, (_, index) => `job-${String(index + 1).padStart(3, '0')}`);
}

/** Job `id`: half weekly and half every 15 minutes, on the catalog's handlers. */
function manyJobSpec(id: string, index: number): JobSpec {
  return jobSpec({
    id,
    description: `generated job ${id}`,
    entry: HANDLERS[index % 2]!,
    ...(index % 2
      ? { schedule: { expression: 'rate(15 minutes)', timeZone: 'UTC' }, timeoutSeconds: 300 }
      : {}),
  });
}

interface ManyJobsOptions extends SlotguardStacksProps {
  /** Bundle with esbuild (cached per handler). @default false */
  readonly bundle?: boolean;
  /** Run cdk-nag's AwsSolutions checks at synth. @default false */
  readonly nag?: boolean;
  /** Job id -> the stack it is pinned to. @default none */
  readonly pins?: Readonly<Record<string, string>>;
}

function manyJobsApp(ids: readonly string[], options: ManyJobsOptions = {}) {
  const { bundle, nag, pins, ...props } = options;
  const app = new App({
    outdir: mkdtempSync(join(tmpdir(), 'slotguard-many-')),
    context: bundle ? {} : { [BUNDLING_STACKS]: [] },
  });
  const slotguard = new SlotguardStacks(app, 'Reports', props);
  ids.forEach((id, index) => {
    const pinned = pins?.[id];
    slotguard.addJob({
      job: manyJobSpec(id, index),
      projectRoot: REPOSITORY_ROOT,
      watchedSince: new Date('2026-12-01T00:00:00Z'),
      ...(pinned ? { stack: pinned } : {}),
    });
  });
  if (nag) Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
  return { app, slotguard };
}

function logicalIdOf(construct: IConstruct): string {
  const stack = Stack.of(construct);
  return stack.resolve(stack.getLogicalId(construct.node.defaultChild as CfnElement)) as string;
}

/** The job's function as synthesised in its own stack. */
function functionOf(job: ScheduledJob): Json {
  return Template.fromStack(Stack.of(job)).toJSON().Resources[logicalIdOf(job.function)];
}

function secretArnOf(job: ScheduledJob): unknown {
  return functionOf(job).Properties.Environment.Variables[RuntimeEnv.effectKeySecretArn];
}

/** The resource of the statement that lets the job's function read secrets. */
function secretReadOf(job: ScheduledJob): unknown {
  const policies = Template.fromStack(Stack.of(job)).findResources('AWS::IAM::Policy');
  const statements = Object.values(policies)
    .filter((policy) => JSON.stringify(policy.Properties.Roles).includes(logicalIdOf(job.function.role!)))
    .flatMap((policy) => policy.Properties.PolicyDocument.Statement as Json[]);
  const reads = statements.filter((s) => [s.Action].flat().includes('secretsmanager:GetSecretValue'));
  expect(reads).toHaveLength(1);
  return reads[0]!.Resource;
}

/** An ARN the template builds with Fn::Join, its pseudo parameters as `<…>`. */
function joined(value: unknown): string {
  expect(value, 'an ARN built with Fn::Join').toHaveProperty(['Fn::Join']);
  const join = (value as { 'Fn::Join': [string, unknown[]] })['Fn::Join'];
  return join[1].map((part) => (typeof part === 'string' ? part : `<${JSON.stringify(part)}>`)).join(join[0]);
}

describe.each([
  { jobs: 50, jobStacks: 5 },
  { jobs: 100, jobStacks: 10 },
])('SlotguardStacks: an app of $jobs jobs over $jobStacks job stacks', ({ jobs, jobStacks }) => {
  let slotguard: SlotguardStacks;
  let assembly: CloudAssembly;
  let synthMs: number;

  // One synthesis, bundling with the local esbuild and running cdk-nag, shared by this block's tests.
  beforeAll(() => {
    const started = performance.now();
    const built = manyJobsApp(jobIds(jobs), { jobStacks, bundle: true, nag: true });
    slotguard = built.slotguard;
    assembly = built.app.synth();
    synthMs = performance.now() - started;
    console.info(`${jobs} jobs: build and synth with bundling and cdk-nag took ${Math.round(synthMs)} ms`);
  });

  function templates(): [string, Json][] {
    return assembly.stacks.map((artifact) => [artifact.stackName, artifact.template as Json]);
  }

  it("synthesises every stack within CloudFormation's limits: resources, outputs, parameters, template size", () => {
    const stacks = templates();
    expect(stacks.map(([name]) => name).sort()).toEqual(
      ['Reports', ...Array.from({ length: jobStacks }, (_, n) => `Reports-jobs-${n + 1}`)].sort(),
    );
    for (const [name, template] of stacks) {
      const size = {
        resources: Object.keys(template.Resources ?? {}).length,
        outputs: Object.keys(template.Outputs ?? {}).length,
        parameters: Object.keys(template.Parameters ?? {}).length,
        templateBytes: Buffer.byteLength(JSON.stringify(template)),
      };
      console.info(`${name}: ${JSON.stringify(size)}`);
      for (const [limit, value] of Object.entries(size)) {
        expect(value, `${name} ${limit}`).toBeLessThanOrEqual(
          CLOUDFORMATION_STACK_LIMITS[limit as keyof typeof size],
        );
      }
    }
  });

  it('puts every job in the stack its id hashes to, beside one watchdog and one dashboard for that stack', () => {
    expect(slotguard.jobs).toHaveLength(jobs);
    for (const job of slotguard.jobs) {
      expect(Stack.of(job).stackName).toBe(`Reports-jobs-${jobStackNumber(job.jobId, jobStacks)}`);
    }
    for (const stack of slotguard.jobStacks) {
      const template = Template.fromJSON(assembly.getStackByName(stack.stackName).template);
      const held = slotguard.jobs.filter((job) => Stack.of(job) === stack).length;
      expect(held, `${stack.stackName} holds jobs`).toBeGreaterThan(0);
      // Each job's function and the stack's one watchdog.
      template.resourceCountIs('AWS::Lambda::Function', held + 1);
      // The job's schedule and its watchdog schedule.
      template.resourceCountIs('AWS::Scheduler::Schedule', 2 * held);
      template.resourceCountIs('AWS::CloudWatch::Dashboard', 1);
      // 26 per job; the watchdog's 8 and its WatchdogStopped alarms, one per 10 jobs; the dashboard.
      expect(Object.keys(template.toJSON().Resources)).toHaveLength(
        RESOURCES_PER_JOB * held + RESOURCES_PER_WATCHDOG + Math.ceil(held / JOBS_PER_STOPPED_ALARM) + 1,
      );
    }
  });

  it('creates one effect-key secret for the app, retained, and every job in every stack reads it by its name', () => {
    const secrets = templates().flatMap(([name, template]) =>
      Object.values(template.Resources ?? {})
        .filter((resource) => (resource as Json).Type === 'AWS::SecretsManager::Secret')
        .map((resource) => ({ stack: name, secret: resource as Json })),
    );
    expect(secrets).toHaveLength(1);
    expect(secrets[0]!.stack).toBe('Reports');
    expect(secrets[0]!.secret).toMatchObject({
      Properties: { Name: 'slotguard/Reports/effect-key' },
      DeletionPolicy: 'Retain',
      UpdateReplacePolicy: 'Retain',
    });
    const arns = new Set(slotguard.jobs.map((job) => JSON.stringify(secretArnOf(job))));
    expect(arns.size).toBe(1);
    expect(joined(secretArnOf(slotguard.jobs[0]!))).toMatch(
      /^arn:<.+>:secretsmanager:<.+>:<.+>:secret:slotguard\/Reports\/effect-key$/,
    );
  });

  it("imports only the claims table's name and ARN from the base stack, however many jobs there are", () => {
    const base = assembly.getStackByName('Reports').template as Json;
    expect(Object.values(base.Outputs).map((output) => (output as Json).Value)).toEqual(
      expect.arrayContaining([
        { Ref: logicalIdOf(slotguard.claims.table) },
        { 'Fn::GetAtt': [logicalIdOf(slotguard.claims.table), 'Arn'] },
      ]),
    );
    expect(Object.keys(base.Outputs)).toHaveLength(2);
  });

  it("bundles each distinct handler once: esbuild's output is cached across the functions that share it", () => {
    const codeKeys = new Set(
      templates().flatMap(([, template]) =>
        Object.values(template.Resources ?? {})
          .filter((resource) => (resource as Json).Type === 'AWS::Lambda::Function')
          .map((resource) => (resource as Json).Properties.Code.S3Key as string),
      ),
    );
    // The two handlers and the watchdog's.
    expect(codeKeys.size).toBe(3);
  });

  it('passes cdk-nag and CloudFormation validation with no finding, acknowledging only the known ones', () => {
    const report = JSON.parse(readFileSync(join(assembly.directory, 'validation-report.json'), 'utf8'));
    expect(report.pluginReports.flatMap((r: { violations?: unknown[] }) => r.violations ?? [])).toEqual([]);
    const acknowledged = new Map<string, number>();
    for (const construct of slotguard.base.node.root.node.findAll()) {
      for (const entry of construct.node.metadata) {
        if (entry.type !== Validations.ACKNOWLEDGED_RULES_METADATA_KEY) continue;
        for (const id of Object.keys(entry.data as Record<string, string>)) {
          const rule = id.replace(/^Annotation::/, '').replace(/\[.*\]$/, '');
          acknowledged.set(rule, (acknowledged.get(rule) ?? 0) + 1);
        }
      }
    }
    expect(Object.fromEntries(acknowledged)).toEqual({
      'AwsSolutions-SMG4': 1,
      'AwsSolutions-SQS3': jobs,
      'AwsSolutions-IAM5': jobStacks,
      'CloudFormation-Validate::F0001': jobStacks,
    });
  });
});

describe('SlotguardStacks: where a job goes', () => {
  it('moves no job when a job is inserted in the middle of the catalog', () => {
    const ids = jobIds(50);
    const before = manyJobsApp(ids, { jobStacks: 5 }).slotguard;
    const inserted = [...ids.slice(0, 25), 'job-025-b', ...ids.slice(25)];
    const after = manyJobsApp(inserted, { jobStacks: 5 }).slotguard;
    const stackOf = (built: SlotguardStacks) =>
      new Map(built.jobs.map((job) => [job.jobId, Stack.of(job).stackName]));
    const [was, is] = [stackOf(before), stackOf(after)];
    expect(is.size).toBe(51);
    for (const id of ids) expect(is.get(id), id).toBe(was.get(id));
  });

  it('moves only jobs into the new stack when jobStacks is raised by one', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.string(), { minLength: 1, maxLength: 60 }),
        fc.integer({ min: 1, max: 20 }),
        (ids, n) => {
          for (const id of ids) {
            const from = jobStackNumber(id, n);
            expect(from).toBeGreaterThanOrEqual(1);
            expect(from).toBeLessThanOrEqual(n);
            expect([from, n + 1]).toContain(jobStackNumber(id, n + 1));
          }
        },
      ),
    );
  });

  it('puts a pinned job in the stack it names and every other job where its id hashes', () => {
    const ids = jobIds(12);
    const { slotguard } = manyJobsApp(ids, { jobStacks: 2, pins: { 'job-004': 'billing' } });
    const pinned = slotguard.jobs.find((job) => job.jobId === 'job-004')!;
    expect(Stack.of(pinned).stackName).toBe('Reports-billing');
    expect(slotguard.jobStacks.map((stack) => stack.stackName)).toEqual([
      'Reports-jobs-1',
      'Reports-jobs-2',
      'Reports-billing',
    ]);
    const billing = Template.fromStack(slotguard.jobStackOf('billing')!);
    billing.resourceCountIs('AWS::Lambda::Function', 2);
    billing.resourceCountIs('AWS::CloudWatch::Dashboard', 1);
    for (const job of slotguard.jobs.filter((job) => job !== pinned)) {
      expect(Stack.of(job).stackName).toBe(`Reports-jobs-${jobStackNumber(job.jobId, 2)}`);
    }
  });

  it('hashes a job with the same effect-key secret after it moves to another stack', () => {
    const { slotguard: before } = manyJobsApp(['mover'], { jobStacks: 3 });
    const { slotguard: after } = manyJobsApp(['mover'], { jobStacks: 3, pins: { mover: 'elsewhere' } });
    const [was, is] = [before.jobs[0]!, after.jobs[0]!];
    expect(Stack.of(was).stackName).toBe(`Reports-jobs-${jobStackNumber('mover', 3)}`);
    expect(Stack.of(is).stackName).toBe('Reports-elsewhere');
    // A Ref to a per-stack secret would read the same in both templates yet name two secrets: the
    // ARN must name the app's one secret.
    for (const job of [was, is]) {
      expect(joined(secretArnOf(job))).toMatch(/:secret:slotguard\/Reports\/effect-key$/);
      expect(joined(secretReadOf(job))).toMatch(/:secret:slotguard\/Reports\/effect-key-\?\?\?\?\?\?$/);
    }
    // The variable the runtime reads the key by, and the grant that lets it: the same in both stacks.
    expect(secretArnOf(is)).toEqual(secretArnOf(was));
    expect(secretReadOf(is)).toEqual(secretReadOf(was));
  });

  it('synthesises a job stack with no job left, with no resources, so that cdk deploy deletes it', () => {
    const id = jobIds(40).find((candidate) => jobStackNumber(candidate, 2) === 1)!;
    const { app, slotguard } = manyJobsApp([id], { jobStacks: 2 });
    const assembly = app.synth();
    expect(Object.keys(assembly.getStackByName('Reports-jobs-1').template.Resources).length).toBeGreaterThan(
      0,
    );
    expect(assembly.getStackByName('Reports-jobs-2').template.Resources).toBeUndefined();
    expect(slotguard.jobStacks).toHaveLength(2);
  });
});

describe('SlotguardStacks: a full stack and bad props', () => {
  it('fails synth naming the full stack, its jobs and both fixes when a stack passes 500 resources', () => {
    // 19 jobs: 19 x 26 + the watchdog's 8, 2 WatchdogStopped alarms and the dashboard = 505.
    const { app } = manyJobsApp(jobIds(19), { jobStacks: 1 });
    expect(() => app.synth()).toThrow(
      new RegExp(
        "job stack 'Reports-jobs-1' holds 505 CloudFormation resources, over the 500 a stack may hold, with its 19 " +
          'jobs: job-001, job-002, .*job-019\\. Pin the job you added \\(or any of these\\) to a stack of its own ' +
          "with addJob's `stack`, which moves that job alone; or raise jobStacks from 1 to 2, which moves job-\\d{3}",
      ),
    );
  });

  it('names the stacks with room when another stack is full', () => {
    const ids = jobIds(19);
    const pins = Object.fromEntries(ids.map((id) => [id, 'crowded']));
    const { app } = manyJobsApp([...ids, 'job-100'], { jobStacks: 1, pins });
    expect(() => app.synth()).toThrow(/to a stack with room, 'jobs-1' \(1 job\), with addJob's `stack`/);
  });

  it.each([0, -1, 2.5, Number.NaN])('refuses jobStacks %s', (jobStacks) => {
    expect(() => manyJobsApp([], { jobStacks })).toThrow(
      /jobStacks is number .+; set a whole number of 1 or more, about one per 10 jobs/,
    );
  });

  it('refuses a pinned stack that cannot name a CloudFormation stack', () => {
    expect(() => manyJobsApp(['job-001'], { pins: { 'job-001': 'team_a' } })).toThrow(
      /stack "team_a" cannot name a job stack: 'Reports-team_a' must be a CloudFormation stack name/,
    );
  });

  it('refuses a new secret and an existing one at once', () => {
    expect(() =>
      manyJobsApp([], { effectKeySecretName: 'slotguard/new', existingEffectKeySecret: 'slotguard/old' }),
    ).toThrow(
      /effectKeySecretName "slotguard\/new" and existingEffectKeySecret "slotguard\/old" are both set/,
    );
  });

  it.each([
    [
      'ends like the suffix of a complete ARN',
      'slotguard/reports/key-abc123',
      /ends in a hyphen and 6 characters/,
    ],
    ['has a character Secrets Manager refuses', 'slotguard reports', /is not a Secrets Manager secret name/],
  ])('refuses an effect-key secret name that %s', (_, name, message) => {
    expect(() => manyJobsApp([], { effectKeySecretName: name })).toThrow(message);
    expect(() => manyJobsApp([], { existingEffectKeySecret: name })).toThrow(
      new RegExp(`existingEffectKeySecret .*${message.source}`),
    );
  });

  it('refuses an existing secret by an ARN without the suffix, which its grant would never match', () => {
    expect(() =>
      manyJobsApp(['job-001'], {
        existingEffectKeySecret: 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:slotguard/old-key',
      }),
    ).toThrow(
      /existingEffectKeySecret "arn:aws:secretsmanager:.+:secret:slotguard\/old-key" is not a secret's complete ARN/,
    );
  });

  it('reads an existing secret by its complete ARN and creates none', () => {
    const arn =
      'arn:aws:secretsmanager:eu-west-1:123456789012:secret:SlotguardEffectKeySecretCE5B9701-Qz1Xw2Ev3Rc4-AbC123';
    const { app, slotguard } = manyJobsApp(['job-001', 'job-002'], {
      existingEffectKeySecret: arn,
      jobStacks: 2,
    });
    const assembly = app.synth();
    for (const artifact of assembly.stacks) {
      expect(JSON.stringify(artifact.template)).not.toContain('AWS::SecretsManager::Secret');
    }
    for (const job of slotguard.jobs) {
      expect(secretArnOf(job)).toBe(arn);
      expect(secretReadOf(job)).toBe(arn);
    }
  });
});
