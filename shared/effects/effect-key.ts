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
 */
export function hmacEffectKeys(secret: string): EffectKeyHasher {
  if (Buffer.byteLength(secret) < MIN_SECRET_BYTES) {
    throw new ConfigurationError(
      'effectKeySecret',
      `the effect-key secret is ${Buffer.byteLength(secret)} bytes; use at least ${MIN_SECRET_BYTES} random bytes ` +
        '(the ScheduledJob construct generates one in Secrets Manager)',
    );
  }
  return (effectKey) => {
    if (effectKey.length === 0) {
      throw new ConfigurationError(
        'effectKey',
        'an effect key is empty; key each effect by what makes it unique, e.g. the recipient',
      );
    }
    return createHmac('sha256', secret).update(effectKey, 'utf8').digest('hex').slice(0, 32);
  };
}
