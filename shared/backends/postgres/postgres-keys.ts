import { createHash } from 'node:crypto';
import { ConfigurationError } from '../../errors.js';
import { canonicalSlot, describe, type Slot } from '../../slot/slot.js';

/**
 * The keys the Postgres backend stores and locks by, checked at the adapter's edge so that nothing
 * Postgres cannot store exactly (a NUL, a lone surrogate, a btree-busting length) reaches a
 * statement. Values always travel as bind parameters; these checks are about storing them exactly,
 * not about escaping. Slots follow the rule every backend shares: canonicalSlot (shared/slot/slot.ts)
 * at each method's edge, so one instant spelled `…Z`, `….000Z` or `+01:00` is one row.
 */

/** The longest effect key hash stored (hmacEffectKeys makes 32 hex digits). */
export const MAX_KEY_HASH_LENGTH = 512;

/** The longest owner token stored (the runtime makes `<invocation id, ≤64>/<uuid>`). */
export const MAX_OWNER_LENGTH = 256;

/**
 * The slot's transaction-scoped advisory-lock key: the first 8 bytes of SHA-256 of
 * `${jobId}\n${window}` (UTF-8) of the canonical slot (canonicalSlot), read as a big-endian signed
 * 64-bit integer, which is the type of pg_advisory_xact_lock's single-argument key. A shard's slot
 * hashes `${jobId}\n${window}\nshard ${shard}` instead, so each shard's claimers queue apart from
 * the window's and from every other shard's; a window's key is the one it always had.
 *
 * It is stable across processes, versions and platforms (pinned by golden-value tests), because
 * replicas running different builds must agree on it. Two slots whose keys collide (odds 2^-64 per
 * pair) only wait for each other's claims: the lease row, keyed by the exact text of the job id
 * and window (and the shard), decides every grant.
 * @example advisoryLockKey({ jobId: 'weekly-report', window: '2026-11-30T06:00:00Z' })
 */
export function advisoryLockKey(slot: Slot): bigint {
  const { jobId, window, shard } = canonicalSlot(slot);
  const text = shard === undefined ? `${jobId}\n${window}` : `${jobId}\n${window}\nshard ${shard}`;
  return createHash('sha256').update(text, 'utf8').digest().readBigInt64BE(0);
}

/**
 * Checks an effect key hash: 1 to 512 characters of well-formed text without NUL. Any other
 * character (quotes, semicolons, right-to-left marks) is stored exactly as given.
 */
export function assertKeyHash(keyHash: unknown): asserts keyHash is string {
  const problem = textProblem(keyHash, MAX_KEY_HASH_LENGTH);
  if (problem) {
    throw new ConfigurationError(
      'hashKey',
      `effect key hash ${describe(keyHash)} ${problem}; the backend's EffectKeyHasher must return 1-${MAX_KEY_HASH_LENGTH} ` +
        'characters of text without NUL (hmacEffectKeys returns 32 hex digits)',
    );
  }
}

/** Checks an owner token the same way (it is compared in every fenced write). */
export function assertOwner(owner: unknown): asserts owner is string {
  const problem = textProblem(owner, MAX_OWNER_LENGTH);
  if (problem) {
    throw new ConfigurationError(
      'owner',
      `owner token ${describe(owner)} ${problem}; use 1-${MAX_OWNER_LENGTH} characters without NUL`,
    );
  }
}

/**
 * Free text that is recorded, not compared (delivery ids, an error message): made storable rather
 * than refused, so a job whose error message carries a NUL still releases its slot. NUL becomes
 * U+FFFD, a lone surrogate becomes U+FFFD, and the text is cut to `max` characters.
 */
export function storableText(value: string | undefined, max: number): string | null {
  if (value === undefined) return null;
  return value.replace(LONE_SURROGATE, '\uFFFD').replaceAll('\u0000', '\uFFFD').slice(0, max);
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

function textProblem(value: unknown, max: number): string | undefined {
  if (typeof value !== 'string') return 'is not a string';
  if (value.length === 0) return 'is empty';
  if (value.length > max) return `is ${value.length} characters, over ${max}`;
  if (value.includes('\u0000')) return 'contains NUL, which Postgres text cannot hold';
  LONE_SURROGATE.lastIndex = 0;
  if (LONE_SURROGATE.test(value)) return 'contains a lone surrogate, which UTF-8 cannot hold exactly';
  return undefined;
}
