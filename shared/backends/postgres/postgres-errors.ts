import { ConfigurationError, SlotguardError, StoreError } from '../../errors.js';
import { sqlState } from './postgres-executor.js';

/**
 * Translates what pg threw into slotguard's errors, once, at the adapter's edge. Errors slotguard
 * raised itself (a rejected key, a configuration problem) pass through unchanged; a missing schema,
 * table or column becomes a ConfigurationError that says to run the migration; anything else becomes a
 * StoreError carrying the SQLSTATE and the cause.
 */
export function translateError(operation: string, subject: string, schema: string, cause: unknown): Error {
  if (cause instanceof SlotguardError) return cause;
  const code = sqlState(cause);
  if (code === '42P01' || code === '3F000' || code === '42703') {
    // 42703 (undefined column): the tables are there but older than this build's statements.
    const found =
      code === '42703'
        ? `found schema "${schema}" older than this version of slotguard (SQLSTATE ${code})`
        : `found no slotguard tables in schema "${schema}" (SQLSTATE ${code})`;
    return new ConfigurationError(
      'schema',
      `Postgres ${operation} of ${subject} ${found}; ` +
        `run the migration first: node --import tsx shared/backends/postgres/cli.ts migrate --schema ${schema}`,
      { cause },
    );
  }
  const detail =
    cause instanceof Error ? `${cause.message}${code ? ` (SQLSTATE ${code})` : ''}` : String(cause);
  return new StoreError(
    operation,
    `Postgres ${operation} of ${subject} failed after the backend's retries: ${detail}. It took effect or it did ` +
      'not; repeating it is safe, because every operation recognises its own earlier write',
    { cause },
  );
}
