import type { Clock } from '../../shared/clock.js';
import type { HandlerResponse } from '../../shared/job/lambda-handler.js';
import type { MetricName } from '../../shared/telemetry/metric-names.js';
import { ManualClock } from '../helpers/manual-clock.js';
import type { AttemptFate, ProcessPlan, SendFate, WordPlan } from './scenario.js';

/** What the simulation needs from its world to run an actor. */
export interface ActorWorld {
  /** Simulated milliseconds since the start. */
  readonly now: number;
  /** Runs `fn` once the simulated time reaches `at`. */
  at(at: number, fn: () => void, options?: { readonly wakes?: boolean | (() => boolean) }): void;
  note(who: string, text: string | (() => string)): void;
  /** The invocation ended: it returned, threw, or its process was killed. */
  ended(actor: SimActor): void;
}

/** Where an actor's process is: not fired yet, running, frozen, dead, or its invocation returned. */
export type ActorStatus = 'waiting' | 'running' | 'paused' | 'crashed' | 'finished';

/**
 * What started the actor: a fire of the schedule (its message's first receive, a duplicate receive,
 * a Scheduler retry's message), a redelivery by the work queue in the faulty phase, or one in the
 * final, healthy phase.
 */
export type ActorRole = 'fire' | 'continuation' | 'final';

/** What the runtime's handler gave back: a response, or what it threw. */
export type ActorResult =
  | { readonly kind: 'returned'; readonly response: HandlerResponse }
  | { readonly kind: 'threw'; readonly error: unknown };

/**
 * One process running one delivery of the window: its own clock (possibly skewed), and the ways a
 * process stops that the protocol must survive.
 *
 * - A crash stops it for good: every reply, timer and send it awaits never settles, so its code
 *   makes no further progress, exactly as a killed process. Requests it had already sent still
 *   land; its client retries nothing more.
 * - A pause freezes it: replies are held and its timers fire only once it resumes, late, with its
 *   clock then reading the later time, as after a long GC pause or a frozen container. Requests
 *   it had already sent still land meanwhile.
 *
 * Crashes and pauses are placed at the n-th awaited operation (a store request or a send), before it
 * takes effect or after, as the actor's plan says.
 */
export class SimActor {
  readonly name: string;
  readonly role: ActorRole;
  readonly plan: ProcessPlan;
  /** The actor's own clock: true time plus its skew. The world moves it. */
  readonly clock: ManualClock;
  /** The clock the runtime sees: the same time, with timers that respect crashes and pauses. */
  readonly runtimeClock: Clock;
  status: ActorStatus = 'waiting';
  /** Scheduler's attempt number in the message it received. */
  attemptNumber = 1;
  /** The shard its message named: it runs that shard's slot. Undefined: the window's own message. */
  shard: number | undefined;
  /** The epoch its run was granted, once it was. */
  epoch: number | undefined;
  result: ActorResult | undefined;
  /** Times this process was frozen. */
  pauses = 0;
  /**
   * Reservations and sends it began after its invocation had returned: there should be none. (A
   * renewal still in flight when the run stopped may finish, and read, after it: that is harmless.)
   */
  readonly afterReturn: string[] = [];
  /** The shared table's version when the invocation returned. */
  returnedAt: number | undefined;
  /** True time the invocation started, and ended (returned, threw or was killed). */
  startedAt: number | undefined;
  endedAt: number | undefined;
  /** The last of its operations that took effect, for the statistics (a crash right after a release). */
  lastLanded: string | undefined;
  /** The operations it froze at, for the statistics (a coordinator paused before marking its window SHARDED). */
  readonly pausedAt: string[] = [];
  /** Shard messages it sent as its window's coordinator. */
  fanOuts = 0;
  /** What the runtime counted (`JobMetrics.count`), by metric name, flushed or not. */
  readonly metrics = new Map<MetricName, number>();
  /** Settles of in-doubt effects its ledger answered as made (`settleInDoubt` returned true). */
  settlesAnswered = 0;
  /**
   * Keys whose settle its ledger answered as not made: the record had moved on since the resolver
   * read it (the store refused the settle, or the ledger's own read before it found the effect done).
   */
  readonly settlesRefused = new Set<string>();
  /** Called when the process has seen its claim or a renewal commit: the handler's visibility heartbeat. */
  onHeartbeat: (() => void) | undefined;
  readonly #world: ActorWorld;
  #ops = 0;
  #requestFates = 0;
  #sendFates = 0;
  #wordPlans = 0;
  #resumers: (() => void)[] = [];
  #deferredTimers: (() => void)[] = [];
  /** When each timer the runtime set is due, by this actor's clock, so the world can stop time there. */
  readonly #timers = new Set<{ readonly at: number }>();

  constructor(world: ActorWorld, name: string, role: ActorRole, plan: ProcessPlan, clockStart: number) {
    this.#world = world;
    this.name = name;
    this.role = role;
    this.plan = plan;
    this.clock = new ManualClock(clockStart);
    this.runtimeClock = {
      now: () => this.clock.now(),
      schedule: (ms, fn) => {
        const timer = { at: this.clock.now() + Math.max(0, ms) };
        this.#timers.add(timer);
        const cancel = this.clock.schedule(ms, () => {
          this.#timers.delete(timer);
          this.#onTimer(fn);
        });
        return () => {
          this.#timers.delete(timer);
          cancel();
        };
      },
    };
  }

  /** Awaited operations (store requests and sends) it began: a crash planned at or past this index never struck. */
  get operations(): number {
    return this.#ops;
  }

  /** The earliest pending timer, by this actor's clock; none once it crashed (they never fire). */
  get nextTimerAt(): number | undefined {
    if (this.status === 'crashed') return undefined;
    let next: number | undefined;
    for (const timer of this.#timers) if (next === undefined || timer.at < next) next = timer.at;
    return next;
  }

  /** Resolves when the process may carry on: at once, once a pause ends, or never after a crash. */
  proceed(): Promise<void> {
    if (this.status === 'crashed') return new Promise<void>(() => {});
    if (this.status !== 'paused') return Promise.resolve();
    return new Promise<void>((resolve) => this.#resumers.push(resolve)).then(() => this.proceed());
  }

  crash(why: string): void {
    if (this.status === 'crashed' || this.status === 'finished') return;
    this.status = 'crashed';
    this.endedAt = this.#world.now;
    // Dropping the waiters is the crash: what they would have resumed is never run.
    this.#resumers = [];
    this.#deferredTimers = [];
    this.#world.note(this.name, `CRASH ${why}`);
    this.#world.ended(this);
  }

  pause(forMs: number, why: string): void {
    if (this.status !== 'running') return;
    this.status = 'paused';
    this.pauses++;
    this.#world.note(this.name, `PAUSE for ${forMs} ms ${why}`);
    this.#world.at(this.#world.now + forMs, () => this.#resume());
  }

  /** Called by the world when the runtime's handler settles, with the table's version then. */
  finish(result: ActorResult, version: number): void {
    this.result = result;
    this.returnedAt = version;
    this.endedAt ??= this.#world.now;
    if (this.status !== 'crashed') this.status = 'finished';
    this.#world.note(this.name, () => `finished: ${describeResult(result)}`);
    this.#world.ended(this);
  }

  /** Starts the n-th awaited operation; the plan says whether a crash or a pause falls on it. */
  beginOp(label: string): ActorOp {
    const index = this.#ops++;
    if (this.result && /^(reserve|send)\b/.test(label)) this.afterReturn.push(label);
    const crash = this.plan.crash?.atOp === index ? this.plan.crash.phase : undefined;
    const pause = this.plan.pause?.atOp === index ? this.plan.pause : undefined;
    return {
      issue: async () => {
        if (crash === 'before') this.crash(`before op ${index} (${label})`);
        else if (pause?.phase === 'before') {
          this.pausedAt.push(`before ${label}`);
          this.pause(pause.forMs, `before op ${index} (${label})`);
        }
        await this.proceed();
      },
      landed: () => {
        this.lastLanded = label;
        if (crash === 'after') this.crash(`after op ${index} (${label}) took effect`);
        else if (pause?.phase === 'after') {
          this.pausedAt.push(`after ${label}`);
          this.pause(pause.forMs, `after op ${index} (${label}) took effect`);
        }
      },
    };
  }

  nextRequestFate(): AttemptFate {
    return this.plan.requests[this.#requestFates++] ?? 'ok';
  }

  nextSendFate(): SendFate {
    return this.plan.sends[this.#sendFates++] ?? 'ok';
  }

  /** What becomes of the provider's events about its next message; undefined once the plan has none left. */
  nextWordPlan(): WordPlan | undefined {
    return this.plan.words[this.#wordPlans++];
  }

  /** True while the process can still make progress (running, or paused and due to resume). */
  get live(): boolean {
    return this.status === 'running' || this.status === 'paused';
  }

  #resume(): void {
    if (this.status !== 'paused') return;
    this.status = 'running';
    this.#world.note(this.name, 'RESUME');
    const resumers = this.#resumers;
    const timers = this.#deferredTimers;
    this.#resumers = [];
    this.#deferredTimers = [];
    for (const resume of resumers) resume();
    for (const timer of timers) timer();
  }

  #onTimer(fn: () => void): void {
    if (this.status === 'crashed') return;
    if (this.status === 'paused') this.#deferredTimers.push(fn);
    else fn();
  }
}

/** An operation's two moments at which the plan can strike. */
export interface ActorOp {
  /** Before it takes effect: a crash here loses it, a pause holds it. Resolves when it may go. */
  issue(): Promise<void>;
  /** It took effect (committed, accepted): a crash or pause now leaves the caller without the reply. */
  landed(): void;
}

/** One line for a trace or a violation: the handler's status, epoch and counts, or its error. */
export function describeResult(result: ActorResult): string {
  if (result.kind === 'threw') {
    return `threw ${result.error instanceof Error ? `${result.error.name}: ${result.error.message}` : String(result.error)}`;
  }
  const response = result.response;
  switch (response.status) {
    case 'duplicate':
      return `duplicate (${response.outcome.kind})`;
    case 'rejected':
      return `rejected (${response.message})`;
    case 'completed':
      return `completed ${response.state} epoch ${response.epoch} ${counts(response.summary)} window ${JSON.stringify({ ...response.window, inDoubtKeys: undefined, failedKeys: undefined })}`;
    case 'yielded':
      return `yielded for ${response.reason} epoch ${response.epoch} ${counts(response.summary)}${response.resumeAfter === undefined ? '' : ` resume after ${new Date(response.resumeAfter).toISOString()}`}`;
    case 'stuck':
      return `stuck epoch ${response.epoch} ${counts(response.summary)} (${response.reason})`;
    case 'lease-lost':
      return `lease-lost epoch ${response.epoch} ${counts(response.summary)} released ${response.released}`;
    case 'fenced':
      return `fenced epoch ${response.epoch} ${counts(response.summary)}`;
    case 'sharded':
      return `sharded epoch ${response.epoch} into ${response.shards}`;
    default:
      return response satisfies never;
  }
}

function counts(summary: { readonly inDoubtKeys: unknown; readonly failedKeys: unknown }): string {
  return JSON.stringify({ ...summary, inDoubtKeys: undefined, failedKeys: undefined });
}
