import { ConfigurationError, SlotguardError, StoreError } from '../../errors.js';
import { type AwaitedReply, DeadlineExceededError, sqlState } from './postgres-executor.js';

/**
 * A Postgres call that had no answer within its client-side deadline (`timeouts.deadlineMs`): the
 * server is frozen, unreachable or far too slow. Its connection was destroyed, not returned to the
 * pool. `mayHaveCommitted` says whether what it wrote can still take effect: only when its COMMIT
 * had already been sent.
 */
export class PostgresDeadlineError extends StoreError {
  /** The deadline that passed, in milliseconds. */
  readonly deadlineMs: number;
  /** What the call was waiting for when it gave up. */
  readonly awaiting: AwaitedReply;
  /**
   * True when a COMMIT had been sent and not answered: the write may have committed, or may commit
   * once the server thaws. False: nothing the call wrote ever commits, because the server rolls back
   * a transaction whose connection ends before its COMMIT.
   */
  readonly mayHaveCommitted: boolean;

  constructor(operation: string, subject: string, cause: DeadlineExceededError) {
    const outcome = cause.mayHaveCommitted
      ? 'Its COMMIT had been sent, so it may have taken effect (or may once the server answers again); ' +
        'repeating it is safe, because every operation recognises its own earlier write'
      : 'It did not take effect and cannot later: its COMMIT was never sent, and the server rolls the ' +
        'transaction back when it finds the connection gone';
    super(
      operation,
      `Postgres ${operation} of ${subject} had ${cause.message}, so its connection was destroyed. ${outcome}. Check that the database is up and answering (a stopped or failing-over server ` +
        'keeps connections open and answers nothing), or raise timeouts.deadlineMs, keeping it within the lease',
      { cause },
    );
    this.deadlineMs = cause.deadlineMs;
    this.awaiting = cause.awaiting;
    this.mayHaveCommitted = cause.mayHaveCommitted;
  }
}

/**
 * Translates what pg threw into slotguard's errors, once, at the adapter's edge. Errors slotguard
 * raised itself (a rejected key, a configuration problem) pass through unchanged; a missing schema,
 * table or column becomes a ConfigurationError that says to run the migration; a call past its
 * client-side deadline a PostgresDeadlineError; anything else a StoreError carrying the SQLSTATE
 * and the cause.
 */
export function translateError(operation: string, subject: string, schema: string, cause: unknown): Error {
  if (cause instanceof SlotguardError) return cause;
  if (cause instanceof DeadlineExceededError) return new PostgresDeadlineError(operation, subject, cause);
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
        `run the migration first: slotguard postgres migrate --schema ${schema}`,
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
