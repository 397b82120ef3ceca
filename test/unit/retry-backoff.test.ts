import { ConditionalCheckFailedException, InternalServerError } from '@aws-sdk/client-dynamodb';
import { describe, expect, it } from 'vitest';
import { JitteredRetryStrategy } from '../../shared/backends/dynamodb/dynamodb-retry-strategy.js';
import { equalJitterDelayMs } from '../../shared/backoff.js';

/** What the SDK hands a retry strategy about a failed attempt (its SdkError type predates Error.cause). */
type ErrorInfo = Parameters<JitteredRetryStrategy['refreshRetryTokenForRetry']>[1];

/** The delays a strategy gives one request failed by `errorType` until it refuses another retry. */
async function delaysUntilGivenUp(strategy: JitteredRetryStrategy, errorType: 'TRANSIENT' | 'THROTTLING') {
  const error = new InternalServerError({ message: `injected ${errorType}`, $metadata: {} });
  const delays: number[] = [];
  let token = await strategy.acquireInitialRetryToken();
  for (;;) {
    try {
      token = await strategy.refreshRetryTokenForRetry(token, { errorType, error } as ErrorInfo);
    } catch (refused) {
      return { delays, refused };
    }
    delays.push(token.getRetryDelay());
  }
}

const sum = (values: readonly number[]) => values.reduce((a, b) => a + b, 0);

describe('jittered retry backoff', () => {
  it('keeps half of each delay fixed: retry n waits between half and all of min(max, base × 2^n)', () => {
    expect([0, 1, 2, 3].map((n) => equalJitterDelayMs(n, 50, 1_000, () => 0))).toEqual([25, 50, 100, 200]);
    expect([0, 1, 2, 3].map((n) => equalJitterDelayMs(n, 50, 1_000, () => 1))).toEqual([50, 100, 200, 400]);
    // Capped at the maximum, still half fixed.
    expect(equalJitterDelayMs(10, 50, 1_000, () => 0)).toBe(500);
    expect(equalJitterDelayMs(10, 50, 1_000, () => 0.5)).toBe(750);
  });

  it('spends 8 attempts of a 5xx over at least 3,175 ms however the jitter falls, so a 500 ms burst never exhausts them', async () => {
    for (const draw of [0, 0.25, 0.999]) {
      const { delays, refused } = await delaysUntilGivenUp(
        new JitteredRetryStrategy(8, 50, 500, 20_000, () => draw),
        'TRANSIENT',
      );
      expect(delays).toHaveLength(7);
      expect(sum(delays)).toBeGreaterThanOrEqual(3_175);
      expect(sum(delays)).toBeLessThanOrEqual(6_350);
      // The 8th failure is the request's own error, surfaced to the caller.
      expect((refused as Error).message).toBe('injected TRANSIENT');
    }
  });

  it('backs off throttling from 500 ms and caps every delay at 20 s', async () => {
    const { delays } = await delaysUntilGivenUp(
      new JitteredRetryStrategy(12, 50, 500, 20_000, () => 0.999),
      'THROTTLING',
    );
    expect(delays).toHaveLength(11);
    expect(delays[0]).toBeGreaterThanOrEqual(250);
    expect(delays[0]).toBeLessThan(500);
    expect(Math.max(...delays)).toBeLessThan(20_000);
    expect(delays.at(-1)).toBeGreaterThanOrEqual(19_990);
  });

  it('spreads clients failed by one burst: different draws give different delays at every retry', async () => {
    const low = await delaysUntilGivenUp(
      new JitteredRetryStrategy(8, 50, 500, 20_000, () => 0.1),
      'TRANSIENT',
    );
    const high = await delaysUntilGivenUp(
      new JitteredRetryStrategy(8, 50, 500, 20_000, () => 0.9),
      'TRANSIENT',
    );
    for (let n = 0; n < 7; n++) expect(high.delays[n]).toBeGreaterThan(low.delays[n] ?? 0);
  });

  it('never retries an error that is not transient or throttling (a failed condition, a validation error)', async () => {
    const strategy = new JitteredRetryStrategy(8);
    const token = await strategy.acquireInitialRetryToken();
    const error = new ConditionalCheckFailedException({
      message: 'The conditional request failed',
      $metadata: {},
    });
    await expect(
      strategy.refreshRetryTokenForRetry(token, { errorType: 'CLIENT_ERROR', error } as ErrorInfo),
    ).rejects.toBe(error);
  });
});
