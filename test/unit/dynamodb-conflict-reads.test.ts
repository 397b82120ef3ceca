import {
  ConditionalCheckFailedException,
  DynamoDBClient,
  GetItemCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, it } from 'vitest';
import { DynamoClaimStore } from '../../shared/backends/dynamodb/dynamodb-claim-store.js';

/**
 * dynalite never returns the current item on a failed condition, so the path where DynamoDB does
 * (ReturnValuesOnConditionCheckFailure ALL_OLD) is checked here, on a mocked client, for the one
 * thing that differs: how many requests a lost race costs.
 */
const slot = { jobId: 'weekly-report', window: '2026-11-30T06:00:00Z' };
const T0 = Date.parse('2026-11-30T06:00:05Z');
const lease = {
  owner: 'b',
  leaseMs: 60_000,
  maxAttempts: 3,
  expiresAtSeconds: 2_000_000_000,
  deadline: 2_000_000_000_000,
  delivery: {},
};
const heldItem = {
  pk: { S: 'weekly-report#2026-11-30T06:00:00Z' },
  sk: { S: 'slot' },
  state: { S: 'RUNNING' },
  owner: { S: 'a' },
  epoch: { N: '1' },
  leaseUntil: { N: String(T0 + 60_000) },
};

const ddb = mockClient(DynamoDBClient);
afterEach(() => ddb.reset());

function conflict(item?: typeof heldItem) {
  return new ConditionalCheckFailedException({
    message: 'The conditional request failed',
    $metadata: { httpStatusCode: 400 },
    ...(item ? { Item: item } : {}),
  });
}

describe('a lost claim race', () => {
  it('costs one request when the server returns the current item with the failure', async () => {
    ddb.on(UpdateItemCommand).rejects(conflict(heldItem));
    const store = new DynamoClaimStore({
      client: new DynamoDBClient({ region: 'us-east-1' }),
      tableName: 't',
    });
    const outcome = await store.claim(slot, lease, T0);
    expect(outcome).toEqual({ kind: 'held', holder: 'a', epoch: 1, leaseEndsAt: T0 + 60_000 });
    expect(ddb.commandCalls(UpdateItemCommand)).toHaveLength(1);
    expect(ddb.commandCalls(UpdateItemCommand)[0]?.args[0].input.ReturnValuesOnConditionCheckFailure).toBe(
      'ALL_OLD',
    );
    expect(ddb.commandCalls(GetItemCommand)).toHaveLength(0);
  });

  it('costs one consistent GetItem more when it does not', async () => {
    ddb.on(UpdateItemCommand).rejects(conflict());
    ddb.on(GetItemCommand).resolves({ Item: heldItem });
    const store = new DynamoClaimStore({
      client: new DynamoDBClient({ region: 'us-east-1' }),
      tableName: 't',
    });
    const outcome = await store.claim(slot, lease, T0);
    expect(outcome).toEqual({ kind: 'held', holder: 'a', epoch: 1, leaseEndsAt: T0 + 60_000 });
    expect(ddb.commandCalls(UpdateItemCommand)).toHaveLength(1);
    expect(ddb.commandCalls(GetItemCommand)).toHaveLength(1);
    expect(ddb.commandCalls(GetItemCommand)[0]?.args[0].input.ConsistentRead).toBe(true);
  });
});
