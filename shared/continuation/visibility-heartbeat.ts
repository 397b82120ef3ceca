import type { Log } from '../telemetry/log.js';
import { safeErrorText } from '../telemetry/safe-error-text.js';
import type { WorkQueue } from './work-queue.js';

/**
 * Keeps the message that delivered a window invisible while the window's run holds its lease: at
 * the claim and after every renewal, the message's visibility is set to `visibleForMs` (two leases)
 * from now. A run that dies stops renewing, so its message comes back about two leases later
 * instead of after the queue's visibility timeout (six function timeouts), and the retry takes the
 * window over as soon as the dead holder's lease has ended.
 *
 * Changes go out one at a time, in order, so a late heartbeat can never overwrite the retry delay
 * the handler sets after the run (it waits for `settled()` first). A heartbeat that fails is
 * logged and otherwise ignored: the message then comes back later, never sooner than it should.
 */
export class VisibilityHeartbeat {
  readonly #queue: WorkQueue;
  readonly #receiptHandle: string;
  readonly #visibleForMs: number;
  readonly #log: Log;
  readonly #fields: Record<string, unknown>;
  #chain: Promise<void> = Promise.resolve();
  #beats = 0;

  constructor(options: {
    readonly queue: WorkQueue;
    readonly receiptHandle: string;
    readonly visibleForMs: number;
    readonly log: Log;
    /** Fields for the log line of a failed heartbeat (the message id). */
    readonly fields?: Record<string, unknown>;
  }) {
    this.#queue = options.queue;
    this.#receiptHandle = options.receiptHandle;
    this.#visibleForMs = options.visibleForMs;
    this.#log = options.log;
    this.#fields = options.fields ?? {};
  }

  /** Pushes the message's visibility to `visibleForMs` from now (queued behind earlier beats). */
  readonly beat = (): void => {
    this.#beats++;
    this.#chain = this.#chain.then(async () => {
      try {
        const outcome = await this.#queue.changeVisibility(this.#receiptHandle, this.#visibleForMs);
        if (outcome === 'not-in-flight') {
          this.#log.warn(
            'heartbeat found the message no longer in flight: it was delivered again meanwhile',
            {
              ...this.#fields,
            },
          );
        }
      } catch (error) {
        this.#log.warn(
          'visibility heartbeat failed; the message comes back when its current visibility ends',
          {
            ...this.#fields,
            error: safeErrorText(error),
          },
        );
      }
    });
  };

  /** Heartbeats sent so far. */
  get beats(): number {
    return this.#beats;
  }

  /** Resolves when every heartbeat sent so far has been answered. */
  settled(): Promise<void> {
    return this.#chain;
  }
}
