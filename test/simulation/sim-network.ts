import type { WriteResult } from '../../shared/backends/memory/memory-table.js';
import type { MemoryRequest, MemoryTransport } from '../../shared/backends/memory/memory-transport.js';
import type { EmailMessage, EmailSender } from '../../shared/effects/email-sender.js';
import { EffectNotPerformedError, NotPerformedReason } from '../../shared/errors.js';
import { CLIENT_ATTEMPTS, type SendFate, SLOW_MS } from './scenario.js';
import type { SimActor } from './sim-actor.js';

/** The world as the network and the mail provider see it. */
export interface NetworkWorld {
  /** One step the scheduler orders against every other: resolves when fast-check picks it. */
  step(label: string): Promise<void>;
  /** Resolves once `ms` of simulated time have passed. */
  sleep(ms: number): Promise<void>;
  note(who: string, text: string | (() => string)): void;
  /** The recipient behind an effect key hash, for readable traces. */
  recipientOf(keyHash: string): string;
  /** Faults that actually struck, counted for the run's statistics. */
  readonly faults: FaultCounts;
  /** A request was applied to the table, by `actor`, with this reply: the store's observer looks at it. */
  applied(actor: SimActor, request: MemoryRequest, reply: unknown): void;
  /** True when the provider refuses `to` on every attempt (a suppressed address), whoever sends. */
  alwaysRefuses(to: string): boolean;
}

/** Faults that struck in one case, for the run's statistics. */
export interface FaultCounts {
  throttled: number;
  lostReplies: number;
  slow: number;
  /** Requests whose every attempt failed: the caller got a StoreError. */
  exhausted: number;
}

/** What the client reports when every attempt of a request failed: the adapter makes it a StoreError. */
export class SimulatedClientError extends Error {
  override readonly name = 'SimulatedClientError';
}

/**
 * One actor's connection to the shared table, with the SDK's retry policy: each attempt is a
 * step fast-check orders, and its fate comes from the actor's plan. A lost reply means the attempt
 * applied and the client retried it, so the retry meets its own write, as it does on DynamoDB;
 * when every attempt failed the caller gets an error, whether or not one of them committed.
 */
export class SimulatedNetwork implements MemoryTransport {
  readonly #actor: SimActor;
  readonly #world: NetworkWorld;

  constructor(actor: SimActor, world: NetworkWorld) {
    this.#actor = actor;
    this.#world = world;
  }

  async send<R>(request: MemoryRequest, execute: () => R): Promise<R> {
    const actor = this.#actor;
    const label = describeRequest(request, this.#world);
    const op = actor.beginOp(label);
    await op.issue();
    let landed = false;
    for (let attempt = 1; attempt <= CLIENT_ATTEMPTS; attempt++) {
      // Retries come from the client in this process: a frozen process sends none until it thaws,
      // a dead one none at all. The first attempt is already on the wire.
      if (attempt > 1) await actor.proceed();
      const fate = actor.nextRequestFate();
      if (fate === 'slow') {
        this.#world.faults.slow++;
        await this.#world.sleep(SLOW_MS);
      }
      await this.#world.step(`${actor.name} ${label} #${attempt}${fate === 'ok' ? '' : ` (${fate})`}`);
      if (fate === 'throttle') {
        this.#world.faults.throttled++;
        this.#world.note(actor.name, `${label} #${attempt} throttled`);
        continue;
      }
      const reply = execute();
      this.#world.note(actor.name, () => `${label} #${attempt} applied: ${describeReply(reply)}`);
      this.#world.applied(actor, request, reply);
      if (!landed) {
        landed = true;
        op.landed();
      }
      if (fate === 'lost-reply') {
        this.#world.faults.lostReplies++;
        this.#world.note(actor.name, `${label} #${attempt} reply lost`);
        continue;
      }
      await this.#world.step(`${actor.name} ${label} reply`);
      await actor.proceed();
      // The handler keeps its message invisible for two leases from each claim and renewal it sees.
      if ((request.operation === 'claim' || request.operation === 'renew') && isCommitted(reply)) {
        actor.onHeartbeat?.();
      }
      return reply;
    }
    if (!landed) op.landed();
    this.#world.faults.exhausted++;
    await actor.proceed();
    throw new SimulatedClientError(`no reply to ${label} after ${CLIENT_ATTEMPTS} attempts`);
  }
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
  readonly #world: NetworkWorld;
  readonly #provider: MailProvider;

  constructor(actor: SimActor, world: NetworkWorld, provider: MailProvider) {
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

function describeRequest(request: MemoryRequest, world: NetworkWorld): string {
  const epoch = request.by ? ` e${request.by.epoch}` : '';
  const key = request.keyHash ? ` ${world.recipientOf(request.keyHash)}` : '';
  const keys = request.keys !== undefined ? ` ×${request.keys}` : '';
  return `${request.operation}${key}${keys}${epoch}`;
}

/** True for a conditional write's reply that says it committed. */
export function isCommitted(reply: unknown): reply is { readonly committed: true; readonly old: unknown } {
  return typeof reply === 'object' && reply !== null && 'committed' in reply && reply.committed === true;
}

function describeReply(reply: unknown): string {
  if (reply && typeof reply === 'object' && 'committed' in reply) {
    const result = reply as WriteResult<unknown>;
    return result.committed ? 'committed' : 'condition failed';
  }
  return reply === undefined ? 'nothing' : 'read';
}
