import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { type EffectContext, effectFromHeaders } from '../shared/effects/effect-context.js';

/** What the server accepted, from one envelope sender or from all of them. */
export interface MailTally {
  /** Messages accepted (end of DATA), counted once per envelope recipient. */
  readonly total: number;
  /** Messages per envelope recipient. */
  readonly recipients: ReadonlyMap<string, number>;
  /** Messages beyond the first to any recipient. */
  readonly duplicates: number;
}

/**
 * The sink's word on a message that carries a slotguard effect (its `X-Slotguard-*` headers): the
 * provider's own record of it, as SES publishes a Send or a Reject event deployed.
 */
export interface SinkWord {
  /** 'accepted': the sink is about to answer 250; 'rejected': it is about to refuse the message. */
  readonly outcome: 'accepted' | 'rejected';
  /** The message's `Message-ID` without its angle brackets, or one the sink made up. */
  readonly messageId: string;
}

/**
 * Told of the sink's word on each message that is an effect, before the sink answers it. The sink
 * answers 250 to an accepted message only once this resolves; if it fails, the sink refuses the
 * message with a 451 (the sender may try again) and counts nothing. A refusal stands whatever it
 * does.
 */
export type SinkWordListener = (effect: EffectContext, word: SinkWord) => Promise<unknown>;

/** How the sink runs. */
export interface SmtpSinkOptions {
  /** @default 0 (a free port) */
  readonly port?: number;
  /**
   * Told of the sink's word on every message that is an effect, before the sink answers it, so a
   * send that returned has its word on record (see `recordSmtpWords`).
   * @default none: the sink only counts
   */
  readonly onWord?: SinkWordListener;
  /**
   * Which messages the sink refuses, by their envelope recipients: a 554 at the end of the data,
   * as a provider that rejects a message (SES's Reject). Asked only of a message it would accept.
   * @default none: the sink refuses only a message over its 64 KiB limit (552)
   */
  readonly refuse?: (message: { readonly recipients: readonly string[] }) => boolean;
}

/**
 * A real SMTP server on loopback that accepts everything (but what `refuse` names, and a message
 * over 64 KiB) and counts deliveries per recipient.
 */
export interface SmtpSink {
  readonly host: string;
  readonly port: number;
  /** Messages accepted (end of DATA), per envelope recipient. */
  readonly received: ReadonlyMap<string, number>;
  /** Messages refused at the end of DATA, per envelope recipient. */
  readonly refused: ReadonlyMap<string, number>;
  /**
   * True when the sink tells `onWord` of every effect before answering it: its record of the
   * provider's word is then complete the moment a send returns.
   */
  readonly recordsWords: boolean;
  /** Messages accepted in all. */
  total(): number;
  /**
   * Resolves once no client is connected and no message awaits its answer: once a sender's
   * process is dead, everything it handed over has been answered, and its word told. (A pooled
   * sender keeps its connections open, so this is for after the sender is gone.)
   */
  idle(): Promise<void>;
  /** Recipients who received more than one message. */
  duplicates(): number;
  /**
   * What one envelope sender got through. The local runner sends each window's mail from its own
   * address (`<job>.<window>@slotguard.local`), so this is one window's delivery report.
   */
  from(sender: string): MailTally;
  reset(): void;
  close(): Promise<void>;
}

/** The largest message the sink accepts; slotguard's emails are a few KiB. */
const SIZE_LIMIT = 64 * 1024;

/**
 * The most of a message read for its headers. The sink takes 64 KiB messages; slotguard's headers
 * come first and are a few hundred bytes, so a header block longer than this is not one to read.
 */
const HEADER_LIMIT = 16 * 1024;

/**
 * Starts the sink on 127.0.0.1. The counts the demo, the runner and the tests show are read from
 * what this server accepted, not from counters inside the job; with `onWord`, it also reports its
 * word on each effect, as SES's events do deployed.
 */
export async function startSmtpSink(options: SmtpSinkOptions = {}): Promise<SmtpSink> {
  // Loaded here, not on import: smtp-server is a development dependency, and the installed package's
  // operator CLI imports this module without ever starting a sink.
  const { SMTPServer } = await import('smtp-server');
  const { onWord, refuse } = options;
  const received = new Map<string, number>();
  const refused = new Map<string, number>();
  const bySender = new Map<string, Map<string, number>>();
  let total = 0;
  const count = (mailFrom: string, recipients: readonly string[]) => {
    const senderTally = bySender.get(mailFrom) ?? new Map<string, number>();
    bySender.set(mailFrom, senderTally);
    for (const address of recipients) {
      received.set(address, (received.get(address) ?? 0) + 1);
      senderTally.set(address, (senderTally.get(address) ?? 0) + 1);
      total++;
    }
  };
  /** The listener's promise, a listener that throws instead of rejecting included. */
  const tell = (effect: EffectContext, word: SinkWord): Promise<unknown> =>
    onWord ? Promise.resolve().then(() => onWord(effect, word)) : Promise.resolve();
  /** Messages received in full and not answered yet, and who waits for none to be left. */
  let unanswered = 0;
  const idleWaiters: (() => void)[] = [];
  const wakeIfIdle = () => {
    if (server.connections.size > 0 || unanswered > 0) return;
    for (const resolve of idleWaiters.splice(0)) resolve();
  };
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    size: SIZE_LIMIT,
    // Called once the connection has left `server.connections`.
    onClose: wakeIfIdle,
    onData(stream, session, answer) {
      // Only the header block is kept: the body streams past unread.
      const head = new HeaderBlock();
      stream.on('data', (chunk: Buffer) => head.push(chunk));
      // A client that goes away mid-message destroys the stream: nothing was accepted.
      stream.on('error', () => {});
      stream.on('end', () => {
        unanswered++;
        const callback: typeof answer = (error, message) => {
          answer(error, message);
          unanswered--;
          wakeIfIdle();
        };
        const headers = head.headers();
        const effect = onWord ? effectFromHeaders(headers) : undefined;
        const messageId = messageIdOf(headers);
        const recipients = session.envelope.rcptTo.map((rcpt) => rcpt.address);
        // smtp-server takes an oversized message's end like any other: the refusal is the sink's.
        const refusal = stream.sizeExceeded
          ? smtpError(552, `message exceeds the sink's fixed maximum message size of ${SIZE_LIMIT} bytes`)
          : refuse?.({ recipients })
            ? smtpError(554, 'message refused')
            : undefined;
        if (refusal) {
          for (const address of recipients) refused.set(address, (refused.get(address) ?? 0) + 1);
          // The word first, then the refusal: a sender that dies between the two leaves an effect
          // whose record says it was never accepted. Not recorded, it is still never accepted.
          if (!effect) return callback(refusal);
          void tell(effect, { outcome: 'rejected', messageId })
            .catch(() => {})
            .then(() => callback(refusal));
          return;
        }
        const accept = () => {
          count(session.envelope.mailFrom ? session.envelope.mailFrom.address : '', recipients);
          callback(null, `OK: queued as ${messageId}`);
        };
        if (!effect) return accept();
        tell(effect, { outcome: 'accepted', messageId }).then(accept, () => {
          // Not on record, so not accepted: the sender hears a temporary refusal and may try again.
          callback(smtpError(451, 'could not record the message; try again later'));
        });
      });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, '127.0.0.1', () => resolve());
  });
  // A client that dies mid-session (a SIGKILLed replica) resets its connection; that is the
  // client's failure, not the server's, so it must not crash the process hosting the sink.
  server.on('error', () => {});
  const address = server.server.address() as AddressInfo;
  return {
    host: '127.0.0.1',
    port: address.port,
    received,
    refused,
    recordsWords: onWord !== undefined,
    total: () => total,
    idle() {
      const idle = new Promise<void>((resolve) => idleWaiters.push(resolve));
      wakeIfIdle();
      return idle;
    },
    duplicates: () => [...received.values()].filter((n) => n > 1).length,
    from(sender) {
      const recipients =
        bySender.get(sender.toLowerCase()) ?? bySender.get(sender) ?? new Map<string, number>();
      let n = 0;
      for (const messages of recipients.values()) n += messages;
      return { total: n, recipients, duplicates: n - recipients.size };
    },
    reset() {
      received.clear();
      refused.clear();
      bySender.clear();
      total = 0;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** An error smtp-server answers the end of DATA with, under `code`. */
function smtpError(code: number, message: string): Error {
  return Object.assign(new Error(message), { responseCode: code });
}

/** The message's `Message-ID` without its angle brackets, or one made up when it has none. */
function messageIdOf(headers: ReadonlyMap<string, string>): string {
  const raw = headers.get('message-id');
  const id = raw?.replace(/^<|>$/g, '').trim();
  return id ? id : `${randomUUID()}@slotguard-sink`;
}

/**
 * A message's header block, read from its first chunks up to the blank line that ends it (or
 * HEADER_LIMIT bytes), and parsed once asked: names lower-cased, folded lines unfolded.
 */
class HeaderBlock {
  #text = '';
  #complete = false;

  push(chunk: Buffer): void {
    if (this.#complete) return;
    this.#text += chunk.toString('latin1');
    const end = this.#text.search(/\r?\n\r?\n/);
    if (end >= 0) {
      this.#text = this.#text.slice(0, end);
      this.#complete = true;
    } else if (this.#text.length >= HEADER_LIMIT) {
      this.#text = this.#text.slice(0, HEADER_LIMIT);
      this.#complete = true;
    }
  }

  headers(): Map<string, string> {
    const headers = new Map<string, string>();
    let name: string | undefined;
    for (const line of this.#text.split(/\r?\n/)) {
      if (/^[ \t]/.test(line) && name !== undefined) {
        headers.set(name, `${headers.get(name) ?? ''} ${line.trim()}`);
        continue;
      }
      const colon = line.indexOf(':');
      if (colon <= 0) {
        name = undefined;
        continue;
      }
      name = line.slice(0, colon).trim().toLowerCase();
      // The first of a repeated header counts, as a mail server's log reads it.
      if (!headers.has(name)) headers.set(name, line.slice(colon + 1).trim());
      else name = undefined;
    }
    return headers;
  }
}
