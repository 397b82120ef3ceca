import { StoreError } from '../shared/errors.js';
import { CliError, count, ExitCode } from './cli-support.js';
import type { CommandContext } from './command.js';
import { loadPostgres } from './postgres-module.js';

/**
 * `postgres migrate` and `postgres purge`: the Postgres backend's maintenance
 * (shared/backends/postgres/cli.ts) on the server in DATABASE_URL, else the PG* variables. Loaded
 * only when run, as `--backend postgres` is, so that without `pg` installed the error says so.
 */
export async function postgresMaintenance(
  ctx: CommandContext,
  command: 'migrate' | 'purge',
): Promise<number> {
  await loadPostgres(`slotguard postgres ${command}`);
  const { runPostgresMaintenance } = await import('../shared/backends/postgres/cli.js');
  const schema = ctx.text('schema');
  const batchSize = ctx.text('batch-size');
  let done: Awaited<ReturnType<typeof runPostgresMaintenance>>;
  try {
    done = await runPostgresMaintenance(
      command,
      {
        ...(schema !== undefined ? { schema } : {}),
        ...(ctx.flag('print') ? { print: true } : {}),
        ...(ctx.flag('iam') ? { iam: true } : {}),
        ...(batchSize !== undefined ? { batchSize } : {}),
      },
      ctx.env,
    );
  } catch (error) {
    // The server did not answer, or refused the credentials or the statement: exit code 3.
    if (!(error instanceof StoreError)) throw error;
    throw new CliError(
      ExitCode.Unreachable,
      `slotguard postgres ${command} failed: ${error.message}. Check DATABASE_URL (or PGHOST, PGPORT, PGDATABASE, ` +
        'PGUSER, PGPASSWORD) and that the user may create the schema and its tables.',
      { cause: error },
    );
  }
  switch (done.kind) {
    case 'script':
      ctx.print(ctx.json ? JSON.stringify({ schema: done.schema, sql: done.sql }, null, 2) : done.sql);
      return ExitCode.Ok;
    case 'migrated': {
      const { schema: migrated, version, applied } = done.result;
      return ctx.done(
        { command, ...done.result },
        applied
          ? `migrated schema ${migrated} to version ${version}.`
          : `schema ${migrated} is at version ${version} already; nothing was changed.`,
      );
    }
    case 'purged':
      return ctx.done(
        { command, schema: done.schema, ...done.result },
        `purged ${count(done.result.slots)} slot rows and ${count(done.result.effects)} effect rows past their ` +
          `retention from schema ${done.schema}.`,
      );
    default:
      return done satisfies never;
  }
}
