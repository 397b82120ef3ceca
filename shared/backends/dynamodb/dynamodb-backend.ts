import {
  CreateTableCommand,
  DescribeTableCommand,
  DynamoDBClient,
  ResourceInUseException,
} from '@aws-sdk/client-dynamodb';
import type { EffectKeyHasher } from '../../effects/effect-key.js';
import { JOB_DEFAULTS } from '../../job/job-spec.js';
import type { SlotBackend } from '../../job/run-slot.js';
import { DynamoClaimStore } from './dynamodb-claim-store.js';
import { DynamoEffectLedger } from './dynamodb-effect-ledger.js';
import { JitteredRetryStrategy } from './dynamodb-retry-strategy.js';
import { TableLayout } from './table-layout.js';

/** How to build the DynamoDB backend: the client, the claims table and the effect-key hasher. */
export interface DynamoBackendOptions {
  readonly client: DynamoDBClient;
  readonly tableName: string;
  readonly hashKey: EffectKeyHasher;
  /**
   * Record retention from the window, for the TTL attribute. Keep it equal to the run option of the
   * same name.
   * @default 35
   */
  readonly retentionDays?: number;
  /** @default true */
  readonly returnOldOnConflict?: boolean;
}

/** The DynamoDB backend: claims and effects in one table (see table-layout.ts). */
export function dynamoBackend(options: DynamoBackendOptions): SlotBackend {
  const retentionSeconds = (options.retentionDays ?? JOB_DEFAULTS.retentionDays) * 86_400;
  const shared = {
    client: options.client,
    tableName: options.tableName,
    ...(options.returnOldOnConflict !== undefined
      ? { returnOldOnConflict: options.returnOldOnConflict }
      : {}),
  };
  return {
    claims: new DynamoClaimStore(shared),
    ledger: new DynamoEffectLedger({
      ...shared,
      expiresAtSeconds: (slot) => Math.ceil(Date.parse(slot.window) / 1000) + retentionSeconds,
    }),
    hashKey: options.hashKey,
  };
}

/** Options of `createDynamoClient`. */
export interface DynamoClientOptions {
  /** Another endpoint than AWS's (dynalite on loopback, say); local credentials are used with it. */
  readonly endpoint?: string;
  /** @default AWS_REGION, else 'us-east-1' */
  readonly region?: string;
  /**
   * Attempts per request, with jittered exponential backoff between them (JitteredRetryStrategy:
   * no client-wide retry quota). Throttling, 5xx, timeouts and dropped connections are retried; a
   * conditional-check failure never is.
   * @default 8
   */
  readonly maxAttempts?: number;
}

/** A DynamoDB client set up for slotguard's request pattern (many small conditional writes). */
export function createDynamoClient(options: DynamoClientOptions = {}): DynamoDBClient {
  const maxAttempts = options.maxAttempts ?? 8;
  return new DynamoDBClient({
    region: options.region ?? process.env.AWS_REGION ?? 'us-east-1',
    maxAttempts,
    retryStrategy: new JitteredRetryStrategy(maxAttempts),
    ...(options.endpoint
      ? { endpoint: options.endpoint, credentials: { accessKeyId: 'local', secretAccessKey: 'local' } }
      : {}),
  });
}

/** The clients of `environmentDynamoClient`, by endpoint ('' for AWS's). */
const environmentClients = new Map<string, DynamoDBClient>();

/**
 * The one client a process's composition roots share for `endpoint`: a job's claims backend, its
 * shared send rate and the watchdog's stores each asked for their own, and a container then opened
 * two connection pools (and paid two TLS handshakes) to the same table. Made on the first call.
 * @example const client = environmentDynamoClient(env.DYNAMODB_ENDPOINT);
 */
export function environmentDynamoClient(endpoint?: string): DynamoDBClient {
  const key = endpoint ?? '';
  let client = environmentClients.get(key);
  if (!client) {
    client = createDynamoClient(endpoint ? { endpoint } : {});
    environmentClients.set(key, client);
  }
  return client;
}

/**
 * Creates the claims table where the CDK stack does not (local runs, tests, other endpoints). TTL
 * is switched on by the construct in AWS; nothing here relies on it having deleted anything.
 */
export async function ensureClaimsTable(client: DynamoDBClient, tableName: string): Promise<void> {
  try {
    await client.send(
      new CreateTableCommand({
        TableName: tableName,
        BillingMode: 'PAY_PER_REQUEST',
        KeySchema: [
          { AttributeName: TableLayout.partitionKey, KeyType: 'HASH' },
          { AttributeName: TableLayout.sortKey, KeyType: 'RANGE' },
        ],
        AttributeDefinitions: [
          { AttributeName: TableLayout.partitionKey, AttributeType: 'S' },
          { AttributeName: TableLayout.sortKey, AttributeType: 'S' },
        ],
      }),
    );
  } catch (error) {
    if (!(error instanceof ResourceInUseException)) throw error;
  }
  for (;;) {
    const { Table } = await client.send(new DescribeTableCommand({ TableName: tableName }));
    if (Table?.TableStatus === 'ACTIVE') return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
