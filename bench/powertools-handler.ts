/**
 * The weekly report as a team would write it with Powertools for AWS Lambda instead of slotguard:
 * Powertools' idempotency utility (DynamoDB persistence) around each SES send, and the Powertools
 * logger. Never deployed: `npm run bench` bundles it the way ScheduledJob bundles
 * functions/weekly-report/handler.ts and measures both side by side (bundle size, module init).
 */
import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { DynamoDBPersistenceLayer } from '@aws-lambda-powertools/idempotency/dynamodb';
import { Logger } from '@aws-lambda-powertools/logger';
import { SESv2Client, SendEmailCommand } from '@aws-sdk/client-sesv2';
import { syntheticCustomers } from '../functions/weekly-report/recipients.js';

const logger = new Logger({ serviceName: 'weekly-report' });
const persistenceStore = new DynamoDBPersistenceLayer({
  tableName: process.env.IDEMPOTENCY_TABLE ?? 'idempotency',
});
const config = new IdempotencyConfig({ eventKeyJmesPath: '[window, to]' });
const ses = new SESv2Client({ maxAttempts: 1 });

const sendOnce = makeIdempotent(
  async (message: { window: string; to: string; subject: string; text: string }) => {
    await ses.send(
      new SendEmailCommand({
        FromEmailAddress: process.env.SLOTGUARD_SES_FROM,
        Destination: { ToAddresses: [message.to] },
        Content: { Simple: { Subject: { Data: message.subject }, Body: { Text: { Data: message.text } } } },
      }),
    );
    return true;
  },
  { persistenceStore, config },
);

/** One fire of the weekly report: every customer, each send guarded by its own idempotency record. */
export const handler = async (
  event: { readonly scheduledTime: string },
  context: Parameters<IdempotencyConfig['registerLambdaContext']>[0],
) => {
  config.registerLambdaContext(context);
  let sent = 0;
  for await (const customer of syntheticCustomers(Number(process.env.WEEKLY_REPORT_CUSTOMERS ?? 0))) {
    await sendOnce({
      window: event.scheduledTime,
      to: customer.email,
      subject: 'Your weekly report',
      text: `Hello ${customer.id}`,
    });
    sent++;
  }
  logger.info('weekly report sent', { window: event.scheduledTime, sent });
};
