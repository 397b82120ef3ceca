import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { SlotguardError } from '../../errors.js';
import { migrate, migrationScript, purgeExpired } from './migrate.js';
import { rdsIamPassword } from './postgres-auth.js';
import { createPostgresPool, DEFAULT_SCHEMA } from './postgres-backend.js';
import { assertSchemaName } from './sql.js';

const USAGE = `usage: node --import tsx shared/backends/postgres/cli.ts <command> [options]

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
 * The Postgres backend's operator commands. Returns the exit code.
 * @example await runPostgresCli(['migrate', '--schema', 'slotguard'], process.env)
 */
export async function runPostgresCli(
  argv: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
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
  const schema = values.schema ?? DEFAULT_SCHEMA;
  try {
    assertSchemaName(schema);
    if (command === 'migrate' && values.print) {
      output.out(migrationScript(schema));
      return 0;
    }
    const pool = createPostgresPool({
      ...(env.DATABASE_URL ? { connectionString: env.DATABASE_URL } : {}),
      ...(values.iam ? { password: iamPassword(env) } : {}),
      applicationName: `slotguard-cli-${command}`,
      max: 1,
    });
    try {
      const result =
        command === 'migrate'
          ? await migrate(pool, { schema })
          : await purgeExpired(pool, { schema, batchSize: batchSize(values['batch-size']) });
      output.out(JSON.stringify({ command, schema, ...result }));
      return 0;
    } finally {
      await pool.end();
    }
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
    throw new Error(`--batch-size is ${JSON.stringify(value)}; use a whole number from 1 to 100000`);
  }
  return n;
}

function iamPassword(env: NodeJS.ProcessEnv): () => Promise<string> {
  if (!env.PGHOST || !env.PGUSER) throw new Error('--iam needs PGHOST and PGUSER (and PGPORT if not 5432)');
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
