import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPOSITORY_ROOT } from './fixtures.js';

/** The environment of a machine with no AWS credentials and no instance metadata to fall back on. */
function offlineEnvironment(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const name of Object.keys(env)) {
    if (/^AWS_/.test(name) || name === 'CDK_DOCKER') delete env[name];
  }
  return {
    ...env,
    AWS_EC2_METADATA_DISABLED: 'true',
    // Credential lookups see empty files, not the developer's ~/.aws.
    AWS_CONFIG_FILE: join(tmpdir(), 'slotguard-no-aws-config'),
    AWS_SHARED_CREDENTIALS_FILE: join(tmpdir(), 'slotguard-no-aws-credentials'),
    CDK_DISABLE_VERSION_CHECK: '1',
    CDK_DISABLE_CLI_TELEMETRY: 'true',
    // Docker must never be needed: bundling uses the local esbuild.
    CDK_DOCKER: join(tmpdir(), 'slotguard-docker-must-not-run'),
  };
}

describe('cdk synth through the CLI', () => {
  // The one CLI run of the suite: slow (a fresh Node, tsx, bundling), so everything else synthesises in-process.
  it('synthesises the example app offline, with no AWS credentials, as `npm run synth` does', () => {
    const outdir = mkdtempSync(join(tmpdir(), 'slotguard-cli-'));
    const started = performance.now();
    const result = spawnSync('npx', ['cdk', 'synth', '--quiet', '-o', outdir], {
      cwd: REPOSITORY_ROOT,
      env: offlineEnvironment(),
      encoding: 'utf8',
      timeout: 120_000,
    });
    console.info(`cdk synth (CLI) took ${Math.round(performance.now() - started)} ms`);
    expect(result.status, `${result.stdout}\n${result.stderr}`).toBe(0);
    const templatePath = join(outdir, 'Slotguard.template.json');
    expect(existsSync(templatePath)).toBe(true);
    const template = JSON.parse(readFileSync(templatePath, 'utf8'));
    const schedules = Object.values(template.Resources).filter(
      (r) => (r as { Type: string }).Type === 'AWS::Scheduler::Schedule',
    );
    // Each job's own schedule and its watchdog schedule.
    expect(schedules).toHaveLength(4);
  }, 150_000);
});
