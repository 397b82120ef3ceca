import {
  ChangeMessageVisibilityCommand,
  DeleteMessageCommand,
  MessageNotInflight,
  QueueDoesNotExist,
  ReceiveMessageCommand,
  SendMessageCommand,
  SQSClient,
  SQSServiceException,
} from '@aws-sdk/client-sqs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, it } from 'vitest';
import { InProcessWorkQueue } from '../../shared/continuation/in-process-work-queue.js';
import { SqsWorkQueue } from '../../shared/continuation/sqs-work-queue.js';
import { WorkQueueError } from '../../shared/continuation/work-queue.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { CONTRACT_QUEUE, describeWorkQueueContract } from './work-queue-contract.js';

/*
 * SQS cannot run here, so the adapter is held to the contract against aws-sdk-client-mock answering
 * the four calls involved (SendMessage and ChangeMessageVisibility from the adapter, ReceiveMessage
 * and DeleteMessage from the test, as Lambda's event source mapping makes them) the way SQS does:
 * its parameter bounds (whole seconds, DelaySeconds ≤ 900, VisibilityTimeout ≤ 43,200), its errors
 * (MessageNotInflight, InvalidParameterValue, QueueDoesNotExist) and its queue semantics, which
 * the in-process queue models on the same injected clock. What this proves is the adapter's half:
 * the calls it makes, the units and bounds it sends, and how it reads SQS's answers.
 */

const QUEUE_URL = 'https://sqs.eu-west-1.amazonaws.com/123456789012/weekly-report-work';
const sqs = mockClient(SQSClient);
afterEach(() => sqs.reset());

function invalidParameter(message: string): SQSServiceException {
  return new SQSServiceException({ name: 'InvalidParameterValue', $fault: 'client', $metadata: {}, message });
}

function wholeSeconds(name: string, value: number | undefined, max: number): number {
  const seconds = value ?? 0;
  if (!Number.isInteger(seconds) || seconds < 0 || seconds > max) {
    throw invalidParameter(
      `Value ${seconds} for parameter ${name} is invalid. Reason: Must be >= 0 and <= ${max}.`,
    );
  }
  return seconds;
}

/** An SQS queue behind the mocked client: SQS's checks and errors around the modelled queue. */
function sqsBehaviour(clock: ManualClock) {
  const model = new InProcessWorkQueue({ clock, ...CONTRACT_QUEUE });
  const knownQueue = (url: string | undefined) => {
    if (url !== QUEUE_URL) {
      throw new QueueDoesNotExist({ message: 'The specified queue does not exist.', $metadata: {} });
    }
  };
  sqs.on(SendMessageCommand).callsFake(async (input) => {
    knownQueue(input.QueueUrl);
    await model.send(String(input.MessageBody), wholeSeconds('DelaySeconds', input.DelaySeconds, 900) * 1000);
    return { MessageId: 'sent' };
  });
  sqs.on(ChangeMessageVisibilityCommand).callsFake(async (input) => {
    knownQueue(input.QueueUrl);
    const seconds = wholeSeconds('VisibilityTimeout', input.VisibilityTimeout, 43_200);
    let outcome: string;
    try {
      outcome = await model.changeVisibility(String(input.ReceiptHandle), seconds * 1000);
    } catch {
      throw invalidParameter(
        `Value ${seconds} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]`,
      );
    }
    if (outcome === 'not-in-flight') {
      throw new MessageNotInflight({
        message: 'Message does not exist or is not available for visibility timeout change.',
        $metadata: {},
      });
    }
    return {};
  });
  sqs.on(ReceiveMessageCommand).callsFake(async (input) => {
    knownQueue(input.QueueUrl);
    const records = model.receive(input.MaxNumberOfMessages ?? 1);
    return {
      Messages: records.map((r) => ({
        MessageId: r.messageId,
        ReceiptHandle: r.receiptHandle,
        Body: r.body,
        Attributes: { ApproximateReceiveCount: r.attributes.ApproximateReceiveCount },
      })),
    };
  });
  sqs.on(DeleteMessageCommand).callsFake(async (input) => {
    knownQueue(input.QueueUrl);
    model.delete(String(input.ReceiptHandle));
    return {};
  });
  return model;
}

describeWorkQueueContract('SQS (aws-sdk-client-mock answering as SQS)', async () => {
  const clock = new ManualClock();
  const model = sqsBehaviour(clock);
  const client = new SQSClient({ region: 'eu-west-1' });
  return {
    queue: new SqsWorkQueue({ queueUrl: QUEUE_URL, client }),
    async receive(max = 1) {
      const { Messages = [] } = await client.send(
        new ReceiveMessageCommand({
          QueueUrl: QUEUE_URL,
          MaxNumberOfMessages: max,
          MessageSystemAttributeNames: ['ApproximateReceiveCount'],
        }),
      );
      return Messages.map((m) => ({
        messageId: String(m.MessageId),
        receiptHandle: String(m.ReceiptHandle),
        body: String(m.Body),
        receiveCount: Number(m.Attributes?.ApproximateReceiveCount),
      }));
    },
    async delete(handle) {
      await client.send(new DeleteMessageCommand({ QueueUrl: QUEUE_URL, ReceiptHandle: handle }));
    },
    advance: (ms) => clock.advance(ms),
    deadLetterBodies: async () => model.deadLetters.map((d) => d.body),
  };
});

describe('the SQS adapter', () => {
  it('sends whole seconds, rounded up, to the queue it was given', async () => {
    sqs.on(SendMessageCommand).resolves({ MessageId: 'm-1' });
    sqs.on(ChangeMessageVisibilityCommand).resolves({});
    const queue = new SqsWorkQueue({ queueUrl: QUEUE_URL, client: new SQSClient({ region: 'eu-west-1' }) });
    await queue.send('{"jobId":"weekly-report"}', 1_001);
    await queue.changeVisibility('handle-1', 120_000);
    expect(sqs.commandCalls(SendMessageCommand).map((c) => c.args[0].input)).toEqual([
      { QueueUrl: QUEUE_URL, MessageBody: '{"jobId":"weekly-report"}', DelaySeconds: 2 },
    ]);
    expect(sqs.commandCalls(ChangeMessageVisibilityCommand).map((c) => c.args[0].input)).toEqual([
      { QueueUrl: QUEUE_URL, ReceiptHandle: 'handle-1', VisibilityTimeout: 120 },
    ]);
  });

  it('builds no SQS client until the queue is first used, and then one', async () => {
    sqs.on(SendMessageCommand).resolves({ MessageId: 'm-1' });
    let built = 0;
    const queue = new SqsWorkQueue({
      queueUrl: QUEUE_URL,
      client: () => {
        built++;
        return new SQSClient({ region: 'eu-west-1' });
      },
    });
    expect(built).toBe(0);
    await queue.send('a', 0);
    await queue.send('b', 0);
    expect(built).toBe(1);
  });

  it('fails a send SQS refused with a WorkQueueError that names the queue and keeps the cause', async () => {
    const throttled = new SQSServiceException({
      name: 'RequestThrottled',
      $fault: 'client',
      $metadata: {},
      message: 'Rate exceeded',
    });
    sqs.on(SendMessageCommand).rejects(throttled);
    const queue = new SqsWorkQueue({
      queueUrl: QUEUE_URL,
      client: new SQSClient({ region: 'eu-west-1', maxAttempts: 1 }),
    });
    const error = await queue.send('a', 0).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WorkQueueError);
    expect(error).toMatchObject({ operation: 'send', cause: throttled });
    expect((error as Error).message).toContain(QUEUE_URL);
    expect((error as Error).message).toContain('sqs:SendMessage');
  });
});
