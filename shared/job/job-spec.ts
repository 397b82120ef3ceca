/**
 * What a job is, as deployed: the one definition the CDK app synthesises and the local runner
 * fires, so what runs locally is what deploys. The code a job runs lives in its handler module
 * (`entry`); this is the schedule and the knobs around it.
 */
export interface JobSpec {
  /** The job id (see JOB_ID_PATTERN): part of every slot key, metric dimension and IAM condition. */
  readonly id: string;
  /** One line for dashboards and `--help`. */
  readonly description: string;
  readonly schedule: ScheduleSpec;
  /** The handler module, relative to the repository root (exports `handler`). */
  readonly entry: string;
  /**
   * The lease a run holds on its slot; renewed in the background while it runs.
   * @default 60
   */
  readonly leaseSeconds?: number;
  /**
   * Effects performed at once by one run.
   * @default 16
   */
  readonly effectConcurrency?: number;
  /**
   * The Lambda timeout.
   * @default 900
   */
  readonly timeoutSeconds?: number;
  /**
   * Failed runs of one window before its slot is marked FAILED and further fires stand down.
   * @default 3
   */
  readonly maxAttempts?: number;
}

/** An EventBridge Scheduler expression and its time zone. */
export interface ScheduleSpec {
  /** `cron(0 9 ? * MON *)`, `rate(15 minutes)` or `at(2026-12-01T09:00:00)`, as EventBridge Scheduler reads them. */
  readonly expression: string;
  /**
   * IANA time zone the expression is read in.
   * @default 'UTC'
   */
  readonly timeZone?: string;
}

/** Defaults applied wherever a JobSpec is read, by the runtime, the CDK constructs and the local runner. */
export const JOB_DEFAULTS = {
  leaseSeconds: 60,
  effectConcurrency: 16,
  timeoutSeconds: 900,
  maxAttempts: 3,
  retentionDays: 35,
} as const;
