import { Duration, Lazy, RemovalPolicy, Stack, Validations } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import * as scheduler from 'aws-cdk-lib/aws-scheduler';
import * as targets from 'aws-cdk-lib/aws-scheduler-targets';
import { Construct, type IConstruct } from 'constructs';
import type { ScheduleSpec } from '../shared/job/job-spec.js';
import { JOB_ID_DIMENSION, METRICS_NAMESPACE, MetricName } from '../shared/telemetry/metric-names.js';
import type { WatchdogEvent } from '../shared/watchdog/watchdog-event.js';
import type { ClaimsBackend } from './claims-backend.js';
import { runtimeModulePath } from './package-source.js';
import { ALARM_PAGING } from './paging.js';
import { onePerStackAndBackend, type PerBackendRegistry } from './per-backend.js';
import { type SlotguardServiceFunctionProps, serviceFunction } from './slotguard-function.js';

/**
 * The watchdog's Lambda handler module, bundled like the job functions: its source in slotguard's
 * repository, its compiled module in an installed package.
 */
export const WATCHDOG_HANDLER_MODULE = runtimeModulePath('shared/watchdog/watchdog-handler');

/** How often the watchdog looks at each job. */
export const WATCHDOG_RATE = Duration.minutes(15);

/** The watchdog looks back at least this far, so each window is watched for two days after it is due. */
export const WATCHDOG_MIN_LOOKBACK_HOURS = 48;

/**
 * CloudWatch alarms on a metric math expression read at most 10 metrics, so one WatchdogStopped
 * alarm watches at most this many jobs; a watchdog of more jobs gets one alarm per 10.
 */
export const JOBS_PER_STOPPED_ALARM = 10;

/** CloudWatch's limit on the actions of one alarm state. */
const MAX_ALARM_ACTIONS = 5;

/** A job the watchdog watches. */
export interface WatchedJob {
  readonly jobId: string;
  readonly schedule: Required<ScheduleSpec>;
  readonly deadline: Duration;
  readonly grace: Duration;
  /**
   * No window scheduled before this instant is judged (the job's first deployment).
   * @default every window of the look-back is judged
   */
  readonly watchedSince?: Date;
  /**
   * The job's alarm actions; the WatchdogStopped alarm covering it notifies the union of its jobs'.
   * @default none
   */
  readonly alarmActions?: readonly cloudwatch.IAlarmAction[];
}

/** Props of a `SlotguardWatchdog`. */
export interface SlotguardWatchdogProps extends SlotguardServiceFunctionProps {
  /** The claims backend whose slot records it reads. */
  readonly claims: ClaimsBackend;
}

/** The one watchdog per stack and claims backend, keyed by the backend. */
const watchdogsByStack: PerBackendRegistry<SlotguardWatchdog> = new WeakMap();

/**
 * The watchdog: one small Lambda per stack and claims backend, invoked every 15 minutes per job by
 * a Scheduler schedule whose input describes the job (WatchdogEvent, shared/watchdog/). Each run lists the windows
 * the job's schedule should have had over the look-back, reads their slot records (read-only:
 * `ClaimsBackend.bindReader`), and emits WindowMissing, WindowIncomplete and WatchdogRun for the job.
 * It watches every schedule, a weekly or monthly one as closely as a 15-minute one, which one
 * CloudWatch alarm on a missing metric cannot (it looks back 7 days at most).
 *
 * The watchdog's own alarm, WatchdogStopped, pages when any watched job's WatchdogRun stays missing
 * for two runs: then nothing would page for a missing or unfinished window.
 *
 * ScheduledJob creates it lazily (`SlotguardWatchdog.of`), as the effect-key secret is.
 */
export class SlotguardWatchdog extends Construct {
  /**
   * The watchdog of `claims` in `scope`'s stack, created on first use.
   * @example const watchdog = SlotguardWatchdog.of(job, claims, { projectRoot });
   */
  static of(
    scope: IConstruct,
    claims: ClaimsBackend,
    props: Omit<SlotguardWatchdogProps, 'claims'> = {},
  ): SlotguardWatchdog {
    return onePerStackAndBackend(
      watchdogsByStack,
      scope,
      claims,
      'Watchdog',
      (stack, id) => new SlotguardWatchdog(stack, id, { ...props, claims }),
    );
  }

  /** The watchdog's Lambda function. */
  readonly function: nodejs.NodejsFunction;
  /** The schedule group of every job's watchdog schedule, so their Scheduler metrics stay apart from the jobs'. */
  readonly scheduleGroup: scheduler.ScheduleGroup;
  private readonly claims: ClaimsBackend;
  private readonly schedulerRole: iam.Role;
  private readonly stoppedAlarms: StoppedAlarm[] = [];

  constructor(scope: Construct, id: string, props: SlotguardWatchdogProps) {
    super(scope, id);
    this.claims = props.claims;
    this.function = serviceFunction(this, props.claims, props, {
      role: 'slotguard watchdog',
      description: 'slotguard watchdog: windows that never ran or never finished',
      entry: WATCHDOG_HANDLER_MODULE,
      // Reads at most a few hundred slot records per job and run.
      timeout: Duration.minutes(2),
      // A failed run is replaced by the next one within 15 minutes; retries would only pile up.
      retryAttempts: 0,
    });

    this.scheduleGroup = new scheduler.ScheduleGroup(this, 'ScheduleGroup', {
      removalPolicy: RemovalPolicy.DESTROY,
    });
    this.schedulerRole = this.createSchedulerRole();
  }

  /**
   * Watches `job`: grants the function reads of its slot records, adds its watchdog schedule (in
   * `scope`, the job's construct, so the schedule goes when the job goes), and puts it under a
   * WatchdogStopped alarm that notifies its actions.
   */
  watch(scope: Construct, job: WatchedJob): scheduler.Schedule {
    this.claims.bindReader(this.function, job.jobId);
    const input: WatchdogEvent = {
      kind: 'watchdog',
      jobId: job.jobId,
      schedule: { expression: job.schedule.expression, timeZone: job.schedule.timeZone },
      deadlineSeconds: job.deadline.toSeconds(),
      graceSeconds: job.grace.toSeconds(),
      lookbackHours: lookbackHours(job),
      ...(job.watchedSince ? { notBefore: job.watchedSince.toISOString() } : {}),
    };
    const schedule = new scheduler.Schedule(scope, 'WatchdogSchedule', {
      description: `slotguard watchdog of job ${job.jobId}`,
      schedule: scheduler.ScheduleExpression.rate(WATCHDOG_RATE),
      scheduleGroup: this.scheduleGroup,
      target: new targets.LambdaInvoke(this.function, {
        role: this.schedulerRole,
        input: scheduler.ScheduleTargetInput.fromObject(input),
        // A run older than the next one is worth nothing.
        retryAttempts: 3,
        maxEventAge: WATCHDOG_RATE,
      }),
    });
    this.stoppedAlarmFor(job.jobId).add(job);
    return schedule;
  }

  /** The WatchdogStopped alarm that covers job `jobId`, if the watchdog watches it. */
  stoppedAlarmOf(jobId: string): cloudwatch.IAlarm | undefined {
    return this.stoppedAlarms.find((alarm) => alarm.covers(jobId))?.alarm;
  }

  /** Every WatchdogStopped alarm of this watchdog, one per 10 jobs. */
  get alarms(): readonly cloudwatch.IAlarm[] {
    return this.stoppedAlarms.map((alarm) => alarm.alarm);
  }

  private stoppedAlarmFor(jobId: string): StoppedAlarm {
    const last = this.stoppedAlarms.at(-1);
    if (last && !last.full) return last;
    const alarm = new StoppedAlarm(this, `StoppedAlarm${this.stoppedAlarms.length + 1}`, jobId);
    this.stoppedAlarms.push(alarm);
    return alarm;
  }

  /**
   * The role Scheduler assumes to invoke the watchdog: only Scheduler, only from this account and
   * only for the watchdog's schedule group.
   */
  private createSchedulerRole(): iam.Role {
    const stack = Stack.of(this);
    const role = new iam.Role(this, 'SchedulerRole', {
      description: 'slotguard: EventBridge Scheduler invoking the watchdog',
      assumedBy: new iam.ServicePrincipal('scheduler.amazonaws.com', {
        conditions: {
          StringEquals: { 'aws:SourceAccount': stack.account },
          ArnEquals: { 'aws:SourceArn': this.scheduleGroup.scheduleGroupArn },
        },
      }),
    });
    const functionLogicalId = stack.resolve(
      stack.getLogicalId(this.function.node.defaultChild as lambda.CfnFunction),
    );
    Validations.of(role).acknowledge({
      id: `AwsSolutions-IAM5[Resource::<${functionLogicalId}.Arn>:*]`,
      reason:
        "CDK's Lambda invoke grant adds the watchdog's versions and aliases (<function>:*); no other function.",
    });
    return role;
  }
}

/** The look-back: two days, or the deadline plus the grace and a day when that is longer. */
function lookbackHours(job: WatchedJob): number {
  const pastDeadlineHours = Math.ceil((job.deadline.toSeconds() + job.grace.toSeconds()) / 3600) + 24;
  return Math.max(WATCHDOG_MIN_LOOKBACK_HOURS, pastDeadlineHours);
}

/**
 * One WatchdogStopped alarm: the lowest WatchdogRun count among up to 10 jobs, each missing bucket
 * filled with 0, below 1 for two 15-minute buckets in a row. One bucket may be empty when a run's
 * metric lands just past a bucket boundary; two cannot, unless the watchdog skipped a run. Missing
 * data is breaching, for when every job's metric is gone. Its metrics and actions are lazy: jobs
 * join it after it is created.
 */
class StoppedAlarm {
  readonly alarm: cloudwatch.IAlarm;
  private readonly jobIds: string[] = [];
  private readonly actionArns = new Map<string, string>();
  private readonly cfn: cloudwatch.CfnAlarm;

  constructor(
    private readonly watchdog: SlotguardWatchdog,
    id: string,
    firstJobId: string,
  ) {
    this.cfn = new cloudwatch.CfnAlarm(watchdog, id, {
      alarmDescription: Lazy.string({
        produce: () =>
          `slotguard watchdog: no WatchdogRun for 30 minutes from at least one of jobs ${this.jobIds.join(', ')}; ` +
          `${ALARM_PAGING.watchdogStopped.why}. Check the watchdog function's errors and logs.`,
      }),
      comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
      threshold: 1,
      evaluationPeriods: 2,
      datapointsToAlarm: 2,
      treatMissingData: cloudwatch.TreatMissingData.BREACHING,
      metrics: Lazy.any({ produce: () => this.renderMetrics() }),
      alarmActions: Lazy.list({ produce: () => [...this.actionArns.values()] }, { omitEmpty: true }),
    });
    this.alarm = cloudwatch.Alarm.fromAlarmArn(watchdog, `${id}Ref`, this.cfn.attrArn);
    this.jobIds.push(firstJobId);
    watchdog.node.addValidation({ validate: () => this.validate() });
  }

  get full(): boolean {
    return this.jobIds.length >= JOBS_PER_STOPPED_ALARM;
  }

  covers(jobId: string): boolean {
    return this.jobIds.includes(jobId);
  }

  add(job: WatchedJob): void {
    if (!this.covers(job.jobId)) this.jobIds.push(job.jobId);
    if (!ALARM_PAGING.watchdogStopped.pages) return;
    const stack = Stack.of(this.watchdog);
    for (const action of job.alarmActions ?? []) {
      const arn = action.bind(this.watchdog, this.alarm).alarmActionArn;
      this.actionArns.set(JSON.stringify(stack.resolve(arn)), arn);
    }
  }

  private renderMetrics(): cloudwatch.CfnAlarm.MetricDataQueryProperty[] {
    const runs = this.jobIds.map((jobId, index) => ({
      id: `run${index}`,
      returnData: false,
      metricStat: {
        metric: {
          namespace: METRICS_NAMESPACE,
          metricName: MetricName.WatchdogRun,
          dimensions: [{ name: JOB_ID_DIMENSION, value: jobId }],
        },
        period: WATCHDOG_RATE.toSeconds(),
        stat: cloudwatch.Stats.SUM,
      },
    }));
    return [
      ...runs,
      {
        id: 'leastWatched',
        // FILL: a job whose WatchdogRun is missing counts 0, so MIN drops below 1 for it alone.
        expression: 'MIN(FILL(METRICS(), 0))',
        label: 'WatchdogRun of the least-watched job',
        returnData: true,
      },
    ];
  }

  private validate(): string[] {
    if (this.actionArns.size <= MAX_ALARM_ACTIONS) return [];
    return [
      `the WatchdogStopped alarm of jobs ${this.jobIds.join(', ')} would notify ${this.actionArns.size} alarm ` +
        `actions (the union of their alarmActions), over CloudWatch's ${MAX_ALARM_ACTIONS}; give these jobs one ` +
        'SNS topic that fans out to your pagers',
    ];
  }
}
