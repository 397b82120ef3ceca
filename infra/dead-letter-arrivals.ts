import type { Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as sqs from 'aws-cdk-lib/aws-sqs';

/**
 * New arrivals in a dead-letter queue per `period`: how much the queue's depth rose. The depth
 * alone would stay in ALARM while the first dead letter sits, so a second would page nobody.
 *
 * Why not NumberOfMessagesSent: SQS counts SendMessage calls there, and a message a queue's redrive
 * policy moves after `maxReceiveCount` receives is not sent, so the likeliest dead letter would
 * never count. ApproximateNumberOfMessagesVisible counts every message however it arrived (a
 * redrive, Scheduler's, EventBridge's or Lambda's dead-letter delivery, a manual send). Its Maximum
 * over the period rides out an operator inspecting the queue (that hides messages for the
 * visibility timeout, then they come back); NotVisible is left out because it can read 1 for an
 * empty queue. FILL(…, 0): SQS stops reporting an empty, idle queue, and the first arrival must
 * still be a rise.
 */
export function deadLetterArrivals(queue: sqs.IQueue, period: Duration): cloudwatch.MathExpression {
  return new cloudwatch.MathExpression({
    expression: 'DIFF(FILL(depth, 0))',
    usingMetrics: {
      depth: queue.metricApproximateNumberOfMessagesVisible({ period, statistic: cloudwatch.Stats.MAXIMUM }),
    },
    period,
    label: 'dead letters arrived',
  });
}
