import type { EmailMessage, EmailSender } from '../../shared/effects/email-sender.js';
import { EffectNotPerformedError, NotPerformedReason } from '../../shared/errors.js';
import type { SendFate } from './scenario.js';
import type { SimActor } from './sim-actor.js';

/** The world as the mail provider sees it. */
export interface ProviderWorld {
  /** One step the scheduler orders against every other: resolves when fast-check picks it. */
  step(label: string): Promise<void>;
  note(who: string, text: string | (() => string)): void;
  /** True when the provider refuses `to` on every attempt (a suppressed address), whoever sends. */
  alwaysRefuses(to: string): boolean;
}

/** One send as the provider saw it. */
export interface ProviderRecord {
  readonly to: string;
  readonly actor: string;
  readonly epoch: number | undefined;
  /** `rejected`: an address the provider refuses every time; `cancelled`: never reached the provider. */
  readonly fate: SendFate | 'rejected' | 'cancelled';
  readonly delivered: boolean;
}

/** The mail provider every actor sends through: it counts what reached each recipient. */
export class MailProvider {
  readonly records: ProviderRecord[] = [];
  readonly #delivered = new Map<string, ProviderRecord[]>();

  record(entry: ProviderRecord): void {
    this.records.push(entry);
    if (!entry.delivered) return;
    const list = this.#delivered.get(entry.to) ?? [];
    list.push(entry);
    this.#delivered.set(entry.to, list);
  }

  /** The deliveries that reached `to`. */
  deliveriesTo(to: string): readonly ProviderRecord[] {
    return this.#delivered.get(to) ?? [];
  }

  /** The sends for `to` that reached the provider, refused or not: attempts, as the retry policy counts them. */
  attemptsFor(to: string): number {
    return this.records.filter((r) => r.to === to && r.fate !== 'cancelled').length;
  }
}

/**
 * One actor's email sender. A send is one step; what the provider does comes from the actor's plan,
 * except for an address the provider refuses every time. A send that "crashes" after the provider
 * accepted it still counts as delivered. Like a sender should, it refuses to start a send once the
 * lease's signal has fired, saying it cancelled (nothing attempted), and never cancels one in flight.
 */
export class SimulatedSender implements EmailSender {
  readonly #actor: SimActor;
  readonly #world: ProviderWorld;
  readonly #provider: MailProvider;

  constructor(actor: SimActor, world: ProviderWorld, provider: MailProvider) {
    this.#actor = actor;
    this.#world = world;
    this.#provider = provider;
  }

  async send(message: EmailMessage, options: { signal?: AbortSignal } = {}): Promise<void> {
    const actor = this.#actor;
    const op = actor.beginOp(`send ${message.to}`);
    await op.issue();
    if (options.signal?.aborted) {
      this.#provider.record({
        to: message.to,
        actor: actor.name,
        epoch: actor.epoch,
        fate: 'cancelled',
        delivered: false,
      });
      throw new EffectNotPerformedError('the lease was lost before the send started; nothing was sent', {
        reason: NotPerformedReason.Cancelled,
      });
    }
    const fate = this.#world.alwaysRefuses(message.to) ? 'rejected' : actor.nextSendFate();
    await this.#world.step(`${actor.name} send ${message.to}${fate === 'ok' ? '' : ` (${fate})`}`);
    const delivered = fate === 'ok' || fate === 'timeout-after-delivery';
    this.#provider.record({ to: message.to, actor: actor.name, epoch: actor.epoch, fate, delivered });
    this.#world.note(actor.name, `send ${message.to}: ${fate}${delivered ? ', delivered' : ''}`);
    op.landed();
    await actor.proceed();
    if (fate === 'refused') {
      throw new EffectNotPerformedError('the provider throttled the message; nothing was sent', {
        reason: NotPerformedReason.Throttled,
      });
    }
    if (fate === 'rejected') {
      throw new EffectNotPerformedError('the provider rejected the address; nothing was sent', {
        reason: NotPerformedReason.Rejected,
      });
    }
    if (fate !== 'ok') throw new Error(`timed out waiting for the provider (${fate})`);
  }
}
