import { createHash } from 'node:crypto';
import {
  BatchEntryIdsNotDistinct,
  BatchRequestTooLong,
  type BatchResultErrorEntry,
  ChangeMessageVisibilityCommand,
  DeleteMessageCommand,
  EmptyBatchRequest,
  MessageNotInflight,
  QueueDoesNotExist,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  type SendMessageBatchRequestEntry,
  type SendMessageBatchResultEntry,
  SendMessageCommand,
  SQSClient,
  SQSServiceException,
  TooManyEntriesInBatchRequest,
} from '@aws-sdk/client-sqs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, it } from 'vitest';
import { InProcessWorkQueue } from '../../shared/continuation/in-process-work-queue.js';
import { SqsWorkQueue } from '../../shared/continuation/sqs-work-queue.js';
import { BatchSendError, WorkQueueError } from '../../shared/continuation/work-queue.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { CONTRACT_QUEUE, describeWorkQueueContract } from './work-queue-contract.js';

/*
 * SQS cannot run here, so the adapter is held to the contract against aws-sdk-client-mock answering
 * the five calls involved (SendMessage, SendMessageBatch and ChangeMessageVisibility from the
 * adapter, ReceiveMessage and DeleteMessage from the test, as Lambda's event source mapping makes
 * them) the way SQS does: its parameter bounds (whole seconds, DelaySeconds ≤ 900,
 * VisibilityTimeout ≤ 43,200, 1 to 10 entries of distinct Ids and 256 KiB a batch), its errors
 * (MessageNotInflight, InvalidParameterValue, QueueDoesNotExist, the batch errors, a Failed entry)
 * and its queue semantics, which the in-process queue models on the same injected clock. What this proves is the adapter's half:
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

/** SQS's answer for an entry it took. */
function succeeded(entry: SendMessageBatchRequestEntry): SendMessageBatchResultEntry {
  return {
    Id: entry.Id,
    MessageId: `sent-${entry.Id}`,
    MD5OfMessageBody: createHash('md5').update(String(entry.MessageBody)).digest('hex'),
  };
}

/** An SQS queue behind the mocked client: SQS's checks and errors around the modelled queue. */
function sqsBehaviour(clock: ManualClock) {
  const model = new InProcessWorkQueue({ clock, ...CONTRACT_QUEUE });
  /** Bodies whose next send SQS fails, as a Failed entry of the batch. */
  const refused = new Set<string>();
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
  sqs.on(SendMessageBatchCommand).callsFake(async (input) => {
    knownQueue(input.QueueUrl);
    const entries: readonly SendMessageBatchRequestEntry[] = input.Entries ?? [];
    const meta = { $metadata: {} };
    if (entries.length === 0) {
      throw new EmptyBatchRequest({ ...meta, message: 'There should be at least one entry in the request.' });
    }
    if (entries.length > 10) {
      throw new TooManyEntriesInBatchRequest({
        ...meta,
        message: `Maximum number of entries per request are 10. You have sent ${entries.length}.`,
      });
    }
    if (new Set(entries.map((e) => e.Id)).size < entries.length) {
      throw new BatchEntryIdsNotDistinct({ ...meta, message: 'Id must be distinct among batch entries.' });
    }
    const bytes = entries.reduce((n, e) => n + Buffer.byteLength(String(e.MessageBody), 'utf8'), 0);
    if (bytes > 262_144) {
      throw new BatchRequestTooLong({
        ...meta,
        message: `Batch requests cannot be longer than 262144 bytes. You have sent ${bytes} bytes.`,
      });
    }
    const Successful: SendMessageBatchResultEntry[] = [];
    const Failed: BatchResultErrorEntry[] = [];
    for (const entry of entries) {
      const body = String(entry.MessageBody);
      if (refused.delete(body)) {
        Failed.push({
          Id: entry.Id,
          SenderFault: false,
          Code: 'InternalError',
          Message: 'We encountered an internal error. Please try again.',
        });
        continue;
      }
      await model.send(body, wholeSeconds('DelaySeconds', entry.DelaySeconds, 900) * 1000);
      Successful.push(succeeded(entry));
    }
    return { Successful, Failed };
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
  return { model, refused };
}

describeWorkQueueContract('SQS (aws-sdk-client-mock answering as SQS)', async () => {
  const clock = new ManualClock();
  const { model, refused } = sqsBehaviour(clock);
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
    refuse: (body) => {
      refused.add(body);
    },
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

  /**
   * Answers each SendMessageBatch with every entry Successful, except request number `failIn.request`:
   * it fails outright with `error`, or answers entry `entryId` Failed.
   */
  function answerBatches(
    failIn?: { readonly request: number } & ({ readonly entryId: string } | { readonly error: Error }),
  ) {
    let requests = 0;
    sqs.on(SendMessageBatchCommand).callsFake(async (input) => {
      const request = ++requests;
      if (request === failIn?.request && 'error' in failIn) throw failIn.error;
      const entries: readonly SendMessageBatchRequestEntry[] = input.Entries ?? [];
      const failing = (id: string | undefined) =>
        request === failIn?.request && 'entryId' in failIn && id === failIn.entryId;
      return {
        Successful: entries.filter((e) => !failing(e.Id)).map(succeeded),
        Failed: entries
          .filter((e) => failing(e.Id))
          .map((e) => ({ Id: e.Id, SenderFault: false, Code: 'InternalError', Message: 'internal error' })),
      };
    });
  }
  /** What SQS throws once the SDK's retries of a throttled request are spent. */
  const rateExceeded = () =>
    new SQSServiceException({
      name: 'RequestThrottled',
      $fault: 'client',
      $metadata: {},
      message: 'Rate exceeded',
    });
  /** The adapter, its client making one attempt per request. */
  const oneAttemptQueue = () =>
    new SqsWorkQueue({ queueUrl: QUEUE_URL, client: new SQSClient({ region: 'eu-west-1', maxAttempts: 1 }) });
  const batchInputs = () => sqs.commandCalls(SendMessageBatchCommand).map((c) => c.args[0].input);
  const bodies = (count: number, size = 20) =>
    Array.from({ length: count }, (_, i) => `${i}`.padEnd(size, '.'));

  it('sends 23 messages as 3 SendMessageBatch requests of 10, 10 and 3, and no SendMessage', async () => {
    answerBatches();
    const sent = bodies(23);
    await oneAttemptQueue().sendBatch(sent, 1_001);
    const requests = batchInputs();
    expect(requests.map((r) => r.Entries?.length)).toEqual([10, 10, 3]);
    expect(requests.every((r) => r.QueueUrl === QUEUE_URL)).toBe(true);
    expect(requests.flatMap((r) => r.Entries ?? []).map((e) => e.MessageBody)).toEqual(sent);
    expect(requests.flatMap((r) => r.Entries ?? []).every((e) => e.DelaySeconds === 2)).toBe(true);
    expect(requests.map((r) => new Set(r.Entries?.map((e) => e.Id)).size)).toEqual([10, 10, 3]);
    expect(sqs.commandCalls(SendMessageCommand)).toHaveLength(0);
  });

  it('makes no request for an empty list', async () => {
    answerBatches();
    await oneAttemptQueue().sendBatch([], 0);
    expect(sqs.calls()).toHaveLength(0);
  });

  it('splits a request at 256 KiB of bodies, counted in UTF-8 bytes', async () => {
    answerBatches();
    // 30 KiB each: 8 fit in 256 KiB.
    await oneAttemptQueue().sendBatch(bodies(10, 30 * 1024), 0);
    // 100,000 characters of 2 bytes each: one a request, though two would fit counted in characters.
    await oneAttemptQueue().sendBatch(['é'.repeat(100_000), 'é'.repeat(100_000)], 0);
    expect(batchInputs().map((r) => r.Entries?.length)).toEqual([8, 2, 1, 1]);
  });

  it('counts only the Successful entries of an answer with a Failed one, and sends no request after it', async () => {
    answerBatches({ request: 2, entryId: '4' });
    const error = await oneAttemptQueue()
      .sendBatch(bodies(23), 0)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BatchSendError);
    expect(error).toBeInstanceOf(WorkQueueError);
    expect(error).toMatchObject({ operation: 'sendBatch', sent: 19, total: 23 });
    expect((error as BatchSendError).cause).toMatchObject({
      name: 'InternalError',
      message: 'internal error',
    });
    expect((error as Error).message).toContain(`sent 19 of 23 messages to ${QUEUE_URL}`);
    expect((error as Error).message).toContain('InternalError: internal error');
    expect(batchInputs()).toHaveLength(2);
  });

  it('counts the requests before one SQS refused outright, and keeps its error as the cause', async () => {
    const throttled = rateExceeded();
    answerBatches({ request: 2, error: throttled });
    const error = await oneAttemptQueue()
      .sendBatch(bodies(23), 0)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BatchSendError);
    expect(error).toMatchObject({ sent: 10, total: 23, cause: throttled });
    expect((error as Error).message).toContain('sqs:SendMessage');
    expect(batchInputs()).toHaveLength(2);
  });

  it('fails a send SQS refused with a WorkQueueError that names the queue and keeps the cause', async () => {
    const throttled = rateExceeded();
    sqs.on(SendMessageCommand).rejects(throttled);
    const queue = oneAttemptQueue();
    const error = await queue.send('a', 0).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WorkQueueError);
    expect(error).toMatchObject({ operation: 'send', cause: throttled });
    expect((error as Error).message).toContain(QUEUE_URL);
    expect((error as Error).message).toContain('sqs:SendMessage');
  });
});
