import type { Pool } from 'pg';
import { translateError } from './postgres-errors.js';
import { PostgresExecutor, resolveTimeouts } from './postgres-executor.js';
import { SCHEMA_VERSION, sqlFor } from './sql.js';

/** Options of migrate. */
export interface MigrateOptions {
  /** The schema to create or bring up to date. */
  readonly schema: string;
}

/** What a migration did. */
export interface MigrateResult {
  readonly schema: string;
  /** The schema's version afterwards. */
  readonly version: number;
  /** False when the schema was already at this version (nothing changed). */
  readonly applied: boolean;
}

/**
 * Creates slotguard's tables in `schema`, or does nothing if they exist. Idempotent and safe to run
 * from several replicas at once (an advisory transaction lock serialises them), in one transaction,
 * so a failure leaves nothing half made. The runtime never creates tables itself: run this from a
 * deploy step or the CLI (`slotguard postgres migrate --schema X`).
 * @example await migrate(pool, { schema: 'slotguard' })
 */
export async function migrate(pool: Pool, options: MigrateOptions): Promise<MigrateResult> {
  const sql = sqlFor(options.schema);
  // DDL takes locks a running backend may hold for a moment: wait for them up to lock_timeout,
  // as any other transaction would, rather than queue behind them indefinitely.
  // The client-side deadline follows (60 s): a migration run by hand still ends if the server freezes.
  const executor = new PostgresExecutor({ pool, timeouts: resolveTimeouts({ statementMs: 60_000 }) });
  try {
    const applied = await executor.transaction(async (query) => {
      let rows: unknown[] = [];
      for (const statement of sql.migration) rows = await query(statement, []);
      return rows.length > 0;
    });
    return { schema: options.schema, version: SCHEMA_VERSION, applied };
  } catch (error) {
    throw translateError('migrate', `schema "${options.schema}"`, options.schema, error);
  }
}

/** The migration as one script, for a DBA to review or run by hand (`slotguard postgres migrate --print`). */
export function migrationScript(schema: string): string {
  return `BEGIN;\n${sqlFor(schema)
    .migration.map((statement) => `${statement.replace(/\n {6}/g, '\n')};`)
    .join('\n')}\nCOMMIT;\n`;
}

/** Options of purgeExpired. */
export interface PurgeOptions {
  readonly schema: string;
  /**
   * Rows deleted per statement, so a purge never holds many locks or runs long.
   * @default 5_000
   */
  readonly batchSize?: number;
}

/** How many rows a purge deleted. */
export interface PurgeResult {
  /** Slot rows deleted: windows' and their shards'. */
  readonly slots: number;
  readonly effects: number;
}

/**
 * Deletes slot and effect rows past their retention (`expires_at`, set from the window plus
 * retentionDays), in small batches. Postgres has no TTL; run this daily. Deleting an expired row is
 * safe because the runtime refuses windows older than the retention minus a day.
 */
export async function purgeExpired(pool: Pool, options: PurgeOptions): Promise<PurgeResult> {
  const sql = sqlFor(options.schema);
  const batch = options.batchSize ?? 5_000;
  const executor = new PostgresExecutor({ pool, timeouts: resolveTimeouts() });
  const purge = async (statement: string) => {
    let total = 0;
    for (;;) {
      const [row] = await executor.query<{ n: number }>(statement, [batch]);
      const deleted = row?.n ?? 0;
      total += deleted;
      if (deleted < batch) return total;
    }
  };
  try {
    const effects = await purge(sql.purgeEffects);
    // A shard's row is a slot row too, with its window's retention.
    return { effects, slots: (await purge(sql.purgeShardSlots)) + (await purge(sql.purgeSlots)) };
  } catch (error) {
    throw translateError('purge', `schema "${options.schema}"`, options.schema, error);
  }
}
