import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { ConfigurationError, SlotguardError } from '../../errors.js';
import { type MigrateResult, migrate, migrationScript, type PurgeResult, purgeExpired } from './migrate.js';
import { rdsIamPassword } from './postgres-auth.js';
import { createPostgresPool, DEFAULT_SCHEMA } from './postgres-backend.js';
import { assertSchemaName } from './sql.js';

const USAGE = `usage: slotguard postgres <command> [options]

commands:
  migrate   create slotguard's tables in the schema, or do nothing if they exist
  purge     delete slot and effect rows past their retention (run daily)

options:
  --schema NAME        the schema (default "${DEFAULT_SCHEMA}")
  --print              migrate: print the SQL instead of running it
  --iam                sign an RDS IAM token for PGUSER at PGHOST:PGPORT instead of a password
  --batch-size N       purge: rows per statement (default 5000)

The connection comes from DATABASE_URL, else the PG* variables (PGHOST, PGPORT, PGDATABASE, PGUSER,
PGPASSWORD, PGSSLMODE).`;

/** The Postgres backend's maintenance commands: `slotguard postgres migrate` and `slotguard postgres purge`. */
export type PostgresMaintenanceCommand = 'migrate' | 'purge';

/** The options of the maintenance commands, as given on the command line. */
export interface PostgresMaintenanceOptions {
  /** @default DEFAULT_SCHEMA ('slotguard') */
  readonly schema?: string;
  /** migrate: return the migration's SQL for review instead of running it; connects to nothing. @default false */
  readonly print?: boolean;
  /** Sign an RDS IAM token for PGUSER at PGHOST:PGPORT instead of a password. @default false */
  readonly iam?: boolean;
  /** purge: rows per statement, a whole number from 1 to 100000. @default '5000' */
  readonly batchSize?: string;
}

/** What a maintenance command did. */
export type PostgresMaintenanceResult =
  | { readonly kind: 'script'; readonly schema: string; readonly sql: string }
  | { readonly kind: 'migrated'; readonly result: MigrateResult }
  | { readonly kind: 'purged'; readonly schema: string; readonly result: PurgeResult };

/**
 * Runs one maintenance command on the server in DATABASE_URL (else the PG* variables), on a
 * one-connection pool named `slotguard-cli-<command>`. Throws a ConfigurationError for bad input
 * (a schema name, a batch size, --iam without PGHOST), and what migrate or purgeExpired throw.
 * @example await runPostgresMaintenance('migrate', { schema: 'slotguard' }, process.env)
 */
export async function runPostgresMaintenance(
  command: PostgresMaintenanceCommand,
  options: PostgresMaintenanceOptions,
  env: Readonly<Record<string, string | undefined>>,
): Promise<PostgresMaintenanceResult> {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  assertSchemaName(schema);
  if (command === 'migrate' && options.print) return { kind: 'script', schema, sql: migrationScript(schema) };
  const rows = command === 'purge' ? batchSize(options.batchSize) : undefined;
  const pool = createPostgresPool({
    ...(env.DATABASE_URL ? { connectionString: env.DATABASE_URL } : {}),
    ...(options.iam ? { password: iamPassword(env) } : {}),
    applicationName: `slotguard-cli-${command}`,
    max: 1,
  });
  try {
    if (command === 'migrate') return { kind: 'migrated', result: await migrate(pool, { schema }) };
    return { kind: 'purged', schema, result: await purgeExpired(pool, { schema, batchSize: rows }) };
  } finally {
    await pool.end();
  }
}

/** What the CLI writes to; process.stdout/stderr by default. */
export interface CliOutput {
  out(line: string): void;
  err(line: string): void;
}

const processOutput: CliOutput = {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
};

/**
 * The maintenance commands for a program that runs them itself, with their arguments as
 * `slotguard postgres` takes them: prints the migration script, or one JSON line of what was done.
 * Returns the exit code: 0, 1 when the command failed, 2 for bad usage. Operators run
 * `slotguard postgres migrate|purge` (cli/postgres-commands.ts).
 * @example await runPostgresCli(['migrate', '--schema', 'slotguard'], process.env)
 */
export async function runPostgresCli(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>> = process.env,
  output: CliOutput = processOutput,
): Promise<number> {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(argv);
  } catch (error) {
    output.err(`${error instanceof Error ? error.message : String(error)}\n\n${USAGE}`);
    return 2;
  }
  const { command, values } = parsed;
  try {
    const done = await runPostgresMaintenance(
      command,
      {
        ...(values.schema !== undefined ? { schema: values.schema } : {}),
        ...(values.print ? { print: true } : {}),
        ...(values.iam ? { iam: true } : {}),
        ...(values['batch-size'] !== undefined ? { batchSize: values['batch-size'] } : {}),
      },
      env,
    );
    output.out(
      done.kind === 'script'
        ? done.sql
        : JSON.stringify({
            command,
            ...(done.kind === 'purged' ? { schema: done.schema } : {}),
            ...done.result,
          }),
    );
    return 0;
  } catch (error) {
    if (!(error instanceof SlotguardError) && !(error instanceof Error)) throw error;
    output.err(`${command} failed: ${error.message}`);
    return 1;
  }
}

function parse(argv: readonly string[]) {
  const { positionals, values } = parseArgs({
    args: [...argv],
    allowPositionals: true,
    options: {
      schema: { type: 'string' },
      print: { type: 'boolean' },
      iam: { type: 'boolean' },
      'batch-size': { type: 'string' },
    },
  });
  const command = positionals[0];
  if (positionals.length !== 1 || (command !== 'migrate' && command !== 'purge')) {
    throw new Error(`expected one command, migrate or purge; got ${JSON.stringify(positionals)}`);
  }
  return { command, values } as const;
}

function batchSize(value: string | undefined): number {
  const n = value === undefined ? 5_000 : Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 100_000) {
    throw new ConfigurationError(
      'batch-size',
      `--batch-size is ${JSON.stringify(value)}; use a whole number from 1 to 100000`,
    );
  }
  return n;
}

function iamPassword(env: Readonly<Record<string, string | undefined>>): () => Promise<string> {
  if (!env.PGHOST || !env.PGUSER) {
    throw new ConfigurationError(
      'iam',
      `--iam needs PGHOST and PGUSER (and PGPORT if not 5432); PGHOST is ${JSON.stringify(env.PGHOST ?? null)}, ` +
        `PGUSER ${JSON.stringify(env.PGUSER ?? null)}: set them to the RDS endpoint and the IAM database user`,
    );
  }
  return rdsIamPassword({
    hostname: env.PGHOST,
    username: env.PGUSER,
    port: Number(env.PGPORT ?? 5432),
    ...(env.AWS_REGION ? { region: env.AWS_REGION } : {}),
  });
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = await runPostgresCli(process.argv.slice(2));
}
