import { jobHandlerFromEnvironment, SesEmailSender } from 'slotguard';
import { paymentReminderJob, syntheticDueInvoices } from './job.js';

/** The payment reminder's Lambda. Replace `syntheticDueInvoices` with your billing query. */
export const handler = jobHandlerFromEnvironment(
  paymentReminderJob({
    dueInvoices: (window) => syntheticDueInvoices(window, Number(process.env.PAYMENT_REMINDER_INVOICES ?? 0)),
    sender: SesEmailSender.fromEnvironment(),
  }),
);
