import type fc from 'fast-check';
import { type MemoryBackend, memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import { MemoryTable } from '../../shared/backends/memory/memory-table.js';
import type { MemoryRequest } from '../../shared/backends/memory/memory-transport.js';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import { resumableSource } from '../../shared/effects/resumable-source.js';
import { defineJob } from '../../shared/job/job-definition.js';
import { createJobHandler } from '../../shared/job/lambda-handler.js';
import type { RunOptions, SlotBackend } from '../../shared/job/run-slot.js';
import type { Log } from '../../shared/telemetry/log.js';
import type { JobMetrics } from '../../shared/telemetry/metrics.js';
import { schedulerEvent, TEST_SECRET } from '../helpers/harness.js';
import { settle } from '../helpers/manual-clock.js';
import {
  type ActorPlan,
  type ContinuationPlan,
  graceOf,
  HEALTHY,
  JOB_ID,
  LEASE_MS,
  type ProcessPlan,
  runOptions,
  type Scenario,
  START,
  shardRange,
  WINDOW,
  type WordPlan,
} from './scenario.js';
import { type ActorRole, SimActor } from './sim-actor.js';
import { type FaultCounts, type NetworkWorld, SimulatedNetwork } from './sim-network.js';
import {
  MailProvider,
  type ProviderMessage,
  ProviderRecorder,
  type ProviderWorld,
  SimulatedSender,
} from './sim-provider.js';
import { type QueueMessage, type QueueWorld, type Receipt, SimWorkQueue } from './sim-work-queue.js';
import { indexOfPosition, positionOf, StoreWatch } from './store-watch.js';
import { backendWith } from './wrapped-backend.js';

/**
 * A deliberately broken piece of the world, to prove the invariants catch what they guard against.
 * The runtime under test is never changed; only the store it is given, or the view it has of it.
 */
export interface WorldVariant {
  /** Builds the shared table. @default a MemoryTable */
  readonly table?: () => MemoryTable;
  /** Wraps each actor's backend, and the provider recorder's. @default the memory backend as it is */
  readonly backend?: (backend: MemoryBackend) => SlotBackend;
  /** Changes the run options every actor runs with. @default the scenario's */
  readonly runOptions?: (options: RunOptions) => RunOptions;
}

/** Everything a finished simulation left behind, for the invariants to judge. */
export interface SimulationResult {
  readonly scenario: Scenario;
  readonly table: MemoryTable;
  readonly provider: MailProvider;
  /** Every invocation, in the order they started: fires, faulty continuations, then the final phase's. */
  readonly actors: readonly SimActor[];
  readonly queue: SimWorkQueue;
  /** What the store saw as it applied each request. */
  readonly watch: StoreWatch;
  readonly hashKey: (recipient: string) => string;
  readonly trace: Trace;
  readonly faults: FaultCounts;
  /** What the work queue did beyond first receives: duplicate receives, redeliveries left for the final phase. */
  readonly engine: { readonly duplicates: number; readonly deferred: number };
  /** True time the final, healthy phase began. */
  readonly finalPhaseAt: number;
  /** Set when the final phase stopped delivering a message after FINAL_DELIVERIES without its slot finishing. */
  readonly finalDeliveriesExhausted: boolean;
  /** Set when simulated time ran past the limit without the world settling. */
  readonly stuck: boolean;
  /** How often the runtime logged each message, across all actors. */
  readonly logged: ReadonlyMap<string, number>;
}

/** Past this much simulated time a world that has not settled is stuck: a liveness failure. */
const TIME_LIMIT_MS = 3 * 60 * 60_000;
/** An invocation still running after this much simulated time never ends: a liveness failure. */
const INVOCATION_LIMIT_MS = 10 * 60_000;

/** The final phase begins this long after everything else stopped: every lease has ended by then. */
const FINAL_DELAY_MS = 2 * LEASE_MS + 5_000;
/**
 * Deliveries of one message the final phase makes before it gives up. A window (or a shard) needs
 * at most a few: one that walks, one per retry of a refused effect, one after the deadline; held
 * and waiting answers add some.
 */
export const FINAL_DELIVERIES = 25;
/** The final phase's network: fast, so a healthy run's round trips never race its lease. */
const FINAL_NETWORK = { tickMs: 500, stepsPerTick: 64 } as const;

/** Metrics that keep the process's counts on the actor, for invariant 10; nothing is published. */
function actorMetrics(actor: SimActor): JobMetrics {
  return {
    count(name, value = 1) {
      actor.metrics.set(name, (actor.metrics.get(name) ?? 0) + value);
    },
    flush: async () => {},
  };
}

/** The ports a run sees, counting on the actor the settles its ledger answers as made. */
function observingSettles(backend: SlotBackend, actor: SimActor): SlotBackend {
  return backendWith(backend, {
    ledger: {
      settleInDoubt: async (...args) => {
        const settled = await backend.ledger.settleInDoubt(...args);
        if (settled) actor.settlesAnswered++;
        else actor.settlesRefused.add(args[1].keyHash);
        return settled;
      },
    },
  });
}

/**
 * Runs one scenario: its actors fire the window through the real handler (createJobHandler →
 * runSlot → LeaseKeeper, EffectRunner), each against its own SimulatedNetwork to one shared
 * MemoryTable, while fast-check's scheduler picks, one at a time, which pending step happens next:
 * a request arriving, a reply coming back, a send, or the clock moving on. Every fire is a receive
 * of a message on the job's work queue, which delivers it again while the window is not finished;
 * the scenario's continuation plans strike the first redeliveries. When nothing is left to happen,
 * the final phase delivers the window's messages with healthy processes until it is finished.
 */
export async function simulate(
  scenario: Scenario,
  scheduler: fc.Scheduler,
  variant: WorldVariant = {},
): Promise<SimulationResult> {
  const world = new World(scenario, scheduler, variant);
  return world.run();
}

/** The simulation's own log of what happened, with the simulated time; printed with a failure. */
export class Trace {
  readonly #entries: { t: number; who: string; text: string | (() => string) }[] = [];

  add(t: number, who: string, text: string | (() => string)): void {
    this.#entries.push({ t, who, text });
  }

  /** The last `count` entries, one a line. */
  tail(count = 250): string {
    const entries = this.#entries.slice(-count);
    const skipped = this.#entries.length - entries.length;
    const lines = entries.map(({ t, who, text }) => {
      const line = typeof text === 'string' ? text : text();
      return `${String(t).padStart(7)} ms  ${who.padEnd(5)} ${line}`;
    });
    return [...(skipped > 0 ? [`  … ${skipped} earlier entries`] : []), ...lines].join('\n');
  }
}

interface WorldEvent {
  readonly at: number;
  readonly seq: number;
  /** Whether the event is a reason for time to move on (a Lambda kill alone is not). */
  readonly wakes: boolean | (() => boolean);
  readonly fn: () => void;
}

class World implements NetworkWorld, QueueWorld, ProviderWorld {
  now = 0;
  readonly trace = new Trace();
  readonly provider = new MailProvider();
  readonly recorder: ProviderRecorder;
  readonly logged = new Map<string, number>();
  readonly faults: FaultCounts = { throttled: 0, lostReplies: 0, slow: 0, exhausted: 0 };
  readonly table: MemoryTable;
  readonly watch: StoreWatch;
  readonly queue: SimWorkQueue;
  readonly actors: SimActor[] = [];
  readonly #scenario: Scenario;
  readonly #scheduler: fc.Scheduler;
  readonly #variant: WorldVariant;
  readonly #hashKey = hmacEffectKeys(TEST_SECRET);
  readonly #recipients = new Map<string, string>();
  readonly #alwaysRefused: ReadonlySet<string>;
  #events: WorldEvent[] = [];
  #seq = 0;
  #tickPending = false;
  #stepsSinceTick = 0;
  #stuck = false;
  #final = false;
  #finalPhaseAt = 0;
  #finalDeliveriesExhausted = false;
  /** Set once the window is over: the provider's events still on their way arrive then. */
  #drainingWords = false;
  #continuationPlans: ContinuationPlan[];
  #shardPlans: ContinuationPlan[];
  readonly #engine = { duplicates: 0, deferred: 0 };

  constructor(scenario: Scenario, scheduler: fc.Scheduler, variant: WorldVariant) {
    this.#scenario = scenario;
    this.#scheduler = scheduler;
    this.#variant = variant;
    this.table = variant.table?.() ?? new MemoryTable();
    this.watch = new StoreWatch(this.table, scenario, this.#hashKey, (keyHash, epoch, shard) =>
      this.#performed(keyHash, epoch, shard),
    );
    this.queue = new SimWorkQueue(this, scenario.deadlineMs);
    this.recorder = new ProviderRecorder(this, this.table, {
      hashKey: this.#hashKey,
      returnOldOnConflict: scenario.returnOldOnConflict,
      wrap: (backend) => variant.backend?.(backend) ?? backend,
      observe: (keyHash, word, before, after) => this.watch.recorded(keyHash, word, before, after),
    });
    this.#continuationPlans = [...scenario.continuations];
    this.#shardPlans = [...scenario.shardDeliveries];
    for (const recipient of scenario.recipients) this.#recipients.set(this.#hashKey(recipient), recipient);
    this.#alwaysRefused = new Set(
      scenario.alwaysRefused.flatMap((index) => scenario.recipients[index] ?? []),
    );
  }

  async run(): Promise<SimulationResult> {
    for (const plan of this.#scenario.actors) this.at(plan.startAtMs, () => this.#fire(plan));
    await this.#drive();
    // Every invocation has finished or died, and the queue's redeliveries with faults are used up:
    // past every lease, deliver what is left on the queue with healthy processes, with the engine's
    // delays on the simulated clock, until the window is finished (or can never run).
    this.#finalPhaseAt = this.now + FINAL_DELAY_MS;
    while (this.now < this.#finalPhaseAt) await this.#advanceTo(this.#finalPhaseAt);
    this.#final = true;
    this.note('world', 'final phase: healthy deliveries of what is left on the queue');
    for (const message of this.queue.queued) if (message.deferred) this.redeliver(message);
    await this.#drive();
    // The provider's events still on their way (late, or about effects settled long ago) arrive
    // after the window is over; what the ledger makes of them is judged with the rest.
    this.#drainingWords = true;
    await this.#drive();
    return {
      scenario: this.#scenario,
      table: this.table,
      provider: this.provider,
      actors: this.actors,
      queue: this.queue,
      watch: this.watch,
      hashKey: this.#hashKey,
      trace: this.trace,
      faults: this.faults,
      engine: this.#engine,
      finalPhaseAt: this.#finalPhaseAt,
      finalDeliveriesExhausted: this.#finalDeliveriesExhausted,
      stuck: this.#stuck,
      logged: this.logged,
    };
  }

  // NetworkWorld

  step(label: string): Promise<void> {
    return this.#scheduler.schedule(Promise.resolve(), label);
  }

  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => this.at(this.now + ms, resolve));
  }

  note(who: string, text: string | (() => string)): void {
    this.trace.add(this.now, who, text);
  }

  recipientOf(keyHash: string): string {
    return this.#recipients.get(keyHash) ?? keyHash.slice(0, 8);
  }

  applied(actor: SimActor, request: MemoryRequest, reply: unknown): void {
    this.watch.applied(actor, request, reply, this.now);
  }

  replied(request: MemoryRequest, reply: unknown): void {
    this.watch.replied(request, reply);
  }

  gaveUp(actor: SimActor, request: MemoryRequest): void {
    this.watch.gaveUp(actor, request);
  }

  // ActorWorld

  ended(actor: SimActor): void {
    this.watch.runEnded(actor);
  }

  /** The provider took a message to the effect's recipient that a run of `epoch` of `shard` sent, and heard it had. */
  #performed(keyHash: string, epoch: number, shard: number | undefined): boolean {
    const to = this.#recipients.get(keyHash);
    return this.provider.records.some(
      (r) =>
        r.to === to &&
        r.fate === 'ok' &&
        r.epoch === epoch &&
        this.actors.find((a) => a.name === r.actor)?.shard === shard,
    );
  }

  at(at: number, fn: () => void, options: { wakes?: boolean | (() => boolean) } = {}): void {
    this.#events.push({ at, seq: this.#seq++, wakes: options.wakes ?? true, fn });
  }

  // ProviderWorld

  alwaysRefuses(to: string): boolean {
    return this.#alwaysRefused.has(to);
  }

  /**
   * Sets out each delivery of the message's events to the recorder: its first (Send, or Reject for
   * a message not taken) and, for a message taken then rejected, the Reject too, each as its plan
   * times it. An event's arrival does not by itself keep the world going: one due after everything
   * else has stopped arrives once the window is over.
   */
  providerSpoke(message: ProviderMessage, plan: WordPlan): void {
    const grace = graceOf(this.#scenario);
    const setOut = (event: 'Send' | 'Reject', deliveries: WordPlan['first']) => {
      for (const delivery of deliveries) {
        const at = this.now + delivery.ms + (delivery.after === 'grace' ? grace : 0);
        this.at(at, () => void this.recorder.deliver(message, event), { wakes: () => this.#drainingWords });
      }
    };
    setOut(message.outcome === 'accepted' ? 'Send' : 'Reject', plan.first);
    if (message.rejectedAfterTaking) setOut('Reject', plan.rejectedAfter ?? []);
  }

  // QueueWorld

  /**
   * The queue delivers a message (again): in the faulty phase with the next continuation plan, or
   * for a shard message the next shard delivery plan (and left for the final phase once there is
   * none), in the final phase with a healthy process.
   */
  redeliver(message: QueueMessage): void {
    if (this.#final) {
      if (message.finalDeliveries >= FINAL_DELIVERIES) {
        this.#finalDeliveriesExhausted = true;
        this.note(
          'world',
          `the final phase stops delivering ${message.id} after ${FINAL_DELIVERIES} deliveries`,
        );
        return;
      }
      message.finalDeliveries++;
      this.#receive(message, 'final', HEALTHY);
      return;
    }
    const plan = (message.shard === undefined ? this.#continuationPlans : this.#shardPlans).shift();
    if (!plan) {
      message.deferred = true;
      this.#engine.deferred++;
      this.note('queue', `${message.id} is visible; its redelivery waits for the final phase`);
      return;
    }
    this.#receive(message, 'continuation', plan);
    if (plan.duplicateAfterMs !== undefined) {
      // At-least-once: the same message handed to a second invocation, a healthy one.
      this.at(this.now + plan.duplicateAfterMs, () => {
        if (message.state !== 'queued') return;
        this.#engine.duplicates++;
        this.#receive(message, 'continuation', { ...HEALTHY, skewMs: plan.skewMs });
      });
    }
  }

  /** A fire of the schedule: a receive of its attempt's message (the first one sends it). */
  #fire(plan: ActorPlan): void {
    this.#receive(this.queue.messageFor(plan.attemptNumber), 'fire', plan, `req-${plan.requestId}`);
  }

  #receive(message: QueueMessage, role: ActorRole, plan: ProcessPlan, requestId?: string): void {
    const receipt = this.queue.receive(message);
    if (!receipt) return;
    const name =
      (role === 'fire'
        ? `a${this.actors.length + 1}`
        : `${role === 'final' ? 'f' : 'c'}${this.actors.length + 1}`) +
      (message.shard === undefined ? '' : `s${message.shard}`);
    const actor = new SimActor(this, name, role, plan, START + this.now + plan.skewMs);
    actor.attemptNumber = message.attemptNumber;
    actor.shard = message.shard;
    this.actors.push(actor);
    actor.onHeartbeat = () => this.queue.heartbeat(receipt);
    this.#start(actor, receipt, requestId ?? `req-${name}`);
  }

  /** Starts an invocation of the real handler for one receive. */
  #start(actor: SimActor, receipt: Receipt, requestId: string): void {
    const plan = actor.plan;
    const backend = memoryBackend({
      table: this.table,
      hashKey: this.#hashKey,
      transport: new SimulatedNetwork(actor, this),
      returnOldOnConflict: this.#scenario.returnOldOnConflict,
    });
    const sender = new SimulatedSender(actor, this, this.provider);
    const { recipients, resumable, concurrency, split } = this.#scenario;
    const all = recipients.map((to, index) => ({ to, index, position: positionOf(index) }));
    // A shard whose source splits itself reads its own range; every other run reads the whole list.
    const itemsOf = (shard: { index: number; count: number } | undefined) => {
      if (!shard || split !== 'source') return all;
      const { from, to } = shardRange(shard.index, shard.count, all.length);
      return all.slice(from, to);
    };
    const sourceOf = (items: typeof all) =>
      resumable
        ? resumableSource({
            read: (after) =>
              after === undefined ? items : items.filter((item) => item.index > indexOfPosition(after)),
            position: (item: (typeof all)[number]) => item.position,
          })
        : items;
    const job = defineJob({
      id: JOB_ID,
      async run(ctx) {
        actor.epoch = ctx.epoch;
        if (plan.jobThrows === 'before') throw new Error('the job failed before its walk');
        const bySource = ctx.shard !== undefined && split === 'source';
        await ctx.onceEach(
          sourceOf(itemsOf(ctx.shard)),
          { key: (item) => item.to, concurrency, ...(bySource ? { split: 'source' as const } : {}) },
          (item, signal) =>
            sender.send({ to: item.to, subject: `report ${WINDOW}`, text: 'your report' }, { signal }),
        );
        if (plan.jobThrows === 'after') throw new Error('the job failed after its walk');
      },
    });
    const handler = createJobHandler(job, {
      backend: observingSettles(this.#variant.backend?.(backend) ?? backend, actor),
      metrics: () => actorMetrics(actor),
      log: this.#log(actor),
      clock: actor.runtimeClock,
      options: this.#variant.runOptions?.(runOptions(this.#scenario)) ?? runOptions(this.#scenario),
      workQueue: this.queue.forReceipt(receipt, actor),
    });
    const deadline = plan.timeoutMs === undefined ? undefined : actor.clock.now() + plan.timeoutMs;
    const message = receipt.message;
    actor.status = 'running';
    actor.startedAt = this.now;
    this.note(
      actor.name,
      `${actor.role === 'fire' ? 'fires' : 'continues'}: ${message.id} receive ${receipt.receiveCount}, ` +
        (message.shard === undefined ? '' : `shard ${message.shard}, `) +
        `request ${requestId}, attempt ${message.attemptNumber}, clock ${plan.skewMs >= 0 ? '+' : ''}${plan.skewMs} ms` +
        (plan.timeoutMs === undefined ? '' : `, timeout ${plan.timeoutMs} ms`),
    );
    const event = {
      ...(message.body ?? schedulerEvent(JOB_ID, WINDOW, message.attemptNumber)),
      ...(receipt.receiveCount > 1 ? { continuation: true } : {}),
    };
    handler(event, {
      awsRequestId: requestId,
      getRemainingTimeInMillis: () =>
        deadline === undefined ? Number.MAX_SAFE_INTEGER : deadline - actor.clock.now(),
    }).then(
      (response) => this.#finished(actor, receipt, { kind: 'returned', response }),
      (error: unknown) => this.#finished(actor, receipt, { kind: 'threw', error }),
    );
    if (plan.timeoutMs !== undefined) {
      // Lambda kills the invocation at its timeout, whatever it was doing.
      this.at(this.now + plan.timeoutMs, () => actor.crash('Lambda timeout'), { wakes: false });
    }
  }

  #finished(actor: SimActor, receipt: Receipt, result: Parameters<SimActor['finish']>[0]): void {
    actor.finish(result, this.table.version);
    // A killed process's handler never answers its message; the queue delivers it again when its
    // visibility runs out.
    const how = actor.status === 'crashed' ? 'killed' : result.kind === 'returned' ? 'returned' : 'threw';
    this.queue.settle(receipt, how, actor.name);
  }

  /**
   * Lets fast-check pick pending steps until none is left. The clock is one of the steps: a tick is
   * pending whenever anything could still happen (once the scenario's steps per tick have passed,
   * or at once when nothing else is pending), so a request can be overtaken by a lease's end. Timers
   * due now fire before the next pick. When no invocation is live and nothing is pending, time
   * jumps to the next thing due: nothing can happen in between.
   */
  async #drive(): Promise<void> {
    for (;;) {
      if (this.#timerDue()) await this.#advanceTo(this.now);
      const busy = this.#scheduler.count() > 0;
      if (!this.#tickPending && this.#timeMatters()) {
        if (!busy && !this.actors.some((a) => a.live)) {
          await this.#advanceTo(Number.POSITIVE_INFINITY);
          continue;
        }
        if (!busy || this.#stepsSinceTick >= this.#network.stepsPerTick) this.#scheduleTick();
      }
      if (this.#scheduler.count() > 0) {
        this.#stepsSinceTick++;
        await this.#scheduler.waitNext(1);
        continue;
      }
      await settle();
      if (this.#scheduler.count() > 0) continue;
      if (!this.#tickPending && this.#timeMatters()) continue;
      return;
    }
  }

  get #network(): { readonly tickMs: number; readonly stepsPerTick: number } {
    return this.#final ? FINAL_NETWORK : this.#scenario;
  }

  #timeMatters(): boolean {
    const endless = this.actors.find(
      (a) => a.live && a.startedAt !== undefined && this.now - a.startedAt > INVOCATION_LIMIT_MS,
    );
    if (this.now > TIME_LIMIT_MS || endless) {
      if (!this.#stuck) {
        this.note(
          'world',
          endless
            ? `STUCK: ${endless.name} still running after ${INVOCATION_LIMIT_MS} ms`
            : `STUCK: still busy after ${TIME_LIMIT_MS} ms of simulated time`,
        );
      }
      this.#stuck = true;
      return false;
    }
    return (
      this.#events.some((e) => (typeof e.wakes === 'function' ? e.wakes() : e.wakes)) ||
      this.actors.some((a) => a.live)
    );
  }

  #scheduleTick(): void {
    this.#tickPending = true;
    const to = this.now + this.#network.tickMs;
    // The act runs inside fast-check's step, so the clock has finished moving (and every timer it
    // fired has run) before the next step is picked.
    void this.#scheduler.schedule(
      Promise.resolve(),
      `time moves on, to ${to} ms at most`,
      undefined,
      async (fire) => {
        await fire();
        this.#tickPending = false;
        this.#stepsSinceTick = 0;
        await this.#advanceTo(to);
      },
    );
  }

  /**
   * Moves true time towards `to`, every actor's clock by the same amount, and stops at the first
   * thing due on the way: a runtime timer (a renewal, a lease check, a mark flush) or a world event
   * (an actor fires, a message becomes visible, a pause ends, a slow request arrives). What is due
   * then runs, in order, and what it starts gets steps before time moves on, as in real time, where
   * a renewal goes out when it is due and races the lease's end.
   */
  async #advanceTo(to: number): Promise<void> {
    this.#events.sort((a, b) => a.at - b.at || a.seq - b.seq);
    let until = Math.min(to, this.#events[0]?.at ?? to);
    for (const actor of this.actors) {
      const local = actor.nextTimerAt;
      if (local !== undefined) until = Math.min(until, local - (actor.clock.now() - this.now));
    }
    if (!Number.isFinite(until)) return;
    const by = Math.max(0, until - this.now);
    this.now += by;
    for (const actor of this.actors) await actor.clock.advance(by);
    while (this.#events[0] && this.#events[0].at <= this.now) {
      this.#events.shift()?.fn();
      await settle();
    }
  }

  /** True when a runtime timer is due now: a zero-delay timer fires before the next step, not a tick later. */
  #timerDue(): boolean {
    return this.actors.some((a) => {
      const local = a.nextTimerAt;
      return local !== undefined && local <= a.clock.now();
    });
  }

  #log(actor: SimActor): Log {
    const line =
      (level: string) =>
      (message: string, fields: Record<string, unknown> = {}) => {
        this.logged.set(message, (this.logged.get(message) ?? 0) + 1);
        this.note(actor.name, () => `${level} ${message} ${compact(fields)}`);
      };
    return { info: line('info'), warn: line('warn'), error: line('error') };
  }
}

function compact(fields: Record<string, unknown>): string {
  const { window: _window, jobId: _jobId, ...rest } = fields;
  try {
    return JSON.stringify(rest);
  } catch {
    return '{…}';
  }
}
