import { describe, expect, it } from 'vitest';
import { TokenBucket } from '../../shared/effects/token-bucket.js';
import { ConfigurationError } from '../../shared/errors.js';
import { ManualClock, settle } from '../helpers/manual-clock.js';

/** Starts `n` takes at once and records, for each, the clock reading when it was let through. */
function takeMany(bucket: TokenBucket, clock: ManualClock, n: number, signal?: AbortSignal) {
  const passedAt: number[] = [];
  const outcomes = Array.from({ length: n }, (_, i) =>
    bucket.take(signal).then(
      () => {
        passedAt[i] = clock.now();
      },
      (reason: unknown) => reason,
    ),
  );
  return { passedAt, outcomes };
}

describe('TokenBucket', () => {
  it('does not let 16 concurrent senders exceed 4 per second: one every 250 ms, in arrival order', async () => {
    const clock = new ManualClock(0);
    const bucket = new TokenBucket({ ratePerSecond: 4, clock });
    const { passedAt } = takeMany(bucket, clock, 16);
    await settle();
    expect(passedAt.filter((t) => t !== undefined)).toEqual([0]);
    await clock.advance(3_750);
    expect(passedAt).toEqual(Array.from({ length: 16 }, (_, i) => i * 250));
    expect(bucket.waiting).toBe(0);
    expect(clock.pending).toBe(0);
  });

  it('never lets more than burst through at once after a quiet spell', async () => {
    const clock = new ManualClock(0);
    const bucket = new TokenBucket({ ratePerSecond: 2, burst: 3, clock });
    await clock.advance(60_000);
    const { passedAt } = takeMany(bucket, clock, 5);
    await settle();
    expect(passedAt.filter((t) => t !== undefined)).toEqual([60_000, 60_000, 60_000]);
    await clock.advance(1_000);
    expect(passedAt).toEqual([60_000, 60_000, 60_000, 60_500, 61_000]);
  });

  it('keeps a fractional rate: 0.5 per second lets one through every 2 seconds', async () => {
    const clock = new ManualClock(0);
    const bucket = new TokenBucket({ ratePerSecond: 0.5, clock });
    const { passedAt } = takeMany(bucket, clock, 3);
    await settle();
    await clock.advance(1_999);
    expect(passedAt.filter((t) => t !== undefined)).toEqual([0]);
    await clock.advance(2_001);
    expect(passedAt).toEqual([0, 2_000, 4_000]);
  });

  it('does not spend a token on a waiter whose signal aborts, and serves the next in line on time', async () => {
    const clock = new ManualClock(0);
    const bucket = new TokenBucket({ ratePerSecond: 1, clock });
    await bucket.take();
    const controller = new AbortController();
    const aborted = takeMany(bucket, clock, 1, controller.signal);
    const after = takeMany(bucket, clock, 1);
    controller.abort(new Error('lease lost'));
    await settle();
    expect(await aborted.outcomes[0]).toMatchObject({ message: 'lease lost' });
    await clock.advance(1_000);
    expect(after.passedAt).toEqual([1_000]);
    expect(aborted.passedAt).toEqual([]);
  });

  it('cancels its timer when the last waiter aborts, so nothing keeps running', async () => {
    const clock = new ManualClock(0);
    const bucket = new TokenBucket({ ratePerSecond: 1, clock });
    await bucket.take();
    const controller = new AbortController();
    const { outcomes } = takeMany(bucket, clock, 1, controller.signal);
    expect(clock.pending).toBe(1);
    controller.abort(new Error('stop'));
    await outcomes[0];
    expect(clock.pending).toBe(0);
    expect(bucket.waiting).toBe(0);
  });

  it('rejects at once, spending nothing, when the signal is already aborted', async () => {
    const clock = new ManualClock(0);
    const bucket = new TokenBucket({ ratePerSecond: 1, clock });
    await expect(bucket.take(AbortSignal.abort(new Error('gone')))).rejects.toThrow('gone');
    const { passedAt } = takeMany(bucket, clock, 1);
    await settle();
    expect(passedAt).toEqual([0]);
  });

  it.each([0, -1, Number.NaN, Number.POSITIVE_INFINITY])('refuses a rate of %s', (ratePerSecond) => {
    expect(() => new TokenBucket({ ratePerSecond })).toThrow(ConfigurationError);
  });

  it('refuses a burst below one', () => {
    expect(() => new TokenBucket({ ratePerSecond: 1, burst: 0 })).toThrow(/burst is 0/);
  });
});
