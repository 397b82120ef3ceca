import { ConfigurationError, type EmailSender, type JobDefinition, type JobSpec } from 'slotguard';
import { jobCatalog } from './catalog.js';
import { PAYMENT_REMINDER_JOB_ID, paymentReminderJob, syntheticDueInvoices } from './payment-reminder/job.js';
import { WEEKLY_REPORT_JOB_ID, weeklyReportJob } from './weekly-report/job.js';
import { syntheticCustomerSource, syntheticCustomers } from './weekly-report/recipients.js';

/** One effect of a window, as the job keys it and where its email goes. */
export interface LocalEffect {
  /** The effect key the job passes to `onceEach` (hashed before it is stored). */
  readonly key: string;
  /** The recipient's address, to match against what the SMTP server received. */
  readonly address: string;
}

/** A catalog job wired for this machine: the same JobSpec and job code, local dependencies. */
export interface LocalJob {
  readonly spec: JobSpec;
  /** The job with its mail going through `sender` and synthetic recipients. */
  definition(sender: EmailSender): JobDefinition;
  /** The effects one window performs, in the order the job performs them. */
  effects(window: Date): AsyncIterable<LocalEffect>;
  /** Effects per window. */
  readonly effectsPerWindow: number;
}

/** How many recipients the synthetic local data has. */
export interface LocalJobOptions {
  /**
   * Weekly report customers.
   * @default 12_400 (the incident's list)
   */
  readonly customers?: number;
  /**
   * Payment reminders per 15-minute window.
   * @default 5
   */
  readonly invoicesPerWindow?: number;
}

/** The local data's defaults: the incident's 12,400 customers. */
export const LOCAL_JOB_DEFAULTS = { customers: 12_400, invoicesPerWindow: 5 } as const;

/**
 * Every job of functions/catalog.ts with local dependencies, for the local runner (`npm start`)
 * and the operator CLI's local backfill. A catalog job missing here is a configuration error that
 * names this file.
 */
export function localJobs(options: LocalJobOptions = {}): LocalJob[] {
  return jobCatalog.map((spec) => localJob(spec, options));
}

/** One catalog job wired locally; see localJobs. */
export function localJob(spec: JobSpec, options: LocalJobOptions = {}): LocalJob {
  const customers = options.customers ?? LOCAL_JOB_DEFAULTS.customers;
  const invoices = options.invoicesPerWindow ?? LOCAL_JOB_DEFAULTS.invoicesPerWindow;
  switch (spec.id) {
    case WEEKLY_REPORT_JOB_ID:
      return {
        spec,
        // The source the deployed handler uses: a continuation reads on from its checkpoint.
        definition: (sender) =>
          weeklyReportJob({ customers: () => syntheticCustomerSource(customers), sender }),
        async *effects() {
          for await (const customer of syntheticCustomers(customers)) {
            yield { key: customer.email, address: customer.email };
          }
        },
        effectsPerWindow: customers,
      };
    case PAYMENT_REMINDER_JOB_ID:
      return {
        spec,
        definition: (sender) =>
          paymentReminderJob({ dueInvoices: (window) => syntheticDueInvoices(window, invoices), sender }),
        async *effects(window) {
          for await (const invoice of syntheticDueInvoices(window, invoices)) {
            yield { key: invoice.invoiceId, address: invoice.email };
          }
        },
        effectsPerWindow: invoices,
      };
    default:
      throw new ConfigurationError(
        'jobCatalog',
        `job '${spec.id}' is in functions/catalog.ts but has no local wiring; add a case for it to functions/local-jobs.ts`,
      );
  }
}

/** The catalog job `jobId`, wired locally, or a message listing the ones there are. */
export function findLocalJob(jobId: string, options: LocalJobOptions = {}): LocalJob {
  const spec = jobCatalog.find((job) => job.id === jobId);
  if (!spec) {
    throw new ConfigurationError(
      'job',
      `there is no job ${JSON.stringify(jobId)} in functions/catalog.ts; the jobs are ${jobCatalog.map((j) => j.id).join(', ')}`,
    );
  }
  return localJob(spec, options);
}
