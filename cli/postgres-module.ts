import { CliError, ExitCode } from './cli-support.js';

/** slotguard's Postgres backend, the `slotguard/postgres` entry. */
export type PostgresModule = typeof import('../shared/backends/postgres/index.js');

/**
 * Loads the Postgres backend for `purpose` (`--backend postgres`, `postgres migrate`), only when a
 * command asks for it: `pg` is an optional peer dependency, so the DynamoDB commands never load it,
 * and without it this says what to install instead of Node's "cannot find package".
 */
export async function loadPostgres(purpose: string): Promise<PostgresModule> {
  try {
    return await import('../shared/backends/postgres/index.js');
  } catch (error) {
    if (isMissingPg(error)) {
      throw new CliError(
        ExitCode.Usage,
        `${purpose} needs the pg package, which slotguard leaves to you (an optional peer dependency) and which ` +
          'is not installed here; install it next to slotguard (npm install pg) and run this again. Nothing was ' +
          'read or written.',
        { cause: error },
      );
    }
    throw error;
  }
}

/** Node's ERR_MODULE_NOT_FOUND for the `pg` package itself, not for a module pg imports. */
function isMissingPg(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  return code === 'ERR_MODULE_NOT_FOUND' && typeof message === 'string' && /package 'pg'/.test(message);
}
