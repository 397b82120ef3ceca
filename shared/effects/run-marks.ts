import { type EpochDoneMarks, MAX_OPEN_MARKS } from '../slot/ports.js';

/** What one snapshot of a run's done marks covers. */
export interface MarksSnapshot {
  readonly marks: EpochDoneMarks;
  /** Key hashes performed since the last snapshot that these marks cover: durable once they are written. */
  readonly newlyDone: readonly string[];
  /** Effects performed so far that these marks cover. */
  readonly covered: number;
}

/**
 * One run's done marks, kept as its effects settle. The run numbers each reservation it asks for
 * (take), then says what became of it: performed, closed (nothing of ours stands under the number:
 * the reservation was refused, or recorded FAILED on its own) or in doubt (never covered). A snapshot
 * covers every number below `below` except the open ones (asked and unsettled, or in doubt); it lists
 * at most MAX_OPEN_MARKS open numbers, so past that many `below` stops at the first one it cannot list.
 */
export class RunMarks {
  #next = 0;
  /** Reserved or being reserved, not yet settled. */
  readonly #pending = new Set<number>();
  /** In doubt: open for good. */
  readonly #doubt = new Set<number>();
  /** Performed and not yet in a snapshot, by number. */
  #performed: { readonly seq: number; readonly keyHash: string }[] = [];
  #covered = 0;

  /** The number for the next reservation. */
  take(): number {
    const seq = this.#next++;
    this.#pending.add(seq);
    return seq;
  }

  /** Reservation `seq`'s effect was performed. */
  performed(seq: number, keyHash: string): void {
    this.#pending.delete(seq);
    this.#performed.push({ seq, keyHash });
  }

  /** Nothing of ours stands under `seq` as RESERVED: the marks may pass it. */
  closed(seq: number): void {
    this.#pending.delete(seq);
  }

  /** Reservation `seq` may or may not have been performed (or committed): the marks never cover it. */
  inDoubt(seq: number): void {
    this.#pending.delete(seq);
    this.#doubt.add(seq);
  }

  /** Effects performed that no snapshot has covered yet. */
  get uncovered(): number {
    return this.#performed.length;
  }

  /**
   * The performed effects no snapshot has covered, handed over once: at the run's end, those no
   * marks will ever cover (a number below them stays open: more in doubt than MAX_OPEN_MARKS lists),
   * for the caller to mark one by one.
   */
  takeUncovered(): string[] {
    const keyHashes = this.#performed.map((done) => done.keyHash);
    this.#performed = [];
    return keyHashes;
  }

  /** The marks as they stand now, and the performed effects they newly cover. */
  snapshot(): MarksSnapshot {
    const open = [...this.#pending, ...this.#doubt].sort((a, b) => a - b);
    const below = open.length > MAX_OPEN_MARKS ? (open[MAX_OPEN_MARKS] as number) : this.#next;
    const listed = open.slice(0, MAX_OPEN_MARKS);
    const newlyDone: string[] = [];
    const waiting: { readonly seq: number; readonly keyHash: string }[] = [];
    for (const done of this.#performed) {
      if (done.seq < below) newlyDone.push(done.keyHash);
      else waiting.push(done);
    }
    this.#performed = waiting;
    this.#covered += newlyDone.length;
    return { marks: { below, open: listed }, newlyDone, covered: this.#covered };
  }
}
