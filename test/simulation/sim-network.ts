import type { WriteResult } from '../../shared/backends/memory/memory-table.js';
import type { MemoryRequest, MemoryTransport } from '../../shared/backends/memory/memory-transport.js';
import { CLIENT_ATTEMPTS, SLOW_MS } from './scenario.js';
import type { SimActor } from './sim-actor.js';

/** The world as the network sees it. */
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
  /** A client handed its caller this reply to `request`: what the caller heard. */
  replied(request: MemoryRequest, reply: unknown): void;
  /** `actor`'s client gave up on `request` after its every attempt failed (one may have committed). */
  gaveUp(actor: SimActor, request: MemoryRequest): void;
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
      this.#world.replied(request, reply);
      return reply;
    }
    if (!landed) op.landed();
    this.#world.faults.exhausted++;
    this.#world.gaveUp(actor, request);
    await actor.proceed();
    throw new SimulatedClientError(`no reply to ${label} after ${CLIENT_ATTEMPTS} attempts`);
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
