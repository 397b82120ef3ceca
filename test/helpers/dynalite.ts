import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll } from 'vitest';
import { startEmbeddedDynamo } from '../../local/embedded-dynamo.js';
import { createDynamoClient, ensureClaimsTable } from '../../shared/backends/dynamodb/dynamodb-backend.js';

export interface DynamoEndpoint {
  readonly endpoint: string;
  /** A client with slotguard's settings against this endpoint. */
  client(options?: { maxAttempts?: number }): DynamoDBClient;
  /** A fresh table for one test, so tests never share state. */
  freshTable(prefix?: string): Promise<string>;
  close(): Promise<void>;
}

let tables = 0;

/**
 * A real DynamoDB API on loopback: dynalite in memory, bound to 127.0.0.1, started by the test
 * itself. DYNAMODB_ENDPOINT points the same tests at any other DynamoDB endpoint instead.
 */
export async function startDynamo(): Promise<DynamoEndpoint> {
  const external = process.env.DYNAMODB_ENDPOINT;
  let close = async () => {};
  let endpoint = external ?? '';
  if (!external) {
    const embedded = await startEmbeddedDynamo();
    endpoint = embedded.endpoint;
    close = embedded.close;
  }
  const clients: DynamoDBClient[] = [];
  const client = (options: { maxAttempts?: number } = {}) => {
    const c = createDynamoClient({ endpoint, region: 'us-east-1', ...options });
    clients.push(c);
    return c;
  };
  return {
    endpoint,
    client,
    async freshTable(prefix = 'claims') {
      const name = `${prefix}-${process.pid}-${++tables}`;
      await ensureClaimsTable(client(), name);
      return name;
    },
    async close() {
      for (const c of clients) c.destroy();
      await close();
    },
  };
}

/**
 * Starts one DynamoDB endpoint for the calling test file (beforeAll) and closes it after (afterAll).
 * The returned object forwards to it, so tests call `dynamo.client()` and `dynamo.freshTable()`.
 */
export function useDynamo(): DynamoEndpoint {
  let current: DynamoEndpoint | undefined;
  beforeAll(async () => {
    current = await startDynamo();
  });
  afterAll(() => current?.close());
  const started = () => {
    if (!current) throw new Error('useDynamo(): the endpoint starts in beforeAll; use it inside a test');
    return current;
  };
  return {
    get endpoint() {
      return started().endpoint;
    },
    client: (options) => started().client(options),
    freshTable: (prefix) => started().freshTable(prefix),
    close: () => started().close(),
  };
}
