import type { EffectResult } from '../effects/effect-runner.js';
import type { ResumableSource, ShardOfWindow } from '../effects/resumable-source.js';
import type { Delivery } from '../slot/ports.js';
import type { Slot } from '../slot/slot.js';
import type { Log } from '../telemetry/log.js';

/** The context a job's `run` receives for one claimed (job, window) slot. */
export interface JobContext {
  readonly slot: Slot;
  /** The scheduled time of the window, as a Date (the same instant as `slot.window`). */
  readonly scheduledTime: Date;
  /** This run's fencing epoch. */
  readonly epoch: number;
  readonly delivery: Delivery;
  /** Aborted the moment the lease is lost; pass it to every call that can be cancelled. */
  readonly signal: AbortSignal;
  /**
   * This run's shard, when the job splits each window into shards (`shards` in its JobSpec): each
   * shard is its own run, in parallel. `onceEach` keeps only this shard's items (by the hash of
   * their key) unless told the source already did (`split: 'source'`).
   */
  readonly shard?: ShardOfWindow;
  /** Free-form input from the schedule's target input (`payload`), validated for size. */
  readonly payload: unknown;
  readonly log: Log;
  /**
   * Performs `effect` at most once for `effectKey` in this window, across every replica, retry and
   * takeover. The key is HMAC-hashed before it is stored or logged. The `signal` handed to `effect`
   * aborts when the lease is lost or the invocation's time is nearly out (half the stop margin
   * left): let it end a wait that has sent nothing, not a request already sent.
   * @example await ctx.once(`invoice-email:${invoice.id}`, () => sender.send(message))
   */
  once(effectKey: string, effect: (signal: AbortSignal) => Promise<void>): Promise<EffectResult>;
  /**
   * Performs `effect` once per item of `items`, at most `concurrency` at a time, pulling items only
   * as workers free up so the whole list is never in memory. Stops taking items when the lease is
   * lost or the Lambda's remaining time falls under the margin; a continuation of the same window
   * picks up the rest. The `signal` handed to `effect` also aborts with half the margin left, so a
   * wait that has sent nothing (a send slot) ends before the invocation does; a call already sent
   * should not be cancelled by it.
   *
   * With a plain (async) iterable, the continuation walks the list from the start and skips what is
   * done, at one conditional write per recipient already done. With a ResumableSource, it reads on
   * from the checkpoint the last run left (written with the done marks, fenced by epoch), and only
   * goes back over the list for refused effects that are due for their retry.
   * @example await ctx.onceEach(customers, { key: (c) => c.email, concurrency: 16 }, (c, signal) => send(c, signal))
   */
  onceEach<T>(
    items: AsyncIterable<T> | Iterable<T> | ResumableSource<T>,
    options: {
      readonly key: (item: T) => string;
      readonly concurrency?: number;
      /**
       * In a sharded window, who keeps each shard to its own items. `by-key`: every shard reads the
       * whole list and keeps the items whose key hashes to it (no request for the others, but each
       * shard reads and hashes every item). `source`: the job read `ctx.shard` and its source gives
       * only this shard's items (a query by id range, say), which costs nothing extra.
       * @default 'by-key'
       */
      readonly split?: 'by-key' | 'source';
    },
    effect: (item: T, signal: AbortSignal) => Promise<void>,
  ): Promise<void>;
}

/** A job: its id and what one window of it does. */
export interface JobDefinition {
  readonly id: string;
  run(ctx: JobContext): Promise<void>;
}

/** Declares a job. @example export const job = defineJob({ id: 'weekly-report', run: async (ctx) => { … } }) */
export function defineJob(job: JobDefinition): JobDefinition {
  return job;
}
