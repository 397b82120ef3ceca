import { useDynamo } from '../helpers/dynalite.js';
import { testBackend } from '../helpers/harness.js';
import { describeBackendContract } from './backend-contract.js';

const dynamo = useDynamo();

describeBackendContract('DynamoDB', async () => testBackend(dynamo.client(), await dynamo.freshTable()));
describeBackendContract('DynamoDB without ALL_OLD on conflict', async () =>
  testBackend(dynamo.client(), await dynamo.freshTable(), false),
);
