/**
 * Runs `fn` over an iterator's items, at most `concurrency` at a time. Each worker pulls its next
 * item only when it is free, so at most `concurrency` items are in memory, and it asks `stop`
 * before pulling, so no item is taken and then dropped.
 */
export async function drainConcurrently<T>(
  items: AsyncIterable<T> | Iterable<T>,
  concurrency: number,
  fn: (item: T) => Promise<unknown>,
  stop: () => boolean = () => false,
): Promise<void> {
  const iterator = toAsyncIterator(items);
  const worker = async () => {
    while (!stop()) {
      const next = await iterator.next();
      if (next.done) return;
      await fn(next.value);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  if (stop()) await iterator.return?.();
}

function toAsyncIterator<T>(items: AsyncIterable<T> | Iterable<T>): AsyncIterator<T> {
  if (Symbol.asyncIterator in items) return items[Symbol.asyncIterator]();
  const sync = items[Symbol.iterator]();
  return {
    next: async () => sync.next(),
    return: async () => sync.return?.() ?? { done: true, value: undefined },
  };
}
