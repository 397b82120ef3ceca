import { jobHandlerFromEnvironment, SesEmailSender } from 'slotguard';
import { weeklyReportJob } from './job.js';
import { syntheticCustomerSource } from './recipients.js';

/** The weekly report's Lambda. Replace `syntheticCustomerSource` with your customer source. */
export const handler = jobHandlerFromEnvironment(
  weeklyReportJob({
    customers: () => syntheticCustomerSource(Number(process.env.WEEKLY_REPORT_CUSTOMERS ?? 0)),
    sender: SesEmailSender.fromEnvironment(),
  }),
);
