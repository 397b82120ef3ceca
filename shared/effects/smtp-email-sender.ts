import nodemailer from 'nodemailer';
import { EffectNotPerformedError, NotPerformedReason } from '../errors.js';
import { safeErrorText, withoutAddresses } from '../telemetry/safe-error-text.js';
import { currentEffect, effectHeaders } from './effect-context.js';
import type { EmailMessage, EmailSender } from './email-sender.js';

/** Options of `smtpSender`: the SMTP server and the From address. */
export interface SmtpSenderOptions {
  /** The server's host name or address. */
  readonly host: string;
  /** The server's port. */
  readonly port: number;
  /**
   * The envelope and header From address.
   * @default 'reports@slotguard.local'
   */
  readonly from?: string;
  /**
   * Pooled connections kept open to the server.
   * @default 8
   */
  readonly maxConnections?: number;
}

/**
 * Sends through an SMTP server with nodemailer (local runs: a real server on loopback). A 4xx/5xx
 * reply to the connection, the envelope or the end of the data means the server did not accept the
 * message (it takes responsibility only with its 250 to the data): that is EffectNotPerformedError,
 * with the reply's reason. A connection that fails or times out without a reply may have delivered
 * it: that error propagates and the ledger reports the email in doubt. Either way no raw address is
 * left in the error: nodemailer quotes the recipient ("Recipient command failed: 550 <x@y>").
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
        const effect = currentEffect();
        await transport.sendMail({
          from,
          to: message.to,
          subject: message.subject,
          text: message.text,
          // The effect this message is, as SES would carry it in its tags: the server's log can
          // settle an effect left in doubt, as SES's events do when deployed.
          ...(effect ? { headers: effectHeaders(effect) } : {}),
        });
      } catch (error) {
        throw classifySmtpError(error) ?? withoutAddresses(error);
      }
    },
    close: () => transport.close(),
  };
}

type SmtpRefusal = Extract<NotPerformedReason, 'throttled' | 'unauthorized' | 'invalid-request' | 'rejected'>;

/** What a later run or the operator can do, per reason; the error message ends with it. */
const WHAT_NEXT: Readonly<Record<SmtpRefusal, string>> = {
  [NotPerformedReason.Throttled]: 'the refusal is temporary; a later run may send it',
  [NotPerformedReason.Unauthorized]: 'every send fails until the SMTP credentials are accepted',
  [NotPerformedReason.InvalidRequest]:
    'the server refused the command; check the From and recipient addresses',
  [NotPerformedReason.Rejected]: 'the server refused this message or recipient; a later run may try it again',
};

/** A refusal with its reason, or undefined when the server gave no refusal (the email may have gone). */
function classifySmtpError(error: unknown): EffectNotPerformedError | undefined {
  const code = smtpCode(error);
  const reason = code === undefined ? undefined : refusalReason(code);
  if (reason === undefined) return undefined;
  const cause = withoutAddresses(error);
  return new EffectNotPerformedError(
    `the SMTP server refused the message (${safeErrorText(cause)}); nothing was sent; ${WHAT_NEXT[reason]}`,
    { cause, reason },
  );
}

/**
 * RFC 5321 reply codes. Every 4xx is transient by definition (421 closing, 450 mailbox busy, 451
 * local error, 452 storage, 454 SES's own throttling): throttled. 530/534/535/538 refuse the
 * authentication: unauthorized, for every message. 500-504 and 555 refuse the command's syntax or
 * sequence: invalid-request. Any other 5xx (550 no such user, 552, 553 bad address, 554) refuses
 * this message: rejected. A 2xx/3xx on an error is no refusal.
 */
function refusalReason(code: number): SmtpRefusal | undefined {
  if (code >= 400 && code < 500) return NotPerformedReason.Throttled;
  if ([530, 534, 535, 538].includes(code)) return NotPerformedReason.Unauthorized;
  if ((code >= 500 && code <= 504) || code === 555) return NotPerformedReason.InvalidRequest;
  if (code >= 500 && code < 600) return NotPerformedReason.Rejected;
  return undefined;
}

/** nodemailer reports the server's reply code on `responseCode`; only a server reply carries one. */
function smtpCode(error: unknown): number | undefined {
  const code = (error as { responseCode?: unknown } | null)?.responseCode;
  return typeof code === 'number' ? code : undefined;
}
