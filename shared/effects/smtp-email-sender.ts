import nodemailer from 'nodemailer';
import { EffectNotPerformedError } from '../errors.js';
import type { EmailMessage, EmailSender } from './email-sender.js';

/** Options of `smtpSender`: the SMTP server and the From address. */
export interface SmtpSenderOptions {
  readonly host: string;
  readonly port: number;
  /** @default 'reports@slotguard.local' */
  readonly from?: string;
  /**
   * Pooled connections kept open to the server.
   * @default 8
   */
  readonly maxConnections?: number;
}

/**
 * Sends through an SMTP server with nodemailer (local runs: a real server on loopback). A 4xx/5xx
 * reply to the envelope or the data means the server did not accept the message: that is
 * EffectNotPerformedError. A connection that fails after DATA was sent may have delivered it: that
 * error propagates and the ledger reports the email in doubt.
 */
export function smtpSender(options: SmtpSenderOptions): EmailSender & { close(): void } {
  const transport = nodemailer.createTransport({
    host: options.host,
    port: options.port,
    secure: false,
    ignoreTLS: true,
    pool: true,
    maxConnections: options.maxConnections ?? 8,
    maxMessages: Number.POSITIVE_INFINITY,
  });
  const from = options.from ?? 'reports@slotguard.local';
  return {
    async send(message: EmailMessage) {
      try {
        await transport.sendMail({ from, to: message.to, subject: message.subject, text: message.text });
      } catch (error) {
        if (isRefusal(error)) {
          throw new EffectNotPerformedError(`the SMTP server refused the message (${smtpCode(error)})`, {
            cause: error,
          });
        }
        throw error;
      }
    },
    close: () => transport.close(),
  };
}

/** nodemailer reports the server's reply code on `responseCode`; envelope and data refusals carry one. */
function isRefusal(error: unknown): boolean {
  const code = smtpCode(error);
  return code !== undefined && code >= 400 && code < 600;
}

function smtpCode(error: unknown): number | undefined {
  const code = (error as { responseCode?: unknown } | null)?.responseCode;
  return typeof code === 'number' ? code : undefined;
}
