import type { EmailSender } from '../../shared/effects/email-sender.js';
import type { ResumableSource } from '../../shared/effects/resumable-source.js';
import { defineJob, type JobDefinition } from '../../shared/job/job-definition.js';
import type { Customer } from './recipients.js';

export const WEEKLY_REPORT_JOB_ID = 'weekly-report';

export interface WeeklyReportDeps {
  /**
   * The customers of one window, streamed. A ResumableSource lets a run that continues the window
   * read on from the last checkpoint rather than from the first customer.
   */
  readonly customers: (window: Date) => AsyncIterable<Customer> | ResumableSource<Customer>;
  readonly sender: EmailSender;
  /** Emails in flight at once. @default the run's effectConcurrency */
  readonly concurrency?: number;
}

/**
 * The incident's job: one weekly report per customer per week. Each email is one guarded effect
 * keyed by the customer's address, so three replicas, a retry or a takeover still send it once.
 */
export function weeklyReportJob(deps: WeeklyReportDeps): JobDefinition {
  return defineJob({
    id: WEEKLY_REPORT_JOB_ID,
    async run(ctx) {
      const week = ctx.scheduledTime.toISOString().slice(0, 10);
      await ctx.onceEach(
        deps.customers(ctx.scheduledTime),
        { key: (customer) => customer.email, ...(deps.concurrency ? { concurrency: deps.concurrency } : {}) },
        (customer, signal) =>
          deps.sender.send(
            {
              to: customer.email,
              subject: `Your weekly report for the week of ${week}`,
              text: `Hello ${customer.id},\n\nhere is your report for the week of ${week}.\n`,
            },
            { signal },
          ),
      );
    },
  });
}
