import { ConfigurationError, EffectNotPerformedError, NotPerformedReason } from '../errors.js';
import { redactAddresses, withoutAddresses } from '../telemetry/safe-error-text.js';
import type { RateLimiter } from './token-bucket.js';

/**
 * Waits for `limiter` to let one send go. A wait that ends without a token sent nothing, so it is a
 * refusal (EffectNotPerformedError), never an effect in doubt: `cancelled` when the run's signal
 * aborted it (the run is stopping), `configuration` when the limiter's store cannot work as
 * configured (a Postgres schema not yet migrated: every send would meet it), `throttled` when the
 * limiter failed otherwise (its store could not be reached), which a later attempt retries.
 * @example await takeSendSlot(limiter, options.signal, 'the SES send rate');
 */
export async function takeSendSlot(
  limiter: RateLimiter,
  signal: AbortSignal | undefined,
  rateName: string,
): Promise<void> {
  try {
    await limiter.take(signal);
  } catch (cause) {
    if (signal?.aborted) {
      throw new EffectNotPerformedError(
        `the send was cancelled while waiting for ${rateName}; nothing was sent`,
        {
          cause: withoutAddresses(cause),
          reason: NotPerformedReason.Cancelled,
        },
      );
    }
    const safeCause = withoutAddresses(cause);
    const detail = safeCause instanceof Error ? safeCause.message : redactAddresses(String(cause));
    // A store that cannot work as configured (a schema not migrated) fails every send alike.
    const reason =
      cause instanceof ConfigurationError ? NotPerformedReason.Configuration : NotPerformedReason.Throttled;
    throw new EffectNotPerformedError(
      `no send slot could be reserved on ${rateName} (${detail}); nothing was sent, and a later attempt sends it`,
      { cause: safeCause, reason },
    );
  }
}
