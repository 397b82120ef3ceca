import {
  type AttributeValue,
  ConditionalCheckFailedException,
  type ConsumedCapacity,
  type DynamoDBClient,
} from '@aws-sdk/client-dynamodb';

/** DynamoDB requests by operation, and the write and read units DynamoDB says they consumed. */
export interface RequestMeter {
  readonly byOperation: Map<string, number>;
  /** Write units by operation (UpdateItem: a slot item's claim, checkpoints and completion among them). */
  readonly writeUnitsByOperation: Map<string, number>;
  requests(): number;
  /** Write request units, as DynamoDB bills them: from each write's ConsumedCapacity, by item size. */
  writeUnits(): number;
  /** Read request units, likewise (a strongly consistent read of up to 4 KB is one). */
  readUnits(): number;
  /** Each write's round trip in ms, from the command sent to its answer (retries included), in order. */
  writeMs(): readonly number[];
  reset(): void;
}

const WRITES = new Set(['PutItem', 'UpdateItem', 'DeleteItem', 'BatchWriteItem', 'TransactWriteItems']);
const READS = new Set(['GetItem', 'Query', 'Scan', 'BatchGetItem', 'TransactGetItems']);

/**
 * Counts every request a client sends, at the point it goes on the wire (retries included), and the
 * capacity DynamoDB reports for each command: the meter asks for ReturnConsumedCapacity TOTAL on
 * every read and write (dynalite computes it from item sizes as DynamoDB does: a write is one unit
 * per KB of the larger of the old and new item, so a growing item costs more each time it is written).
 */
export function meterRequests(client: DynamoDBClient): RequestMeter {
  const byOperation = new Map<string, number>();
  const writeUnitsByOperation = new Map<string, number>();
  const addWriteUnits = (operation: string, units: number) =>
    writeUnitsByOperation.set(operation, (writeUnitsByOperation.get(operation) ?? 0) + units);
  let readUnits = 0;
  let writeMs: number[] = [];
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const operation = operationOf(context.commandName);
      byOperation.set(operation, (byOperation.get(operation) ?? 0) + 1);
      return next(args);
    },
    { step: 'finalizeRequest', priority: 'low', name: 'slotguardRequestMeter' },
  );
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const operation = operationOf(context.commandName);
      const isWrite = WRITES.has(operation);
      if (!isWrite && !READS.has(operation)) return next(args);
      // A copy: the caller's command input stays as the caller wrote it.
      const input = { ...(args.input as object), ReturnConsumedCapacity: 'TOTAL' };
      const started = performance.now();
      try {
        const result = await next({ ...args, input });
        const units = unitsOf(
          (result.output as { ConsumedCapacity?: ConsumedCapacity | ConsumedCapacity[] }).ConsumedCapacity,
        );
        if (isWrite) addWriteUnits(operation, units);
        else readUnits += units;
        return result;
      } catch (error) {
        // DynamoDB bills a write whose condition fails, though the failure carries no ConsumedCapacity:
        // the size of the item it found, at least one unit. Every condition slotguard and Powertools
        // fail here is on an item under 1 KB (a reservation, an idempotency record, a slot item: its
        // size is reported beside the results), so one unit each.
        if (isWrite && error instanceof ConditionalCheckFailedException) addWriteUnits(operation, 1);
        throw error;
      } finally {
        if (isWrite) writeMs.push(performance.now() - started);
      }
    },
    { step: 'initialize', priority: 'low', name: 'slotguardCapacityMeter' },
  );
  return {
    byOperation,
    writeUnitsByOperation,
    requests: () => [...byOperation.values()].reduce((a, b) => a + b, 0),
    writeUnits: () => [...writeUnitsByOperation.values()].reduce((a, b) => a + b, 0),
    readUnits: () => readUnits,
    writeMs: () => writeMs,
    reset() {
      byOperation.clear();
      writeUnitsByOperation.clear();
      readUnits = 0;
      writeMs = [];
    },
  };
}

function operationOf(commandName: unknown): string {
  return String(commandName ?? 'unknown').replace(/Command$/, '');
}

/** A response's capacity units: one entry for a single-item call, one per table for a batch. */
function unitsOf(consumed: ConsumedCapacity | ConsumedCapacity[] | undefined): number {
  const entries = consumed === undefined ? [] : Array.isArray(consumed) ? consumed : [consumed];
  return entries.reduce((sum, entry) => sum + (entry.CapacityUnits ?? 0), 0);
}

/**
 * An item's size as DynamoDB counts it toward write units (docs: "Item sizes and formats"): each
 * attribute's name in UTF-8 bytes plus its value's size.
 */
export function itemBytes(item: Record<string, AttributeValue>): number {
  return Object.entries(item).reduce(
    (sum, [name, value]) => sum + Buffer.byteLength(name) + valueBytes(value),
    0,
  );
}

function valueBytes(value: AttributeValue): number {
  if (value.S !== undefined) return Buffer.byteLength(value.S);
  if (value.N !== undefined) return numberBytes(value.N);
  if (value.B !== undefined) return value.B.byteLength;
  if (value.BOOL !== undefined || value.NULL !== undefined) return 1;
  if (value.SS !== undefined) return value.SS.reduce((sum, s) => sum + Buffer.byteLength(s), 0);
  if (value.NS !== undefined) return value.NS.reduce((sum, n) => sum + numberBytes(n), 0);
  if (value.BS !== undefined) return value.BS.reduce((sum, b) => sum + b.byteLength, 0);
  // A list or map: 3 bytes, plus 1 per element, plus its elements.
  if (value.L !== undefined) return 3 + value.L.reduce((sum, v) => sum + 1 + valueBytes(v), 0);
  if (value.M !== undefined) {
    return (
      3 + Object.entries(value.M).reduce((sum, [k, v]) => sum + 1 + Buffer.byteLength(k) + valueBytes(v), 0)
    );
  }
  return 0;
}

/** A number: about one byte per two significant digits, plus one. */
function numberBytes(n: string): number {
  const digits = n
    .replace(/[eE].*$/, '')
    .replace(/[^0-9]/g, '')
    .replace(/^0+|0+$/g, '').length;
  return 1 + Math.ceil(Math.max(digits, 1) / 2);
}
