import type { Clock } from '../clock.js';
import type { WalkWatermark } from '../effects/resumable-source.js';
import { StoreError } from '../errors.js';
import type { Checkpoint, Claim, ClaimStore, RunSummary } from '../slot/ports.js';

export interface CheckpointerOptions {
  readonly store: ClaimStore;
  readonly claim: Claim;
  readonly clock: Clock;
  /** The run's counts so far, stored beside the checkpoint for operators watching a long run. */
  readonly progress: () => RunSummary;
  /** A checkpoint write found a later epoch on the slot: the lease is gone. */
  readonly onFenced: (message: string) => void;
  /**
   * Write once this many items have settled since the last write…
   * @default 100
   */
  readonly everyItems?: number;
  /**
   * …or once this long has passed with the watermark moved, whichever comes first.
   * @default 5_000
   */
  readonly everyMs?: number;
}

/**
 * Keeps a window's checkpoint on its slot record while a run walks resumable sources: as effects
 * settle (and their done marks are written), each source's watermark moves, and the position is
 * written, fenced on owner and epoch, every 100 settled items or 5 seconds, whichever comes first.
 * The done marks, not the checkpoint, are what keeps a crash's in-doubt set small; a checkpoint only
 * saves re-walking, so a crash costs a continuation at most that much re-walking (each item found
 * done or in doubt at one conditional write), for about one write per 100 recipients.
 */
export class Checkpointer {
  readonly #o: CheckpointerOptions;
  readonly #positions: Record<string, string>;
  readonly #watermarks = new Map<string, WalkWatermark>();
  #walked: boolean;
  #moved = false;
  #dirty = false;
  #settledSinceWrite = 0;
  #writing: Promise<void> | undefined;
  #writeAgain = false;
  #cancelTimer: (() => void) | undefined;
  #stopped = false;
  #bug: { readonly error: unknown } | undefined;

  constructor(options: CheckpointerOptions) {
    this.#o = options;
    this.#positions = { ...(options.claim.window.checkpoint?.positions ?? {}) };
    this.#walked = options.claim.window.checkpoint?.walked ?? false;
  }

  /** True once this run moved any source's position forward: the window progressed durably. */
  get moved(): boolean {
    return this.#moved;
  }

  /** Where the last run left source `name`, if it left a position. */
  startOf(name: string): string | undefined {
    return this.#positions[name];
  }

  /** Tracks a walk of source `name`; its watermark's position is checkpointed from now on. */
  track(name: string, watermark: WalkWatermark): void {
    this.#watermarks.set(name, watermark);
  }

  /** The job's walk ran to the end: whatever is left only waits for retries. */
  markWalked(): void {
    this.#walked = true;
  }

  /** The checkpoint as it stands now. */
  current(): Checkpoint {
    for (const [name, watermark] of this.#watermarks) {
      if (watermark.position !== undefined) this.#positions[name] = watermark.position;
    }
    return { positions: { ...this.#positions }, walked: this.#walked };
  }

  /** Done marks were written: the items waiting for them may move the watermarks. */
  marked(keyHashes: readonly string[]): void {
    for (const watermark of this.#watermarks.values()) watermark.marked(keyHashes);
    this.#changed(0);
  }

  /** An item of a tracked walk settled. */
  settled(): void {
    this.#changed(1);
  }

  /** Stops writing; waits for a write under way. The final position goes with the release. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    await this.#writing;
    if (this.#bug) throw this.#bug.error;
  }

  #changed(settled: number): void {
    this.#settledSinceWrite += settled;
    let advanced = false;
    for (const watermark of this.#watermarks.values()) advanced = watermark.takeAdvance() || advanced;
    if (advanced) {
      this.#moved = true;
      this.#dirty = true;
    }
    if (!this.#dirty || this.#stopped) return;
    if (this.#settledSinceWrite >= (this.#o.everyItems ?? 100)) {
      this.#write();
    } else if (!this.#cancelTimer) {
      this.#cancelTimer = this.#o.clock.schedule(this.#o.everyMs ?? 5_000, () => {
        this.#cancelTimer = undefined;
        this.#write();
      });
    }
  }

  /** One write at a time; a write asked for while one is under way follows it. */
  #write(): void {
    if (this.#stopped) return;
    if (this.#writing) {
      this.#writeAgain = true;
      return;
    }
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    this.#dirty = false;
    this.#settledSinceWrite = 0;
    const checkpoint = this.current();
    this.#writing = this.#o.store
      .checkpoint(this.#o.claim, checkpoint, this.#o.progress())
      .then((outcome) => {
        if (outcome.kind === 'fenced') {
          this.#o.onFenced(
            `checkpoint of slot ${this.#o.claim.slot.jobId} ${this.#o.claim.slot.window} was rejected: ` +
              `epoch ${outcome.epoch ?? '?'} (${outcome.state ?? 'gone'}) holds it now, epoch ${this.#o.claim.epoch} is fenced`,
          );
        }
      })
      .catch((error: unknown) => {
        // A checkpoint that could not be written only costs re-walking; the next one carries it.
        // Anything but a store failure is a bug: stop() throws it, so the run fails loudly.
        if (error instanceof StoreError) this.#dirty = true;
        else this.#bug ??= { error };
      })
      .finally(() => {
        this.#writing = undefined;
        if (this.#writeAgain) {
          this.#writeAgain = false;
          this.#write();
        }
      });
  }
}
