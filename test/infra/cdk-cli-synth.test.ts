import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { offlineEnvironment } from '../helpers/offline-environment.js';
import { REPOSITORY_ROOT } from './fixtures.js';

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
