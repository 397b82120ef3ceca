import {
  type Clock,
  emfMetrics,
  type JobDefinition,
  type JobMetrics,
  JobSchedule,
  type Log,
  type RunOptions,
  type RunResult,
  runSlot,
  type ScheduleSpec,
  type SlotBackend,
  scheduleAt,
  systemClock,
  windowOf,
} from 'slotguard';

/** Options of a ScheduledReplica. */
export interface ScheduledReplicaOptions {
  /**
   * This replica's name: recorded on every slot it claims (the delivery's invocationId), so an
   * operator can tell replicas apart. Name its pool's application_name after it too.
   */
  readonly name: string;
  readonly job: JobDefinition;
  /**
   * An EventBridge Scheduler expression and its zone, `{ expression: 'cron(0 9 ? * MON *)',
   * timeZone: 'Europe/Moscow' }`, fired as Scheduler fires it: a local time the clocks skip does not
   * fire, a repeated one fires once (shared/schedule/, the same computation as the CDK checks).
   */
  readonly schedule: ScheduleSpec;
  readonly backend: SlotBackend;
  readonly log: Log;
  /**
   * Metrics for one tick, flushed when it ends.
   * @default EMF lines on stdout for the job
   */
  readonly metrics?: () => JobMetrics;
  /**
   * The clock the schedule's timers, the run's lease keeper and its retention checks read. A
   * service that waits on nothing but its schedule wants timers that keep the process alive (the
   * system clock's are unref'd).
   * @default the system clock
   */
  readonly clock?: Clock;
  /** @default the runtime's defaults */
  readonly run?: RunOptions;
}

/**
 * One replica of a long-running service that runs a job on an in-process schedule, the incident's
 * own set-up: every replica's timer fires for every window, and the (job, window) slot claim lets
 * exactly one of them run it. Fire times are EventBridge Scheduler's (JobSchedule), so the service
 * and a ScheduledJob with the same expression run the same windows, daylight-saving nights included.
 *
 * The window is the tick's scheduled instant, never the time the timer happened to fire: a timer
 * goes off late by a GC pause, a busy event loop or a suspended container, so the window is the
 * schedule's latest fire at or before that moment. Replicas whose timers fire milliseconds or
 * seconds apart land in the same slot; a replica that fires a whole period late claims the window
 * it is in, never one the schedule does not have.
 * @example
 * const replica = new ScheduledReplica({ name: 'api-7f9c', job, schedule: { expression: 'cron(0 9 ? * MON *)', timeZone: 'Europe/Moscow' }, backend, log }).start();
 * process.on('SIGTERM', () => void replica.stop());
 */
export class ScheduledReplica {
  readonly #options: ScheduledReplicaOptions;
  readonly #schedule: JobSchedule;
  readonly #clock: Clock;
  readonly #inFlight = new Set<Promise<unknown>>();
  #cancelTimer: (() => void) | undefined;
  #stopped = false;

  /** @throws ScheduleError when the schedule cannot be read; its message says what to write. */
  constructor(options: ScheduledReplicaOptions) {
    this.#options = options;
    this.#schedule = new JobSchedule(options.schedule);
    this.#clock = options.clock ?? systemClock;
  }

  /** This replica's name. */
  get name(): string {
    return this.#options.name;
  }

  /** Starts firing on the schedule. */
  start(): this {
    if (!this.#stopped && this.#cancelTimer === undefined) this.#armAfter(this.#clock.now());
    return this;
  }

  /** Stops firing and waits for runs under way to finish. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#cancelTimer?.();
    await this.idle();
  }

  /** Resolves when no run is under way (a test awaits this after moving the clock). */
  async idle(): Promise<void> {
    while (this.#inFlight.size > 0) await Promise.allSettled([...this.#inFlight]);
  }

  /** When the schedule fires next, or null once stopped or if it never fires again. */
  nextFire(): Date | null {
    if (this.#stopped) return null;
    return this.#schedule.nextFireAfter(this.#clock.now()) ?? null;
  }

  /** The schedule fire a tick that went off at `firedAt` belongs to (at or before it). */
  scheduledInstant(firedAt: Date): Date | undefined {
    return this.#schedule.lastFireAtOrBefore(firedAt);
  }

  /**
   * One fire of the schedule: claims the window it belongs to and runs the job if the claim is
   * won. Every replica calls this for every window; all but one stand down.
   */
  async tick(firedAt: Date): Promise<RunResult | undefined> {
    const { job, backend, log } = this.#options;
    const scheduled = this.scheduledInstant(firedAt);
    if (!scheduled) {
      log.warn('tick before the schedule has any fire: nothing to run', {
        replica: this.name,
        firedAt: windowOf(firedAt),
      });
      return undefined;
    }
    const window = windowOf(scheduled);
    const metrics = this.#options.metrics?.() ?? emfMetrics({ jobId: job.id });
    try {
      return await runSlot({
        job,
        backend,
        clock: this.#clock,
        metrics,
        log,
        slot: { jobId: job.id, window },
        delivery: { invocationId: this.name, executionId: `${this.name}/${window}` },
        ...(this.#options.run ? { options: this.#options.run } : {}),
      });
    } finally {
      await metrics.flush();
    }
  }

  /** Sets the timer for the first fire after `after`; each fire sets the next one. */
  #armAfter(after: number): void {
    const next = this.#schedule.nextFireAfter(after);
    if (next === undefined || this.#stopped) {
      this.#cancelTimer = undefined;
      return;
    }
    this.#cancelTimer = scheduleAt(this.#clock, next.getTime(), () => {
      // A timer that went off early by the clock (a wall-clock step) still belongs to `next`.
      const firedAt = Math.max(next.getTime(), this.#clock.now());
      const run = this.tick(new Date(firedAt)).catch((error: unknown) => {
        // A tick that throws (the store unreachable after its retries) must not end the service;
        // the slot is unchanged or ours, and the next fire of this window finds out which.
        this.#options.log.error('scheduled run failed', { replica: this.name, error: String(error) });
      });
      this.#inFlight.add(run);
      void run.finally(() => this.#inFlight.delete(run));
      this.#armAfter(firedAt);
    });
  }
}
