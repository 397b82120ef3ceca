import { describe, expect, it } from 'vitest';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import { ConfigurationError } from '../../shared/errors.js';

describe('effect keys', () => {
  it('are HMAC-SHA256 hashes: stable for one secret, different under another, never the raw key', () => {
    const a = hmacEffectKeys('0123456789abcdef-secret-a');
    const b = hmacEffectKeys('0123456789abcdef-secret-b');
    const key = 'alice@example.com';
    expect(a(key)).toMatch(/^[0-9a-f]{32}$/);
    expect(a(key)).toBe(a(key));
    expect(a(key)).not.toBe(b(key));
    expect(a(key)).not.toContain('alice');
    // Golden value: changing the hash would make every done effect of a running window look new.
    expect(a(key)).toBe('983cfe5f38af7fdeecf6d8fe52b24cd3');
  });

  it('refuse a short secret with a message that says what to do', () => {
    expect(() => hmacEffectKeys('short')).toThrow(ConfigurationError);
    expect(() => hmacEffectKeys('short')).toThrow(/5 bytes; use at least 16 random bytes/);
  });

  it('gives keys that differ only in lone surrogates different hashes, so none is skipped as another', () => {
    const hash = hmacEffectKeys('0123456789abcdef-secret-a');
    const keys = ['x\uD800', 'x\uDFFF', 'x\uFFFD', 'x\uDBFF', 'x\uDC00\uD800'];
    expect(new Set(keys.map(hash)).size).toBe(keys.length);
    // Well-formed text hashes as its UTF-8, as before: stored hashes stay valid.
    expect(hash('alice@example.com')).toBe('983cfe5f38af7fdeecf6d8fe52b24cd3');
    expect(hash('x\uD83D\uDE00')).not.toBe(hash('x\uFFFD'));
  });
});
