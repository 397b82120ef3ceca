import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { App, Stack } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import type { IConstruct } from 'constructs';
import type * as esbuild from 'esbuild';
import { beforeAll, describe, expect, it } from 'vitest';
import { ClaimsTable } from '../../infra/claims-table.js';
import { POSTGRES_RUNTIME_MODULE, PostgresClaims, PostgresEndpoint } from '../../infra/postgres-claims.js';
import { ScheduledJob } from '../../infra/scheduled-job.js';
import { resolvedEnvironment } from '../helpers/deployed-environment.js';
import { bundleHandler } from '../helpers/handler-bundle.js';
import { jobSpec, REPOSITORY_ROOT } from './fixtures.js';

const HANDLER = join(REPOSITORY_ROOT, 'functions/weekly-report/handler.ts');
const SES = { identity: 'example.com', fromAddress: 'reports@example.com' };

/**
 * Strings only pg's own packages contain, which survive minification (module names do not: a
 * minified bundle never contains "pg-protocol" or "pg-pool", with or without them).
 */
const PG_CODE = {
  pg: 'Client has already been connected',
  'pg-pool': 'Cannot use a pool after calling end on the pool',
  'pg-protocol': 'Unknown authenticationOk message type',
} as const;

/** The packages of the pg driver family among a bundle's inputs. */
function pgPackages(metafile: esbuild.Metafile): string[] {
  const names = Object.keys(metafile.inputs).flatMap((input) => {
    const name = /node_modules\/((?:pg|pg-[a-z-]+|pgpass|postgres-[a-z]+))\//.exec(input)?.[1];
    return name ? [name] : [];
  });
  return [...new Set(names)].sort();
}

/** The weekly report's handler bundled as ScheduledJob bundles it; `inject` is what a claims backend adds. */
async function bundleWeeklyReport(inject: string[] = []) {
  const started = performance.now();
  const bundle = await bundleHandler(HANDLER, { inject });
  return { ...bundle, ms: performance.now() - started };
}

describe("a DynamoDB-only handler's bundle never carries pg", () => {
  it('bundles the weekly report (ClaimsTable) with no module of pg, pg-pool or pg-protocol and none of their code', async () => {
    const dynamo = await bundleWeeklyReport();
    console.info(
      `weekly-report, DynamoDB: ${dynamo.bytes} bytes minified, bundled in ${Math.round(dynamo.ms)} ms`,
    );

    expect(pgPackages(dynamo.metafile)).toEqual([]);
    for (const marker of Object.values(PG_CODE)) expect(dynamo.code).not.toContain(marker);
    expect(dynamo.code).not.toContain('pg-protocol');
    expect(dynamo.code).not.toContain('pg-pool');
    // Nor the Postgres half of the runtime, which would bring them.
    expect(
      Object.keys(dynamo.metafile.inputs).filter((input) => input.includes('backends/postgres/')),
    ).toEqual([]);
    expect(dynamo.code).not.toContain('SLOTGUARD_PG_HOST');
    expect(dynamo.bytes).toBeLessThan(150_000);
  });

  it('bundles the same handler with pg when PostgresClaims injects the Postgres runtime (so the markers above are real)', async () => {
    const dynamo = await bundleWeeklyReport();
    const postgres = await bundleWeeklyReport([POSTGRES_RUNTIME_MODULE]);
    console.info(
      `weekly-report, Postgres: ${postgres.bytes} bytes minified (+${postgres.bytes - dynamo.bytes} for the Postgres backend and pg)`,
    );

    expect(pgPackages(postgres.metafile)).toEqual(expect.arrayContaining(['pg', 'pg-pool', 'pg-protocol']));
    for (const marker of Object.values(PG_CODE)) expect(postgres.code).toContain(marker);
    expect(postgres.bytes).toBeGreaterThan(dynamo.bytes + 50_000);
  });
});

describe('NodejsFunction bundles, as ScheduledJob configures it', () => {
  interface Bundled {
    readonly code: string;
    readonly path: string;
    readonly environment: Record<string, string>;
  }
  let dynamo: Bundled;
  let postgres: Bundled;
  let postgresRecorder: Bundled;
  let synthMs: number;

  /**
   * Synthesises `build`'s stack with bundling and returns the bundle and environment of the one job
   * function and of the stack's SES event recorder.
   */
  function synthesise(build: (stack: Stack) => ScheduledJob): { job: Bundled; recorder: Bundled } {
    const app = new App({ outdir: mkdtempSync(join(tmpdir(), 'slotguard-pg-bundle-')) });
    const stack = new Stack(app, 'Bundles');
    const job = build(stack);
    const assembly = app.synth();
    const template = assembly.getStackArtifact(stack.artifactId).template;
    const bundled = (construct: IConstruct): Bundled => {
      const logicalId = stack.resolve(stack.getLogicalId(construct.node.defaultChild as never)) as string;
      const fn = template.Resources[logicalId].Properties;
      const path = join(
        assembly.directory,
        `asset.${String(fn.Code.S3Key).replace(/\.zip$/, '')}`,
        'index.mjs',
      );
      const variables = fn.Environment.Variables as Record<string, unknown>;
      return { code: readFileSync(path, 'utf8'), path, environment: resolvedEnvironment(variables) };
    };
    return { job: bundled(job.function), recorder: bundled(job.sesEventRecorder!.function) };
  }

  beforeAll(() => {
    // If bundling ever fell back to Docker, it would run this command and fail.
    process.env.CDK_DOCKER = join(tmpdir(), 'slotguard-docker-must-not-run');
    const started = performance.now();
    ({ job: dynamo } = synthesise(
      (stack) =>
        new ScheduledJob(stack, 'job', {
          job: jobSpec({ entry: 'functions/weekly-report/handler.ts' }),
          claims: new ClaimsTable(stack, 'Claims'),
          ses: SES,
          projectRoot: REPOSITORY_ROOT,
        }),
    ));
    ({ job: postgres, recorder: postgresRecorder } = synthesise((stack) => {
      const vpc = ec2.Vpc.fromVpcAttributes(stack, 'Vpc', {
        vpcId: 'vpc-0123456789abcdef0',
        availabilityZones: ['eu-west-1a'],
        privateSubnetIds: ['subnet-0123456789abcdef0'],
      });
      const claims = new PostgresClaims(stack, 'Claims', {
        endpoint: PostgresEndpoint.fromHost({
          hostname: 'db.internal.example',
          securityGroups: [ec2.SecurityGroup.fromSecurityGroupId(stack, 'DbSg', 'sg-0123456789abcdef0')],
        }),
        databaseName: 'app',
        secret: secretsmanager.Secret.fromSecretCompleteArn(
          stack,
          'UserSecret',
          'arn:aws:secretsmanager:eu-west-1:123456789012:secret:slotguard-AbCdEf',
        ),
        vpc,
      });
      return new ScheduledJob(stack, 'job', {
        job: jobSpec({ entry: 'functions/weekly-report/handler.ts' }),
        claims,
        ses: SES,
        projectRoot: REPOSITORY_ROOT,
      });
    }));
    synthMs = performance.now() - started;
    console.info(`two stacks synthesised with bundling in ${Math.round(synthMs)} ms`);
  });

  /** The lines of Node's stderr that are not the minified source it quotes around an error. */
  function errorLines(stderr: string): string {
    return stderr
      .split('\n')
      .filter((line) => line.length < 500)
      .join('\n');
  }

  /** Imports a bundle in a fresh Node process with `env`, as Lambda's init would. */
  function load(bundle: Bundled, env: Record<string, string>) {
    const dir = mkdtempSync(join(tmpdir(), 'slotguard-pg-load-'));
    // Lambda's runtime provides @aws-sdk/*; here the repository's node_modules stands in for it.
    symlinkSync(join(REPOSITORY_ROOT, 'node_modules'), join(dir, 'node_modules'));
    copyFileSync(bundle.path, join(dir, 'index.mjs'));
    writeFileSync(join(dir, 'package.json'), '{"type":"module"}');
    return spawnSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const m = await import(${JSON.stringify(join(dir, 'index.mjs'))}); console.log(typeof m.handler);`,
      ],
      { env: { PATH: process.env.PATH, AWS_REGION: 'eu-west-1', ...env }, encoding: 'utf8' },
    );
  }

  it("gives the PostgresClaims job's function pg and the ClaimsTable job's none", () => {
    for (const marker of Object.values(PG_CODE)) {
      expect(postgres.code).toContain(marker);
      expect(dynamo.code).not.toContain(marker);
    }
    console.info(
      `NodejsFunction bundles: DynamoDB ${Buffer.byteLength(dynamo.code)} bytes, Postgres ${Buffer.byteLength(postgres.code)} bytes`,
    );
  });

  it.each([
    ['job', () => postgres],
    ['SES event recorder', () => postgresRecorder],
  ])(
    'loads the Postgres %s bundle with its environment: the injected module registered the backend before the handler was built',
    (_, bundle) => {
      // The runtime's CA bundle exists only in Lambda; Node would warn that it cannot load it.
      const { NODE_EXTRA_CA_CERTS: _ca, ...environment } = bundle().environment;
      expect(environment.SLOTGUARD_BACKEND).toBe('postgres');
      for (const marker of Object.values(PG_CODE)) expect(bundle().code).toContain(marker);

      const loaded = load(bundle(), environment);

      expect(loaded.status, errorLines(loaded.stderr)).toBe(0);
      expect(loaded.stdout.trim()).toBe('function');
    },
  );

  it('refuses, at cold start and with the fix, a DynamoDB bundle deployed with SLOTGUARD_BACKEND=postgres', () => {
    const loaded = load(dynamo, { ...dynamo.environment, SLOTGUARD_BACKEND: 'postgres' });

    expect(loaded.status).not.toBe(0);
    expect(errorLines(loaded.stderr)).toContain(
      'SLOTGUARD_BACKEND is "postgres" but this bundle does not include the postgres backend; deploy the job with PostgresClaims',
    );
  });
});
