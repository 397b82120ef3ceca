import { ConfigurationError } from '../../errors.js';
import { LEASE_SAFETY_MARGIN_DIVISOR } from '../../slot/ports.js';
import { describe } from '../../slot/slot.js';
import type { ResolvedTimeouts } from './postgres-executor.js';

/**
 * The Postgres backend's defaults and the rule for schema names, in a module that does not load
 * `pg`: the CDK constructs (PostgresClaims) check them at synth time, where `pg`, an optional peer
 * dependency, need not be installed.
 */

/** The schema slotguard uses when none is named. */
export const DEFAULT_SCHEMA = 'slotguard';

/** Schema names slotguard accepts: lower-case letters, digits and underscores, a letter or `_` first. */
export const SCHEMA_NAME_PATTERN = /^[a-z_][a-z0-9_]{0,62}$/;

/** Validates a schema name; the error names the value and the rule. */
export function assertSchemaName(schema: unknown): asserts schema is string {
  if (typeof schema !== 'string' || !SCHEMA_NAME_PATTERN.test(schema) || schema.startsWith('pg_')) {
    throw new ConfigurationError(
      'schema',
      `schema ${describe(schema)} is not a usable schema name: use 1-63 lower-case letters, digits or ` +
        'underscores, a letter or underscore first and not "pg_" (for example "slotguard")',
    );
  }
}

/** The session timeouts' defaults: a few seconds, for leases of a minute. */
export const DEFAULT_TIMEOUTS: ResolvedTimeouts = {
  statementMs: 5_000,
  lockMs: 2_000,
  idleInTransactionMs: 5_000,
  deadlineMs: 5_000,
  scope: 'transaction',
};

/**
 * The shortest lease a claim accepts with these timeouts, when the run's safety margin is its
 * default (a sixth of the lease): the client-side deadline must fit in the margin, so a call that
 * hangs when the holder stops taking new effects is given up before the lease ends; and the lease
 * must be three times the longest server limit, so a stuck statement or a frozen client's locks end
 * while it still holds. With the defaults (5 s each) that is 30 s.
 */
export function shortestLeaseMs(timeouts: ResolvedTimeouts): number {
  const longestServerLimit = Math.max(timeouts.statementMs, timeouts.lockMs, timeouts.idleInTransactionMs);
  return Math.max(3 * longestServerLimit, LEASE_SAFETY_MARGIN_DIVISOR * timeouts.deadlineMs);
}
