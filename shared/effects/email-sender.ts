/** One email to one recipient. */
export interface EmailMessage {
  readonly to: string;
  readonly subject: string;
  readonly text: string;
}

/**
 * Sends email. Implementations: SES v2 (deployed), SMTP through nodemailer (local runs). A sender
 * that knows its provider refused a message before acting on it throws EffectNotPerformedError, so
 * the ledger releases the reservation for a later run; any other error leaves it in doubt. The
 * signal aborts when the lease is lost or the invocation is nearly out of time: let it end a wait
 * that has sent nothing (refuse with reason `cancelled`), not a request already sent.
 */
export interface EmailSender {
  send(message: EmailMessage, options?: { signal?: AbortSignal }): Promise<void>;
}
