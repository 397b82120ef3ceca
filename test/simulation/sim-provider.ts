import { type MemoryBackend, memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import type { EffectItem, MemoryTable } from '../../shared/backends/memory/memory-table.js';
import { currentEffect } from '../../shared/effects/effect-context.js';
import type { EffectKeyHasher } from '../../shared/effects/effect-key.js';
import type { EmailMessage, EmailSender } from '../../shared/effects/email-sender.js';
import { EffectNotPerformedError, NotPerformedReason } from '../../shared/errors.js';
import type { SlotBackend } from '../../shared/job/run-slot.js';
import type { ProviderWord, ProviderWordOutcome } from '../../shared/slot/ports.js';
import { type SendFate, START, type WordPlan } from './scenario.js';
import type { SimActor } from './sim-actor.js';
import { SLOT } from './store-watch.js';

/** The world as the mail provider and its recorder see it. */
export interface ProviderWorld {
  /** True time, in simulated milliseconds since the start. */
  readonly now: number;
  /** One step the scheduler orders against every other: resolves when fast-check picks it. */
  step(label: string): Promise<void>;
  note(who: string, text: string | (() => string)): void;
  /** True when the provider refuses `to` on every attempt (a suppressed address), whoever sends. */
  alwaysRefuses(to: string): boolean;
  /** The recipient behind an effect key hash. */
  recipientOf(keyHash: string): string;
  /** The provider took or rejected `message`: its events set out for the recorder, as `plan` says. */
  providerSpoke(message: ProviderMessage, plan: WordPlan): void;
}

/** One send as the provider saw it. */
export interface ProviderRecord {
  readonly to: string;
  readonly actor: string;
  readonly epoch: number | undefined;
  /** `rejected`: an address the provider refuses every time; `cancelled`: never reached the provider. */
  readonly fate: SendFate | 'rejected' | 'cancelled';
  /** The message reached the recipient: what a second email would repeat. */
  readonly delivered: boolean;
}

/** One delivery of one of a message's events to the recorder, and what the ledger made of it. */
export interface WordArrival {
  readonly event: 'Send' | 'Reject';
  readonly outcome: ProviderWord['outcome'];
  /** True time it reached the ledger. */
  readonly at: number;
  readonly answer: ProviderWordOutcome;
  /** The ledger wrote it (false: a duplicate of what was there, a DONE record, another epoch's). */
  readonly written: boolean;
  /** The table's version once it applied: a read at this version or later saw it. */
  readonly version: number;
}

/**
 * A message the provider took (`accepted`: SES's Send; it reaches the recipient unless rejected
 * after) or rejected without sending it (`rejected`: SES's Reject or Rendering Failure), tagged with
 * the effect that sent it, as the sender read it from `currentEffect()`.
 */
export interface ProviderMessage {
  readonly id: string;
  readonly to: string;
  readonly keyHash: string;
  readonly epoch: number;
  readonly shard: number | undefined;
  readonly actor: string;
  readonly outcome: ProviderWord['outcome'];
  /**
   * A message the provider took and then rejected all the same (SES: a Send, then a Reject for a
   * virus): it never reached the recipient, though the provider's Send says it was taken.
   */
  readonly rejectedAfterTaking: boolean;
  /** It reached the recipient: taken, and not rejected after. */
  readonly delivered: boolean;
  /** True time of the send. */
  readonly sentAt: number;
  readonly arrivals: WordArrival[];
}

/**
 * The mail provider every actor sends through: it counts what reached each recipient and every
 * attempt, and keeps each message it took or rejected with the events it published about it.
 */
export class MailProvider {
  readonly records: ProviderRecord[] = [];
  readonly messages: ProviderMessage[] = [];
  /** Sends that carried no effect context, or one naming another key, epoch or shard than the send's. */
  readonly mistagged: string[] = [];
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

  /** The message an effect's reservation of `epoch` sent, if the provider took or rejected one. */
  messageOf(keyHash: string, epoch: number, shard: number | undefined): ProviderMessage | undefined {
    return this.messages.find((m) => m.keyHash === keyHash && m.epoch === epoch && m.shard === shard);
  }
}

/** A message's events when the process's plan says nothing more: each arrives once, half a second after the send. */
const PROMPT_WORDS: WordPlan = { first: [{ after: 'send', ms: 500 }], rejectedAfter: undefined };

/**
 * One actor's email sender. A send is one step; what the provider does comes from the actor's plan,
 * except for an address the provider refuses every time. A send that "crashes" after the provider
 * accepted it still counts as delivered, unless the provider rejects the message after taking it.
 * Like a sender should, it refuses to start a send once the lease's signal has fired, saying it
 * cancelled (nothing attempted), and never cancels one in flight. Like the SES sender, it tags each
 * message with the effect being performed (`currentEffect()`), so the provider's events about it
 * name the effect's key hash and epoch.
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
    const effect = currentEffect();
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
    const taken = fate === 'ok' || fate === 'timeout-after-delivery';
    const spoken =
      taken || fate === 'timeout-after-rejection' ? this.#spoke(message.to, taken, effect) : undefined;
    const delivered = taken && spoken?.delivered !== false;
    this.#provider.record({ to: message.to, actor: actor.name, epoch: actor.epoch, fate, delivered });
    this.#world.note(
      actor.name,
      `send ${message.to}: ${fate}${delivered ? ', delivered' : taken ? ', taken, then rejected' : ''}`,
    );
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

  /**
   * The provider took (or rejected) the message: it keeps it, and sets out its events. Undefined
   * when the message carried no effect to tag it with: nothing could record its word.
   */
  #spoke(to: string, taken: boolean, effect: ReturnType<typeof currentEffect>): ProviderMessage | undefined {
    const actor = this.#actor;
    if (
      !effect ||
      effect.epoch !== actor.epoch ||
      effect.shard !== actor.shard ||
      this.#world.recipientOf(effect.keyHash) !== to
    ) {
      this.#provider.mistagged.push(
        `${actor.name} (epoch ${actor.epoch}${actor.shard === undefined ? '' : `, shard ${actor.shard}`}) sent to ${to} ` +
          (effect
            ? `tagged with the key of ${this.#world.recipientOf(effect.keyHash)}, epoch ${effect.epoch}, shard ${effect.shard ?? '(none)'}`
            : 'with no effect context'),
      );
      if (!effect) return undefined;
    }
    const plan = actor.nextWordPlan() ?? PROMPT_WORDS;
    const message: ProviderMessage = {
      id: `m${this.#provider.messages.length + 1}`,
      to,
      keyHash: effect.keyHash,
      epoch: effect.epoch,
      shard: effect.shard,
      actor: actor.name,
      outcome: taken ? 'accepted' : 'rejected',
      rejectedAfterTaking: taken && plan.rejectedAfter !== undefined,
      delivered: taken && plan.rejectedAfter === undefined,
      sentAt: this.#world.now,
      arrivals: [],
    };
    this.#provider.messages.push(message);
    this.#world.providerSpoke(message, plan);
    return message;
  }
}

/** How the simulation builds its provider recorder. */
export interface RecorderOptions {
  readonly hashKey: EffectKeyHasher;
  readonly returnOldOnConflict: boolean;
  /** The world's variant of the ports, so a broken recordProviderWord is the one that records. */
  readonly wrap: (backend: MemoryBackend) => SlotBackend;
  /** Each recording that wrote to the table: the record before and after it. */
  readonly observe: (
    keyHash: string,
    word: ProviderWord,
    before: EffectItem | undefined,
    after: EffectItem | undefined,
  ) => void;
}

/**
 * What the provider's events go through on their way to the ledger: the function subscribed to
 * them (SES → EventBridge → the recorder), which calls `EffectLedger.recordProviderWord` with the
 * effect its tags name. Each delivery of an event is one step; the recorder's own store requests
 * are not struck by faults (a failed recording is a lost event, which the plans already make).
 */
export class ProviderRecorder {
  readonly #world: ProviderWorld;
  readonly #table: MemoryTable;
  readonly #options: RecorderOptions;

  constructor(world: ProviderWorld, table: MemoryTable, options: RecorderOptions) {
    this.#world = world;
    this.#table = table;
    this.#options = options;
  }

  /** One delivery of `event` about `message` reaches the recorder. */
  async deliver(message: ProviderMessage, event: WordArrival['event']): Promise<void> {
    const outcome = event === 'Send' ? 'accepted' : 'rejected';
    const label = `${event} of ${message.id} to ${message.to} (epoch ${message.epoch})`;
    await this.#world.step(`recorder ${label}`);
    const word: ProviderWord = {
      outcome,
      event,
      messageId: message.id,
      at: START + this.#world.now,
      epoch: message.epoch,
    };
    const table = this.#table;
    const slot = { ...SLOT, ...(message.shard !== undefined ? { shard: message.shard } : {}) };
    const { hashKey, returnOldOnConflict, wrap } = this.#options;
    // Requests apply at once (the step above is the event's arrival): nothing else writes between
    // the reads around the call, so what changed is what the recorder wrote, however it wrote it.
    const ledger = wrap(memoryBackend({ table, hashKey, returnOldOnConflict })).ledger;
    // As the ledger reads them: a reservation its done marks cover is DONE.
    const before = table.effectiveEffect(SLOT, message.keyHash);
    const version = table.version;
    const answer = await ledger.recordProviderWord(slot, message.keyHash, word);
    const written = table.version > version;
    if (written)
      this.#options.observe(message.keyHash, word, before, table.effectiveEffect(SLOT, message.keyHash));
    message.arrivals.push({ event, outcome, at: this.#world.now, answer, written, version: table.version });
    this.#world.note('recdr', `${label}: ${answer}${written ? ', written' : ''} (${describe(before)})`);
  }
}

function describe(item: EffectItem | undefined): string {
  if (!item) return 'no record';
  const word = item.provider ? `, word ${item.provider.outcome} of epoch ${item.provider.epoch}` : '';
  return `${item.state} epoch ${item.epoch}${word}`;
}
