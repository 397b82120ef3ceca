/** One email to one recipient. */
export interface EmailMessage {
  readonly to: string;
  readonly subject: string;
  readonly text: string;
}

/**
 * Sends email. Implementations: SES v2 (deployed), SMTP through nodemailer (local runs). A sender
 * that knows its provider refused a message before acting on it throws EffectNotPerformedError, so
 * the ledger releases the reservation for a later run; any other error leaves it in doubt.
 */
export interface EmailSender {
  send(message: EmailMessage, options?: { signal?: AbortSignal }): Promise<void>;
}
