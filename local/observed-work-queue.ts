import {
  type DeadLetter,
  InProcessWorkQueue,
  type InProcessWorkQueueOptions,
} from '../shared/continuation/in-process-work-queue.js';
import type { SqsRecord } from '../shared/continuation/work-queue.js';

/** What the local runner is told about each message of an `ObservedWorkQueue`. */
export interface WorkQueueObserver {
  /** Records just handed out; a duplicated delivery's copy comes as a record of its own. */
  received(records: readonly SqsRecord[]): void;
  /** The message is gone: deleted through a current receipt handle. */
  deleted(messageId: string): void;
  /** The message was received maxReceiveCount times and moved to the dead-letter list. */
  deadLettered(letter: DeadLetter): void;
}

/**
 * A job's in-process work queue that tells the local runner when a message is received, deleted or
 * dead-lettered, so it knows when every message of a window is gone. The queue's semantics are the
 * in-process queue's, untouched: only the outcomes are reported.
 */
export class ObservedWorkQueue extends InProcessWorkQueue {
  readonly #observer: WorkQueueObserver;
  /** Receipt handles handed out and not yet deleted, by the message they belong to. */
  readonly #messageOf = new Map<string, string>();

  constructor(options: InProcessWorkQueueOptions & { readonly observer: WorkQueueObserver }) {
    const { observer, ...queue } = options;
    super(queue);
    this.#observer = observer;
  }

  override receive(max = 1): SqsRecord[] {
    const letters = this.deadLetters.length;
    const records = super.receive(max);
    for (const record of records) this.#messageOf.set(record.receiptHandle, record.messageId);
    for (const letter of this.deadLetters.slice(letters)) {
      this.#forget(letter.messageId);
      this.#observer.deadLettered(letter);
    }
    if (records.length > 0) this.#observer.received(records);
    return records;
  }

  override delete(receiptHandle: string): boolean {
    const deleted = super.delete(receiptHandle);
    const messageId = this.#messageOf.get(receiptHandle);
    if (deleted && messageId !== undefined) {
      this.#forget(messageId);
      this.#observer.deleted(messageId);
    }
    return deleted;
  }

  #forget(messageId: string): void {
    for (const [handle, id] of this.#messageOf) if (id === messageId) this.#messageOf.delete(handle);
  }
}
