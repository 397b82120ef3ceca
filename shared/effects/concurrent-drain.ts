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
