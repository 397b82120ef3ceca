import { gatedBackend, gatedSender, InvocationGate } from '../../local/replica-faults.js';
import type { EmailSender } from '../../shared/effects/email-sender.js';
import type { SlotBackend } from '../../shared/job/run-slot.js';
import type { EffectLedger } from '../../shared/slot/ports.js';

/**
 * Counts the store requests and emails under way, so a test in virtual time moves the clock only
 * when none is (test/helpers/virtual-clock.ts inVirtualTime): no run is overtaken by time while it
 * waits for dynalite or the SMTP server. A gate that never crashes or freezes, counting what passes.
 */
export class InFlight extends InvocationGate {
  #count = 0;

  constructor() {
    super('in-flight counter');
  }

  /** Requests and emails under way now. */
  readonly count = (): number => this.#count;

  override async pass<T>(call: () => Promise<T>): Promise<T> {
    this.#count++;
    try {
      return await super.pass(call);
    } finally {
      this.#count--;
    }
  }

  /** `backend`, every request counted while under way (a ledger listing while it is read). */
  backend(backend: SlotBackend): SlotBackend {
    const counted = gatedBackend(backend, this);
    const list: EffectLedger['list'] = (slot) => this.#listing(backend.ledger.list(slot));
    return { ...counted, ledger: { ...counted.ledger, list } };
  }

  /** `sender`, each email counted while it travels to the server. */
  sender(sender: EmailSender & { close?(): void }): EmailSender & { close(): void } {
    const counted = gatedSender(sender, this, undefined, () => {});
    return { send: (message, options) => counted.send(message, options), close: () => sender.close?.() };
  }

  async *#listing<T>(items: AsyncIterable<T>): AsyncGenerator<T> {
    const iterator = items[Symbol.asyncIterator]();
    for (;;) {
      const next = await this.pass(() => iterator.next());
      if (next.done) return;
      yield next.value;
    }
  }
}
