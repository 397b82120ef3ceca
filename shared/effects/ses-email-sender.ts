import { SESv2Client, SendEmailCommand } from '@aws-sdk/client-sesv2';
import type { Clock } from '../clock.js';
import { ConfigurationError } from '../errors.js';
import { sendRateLimiterFromEnvironment } from '../job/environment-send-rate.js';
import { RuntimeEnv } from '../job/runtime-env.js';
import { withoutAddresses } from '../telemetry/safe-error-text.js';
import type { EmailMessage, EmailSender } from './email-sender.js';
import { takeSendSlot } from './send-slot.js';
import { classifySesError } from './ses-error-classification.js';
import { type RateLimiter, TokenBucket } from './token-bucket.js';

/** Options of a `SesEmailSender`. */
export interface SesEmailSenderOptions {
  /** The From address, at a verified SES identity. */
  readonly fromAddress: string;
  /**
   * The SES v2 client. Keep its retries off (`maxAttempts: 1`): the SDK retries timeouts and
   * dropped connections, and a retried SendEmail whose first response was lost sends twice.
   * @default a new SESv2Client with maxAttempts 1, for the region of the environment, created on the
   * first send
   */
  readonly client?: SESv2Client;
  /**
   * Emails per second this sender keeps to, at most the account's SES maximum send rate. A sender
   * built with `new` keeps to it in its own process; `fromEnvironment` shares it across the job.
   * @default 1
   */
  readonly maxSendRatePerSecond?: number;
  /**
   * Limits the send rate instead of a token bucket built from `maxSendRatePerSecond`: one bucket
   * shared by several senders, or a SharedRateLimiter shared by every worker of a job.
   * @default a TokenBucket at maxSendRatePerSecond, burst 1, on `clock`
   */
  readonly rateLimiter?: RateLimiter;
  /** @default the system clock */
  readonly clock?: Clock;
  /**
   * An SES configuration set for the messages (event publishing, suppression overrides).
   * @default none
   */
  readonly configurationSetName?: string;
}

/**
 * Sends email through Amazon SES v2 at a bounded rate.
 *
 * The abort signal stops the wait for a send slot, not a send in flight: cancelling a request SES
 * may already have accepted would only turn a known outcome into an unknown one.
 *
 * What SES answers is read by `classifySesError`: a refusal SES gives before accepting the message
 * is an EffectNotPerformedError with its reason (and `systemic` when every other send will be
 * refused too); anything else (a 5xx, a timeout, a dropped connection) is rethrown as it came, since
 * SES may have sent the email. Either way no raw address is left in the error, its cause or their
 * stacks: SES quotes the recipient in its messages.
 *
 * @example
 * const sender = SesEmailSender.fromEnvironment();
 * await ctx.once(`weekly-report:${customer.id}`, () => sender.send({ to: customer.email, subject, text }));
 */
export class SesEmailSender implements EmailSender {
  // Created on the first send, not at cold start: a run that sends nothing (a duplicate fire, a
  // window already done) never pays for an SES client.
  #client: SESv2Client | undefined;
  readonly #fromAddress: string;
  readonly #limiter: RateLimiter;
  readonly #configurationSetName: string | undefined;

  constructor(options: SesEmailSenderOptions) {
    this.#client = options.client;
    this.#fromAddress = options.fromAddress;
    this.#limiter =
      options.rateLimiter ??
      new TokenBucket({
        ratePerSecond: options.maxSendRatePerSecond ?? 1,
        ...(options.clock ? { clock: options.clock } : {}),
      });
    this.#configurationSetName = options.configurationSetName;
  }

  /**
   * A sender configured from the variables the ScheduledJob construct sets: SLOTGUARD_SES_FROM,
   * SLOTGUARD_SEND_RATE, and SLOTGUARD_SEND_RATE_SCOPE. In a job's function the rate is the job's
   * total, shared by every worker sending at once (shards, continuations, a backfill next to a run)
   * through a SharedRateLimiter on the job's claims backend; with SLOTGUARD_SEND_RATE_SCOPE=process,
   * or outside a job (no SLOTGUARD_JOB_ID), each process keeps to it alone. See
   * sendRateLimiterFromEnvironment. A `rateLimiter` in `options` is used as given.
   */
  static fromEnvironment(
    env: Readonly<Record<string, string | undefined>> = process.env,
    options: Omit<SesEmailSenderOptions, 'fromAddress' | 'maxSendRatePerSecond'> = {},
  ): SesEmailSender {
    const fromAddress = env[RuntimeEnv.sesFromAddress];
    if (!fromAddress) {
      throw new ConfigurationError(
        RuntimeEnv.sesFromAddress,
        `${RuntimeEnv.sesFromAddress} is not set; give the ScheduledJob an \`ses\` prop (identity and fromAddress)`,
      );
    }
    const rawRate = env[RuntimeEnv.sendRatePerSecond];
    const rate = rawRate === undefined ? 1 : Number(rawRate);
    if (!(rate > 0) || !Number.isFinite(rate)) {
      throw new ConfigurationError(
        RuntimeEnv.sendRatePerSecond,
        `${RuntimeEnv.sendRatePerSecond} is ${JSON.stringify(rawRate)}; set a positive number of emails per second`,
      );
    }
    const rateLimiter =
      options.rateLimiter ??
      sendRateLimiterFromEnvironment(env, {
        ratePerSecond: rate,
        ...(options.clock ? { clock: options.clock } : {}),
      });
    return new SesEmailSender({ ...options, fromAddress, maxSendRatePerSecond: rate, rateLimiter });
  }

  /**
   * Sends one email. Throws EffectNotPerformedError when nothing was sent (the wait for the send
   * rate was cancelled, or SES refused the request); any other error means it may have been sent.
   */
  async send(message: EmailMessage, options: { signal?: AbortSignal } = {}): Promise<void> {
    await takeSendSlot(this.#limiter, options.signal, 'the SES send rate');
    const command = new SendEmailCommand({
      FromEmailAddress: this.#fromAddress,
      Destination: { ToAddresses: [message.to] },
      Content: {
        Simple: {
          Subject: { Data: message.subject, Charset: 'UTF-8' },
          Body: { Text: { Data: message.text, Charset: 'UTF-8' } },
        },
      },
      ...(this.#configurationSetName ? { ConfigurationSetName: this.#configurationSetName } : {}),
    });
    try {
      this.#client ??= defaultSesClient();
      await this.#client.send(command);
    } catch (error) {
      throw classifySesError(error) ?? withoutAddresses(error);
    }
  }
}

/**
 * An SES v2 client with SDK retries off: the SDK would retry timeouts and dropped connections, and
 * a retried SendEmail whose first response was lost sends the email twice. Refusals come back as
 * EffectNotPerformedError and a later run retries them, under the ledger.
 */
export function defaultSesClient(): SESv2Client {
  return new SESv2Client({ maxAttempts: 1 });
}

/**
 * Replaces anything shaped like an email address with `<address>`; kept here for the callers that
 * import it from the sender.
 */
export { redactAddresses } from '../telemetry/safe-error-text.js';
