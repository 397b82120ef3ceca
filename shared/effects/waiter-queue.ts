interface Waiter {
  readonly resolve: () => void;
  readonly reject: (reason: unknown) => void;
  readonly signal: AbortSignal | undefined;
  readonly onAbort: () => void;
}

/**
 * The callers of a rate limiter's `take`, first come, first served. A caller whose signal aborts
 * leaves the queue at once, rejected with the signal's reason, and `onAbort` lets the limiter
 * react (stop a timer nobody needs, reserve less).
 */
export class WaiterQueue {
  #waiters: Waiter[] = [];
  readonly #onAbort: () => void;

  constructor(onAbort: () => void) {
    this.#onAbort = onAbort;
  }

  /** Queues a caller; resolves when `release` reaches it, rejects when `signal` aborts first. */
  wait(signal: AbortSignal | undefined): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        resolve,
        reject,
        signal,
        onAbort: () => {
          this.#waiters = this.#waiters.filter((w) => w !== waiter);
          reject(signal?.reason);
          this.#onAbort();
        },
      };
      signal?.addEventListener('abort', waiter.onAbort, { once: true });
      this.#waiters.push(waiter);
    });
  }

  /** Callers waiting. */
  get length(): number {
    return this.#waiters.length;
  }

  /** Lets the first caller go. */
  release(): void {
    const waiter = this.#waiters.shift();
    if (!waiter) return;
    waiter.signal?.removeEventListener('abort', waiter.onAbort);
    waiter.resolve();
  }

  /** Rejects every caller after the first `keep` with `reason`. */
  rejectAfter(keep: number, reason: unknown): void {
    for (const waiter of this.#waiters.splice(keep)) {
      waiter.signal?.removeEventListener('abort', waiter.onAbort);
      waiter.reject(reason);
    }
  }
}
