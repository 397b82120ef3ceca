import {
  DynamoDBClient,
  GetItemCommand,
  QueryCommand,
  type QueryCommandInput,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, it } from 'vitest';
import { DynamoEffectLedger } from '../../shared/backends/dynamodb/dynamodb-effect-ledger.js';

/**
 * What reading a window's done marks sends, on a mocked client: the SES event recorder is granted a
 * Query that may name and return only `pk`, `sk` and `doneMarks` (test/infra/ses-event-recorder.test.ts),
 * so a Query naming anything else would be refused in AWS, where no local test would notice.
 */
const slot = { jobId: 'weekly-report', window: '2026-11-30T06:00:00Z' };
const T0 = Date.parse('2026-11-30T06:00:05Z');
const reservation = (keyHash: string, seq: number, shard?: number) => ({
  pk: { S: `weekly-report#2026-11-30T06:00:00Z#fx${Number.parseInt(keyHash.charAt(0), 16)}` },
  sk: { S: keyHash },
  state: { S: 'RESERVED' },
  epoch: { N: '1' },
  owner: { S: 'a' },
  seq: { N: String(seq) },
  ...(shard !== undefined ? { shard: { N: String(shard) } } : {}),
});
const word = { outcome: 'accepted', event: 'Send', at: T0 + 30, epoch: 1 } as const;

const ddb = mockClient(DynamoDBClient);
afterEach(() => ddb.reset());

function ledger() {
  return new DynamoEffectLedger({
    client: new DynamoDBClient({ region: 'us-east-1' }),
    tableName: 't',
    expiresAtSeconds: () => 0,
  });
}

describe("a window's done marks", () => {
  it('are read with one consistent Query of the slot partition naming only the key and the marks', async () => {
    ddb.on(GetItemCommand).resolves({ Item: reservation('a1', 0) });
    ddb.on(QueryCommand).resolves({
      Items: [{ sk: { S: 'slot' }, doneMarks: { S: '{"1":{"below":1,"open":[]}}' } }],
    });

    expect(await ledger().read(slot, 'a1')).toMatchObject({ state: 'DONE', seq: 0 });

    const queries = ddb.commandCalls(QueryCommand).map((call) => call.args[0].input as QueryCommandInput);
    expect(queries).toHaveLength(1);
    expect(queries[0]).toMatchObject({
      KeyConditionExpression: '#pk = :pk',
      ExpressionAttributeValues: { ':pk': { S: 'weekly-report#2026-11-30T06:00:00Z' } },
      ConsistentRead: true,
      Select: 'SPECIFIC_ATTRIBUTES',
    });
    expect(Object.values(queries[0]?.ExpressionAttributeNames ?? {}).sort()).toEqual([
      'doneMarks',
      'pk',
      'sk',
    ]);
  });

  it("read every page, and a shard's reservation by its own shard's marks", async () => {
    ddb.on(GetItemCommand).resolves({ Item: reservation('b2', 4, 3) });
    ddb
      .on(QueryCommand)
      .resolvesOnce({
        Items: [{ sk: { S: 'slot' }, doneMarks: { S: '{"1":{"below":9,"open":[]}}' } }],
        LastEvaluatedKey: { pk: { S: 'weekly-report#2026-11-30T06:00:00Z' }, sk: { S: 'slot' } },
      })
      .resolvesOnce({
        Items: [{ sk: { S: 'shard#0003' }, doneMarks: { S: '{"1":{"below":5,"open":[4]}}' } }],
      });

    // Below the window's own 9, but its shard's marks leave 4 open: in doubt, not done.
    expect(await ledger().read(slot, 'b2')).toMatchObject({ state: 'RESERVED', shard: 3, seq: 4 });
    expect(ddb.commandCalls(QueryCommand)).toHaveLength(2);
  });

  it('cost a provider word on a reservation they cover one GetItem and one Query, and no write', async () => {
    ddb.on(GetItemCommand).resolves({ Item: reservation('c3', 2) });
    ddb.on(QueryCommand).resolves({
      Items: [{ sk: { S: 'slot' }, doneMarks: { S: '{"1":{"below":3,"open":[]}}' } }],
    });

    expect(await ledger().recordProviderWord(slot, 'c3', word)).toBe('done');
    expect(ddb.commandCalls(GetItemCommand)).toHaveLength(1);
    expect(ddb.commandCalls(QueryCommand)).toHaveLength(1);
    expect(ddb.commandCalls(UpdateItemCommand)).toHaveLength(0);
  });

  it('keep a settle off a stored reservation they cover even when the caller read it without its number', async () => {
    ddb.on(QueryCommand).resolves({
      Items: [{ sk: { S: 'slot' }, doneMarks: { S: '{"1":{"below":5,"open":[1,3]}}' } }],
    });
    ddb.on(UpdateItemCommand).resolves({});
    const stale = { keyHash: 'd4', state: 'RESERVED', epoch: 1, owner: 'a', attempts: 0 } as const;

    expect(await ledger().settleInDoubt(slot, stale, 'retry', T0)).toBe(true);
    const update = ddb.commandCalls(UpdateItemCommand)[0]?.args[0].input;
    expect(update?.ConditionExpression).toBe(
      '#state = :reserved AND #epoch = :epoch AND #owner = :owner AND ' +
        '(attribute_not_exists(#seq) OR #seq >= :below OR #seq IN (:open0, :open1))',
    );
    expect(update?.ExpressionAttributeValues).toMatchObject({
      ':below': { N: '5' },
      ':open0': { N: '1' },
      ':open1': { N: '3' },
    });
  });
});
