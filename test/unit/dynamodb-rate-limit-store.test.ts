import {
  ConditionalCheckFailedException,
  DynamoDBClient,
  UpdateItemCommand,
  type UpdateItemCommandOutput,
} from '@aws-sdk/client-dynamodb';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, it } from 'vitest';
import { DynamoRateLimitStore } from '../../shared/backends/dynamodb/dynamodb-rate-limit-store.js';
import { StoreError } from '../../shared/errors.js';

/**
 * dynalite never returns the item that failed a condition, so the path where DynamoDB does
 * (ReturnValuesOnConditionCheckFailure ALL_OLD: the right second write, never a third) is checked
 * here on a mocked client. The timeline itself is held to its contract on dynalite.
 */
const ddb = mockClient(DynamoDBClient);
afterEach(() => ddb.reset());

const T0 = Date.parse('2026-11-30T06:00:00Z');

function conflict(nextAt?: number) {
  return new ConditionalCheckFailedException({
    message: 'The conditional request failed',
    $metadata: { httpStatusCode: 400 },
    ...(nextAt !== undefined ? { Item: { nextAt: { N: String(nextAt) } } } : {}),
  });
}

const store = () =>
  new DynamoRateLimitStore({
    client: new DynamoDBClient({ region: 'us-east-1' }),
    tableName: 'claims',
    jobId: 'weekly-report',
  });
const conditions = () =>
  ddb.commandCalls(UpdateItemCommand).map((call) => call.args[0].input.ConditionExpression);
/** DynamoDB's answers to the store's writes, in order: a failed condition, or the output. */
function answer(
  answers: (ConditionalCheckFailedException | Omit<UpdateItemCommandOutput, '$metadata'>)[],
): void {
  ddb.on(UpdateItemCommand).callsFake(async () => {
    const next = answers.shift();
    if (!next) throw new Error('the store sent more writes than the test expected');
    if (next instanceof Error) throw next;
    return next;
  });
}
const BUSY = 'nextAt >= :floor';
const QUIET = 'attribute_not_exists(nextAt) OR nextAt < :floor';

describe('DynamoRateLimitStore, with the item a failed condition returns', () => {
  it('sends the quiet write second when the busy write finds the timeline behind, and guesses quiet next time', async () => {
    const rateStore = store();
    answer([conflict(T0 - 60_000), {}, {}]);
    expect(await rateStore.reserve({ now: T0, spanMs: 100, notBeforeMs: -5 })).toEqual({ start: T0 - 5 });
    expect(await rateStore.reserve({ now: T0 + 10_000, spanMs: 100, notBeforeMs: 0 })).toEqual({
      start: T0 + 10_000,
    });
    expect(conditions()).toEqual([BUSY, QUIET, QUIET]);
    expect(rateStore.requests).toBe(3);
  });

  it('goes back to the busy write when another worker moved the timeline past its floor meanwhile', async () => {
    const rateStore = store();
    answer([
      conflict(T0 - 60_000),
      {},
      conflict(T0 + 700),
      { Attributes: { nextAt: { N: String(T0 + 800) } } },
    ]);
    await rateStore.reserve({ now: T0, spanMs: 100, notBeforeMs: 0 });
    expect(await rateStore.reserve({ now: T0 + 200, spanMs: 100, notBeforeMs: 0 })).toEqual({
      start: T0 + 700,
    });
    expect(conditions()).toEqual([BUSY, QUIET, QUIET, BUSY]);
  });

  it('gives up after 8 writes that each lost to another worker, naming the job, with nothing sent for it', async () => {
    ddb.on(UpdateItemCommand).rejects(conflict());
    const error = await store()
      .reserve({ now: T0, spanMs: 100, notBeforeMs: 0 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreError);
    expect((error as Error).message).toMatch(
      /send-rate timeline of job 'weekly-report' failed .*nothing was sent for it/,
    );
    expect(ddb.commandCalls(UpdateItemCommand)).toHaveLength(8);
  });
});
