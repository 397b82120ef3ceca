import type { Clock } from '../clock.js';
import type { WalkWatermark } from '../effects/resumable-source.js';
import type { RunMarks } from '../effects/run-marks.js';
import { StoreError } from '../errors.js';
import { withEpochMarks } from '../slot/done-marks.js';
import type { Checkpoint, Claim, ClaimStore, RunSummary } from '../slot/ports.js';

export interface CheckpointerOptions {
  readonly store: ClaimStore;
  readonly claim: Claim;
  readonly clock: Clock;
  /** The run's counts so far, stored beside the checkpoint for operators watching a long run. */
  readonly progress: () => RunSummary;
  /** The run's done marks: written with every checkpoint. */
  readonly marks: RunMarks;
  /** A checkpoint write found a later epoch on the slot: the lease is gone. */
  readonly onFenced: (message: string) => void;
  /**
   * Marks performed effects done one by one (EffectLedger.markDone): once the run is fenced, its
   * marks can no longer go on the slot, and the sends it still finishes are recorded this way; so
   * are those whose marks the run's last write failed to put there.
   */
  readonly markEach: (keyHashes: readonly string[]) => Promise<void>;
  /**
   * A write failed in the store: `unrecorded` performed effects are not on record yet (the next
   * write carries them; if none succeeds, they read in doubt).
   */
  readonly onWriteFailed?: (error: unknown, unrecorded: number) => void;
  /**
   * Write once this many effects have been performed since the last write…
   * @default 25
   */
  readonly everyPerformed?: number;
  /**
   * …or once this long has passed with an effect performed and not yet written, whichever comes first.
   * @default 1_000
   */
  readonly performedWithinMs?: number;
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
 * Keeps a window's checkpoint on its slot record: the run's done marks, and where it stands in each
 * resumable source. One write, fenced on owner and epoch, carries both:
 * - every 25 performed effects or 1 second after one, whichever comes first: the marks are what
 *   makes a performed effect DONE, so a crash leaves at most that many performed effects in doubt
 *   (as one batch of done marks did), for one write per 25 effects rather than one per effect;
 * - every 100 settled items or 5 seconds otherwise, when only positions moved (a walk past effects
 *   found done): a position saves re-walking, at about one write per 100 recipients.
 * A performed effect counts toward a source's position only with the marks that cover it, in the
 * same write. stop() writes what is left, before the run tallies its window.
 */
export class Checkpointer {
  readonly #o: CheckpointerOptions;
  readonly #positions: Record<string, string>;
  readonly #watermarks = new Map<string, WalkWatermark>();
  #walked: boolean;
  #moved = false;
  #dirty = false;
  #settledSinceWrite = 0;
  #performedSinceWrite = 0;
  #timerDue: number | undefined;
  #writing: Promise<void> | undefined;
  #writeAgain = false;
  #cancelTimer: (() => void) | undefined;
  #stopped = false;
  /** A later epoch holds the slot: marks go on each effect's own record from now on. */
  #fenced = false;
  /**
   * Key hashes of performed effects that snapshots covered and no write has put on record yet (a
   * write failed, or is under way): what a fenced run marks one by one.
   */
  #unrecorded: string[] = [];
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

  /** An effect was performed: its done mark goes with the next write. */
  performed(): void {
    if (this.#stopped) return;
    this.#moved = true;
    if (++this.#performedSinceWrite >= (this.#o.everyPerformed ?? 25)) this.#write();
    else this.#writeWithin(this.#o.performedWithinMs ?? 1_000);
  }

  /** An item of a tracked walk settled. */
  settled(): void {
    this.#settledSinceWrite++;
    this.#advanceWatermarks();
    if (!this.#dirty || this.#stopped) return;
    if (this.#settledSinceWrite >= (this.#o.everyItems ?? 100)) this.#write();
    else this.#writeWithin(this.#o.everyMs ?? 5_000);
  }

  /**
   * Writes what is left (marks and positions not yet written), then stops writing. The run's
   * performed effects read DONE to its own tally, and to every later run, only once this is written.
   * If the last write fails, no later one carries its marks: the performed effects they cover are
   * marked one by one instead, and so are those its marks could not cover (more numbers in doubt
   * below them than marks list), so a run that goes on to finish its window leaves none in doubt.
   */
  async stop(): Promise<void> {
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
    while (this.#writing) await this.#writing;
    if (this.#performedSinceWrite > 0 || this.#o.marks.uncovered > 0 || this.#dirty) {
      this.#write();
      while (this.#writing) await this.#writing;
    }
    // Performed effects the last marks could not cover (a number below them is open for good) are
    // never covered by a later write either: marked one by one too.
    this.#unrecorded.push(...this.#o.marks.takeUncovered());
    if (this.#unrecorded.length > 0) await this.#markUnrecorded().catch((error) => this.#failed(error));
    this.#stopped = true;
    if (this.#bug) throw this.#bug.error;
  }

  /** Marks one by one the performed effects that snapshots covered and no write put on record. */
  async #markUnrecorded(): Promise<void> {
    const keyHashes = [...this.#unrecorded];
    await this.#o.markEach(keyHashes);
    this.#unrecorded = this.#unrecorded.slice(keyHashes.length);
  }

  /**
   * A write failed. A store failure costs re-walking, and leaves the effects its marks newly covered
   * in doubt if no later write succeeds; anything else is a bug, which stop() throws.
   */
  #failed(error: unknown): void {
    if (error instanceof StoreError) {
      this.#dirty = true;
      this.#o.onWriteFailed?.(error, this.#unrecorded.length + this.#o.marks.uncovered);
    } else this.#bug ??= { error };
  }

  #advanceWatermarks(): void {
    let advanced = false;
    for (const watermark of this.#watermarks.values()) advanced = watermark.takeAdvance() || advanced;
    if (advanced) {
      this.#moved = true;
      this.#dirty = true;
    }
  }

  /** A write within `ms` from now, unless one is due sooner already. */
  #writeWithin(ms: number): void {
    const due = this.#o.clock.now() + ms;
    if (this.#cancelTimer && this.#timerDue !== undefined && this.#timerDue <= due) return;
    this.#cancelTimer?.();
    this.#timerDue = due;
    this.#cancelTimer = this.#o.clock.schedule(ms, () => {
      this.#cancelTimer = undefined;
      this.#timerDue = undefined;
      this.#write();
    });
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
    this.#timerDue = undefined;
    this.#settledSinceWrite = 0;
    this.#performedSinceWrite = 0;
    // The marks first: the items they newly cover may move the watermarks, and both go in this write.
    const { claim } = this.#o;
    const snapshot = this.#o.marks.snapshot();
    for (const watermark of this.#watermarks.values()) watermark.marked(snapshot.newlyDone);
    this.#advanceWatermarks();
    this.#dirty = false;
    const checkpoint = this.current();
    const doneMarks = withEpochMarks(claim.window.doneMarks, claim.epoch, snapshot.marks);
    this.#unrecorded.push(...snapshot.newlyDone);
    const written = this.#fenced
      ? this.#markUnrecorded().then(() => ({ kind: 'ok' as const }))
      : this.#o.store.checkpoint(claim, checkpoint, this.#o.progress(), doneMarks);
    this.#writing = written
      .then(async (outcome) => {
        if (outcome.kind === 'ok') this.#unrecorded = [];
        if (outcome.kind === 'fenced') {
          // A holder that outlived its lease still finishes the sends it had started; what it
          // performed is true, and is recorded on each effect's own record (as every mark was
          // before done marks), so a later epoch reads it done rather than in doubt.
          this.#fenced = true;
          this.#o.onFenced(
            `checkpoint of slot ${this.#o.claim.slot.jobId} ${this.#o.claim.slot.window} was rejected: ` +
              `epoch ${outcome.epoch ?? '?'} (${outcome.state ?? 'gone'}) holds it now, epoch ${this.#o.claim.epoch} is fenced`,
          );
          await this.#markUnrecorded();
        }
      })
      // The next write carries what this one did (marks are cumulative); stop() throws a bug, so
      // the run fails loudly.
      .catch((error: unknown) => this.#failed(error))
      .finally(() => {
        this.#writing = undefined;
        if (this.#writeAgain) {
          this.#writeAgain = false;
          this.#write();
        }
      });
  }
}
