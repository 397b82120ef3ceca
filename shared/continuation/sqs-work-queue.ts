import {
  ChangeMessageVisibilityCommand,
  MessageNotInflight,
  ReceiptHandleIsInvalid,
  SendMessageBatchCommand,
  type SendMessageBatchCommandOutput,
  SendMessageCommand,
  SQSClient,
  SQSServiceException,
} from '@aws-sdk/client-sqs';
import { safeErrorText } from '../telemetry/safe-error-text.js';
import {
  BatchSendError,
  batchRequests,
  MAX_DELAY_MS,
  MAX_VISIBILITY_MS,
  queueSeconds,
  type VisibilityOutcome,
  type WorkQueue,
  WorkQueueError,
} from './work-queue.js';

/** Options of an `SqsWorkQueue`. */
export interface SqsWorkQueueOptions {
  /** The queue's URL (`https://sqs.<region>.amazonaws.com/<account>/<name>`). */
  readonly queueUrl: string;
  /**
   * The SQS client, or a function that builds it on first use. A Lambda that finishes its window
   * in one run never touches the queue, so by default no client is built at cold start.
   * @default a new SQSClient for the region of the environment, built on first use
   */
  readonly client?: SQSClient | (() => SQSClient);
}

/**
 * The work queue on Amazon SQS: SendMessage and SendMessageBatch with DelaySeconds,
 * ChangeMessageVisibility. SQS's vocabulary stays here: a handle SQS no longer knows
 * (MessageNotInflight, ReceiptHandleIsInvalid) is the port's `not-in-flight`; a batch answer's
 * Failed entries a BatchSendError; any other failure, after the SDK's own retries, a WorkQueueError.
 * @example const queue = new SqsWorkQueue({ queueUrl: process.env.SLOTGUARD_WORK_QUEUE_URL });
 */
export class SqsWorkQueue implements WorkQueue {
  readonly #queueUrl: string;
  readonly #client: () => SQSClient;

  constructor(options: SqsWorkQueueOptions) {
    this.#queueUrl = options.queueUrl;
    const given = options.client;
    let built: SQSClient | undefined;
    this.#client =
      given instanceof SQSClient
        ? () => given
        : () => {
            built ??= given ? given() : new SQSClient({});
            return built;
          };
  }

  async send(body: string, delayMs: number): Promise<void> {
    const command = new SendMessageCommand({
      QueueUrl: this.#queueUrl,
      MessageBody: body,
      DelaySeconds: queueSeconds(delayMs, MAX_DELAY_MS, 'delayMs'),
    });
    try {
      await this.#client().send(command);
    } catch (cause) {
      throw new WorkQueueError(
        'send',
        `could not send a message to ${this.#queueUrl} (${safeErrorText(cause)}); check the function's ` +
          'sqs:SendMessage permission on the queue and that the queue exists',
        { cause },
      );
    }
  }

  async sendBatch(bodies: readonly string[], delayMs: number): Promise<void> {
    const delaySeconds = queueSeconds(delayMs, MAX_DELAY_MS, 'delayMs');
    const total = bodies.length;
    let sent = 0;
    for (const request of batchRequests(bodies)) {
      let answer: SendMessageBatchCommandOutput;
      try {
        answer = await this.#client().send(
          new SendMessageBatchCommand({
            QueueUrl: this.#queueUrl,
            // An entry's Id only has to be unique within its request: its place is enough.
            Entries: request.map((body, i) => ({
              Id: String(i),
              MessageBody: body,
              DelaySeconds: delaySeconds,
            })),
          }),
        );
      } catch (cause) {
        throw new BatchSendError(
          `sent ${sent} of ${total} messages to ${this.#queueUrl}, then a SendMessageBatch of ${request.length} ` +
            `failed (${safeErrorText(cause)}); check the function's sqs:SendMessage permission on the queue ` +
            '(it authorises SendMessageBatch) and that the queue exists',
          { sent, total },
          { cause },
        );
      }
      // Only the entries SQS lists as Successful count: a Failed entry, or one the answer leaves
      // out, is a message not sent.
      const confirmed = answer.Successful?.length ?? 0;
      const failed = answer.Failed ?? [];
      sent += confirmed;
      if (failed.length === 0 && confirmed === request.length) continue;
      const first = failed[0];
      const cause = new SQSServiceException({
        name: first?.Code ?? 'MissingEntries',
        $fault: first?.SenderFault ? 'client' : 'server',
        $metadata: {},
        message:
          first?.Message ?? `the answer listed ${confirmed + failed.length} of ${request.length} entries`,
      });
      throw new BatchSendError(
        `sent ${sent} of ${total} messages to ${this.#queueUrl}: SQS refused ${request.length - confirmed} of a ` +
          `SendMessageBatch of ${request.length} (${safeErrorText(cause)}); the rest of the batch was not sent`,
        { sent, total },
        { cause },
      );
    }
  }

  async changeVisibility(receiptHandle: string, visibleInMs: number): Promise<VisibilityOutcome> {
    const command = new ChangeMessageVisibilityCommand({
      QueueUrl: this.#queueUrl,
      ReceiptHandle: receiptHandle,
      VisibilityTimeout: queueSeconds(visibleInMs, MAX_VISIBILITY_MS, 'visibleInMs'),
    });
    try {
      await this.#client().send(command);
      return 'changed';
    } catch (cause) {
      if (cause instanceof MessageNotInflight || cause instanceof ReceiptHandleIsInvalid)
        return 'not-in-flight';
      throw new WorkQueueError(
        'changeVisibility',
        `could not change a message's visibility on ${this.#queueUrl} (${safeErrorText(cause)}); the message ` +
          "is delivered again when its current visibility ends; check the function's sqs:ChangeMessageVisibility " +
          'permission',
        { cause },
      );
    }
  }
}
