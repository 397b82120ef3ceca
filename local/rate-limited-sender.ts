import { setMaxListeners } from 'node:events';
import type { EmailSender } from '../shared/effects/email-sender.js';
import { takeSendSlot } from '../shared/effects/send-slot.js';
import type { RateLimiter } from '../shared/effects/token-bucket.js';

/**
 * `sender` at the provider's send rate, as SesEmailSender keeps to SES's: each send first takes a
 * token from `limiter` (the runtime's TokenBucket, shared by the senders that share a provider; or
 * a SharedRateLimiter on the local backend, `LocalBackend.sendRateLimiter`, shared by every worker
 * of the job). A wait cancelled by the run's signal sent nothing, so it is a refusal with reason
 * `cancelled`, which frees the reservation instead of leaving the email in doubt.
 * @example rateLimitedSender(smtpSender({ host, port }), new TokenBucket({ ratePerSecond: 500 }))
 */
export function rateLimitedSender(
  sender: EmailSender & { close?(): void },
  limiter: RateLimiter,
): EmailSender & { close(): void } {
  return {
    async send(message, options = {}) {
      // Every effect a run has under way waits on the run's one signal, each with its own abort
      // listener: more than Node's 10 is the run's concurrency, not a leak.
      if (options.signal) setMaxListeners(0, options.signal);
      await takeSendSlot(limiter, options.signal, 'the send rate');
      await sender.send(message, options);
    },
    close: () => sender.close?.(),
  };
}
