import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Stack } from 'aws-cdk-lib';
import { describe, expect, it } from 'vitest';
import { locateHandlerEntry } from '../../infra/handler-entry.js';
import { InfraValidationError } from '../../infra/infra-validation-error.js';
import { REPOSITORY_ROOT } from './fixtures.js';

/**
 * A user's project in a temporary directory: `files` written (path → text), and node_modules linked
 * to this repository's so esbuild resolves, unless `withEsbuild` is false.
 */
function project(files: Record<string, string>, withEsbuild = true): string {
  const root = mkdtempSync(join(tmpdir(), 'slotguard-entry-'));
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(root, path, '..'), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  if (withEsbuild) symlinkSync(join(REPOSITORY_ROOT, 'node_modules'), join(root, 'node_modules'));
  return root;
}

const HANDLER = 'export const handler = async () => {};\n';

function refusal(locate: () => unknown): InfraValidationError {
  try {
    locate();
  } catch (error) {
    if (error instanceof InfraValidationError) return error;
    throw error;
  }
  throw new Error('expected an InfraValidationError, but the entry was accepted');
}

describe("ScheduledJob finds a job's handler the way NodejsFunction does", () => {
  it('takes the project root from the nearest lock file above the working directory when none is given', () => {
    const root = project({ 'package-lock.json': '{}', 'src/jobs/report.ts': HANDLER, 'cdk/app.ts': '' });

    const entry = locateHandlerEntry(new Stack(), { entry: 'src/jobs/report.ts', cwd: join(root, 'cdk') });

    expect(entry).toEqual({
      path: join(root, 'src/jobs/report.ts'),
      projectRoot: root,
      lockFile: join(root, 'package-lock.json'),
    });
  });

  it("bundles a yarn or pnpm project with its own lock file, not only npm's", () => {
    for (const lock of ['yarn.lock', 'pnpm-lock.yaml']) {
      const root = project({ [lock]: '', 'handler.mts': HANDLER });
      const entry = locateHandlerEntry(new Stack(), { entry: join(root, 'handler.mts'), cwd: root });
      expect(entry.lockFile).toBe(join(root, lock));
    }
  });

  it('looks for the lock file from the given project root, so the app may run from anywhere', () => {
    const root = project({ 'package-lock.json': '{}', 'handler.ts': HANDLER });

    const entry = locateHandlerEntry(new Stack(), { entry: 'handler.ts', projectRoot: root, cwd: tmpdir() });

    expect(entry.lockFile).toBe(join(root, 'package-lock.json'));
  });

  it('refuses a directory with two lock files instead of guessing which package manager bundles', () => {
    const root = project({ 'package-lock.json': '{}', 'yarn.lock': '', 'handler.ts': HANDLER });

    const error = refusal(() => locateHandlerEntry(new Stack(), { entry: 'handler.ts', cwd: root }));

    expect(error.prop).toBe('depsLockFilePath');
    expect(error.message).toContain('holds more than one lock file (yarn.lock, package-lock.json)');
    expect(error.message).toContain('set depsLockFilePath to the one your package manager uses');
  });

  it('refuses a project with no lock file, naming where it looked', () => {
    const root = mkdtempSync(join(tmpdir(), 'slotguard-entry-'));
    writeFileSync(join(root, 'handler.ts'), HANDLER);

    const error = refusal(() =>
      locateHandlerEntry(new Stack(), { entry: 'handler.ts', projectRoot: root, cwd: root }),
    );

    expect(error.prop).toBe('depsLockFilePath');
    expect(error.message).toContain(
      `no lock file (pnpm-lock.yaml, yarn.lock, bun.lockb, bun.lock, package-lock.json) in "${root}"`,
    );
  });

  it('refuses a depsLockFilePath that is not a file', () => {
    const root = project({ 'handler.ts': HANDLER });

    const error = refusal(() =>
      locateHandlerEntry(new Stack(), { entry: 'handler.ts', depsLockFilePath: 'missing.lock', cwd: root }),
    );

    expect(error.prop).toBe('depsLockFilePath');
    expect(error.message).toContain('depsLockFilePath "missing.lock" is not a file');
  });

  it('refuses a lock file outside the project root, which NodejsFunction cannot bundle from', () => {
    const root = project({ 'package-lock.json': '{}', 'app/handler.ts': HANDLER });

    const error = refusal(() =>
      locateHandlerEntry(new Stack(), { entry: 'handler.ts', projectRoot: join(root, 'app'), cwd: root }),
    );

    expect(error.prop).toBe('depsLockFilePath');
    expect(error.message).toContain(`is not under the project root "${join(root, 'app')}"`);
  });

  it('refuses an entry that is not a JavaScript or TypeScript module', () => {
    const root = project({ 'package-lock.json': '{}', 'handler.py': 'def handler(): pass\n' });

    const error = refusal(() => locateHandlerEntry(new Stack(), { entry: 'handler.py', cwd: root }));

    expect(error.prop).toBe('job.entry');
    expect(error.message).toContain('job.entry "handler.py" is not a JavaScript or TypeScript module');
  });

  it('refuses an absolute entry outside the project root', () => {
    const root = project({ 'package-lock.json': '{}' });
    const elsewhere = project({ 'handler.ts': HANDLER });

    const error = refusal(() =>
      locateHandlerEntry(new Stack(), { entry: join(elsewhere, 'handler.ts'), cwd: root }),
    );

    expect(error.prop).toBe('job.entry');
    expect(error.message).toContain(`is not a file under the project root "${root}"`);
  });

  it('refuses a project without esbuild rather than fall back to Docker', () => {
    const root = project({ 'package-lock.json': '{}', 'handler.ts': HANDLER }, false);

    const error = refusal(() => locateHandlerEntry(new Stack(), { entry: 'handler.ts', cwd: root }));

    expect(error.prop).toBe('projectRoot');
    expect(error.message).toContain(
      `esbuild is not installed under "${root}"; run \`npm install --save-dev esbuild\``,
    );
  });
});
