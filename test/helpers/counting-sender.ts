import type { EmailMessage, EmailSender } from '../../shared/effects/email-sender.js';

/** A sender that counts what it was asked to send, per recipient. */
export class CountingSender implements EmailSender {
  readonly perRecipient = new Map<string, number>();
  total = 0;

  constructor(private readonly behaviour: (message: EmailMessage) => Promise<void> = async () => {}) {}

  async send(message: EmailMessage): Promise<void> {
    await this.behaviour(message);
    this.total++;
    this.perRecipient.set(message.to, (this.perRecipient.get(message.to) ?? 0) + 1);
  }

  /** Recipients sent more than once. */
  duplicates(): number {
    let count = 0;
    for (const n of this.perRecipient.values()) if (n > 1) count++;
    return count;
  }
}
