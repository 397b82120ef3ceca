import type { EmailMessage, EmailSender } from '../effects/email-sender.js';

/**
 * An EmailSender for tests: keeps every message it sent and counts them per recipient, so a test
 * can assert that nobody got two. Give it a `behaviour` to make sends slow or fail: throw
 * EffectNotPerformedError for a refusal (the effect is recorded FAILED and retried by later runs, up to
 * its attempts), anything else for an outcome nobody can know (reported in doubt, never re-sent blindly).
 * @example
 * const sender = new RecordingEmailSender();
 * await runJobOnce(weeklyReportJob({ customers, sender }));
 * expect(sender.duplicates()).toBe(0);
 */
export class RecordingEmailSender implements EmailSender {
  /** Every message sent, in order. */
  readonly sent: EmailMessage[] = [];
  /** Messages sent per recipient address. */
  readonly perRecipient = new Map<string, number>();
  /** Messages sent in all. */
  total = 0;

  /**
   * @param behaviour runs before each message counts as sent; a message whose behaviour throws is
   * not recorded. Default: none (every send succeeds at once).
   */
  constructor(
    private readonly behaviour: (
      message: EmailMessage,
      signal?: AbortSignal,
    ) => Promise<void> = async () => {},
  ) {}

  async send(message: EmailMessage, options: { signal?: AbortSignal } = {}): Promise<void> {
    await this.behaviour(message, options.signal);
    this.sent.push(message);
    this.total++;
    this.perRecipient.set(message.to, (this.perRecipient.get(message.to) ?? 0) + 1);
  }

  /** How many recipients were sent more than one message. */
  duplicates(): number {
    let count = 0;
    for (const n of this.perRecipient.values()) if (n > 1) count++;
    return count;
  }
}
