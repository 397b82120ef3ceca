import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { JobSpec } from '../shared/job/job-spec.js';
import { CliError, ExitCode, usageError } from './cli-support.js';

/**
 * What the operator CLI reads of a job: the id and schedule of its JobSpec, and the fields that set
 * its windows' deadline and catch-up. A team's catalog holds whole JobSpecs (the ones its CDK app
 * builds ScheduledJobs from); the CLI needs no more than this of them.
 */
export type CatalogJob = Pick<JobSpec, 'id' | 'schedule'> &
  Partial<Pick<JobSpec, 'deadlineMinutes' | 'timeoutSeconds' | 'catchUp'>>;

/** A team's job list as the CLI loaded it, and where from (for every message that names it). */
export interface JobCatalog {
  readonly jobs: readonly CatalogJob[];
  /** `./src/catalog.js (--catalog)`, `functions/catalog.ts (slotguard.config.json)`. */
  readonly source: string;
}

/** The environment variable that names the catalog module when `--catalog` is not given. */
export const CATALOG_ENV = 'SLOTGUARD_CATALOG';

/** The file, in a project's root, that names its catalog module: `{ "catalog": "./src/catalog.js" }`. */
export const CONFIG_FILE = 'slotguard.config.json';

/** Where the catalog module was named, and what its path is relative to. */
interface CatalogReference {
  /** As written: a path, optionally followed by `#exportName`. */
  readonly module: string;
  /** The directory the path is relative to. */
  readonly base: string;
  /** Who named it: `--catalog`, `SLOTGUARD_CATALOG`, `slotguard.config.json`, `package.json "slotguard"`. */
  readonly origin: string;
}

const TYPESCRIPT = /\.[mc]?ts$/;

/**
 * Finds the catalog module, first of:
 * 1. `--catalog MODULE` (`given`), relative to the current directory;
 * 2. SLOTGUARD_CATALOG, relative to the current directory;
 * 3. the project's `slotguard.config.json` (`{ "catalog": MODULE }`), else its package.json's
 *    `"slotguard": { "catalog": MODULE }`, relative to that file. The project is the nearest
 *    directory, from the current one up, that holds either file; a package.json without the field
 *    ends the search there, so a project never picks up a parent's catalog.
 * Undefined when none names one. MODULE is a path, with `#name` to pick one export.
 */
export function findCatalog(
  given: string | undefined,
  env: Readonly<Record<string, string | undefined>>,
  cwd: string,
): CatalogReference | undefined {
  if (given !== undefined) return { module: given, base: cwd, origin: '--catalog' };
  const fromEnv = env[CATALOG_ENV];
  if (fromEnv) return { module: fromEnv, base: cwd, origin: CATALOG_ENV };
  for (let dir = resolve(cwd); ; dir = dirname(dir)) {
    const config = join(dir, CONFIG_FILE);
    if (existsSync(config)) return configReference(config, readJson(config), CONFIG_FILE);
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest)) {
      const field = (readJson(manifest) as { slotguard?: unknown }).slotguard;
      return field === undefined ? undefined : configReference(manifest, field, 'package.json "slotguard"');
    }
    if (dirname(dir) === dir) return undefined;
  }
}

/** Loads the module `reference` names and returns its job list, checked. */
export async function loadCatalog(reference: CatalogReference): Promise<JobCatalog> {
  // `catalog.js#jobs` names an export, unless a file by that whole name exists.
  const whole = existsSync(resolve(reference.base, reference.module));
  const hash = whole ? -1 : reference.module.lastIndexOf('#');
  const file = hash > 0 ? reference.module.slice(0, hash) : reference.module;
  const exportName = hash > 0 ? reference.module.slice(hash + 1) : undefined;
  const path = resolve(reference.base, file);
  const named = `${reference.origin} ${JSON.stringify(reference.module)}`;
  if (!existsSync(path)) {
    throw usageError(
      `${named}: there is no such file (${path}). Name the module that exports your JobSpec[] (the list your CDK ` +
        `app builds ScheduledJobs from), relative to ${reference.base}.`,
    );
  }
  let exports: Record<string, unknown>;
  try {
    exports = (await import(pathToFileURL(path).href)) as Record<string, unknown>;
  } catch (error) {
    if (TYPESCRIPT.test(path) && codeOf(error) === 'ERR_UNKNOWN_FILE_EXTENSION') {
      throw new CliError(
        ExitCode.Usage,
        `${named}: this Node.js (${process.version}) does not load TypeScript. Point it at the compiled JavaScript ` +
          '(what your `tsc` build writes for the catalog), or run the CLI on a Node.js that strips types: 22.18 or ' +
          '23.6 and later do by default, 22.6 and later with NODE_OPTIONS=--experimental-strip-types; the catalog ' +
          "must then import other .ts files by their .ts names ('./jobs.ts'), or only types (`import type`).",
        { cause: error },
      );
    }
    throw new CliError(
      ExitCode.Usage,
      `${named}: loading ${path} failed (${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}); ` +
        'fix the module, or name the one that exports your JobSpec[].',
      { cause: error },
    );
  }
  const source = `${relativePath(reference, path)}${exportName ? `#${exportName}` : ''} (${reference.origin})`;
  const jobs = pickJobList(exports, exportName, source);
  checkJobs(jobs, source);
  return { jobs, source };
}

/** The job `jobId` of the catalog, or a usage error listing the ones there are. */
export function catalogJob(catalog: JobCatalog, jobId: string | undefined): CatalogJob {
  const ids = catalog.jobs.map((job) => job.id).join(', ');
  if (!jobId) throw usageError(`--job is missing; the jobs in ${catalog.source} are ${ids}`);
  const job = catalog.jobs.find((candidate) => candidate.id === jobId);
  if (!job) {
    throw usageError(
      `there is no job ${JSON.stringify(jobId)} in ${catalog.source}; the jobs are ${ids}. ` +
        'Check --job, or point --catalog at the catalog that has it.',
    );
  }
  return job;
}

function configReference(file: string, config: unknown, origin: string): CatalogReference {
  const catalog = (config as { catalog?: unknown } | null)?.catalog;
  const unknown =
    config !== null && typeof config === 'object' ? Object.keys(config).filter((k) => k !== 'catalog') : [];
  if (typeof catalog !== 'string' || catalog === '' || unknown.length > 0) {
    throw usageError(
      `${origin} in ${file} is ${JSON.stringify(config)}; the CLI reads one field from it, "catalog": the ` +
        'module that exports your JobSpec[], relative to that file, e.g. { "catalog": "./dist/catalog.js" }',
    );
  }
  return { module: catalog, base: dirname(file), origin };
}

function readJson(file: string): unknown {
  try {
    return JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    throw usageError(`${file} is not valid JSON (${(error as Error).message}); fix it`);
  }
}

/**
 * The export holding the job list: the one named after `#`, else the default export, else the one
 * named export that is a list of objects with an `id`.
 */
function pickJobList(exports: Record<string, unknown>, exportName: string | undefined, source: string) {
  if (exportName !== undefined) {
    const value = exports[exportName];
    if (!isJobList(value)) {
      throw usageError(
        `${source}: its export ${JSON.stringify(exportName)} is ${describe(value)}, not a list of JobSpecs; ` +
          `its exports are ${describeExports(exports)}`,
      );
    }
    return value;
  }
  if (isJobList(exports.default)) return exports.default;
  const lists = Object.entries(exports).filter(([name, value]) => name !== 'default' && isJobList(value));
  if (lists.length === 1) return lists[0]![1] as readonly Record<string, unknown>[];
  if (lists.length === 0) {
    throw usageError(
      `${source} exports no job list: export your JobSpec[] (objects with an id and a schedule) as its default ` +
        `export or as one named export, e.g. export const jobCatalog = [...]; its exports are ${describeExports(exports)}`,
    );
  }
  const names = lists.map(([name]) => name);
  throw usageError(
    `${source} exports ${names.length} job lists (${names.join(', ')}); name one after #, e.g. --catalog '<module>#${names[0]}'`,
  );
}

function isJobList(value: unknown): value is readonly Record<string, unknown>[] {
  return (
    Array.isArray(value) &&
    value.every((job) => job !== null && typeof job === 'object' && typeof job.id === 'string')
  );
}

/** Every entry has what the CLI reads (an id once, a schedule expression); the list is not empty. */
function checkJobs(jobs: readonly Record<string, unknown>[], source: string): asserts jobs is CatalogJob[] {
  if (jobs.length === 0) throw usageError(`${source} exports an empty job list; the CLI needs your JobSpecs`);
  const seen = new Set<string>();
  for (const [i, job] of jobs.entries()) {
    const schedule = job.schedule as { expression?: unknown; timeZone?: unknown } | undefined;
    const timeZone = schedule?.timeZone;
    if (
      typeof schedule?.expression !== 'string' ||
      (timeZone !== undefined && typeof timeZone !== 'string')
    ) {
      throw usageError(
        `${source}: job ${JSON.stringify(job.id)} (entry ${i}) has schedule ${JSON.stringify(schedule)}; a JobSpec's ` +
          "schedule is { expression: 'cron(0 9 ? * MON *)', timeZone: 'Europe/Moscow' }",
      );
    }
    if (seen.has(job.id as string)) {
      throw usageError(`${source} lists job ${JSON.stringify(job.id)} twice; a job id names one job`);
    }
    seen.add(job.id as string);
  }
}

function relativePath(reference: CatalogReference, path: string): string {
  const shown = relative(reference.base, path);
  return shown.startsWith('..') ? path : `./${shown}`;
}

function describe(value: unknown): string {
  if (value === undefined) return 'missing';
  if (Array.isArray(value)) return isJobList(value) ? 'a job list' : 'a list of something else';
  return value === null ? 'null' : `a ${typeof value}`;
}

function describeExports(exports: Record<string, unknown>): string {
  const entries = Object.entries(exports);
  if (entries.length === 0) return 'none';
  return entries.map(([name, value]) => `${name} (${describe(value).replace(/^an? /, '')})`).join(', ');
}

function codeOf(error: unknown): unknown {
  return error !== null && typeof error === 'object' ? (error as { code?: unknown }).code : undefined;
}
