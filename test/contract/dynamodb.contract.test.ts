import { afterAll, beforeAll } from 'vitest';
import { type DynamoEndpoint, startDynamo } from '../helpers/dynalite.js';
import { testBackend } from '../helpers/harness.js';
import { describeBackendContract } from './backend-contract.js';

let dynamo: DynamoEndpoint;
beforeAll(async () => {
  dynamo = await startDynamo();
});
afterAll(() => dynamo.close());

describeBackendContract('DynamoDB', async () => testBackend(dynamo.client(), await dynamo.freshTable()));
describeBackendContract('DynamoDB without ALL_OLD on conflict', async () =>
  testBackend(dynamo.client(), await dynamo.freshTable(), false),
);
