import {
  type AttributeValue,
  BatchWriteItemCommand,
  ConditionalCheckFailedException,
  DeleteItemCommand,
  type DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
  QueryCommand,
  UpdateItemCommand,
  type WriteRequest,
} from '@aws-sdk/client-dynamodb';
import { equalJitterDelayMs } from '../../backoff.js';
import { StoreError } from '../../errors.js';
import { providerWordOutcomeOfConflict, reserveOutcomeOfConflict } from '../../slot/conflict-outcomes.js';
import { coveredByMarks, effectiveInWindow } from '../../slot/done-marks.js';
import type {
  Claim,
  EffectFailure,
  EffectLedger,
  EffectRecord,
  EpochDoneMarks,
  ProviderWord,
  ProviderWordOutcome,
  ReserveOptions,
  ReserveOutcome,
} from '../../slot/ports.js';
import { EffectState } from '../../slot/ports.js';
import { canonicalClaim, canonicalSlot, type Slot, windowSlot } from '../../slot/slot.js';
import { conflictItem, num, str } from './attribute-values.js';
import { readWindowDoneMarks } from './dynamodb-claim-store.js';
import { EFFECT_SHARDS, effectPartitionKey, effectShardPartitionKey, TableLayout } from './table-layout.js';

export interface DynamoEffectLedgerOptions {
  readonly client: DynamoDBClient;
  readonly tableName: string;
  /** Retention of effect records, as the TTL attribute's epoch seconds for a slot. */
  readonly expiresAtSeconds: (slot: Slot) => number;
  /** @default true (see DynamoClaimStoreOptions.returnOldOnConflict) */
  readonly returnOldOnConflict?: boolean;
}

/** BatchWriteItem's limit. */
const BATCH_LIMIT = 25;

/**
 * The effect half of the DynamoDB backend: one item per (job, window, effect key hash), spread over
 * EFFECT_SHARDS partitions.
 *
 * Timeline of one effect:
 *   reserve  PutItem if absent: RESERVED, epoch e, owner o   → ours to perform
 *   perform  the caller sends the email
 *   mark     the run's done marks on its slot item (its checkpoint: seq below n, not open)
 *            → it reads DONE, and later runs skip it
 * A crash between reserve and mark leaves RESERVED with epoch e. A later epoch finds it and reports
 * it IN DOUBT (the email may or may not have gone) instead of sending again.
 *
 * A reservation's record stays RESERVED when the marks cover it: what it stands for is read with
 * the done marks of the window's slot items (readWindowDoneMarks), which read() and list() apply
 * (effectiveInWindow). A reservation made without a sequence number is marked DONE on its own
 * item (markDone).
 */
export class DynamoEffectLedger implements EffectLedger {
  readonly #client: DynamoDBClient;
  readonly #table: string;
  readonly #expiresAt: (slot: Slot) => number;
  readonly #returnOld: boolean;

  constructor(options: DynamoEffectLedgerOptions) {
    this.#client = options.client;
    this.#table = options.tableName;
    this.#expiresAt = options.expiresAtSeconds;
    this.#returnOld = options.returnOldOnConflict ?? true;
  }

  /*
   * Timeline of a reservation:
   *   PutItem if absent                                  → reserved (attempt 1)
   *   met DONE                                           → done: skip
   *   met RESERVED by our own (owner, epoch)             → ours: a lost reply the SDK retried
   *   met RESERVED or FAILED by a later epoch            → fenced
   *   met RESERVED by an earlier epoch                   → in doubt (or taken over by policy)
   *   met FAILED, retryAt passed                         → PutItem if that exact refusal is still there → reserved (attempt n + 1)
   *   met FAILED, retryAt ahead / none                   → retry-later / failed
   */
  async reserve(claim: Claim, keyHash: string, options: ReserveOptions): Promise<ReserveOutcome> {
    claim = canonicalClaim(claim);
    let condition = 'attribute_not_exists(#state)';
    let values: Record<string, AttributeValue> = {};
    let attempts = 0;
    // Each round either writes or meets a record someone changed since the last read; a key that
    // keeps changing under us gives up after a few rounds, as the store failing would.
    for (let round = 1; round <= 5; round++) {
      try {
        await this.#put(claim, keyHash, condition, values, attempts, options);
        return { kind: 'reserved', rerun: false, attempt: attempts + 1 };
      } catch (error) {
        if (!(error instanceof ConditionalCheckFailedException)) throw storeError('reserve', claim, error);
        const item = conflictItem(error);
        // As stored: reserveOutcomeOfConflict applies the earlier epochs' marks the claim was handed.
        const current = item ? toRecord(keyHash, item) : await this.#stored(claim.slot, keyHash);
        if (!current) {
          // Unreserved in between: try the plain reservation again.
          condition = 'attribute_not_exists(#state)';
          values = {};
          attempts = 0;
          continue;
        }
        const outcome = reserveOutcomeOfConflict(current, claim, options);
        if (outcome.kind === 'take-over') return this.#takeOver(claim, keyHash, outcome.current, options);
        if (outcome.kind !== 'retry') return outcome;
        // An item stores `attempts` only above 0: a send cancelled before its first attempt is
        // FAILED without it, and `#attempts = :attempts` would never match that item.
        condition = `#state = :failed AND #epoch = :staleEpoch AND #owner = :staleOwner AND ${
          current.attempts > 0 ? '#attempts = :attempts' : 'attribute_not_exists(#attempts)'
        }`;
        values = {
          ':failed': str(EffectState.Failed),
          ':staleEpoch': num(current.epoch),
          ':staleOwner': str(current.owner),
          ...(current.attempts > 0 ? { ':attempts': num(current.attempts) } : {}),
        };
        attempts = current.attempts;
      }
    }
    throw new StoreError(
      'reserve',
      `an effect of ${describeSlot(claim)} changed under five reservations in a row; the run stops and a later run retries it`,
    );
  }

  /**
   * Marks are unconditional batch puts: only the holder that reserved a key marks it, and DONE is
   * the truth whoever writes it once the effect has happened. 25 marks cost one request.
   */
  async markDone(claim: Claim, keyHashes: readonly string[]): Promise<void> {
    claim = canonicalClaim(claim);
    for (let start = 0; start < keyHashes.length; start += BATCH_LIMIT) {
      let requests: WriteRequest[] = keyHashes.slice(start, start + BATCH_LIMIT).map((keyHash) => ({
        PutRequest: { Item: this.#item(claim, keyHash, EffectState.Done) },
      }));
      for (let round = 0; requests.length > 0; round++) {
        if (round === 10) {
          throw new StoreError(
            'markDone',
            `DynamoDB left ${requests.length} effect marks of ${describeSlot(claim)} unprocessed after 10 rounds; ` +
              'those effects happened but will read as in doubt until an operator resolves them',
          );
        }
        if (round > 0) await backoff(round);
        try {
          const result = await this.#client.send(
            new BatchWriteItemCommand({ RequestItems: { [this.#table]: requests } }),
          );
          requests = result.UnprocessedItems?.[this.#table] ?? [];
        } catch (error) {
          throw storeError('markDone', claim, error);
        }
      }
    }
  }

  /*
   * Timeline of a refusal: PutItem FAILED (attempts, retryAt) if the reservation is still ours, under
   * the refused number. A failed condition is our own write whose reply was lost, a reservation a
   * takeover made its own, or our own later reservation of the key: nothing left to record.
   */
  async recordFailure(claim: Claim, keyHash: string, failure: EffectFailure): Promise<void> {
    claim = canonicalClaim(claim);
    try {
      await this.#client.send(
        new PutItemCommand({
          TableName: this.#table,
          Item: {
            ...this.#item(claim, keyHash, EffectState.Failed, failure.attempts),
            reason: str(failure.reason),
            ...(failure.retryAt !== undefined ? { retryAt: num(failure.retryAt) } : {}),
          },
          // That very reservation: ours, and under the number it was refused under.
          ConditionExpression: `#owner = :me AND #epoch = :epoch AND #state = :reserved AND ${
            failure.seq !== undefined ? '#seq = :seq' : 'attribute_not_exists(#seq)'
          }`,
          ExpressionAttributeNames: {
            '#owner': 'owner',
            '#epoch': 'epoch',
            '#state': 'state',
            '#seq': 'seq',
          },
          ExpressionAttributeValues: {
            ':me': str(claim.owner),
            ':epoch': num(claim.epoch),
            ':reserved': str(EffectState.Reserved),
            ...(failure.seq !== undefined ? { ':seq': num(failure.seq) } : {}),
          },
        }),
      );
    } catch (error) {
      if (error instanceof ConditionalCheckFailedException) return;
      throw storeError('recordFailure', claim, error);
    }
  }

  async unreserve(claim: Claim, keyHash: string): Promise<void> {
    claim = canonicalClaim(claim);
    try {
      await this.#client.send(
        new DeleteItemCommand({
          TableName: this.#table,
          Key: this.#key(claim.slot, keyHash),
          ConditionExpression: '#owner = :me AND #epoch = :epoch AND #state = :reserved',
          ExpressionAttributeNames: { '#owner': 'owner', '#epoch': 'epoch', '#state': 'state' },
          ExpressionAttributeValues: {
            ':me': str(claim.owner),
            ':epoch': num(claim.epoch),
            ':reserved': str(EffectState.Reserved),
          },
        }),
      );
    } catch (error) {
      // Already gone (our own delete whose response was lost): nothing left to release.
      if (error instanceof ConditionalCheckFailedException) return;
      throw storeError('unreserve', claim, error);
    }
  }

  /** The record as it stands: one GetItem and the window's done marks (one Query), side by side. */
  async read(slot: Slot, keyHash: string): Promise<EffectRecord | undefined> {
    const [record, marks] = await Promise.all([this.#stored(slot, keyHash), this.#marks(slot)]);
    return record && effectiveInWindow(record, marks);
  }

  /** The record as stored, without the done marks: what a lost race's condition met. */
  async #stored(slot: Slot, keyHash: string): Promise<EffectRecord | undefined> {
    slot = canonicalSlot(slot);
    try {
      const result = await this.#client.send(
        new GetItemCommand({ TableName: this.#table, Key: this.#key(slot, keyHash), ConsistentRead: true }),
      );
      return result.Item ? toRecord(keyHash, result.Item) : undefined;
    } catch (error) {
      // Also the read behind a lost race (reserve without ALL_OLD, the in-doubt takeover): as a
      // StoreError the runner stops and yields; a raw SDK error would fail the job.
      throw new StoreError(
        'readEffect',
        `DynamoDB read of an effect of slot ${slot.jobId} ${slot.window} failed after the client's retries ` +
          `(${error instanceof Error ? `${error.name}: ${error.message}` : String(error)})`,
        { cause: error },
      );
    }
  }

  /** Every record as it stands, under the done marks read once, before the first page. */
  async *list(slot: Slot): AsyncIterable<EffectRecord> {
    slot = canonicalSlot(slot);
    const marks = await this.#marks(slot);
    for (let shard = 0; shard < EFFECT_SHARDS; shard++) {
      const pk = effectShardPartitionKey(slot.jobId, slot.window, shard);
      let startKey: Record<string, AttributeValue> | undefined;
      do {
        const page = await this.#client.send(
          new QueryCommand({
            TableName: this.#table,
            KeyConditionExpression: '#pk = :pk',
            ExpressionAttributeNames: { '#pk': TableLayout.partitionKey },
            ExpressionAttributeValues: { ':pk': str(pk) },
            ConsistentRead: true,
            ExclusiveStartKey: startKey,
          }),
        );
        for (const item of page.Items ?? []) {
          yield effectiveInWindow(toRecord(item[TableLayout.sortKey]?.S ?? '', item), marks);
        }
        startKey = page.LastEvaluatedKey;
      } while (startKey);
    }
  }

  /*
   * Timeline of a provider's word:
   *   read     GetItem of the record and the window's done marks (a Query), side by side
   *   absent, DONE, or a reservation the marks cover → answered from the read, nothing written
   *   write    UpdateItem SET provider attributes, only on the reservation the word is about (its
   *            epoch), never on DONE; an accepted word replaces a rejection, not the other way round
   *            (SES reports a Send, then maybe a Bounce)
   * Per event: 1 read unit for the record, 1 per 4 KB of the window's slot items for the marks (1
   * for a window not split), and 1 write unit when there is a word to write; it was the write
   * alone before done marks. Marks that come to cover the reservation between the read and the
   * write leave a word on a record that reads DONE: nothing acts on it (settleInDoubt settles no
   * covered reservation). Events come late, twice, or never: a duplicate finds its own word and is
   * 'recorded' again, harmlessly.
   */
  async recordProviderWord(slot: Slot, keyHash: string, word: ProviderWord): Promise<ProviderWordOutcome> {
    const window = windowSlot(canonicalSlot(slot));
    const current = await this.read(window, keyHash);
    if (current === undefined || current.state === EffectState.Done) {
      return providerWordOutcomeOfConflict(current, word);
    }
    const guard =
      word.outcome === 'accepted'
        ? '(attribute_not_exists(#pOutcome) OR #pOutcome = :rejected)'
        : 'attribute_not_exists(#pOutcome)';
    try {
      await this.#client.send(
        new UpdateItemCommand({
          TableName: this.#table,
          Key: this.#key(window, keyHash),
          UpdateExpression:
            'SET #pOutcome = :outcome, #pEvent = :event, #pAt = :at, #pMessageId = :messageId',
          ConditionExpression: `attribute_exists(#state) AND #epoch = :epoch AND #state <> :done AND ${guard}`,
          ExpressionAttributeNames: {
            '#state': 'state',
            '#epoch': 'epoch',
            '#pOutcome': PROVIDER.outcome,
            '#pEvent': PROVIDER.event,
            '#pAt': PROVIDER.at,
            '#pMessageId': PROVIDER.messageId,
          },
          ExpressionAttributeValues: {
            ':outcome': str(word.outcome),
            ':event': str(word.event),
            ':at': num(word.at),
            ':messageId': str(word.messageId ?? ''),
            ':epoch': num(word.epoch),
            ':done': str(EffectState.Done),
            ...(word.outcome === 'accepted' ? { ':rejected': str('rejected') } : {}),
          },
          ...(this.#returnOld ? { ReturnValuesOnConditionCheckFailure: 'ALL_OLD' as const } : {}),
        }),
      );
      return 'recorded';
    } catch (error) {
      if (!(error instanceof ConditionalCheckFailedException))
        throw storeError('recordProviderWord', window, error);
      const item = conflictItem(error);
      return providerWordOutcomeOfConflict(
        item ? toRecord(keyHash, item) : await this.#stored(window, keyHash),
        word,
      );
    }
  }

  /*
   * Timeline of settling a reservation in doubt:
   *   read     the window's done marks (a Query): one that covers `stale` was performed → false
   *   write    UpdateItem if it is still exactly `stale` (RESERVED, epoch, owner) and its stored
   *            number is not one the marks of its shard and epoch cover
   * The marks cannot come to cover it after the read: only a run of that epoch writes them, and a
   * reservation is settled once that run is over (a later epoch holds the slot, or it finished).
   */
  async settleInDoubt(slot: Slot, stale: EffectRecord, to: 'done' | 'retry', now: number): Promise<boolean> {
    const window = windowSlot(canonicalSlot(slot));
    const marks = (await this.#marks(window)).get(stale.shard);
    if (coveredByMarks(stale, marks)) return false;
    const uncovered = notCoveredCondition(marks?.[String(stale.epoch)]);
    const settled: { update: string; values: Record<string, AttributeValue> } =
      to === 'done'
        ? { update: 'SET #state = :next', values: { ':next': str(EffectState.Done) } }
        : {
            update: 'SET #state = :next, #attempts = :attempts, #retryAt = :now, #reason = :reason',
            values: {
              ':next': str(EffectState.Failed),
              ':attempts': num(stale.attempts + 1),
              ':now': num(now),
              ':reason': str('not-accepted'),
            },
          };
    try {
      await this.#client.send(
        new UpdateItemCommand({
          TableName: this.#table,
          Key: this.#key(window, stale.keyHash),
          UpdateExpression: settled.update,
          ConditionExpression: `#state = :reserved AND #epoch = :epoch AND #owner = :owner${uncovered.condition}`,
          ExpressionAttributeNames: {
            '#state': 'state',
            '#epoch': 'epoch',
            '#owner': 'owner',
            ...uncovered.names,
            ...(to === 'retry'
              ? { '#attempts': 'attempts', '#retryAt': 'retryAt', '#reason': 'reason' }
              : {}),
          },
          ExpressionAttributeValues: {
            ...settled.values,
            ...uncovered.values,
            ':reserved': str(EffectState.Reserved),
            ':epoch': num(stale.epoch),
            ':owner': str(stale.owner),
          },
        }),
      );
      return true;
    } catch (error) {
      if (error instanceof ConditionalCheckFailedException) return false;
      throw storeError('settleInDoubt', window, error);
    }
  }

  /** The opt-in re-run of an in-doubt effect: replace that exact stale reservation, or lose the race. */
  async #takeOver(
    claim: Claim,
    keyHash: string,
    stale: EffectRecord,
    options: ReserveOptions,
  ): Promise<ReserveOutcome> {
    try {
      await this.#put(
        claim,
        keyHash,
        '#state = :reserved AND #epoch = :staleEpoch AND #owner = :staleOwner',
        {
          ':reserved': str(EffectState.Reserved),
          ':staleEpoch': num(stale.epoch),
          ':staleOwner': str(stale.owner),
        },
        stale.attempts,
        options,
      );
      return { kind: 'reserved', rerun: true, attempt: stale.attempts + 1 };
    } catch (error) {
      if (!(error instanceof ConditionalCheckFailedException)) throw storeError('reserve', claim, error);
      const current = await this.#stored(claim.slot, keyHash);
      if (current?.state === EffectState.Done) return { kind: 'done' };
      if (current && current.owner === claim.owner && current.epoch === claim.epoch) {
        return { kind: 'reserved', rerun: true, attempt: current.attempts + 1 };
      }
      return { kind: 'in-doubt', epoch: current?.epoch ?? stale.epoch };
    }
  }

  /** A reservation's PutItem: stamped with the reserving run's clock and, if it has one, its number. */
  #put(
    claim: Claim,
    keyHash: string,
    condition: string,
    values: Record<string, AttributeValue>,
    attempts: number,
    options: ReserveOptions,
  ) {
    const names: Record<string, string> = { '#state': 'state' };
    if (condition.includes('#epoch')) names['#epoch'] = 'epoch';
    if (condition.includes('#owner')) names['#owner'] = 'owner';
    if (condition.includes('#attempts')) names['#attempts'] = 'attempts';
    return this.#client.send(
      new PutItemCommand({
        TableName: this.#table,
        Item: {
          ...this.#item(claim, keyHash, EffectState.Reserved, attempts),
          reservedAt: num(options.now),
          ...(options.seq !== undefined ? { seq: num(options.seq) } : {}),
        },
        ConditionExpression: condition,
        ExpressionAttributeNames: names,
        ...(Object.keys(values).length > 0 ? { ExpressionAttributeValues: values } : {}),
        ...(this.#returnOld ? { ReturnValuesOnConditionCheckFailure: 'ALL_OLD' as const } : {}),
      }),
    );
  }

  /** An effect item; `attempts` (refusals so far) only when there were some, keeping plain items small. */
  #item(claim: Claim, keyHash: string, state: EffectState, attempts = 0): Record<string, AttributeValue> {
    return {
      ...this.#key(claim.slot, keyHash),
      state: str(state),
      epoch: num(claim.epoch),
      owner: str(claim.owner),
      [TableLayout.ttlAttribute]: num(this.#expiresAt(claim.slot)),
      ...(attempts > 0 ? { attempts: num(attempts) } : {}),
      ...(claim.slot.shard !== undefined ? { shard: num(claim.slot.shard) } : {}),
    };
  }

  #marks(slot: Slot) {
    return readWindowDoneMarks(this.#client, this.#table, slot);
  }

  #key(slot: Slot, keyHash: string): Record<string, AttributeValue> {
    return {
      [TableLayout.partitionKey]: str(effectPartitionKey(slot.jobId, slot.window, keyHash)),
      [TableLayout.sortKey]: str(keyHash),
    };
  }
}

/** The attributes a provider's word is stored in on an effect item. */
const PROVIDER = { outcome: 'pOutcome', event: 'pEvent', at: 'pAt', messageId: 'pMessageId' } as const;

function providerWordOf(item: Record<string, AttributeValue>): { provider: ProviderWord } | undefined {
  const outcome = item[PROVIDER.outcome]?.S;
  if (outcome !== 'accepted' && outcome !== 'rejected') return undefined;
  const messageId = item[PROVIDER.messageId]?.S;
  return {
    provider: {
      outcome,
      event: item[PROVIDER.event]?.S ?? '',
      at: Number(item[PROVIDER.at]?.N ?? 0),
      epoch: Number(item.epoch?.N ?? 0),
      ...(messageId ? { messageId } : {}),
    },
  };
}

function toRecord(keyHash: string, item: Record<string, AttributeValue>): EffectRecord {
  return {
    keyHash,
    state: (item.state?.S ?? EffectState.Reserved) as EffectState,
    epoch: Number(item.epoch?.N ?? 0),
    owner: item.owner?.S ?? '',
    attempts: Number(item.attempts?.N ?? 0),
    ...(item.retryAt?.N !== undefined ? { retryAt: Number(item.retryAt.N) } : {}),
    ...(item.reason?.S !== undefined ? { reason: item.reason.S } : {}),
    ...(item.shard?.N !== undefined ? { shard: Number(item.shard.N) } : {}),
    ...(item.reservedAt?.N !== undefined ? { reservedAt: Number(item.reservedAt.N) } : {}),
    ...(item.seq?.N !== undefined ? { seq: Number(item.seq.N) } : {}),
    ...(providerWordOf(item) ?? {}),
  };
}

/**
 * The condition (joined with AND) that a stored reservation's number is not one `marks` cover:
 * none stored, at or above `below`, or open. Nothing when the epoch has no marks. `open` holds at
 * most MAX_OPEN_MARKS numbers, within the 100 operands IN takes.
 */
function notCoveredCondition(marks: EpochDoneMarks | undefined): {
  readonly condition: string;
  readonly names: Record<string, string>;
  readonly values: Record<string, AttributeValue>;
} {
  if (marks === undefined) return { condition: '', names: {}, values: {} };
  const open = marks.open.map((seq, i) => [`:open${i}`, num(seq)] as const);
  const isOpen = open.length > 0 ? ` OR #seq IN (${open.map(([name]) => name).join(', ')})` : '';
  return {
    condition: ` AND (attribute_not_exists(#seq) OR #seq >= :below${isOpen})`,
    names: { '#seq': 'seq' },
    values: { ':below': num(marks.below), ...Object.fromEntries(open) },
  };
}

/** Jittered exponential backoff for unprocessed batch items, so replicas do not retry in lockstep. */
function backoff(round: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, equalJitterDelayMs(round, 25, 1_000)));
}

function describeSlot(of: Claim | Slot): string {
  return 'epoch' in of
    ? `slot ${of.slot.jobId} ${of.slot.window} (epoch ${of.epoch})`
    : `slot ${of.jobId} ${of.window}`;
}

function storeError(operation: string, of: Claim | Slot, cause: unknown): StoreError {
  const detail = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
  return new StoreError(
    operation,
    `DynamoDB ${operation} of an effect of ${describeSlot(of)} failed after the client's retries (${detail})`,
    { cause },
  );
}
