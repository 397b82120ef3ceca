import { Cron } from 'croner';
import {
  type Clock,
  emfMetrics,
  type JobDefinition,
  type JobMetrics,
  type Log,
  type RunOptions,
  type RunResult,
  runSlot,
  type SlotBackend,
  systemClock,
  windowOf,
} from 'slotguard';

/** A croner schedule: a 5- or 6-field cron pattern and its time zone. */
export interface ReplicaSchedule {
  /** `'0 9 * * MON'`: croner's syntax (not EventBridge's `cron(0 9 ? * MON *)`). */
  readonly pattern: string;
  /** @default 'UTC' */
  readonly timezone?: string;
}

/** Options of a ScheduledReplica. */
export interface ScheduledReplicaOptions {
  /**
   * This replica's name: recorded on every slot it claims (the delivery's invocationId), so an
   * operator can tell replicas apart. Name its pool's application_name after it too.
   */
  readonly name: string;
  readonly job: JobDefinition;
  readonly schedule: ReplicaSchedule;
  readonly backend: SlotBackend;
  readonly log: Log;
  /**
   * Metrics for one tick, flushed when it ends.
   * @default EMF lines on stdout for the job
   */
  readonly metrics?: () => JobMetrics;
  /**
   * The clock the run's lease keeper and retention checks read. The schedule itself is croner's.
   * @default the system clock
   */
  readonly clock?: Clock;
  /** @default the runtime's defaults */
  readonly run?: RunOptions;
}

/**
 * One replica of a long-running service that runs a job on an in-process croner schedule, the
 * incident's own set-up: every replica's timer fires for every window, and the (job, window) slot
 * claim lets exactly one of them run it.
 *
 * The window is the tick's scheduled instant, never the time the timer happened to fire: croner
 * reports when it actually ran the callback (late by a GC pause, a busy event loop, a suspended
 * container), so the window is the schedule's latest occurrence at or before that moment. Replicas
 * whose timers fire milliseconds or seconds apart land in the same slot; a replica that fires a
 * whole period late claims the window it is in, never one the schedule does not have.
 * @example
 * const replica = new ScheduledReplica({ name: 'api-7f9c', job, schedule: { pattern: '0 9 * * MON', timezone: 'Europe/Moscow' }, backend, log }).start();
 * process.on('SIGTERM', () => void replica.stop());
 */
export class ScheduledReplica {
  readonly #options: ScheduledReplicaOptions;
  readonly #cron: Cron;
  readonly #inFlight = new Set<Promise<unknown>>();

  constructor(options: ScheduledReplicaOptions) {
    this.#options = options;
    // Created without a function: nothing is scheduled until start(), so tests can drive tick().
    this.#cron = new Cron(options.schedule.pattern, { timezone: options.schedule.timezone ?? 'UTC' });
  }

  /** This replica's name. */
  get name(): string {
    return this.#options.name;
  }

  /** Starts firing on the schedule. */
  start(): this {
    this.#cron.schedule((self) => {
      const firedAt = self.currentRun() ?? new Date();
      const run = this.tick(firedAt).catch((error: unknown) => {
        // A tick that throws (the store unreachable after its retries) must not end the service;
        // the slot is unchanged or ours, and the next fire of this window finds out which.
        this.#options.log.error('scheduled run failed', { replica: this.name, error: String(error) });
      });
      this.#inFlight.add(run);
      void run.finally(() => this.#inFlight.delete(run));
    });
    return this;
  }

  /** Stops firing and waits for runs under way to finish. */
  async stop(): Promise<void> {
    this.#cron.stop();
    await Promise.allSettled([...this.#inFlight]);
  }

  /** When the schedule fires next, or null if it never will. */
  nextFire(): Date | null {
    return this.#cron.nextRun();
  }

  /** The schedule occurrence a tick that fired at `firedAt` belongs to (at or before it). */
  scheduledInstant(firedAt: Date): Date | undefined {
    // previousRuns counts an occurrence earlier in the same second as the reference; one
    // millisecond past `firedAt` makes an occurrence exactly at `firedAt` count too.
    return this.#cron.previousRuns(1, new Date(firedAt.getTime() + 1))[0];
  }

  /**
   * One fire of the schedule: claims the window it belongs to and runs the job if the claim is
   * won. Every replica calls this for every window; all but one stand down.
   */
  async tick(firedAt: Date): Promise<RunResult | undefined> {
    const { job, backend, log } = this.#options;
    const scheduled = this.scheduledInstant(firedAt);
    if (!scheduled) {
      log.warn('tick before the schedule has any occurrence: nothing to run', {
        replica: this.name,
        firedAt: firedAt.toISOString(),
      });
      return undefined;
    }
    const window = windowOf(scheduled);
    const metrics = this.#options.metrics?.() ?? emfMetrics({ jobId: job.id });
    try {
      return await runSlot({
        job,
        backend,
        clock: this.#options.clock ?? systemClock,
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
}
