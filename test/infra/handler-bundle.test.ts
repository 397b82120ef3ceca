import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { POSTGRES_RUNTIME_MODULE } from '../../infra/postgres-claims.js';
import { bundledModules, bundleHandler, packageOf } from '../helpers/handler-bundle.js';
import { REPOSITORY_ROOT } from './fixtures.js';

const WEEKLY_REPORT = join(REPOSITORY_ROOT, 'functions/weekly-report/handler.ts');

/**
 * Modules of slotguard a job's function never runs, by path prefix, and where each one runs
 * instead. A job handler imports `slotguard`, whose index exports all of them: only an import
 * structure that lets esbuild leave them out keeps them out.
 */
const NEVER_IN_A_JOB_FUNCTION: Readonly<Record<string, string>> = {
  'cli/': 'the operator CLI',
  'local/': 'the local runner',
  'infra/': 'the CDK constructs, at synth',
  'bench/': 'the benchmarks',
  'shared/testing/': "slotguard/testing, in users' tests",
  'shared/backends/memory/': 'the in-memory backend (tests, the simulation, the local runner)',
  'shared/backends/postgres/': 'the Postgres backend, which PostgresClaims injects into its own functions',
  'shared/backends/dynamodb/dynamodb-operator-store.ts': "the operator CLI's writes",
  'shared/watchdog/': "the watchdog's own function",
  'shared/schedule/': 'the schedule checks (cron rules, the time-zone table), at synth and in the CLI',
  'shared/continuation/in-process-': "the local runner's work queue",
  'shared/effects/smtp-email-sender.ts': 'jobs that send through SMTP (the weekly report sends through SES)',
};

/**
 * The packages a DynamoDB job's bundle may carry: the Powertools logger and metrics and what they need. The AWS
 * SDK is the Lambda runtime's, so none of @aws-sdk/* or @smithy/* may be bundled either.
 */
const PACKAGES_IN_A_JOB_FUNCTION = [
  '@aws-lambda-powertools/commons',
  '@aws-lambda-powertools/logger',
  '@aws-lambda-powertools/metrics',
  '@aws/lambda-invoke-store',
];

/** Each bundled module that a job's function should not carry, with where it belongs. */
function misplacedModules(modules: readonly { readonly path: string }[]): string[] {
  return modules.flatMap(({ path }) => {
    const pkg = packageOf(path);
    if (pkg) return PACKAGES_IN_A_JOB_FUNCTION.includes(pkg) ? [] : [`${path}: package ${pkg}`];
    const prefix = Object.keys(NEVER_IN_A_JOB_FUNCTION).find((p) => path.startsWith(p));
    return prefix ? [`${path}: ${NEVER_IN_A_JOB_FUNCTION[prefix]}`] : [];
  });
}

describe("a job function's bundle carries the runtime it runs and nothing else", () => {
  it('does not bundle the CLI, the operator store, the schedule checks, other backends or packages beyond the Powertools logger and metrics into the weekly report', async () => {
    const { metafile } = await bundleHandler(WEEKLY_REPORT);
    const modules = bundledModules(metafile);

    expect(misplacedModules(modules)).toEqual([]);
    // The runtime itself is there: the check above looked at a real bundle.
    expect(modules.map((m) => m.path)).toEqual(
      expect.arrayContaining([
        'shared/job/run-slot.ts',
        'shared/backends/dynamodb/dynamodb-claim-store.ts',
        'shared/effects/ses-email-sender.ts',
        'node_modules/@aws-lambda-powertools/logger/lib/esm/Logger.js',
      ]),
    );
  });

  it('leaves the AWS SDK to the runtime: every client is an import of the bundle, none of its code is inside', async () => {
    const { code, metafile } = await bundleHandler(WEEKLY_REPORT);
    const imported = Object.values(metafile.outputs)
      .flatMap((output) => output.imports)
      .filter((i) => i.external && i.path.startsWith('@aws-sdk/'))
      .map((i) => i.path);

    expect([...new Set(imported)].sort()).toEqual([
      '@aws-sdk/client-dynamodb',
      '@aws-sdk/client-secrets-manager',
      '@aws-sdk/client-sesv2',
      '@aws-sdk/client-sqs',
    ]);
    expect(bundledModules(metafile).filter((m) => /@aws-sdk\/|@smithy\//.test(m.path))).toEqual([]);
    expect(code).not.toContain('smithy');
  });

  it('names what it finds when a bundle does carry such modules (the Postgres runtime, slotguard/testing)', async () => {
    const postgres = bundledModules(
      (await bundleHandler(WEEKLY_REPORT, { inject: [POSTGRES_RUNTIME_MODULE] })).metafile,
    );
    const testing = bundledModules(
      (await bundleHandler(join(REPOSITORY_ROOT, 'shared/testing/index.ts'))).metafile,
    );

    expect(misplacedModules(postgres)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^shared\/backends\/postgres\/.*: the Postgres backend/),
        expect.stringMatching(/^node_modules\/pg\/.*: package pg$/),
      ]),
    );
    expect(misplacedModules(testing)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^shared\/testing\/.*: slotguard\/testing/),
        expect.stringMatching(/^shared\/backends\/memory\/.*: the in-memory backend/),
      ]),
    );
  });
});
