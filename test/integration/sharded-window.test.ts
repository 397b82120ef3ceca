import { useDynamo } from '../helpers/dynalite.js';
import { testBackend } from '../helpers/harness.js';
import { describeShardedWindow } from '../helpers/sharded-window.js';

/*
 * A window split into shards, end to end in virtual time, on DynamoDB (dynalite): the scenarios are
 * test/helpers/sharded-window.ts, which postgres-sharded-window.test.ts runs on Postgres too.
 */

const dynamo = useDynamo();

describeShardedWindow('DynamoDB', async () => testBackend(dynamo.client(), await dynamo.freshTable()));
