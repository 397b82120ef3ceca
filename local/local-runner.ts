import type { LocalJob } from '../functions/local-jobs.js';
import { type Clock, systemClock } from '../shared/clock.js';
import type { EmailSender } from '../shared/effects/email-sender.js';
import { JOB_DEFAULTS, type JobSpec } from '../shared/job/job-spec.js';
import { createJobHandler, type HandlerResponse } from '../shared/job/lambda-handler.js';
import { type RunOptions, resolveRunOptions, type SlotBackend } from '../shared/job/run-slot.js';
import type { SchedulerEvent } from '../shared/job/scheduler-event.js';
import { type CatchUpPlan, planCatchUp, resolveCatchUpPolicy } from '../shared/schedule/catch-up.js';
import { JobSchedule } from '../shared/schedule/fire-times.js';
import { EffectState, type SlotState } from '../shared/slot/ports.js';
import { windowOf } from '../shared/slot/slot.js';
import { type Log, silentLog } from '../shared/telemetry/log.js';
import { emfMetrics, type JobMetrics } from '../shared/telemetry/metrics.js';
import {
  type EffectFault,
  FaultKind,
  gatedBackend,
  gatedSender,
  InvocationGate,
  ReplicaCrashedError,
  seededRandom,
  WindowFaultScript,
} from './replica-faults.js';
import type { SmtpSink } from './smtp-sink.js';

const DAY_MS = 86_400_000;

/** Where progress and tables go: process.stdout, or a collector in tests. */
export interface TerminalOutput {
  write(text: string): unknown;
  /** A terminal gets a live progress line; anything else plain lines. */
  readonly isTTY?: boolean;
}
/** setTimeout's longest delay; longer waits are chained. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** What the local runner runs, against what, and with which faults. */
export interface LocalRunnerOptions {
  /** The catalog's jobs with local dependencies (functions/local-jobs.ts). */
  readonly jobs: readonly LocalJob[];
  readonly backend: SlotBackend;
  /**
   * A sender whose envelope and From address is `from`. Each window sends from its own address,
   * so the SMTP server's log tells the windows apart; it is closed when the window is over.
   */
  readonly senderFor: (from: string) => EmailSender & { close?(): void };
  /** Where the counts per window are read from. */
  readonly sink?: SmtpSink;
  /**
   * Replicas firing every window, as N schedules or N service instances would.
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
  /** Overrides of the run options each job's JobSpec gives (a short lease for fault demos, say). */
  readonly runOptions?: RunOptions;
  /** Called once per window, when every delivery of it (retries and redeliveries too) is over. */
  readonly onWindow?: (report: WindowReport) => void;
  /** Called the moment a crash or a pause strikes, in words (the window's report lists them too). */
  readonly onFault?: (fault: string) => void;
}

/** What became of one window: counted from the store and the SMTP server, not from the job. */
export interface WindowReport {
  readonly jobId: string;
  readonly window: string;
  /** Delivered late on purpose (catch-up or backfill). */
  readonly backfilled: boolean;
  /** Deliveries of the window: replicas, duplicates, retries, redeliveries. */
  readonly fires: number;
  /** The invocations whose claim succeeded, in order (more than one after a takeover). */
  readonly claimedBy: readonly string[];
  /** Faults that struck, in words. */
  readonly faults: readonly string[];
  /** Deliveries that failed other than by an injected crash: `replica-2: JobRunFailedError: …`. */
  readonly errors: readonly string[];
  /** Emails the SMTP server accepted for this window, and beyond one per recipient. */
  readonly delivered: number | undefined;
  readonly duplicates: number | undefined;
  /** Effects reserved and never recorded done, read from the ledger after the window. */
  readonly inDoubt: number;
  readonly done: number;
  /** The slot's state after the window (MISSED when nothing claimed it). */
  readonly state: SlotState | 'MISSED';
  readonly epoch: number;
  readonly ms: number;
}

/** A job's catch-up when the runner starts: what was missed, what runs, what does not and why. */
export interface CatchUpReport {
  readonly jobId: string;
  readonly plan: CatchUpPlan;
  readonly reports: readonly WindowReport[];
}

interface Delivery {
  readonly name: string;
  readonly event: SchedulerEvent;
}

interface WindowRun {
  readonly job: LocalJob;
  readonly window: Date;
  readonly backfilled: boolean;
  readonly started: number;
  readonly script: WindowFaultScript | undefined;
  readonly sender: EmailSender & { close?(): void };
  readonly from: string;
  readonly claimedBy: string[];
  readonly errors: string[];
  readonly gates: InvocationGate[];
  readonly inFlight: Set<Promise<void>>;
  readonly timers: Set<() => void>;
  fires: number;
  redeliveries: number;
  settle: () => void;
  readonly done: Promise<void>;
}

/**
 * Runs the catalog's jobs on this machine as EventBridge Scheduler and Lambda would: each fire time
 * of each job's schedule (JobSchedule: its zone and Scheduler's daylight-saving rules) becomes the
 * same event the deployed schedule sends, delivered to the same handler (createJobHandler), by N
 * replicas, with the faults asked for. Time comes from the injected clock, so tests move it.
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
  readonly #windows = new Set<WindowRun>();
  /** Every window fired and not yet reported. */
  readonly #reporting = new Set<Promise<void>>();
  readonly #timers = new Set<() => void>();
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

  /** Stops firing, lets frozen invocations go, and waits for every window under way. */
  async stop(): Promise<void> {
    this.#stopped = true;
    for (const cancel of this.#timers) cancel();
    this.#timers.clear();
    for (const run of this.#windows) {
      for (const cancel of run.timers) cancel();
      run.timers.clear();
      for (const gate of run.gates) gate.thaw();
    }
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
   * Fires one window: every replica delivers the scheduler event (twice with `duplicate`), then a
   * retry (with `retry`), and a redelivery after each crash or pause. Resolves with the window's
   * report once every delivery is over.
   */
  fire(job: LocalJob, window: Date, options: { readonly backfilled?: boolean } = {}): Promise<WindowReport> {
    const from = windowSender(job.spec.id, window);
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
      sender: this.#o.senderFor(from),
      from,
      claimedBy: [],
      errors: [],
      gates: [],
      inFlight: new Set(),
      timers: new Set(),
      fires: 0,
      redeliveries: 0,
      settle,
      done,
    };
    this.#windows.add(run);
    const compact = windowOf(window).replace(/[-:]/g, '');
    const base = (replica: number): SchedulerEvent => ({
      jobId: job.spec.id,
      scheduledTime: windowOf(window),
      executionId: `local-${compact}-r${replica}`,
      attemptNumber: '1',
      ...(run.backfilled ? { backfilled: true } : {}),
    });
    const first: Delivery[] = [];
    for (let replica = 1; replica <= this.#replicas; replica++) {
      first.push({ name: `replica-${replica}`, event: base(replica) });
      if (this.#faults.includes(FaultKind.Duplicate)) {
        first.push({ name: `replica-${replica}/duplicate`, event: base(replica) });
      }
    }
    const initial = Promise.all(first.map((delivery) => this.#deliver(run, delivery)));
    if (this.#faults.includes(FaultKind.Retry)) {
      const retryReplica = 1 + Math.floor(this.#random() * this.#replicas);
      this.#track(
        run,
        initial.then(() =>
          this.#deliver(run, {
            name: `replica-${retryReplica}/retry`,
            event: {
              ...base(retryReplica),
              executionId: `local-${compact}-r${retryReplica}-retry`,
              attemptNumber: '2',
            },
          }),
        ),
      );
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
    this.#at(next.getTime(), this.#timers, () => {
      void this.fire(job, next);
      this.#scheduleNext(job, next.getTime());
    });
  }

  /** Calls `fn` at `time` on the clock, chaining timers past setTimeout's 24.8-day limit. */
  #at(time: number, timers: Set<() => void>, fn: () => void): void {
    const delay = Math.max(0, time - this.#clock.now());
    const cancel = this.#clock.schedule(Math.min(delay, MAX_TIMER_MS), () => {
      timers.delete(cancel);
      if (delay > MAX_TIMER_MS) this.#at(time, timers, fn);
      else fn();
    });
    timers.add(cancel);
  }

  #track(run: WindowRun, work: Promise<unknown>): void {
    const tracked = work.then(
      () => undefined,
      () => undefined,
    );
    run.inFlight.add(tracked);
    void tracked.then(() => {
      run.inFlight.delete(tracked);
      this.#maybeSettle(run);
    });
  }

  #maybeSettle(run: WindowRun): void {
    if (run.inFlight.size > 0 || run.timers.size > 0) return;
    this.#windows.delete(run);
    run.sender.close?.();
    run.settle();
  }

  /** One invocation: its own gate (process), its own handler, the same backend and mail server. */
  #deliver(run: WindowRun, delivery: Delivery): Promise<void> {
    const gate = new InvocationGate(delivery.name);
    run.gates.push(gate);
    run.fires++;
    const spec = run.job.spec;
    const handler = createJobHandler(
      run.job.definition(
        gatedSender(run.sender, gate, run.script, (fault) => this.#onStrike(run, delivery, gate, fault)),
      ),
      {
        backend: gatedBackend(this.#o.backend, gate, { onClaimed: () => run.claimedBy.push(delivery.name) }),
        metrics: () => this.#o.metrics?.(spec.id) ?? emfMetrics({ jobId: spec.id, write: () => {} }),
        log: this.#o.log ?? silentLog,
        clock: this.#clock,
        options: { ...runOptionsOf(spec), ...this.#o.runOptions },
      },
    );
    const startedAt = this.#clock.now();
    const timeoutMs = (spec.timeoutSeconds ?? JOB_DEFAULTS.timeoutSeconds) * 1000;
    const work = handler(delivery.event, {
      awsRequestId: delivery.name,
      getRemainingTimeInMillis: () => timeoutMs - (this.#clock.now() - startedAt),
    }).then(
      (response: HandlerResponse) => response,
      (error: unknown) => {
        // A crashed invocation's errors are the crash itself. Anything else is reported: the run
        // failing (its slot is released for a retry, or FAILED) or a configuration that cannot work.
        if (error instanceof ReplicaCrashedError || gate.crashed) return;
        const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
        run.errors.push(`${delivery.name}: ${text}`);
        this.#o.log?.warn('delivery failed', { invocation: delivery.name, error: text });
      },
    );
    this.#track(run, work);
    return work.then(() => undefined);
  }

  /**
   * After a crash or a pause the window's slot stays RUNNING under the dead or frozen holder's
   * lease; as Lambda would retry the failed invocation, the same event is delivered again once that
   * lease has run out, and takes the slot over. A frozen holder wakes when the takeover is over.
   */
  #onStrike(run: WindowRun, delivery: Delivery, gate: InvocationGate, fault: EffectFault): void {
    this.#o.onFault?.(`${run.job.spec.id} ${windowOf(run.window)}: ${describeFault(fault, delivery.name)}`);
    const { leaseMs, takeoverSkewMs } = resolveRunOptions({
      ...runOptionsOf(run.job.spec),
      ...this.#o.runOptions,
    });
    const redelivery: Delivery = {
      name: `${delivery.name.split('/')[0]}/redelivery-${++run.redeliveries}`,
      event: delivery.event,
    };
    // Past the lease and the takeover's clock-skew allowance.
    this.#at(this.#clock.now() + leaseMs + takeoverSkewMs + 1_000, run.timers, () => {
      const takeover = this.#deliver(run, redelivery);
      if (fault.kind === 'pause')
        this.#track(
          run,
          takeover.then(() => gate.thaw()),
        );
      this.#maybeSettle(run);
    });
  }

  async #report(run: WindowRun): Promise<WindowReport> {
    const slot = { jobId: run.job.spec.id, window: windowOf(run.window) };
    const record = await this.#o.backend.claims.read(slot);
    let done = 0;
    let inDoubt = 0;
    for await (const effect of this.#o.backend.ledger.list(slot)) {
      if (effect.state === EffectState.Done) done++;
      else inDoubt++;
    }
    const tally = this.#o.sink?.from(run.from);
    const report: WindowReport = {
      jobId: slot.jobId,
      window: slot.window,
      backfilled: run.backfilled,
      fires: run.fires,
      claimedBy: run.claimedBy,
      faults: (run.script?.struck ?? []).map(({ fault, invocation }) => describeFault(fault, invocation)),
      errors: run.errors,
      delivered: tally?.total,
      duplicates: tally?.duplicates,
      inDoubt,
      done,
      state: record?.state ?? 'MISSED',
      epoch: record?.epoch ?? 0,
      ms: this.#clock.now() - run.started,
    };
    return report;
  }
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
function runOptionsOf(spec: JobSpec): RunOptions {
  return {
    leaseMs: (spec.leaseSeconds ?? JOB_DEFAULTS.leaseSeconds) * 1000,
    effectConcurrency: spec.effectConcurrency ?? JOB_DEFAULTS.effectConcurrency,
    maxAttempts: spec.maxAttempts ?? JOB_DEFAULTS.maxAttempts,
  };
}

/** One line per window, for `npm start -- serve` and the demo. */
export function describeWindow(report: WindowReport): string {
  const n = (value: number | undefined) => (value === undefined ? '-' : value.toLocaleString('en-US'));
  const claimed = report.claimedBy.length > 0 ? report.claimedBy.join(' → ') : 'nobody';
  const parts = [
    `${report.window} ${report.jobId}${report.backfilled ? ' (catch-up)' : ''}`,
    `fires ${report.fires}`,
    `claimed by ${claimed}`,
    `delivered ${n(report.delivered)}`,
    `duplicates ${n(report.duplicates)}`,
    `in doubt ${report.inDoubt}`,
    `${report.state} epoch ${report.epoch}`,
  ];
  if (report.faults.length > 0) parts.push(`faults: ${report.faults.join('; ')}`);
  if (report.errors.length > 0)
    parts.push(`${report.errors.length} deliveries failed, first: ${report.errors[0]}`);
  return parts.join('  ');
}
