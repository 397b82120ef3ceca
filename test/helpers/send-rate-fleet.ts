import { setMaxListeners } from 'node:events';
import type { Clock } from '../../shared/clock.js';
import type { RateLimitStore } from '../../shared/effects/rate-limit-store.js';
import { SharedRateLimiter } from '../../shared/effects/shared-rate-limiter.js';
import { inVirtualTime, type VirtualClock } from './virtual-clock.js';

/**
 * One job's send-rate timeline on a backend: `worker()` gives the store a new worker (a Lambda) would
 * build, each on the same backing item, row or map.
 */
export interface SendRateBackend {
  worker(): RateLimitStore;
}

/** Stores whose requests are counted while in flight, so virtual time never overtakes one. */
function counted(backend: SendRateBackend) {
  let inFlight = 0;
  let requests = 0;
  return {
    inFlight: () => inFlight,
    requests: () => requests,
    worker(): RateLimitStore {
      const store = backend.worker();
      return {
        async reserve(request) {
          inFlight++;
          requests++;
          try {
            return await store.reserve(request);
          } finally {
            inFlight--;
          }
        },
      };
    },
  };
}

/** `store` with its replies delayed `ms` on `clock` (after the store acted, outside the in-flight count). */
function replyAfter(clock: Clock, ms: number, store: RateLimitStore): RateLimitStore {
  if (ms === 0) return store;
  return {
    async reserve(request) {
      const reservation = await store.reserve(request);
      await new Promise((resolve) => clock.schedule(ms, () => resolve(undefined)));
      return reservation;
    },
  };
}

/** What a fleet did. */
export interface Fleet {
  /** When each send started, across every worker, in order. */
  readonly sends: number[];
  readonly limiters: SharedRateLimiter[];
  readonly requests: number;
}

/**
 * `workers` limiters on one timeline, each with `senders` callers that take a token and send at
 * once, as fast as the limiter lets them, from now until `until` (on the virtual clock). Each
 * worker's clock is `clockOf(i)` (default the virtual clock); with `roundTripMs`, each reservation's
 * reply reaches its worker that long after the store made it.
 */
export async function runFleet(
  clock: VirtualClock,
  backend: SendRateBackend,
  options: {
    readonly workers: number;
    readonly senders: number;
    readonly ratePerSecond: number;
    readonly burst?: number;
    readonly until: number;
    readonly clockOf?: (worker: number) => Clock;
    readonly roundTripMs?: number;
  },
): Promise<Fleet> {
  const stores = counted(backend);
  const sends: number[] = [];
  const stop = new AbortController();
  // Every sender of the fleet waits on this one signal.
  setMaxListeners(0, stop.signal);
  const cancel = clock.schedule(options.until - clock.now(), () => stop.abort(new Error('span over')));
  const limiters = Array.from(
    { length: options.workers },
    (_, i) =>
      new SharedRateLimiter({
        store: replyAfter(clock, options.roundTripMs ?? 0, stores.worker()),
        ratePerSecond: options.ratePerSecond,
        clock: options.clockOf?.(i) ?? clock,
        ...(options.burst !== undefined ? { burst: options.burst } : {}),
      }),
  );
  const sender = async (limiter: SharedRateLimiter) => {
    for (;;) {
      try {
        await limiter.take(stop.signal);
      } catch {
        return;
      }
      sends.push(clock.now());
    }
  };
  await inVirtualTime(
    clock,
    stores.inFlight,
    Promise.all(
      limiters.flatMap((limiter) => Array.from({ length: options.senders }, () => sender(limiter))),
    ),
  );
  cancel();
  return { sends: sends.sort((a, b) => a - b), limiters, requests: stores.requests() };
}

/** The most sends that start within any `windowMs` (each window opening at a send). */
export function busiestWindow(sends: readonly number[], windowMs: number): number {
  let most = 0;
  let first = 0;
  for (let last = 0; last < sends.length; last++) {
    while (sends[last]! - sends[first]! >= windowMs) first++;
    most = Math.max(most, last - first + 1);
  }
  return most;
}
