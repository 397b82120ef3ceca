import type { LocalJob } from '../functions/local-jobs.js';
import { type Clock, scheduleAt, systemClock } from '../shared/clock.js';
import { InProcessEventSource } from '../shared/continuation/in-process-event-source.js';
import type { DeadLetter } from '../shared/continuation/in-process-work-queue.js';
import {
  MAX_VISIBILITY_MS,
  receiveCountOf,
  type SqsBatchResponse,
  type SqsEvent,
  type SqsRecord,
  type WorkQueue,
} from '../shared/continuation/work-queue.js';
import type { EmailSender } from '../shared/effects/email-sender.js';
import { AfterGrace, type InDoubtResolution } from '../shared/job/in-doubt-resolution.js';
import { JOB_DEFAULTS, type JobSpec } from '../shared/job/job-spec.js';
import { createJobHandler, type InvocationContext } from '../shared/job/lambda-handler.js';
import { type RunOptions, resolveRunOptions, type SlotBackend } from '../shared/job/run-slot.js';
import type { SchedulerEvent } from '../shared/job/scheduler-event.js';
import { tallyWindow } from '../shared/job/window-tally.js';
import { type CatchUpPlan, planCatchUp, resolveCatchUpPolicy } from '../shared/schedule/catch-up.js';
import { JobSchedule } from '../shared/schedule/fire-times.js';
import { type SlotState, TERMINAL_SLOT_STATES } from '../shared/slot/ports.js';
import { type Slot, windowOf } from '../shared/slot/slot.js';
import { type Log, silentLog } from '../shared/telemetry/log.js';
import { MetricName } from '../shared/telemetry/metric-names.js';
import { emfMetrics, type JobMetrics } from '../shared/telemetry/metrics.js';
import { safeErrorText } from '../shared/telemetry/safe-error-text.js';
import { jobDeadlineMs } from '../shared/watchdog/window-deadline.js';
import { ObservedWorkQueue } from './observed-work-queue.js';
import {
  type EffectFault,
  FaultKind,
  gatedBackend,
  gatedSender,
  gatedWorkQueue,
  InvocationGate,
  ReplicaCrashedError,
  seededRandom,
  WindowFaultScript,
} from './replica-faults.js';
import type { SmtpSink } from './smtp-sink.js';

const DAY_MS = 86_400_000;
/** How a shard's invocations are named: `shard-3`, `shard-3/redelivery-1`. */
const SHARD_ORIGIN = 'shard-';

/** Where progress and tables go: process.stdout, or a collector in tests. */
export interface TerminalOutput {
  write(text: string): unknown;
  /** A terminal gets a live progress line; anything else plain lines. */
  readonly isTTY?: boolean;
}

/** What the local runner runs, against what, and with which faults. */
export interface LocalRunnerOptions {
  /** The catalog's jobs with local dependencies (functions/local-jobs.ts). */
  readonly jobs: readonly LocalJob[];
  readonly backend: SlotBackend;
  /**
   * A sender whose envelope and From address is `from`. Each window sends from its own address,
   * so the SMTP server's log tells the windows apart. One is made per invocation and closed when
   * the invocation is over.
   */
  readonly senderFor: (from: string) => EmailSender & { close?(): void };
  /**
   * Where the counts per window are read from. When the sink records the provider's word
   * (`recordsWords`: started with `recordSmtpWords` on this backend's ledger), the window's runs
   * also settle the effects a run leaves in doubt from it: see `localInDoubtResolution`.
   */
  readonly sink?: SmtpSink;
  /**
   * Replicas firing every window, as N schedules or N service instances would: each sends the
   * window's message to the job's work queue.
   * @default 3
   */
  readonly replicas?: number;
  /** @default none */
  readonly faults?: readonly FaultKind[];
  /** @default the system clock */
  readonly clock?: Clock;
  /**
   * Seed of the random crash and pause points, printed in each window's report.
   * @default a random seed
   */
  readonly seed?: number;
  /** @default silent */
  readonly log?: Log;
  /** @default EMF metrics thrown away */
  readonly metrics?: (jobId: string) => JobMetrics;
  /**
   * Overrides of the run options each job's JobSpec gives (a short lease for fault demos, say), and
   * of the in-doubt resolution the runner picks (`localInDoubtResolution`).
   */
  readonly runOptions?: RunOptions;
  /**
   * Lambda's time limit: each invocation's getRemainingTimeInMillis counts down from it, on the
   * clock, from the moment the event source invokes it, and at zero the invocation is stopped as
   * Lambda stops it: nothing it does afterwards reaches the store, the mail server or the queue.
   * @default each job's timeoutSeconds
   */
  readonly lambdaTimeoutMs?: number;
  /** Called once per window, when every delivery of it is over (see LocalRunner.fire). */
  readonly onWindow?: (report: WindowReport) => void;
  /** Called the moment a crash or a pause strikes, in words (the window's report lists them too). */
  readonly onFault?: (fault: string) => void;
  /**
   * Called when an invocation fails other than by an injected fault or Lambda's time limit (the
   * job or the store threw; its message comes back 60 s × its receive count later), in words.
   * @default none: the window's report lists them
   */
  readonly onError?: (error: string) => void;
}

/** What became of one window: counted from the store and the SMTP server, not from the job. */
export interface WindowReport {
  readonly jobId: string;
  readonly window: string;
  /** Delivered late on purpose (catch-up or backfill). */
  readonly backfilled: boolean;
  /**
   * Invocations the window was delivered to: each replica's message, duplicate copies, the retry,
   * and every redelivery from the work queue.
   */
  readonly fires: number;
  /** Invocations that claimed the window: 1, plus one per continuation and per takeover. */
  readonly runs: number;
  /** Those invocations, in order: `replica-2`, then `replica-2/redelivery-1`, … */
  readonly claimedBy: readonly string[];
  /** Faults that struck, in words. */
  readonly faults: readonly string[];
  /** Deliveries that failed other than by an injected crash: `replica-2: JobRunFailedError: …`. */
  readonly errors: readonly string[];
  /** Emails the SMTP server accepted for this window, and beyond one per recipient. */
  readonly delivered: number | undefined;
  readonly duplicates: number | undefined;
  /**
   * Effects reserved and never recorded done, read from the ledger after the window: what the
   * provider's word did not settle.
   */
  readonly inDoubt: number;
  /** Effects left in doubt by a run that the window's later runs settled from the provider's word. */
  readonly resolved: ResolvedInDoubt;
  readonly done: number;
  /** Effects the provider refused, for good or (in an unfinished window) waiting for a retry. */
  readonly failed: number;
  /** The slot's state after the window (MISSED when nothing claimed it). */
  readonly state: SlotState | 'MISSED';
  /**
   * Shards the window was split into, as its record says (1 when it was not split): each ran as
   * its own invocations, and `runs` and `claimedBy` count theirs after the coordinator's.
   */
  readonly shards: number;
  readonly epoch: number;
  readonly ms: number;
}

/**
 * Effects a run left in doubt that the window's later runs settled from the provider's word (the
 * SMTP sink's record of each message), as they counted them (InDoubtConfirmed, InDoubtRejected,
 * InDoubtResent).
 */
export interface ResolvedInDoubt {
  /** The sink had accepted the message: recorded done, never sent again. */
  readonly confirmed: number;
  /** The provider refused the message: sent again by the window's retry. */
  readonly rejected: number;
  /** No word by the end of the grace period, so never accepted: sent again by the window's retry. */
  readonly resent: number;
}

/** A job's catch-up when the runner starts: what was missed, what runs, what does not and why. */
export interface CatchUpReport {
  readonly jobId: string;
  readonly plan: CatchUpPlan;
  readonly reports: readonly WindowReport[];
}

/** The event one fire sends: every fire's execution id is its own, so its message can be found. */
type FireEvent = SchedulerEvent & { readonly executionId: string };

/** One fire of a window: the message a replica's schedule (or its retry) sends. */
interface Fire {
  readonly run: WindowRun;
  /** `replica-2`, `replica-2/retry`, `shard-3`: names the invocations that deliver it. */
  readonly origin: string;
}

/** A job's work queue, the event source consuming it, and the messages in it. */
interface JobEngine {
  readonly job: LocalJob;
  readonly queue: ObservedWorkQueue;
  readonly source: InProcessEventSource;
  readonly options: RunOptions;
  /** Lambda's time limit for each invocation. */
  readonly timeoutMs: number;
  /**
   * Messages sent and not yet received, by body: each fire's (its execution id is its own), and
   * each shard message a coordinator sent (the same shard sent again by a takeover has the same
   * body, hence a list).
   */
  readonly unreceived: Map<string, Fire[]>;
  /** Every message in the queue, by message id, until it is deleted or dead-lettered. */
  readonly messages: Map<string, Fire>;
  /** Messages whose first delivery was just handed out twice: its copy is still to come. */
  readonly duplicated: Set<string>;
  /** Receipt handles of duplicate copies, so their invocation is named as one. */
  readonly copies: Set<string>;
}

interface WindowRun {
  readonly job: LocalJob;
  readonly window: Date;
  readonly backfilled: boolean;
  readonly started: number;
  readonly script: WindowFaultScript | undefined;
  readonly from: string;
  readonly claimedBy: string[];
  readonly errors: string[];
  /** Settled from the provider's word, as the window's runs counted them. */
  readonly resolved: { confirmed: number; rejected: number; resent: number };
  /** Invocations of the window under way, to thaw on stop. */
  readonly gates: Set<InvocationGate>;
  /**
   * Holders frozen by a pause, by the slot they hold (the window, or one of its shards), each woken
   * when an invocation that took the same slot over is over.
   */
  readonly frozen: Map<string, Set<InvocationGate>>;
  /** Messages of the window still in the queue. */
  readonly live: Set<string>;
  /** Messages whose duplicate copy has not been delivered yet. */
  readonly copiesOwed: Set<string>;
  /** The retry fault's fire, sent once the first deliveries are over. */
  retry: { readonly origin: string; readonly event: FireEvent } | undefined;
  unreceived: number;
  inFlight: number;
  fires: number;
  /** A store read deciding whether the window is over is under way; `recheck` if something moved meanwhile. */
  checking: boolean;
  recheck: boolean;
  over: boolean;
  settle: () => void;
}

/**
 * Runs the catalog's jobs on this machine as EventBridge Scheduler, SQS and Lambda would: each fire
 * time of each job's schedule (JobSchedule: its zone and Scheduler's daylight-saving rules) sends
 * the event the deployed schedule sends to the job's work queue (an in-process SQS queue), once per
 * replica, and an in-process event source invokes the job's real handler (createJobHandler) with
 * SQS batches, under Lambda's time limit. A window bigger than one run is continued as deployed: its
 * message comes back until the window is finished. Time comes from the injected clock, so tests
 * move it.
 * @example
 * const runner = new LocalRunner({ jobs: localJobs(), backend, senderFor, sink, replicas: 3 });
 * await runner.start(); // catches up, then fires on schedule until stop()
 */
export class LocalRunner {
  readonly #o: LocalRunnerOptions;
  readonly #clock: Clock;
  readonly #random: () => number;
  readonly #replicas: number;
  readonly #faults: readonly FaultKind[];
  readonly #engines = new Map<string, JobEngine>();
  readonly #windows = new Set<WindowRun>();
  /** Every window fired and not yet reported. */
  readonly #reporting = new Set<Promise<void>>();
  readonly #timers = new Set<() => void>();
  /** Every invocation under way, of any window. */
  readonly #invocations = new Set<InvocationGate>();
  #stopped = false;
  /** The seed in use, for reports and replays. */
  readonly seed: number;

  constructor(options: LocalRunnerOptions) {
    this.#o = options;
    this.#clock = options.clock ?? systemClock;
    this.seed = options.seed ?? Math.floor(Math.random() * 2 ** 31);
    this.#random = seededRandom(this.seed);
    this.#replicas = options.replicas ?? 3;
    this.#faults = options.faults ?? [];
    if (!Number.isInteger(this.#replicas) || this.#replicas < 1) {
      throw new RangeError(`replicas is ${this.#replicas}; use a whole number of at least 1`);
    }
    const timeout = options.lambdaTimeoutMs;
    if (timeout !== undefined && !(Number.isInteger(timeout) && timeout >= 1_000 && timeout <= 900_000)) {
      throw new RangeError(
        `lambdaTimeoutMs is ${timeout}; use whole milliseconds from 1000 to 900000, as Lambda allows`,
      );
    }
    // Options that cannot work fail here, as at a deployed function's cold start, not at a window.
    for (const job of options.jobs) this.#engine(job);
  }

  /**
   * Invocations under way that are not frozen by a pause: a test that moves the clock waits for
   * this to be 0, so no run is overtaken by time while it waits for the store or the mail server.
   */
  get working(): number {
    let working = 0;
    for (const gate of this.#invocations) if (!gate.frozen) working++;
    return working;
  }

  /**
   * Catches up each job's missed windows per its policy (unless `catchUp` is false: a state that
   * was just created has missed nothing; `since` limits it to the windows after the last run
   * started), then fires every job on its schedule until stop(). Resolves once the catch-up runs
   * are over; the timers keep running.
   */
  async start(
    options: { readonly catchUp?: boolean; readonly since?: number } = {},
  ): Promise<CatchUpReport[]> {
    const now = this.#clock.now();
    const reports =
      options.catchUp === false
        ? []
        : await Promise.all(this.#o.jobs.map((job) => this.catchUp(job, now, options.since)));
    // From the start time, not the end of the catch-up: a window that came due while catching up
    // fires at once.
    for (const job of this.#o.jobs) this.#scheduleNext(job, now - 1);
    return reports;
  }

  /**
   * Stops firing, lets frozen invocations go, waits for the invocations under way, and reports
   * every window still under way as it stands. Messages still in the queues (a continuation not
   * yet due, a duplicate that would stand down) go with them, as they would with the process.
   */
  async stop(): Promise<void> {
    this.#stopped = true;
    for (const cancel of this.#timers) cancel();
    this.#timers.clear();
    for (const run of this.#windows) for (const gate of run.gates) gate.thaw();
    await Promise.all([...this.#engines.values()].map((engine) => engine.source.stop()));
    for (const run of this.#windows) this.#settle(run);
    await this.idle();
  }

  /** Resolves when no window is under way or being reported (a test awaits this after moving the clock). */
  async idle(): Promise<void> {
    while (this.#reporting.size > 0) await Promise.all([...this.#reporting]);
  }

  /**
   * Finds the job's windows that passed with no slot record within its catch-up reach, and runs
   * them per its policy, oldest first and one at a time: in order, as the schedule would have, and
   * without N windows' worth of replicas at once.
   */
  async catchUp(job: LocalJob, now = this.#clock.now(), since?: number): Promise<CatchUpReport> {
    const policy = resolveCatchUpPolicy(job.spec.catchUp, job.spec.id);
    const retentionDays = this.#o.runOptions?.retentionDays ?? JOB_DEFAULTS.retentionDays;
    // Since the last start when it is known (windows past the lateness then show up as too late,
    // and are reported), else within the lateness; never further back than the retention minus a
    // day, which run-slot.ts refuses to claim.
    const claimable = now - (retentionDays - 1) * DAY_MS;
    const from = Math.max(since ?? now - policy.maxLatenessMinutes * 60_000, claimable);
    const schedule = new JobSchedule(job.spec.schedule);
    const missed: Date[] = [];
    for (const window of schedule.firesBetween(from, now)) {
      const record = await this.#o.backend.claims.read({ jobId: job.spec.id, window: windowOf(window) });
      if (!record) missed.push(window);
    }
    const plan = planCatchUp(missed, policy, now);
    const reports: WindowReport[] = [];
    for (const window of plan.run) reports.push(await this.fire(job, window, { backfilled: true }));
    return { jobId: job.spec.id, plan, reports };
  }

  /**
   * Fires one window: every replica sends the scheduler event to the job's work queue (each first
   * delivery handed out twice with `duplicate`; the retry sent once those are over with `retry`).
   * Resolves with the window's report once every message was delivered, no invocation of the
   * window is under way, and either no message of it is left or the window is finished (DONE,
   * PARTIAL, FAILED or STUCK): a message left then only stands down when it comes back.
   */
  fire(job: LocalJob, window: Date, options: { readonly backfilled?: boolean } = {}): Promise<WindowReport> {
    if (this.#stopped) {
      return Promise.reject(
        new RangeError(
          'this LocalRunner is stopped and delivers nothing more; make a new one to fire a window',
        ),
      );
    }
    const engine = this.#engine(job);
    let settle = () => {};
    const done = new Promise<void>((resolve) => {
      settle = resolve;
    });
    const run: WindowRun = {
      job,
      window,
      backfilled: options.backfilled === true,
      started: this.#clock.now(),
      script:
        this.#faults.includes(FaultKind.Crash) || this.#faults.includes(FaultKind.Pause)
          ? new WindowFaultScript(this.#faults, job.effectsPerWindow, this.#random)
          : undefined,
      from: windowSender(job.spec.id, window),
      claimedBy: [],
      errors: [],
      resolved: { confirmed: 0, rejected: 0, resent: 0 },
      gates: new Set(),
      frozen: new Map(),
      live: new Set(),
      copiesOwed: new Set(),
      retry: undefined,
      unreceived: 0,
      inFlight: 0,
      fires: 0,
      checking: false,
      recheck: false,
      over: false,
      settle,
    };
    this.#windows.add(run);
    const compact = windowOf(window).replace(/[-:]/g, '');
    const base = (replica: number): FireEvent => ({
      jobId: job.spec.id,
      scheduledTime: windowOf(window),
      executionId: `local-${compact}-r${replica}`,
      attemptNumber: '1',
      ...(run.backfilled ? { backfilled: true } : {}),
    });
    if (this.#faults.includes(FaultKind.Retry)) {
      const replica = 1 + Math.floor(this.#random() * this.#replicas);
      run.retry = {
        origin: `replica-${replica}/retry`,
        event: { ...base(replica), executionId: `local-${compact}-r${replica}-retry`, attemptNumber: '2' },
      };
    }
    for (let replica = 1; replica <= this.#replicas; replica++) {
      this.#send(engine, run, `replica-${replica}`, base(replica));
    }
    const reported = done
      .then(() => this.#report(run))
      .then((report) => {
        this.#o.onWindow?.(report);
        return report;
      });
    const pending = reported.then(
      () => undefined,
      () => undefined,
    );
    this.#reporting.add(pending);
    void pending.then(() => this.#reporting.delete(pending));
    return reported;
  }

  #scheduleNext(job: LocalJob, after: number): void {
    if (this.#stopped) return;
    const next = new JobSchedule(job.spec.schedule).nextFireAfter(after);
    if (!next) return;
    const cancel = scheduleAt(this.#clock, next.getTime(), () => {
      this.#timers.delete(cancel);
      void this.fire(job, next);
      this.#scheduleNext(job, next.getTime());
    });
    this.#timers.add(cancel);
  }

  /** The job's work queue and event source, configured as its ScheduledJob's. */
  #engine(job: LocalJob): JobEngine {
    const existing = this.#engines.get(job.spec.id);
    if (existing) return existing;
    const { spec } = job;
    const timeoutMs = this.#o.lambdaTimeoutMs ?? (spec.timeoutSeconds ?? JOB_DEFAULTS.timeoutSeconds) * 1000;
    const deadlineMs = jobDeadlineMs(
      { ...spec, timeoutSeconds: Math.ceil(timeoutMs / 1000) },
      this.#clock.now(),
    );
    const specOptions = runOptionsOf(spec);
    const resolution = this.#o.sink?.recordsWords
      ? localInDoubtResolution({
          leaseMs: this.#o.runOptions?.leaseMs ?? specOptions.leaseMs,
          lambdaTimeoutMs: timeoutMs,
          faults: this.#faults,
        })
      : undefined;
    const options: RunOptions = {
      ...specOptions,
      deadlineMs,
      ...(resolution ? { inDoubtResolution: resolution } : {}),
      ...this.#o.runOptions,
    };
    const { shards } = resolveRunOptions(options);
    const duplicates = this.#faults.includes(FaultKind.Duplicate);
    const duplicated = new Set<string>();
    // The queue and the event source call back into the engine only once messages flow.
    const queue: ObservedWorkQueue = new ObservedWorkQueue({
      clock: this.#clock,
      name: spec.id,
      visibilityTimeoutMs: Math.min(6 * timeoutMs, MAX_VISIBILITY_MS),
      // ScheduledJob's redrive policy (infra/scheduled-job.ts workQueueMaxReceiveCount).
      maxReceiveCount: Math.min(1000, 2 * Math.ceil(deadlineMs / timeoutMs) + 50),
      duplicate: ({ messageId, receiveCount }) => {
        if (!duplicates || receiveCount !== 1) return false;
        duplicated.add(messageId);
        return true;
      },
      observer: {
        received: (records) => this.#received(engine, records),
        deleted: (messageId) => this.#gone(engine, messageId),
        deadLettered: (letter) => this.#deadLettered(engine, letter),
      },
    });
    const source = new InProcessEventSource({
      queue,
      handler: (event, context) => this.#invoke(engine, event, context),
      clock: dueNowAtOnce(this.#clock),
      // Every replica's fire is taken at once, as N schedules and functions would, and every shard
      // of a split window runs at once beside them (ScheduledJob's maximumConcurrency covers the
      // shards too), each copy of a duplicated delivery an invocation of its own.
      maximumConcurrency: Math.max(2, (this.#replicas + (shards > 1 ? shards : 0)) * (duplicates ? 2 : 1)),
      timeoutMs,
      name: spec.id,
    });
    const engine: JobEngine = {
      job,
      options,
      timeoutMs,
      queue,
      source,
      unreceived: new Map(),
      messages: new Map(),
      duplicated,
      copies: new Set(),
    };
    source.start();
    this.#engines.set(spec.id, engine);
    return engine;
  }

  /** Sends one fire of a window to the job's queue, as the schedule does. */
  #send(engine: JobEngine, run: WindowRun, origin: string, event: FireEvent): void {
    const body = JSON.stringify(event);
    this.#expect(engine, { run, origin }, body);
    void engine.queue.send(body, 0);
  }

  /** A message of the window's about to be sent: it is the window's until it is gone. */
  #expect(engine: JobEngine, fire: Fire, body: string): void {
    const waiting = engine.unreceived.get(body);
    if (waiting) waiting.push(fire);
    else engine.unreceived.set(body, [fire]);
    fire.run.unreceived++;
  }

  /**
   * The work queue as one invocation of `run` reaches it: through its gate, and every message it
   * sends (a coordinator's one message per shard, in batches) counted as the window's, so the
   * window is not over while a shard's message is on its way or in the queue.
   */
  #queueFor(engine: JobEngine, run: WindowRun, gate: InvocationGate): WorkQueue {
    const queue: WorkQueue = {
      send: async (body, delayMs) => {
        this.#expect(engine, { run, origin: originOf(body) }, body);
        await engine.queue.send(body, delayMs);
      },
      sendBatch: async (bodies, delayMs) => {
        for (const body of bodies) this.#expect(engine, { run, origin: originOf(body) }, body);
        await engine.queue.sendBatch(bodies, delayMs);
      },
      changeVisibility: (handle, visibleInMs) => engine.queue.changeVisibility(handle, visibleInMs),
    };
    return gatedWorkQueue(queue, gate);
  }

  #received(engine: JobEngine, records: readonly SqsRecord[]): void {
    for (const record of records) {
      if (!engine.messages.has(record.messageId)) {
        const waiting = engine.unreceived.get(record.body);
        const fire = waiting?.shift();
        if (!fire) continue;
        if (waiting!.length === 0) engine.unreceived.delete(record.body);
        engine.messages.set(record.messageId, fire);
        fire.run.unreceived--;
        fire.run.live.add(record.messageId);
      }
      const run = engine.messages.get(record.messageId)!.run;
      if (engine.duplicated.delete(record.messageId)) {
        run.copiesOwed.add(record.messageId);
      } else if (run.copiesOwed.delete(record.messageId)) {
        engine.copies.add(record.receiptHandle);
      }
    }
  }

  #gone(engine: JobEngine, messageId: string): void {
    const fire = engine.messages.get(messageId);
    engine.messages.delete(messageId);
    engine.duplicated.delete(messageId);
    if (!fire) return;
    fire.run.live.delete(messageId);
    fire.run.copiesOwed.delete(messageId);
    this.#check(fire.run);
  }

  #deadLettered(engine: JobEngine, letter: DeadLetter): void {
    const run = engine.messages.get(letter.messageId)?.run;
    if (run && !run.over) {
      run.errors.push(
        `${engine.job.spec.id}'s work queue dead-lettered the window's message after ${letter.receiveCount} deliveries`,
      );
    }
    this.#gone(engine, letter.messageId);
  }

  /**
   * One invocation, as Lambda's event source makes it: its own gate (process), handler and sender;
   * the same backend, queue and mail server. A crashed invocation's answer never reaches Lambda,
   * so its message is kept, as after a killed process.
   */
  async #invoke(engine: JobEngine, event: SqsEvent, context: InvocationContext): Promise<SqsBatchResponse> {
    const record = event.Records[0]!;
    const fire = engine.messages.get(record.messageId);
    if (!fire) throw new Error(`message ${record.messageId} was not sent by the local runner`);
    // A message of a window already reported (a duplicate that stands down) is run but not counted.
    const run = fire.run.over ? undefined : fire.run;
    const receiveCount = receiveCountOf(record);
    const name = engine.copies.delete(record.receiptHandle)
      ? `${fire.origin}/duplicate`
      : receiveCount > 1
        ? `${fire.origin}/redelivery-${receiveCount - 1}`
        : fire.origin;
    const gate = new InvocationGate(name);
    const spec = engine.job.spec;
    const sender = this.#o.senderFor(fire.run.from);
    // The slot this invocation claimed, if it did: the window, or the shard its message names.
    let held: string | undefined;
    if (run) {
      run.fires++;
      run.inFlight++;
      run.gates.add(gate);
    }
    const handler = createJobHandler(
      engine.job.definition(
        gatedSender(sender, gate, run?.script, (fault) => {
          if (run) this.#onStrike(run, gate, fault, held);
        }),
      ),
      {
        backend: gatedBackend(this.#o.backend, gate, {
          onClaimed: (slot) => {
            held = slotName(slot);
            run?.claimedBy.push(name);
          },
        }),
        metrics: () =>
          countingResolutions(
            this.#o.metrics?.(spec.id) ?? emfMetrics({ jobId: spec.id, write: () => {} }),
            run?.resolved,
          ),
        log: this.#o.log ?? silentLog,
        clock: this.#clock,
        options: engine.options,
        workQueue: this.#queueFor(engine, fire.run, gate),
      },
    );
    this.#invocations.add(gate);
    // Lambda stops an invocation at its time limit, whatever it is doing: from then on nothing it
    // does reaches the store, the mail server or the queue, as after a crash.
    const kill = this.#clock.schedule(engine.timeoutMs, () => {
      if (gate.crashed) return;
      gate.crash();
      run?.errors.push(`${name}: stopped by Lambda at its ${engine.timeoutMs / 1000} s time limit`);
    });
    try {
      // Named after the fire it delivers, so the slot's holder reads `replica-2/redelivery-1`.
      const response = await handler(event, {
        awsRequestId: name,
        getRemainingTimeInMillis: () => context.getRemainingTimeInMillis(),
      });
      if (gate.crashed) throw new ReplicaCrashedError(`${name} crashed; Lambda never got its answer`);
      return response;
    } catch (error) {
      // A crashed invocation's errors are the crash itself. Anything else is reported: the run
      // failing (its message is kept for a retry) or a store that cannot be reached.
      if (!(error instanceof ReplicaCrashedError) && !gate.crashed && run) {
        const text = safeErrorText(error);
        run.errors.push(`${name}: ${text}`);
        this.#o.log?.warn('delivery failed', { invocation: name, error: text });
        this.#o.onError?.(`${spec.id} ${windowOf(run.window)} ${name}: ${text}`);
      }
      throw error;
    } finally {
      kill();
      this.#invocations.delete(gate);
      sender.close?.();
      if (run) {
        run.gates.delete(gate);
        run.inFlight--;
        const frozen = held === undefined ? undefined : run.frozen.get(held);
        if (frozen && !gate.frozen) {
          // A takeover of the frozen holder's slot is over: the holder wakes up, fenced.
          for (const holder of frozen) holder.thaw();
          run.frozen.delete(held!);
        }
        this.#check(run);
      }
    }
  }

  #onStrike(run: WindowRun, gate: InvocationGate, fault: EffectFault, held: string | undefined): void {
    this.#o.onFault?.(`${run.job.spec.id} ${windowOf(run.window)}: ${describeFault(fault, gate.name)}`);
    // Only a slot's holder sends, so a pause always strikes one that holds a slot.
    if (fault.kind === 'pause' && held !== undefined) {
      const frozen = run.frozen.get(held) ?? new Set();
      frozen.add(gate);
      run.frozen.set(held, frozen);
    }
  }

  /** Settles the window's run once it is over (see fire), sending the retry fault's fire first. */
  #check(run: WindowRun): void {
    if (run.over) return;
    if (run.checking) {
      run.recheck = true;
      return;
    }
    if (run.inFlight > 0 || run.unreceived > 0 || run.copiesOwed.size > 0) return;
    if (run.retry) {
      const { origin, event } = run.retry;
      run.retry = undefined;
      this.#send(this.#engine(run.job), run, origin, event);
      return;
    }
    if (run.live.size === 0) {
      this.#settle(run);
      return;
    }
    run.checking = true;
    run.recheck = false;
    const slot = { jobId: run.job.spec.id, window: windowOf(run.window) };
    void this.#o.backend.claims
      .read(slot)
      .then(
        (record) => record !== undefined && TERMINAL_SLOT_STATES.includes(record.state),
        () => false,
      )
      .then((finished) => {
        run.checking = false;
        const quiet = run.inFlight === 0 && run.unreceived === 0 && run.copiesOwed.size === 0;
        if (finished && quiet) this.#settle(run);
        else if (run.recheck) this.#check(run);
      });
  }

  #settle(run: WindowRun): void {
    if (run.over) return;
    run.over = true;
    this.#windows.delete(run);
    run.settle();
  }

  async #report(run: WindowRun): Promise<WindowReport> {
    const slot = { jobId: run.job.spec.id, window: windowOf(run.window) };
    const record = await this.#o.backend.claims.read(slot);
    const tally = await tallyWindow(this.#o.backend.ledger, slot, this.#clock.now());
    const mail = this.#o.sink?.from(run.from);
    return {
      jobId: slot.jobId,
      window: slot.window,
      backfilled: run.backfilled,
      fires: run.fires,
      runs: run.claimedBy.length,
      claimedBy: run.claimedBy,
      faults: (run.script?.struck ?? []).map(({ fault, invocation }) => describeFault(fault, invocation)),
      errors: run.errors,
      delivered: mail?.total,
      duplicates: mail?.duplicates,
      inDoubt: tally.inDoubt,
      resolved: { ...run.resolved },
      done: tally.done,
      failed: tally.failed + tally.waiting,
      state: record?.state ?? 'MISSED',
      shards: record?.shards ?? 1,
      epoch: record?.epoch ?? 0,
      ms: this.#clock.now() - run.started,
    };
  }
}

/**
 * How the local runner settles effects a run left in doubt, when its SMTP sink records the
 * provider's word: re-sent once a short grace period is over with no word (`afterGrace: 'resend'`).
 *
 * Locally that is exact, not "probably safe" as deployed: the sink writes each message's word onto
 * its effect before it acknowledges the message, so the record is complete and synchronous, and a
 * reservation with no word once the invocation that made it can send no more was never accepted.
 * - With no holder frozen, that invocation is dead when a takeover looks (the dead holder's lease
 *   ran out first), and what it had in flight landed moments after it died: a lease of grace is
 *   plenty, and leaves room for a machine under load.
 * - A frozen holder (`pause`) wakes once the takeover's run is over and sends what it had under
 *   way: only Lambda's time limit, at which the runner stops every invocation as Lambda does, ends
 *   what it can still send. The grace is then that limit.
 * Deployed, SES's events can be later than any bound, hence the 1 hour default and 'report'.
 */
export function localInDoubtResolution(args: {
  readonly leaseMs: number;
  readonly lambdaTimeoutMs: number;
  readonly faults: readonly FaultKind[];
}): Required<InDoubtResolution> {
  return {
    graceMs: args.faults.includes(FaultKind.Pause) ? args.lambdaTimeoutMs : args.leaseMs,
    afterGrace: AfterGrace.Resend,
  };
}

/** `metrics`, also adding each in-doubt resolution an invocation counts to its window's `tally`. */
function countingResolutions(
  metrics: JobMetrics,
  tally: { confirmed: number; rejected: number; resent: number } | undefined,
): JobMetrics {
  if (!tally) return metrics;
  return {
    count(name, value = 1) {
      if (name === MetricName.InDoubtConfirmed) tally.confirmed += value;
      else if (name === MetricName.InDoubtRejected) tally.rejected += value;
      else if (name === MetricName.InDoubtResent) tally.resent += value;
      metrics.count(name, value);
    },
    flush: () => metrics.flush(),
  };
}

/**
 * `clock`, except that a timer due now runs on the next turn of the event loop instead of when the
 * clock next moves: a message sent with no delay is delivered at once even on a ManualClock that a
 * test leaves standing (the operator CLI's local backfill runs a window that way). Waits stay on
 * the clock.
 */
function dueNowAtOnce(clock: Clock): Clock {
  return {
    now: () => clock.now(),
    schedule(ms, fn) {
      if (ms > 0) return clock.schedule(ms, fn);
      const immediate = setImmediate(fn);
      return () => clearImmediate(immediate);
    },
  };
}

/**
 * What an invocation's own message is called in reports: `shard-3` for a shard's message from the
 * window's coordinator, else `continuation` (a direct invocation's; not on the SQS path).
 */
function originOf(body: string): string {
  try {
    const shard = (JSON.parse(body) as { shard?: unknown }).shard;
    return typeof shard === 'number' ? `${SHARD_ORIGIN}${shard}` : 'continuation';
  } catch {
    return 'continuation';
  }
}

/** A slot's name among the window's: `window`, or `shard-3`. */
function slotName(slot: Slot): string {
  return slot.shard === undefined ? 'window' : `${SHARD_ORIGIN}${slot.shard}`;
}

function describeFault(fault: EffectFault, invocation: string): string {
  return fault.kind === 'crash'
    ? `${invocation} crashed at effect ${fault.atEffect} (${fault.point})`
    : `${invocation} froze at effect ${fault.atEffect}`;
}

/** The envelope sender of a window's mail: how the SMTP server's log tells windows apart. */
export function windowSender(jobId: string, window: Date): string {
  return `${jobId}.${windowOf(window).replace(/[-:]/g, '').toLowerCase()}@slotguard.local`;
}

/** The run options a JobSpec implies, as the deployed function reads them from its environment. */
function runOptionsOf(spec: JobSpec) {
  return {
    leaseMs: (spec.leaseSeconds ?? JOB_DEFAULTS.leaseSeconds) * 1000,
    effectConcurrency: spec.effectConcurrency ?? JOB_DEFAULTS.effectConcurrency,
    maxAttempts: spec.maxAttempts ?? JOB_DEFAULTS.maxAttempts,
    ...(spec.reserveAhead ? { reserveAhead: true } : {}),
    ...(spec.takeoverSkewSeconds !== undefined
      ? { takeoverSkewMs: Math.round(spec.takeoverSkewSeconds * 1000) }
      : {}),
  } satisfies RunOptions;
}

/** One line per window, for `npm start -- serve` and the demo. */
export function describeWindow(report: WindowReport): string {
  const n = (value: number | undefined) => (value === undefined ? '-' : value.toLocaleString('en-US'));
  // A split window's shard runs are counted, not listed: eight shards' continuations would fill the line.
  const windowRuns = report.claimedBy.filter((name) => !name.startsWith(SHARD_ORIGIN));
  const claimed = windowRuns.length > 0 ? windowRuns.join(' → ') : 'nobody';
  const parts = [
    `${report.window} ${report.jobId}${report.backfilled ? ' (catch-up)' : ''}`,
    `fires ${report.fires}`,
    `runs ${report.runs}`,
    `claimed by ${claimed}`,
    ...(report.shards > 1
      ? [`shards ${report.shards} (${report.claimedBy.length - windowRuns.length} runs)`]
      : []),
    `delivered ${n(report.delivered)}`,
    `duplicates ${n(report.duplicates)}`,
    `in doubt ${report.inDoubt}`,
  ];
  const { confirmed, rejected, resent } = report.resolved;
  if (confirmed + rejected + resent > 0) {
    parts.push(
      `resolved ${confirmed + rejected + resent} (${confirmed} confirmed, ${rejected} rejected, ${resent} resent)`,
    );
  }
  if (report.failed > 0) parts.push(`failed ${report.failed}`);
  parts.push(`${report.state} epoch ${report.epoch}`);
  if (report.faults.length > 0) parts.push(`faults: ${report.faults.join('; ')}`);
  if (report.errors.length > 0)
    parts.push(`${report.errors.length} deliveries failed, first: ${report.errors[0]}`);
  return parts.join('  ');
}
