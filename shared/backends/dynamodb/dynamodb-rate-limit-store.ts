import {
  ConditionalCheckFailedException,
  type DynamoDBClient,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import {
  assertRateLimitJobId,
  type RateLimitStore,
  type RateReservation,
  type RateReservationRequest,
} from '../../effects/rate-limit-store.js';
import { StoreError } from '../../errors.js';
import { conflictItem, num, str } from './attribute-values.js';
import { sendRatePartitionKey, TableLayout } from './table-layout.js';

/** Options of a `DynamoRateLimitStore`. */
export interface DynamoRateLimitStoreOptions {
  readonly client: DynamoDBClient;
  /** The claims table (the job's grant on it covers the timeline's item). */
  readonly tableName: string;
  /** The job whose sends share the timeline. */
  readonly jobId: string;
}

/** The timeline's item outlives its last reservation by this long, then TTL removes it. */
const KEEP_SECONDS = 7 * 86_400;

/** More than two tries means other workers moved the timeline between ours; each try is one write. */
const MAX_TRIES = 8;

/**
 * One job's send-rate timeline as a DynamoDB item in the claims table (pk `<jobId>#ratelimit`,
 * sk `send`), so the job's LeadingKeys grant covers it and no IAM changes. No transaction, no read
 * first: each reservation is one conditional UpdateItem, two when the timeline has gone quiet.
 *
 * Timeline of a reservation (floor = now + notBeforeMs, on the caller's clock):
 *   busy:  next ≥ floor       → SET next = next + span  IF next ≥ floor              → start = old next
 *   quiet: next < floor       → SET next = floor + span IF next < floor OR no item   → start = floor
 *   a guess of the wrong path fails its condition and the other is sent; a failed quiet write means
 *   another worker moved `next` past our floor meanwhile, and the busy write then succeeds.
 * DynamoDB has no `max`, so the two cases are two conditions, never a read-modify-write. The
 * store guesses the path from what its last write saw, and from the item a failed condition
 * returns where the server sends it (DynamoDB does, dynalite does not).
 * @example new SharedRateLimiter({ store: new DynamoRateLimitStore({ client, tableName, jobId }), ratePerSecond: 14 })
 */
export class DynamoRateLimitStore implements RateLimitStore {
  readonly #client: DynamoDBClient;
  readonly #tableName: string;
  readonly #jobId: string;
  readonly #key;
  /** Whether the last reservation found the timeline quiet: the next one most likely does too. */
  #quiet = false;
  #requests = 0;

  constructor(options: DynamoRateLimitStoreOptions) {
    assertRateLimitJobId(options.jobId);
    this.#client = options.client;
    this.#tableName = options.tableName;
    this.#jobId = options.jobId;
    this.#key = {
      [TableLayout.partitionKey]: str(sendRatePartitionKey(options.jobId)),
      [TableLayout.sortKey]: str(TableLayout.sendRateSortKey),
    };
  }

  async reserve(request: RateReservationRequest): Promise<RateReservation> {
    const floor = request.now + request.notBeforeMs;
    const expiresAt = Math.ceil(request.now / 1000) + KEEP_SECONDS;
    let quiet = this.#quiet;
    for (let tries = 1; ; tries++) {
      try {
        const start = quiet
          ? await this.#restart(floor, request.spanMs, expiresAt)
          : await this.#extend(floor, request.spanMs, expiresAt);
        this.#quiet = quiet;
        return { start };
      } catch (error) {
        if (!(error instanceof ConditionalCheckFailedException)) throw this.#storeError(error);
        if (tries >= MAX_TRIES) throw this.#storeError(error);
        const found = conflictItem(error)?.nextAt?.N;
        quiet = found === undefined ? !quiet : Number(found) < floor;
      }
    }
  }

  /** Writes sent so far, failed conditions included: what the reservations cost. */
  get requests(): number {
    return this.#requests;
  }

  /** The busy path: the timeline is at or past the floor; reserve from its end. */
  async #extend(floor: number, spanMs: number, expiresAt: number): Promise<number> {
    this.#requests++;
    const output = await this.#client.send(
      new UpdateItemCommand({
        TableName: this.#tableName,
        Key: this.#key,
        UpdateExpression: 'SET nextAt = nextAt + :span, #ttl = :expiresAt',
        ConditionExpression: 'nextAt >= :floor',
        ExpressionAttributeNames: { '#ttl': TableLayout.ttlAttribute },
        ExpressionAttributeValues: {
          ':span': num(spanMs),
          ':floor': num(floor),
          ':expiresAt': num(expiresAt),
        },
        ReturnValues: 'UPDATED_NEW',
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    );
    const next = Number(output.Attributes?.nextAt?.N);
    if (!Number.isFinite(next)) throw this.#storeError(new Error('the update returned no nextAt'));
    return next - spanMs;
  }

  /** The quiet path: the timeline fell behind the floor (or has no item yet); restart it there. */
  async #restart(floor: number, spanMs: number, expiresAt: number): Promise<number> {
    this.#requests++;
    await this.#client.send(
      new UpdateItemCommand({
        TableName: this.#tableName,
        Key: this.#key,
        UpdateExpression: 'SET nextAt = :next, #ttl = :expiresAt',
        ConditionExpression: 'attribute_not_exists(nextAt) OR nextAt < :floor',
        ExpressionAttributeNames: { '#ttl': TableLayout.ttlAttribute },
        ExpressionAttributeValues: {
          ':next': num(floor + spanMs),
          ':floor': num(floor),
          ':expiresAt': num(expiresAt),
        },
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    );
    return floor;
  }

  #storeError(cause: unknown): StoreError {
    const detail = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
    return new StoreError(
      'reserve send rate',
      `DynamoDB reservation on the send-rate timeline of job '${this.#jobId}' failed after the client's retries ` +
        `(${detail}); nothing was sent for it, and the next send tries again`,
      { cause },
    );
  }
}
