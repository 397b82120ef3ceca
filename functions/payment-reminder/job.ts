import { defineJob, type EmailSender, type JobDefinition } from 'slotguard';

export const PAYMENT_REMINDER_JOB_ID = 'payment-reminder';

/** An unpaid invoice and who to remind. */
export interface DueInvoice {
  readonly invoiceId: string;
  readonly email: string;
  readonly dueAt: Date;
}

export interface PaymentReminderDeps {
  /**
   * Invoices that fell due in the 15 minutes before `window`, so each invoice belongs to exactly
   * one window and is reminded once.
   */
  readonly dueInvoices: (window: Date) => AsyncIterable<DueInvoice>;
  readonly sender: EmailSender;
}

/** The rate-scheduled example: every 15 minutes, one reminder per invoice that fell due. */
export function paymentReminderJob(deps: PaymentReminderDeps): JobDefinition {
  return defineJob({
    id: PAYMENT_REMINDER_JOB_ID,
    async run(ctx) {
      await ctx.onceEach(
        deps.dueInvoices(ctx.scheduledTime),
        { key: (invoice) => invoice.invoiceId },
        (invoice, signal) =>
          deps.sender.send(
            {
              to: invoice.email,
              subject: `Invoice ${invoice.invoiceId} is due`,
              text: `Invoice ${invoice.invoiceId} fell due at ${invoice.dueAt.toISOString()}.\n`,
            },
            { signal },
          ),
      );
    },
  });
}

/**
 * The example's invoices: `perWindow` synthetic invoices falling due in each 15-minute window,
 * named after the window so each exists in exactly one. A real deployment queries its billing store.
 */
export async function* syntheticDueInvoices(window: Date, perWindow: number): AsyncGenerator<DueInvoice> {
  const stamp = window.toISOString().slice(0, 16).replace(/[-:T]/g, '');
  for (let i = 1; i <= perWindow; i++) {
    const invoiceId = `inv-${stamp}-${i}`;
    yield {
      invoiceId,
      email: `billing-${invoiceId}@example.com`,
      dueAt: new Date(window.getTime() - i * 1000),
    };
  }
}
