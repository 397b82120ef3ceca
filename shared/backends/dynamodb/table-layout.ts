/**
 * The claims table's layout, shared by the adapter and the CDK `ClaimsTable` construct.
 *
 * One table holds slots, effects and each job's send-rate timeline:
 * - slot:      pk = `<jobId>#<window>`,          sk = `slot` (the window), `shard#0003` (a shard of it)
 * - effect:    pk = `<jobId>#<window>#fx<0..15>`, sk = `<keyHash>` (one ledger per window, all shards)
 * - send rate: pk = `<jobId>#ratelimit`,         sk = `send` (SharedRateLimiter's timeline)
 *
 * Every partition key starts with `<jobId>#`, so IAM can confine a function to its own job's items
 * (dynamodb:LeadingKeys `<jobId>#*`). A window's effects are spread over EFFECT_SHARDS partitions
 * (the partition is the key hash's first hex digit; nothing to do with a window's shards): a real DynamoDB partition takes about 1,000 writes/s,
 * so 16 of them carry 16,000 reservations a second before one throttles.
 */
export const TableLayout = {
  partitionKey: 'pk',
  sortKey: 'sk',
  /** Epoch seconds; DynamoDB's TTL deletes the item some time after it passes. */
  ttlAttribute: 'expiresAt',
  /**
   * A slot item's done marks (JSON). Named here because IAM names it too: the SES event recorder
   * may Query a window's slot partition for its sort keys and this attribute alone.
   */
  doneMarksAttribute: 'doneMarks',
  slotSortKey: 'slot',
  sendRateSortKey: 'send',
} as const;

export const EFFECT_SHARDS = 16;

const SHARD_SORT_KEY_PREFIX = 'shard#';

/** A slot item's sort key: `slot` for the window, `shard#0003` for one of its shards. */
export function slotSortKey(shard: number | undefined): string {
  return shard === undefined
    ? TableLayout.slotSortKey
    : `${SHARD_SORT_KEY_PREFIX}${String(shard).padStart(4, '0')}`;
}

/** The shard a slot item's sort key names (slotSortKey's inverse): undefined for the window's own `slot`. */
export function shardOfSlotSortKey(sortKey: string): number | undefined {
  return sortKey === TableLayout.slotSortKey
    ? undefined
    : Number(sortKey.slice(SHARD_SORT_KEY_PREFIX.length));
}

export function slotPartitionKey(jobId: string, window: string): string {
  return `${jobId}#${window}`;
}

export function effectPartitionKey(jobId: string, window: string, keyHash: string): string {
  return effectShardPartitionKey(jobId, window, effectShard(keyHash));
}

/** The partition key of one of a window's EFFECT_SHARDS effect partitions. */
export function effectShardPartitionKey(jobId: string, window: string, shard: number): string {
  return `${jobId}#${window}#fx${shard}`;
}

/** The shard of a hex key hash: its first hex digit, 0..15. */
export function effectShard(keyHash: string): number {
  const shard = Number.parseInt(keyHash.charAt(0), 16);
  return Number.isNaN(shard) ? 0 : shard;
}

/**
 * The partition key of a job's send-rate timeline. A window is never `ratelimit` (windows are UTC
 * timestamps), so it cannot meet a slot's key; it starts with `<jobId>#`, so the job's grant covers it.
 */
export function sendRatePartitionKey(jobId: string): string {
  return `${jobId}#ratelimit`;
}

/** The IAM LeadingKeys pattern that confines a grant to one job's items. */
export function leadingKeysPattern(jobId: string): string {
  return `${jobId}#*`;
}
