import { randomUUID } from 'node:crypto';
import { type Clock, systemClock } from '../clock.js';
import { ConfigurationError } from '../errors.js';
import {
  BatchSendError,
  batchRequests,
  MAX_DELAY_MS,
  MAX_VISIBILITY_MS,
  queueSeconds,
  type SqsRecord,
  type VisibilityOutcome,
  type WorkQueue,
  WorkQueueError,
} from './work-queue.js';

/** Options of an `InProcessWorkQueue`. */
export interface InProcessWorkQueueOptions {
  /** @default the system clock */
  readonly clock?: Clock;
  /**
   * How long a received message stays invisible unless its visibility is changed (the queue's
   * VisibilityTimeout; the ScheduledJob's queue uses 6 × the function timeout).
   * @default 30_000 (SQS's default)
   */
  readonly visibilityTimeoutMs?: number;
  /**
   * Deliveries after which a message goes to the dead-letter list instead of being delivered
   * again (the redrive policy's maxReceiveCount).
   * @default no dead-letter list: a message is delivered until it is deleted
   */
  readonly maxReceiveCount?: number;
  /**
   * Asked at each delivery of a message: `true` hands it out twice, as a standard queue may: a
   * second record with its own receipt handle, in the same receive if the batch has room or else
   * in the next one. Either handle deletes it or changes its visibility.
   * @default never
   */
  readonly duplicate?: (message: { readonly messageId: string; readonly receiveCount: number }) => boolean;
  /**
   * Asked at each message sent: `true` refuses it, as SQS refuses a SendMessage (`send` throws a
   * WorkQueueError) or one entry of a SendMessageBatch (the batch's other messages in that request
   * are sent, and `sendBatch` throws BatchSendError after it). For tests and fault drills.
   * @default never
   */
  readonly refuse?: (message: { readonly body: string }) => boolean;
  /**
   * Names the queue in each record's eventSourceARN.
   * @default 'in-process'
   */
  readonly name?: string;
}

/** A message that was delivered `maxReceiveCount` times without being deleted. */
export interface DeadLetter {
  readonly messageId: string;
  readonly body: string;
  readonly receiveCount: number;
}

/** How many messages are where. */
export interface QueueCounts {
  /** Deliverable now. */
  readonly visible: number;
  /** Delayed, or received and not yet visible again. */
  readonly invisible: number;
  readonly deadLetters: number;
}

interface StoredMessage {
  readonly messageId: string;
  readonly body: string;
  readonly sentAt: number;
  readonly seq: number;
  visibleAt: number;
  receiveCount: number;
  firstReceivedAt: number | undefined;
  /** When the current receipt was handed out: SQS caps a visibility at 12 h from it. */
  receivedAt: number | undefined;
  /** Receipt handles of the current delivery (two when it was duplicated). */
  handles: Set<string>;
  /** A second copy of the current delivery is owed to the next receive. */
  duplicateDue: boolean;
}

/**
 * An SQS standard queue in the process, on an injected clock, for the local runner and tests:
 * delays, visibility timeouts, redelivery with growing receive counts, a dead-letter list after
 * maxReceiveCount, duplicate deliveries on demand. Delays and visibilities are whole seconds,
 * rounded up, within SQS's bounds, as the SQS adapter sends them.
 *
 * Receiving and deleting are what Lambda's event source mapping does; InProcessEventSource does
 * them for a handler.
 * @example
 * const queue = new InProcessWorkQueue({ clock, visibilityTimeoutMs: 5_400_000, maxReceiveCount: 100 });
 * await queue.send(JSON.stringify(event), 0);
 */
export class InProcessWorkQueue implements WorkQueue {
  readonly #clock: Clock;
  readonly #visibilityTimeoutMs: number;
  readonly #maxReceiveCount: number | undefined;
  readonly #duplicate: InProcessWorkQueueOptions['duplicate'];
  readonly #refuse: InProcessWorkQueueOptions['refuse'];
  readonly #arn: string;
  readonly #messages = new Map<string, StoredMessage>();
  readonly #byHandle = new Map<string, StoredMessage>();
  readonly #deadLetters: DeadLetter[] = [];
  readonly #listeners = new Set<() => void>();
  #seq = 0;

  constructor(options: InProcessWorkQueueOptions = {}) {
    this.#clock = options.clock ?? systemClock;
    const visibility = options.visibilityTimeoutMs ?? 30_000;
    if (!(visibility >= 0 && visibility <= MAX_VISIBILITY_MS)) {
      throw new ConfigurationError(
        'visibilityTimeoutMs',
        `visibilityTimeoutMs is ${visibility}; use 0 to ${MAX_VISIBILITY_MS} (12 hours, SQS's limit)`,
      );
    }
    this.#visibilityTimeoutMs = queueSeconds(visibility, MAX_VISIBILITY_MS, 'visibilityTimeoutMs') * 1000;
    const max = options.maxReceiveCount;
    if (max !== undefined && !(Number.isInteger(max) && max >= 1 && max <= 1000)) {
      throw new ConfigurationError(
        'maxReceiveCount',
        `maxReceiveCount is ${max}; use a whole number from 1 to 1000 (SQS's limit), or leave it out for no dead-letter list`,
      );
    }
    this.#maxReceiveCount = max;
    this.#duplicate = options.duplicate;
    this.#refuse = options.refuse;
    this.#arn = `arn:aws:sqs:local:000000000000:${options.name ?? 'in-process'}`;
  }

  async send(body: string, delayMs: number): Promise<void> {
    const delayedMs = queueSeconds(delayMs, MAX_DELAY_MS, 'delayMs') * 1000;
    const refusal = this.#refusal(body);
    if (refusal) throw refusal;
    this.#store(body, delayedMs);
    this.#changed();
  }

  /** As SQS's SendMessageBatch: the same requests (batchRequests), each message taken or refused on its own. */
  async sendBatch(bodies: readonly string[], delayMs: number): Promise<void> {
    const delayedMs = queueSeconds(delayMs, MAX_DELAY_MS, 'delayMs') * 1000;
    let sent = 0;
    try {
      for (const request of batchRequests(bodies)) {
        const refusals: WorkQueueError[] = [];
        for (const body of request) {
          const refusal = this.#refusal(body);
          if (refusal) refusals.push(refusal);
          else {
            this.#store(body, delayedMs);
            sent++;
          }
        }
        if (refusals.length > 0) {
          throw new BatchSendError(
            `sent ${sent} of ${bodies.length} messages to the in-process queue: it refused ${refusals.length} of a ` +
              `request of ${request.length} (its refuse option), and the rest of the batch was not sent`,
            { sent, total: bodies.length },
            { cause: refusals[0] },
          );
        }
      }
    } finally {
      if (sent > 0) this.#changed();
    }
  }

  async changeVisibility(receiptHandle: string, visibleInMs: number): Promise<VisibilityOutcome> {
    const message = this.#byHandle.get(receiptHandle);
    const now = this.#clock.now();
    if (!message || message.visibleAt <= now) return 'not-in-flight';
    const visibleAt = now + queueSeconds(visibleInMs, MAX_VISIBILITY_MS, 'visibleInMs') * 1000;
    if (visibleAt - (message.receivedAt ?? now) > MAX_VISIBILITY_MS) {
      // SQS refuses rather than shortens: a visibility cannot reach past 12 hours from the receive.
      throw new WorkQueueError(
        'changeVisibility',
        `a visibility of ${visibleInMs} ms would end more than 12 hours after the message was received; ` +
          'SQS refuses it (the message stays invisible until its current visibility ends)',
      );
    }
    message.visibleAt = visibleAt;
    this.#changed();
    return 'changed';
  }

  /**
   * Receives up to `max` visible messages, oldest first, each hidden for the visibility timeout
   * under a new receipt handle. A message already delivered maxReceiveCount times goes to the
   * dead-letter list instead.
   */
  receive(max = 1): SqsRecord[] {
    const now = this.#clock.now();
    const due = [...this.#messages.values()]
      .filter((m) => this.#deliverable(m, now))
      .sort((a, b) => a.visibleAt - b.visibleAt || a.seq - b.seq);
    const records: SqsRecord[] = [];
    for (const message of due) {
      if (records.length >= max) break;
      if (message.duplicateDue) {
        // The copy owed from the last receive: same delivery, same receive count, its own handle.
        message.duplicateDue = false;
        records.push(this.#record(message));
        continue;
      }
      this.#forgetHandles(message);
      if (this.#maxReceiveCount !== undefined && message.receiveCount >= this.#maxReceiveCount) {
        this.#messages.delete(message.messageId);
        this.#deadLetters.push({
          messageId: message.messageId,
          body: message.body,
          receiveCount: message.receiveCount,
        });
        continue;
      }
      message.receiveCount++;
      message.firstReceivedAt ??= now;
      message.receivedAt = now;
      message.visibleAt = now + this.#visibilityTimeoutMs;
      records.push(this.#record(message));
      if (this.#duplicate?.({ messageId: message.messageId, receiveCount: message.receiveCount })) {
        if (records.length < max) records.push(this.#record(message));
        else message.duplicateDue = true;
      }
    }
    if (due.length > 0) this.#changed();
    return records;
  }

  /**
   * Deletes the message a receipt handle was issued for, if that handle is still current. A stale
   * handle (the message was delivered again since) deletes nothing: the newer delivery owns it.
   */
  delete(receiptHandle: string): boolean {
    const message = this.#byHandle.get(receiptHandle);
    if (!message) return false;
    this.#forgetHandles(message);
    this.#messages.delete(message.messageId);
    this.#changed();
    return true;
  }

  /** When the next message becomes deliverable (now, if one is), or undefined for an empty queue. */
  nextVisibleAt(): number | undefined {
    let next: number | undefined;
    const now = this.#clock.now();
    for (const message of this.#messages.values()) {
      const at = message.duplicateDue ? now : message.visibleAt;
      if (next === undefined || at < next) next = at;
    }
    return next;
  }

  counts(): QueueCounts {
    const now = this.#clock.now();
    let visible = 0;
    for (const message of this.#messages.values()) if (this.#deliverable(message, now)) visible++;
    return { visible, invisible: this.#messages.size - visible, deadLetters: this.#deadLetters.length };
  }

  /** Messages moved to the dead-letter list, oldest first. */
  get deadLetters(): readonly DeadLetter[] {
    return this.#deadLetters;
  }

  /** Calls `listener` after every change (a send, a receive, a visibility change, a delete). */
  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  #refusal(body: string): WorkQueueError | undefined {
    if (!this.#refuse?.({ body })) return undefined;
    return new WorkQueueError('send', 'the in-process queue refused the message (its refuse option)');
  }

  #store(body: string, delayedMs: number): void {
    const now = this.#clock.now();
    const message: StoredMessage = {
      messageId: randomUUID(),
      body,
      sentAt: now,
      seq: this.#seq++,
      visibleAt: now + delayedMs,
      receiveCount: 0,
      firstReceivedAt: undefined,
      receivedAt: undefined,
      handles: new Set(),
      duplicateDue: false,
    };
    this.#messages.set(message.messageId, message);
  }

  #record(message: StoredMessage): SqsRecord {
    const receiptHandle = `${message.messageId}/${randomUUID()}`;
    message.handles.add(receiptHandle);
    this.#byHandle.set(receiptHandle, message);
    return {
      messageId: message.messageId,
      receiptHandle,
      body: message.body,
      attributes: {
        ApproximateReceiveCount: String(message.receiveCount),
        SentTimestamp: String(message.sentAt),
        ApproximateFirstReceiveTimestamp: String(message.firstReceivedAt),
      },
      eventSource: 'aws:sqs',
      eventSourceARN: this.#arn,
    };
  }

  #forgetHandles(message: StoredMessage): void {
    for (const handle of message.handles) this.#byHandle.delete(handle);
    message.handles.clear();
    message.duplicateDue = false;
  }

  #deliverable(message: StoredMessage, now: number): boolean {
    return message.duplicateDue || message.visibleAt <= now;
  }

  #changed(): void {
    for (const listener of this.#listeners) listener();
  }
}
