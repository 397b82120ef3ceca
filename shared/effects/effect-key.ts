import { createHmac } from 'node:crypto';
import { ConfigurationError } from '../errors.js';

/** Turns an effect key (an email address, say) into the opaque hash that is stored, logged and listed. */
export type EffectKeyHasher = (effectKey: string) => string;

/** The shortest secret accepted: 16 bytes, HMAC-SHA256's comfortable floor. */
export const MIN_SECRET_BYTES = 16;

/**
 * HMAC-SHA256 of the effect key under a configured secret, as 32 hex digits (128 bits). Without
 * the secret nobody can test a guessed address against the ledger, so no raw or guessable email
 * address lands in a key, a log line or a metric. Changing the secret changes every hash: windows
 * run under the old secret would no longer recognise their done effects.
 *
 * The empty key hashes like any other; the runtime refuses it as an effect key before hashing.
 */
export function hmacEffectKeys(secret: string): EffectKeyHasher {
  if (Buffer.byteLength(secret) < MIN_SECRET_BYTES) {
    throw new ConfigurationError(
      'effectKeySecret',
      `the effect-key secret is ${Buffer.byteLength(secret)} bytes; use at least ${MIN_SECRET_BYTES} random bytes ` +
        '(the ScheduledJob construct generates one in Secrets Manager)',
    );
  }
  return (effectKey) => createHmac('sha256', secret).update(keyBytes(effectKey)).digest('hex').slice(0, 32);
}

/** A lone surrogate: a UTF-16 code unit with no partner, which UTF-8 cannot carry. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * The bytes a key is hashed as. Well-formed text: its UTF-8, as always (existing hashes stay valid).
 * Text with a lone surrogate: UTF-8 would turn every lone surrogate into U+FFFD, so `x\uD800`,
 * `x\uDFFF` and `x\uFFFD` would be one key and the second and third effect skipped; instead its exact
 * UTF-16 code units, after a 0xFF byte that no UTF-8 text contains, so it collides with nothing.
 */
function keyBytes(effectKey: string): Buffer {
  if (!LONE_SURROGATE.test(effectKey)) return Buffer.from(effectKey, 'utf8');
  return Buffer.concat([Buffer.from([0xff]), Buffer.from(effectKey, 'utf16le')]);
}

/**
 * The effect-key secrets a deployment has had, by version. New windows are pinned to `current`; a
 * window keeps the version its first claim pinned for its whole life, so rotating the secret
 * mid-window sends nobody a second email: the window's later runs still hash with the old version.
 */
export interface EffectKeyRing {
  /** The version new windows are pinned to. */
  readonly current: string;
  /**
   * The hasher of `version`. Rejects with a ConfigurationError when the version cannot be read
   * any more (deleted, or never existed): such a window cannot tell its done effects from new ones.
   */
  hasher(version: string): Promise<EffectKeyHasher>;
}

/**
 * A key ring over secrets held in memory: `secrets` by version, `current` the one new windows use.
 * @example hmacKeyRing({ current: 'v2', secrets: { v1: oldSecret, v2: newSecret } })
 */
export function hmacKeyRing(options: {
  readonly current: string;
  readonly secrets: Readonly<Record<string, string>>;
}): EffectKeyRing {
  const hashers = new Map<string, EffectKeyHasher>();
  for (const [version, secret] of Object.entries(options.secrets))
    hashers.set(version, hmacEffectKeys(secret));
  if (!hashers.has(options.current)) {
    throw new ConfigurationError(
      'current',
      `the current effect-key version ${JSON.stringify(options.current)} has no secret; the versions are ` +
        `${[...hashers.keys()].map((v) => JSON.stringify(v)).join(', ') || 'none'}`,
    );
  }
  return {
    current: options.current,
    async hasher(version) {
      const hasher = hashers.get(version);
      if (!hasher) throw unreadableVersion(version);
      return hasher;
    },
  };
}

/** The error for a window pinned to a key version nobody can read any more. */
export function unreadableVersion(version: string, cause?: unknown): ConfigurationError {
  return new ConfigurationError(
    'effectKeyVersion',
    `effect-key version ${JSON.stringify(version)} cannot be read; a window pinned to it cannot tell its done ` +
      'effects from new ones, so it is not run. Restore that secret version (keep every version at least ' +
      'retentionDays after it stops being current) and re-drive the window',
    cause === undefined ? undefined : { cause },
  );
}
