import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';

/** DynamoDB requests by operation, and the write units they would consume (items under 1 KB). */
export interface RequestMeter {
  readonly byOperation: Map<string, number>;
  requests(): number;
  writeUnits(): number;
  reset(): void;
}

/** Counts every request a client sends, at the point it goes on the wire (retries included). */
export function meterRequests(client: DynamoDBClient): RequestMeter {
  const byOperation = new Map<string, number>();
  let writeUnits = 0;
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const operation = String(context.commandName ?? 'unknown').replace(/Command$/, '');
      byOperation.set(operation, (byOperation.get(operation) ?? 0) + 1);
      const input = args.input as { RequestItems?: Record<string, unknown[]> };
      if (operation === 'BatchWriteItem') {
        writeUnits += Object.values(input.RequestItems ?? {}).reduce((sum, items) => sum + items.length, 0);
      } else if (operation === 'PutItem' || operation === 'UpdateItem' || operation === 'DeleteItem') {
        writeUnits += 1;
      }
      return next(args);
    },
    { step: 'finalizeRequest', priority: 'low', name: 'slotguardRequestMeter' },
  );
  return {
    byOperation,
    requests: () => [...byOperation.values()].reduce((a, b) => a + b, 0),
    writeUnits: () => writeUnits,
    reset() {
      byOperation.clear();
      writeUnits = 0;
    },
  };
}
