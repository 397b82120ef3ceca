import type { DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import { equalJitterDelayMs } from '../../backoff.js';

/** The SDK's token-based retry strategy, as DynamoDBClient's config types it. */
type RetryStrategyV2 = Extract<
  NonNullable<DynamoDBClientConfig['retryStrategy']>,
  { recordSuccess: unknown }
>;
type RetryToken = Awaited<ReturnType<RetryStrategyV2['acquireInitialRetryToken']>>;
type RetryErrorInfo = Parameters<RetryStrategyV2['refreshRetryTokenForRetry']>[1];

/**
 * Jittered exponential backoff on throttling and transient errors (5xx, timeouts, dropped
 * connections), up to `maxAttempts` tries per request, with no client-wide retry quota. Half of each
 * delay is fixed (`equalJitterDelayMs`), so 8 attempts from 50 ms span at least 3,175 ms: a shorter
 * burst of 500s never exhausts a request's attempts.
 *
 * Why not the SDK's standard strategy: it stops retrying once a quota shared by the whole client is
 * spent (500 tokens; 14 per retried 5xx, 5 per retried throttle). A run's `effectConcurrency`
 * requests failing together spend it within a few rounds of a burst, and from then on no request is
 * retried at all (attempts: 1), whatever maxAttempts says: a 300 ms burst of 500s at concurrency 16
 * stops the run with a StoreError, and the marks it could not write leave delivered emails reading
 * as in doubt. slotguard already bounds its own request rate (effectConcurrency per run), which is
 * what the quota protects against.
 */
export class JitteredRetryStrategy implements RetryStrategyV2 {
  readonly mode = 'standard';
  readonly #maxAttempts: number;

  /**
   * @param maxAttempts tries per request, the first included
   * @param baseMs the backoff ceiling of the first retry of a 5xx or a timeout, doubling each retry
   * @param throttlingBaseMs the same for a throttled request
   * @param maxDelayMs the largest ceiling
   * @param random where the jitter comes from (tests pin it)
   */
  constructor(
    maxAttempts: number,
    private readonly baseMs = 50,
    private readonly throttlingBaseMs = 500,
    private readonly maxDelayMs = 20_000,
    private readonly random: () => number = Math.random,
  ) {
    this.#maxAttempts = maxAttempts;
  }

  async acquireInitialRetryToken(): Promise<RetryToken> {
    return retryToken(0, 0);
  }

  async refreshRetryTokenForRetry(token: RetryToken, info: RetryErrorInfo): Promise<RetryToken> {
    const retries = token.getRetryCount();
    const retryable = info.errorType === 'THROTTLING' || info.errorType === 'TRANSIENT';
    // Refusing a retry is a throw; the SDK then surfaces the request's own error.
    if (!retryable || retries + 1 >= this.#maxAttempts) throw info.error ?? new Error('not retried');
    const base = info.errorType === 'THROTTLING' ? this.throttlingBaseMs : this.baseMs;
    const delayMs = Math.floor(equalJitterDelayMs(retries, base, this.maxDelayMs, this.random));
    return retryToken(retries + 1, delayMs);
  }

  recordSuccess(): void {}
}

function retryToken(retryCount: number, delayMs: number): RetryToken {
  return { getRetryCount: () => retryCount, getRetryDelay: () => delayMs };
}
