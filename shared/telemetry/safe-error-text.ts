import { redactAddresses } from '../effects/ses-email-sender.js';

/**
 * An error as text for a log line or a stored lastError: its name and message, and its cause's,
 * with anything shaped like an email address replaced, so a provider's message quoting the
 * recipient never reaches a log.
 */
export function safeErrorText(error: unknown): string {
  if (!(error instanceof Error)) return redactAddresses(String(error));
  const text = `${error.name}: ${error.message}`;
  const cause = error.cause instanceof Error ? ` (cause: ${error.cause.name}: ${error.cause.message})` : '';
  return redactAddresses(`${text}${cause}`);
}
