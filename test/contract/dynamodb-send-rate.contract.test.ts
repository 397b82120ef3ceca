import { DynamoRateLimitStore } from '../../shared/backends/dynamodb/dynamodb-rate-limit-store.js';
import { useDynamo } from '../helpers/dynalite.js';
import { describeSendRateContract } from './send-rate-contract.js';

const dynamo = useDynamo();

// Each worker builds its own store on its own client, as each Lambda does; the item is shared.
describeSendRateContract('DynamoDB (dynalite)', async (jobId) => {
  const tableName = await dynamo.freshTable('send-rate');
  return { worker: () => new DynamoRateLimitStore({ client: dynamo.client(), tableName, jobId }) };
});
