import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { rateAsUtcCron } from '../../infra/rate-as-cron.js';
import { JobSchedule } from '../../shared/schedule/fire-times.js';

const MINUTE = 60_000;
const DAY = 24 * 60 * MINUTE;

/** Every value of `unit` that rateAsUtcCron takes: the divisors of an hour, then of a day. */
const MINUTE_RATES = [1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30];
const HOUR_RATES = [1, 2, 3, 4, 6, 8, 12, 24];

describe('rateAsUtcCron', () => {
  it('fires on exactly the instants of the rate counted from 1970, the local runner’s grid, over a day from anywhere', () => {
    const rates = [
      ...MINUTE_RATES.map((n) => `rate(${n} ${n === 1 ? 'minute' : 'minutes'})`),
      ...HOUR_RATES.map((n) => `rate(${n} ${n === 1 ? 'hour' : 'hours'})`),
      'rate(1 day)',
    ];
    fc.assert(
      fc.property(
        fc.constantFrom(...rates),
        fc.integer({ min: Date.UTC(2026, 0, 1), max: Date.UTC(2030, 0, 1) }),
        (expression, from) => {
          const rate = new JobSchedule({ expression, timeZone: 'UTC' });
          if (rate.expression.kind !== 'rate') throw new Error('expected a rate');
          const cron = rateAsUtcCron(rate.expression.everyMs);
          expect(cron, expression).toBeDefined();
          const asCron = new JobSchedule({ expression: cron!, timeZone: 'UTC' });
          expect(asCron.firesBetween(from, from + DAY).map(Number)).toEqual(
            rate.firesBetween(from, from + DAY).map(Number),
          );
        },
      ),
      { numRuns: 60 },
    );
  });

  it.each([
    ['7 minutes', 7 * MINUTE],
    ['45 minutes', 45 * MINUTE],
    ['90 minutes', 90 * MINUTE],
    ['5 hours', 5 * 60 * MINUTE],
    ['2 days', 2 * DAY],
  ])('has no cron for a rate of %s, which divides neither an hour nor a day', (_, everyMs) => {
    expect(rateAsUtcCron(everyMs)).toBeUndefined();
  });
});
