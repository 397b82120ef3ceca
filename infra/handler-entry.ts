import { existsSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, isAbsolute, join, relative, resolve } from 'node:path';
import type { IConstruct } from 'constructs';
import { describe } from '../shared/slot/slot.js';
import { InfraValidationError } from './infra-validation-error.js';

/** Lock files NodejsFunction recognises, in the order it lists them. */
const LOCK_FILES = ['pnpm-lock.yaml', 'yarn.lock', 'bun.lockb', 'bun.lock', 'package-lock.json'] as const;

/** The module extensions NodejsFunction bundles. */
const ENTRY_EXTENSION = /\.(jsx?|tsx?|cjs|cts|mjs|mts)$/;

/** Where a job's handler is and what NodejsFunction bundles it with. */
export interface HandlerEntry {
  /** The handler module, absolute. */
  readonly path: string;
  /** The directory esbuild runs in; holds the lock file and node_modules. */
  readonly projectRoot: string;
  /** The lock file, absolute, under `projectRoot`. */
  readonly lockFile: string;
}

/** Where to look for a job's handler; each field as ScheduledJobProps documents it. */
export interface HandlerEntryOptions {
  /** The handler module: absolute, or relative to the project root. */
  readonly entry: string;
  readonly projectRoot?: string | undefined;
  readonly depsLockFilePath?: string | undefined;
  /** Where a lock file is looked for when neither a project root nor a lock file is given. */
  readonly cwd: string;
}

/**
 * Finds a job's handler, its project root and its lock file the way NodejsFunction finds them, and
 * checks at synth time, with a message that names the value and the fix, what NodejsFunction would
 * otherwise report later or not at all:
 *
 * - the lock file is `depsLockFilePath`, else the nearest pnpm, yarn, bun or npm lock file from the
 *   project root (or, with no project root given, from the working directory) upwards, and exactly
 *   one in its directory;
 * - the project root defaults to the lock file's directory, and the lock file must be under it;
 * - the entry is absolute or relative to the project root, a JavaScript or TypeScript module, a file
 *   under the project root;
 * - esbuild is installed for the project (slotguard never bundles in Docker).
 */
export function locateHandlerEntry(scope: IConstruct, options: HandlerEntryOptions): HandlerEntry {
  const givenRoot = options.projectRoot === undefined ? undefined : resolve(options.cwd, options.projectRoot);
  const lockFile = findLockFile(scope, options.depsLockFilePath, givenRoot ?? options.cwd, options.cwd);
  const projectRoot = givenRoot ?? dirname(lockFile);
  if (escapes(projectRoot, lockFile)) {
    throw new InfraValidationError(
      scope,
      'depsLockFilePath',
      `the lock file ${JSON.stringify(lockFile)} is not under the project root ${JSON.stringify(projectRoot)}; ` +
        'set projectRoot to the directory that holds it (NodejsFunction bundles from there)',
    );
  }
  const entry = options.entry;
  const path = isAbsolute(entry) ? entry : join(projectRoot, entry);
  if (!ENTRY_EXTENSION.test(path)) {
    throw new InfraValidationError(
      scope,
      'job.entry',
      `job.entry ${describe(entry)} is not a JavaScript or TypeScript module; give the handler's .ts, .js, .mts or ` +
        '.mjs file (one that exports `handler`)',
    );
  }
  if (escapes(projectRoot, path) || !isFile(path)) {
    throw new InfraValidationError(
      scope,
      'job.entry',
      `job.entry ${describe(entry)} is not a file under the project root ${JSON.stringify(projectRoot)}; ` +
        'give the handler module relative to the project root (or absolute), or set projectRoot',
    );
  }
  try {
    createRequire(join(projectRoot, 'package.json')).resolve('esbuild');
  } catch (cause) {
    throw new InfraValidationError(
      scope,
      'projectRoot',
      `esbuild is not installed under ${JSON.stringify(projectRoot)}; run \`npm install --save-dev esbuild\` ` +
        '(slotguard bundles with the local esbuild, never in Docker)',
      { cause },
    );
  }
  return { path, projectRoot, lockFile };
}

function findLockFile(scope: IConstruct, given: string | undefined, from: string, cwd: string): string {
  if (given !== undefined) {
    const lockFile = resolve(cwd, given);
    if (!isFile(lockFile)) {
      throw new InfraValidationError(
        scope,
        'depsLockFilePath',
        `depsLockFilePath ${describe(given)} is not a file; give the project's package-lock.json, yarn.lock, ` +
          'pnpm-lock.yaml or bun.lock, or leave it unset to find the nearest one',
      );
    }
    return lockFile;
  }
  for (let directory = resolve(from); ; directory = dirname(directory)) {
    const found = LOCK_FILES.map((name) => join(directory, name)).filter(isFile);
    if (found.length > 1) {
      throw new InfraValidationError(
        scope,
        'depsLockFilePath',
        `${directory} holds more than one lock file (${found.map((f) => f.slice(directory.length + 1)).join(', ')}); ` +
          'set depsLockFilePath to the one your package manager uses',
      );
    }
    if (found[0]) return found[0];
    if (dirname(directory) === directory) break;
  }
  throw new InfraValidationError(
    scope,
    'depsLockFilePath',
    `no lock file (${LOCK_FILES.join(', ')}) in ${JSON.stringify(from)} or above it; install the project's ` +
      'dependencies (npm install writes package-lock.json), or set projectRoot or depsLockFilePath',
  );
}

function escapes(root: string, path: string): boolean {
  const fromRoot = relative(root, path);
  return fromRoot.startsWith('..') || isAbsolute(fromRoot);
}

function isFile(path: string): boolean {
  return existsSync(path) && statSync(path).isFile();
}
