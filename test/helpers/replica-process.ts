/**
 * One replica of the weekly report in a real child process, for crash tests: it runs the handler
 * against the DynamoDB endpoint and SMTP server it is given, with the system clock, and prints
 * `sent <n>` after each email the SMTP server accepted, so the parent can SIGKILL it mid-run.
 */
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import { createDynamoClient } from '../../shared/backends/dynamodb/dynamodb-backend.js';
import { smtpSender } from '../../shared/effects/smtp-email-sender.js';
import { createJobHandler } from '../../shared/job/lambda-handler.js';
import { silentLog } from '../../shared/telemetry/log.js';
import { emfMetrics } from '../../shared/telemetry/metrics.js';
import { testBackend } from './harness.js';

const env = (name: string) => {
  const value = process.env[name];
  if (!value) throw new Error(`replica-process needs ${name}`);
  return value;
};

const smtp = smtpSender({ host: '127.0.0.1', port: Number(env('SMTP_PORT')), maxConnections: 4 });
let sent = 0;
const handler = createJobHandler(
  weeklyReportJob({
    customers: () => syntheticCustomers(Number(env('TOTAL'))),
    sender: {
      async send(message, options) {
        await smtp.send(message, options);
        process.stdout.write(`sent ${++sent}\n`);
      },
    },
    concurrency: 4,
  }),
  {
    backend: testBackend(createDynamoClient({ endpoint: env('DYNAMO_ENDPOINT') }), env('TABLE')),
    metrics: () => emfMetrics({ jobId: 'weekly-report', write: () => {} }),
    log: silentLog,
  },
);
const result = await handler({ jobId: 'weekly-report', scheduledTime: env('WINDOW'), attemptNumber: '1' });
process.stdout.write(`result ${JSON.stringify(result)}\n`);
smtp.close();
