import { type ChildProcess, spawn } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Claim } from '../../shared/slot/ports.js';

/**
 * A replica reduced to one call: marks one effect of a claim done through the Postgres backend, in
 * a process of its own so a test can stop it (SIGSTOP) mid-call, and prints how the call ended.
 * Run as a script (`node --import tsx test/helpers/postgres-mark-process.ts`) with DATABASE_URL,
 * SCHEMA, APPLICATION_NAME, DEADLINE_MS, CLAIM (JSON) and KEY; it prints one line,
 * `result {"ok":true}` or `result {"ok":false,"error":…,"mayHaveCommitted":…}`, and exits.
 */

/** How the child's markDone ended. */
export type MarkResult =
  | { readonly ok: true }
  | { readonly ok: false; readonly error: string; readonly mayHaveCommitted?: boolean };

/** The parent's handle on the child. */
export interface MarkProcess {
  readonly process: ChildProcess;
  /** Resolves with the child's `result` line once it has exited. */
  readonly result: Promise<MarkResult>;
}

/** What the child connects to and marks. */
export interface MarkProcessOptions {
  readonly connectionString: string;
  readonly schema: string;
  /** Its sessions' application_name, to find them in pg_stat_activity. */
  readonly applicationName: string;
  /** The backend's client-side deadline (timeouts.deadlineMs). */
  readonly deadlineMs: number;
  readonly claim: Claim;
  readonly keyHash: string;
}

const SCRIPT = fileURLToPath(import.meta.url);
const REPO = resolve(dirname(SCRIPT), '../..');

/** Starts the child; it begins its markDone at once. */
export function startMarkProcess(options: MarkProcessOptions): MarkProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', SCRIPT], {
    cwd: REPO,
    env: {
      ...process.env,
      DATABASE_URL: options.connectionString,
      SCHEMA: options.schema,
      APPLICATION_NAME: options.applicationName,
      DEADLINE_MS: String(options.deadlineMs),
      CLAIM: JSON.stringify(options.claim),
      KEY: options.keyHash,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const result = new Promise<MarkResult>((resolveResult, reject) => {
    child.on('close', (code) => {
      const line = stdout.split('\n').find((l) => l.startsWith('result '));
      if (line) resolveResult(JSON.parse(line.slice('result '.length)) as MarkResult);
      else reject(new Error(`the mark process exited with ${code} and no result: ${stderr.slice(0, 2000)}`));
    });
  });
  return { process: child, result };
}

async function main(): Promise<void> {
  const { createPostgresPool, postgresBackend, PostgresDeadlineError } = await import(
    '../../shared/backends/postgres/index.js'
  );
  const { hmacEffectKeys } = await import('../../shared/effects/effect-key.js');
  const env = process.env;
  const deadlineMs = Number(env.DEADLINE_MS);
  const timeouts = { statementMs: 5_000, lockMs: 5_000, idleInTransactionMs: 5_000, deadlineMs };
  const pool = createPostgresPool({
    connectionString: env.DATABASE_URL ?? '',
    applicationName: env.APPLICATION_NAME ?? 'mark-process',
    max: 1,
  });
  const backend = postgresBackend({
    pool,
    schema: env.SCHEMA ?? '',
    hashKey: hmacEffectKeys('mark-process-secret-0123456789'),
    timeouts,
  });
  let result: MarkResult;
  try {
    await backend.ledger.markDone(JSON.parse(env.CLAIM ?? '{}') as Claim, [env.KEY ?? '']);
    result = { ok: true };
  } catch (error) {
    result = {
      ok: false,
      error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
      ...(error instanceof PostgresDeadlineError ? { mayHaveCommitted: error.mayHaveCommitted } : {}),
    };
  }
  process.stdout.write(`result ${JSON.stringify(result)}\n`);
  await pool.end().catch(() => {});
}

if (resolve(process.argv[1] ?? '') === SCRIPT) {
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? error.stack : String(error)}\n`);
    process.exit(1);
  });
}
