/**
 * Runs `fn` over an iterator's items, at most `concurrency` at a time. Each worker pulls its next
 * item only when it is free, so at most `concurrency` items are in memory, and it asks `stop`
 * before pulling, so no item is taken and then dropped. If `fn` throws, no worker takes another
 * item, and the first error is rethrown once every call under way has finished.
 */
export async function drainConcurrently<T>(
  items: AsyncIterable<T> | Iterable<T>,
  concurrency: number,
  fn: (item: T) => Promise<unknown>,
  stop: () => boolean = () => false,
): Promise<void> {
  const iterator = toAsyncIterator(items);
  let failure: { readonly error: unknown } | undefined;
  const worker = async () => {
    try {
      while (!failure && !stop()) {
        const next = await iterator.next();
        if (next.done) return;
        await fn(next.value);
      }
    } catch (error) {
      // One failure stops every worker from taking more, but the others finish what they hold: the
      // caller gives its slot back only once nothing of this run is still under way.
      failure ??= { error };
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  if (failure || stop()) await iterator.return?.();
  if (failure) throw failure.error;
}

function toAsyncIterator<T>(items: AsyncIterable<T> | Iterable<T>): AsyncIterator<T> {
  if (Symbol.asyncIterator in items) return items[Symbol.asyncIterator]();
  const sync = items[Symbol.iterator]();
  return {
    next: async () => sync.next(),
    return: async () => sync.return?.() ?? { done: true, value: undefined },
  };
}

/** An item's work in two steps: `prepare` may run while the worker's previous item is finished. */
export interface TwoStep<T, P> {
  /** The first step (a reservation). Called in the order items are pulled. */
  prepare(item: T): Promise<P>;
  /** The second step (the send), given what `prepare` came to. */
  finish(item: T, prepared: P): Promise<unknown>;
}

/**
 * drainConcurrently with one item prepared ahead per worker: while a worker finishes an item, it
 * pulls its next one and starts preparing it, so the first step's latency hides behind the second
 * step of the item before. `stop` gates only pulling: an item already prepared is always finished
 * (its reservation stands), so stopping costs at most one item per worker that the run still does.
 */
export async function drainAhead<T, P>(
  items: AsyncIterable<T> | Iterable<T>,
  concurrency: number,
  steps: TwoStep<T, P>,
  stop: () => boolean = () => false,
): Promise<void> {
  const iterator = toAsyncIterator(items);
  let failure: { readonly error: unknown } | undefined;
  const pull = async (): Promise<{ item: T; prepared: Promise<P> } | undefined> => {
    if (failure || stop()) return undefined;
    const next = await iterator.next();
    if (next.done) return undefined;
    const prepared = steps.prepare(next.value);
    // Awaited by the loop below; a rejection must not surface as unhandled before then.
    prepared.catch(() => {});
    return { item: next.value, prepared };
  };
  const worker = async () => {
    let ahead: { item: T; prepared: Promise<P> } | undefined;
    try {
      let current = await pull();
      while (current) {
        const prepared = await current.prepared;
        const finishing = steps.finish(current.item, prepared);
        ahead = await pull().catch((error: unknown) => {
          failure ??= { error };
          return undefined;
        });
        await finishing;
        current = ahead;
        ahead = undefined;
      }
    } catch (error) {
      failure ??= { error };
      // An item prepared ahead is finished even so: its reservation stands, and the send it was
      // reserved for is as much under way as any other.
      const held = ahead;
      if (held) await held.prepared.then((p) => steps.finish(held.item, p)).catch(() => {});
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  if (failure || stop()) await iterator.return?.();
  if (failure) throw failure.error;
}
