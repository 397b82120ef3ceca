import { DynamoClaimStore } from '../../shared/backends/dynamodb/dynamodb-claim-store.js';
import { useDynamo } from '../helpers/dynalite.js';
import { describeWatchdogAudit } from './watchdog-audit-contract.js';

const dynamo = useDynamo();

describeWatchdogAudit(
  'DynamoDB',
  async () =>
    new DynamoClaimStore({ client: dynamo.client(), tableName: await dynamo.freshTable('watchdog') }),
);
