import type { EffectResult } from './effect-runner.js';

/**
 * A list a continuation can resume part-way through: the job gives back where it is, and the next
 * run of the window reads on from the checkpoint instead of walking the whole list again (and
 * paying one conditional write per recipient already done).
 * @example
 * await ctx.onceEach(
 *   resumableSource({
 *     read: (after) => db.customersAfter(after), // ordered by id, strictly after `after`
 *     position: (customer) => customer.id,
 *   }),
 *   { key: (customer) => customer.email },
 *   (customer, signal) => sender.send(report(customer), { signal }),
 * );
 */
export interface ResumableSource<T> {
  /**
   * Names this list's checkpoint within the job; a job that walks two lists names each.
   * @default 'items'
   */
  readonly name?: string;
  /**
   * The items strictly after `position` (every item when it is undefined), in position order. The
   * order must be stable across runs of one window.
   */
  read(position: string | undefined): AsyncIterable<T> | Iterable<T>;
  /** Where `item` stands: a continuation reads after the last position checkpointed. */
  position(item: T): string;
}

/** Declares a resumable source (an identity function, for type inference at the call site). */
export function resumableSource<T>(source: ResumableSource<T>): ResumableSource<T> {
  return source;
}

/** True when `items` is a ResumableSource rather than a plain (async) iterable. */
export function isResumable<T>(
  items: AsyncIterable<T> | Iterable<T> | ResumableSource<T>,
): items is ResumableSource<T> {
  return (
    typeof (items as ResumableSource<T>).read === 'function' &&
    typeof (items as ResumableSource<T>).position === 'function' &&
    !(Symbol.iterator in items) &&
    !(Symbol.asyncIterator in items)
  );
}

/** The checkpoint name of a source. */
export function sourceName(source: ResumableSource<unknown>): string {
  return source.name ?? 'items';
}

/**
 * Tracks, for one walk of a resumable source, the furthest position before which every item has a
 * durable outcome: done and marked, skipped, in doubt (its reservation is on record), or refused
 * (its failure is on record). Items settle out of order (effects run concurrently; done marks are
 * batched), so the watermark only passes an item once everything before it has settled. That
 * position is what a checkpoint may promise a continuation.
 */
export class WalkWatermark {
  #nextSeq = 0;
  /** The lowest sequence number not yet durable: the watermark stops before it. */
  #lowest = 0;
  #position: string | undefined;
  #advanced = false;
  readonly #positions = new Map<number, string>();
  readonly #durable = new Set<number>();
  /** Items reported done whose marks are not yet written, by key hash. */
  readonly #awaitingMark = new Map<string, number>();
  /** Marks written before the item that needed them was reported done (a batch its own send filled). */
  readonly #markedEarly = new Set<string>();

  constructor(start: string | undefined) {
    this.#position = start;
  }

  /** The position the watermark has reached (the start when nothing has settled). */
  get position(): string | undefined {
    return this.#position;
  }

  /** True once the watermark has moved past the start; reset by takeAdvance(). */
  takeAdvance(): boolean {
    const advanced = this.#advanced;
    this.#advanced = false;
    return advanced;
  }

  /** An item pulled from the source, in order: its sequence number. */
  pulled(position: string): number {
    const seq = this.#nextSeq++;
    this.#positions.set(seq, position);
    return seq;
  }

  /** What became of item `seq`; a `done` item is durable once its mark is written. */
  settled(seq: number, keyHash: string | undefined, result: EffectResult): void {
    if (result === 'stopped') return; // never attempted: the watermark must stop before it
    if (result === 'done' && keyHash !== undefined) {
      if (!this.#markedEarly.delete(keyHash)) {
        this.#awaitingMark.set(keyHash, seq);
        return;
      }
    }
    this.#durable.add(seq);
    this.#advance();
  }

  /** Done marks written: the items waiting for them are durable. */
  marked(keyHashes: readonly string[]): void {
    for (const keyHash of keyHashes) {
      const seq = this.#awaitingMark.get(keyHash);
      if (seq === undefined) {
        this.#markedEarly.add(keyHash);
        continue;
      }
      this.#awaitingMark.delete(keyHash);
      this.#durable.add(seq);
    }
    this.#advance();
  }

  #advance(): void {
    while (this.#durable.delete(this.#lowest)) {
      this.#position = this.#positions.get(this.#lowest);
      this.#positions.delete(this.#lowest);
      this.#lowest++;
      this.#advanced = true;
    }
  }
}

/** One shard of a sharded window, as a job sees it. */
export interface ShardOfWindow {
  /** This run's shard, from 0. */
  readonly index: number;
  /** How many shards the window is split into. */
  readonly count: number;
}

/**
 * The shard a key belongs to, by its stored hash: the hash's first 32 bits modulo the count. Every
 * shard of a window hashes with the key version the window pinned, so a key lands in one shard.
 */
export function shardOfKeyHash(keyHash: string, count: number): number {
  return Number.parseInt(keyHash.slice(0, 8), 16) % count;
}
