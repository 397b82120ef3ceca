import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { InvalidEventError } from '../../shared/errors.js';
import { assertJobId, JOB_ID_PATTERN, parseScheduledTime, windowOf } from '../../shared/slot/slot.js';

describe('the slot key', () => {
  it('takes the window from the scheduled time, normalised to whole UTC seconds', () => {
    expect(parseScheduledTime('2026-11-30T06:00:00Z')).toBe('2026-11-30T06:00:00Z');
    expect(parseScheduledTime('2026-11-30T09:00:00+03:00')).toBe('2026-11-30T06:00:00Z');
    expect(parseScheduledTime('2026-11-30T06:00:00.999Z')).toBe('2026-11-30T06:00:00Z');
  });

  it('gives every instant within one second the same window, and the next second another', () => {
    fc.assert(
      fc.property(fc.integer({ min: Date.UTC(2000, 0, 1), max: Date.UTC(2100, 0, 1) }), (ms) => {
        const window = windowOf(ms);
        expect(parseScheduledTime(new Date(ms).toISOString())).toBe(window);
        expect(windowOf(ms - (ms % 1000) + 999)).toBe(window);
        expect(windowOf(ms - (ms % 1000) + 1000)).not.toBe(window);
      }),
    );
  });

  it('refuses dates the calendar does not have instead of rolling them over', () => {
    for (const bad of [
      '2026-02-29T00:00:00Z',
      '2026-04-31T00:00:00Z',
      '2026-13-01T00:00:00Z',
      '2026-11-30T06:60:00Z',
    ]) {
      expect(() => parseScheduledTime(bad), bad).toThrow(InvalidEventError);
    }
    expect(parseScheduledTime('2028-02-29T00:00:00Z')).toBe('2028-02-29T00:00:00Z');
  });

  it('accepts job ids from the documented alphabet only', () => {
    for (const good of ['weekly-report', 'a', 'invoice-sweep-eu2', `a${'b'.repeat(62)}`]) {
      expect(() => assertJobId(good), good).not.toThrow();
    }
    for (const bad of [
      '',
      'Weekly',
      '1job',
      'job#1',
      'job id',
      `a${'b'.repeat(63)}`,
      'jöb',
      'job\u0000',
      'job\u202e',
    ]) {
      expect(() => assertJobId(bad), JSON.stringify(bad)).toThrow(/is not a valid job id/);
    }
    fc.assert(
      fc.property(fc.string(), (s) => {
        expect(JOB_ID_PATTERN.test(s)).toBe(/^[a-z][a-z0-9-]{0,62}$/.test(s) && !s.includes('#'));
      }),
    );
  });
});
