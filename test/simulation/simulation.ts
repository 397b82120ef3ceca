import type fc from 'fast-check';
import { type MemoryBackend, memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import { MemoryTable } from '../../shared/backends/memory/memory-table.js';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import { defineJob } from '../../shared/job/job-definition.js';
import { createJobHandler } from '../../shared/job/lambda-handler.js';
import type { SlotBackend } from '../../shared/job/run-slot.js';
import type { Log } from '../../shared/telemetry/log.js';
import type { JobMetrics } from '../../shared/telemetry/metrics.js';
import { schedulerEvent, TEST_SECRET } from '../helpers/harness.js';
import { settle } from '../helpers/manual-clock.js';
import { type ActorPlan, JOB_ID, LEASE_MS, runOptions, type Scenario, START, WINDOW } from './scenario.js';
import { SimActor } from './sim-actor.js';
import {
  type FaultCounts,
  MailProvider,
  type NetworkWorld,
  SimulatedNetwork,
  SimulatedSender,
} from './sim-network.js';

/**
 * A deliberately broken piece of the world, to prove the invariants catch what they guard against.
 * The runtime under test is never changed; only the store it is given, or the view it has of it.
 */
export interface WorldVariant {
  /** Builds the shared table. @default a MemoryTable */
  readonly table?: () => MemoryTable;
  /** Wraps each actor's backend. @default the memory backend as it is */
  readonly backend?: (backend: MemoryBackend) => SlotBackend;
}

/** Everything a finished simulation left behind, for the invariants to judge. */
export interface SimulationResult {
  readonly scenario: Scenario;
  readonly table: MemoryTable;
  readonly provider: MailProvider;
  readonly actors: readonly SimActor[];
  /** The healthy actor fired once every other had stopped: it must finish the window. */
  readonly final: SimActor;
  readonly hashKey: (recipient: string) => string;
  readonly trace: Trace;
  readonly faults: FaultCounts;
  /** Set when simulated time ran past the limit without the world settling. */
  readonly stuck: boolean;
}

/** Past this much simulated time a world that has not settled is stuck: a liveness failure. */
const TIME_LIMIT_MS = 10 * 60_000;

/** The final actor is fired this long after everything else stopped: every lease has ended by then. */
const FINAL_DELAY_MS = 2 * LEASE_MS + 5_000;

const HEALTHY: ActorPlan = {
  startAtMs: 0,
  skewMs: 0,
  requestId: 0,
  attemptNumber: 1,
  timeoutMs: undefined,
  crash: undefined,
  pause: undefined,
  requests: [],
  sends: [],
};

const silentMetrics: JobMetrics = { count() {}, flush: async () => {} };

/**
 * Runs one scenario: its actors fire the window through the real handler (createJobHandler →
 * runSlot → LeaseKeeper, EffectRunner), each against its own SimulatedNetwork to one shared
 * MemoryTable, while fast-check's scheduler picks, one at a time, which pending step happens next:
 * a request arriving, a reply coming back, a send, or the clock moving on. When nothing is left to
 * happen, a healthy actor fires the window once more and must finish it.
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

class World implements NetworkWorld {
  now = 0;
  readonly trace = new Trace();
  readonly provider = new MailProvider();
  readonly faults: FaultCounts = { throttled: 0, lostReplies: 0, slow: 0, exhausted: 0 };
  readonly table: MemoryTable;
  readonly actors: SimActor[] = [];
  readonly #scenario: Scenario;
  readonly #scheduler: fc.Scheduler;
  readonly #variant: WorldVariant;
  readonly #hashKey = hmacEffectKeys(TEST_SECRET);
  readonly #recipients = new Map<string, string>();
  #events: { at: number; seq: number; wakes: boolean; fn: () => void }[] = [];
  #seq = 0;
  #tickPending = false;
  #stepsSinceTick = 0;
  #stuck = false;

  constructor(scenario: Scenario, scheduler: fc.Scheduler, variant: WorldVariant) {
    this.#scenario = scenario;
    this.#scheduler = scheduler;
    this.#variant = variant;
    this.table = variant.table?.() ?? new MemoryTable();
    for (const recipient of scenario.recipients) this.#recipients.set(this.#hashKey(recipient), recipient);
  }

  async run(): Promise<SimulationResult> {
    for (const [index, plan] of this.#scenario.actors.entries()) {
      const actor = new SimActor(this, `a${index + 1}`, plan, START + plan.skewMs);
      this.actors.push(actor);
      this.at(plan.startAtMs, () => this.#fire(actor));
    }
    await this.#drive(true);
    // Every other actor has finished, crashed or is stuck for good: fire once more, healthy, past
    // every lease, with the clock still; it must complete the window or find it done or failed.
    const finalAt = this.now + FINAL_DELAY_MS;
    while (this.now < finalAt) await this.#advanceTo(finalAt);
    const final = new SimActor(this, 'final', HEALTHY, START + this.now);
    this.#fire(final);
    await this.#drive(false);
    return {
      scenario: this.#scenario,
      table: this.table,
      provider: this.provider,
      actors: this.actors,
      final,
      hashKey: this.#hashKey,
      trace: this.trace,
      faults: this.faults,
      stuck: this.#stuck,
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

  at(at: number, fn: () => void, options: { wakes?: boolean } = {}): void {
    this.#events.push({ at, seq: this.#seq++, wakes: options.wakes ?? true, fn });
  }

  /** Starts an actor's invocation of the real handler. */
  #fire(actor: SimActor): void {
    const plan = actor.plan;
    const backend = memoryBackend({
      table: this.table,
      hashKey: this.#hashKey,
      transport: new SimulatedNetwork(actor, this),
      returnOldOnConflict: this.#scenario.returnOldOnConflict,
    });
    const sender = new SimulatedSender(actor, this, this.provider);
    const recipients = this.#scenario.recipients;
    const concurrency = this.#scenario.concurrency;
    const job = defineJob({
      id: JOB_ID,
      async run(ctx) {
        actor.epoch = ctx.epoch;
        await ctx.onceEach(recipients, { key: (to) => to, concurrency }, (to, signal) =>
          sender.send({ to, subject: `report ${WINDOW}`, text: 'your report' }, { signal }),
        );
      },
    });
    const handler = createJobHandler(job, {
      backend: this.#variant.backend?.(backend) ?? backend,
      metrics: () => silentMetrics,
      log: this.#log(actor),
      clock: actor.runtimeClock,
      options: runOptions(this.#scenario),
    });
    const deadline = plan.timeoutMs === undefined ? undefined : actor.clock.now() + plan.timeoutMs;
    actor.status = 'running';
    this.note(
      actor.name,
      `fires: request req-${plan.requestId}, attempt ${plan.attemptNumber}, clock ${plan.skewMs >= 0 ? '+' : ''}${plan.skewMs} ms`,
    );
    handler(schedulerEvent(JOB_ID, WINDOW, plan.attemptNumber), {
      awsRequestId: `req-${plan.requestId}`,
      getRemainingTimeInMillis: () =>
        deadline === undefined ? Number.MAX_SAFE_INTEGER : deadline - actor.clock.now(),
    }).then(
      (response) => actor.finish({ kind: 'returned', response }, this.table.version),
      (error: unknown) => actor.finish({ kind: 'threw', error }, this.table.version),
    );
    if (plan.timeoutMs !== undefined) {
      // Lambda kills the invocation at its timeout, whatever it was doing.
      this.at(this.now + plan.timeoutMs, () => actor.crash('Lambda timeout'), { wakes: false });
    }
  }

  /**
   * Lets fast-check pick pending steps until none is left. With `time`, the clock is one of the
   * steps: a tick is pending whenever anything could still happen (once the scenario's steps per
   * tick have passed, or at once when nothing else is pending), so a request can be overtaken by a
   * lease's end. Timers due now fire before the next pick.
   */
  async #drive(time: boolean): Promise<void> {
    for (;;) {
      if (time && this.#timerDue()) await this.#advanceTo(this.now);
      const busy = this.#scheduler.count() > 0;
      if (time && !this.#tickPending && this.#timeMatters()) {
        if (!busy || this.#stepsSinceTick >= this.#scenario.stepsPerTick) this.#scheduleTick();
      }
      if (this.#scheduler.count() > 0) {
        this.#stepsSinceTick++;
        await this.#scheduler.waitNext(1);
        continue;
      }
      await settle();
      if (this.#scheduler.count() > 0) continue;
      if (time && !this.#tickPending && this.#timeMatters()) continue;
      return;
    }
  }

  #timeMatters(): boolean {
    if (this.now > TIME_LIMIT_MS) {
      if (!this.#stuck) this.note('world', `STUCK: still busy after ${TIME_LIMIT_MS} ms of simulated time`);
      this.#stuck = true;
      return false;
    }
    return this.#events.some((e) => e.wakes) || this.actors.some((a) => a.live);
  }

  #scheduleTick(): void {
    this.#tickPending = true;
    const to = this.now + this.#scenario.tickMs;
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
   * (an actor fires, a pause ends, a slow request arrives). What is due then runs, in order, and
   * what it starts gets steps before time moves on, as in real time, where a renewal goes out when
   * it is due and races the lease's end.
   */
  async #advanceTo(to: number): Promise<void> {
    this.#events.sort((a, b) => a.at - b.at || a.seq - b.seq);
    let until = Math.min(to, this.#events[0]?.at ?? to);
    for (const actor of this.actors) {
      const local = actor.nextTimerAt;
      if (local !== undefined) until = Math.min(until, local - (actor.clock.now() - this.now));
    }
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
      (message: string, fields: Record<string, unknown> = {}) =>
        this.note(actor.name, () => `${level} ${message} ${compact(fields)}`);
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
