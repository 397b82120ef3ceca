import { DynamoOperatorStore } from '../../shared/backends/dynamodb/dynamodb-operator-store.js';
import { useDynamo } from '../helpers/dynalite.js';
import { testBackend } from '../helpers/harness.js';
import { describeOperatorContract } from './operator-contract.js';

const dynamo = useDynamo();

describeOperatorContract('DynamoDB operator store', async () => {
  const client = dynamo.client();
  const tableName = await dynamo.freshTable();
  return { ...testBackend(client, tableName), operator: new DynamoOperatorStore({ client, tableName }) };
});
