import { Annotations, Arn, Duration, RemovalPolicy, Stack, TimeZone, Validations } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as events from 'aws-cdk-lib/aws-events';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { SqsEventSource } from 'aws-cdk-lib/aws-lambda-event-sources';
import * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as scheduler from 'aws-cdk-lib/aws-scheduler';
import * as targets from 'aws-cdk-lib/aws-scheduler-targets';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import * as ses from 'aws-cdk-lib/aws-ses';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct, type IConstruct } from 'constructs';
import { AfterGrace } from '../shared/job/in-doubt-resolution.js';
import {
  defaultDeadlineSeconds,
  defaultTakeoverSkewMs,
  JOB_DEFAULTS,
  type JobSpec,
  type ScheduleSpec,
} from '../shared/job/job-spec.js';
import { RuntimeEnv, SendRateScope } from '../shared/job/runtime-env.js';
import { SETTLING_SES_EVENTS, type SesEventType } from '../shared/provider-events/ses-events.js';
import { type AnalysedSchedule, analyseSchedule } from '../shared/schedule/schedule-analysis.js';
import { describe, JOB_ID_PATTERN, MAX_SHARDS, windowOf } from '../shared/slot/slot.js';
import { JOB_ID_DIMENSION, METRICS_NAMESPACE, MetricName } from '../shared/telemetry/metric-names.js';
import type { ClaimsBackend } from './claims-backend.js';
import { CLOUDWATCH_ALARM_LIMITS } from './cloudwatch-limits.js';
import { deadLetterArrivals } from './dead-letter-arrivals.js';
import { sharedEffectKeySecret } from './effect-key-secret.js';
import { locateHandlerEntry } from './handler-entry.js';
import { InfraValidationError } from './infra-validation-error.js';
import { ALARM_PAGING, type AlarmKey } from './paging.js';
import { rateAsUtcCron } from './rate-as-cron.js';
import { SesEventRecorder } from './ses-event-recorder.js';
import { grantNetworkInterfaces, slotguardBundling, slotguardVpcPlacement } from './slotguard-function.js';
import { SlotguardWatchdog } from './slotguard-watchdog.js';

/** How EventBridge Scheduler and Lambda retry a fire that did not get through. */
export interface ScheduleRetryPolicy {
  /**
   * Scheduler's retries when sending a fire to the job's work queue fails (throttling, service
   * errors). A run's own failures are retried by the work queue, against the same slot.
   * @default 20
   */
  readonly attempts?: number;
  /**
   * How old a fire may get and still be delivered: by Scheduler to the work queue, and by Lambda's
   * async queue for direct asynchronous invokes (`slotguard backfill`). A late fire still lands in
   * its own window's slot. Between 1 minute and 6 hours (Lambda's limit).
   * @default Duration.hours(1)
   */
  readonly maxEventAge?: Duration;
}

/** Email through SES v2: the identity the function may send as. */
export interface SesSendingProps {
  /** The verified SES identity: a domain (`example.com`) or an email address. */
  readonly identity: string;
  /** The From address; at `identity` (or equal to it when the identity is an address). */
  readonly fromAddress: string;
  /**
   * Emails per second this job may send, all of its runs together (shards, continuations, a
   * backfill next to a scheduled run): at most the account's SES maximum send rate, less what other
   * jobs of the account send at the same time. With `sendRateScope: 'process'`, each run's own rate.
   * @default 1
   */
  readonly maxSendRatePerSecond?: number;
  /**
   * Who shares `maxSendRatePerSecond` (SLOTGUARD_SEND_RATE_SCOPE). `'job'`: every run of the job
   * at once, through a timeline in the claims backend (a DynamoDB item under the job's own key, or
   * a row of the Postgres schema), at about one write per batch of sends. `'process'`: each run
   * alone, so N runs at once may send N times the rate.
   * @default 'job'
   */
  readonly sendRateScope?: 'job' | 'process';
  /**
   * Records SES's word on every email of the job, so that a window settles the ones a dead run left
   * in doubt by itself: the job sends through a configuration set of its own that publishes its Send,
   * Reject and Rendering Failure events to the default EventBridge bus, and a rule hands the job's
   * events to the stack's SesEventRecorder, which writes them onto the effect records. A confirmed
   * email is recorded done, a rejected one sent again; one SES said nothing of waits for the job's
   * `inDoubtGraceMinutes`, then follows its `inDoubtAfterGrace`. Off: no configuration set, and
   * an email in doubt pages at once (EffectInDoubt) for a person to check.
   * @default true
   */
  readonly recordEvents?: boolean;
}

/** Props of a `ScheduledJob`. */
export interface ScheduledJobProps {
  /** The job: id, schedule, handler entry and the knobs around it (see functions/catalog.ts). */
  readonly job: JobSpec;
  /** Where claims and the effect ledger live, e.g. a `ClaimsTable` shared by the app's jobs. */
  readonly claims: ClaimsBackend;
  /**
   * The HMAC secret for effect keys. A job hashes its effect keys with it, so a job that moves to a
   * stack with another secret sees its stored hashes change: `SlotguardStacks` gives every job of
   * an app one secret, found by name.
   * @default one generated secret per stack, shared by its jobs
   */
  readonly effectKeySecret?: secretsmanager.ISecret;
  /**
   * SES sending: grants `ses:SendEmail` on this identity only, from this address only (and on the
   * job's configuration set, with `recordEvents`, the default, which also records SES's events).
   * @default no SES permission, no configuration set, and no SLOTGUARD_SES_* variables
   */
  readonly ses?: SesSendingProps;
  /**
   * Retries of a fire that did not get through.
   * @default 20 Scheduler attempts, events up to 1 hour old
   */
  readonly retry?: ScheduleRetryPolicy;
  /**
   * Where the job's dead letters go: fires Scheduler could not send to the work queue, window
   * messages the work queue received `maxReceiveCount` times, and direct asynchronous invokes that
   * exhausted Lambda's retries. Every one is a window event, so redriving the queue into the work
   * queue runs them again. Must be a standard queue in the job's account and region.
   * @default a new SQS queue for this job, SQS-managed encryption, TLS only, 14 days' retention
   */
  readonly deadLetterQueue?: sqs.IQueue;
  /**
   * Lets Scheduler fire up to this long after the scheduled time. The window's slot key is the
   * scheduled time either way.
   * @default no flexible time window: Scheduler fires at the scheduled minute
   */
  readonly flexibleTimeWindow?: Duration;
  /**
   * Actions for the alarms that page (`ALARM_PAGING` in infra/paging.ts), e.g. `new SnsAction(topic)`;
   * the watchdog's WatchdogStopped alarm notifies the union of its jobs' actions.
   * @default no actions (alarms change state and show on the dashboard only)
   */
  readonly alarmActions?: readonly cloudwatch.IAlarmAction[];
  /**
   * How long after its scheduled time a window may have no slot record before the watchdog reports
   * it missing: delivery, the work queue and the first claim, not the run's length. From 1 minute
   * to 24 hours.
   * @default 15 minutes
   */
  readonly missedRunGrace?: Duration;
  /**
   * When the watchdog starts judging this job's windows: none scheduled before it is reported
   * missing or incomplete. Set it when you add a job (its first deployment), or the watchdog reports
   * the windows of its look-back that came before the job existed. A fixed instant, not the time of
   * synthesis, so that the template stays the same from one synth to the next.
   * @default none: every window of the look-back (48 hours or more) is judged
   */
  readonly watchedSince?: Date;
  /**
   * Runs of this job at once: the work queue's event source invokes at most this many functions,
   * so at most this many windows, shards of a window (`job.shards`), or deliveries of one of them (of
   * which all but one stand down) run together. Together they send at `ses.maxSendRatePerSecond`
   * (each on its own with `ses.sendRateScope: 'process'`). From 2 (AWS's minimum) to 1000, and at
   * least `job.shards`, so that a window's shards run side by side.
   * @default the larger of 2 and `job.shards`
   */
  readonly maxConcurrency?: number;
  /**
   * How long slot and effect records are kept (DynamoDB TTL), in days.
   * @default 35
   */
  readonly retentionDays?: number;
  /**
   * Extra input passed to the job as `payload` in every fire's event.
   * @default no payload
   */
  readonly payload?: Readonly<Record<string, unknown>>;
  /**
   * Lambda memory in MB.
   * @default 512
   */
  readonly memorySize?: number;
  /**
   * How long the function's logs are kept.
   * @default logs.RetentionDays.THREE_MONTHS
   */
  readonly logRetention?: logs.RetentionDays;
  /**
   * The directory `job.entry` is relative to, holding the lock file and node_modules; esbuild runs
   * there. As NodejsFunction's `projectRoot`.
   * @default the directory of the lock file (`depsLockFilePath`, or the nearest lock file from the
   * directory the CDK app runs in upwards)
   */
  readonly projectRoot?: string;
  /**
   * The project's lock file (package-lock.json, yarn.lock, pnpm-lock.yaml or bun.lock). As
   * NodejsFunction's `depsLockFilePath`.
   * @default the nearest lock file from `projectRoot` (else the directory the CDK app runs in) upwards
   */
  readonly depsLockFilePath?: string;
  /**
   * Whether the schedule fires.
   * @default true
   */
  readonly enabled?: boolean;
}

/**
 * The alarms a ScheduledJob creates. Which of them page (get `alarmActions`) is decided in one
 * place, `ALARM_PAGING` (infra/paging.ts); each entry here says what went wrong.
 */
export interface ScheduledJobAlarms {
  /** Continuation gave up on a window (`WindowStuck`): no progress in 3 runs, or past its deadline. */
  readonly windowStuck: cloudwatch.Alarm;
  /** The watchdog found a window with no slot record past its grace (`WindowMissing`). */
  readonly windowMissing: cloudwatch.Alarm;
  /** The watchdog found a window unfinished past its deadline, STUCK or FAILED (`WindowIncomplete`). */
  readonly windowIncomplete: cloudwatch.Alarm;
  /** A recipient failed for good (`EffectFailed`): its window ends PARTIAL. */
  readonly effectsFailed: cloudwatch.Alarm;
  /**
   * Effects still in doubt when their window finished (`EffectInDoubt`, counted once then): reserved
   * by a run that died, never marked done, and not settled by the provider's word within the grace
   * period. They may or may not have happened.
   */
  readonly effectsInDoubt: cloudwatch.Alarm;
  /** A run stopped because the provider refused or failed every send (`ProviderFailing`). */
  readonly providerFailing: cloudwatch.Alarm;
  /** A message arrived in the dead-letter queue: each new one, not the queue's depth. */
  readonly deadLetters: cloudwatch.Alarm;
  /** The function threw or timed out. */
  readonly functionErrors: cloudwatch.Alarm;
  /** Scheduler's call to send a fire to the work queue failed. */
  readonly targetErrors: cloudwatch.Alarm;
  /** Scheduler gave up on a fire after its retry policy. */
  readonly droppedInvocations: cloudwatch.Alarm;
  /** A window message has waited in the work queue longer than its deadline allows (dashboard only). */
  readonly workQueueAge: cloudwatch.Alarm;
}

/** One job per app, per id: slot keys, metrics and IAM conditions all use the id. */
const jobPathsByRoot = new WeakMap<IConstruct, Map<string, string>>();

const DEFAULT_RETRY_ATTEMPTS = 20;
const DEFAULT_MAX_EVENT_AGE = Duration.hours(1);
const DEFAULT_MEMORY_MB = 512;
const DEFAULT_MAX_CONCURRENCY = 2;
const DEFAULT_MISSED_RUN_GRACE = Duration.minutes(15);
/** How long an in-doubt email waits for SES's word by default, in minutes (at most half the deadline). */
const DEFAULT_IN_DOUBT_GRACE_MINUTES = 60;

/** The configuration set's event type for each SES event type the recorder reads. */
const SENDING_EVENT_OF: Readonly<Record<SesEventType, ses.EmailSendingEvent>> = {
  Send: ses.EmailSendingEvent.SEND,
  Delivery: ses.EmailSendingEvent.DELIVERY,
  Bounce: ses.EmailSendingEvent.BOUNCE,
  Complaint: ses.EmailSendingEvent.COMPLAINT,
  DeliveryDelay: ses.EmailSendingEvent.DELIVERY_DELAY,
  Open: ses.EmailSendingEvent.OPEN,
  Click: ses.EmailSendingEvent.CLICK,
  Reject: ses.EmailSendingEvent.REJECT,
  'Rendering Failure': ses.EmailSendingEvent.RENDERING_FAILURE,
  Subscription: ses.EmailSendingEvent.SUBSCRIPTION,
};
const ALARM_PERIOD = Duration.minutes(5);

/** SQS keeps a message at most this long from when it was first sent, in a dead-letter queue too. */
const MESSAGE_RETENTION = Duration.days(14);
/**
 * The longest deadline: a window's message must outlive its deadline in the work queue and still
 * leave the on-call a week in the dead-letter queue, within the 14 days SQS keeps it.
 */
const MAX_DEADLINE = Duration.days(7);

/**
 * The work queue's visibility timeout, in function timeouts: a run that dies before its first
 * heartbeat (it claims, then sets its message's visibility to two leases at a time) has its window
 * back after this, and no live run is ever overtaken by its own message.
 */
const WORK_QUEUE_VISIBILITY_TIMEOUTS = 6;

/**
 * How many times the work queue may deliver a window before dead-lettering it: twice the runs the
 * deadline holds, plus 50 for deliveries that stand down at once (duplicates, waits, heartbeats).
 * Bounded by SQS's maximum of 1000. The same count bounds each shard's message of a sharded window:
 * a shard is held to its window's deadline, so its message lives no longer than the window's would.
 */
export function workQueueMaxReceiveCount(deadlineSeconds: number, timeoutSeconds: number): number {
  return Math.min(1000, 2 * Math.ceil(deadlineSeconds / timeoutSeconds) + 50);
}

/**
 * One scheduled job: an EventBridge Scheduler schedule (in its own schedule group, so Scheduler's
 * metrics are per job) sending each window to the job's SQS work queue, and a Lambda function
 * bundled from `job.entry` by the local esbuild consuming it, with the claims backend, the
 * effect-key secret, a dead-letter queue, the watchdog's schedule for the job, and alarms.
 *
 * Every window's message carries the job id and Scheduler's context attributes; the scheduled time
 * is the window's slot key, so every delivery of one window, however late, lands in the same slot.
 * A window's message is deleted only when the window is finished or can never run: a run that
 * stops with work left asks for its message back later (the continuation), and the queue
 * dead-letters it after `maxReceiveCount` deliveries. A job with `shards` > 1 splits each window:
 * its first run sends one message per shard to the same queue, and the shards run side by side
 * (`maxConcurrency` is at least `shards`).
 *
 * @example
 * const claims = new ClaimsTable(stack, 'ClaimsTable');
 * const job = new ScheduledJob(stack, 'weekly-report', {
 *   job: {
 *     id: 'weekly-report',
 *     description: 'The weekly report email',
 *     schedule: { expression: 'cron(0 9 ? * MON *)', timeZone: 'Europe/Moscow' },
 *     entry: 'functions/weekly-report/handler.ts',
 *   },
 *   claims,
 *   ses: { identity: 'example.com', fromAddress: 'reports@example.com', maxSendRatePerSecond: 10 },
 *   alarmActions: [new SnsAction(pagerTopic)],
 * });
 */
export class ScheduledJob extends Construct {
  /** The job id. */
  readonly jobId: string;
  /** The job as deployed, with defaults applied (`deadlineMinutes` and the in-doubt grace period included). */
  readonly job: Required<JobSpec>;
  /** The schedule as analysed at synth time (the job's own expression). */
  readonly analysedSchedule: AnalysedSchedule;
  /**
   * The expression and zone Scheduler is given, which the watchdog is told too: the job's own, but
   * a `rate()` as the UTC cron on the same grid (see rateAsUtcCron for why).
   */
  readonly deployedSchedule: Required<ScheduleSpec>;
  /** How long after its scheduled time a window must be finished (`job.deadlineMinutes`). */
  readonly deadline: Duration;
  /** The job's Lambda function. */
  readonly function: nodejs.NodejsFunction;
  /**
   * The EventBridge Scheduler schedule that sends each window to the work queue; undefined for a
   * one-time (`at()`) job whose time had passed at synth (it has fired), which synthesises with a
   * warning instead.
   */
  readonly schedule: scheduler.Schedule | undefined;
  /** This job's schedule group (one per job, so AWS/Scheduler metrics are per job). */
  readonly scheduleGroup: scheduler.ScheduleGroup;
  /**
   * The job's work queue: one message per window, redelivered until the window is finished, and for a
   * sharded window one more per shard, each redelivered until its shard is.
   */
  readonly workQueue: sqs.Queue;
  /** Where the job's dead letters land: from Scheduler, from the work queue and from Lambda. */
  readonly deadLetterQueue: sqs.IQueue;
  /** The HMAC secret the function hashes effect keys with. */
  readonly effectKeySecret: secretsmanager.ISecret;
  /** The watchdog of the job's claims backend in this stack, which watches this job too. */
  readonly watchdog: SlotguardWatchdog;
  /** The schedule that runs the watchdog for this job every 15 minutes. */
  readonly watchdogSchedule: scheduler.Schedule;
  /** The job's alarms; the ones `ALARM_PAGING` says page send to `alarmActions`. */
  readonly alarms: ScheduledJobAlarms;
  /**
   * The job's SES configuration set, which publishes its Send, Reject and Rendering Failure events to
   * the default EventBridge bus; undefined unless the job records SES events (`ses.recordEvents`).
   */
  readonly sesConfigurationSet: ses.ConfigurationSet | undefined;
  /** The rule that hands the job's SES events to the recorder; undefined as `sesConfigurationSet`. */
  readonly sesEventsRule: events.Rule | undefined;
  /** The stack's SES event recorder, which records this job's events; undefined as `sesConfigurationSet`. */
  readonly sesEventRecorder: SesEventRecorder | undefined;

  constructor(scope: Construct, id: string, props: ScheduledJobProps) {
    super(scope, id);
    const job = withDefaults(props.job);
    this.jobId = job.id;
    this.validateJob(job);
    this.analysedSchedule = this.validateSchedule(job);
    this.deployedSchedule = this.deploySchedule(this.analysedSchedule);
    const retry = this.validateRetry(props.retry, job);
    const flexibleTimeWindow = this.validateFlexibleWindow(props.flexibleTimeWindow);
    const retentionDays = this.validatePositiveInteger(
      'retentionDays',
      props.retentionDays ?? JOB_DEFAULTS.retentionDays,
    );
    this.deadline = this.resolveDeadline(job, retentionDays);
    const inDoubt = this.validateInDoubt(job, props.ses !== undefined && props.ses.recordEvents !== false);
    this.job = {
      ...job,
      deadlineMinutes: this.deadline.toMinutes(),
      inDoubtGraceMinutes: inDoubt?.graceMinutes ?? 0,
      inDoubtAfterGrace: inDoubt?.afterGrace ?? AfterGrace.Report,
    };
    const grace = this.validateGrace(props.missedRunGrace ?? DEFAULT_MISSED_RUN_GRACE);
    const maxConcurrency = this.validateMaxConcurrency(
      props.maxConcurrency ?? Math.max(DEFAULT_MAX_CONCURRENCY, job.shards),
      job.shards,
    );
    const memorySize = this.validateMemory(props.memorySize ?? DEFAULT_MEMORY_MB);
    const ses = props.ses && this.validateSes(props.ses);
    const entry = locateHandlerEntry(this, {
      entry: job.entry,
      projectRoot: props.projectRoot,
      depsLockFilePath: props.depsLockFilePath,
      cwd: process.cwd(),
    });
    this.registerJobId(job.id);

    this.deadLetterQueue =
      props.deadLetterQueue ??
      new sqs.Queue(this, 'DeadLetterQueue', {
        encryption: sqs.QueueEncryption.SQS_MANAGED,
        enforceSSL: true,
        retentionPeriod: MESSAGE_RETENTION,
      });
    if (!props.deadLetterQueue) {
      Validations.of(this.deadLetterQueue).acknowledge({
        id: 'AwsSolutions-SQS3',
        reason:
          'This queue is itself the dead-letter queue of the schedule, the work queue and the function.',
      });
    }
    this.workQueue = new sqs.Queue(this, 'WorkQueue', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      visibilityTimeout: Duration.seconds(WORK_QUEUE_VISIBILITY_TIMEOUTS * job.timeoutSeconds),
      retentionPeriod: MESSAGE_RETENTION,
      deadLetterQueue: {
        queue: this.deadLetterQueue,
        maxReceiveCount: workQueueMaxReceiveCount(this.deadline.toSeconds(), job.timeoutSeconds),
      },
    });
    this.effectKeySecret = props.effectKeySecret ?? sharedEffectKeySecret(this);

    const logGroup = new logs.LogGroup(this, 'Logs', {
      retention: props.logRetention ?? logs.RetentionDays.THREE_MONTHS,
    });
    // An own role instead of AWSLambdaBasicExecutionRole, whose log permissions span every log group.
    const role = new iam.Role(this, 'FunctionRole', {
      assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      description: `slotguard job ${job.id}`,
    });
    logGroup.grantWrite(role);
    // Before the function exists: its VPC and bundle are fixed at creation.
    const backendOptions = props.claims.functionOptions?.(this, this.job) ?? {};
    this.sesConfigurationSet = inDoubt ? this.configurationSetPublishingEvents() : undefined;

    this.function = new nodejs.NodejsFunction(this, 'Function', {
      description: `slotguard: ${job.description}`.slice(0, 256),
      entry: entry.path,
      projectRoot: entry.projectRoot,
      depsLockFilePath: entry.lockFile,
      handler: 'handler',
      runtime: lambda.Runtime.NODEJS_24_X,
      architecture: lambda.Architecture.ARM_64,
      memorySize,
      timeout: Duration.seconds(job.timeoutSeconds),
      role,
      logGroup,
      // Scheduled windows arrive through the work queue, which invokes synchronously: none of the
      // three settings below applies to them. They remain for direct asynchronous invokes
      // (`slotguard backfill`, a manual invoke): Lambda's retries deliver the same event (the same
      // slot), and one that exhausts them lands in the dead-letter queue, which pages.
      retryAttempts: Math.min(2, job.maxAttempts - 1),
      maxEventAge: retry.maxEventAge,
      deadLetterQueue: this.deadLetterQueue,
      // Lambda counts a hop when the function sends to its own queue, never when SQS redelivers a
      // message. The continuation is a redelivery (ChangeMessageVisibility); the sends are one hop
      // each and never chained: a sharded window's coordinator sends its shards' messages once, and
      // a shard never sends; a direct invoke sends one continuation, whose run may split the window
      // (a second hop). Terminate is then free, and stops a runaway loop should a change ever make
      // a run re-send its own window.
      recursiveLoop: lambda.RecursiveLoop.TERMINATE,
      ...slotguardVpcPlacement(backendOptions),
      environment: {
        NODE_OPTIONS: '--enable-source-maps',
        [RuntimeEnv.jobId]: job.id,
        [RuntimeEnv.effectKeySecretArn]: this.effectKeySecret.secretArn,
        [RuntimeEnv.leaseSeconds]: String(job.leaseSeconds),
        [RuntimeEnv.effectConcurrency]: String(job.effectConcurrency),
        [RuntimeEnv.maxAttempts]: String(job.maxAttempts),
        [RuntimeEnv.retentionDays]: String(retentionDays),
        [RuntimeEnv.workQueueUrl]: this.workQueue.queueUrl,
        [RuntimeEnv.deadlineSeconds]: String(this.deadline.toSeconds()),
        [RuntimeEnv.shards]: String(job.shards),
        [RuntimeEnv.reserveAhead]: String(job.reserveAhead),
        [RuntimeEnv.takeoverSkewSeconds]: String(job.takeoverSkewSeconds),
        ...(ses
          ? {
              [RuntimeEnv.sesFromAddress]: ses.fromAddress,
              [RuntimeEnv.sendRatePerSecond]: String(ses.rate),
              [RuntimeEnv.sendRateScope]: ses.scope,
            }
          : {}),
        ...(this.sesConfigurationSet && inDoubt
          ? {
              [RuntimeEnv.sesConfigurationSet]: this.sesConfigurationSet.configurationSetName,
              [RuntimeEnv.inDoubtGraceSeconds]: String(inDoubt.graceMinutes * 60),
              [RuntimeEnv.inDoubtAfterGrace]: inDoubt.afterGrace,
            }
          : {}),
      },
      bundling: slotguardBundling(backendOptions),
    });
    if (backendOptions.vpc) grantNetworkInterfaces(this, role, this.function);
    props.claims.bind(this.function, job.id);
    this.effectKeySecret.grantRead(this.function);
    if (ses) this.grantSendEmail(ses.identity, ses.fromAddress);
    // One window (or shard) per invocation, and each record's outcome reported on its own: a window
    // that asks for its message back must not send a finished one round again. The event source
    // grants the consume actions; the handler's own calls are granted below, on this queue only.
    this.function.addEventSource(
      new SqsEventSource(this.workQueue, { batchSize: 1, reportBatchItemFailures: true, maxConcurrency }),
    );
    // ChangeMessageVisibility: the heartbeat and the retry delays. SendMessage: a sharded window's
    // fan-out (one message per shard, in SendMessageBatch requests, which IAM authorises as
    // sqs:SendMessage: there is no SendMessageBatch action) and a direct invoke's continuation,
    // both to this queue only. (The consume grant includes the first; the handler's needs should
    // not rest on it.)
    this.workQueue.grant(this.function, 'sqs:ChangeMessageVisibility', 'sqs:SendMessage');

    // The group holds this job's schedule only; it goes when the job goes, so re-adding the job can
    // create it again under the same generated name.
    this.scheduleGroup = new scheduler.ScheduleGroup(this, 'ScheduleGroup', {
      removalPolicy: RemovalPolicy.DESTROY,
    });
    // A one-time job that has fired keeps its function, queue and alarms, so the stack still deploys.
    if (!(this.analysedSchedule.kind === 'at' && this.analysedSchedule.passed)) {
      this.schedule = new scheduler.Schedule(this, 'Schedule', {
        description: `slotguard job ${job.id}`,
        schedule: scheduler.ScheduleExpression.expression(
          this.deployedSchedule.expression,
          TimeZone.of(this.deployedSchedule.timeZone),
        ),
        scheduleGroup: this.scheduleGroup,
        timeWindow: flexibleTimeWindow
          ? scheduler.TimeWindow.flexible(flexibleTimeWindow)
          : scheduler.TimeWindow.off(),
        enabled: props.enabled ?? true,
        target: new targets.SqsSendMessage(this.workQueue, {
          role: this.schedulerRole(),
          input: scheduler.ScheduleTargetInput.fromObject({
            jobId: job.id,
            scheduledTime: scheduler.ContextAttribute.scheduledTime,
            executionId: scheduler.ContextAttribute.executionId,
            attemptNumber: scheduler.ContextAttribute.attemptNumber,
            ...(props.payload ? { payload: props.payload } : {}),
          }),
          retryAttempts: retry.attempts,
          maxEventAge: retry.maxEventAge,
          deadLetterQueue: this.deadLetterQueue,
        }),
      });
    }

    this.watchdog = SlotguardWatchdog.of(this, props.claims, {
      projectRoot: entry.projectRoot,
      ...(entry.lockFile ? { depsLockFilePath: entry.lockFile } : {}),
    });
    this.watchdogSchedule = this.watchdog.watch(this, {
      jobId: job.id,
      schedule: this.deployedSchedule,
      deadline: this.deadline,
      grace,
      ...(props.watchedSince ? { watchedSince: this.validateWatchedSince(props.watchedSince) } : {}),
      ...(props.alarmActions ? { alarmActions: props.alarmActions } : {}),
      confirmInDoubt: this.sesConfigurationSet !== undefined,
    });

    if (this.sesConfigurationSet) {
      this.sesEventRecorder = SesEventRecorder.of(this, props.claims, {
        projectRoot: entry.projectRoot,
        ...(entry.lockFile ? { depsLockFilePath: entry.lockFile } : {}),
      });
      this.sesEventsRule = this.sesEventRecorder.record(this, {
        jobId: job.id,
        ...(props.alarmActions ? { alarmActions: props.alarmActions } : {}),
      });
    }

    this.alarms = this.createAlarms(props);
  }

  /**
   * A slotguard metric of this job: namespace, name and the one `JobId` dimension the runtime's
   * EMF records carry.
   * @default statistic Sum over 5 minutes
   */
  metric(metricName: MetricName, props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return new cloudwatch.Metric({
      namespace: METRICS_NAMESPACE,
      metricName,
      dimensionsMap: { [JOB_ID_DIMENSION]: this.jobId },
      statistic: cloudwatch.Stats.SUM,
      period: ALARM_PERIOD,
      ...props,
    });
  }

  /** Fires that found their slot already held or done. @default Sum over 5 minutes */
  metricDuplicateClaims(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.metric(MetricName.DuplicateClaim, props);
  }

  /** Claims that took over a slot whose holder's lease had expired. @default Sum over 5 minutes */
  metricLeaseTakeovers(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.metric(MetricName.LeaseTakeover, props);
  }

  /**
   * Effects still in doubt when their window finished, after the provider's word and the grace
   * period (counted once per window, at its finish). @default Sum over 5 minutes
   */
  metricEffectsInDoubt(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.metric(MetricName.EffectInDoubt, props);
  }

  /** Events rejected without a claim (malformed, or for another job). @default Sum over 5 minutes */
  metricInvalidEvents(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.metric(MetricName.InvalidEvent, props);
  }

  /** Runs that won their slot: a window's first run and each of its continuations. @default Sum over 5 minutes */
  metricClaimsAcquired(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.metric(MetricName.ClaimAcquired, props);
  }

  /**
   * Runs per finished window, hourly: runs (ClaimAcquired) over runs that did not yield. Every run
   * of a window but its last yields, so this is about the number of runs a window took; 1 when
   * windows finish in one run. A sharded job's claims are its windows' coordinators and its shards,
   * so there it reads as runs per shard (labelled so).
   */
  metricRunsPerWindow(): cloudwatch.MathExpression {
    const hour = Duration.hours(1);
    return new cloudwatch.MathExpression({
      expression: 'IF(runs > FILL(yields, 0), runs / (runs - FILL(yields, 0)), runs)',
      usingMetrics: {
        runs: this.metricClaimsAcquired({ period: hour }),
        yields: this.metric(MetricName.RunYielded, { period: hour }),
      },
      period: hour,
      label: this.job.shards > 1 ? 'runs per shard' : 'runs per window',
    });
  }

  /**
   * New arrivals in the dead-letter queue, per 5 minutes: how much the queue's depth rose (see
   * deadLetterArrivals for why the rise of the depth, and not the depth or the messages sent).
   */
  metricDeadLetterArrivals(): cloudwatch.MathExpression {
    return deadLetterArrivals(this.deadLetterQueue, ALARM_PERIOD);
  }

  private createAlarms(props: ScheduledJobProps): ScheduledJobAlarms {
    const atLeastOnce = (
      key: AlarmKey,
      id: string,
      metric: cloudwatch.IMetric,
      description: string,
    ): cloudwatch.Alarm =>
      this.alarm(
        key,
        id,
        {
          metric,
          threshold: 1,
          comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
          evaluationPeriods: 1,
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
          alarmDescription: `slotguard job ${this.jobId}: ${description}`,
        },
        props.alarmActions,
      );
    // The watchdog runs every 15 minutes; Maximum is the most windows one of its runs found.
    const watchdogFound = (metricName: MetricName) =>
      this.metric(metricName, { period: Duration.minutes(15), statistic: cloudwatch.Stats.MAXIMUM });
    return {
      windowStuck: atLeastOnce(
        'windowStuck',
        'WindowStuckAlarm',
        this.metric(MetricName.WindowStuck),
        'continuation gave up on a window (STUCK: no progress in 3 runs, or past its deadline); no run will finish it.',
      ),
      windowMissing: atLeastOnce(
        'windowMissing',
        'WindowMissingAlarm',
        watchdogFound(MetricName.WindowMissing),
        `the watchdog found a window of ${this.analysedSchedule.expression} (${this.analysedSchedule.timeZone}) ` +
          'with no record past its grace; nothing ran it.',
      ),
      windowIncomplete: atLeastOnce(
        'windowIncomplete',
        'WindowIncompleteAlarm',
        watchdogFound(MetricName.WindowIncomplete),
        `the watchdog found a window unfinished ${this.deadline.toMinutes()} minutes after it was due, or STUCK or FAILED.`,
      ),
      effectsFailed: atLeastOnce(
        'effectsFailed',
        'EffectsFailedAlarm',
        this.metric(MetricName.EffectFailed),
        'a recipient failed for good (its window ends PARTIAL); they did not get their email.',
      ),
      effectsInDoubt: atLeastOnce(
        'effectsInDoubt',
        'EffectsInDoubtAlarm',
        this.metricEffectsInDoubt(),
        'emails still in doubt when their window finished: reserved by a run that died, never marked done, and not ' +
          "settled by SES's word within the grace period; check whether they went out before anyone re-sends.",
      ),
      providerFailing: atLeastOnce(
        'providerFailing',
        'ProviderFailingAlarm',
        this.metric(MetricName.ProviderFailing),
        'a run stopped because the provider refused or failed every send; the job is not sending.',
      ),
      deadLetters: atLeastOnce(
        'deadLetters',
        'DeadLettersAlarm',
        this.metricDeadLetterArrivals(),
        'a new message arrived in the dead-letter queue (a window the work queue gave up on, or a fire ' +
          'Scheduler or Lambda could not deliver); nothing retries it.',
      ),
      functionErrors: atLeastOnce(
        'functionErrors',
        'FunctionErrorsAlarm',
        this.function.metricErrors({ period: ALARM_PERIOD, statistic: cloudwatch.Stats.SUM }),
        'the function threw or timed out; the work queue redelivers the window.',
      ),
      targetErrors: atLeastOnce(
        'targetErrors',
        'TargetErrorsAlarm',
        this.scheduleGroup.metricTargetErrors({ period: ALARM_PERIOD, statistic: cloudwatch.Stats.SUM }),
        "Scheduler's call to send a fire to the work queue failed.",
      ),
      droppedInvocations: atLeastOnce(
        'droppedInvocations',
        'DroppedInvocationsAlarm',
        this.scheduleGroup.metricDropped({ period: ALARM_PERIOD, statistic: cloudwatch.Stats.SUM }),
        'Scheduler gave up on a fire after its retry policy.',
      ),
      // A window's last delivery comes at most one visibility timeout after its deadline, unless the
      // handler asked for a later one; SQS leaves messages received 3 or more times out of this
      // metric, so it mostly sees windows nothing has picked up.
      workQueueAge: this.alarm(
        'workQueueAge',
        'WorkQueueAgeAlarm',
        {
          metric: this.workQueue.metricApproximateAgeOfOldestMessage({
            period: ALARM_PERIOD,
            statistic: cloudwatch.Stats.MAXIMUM,
          }),
          threshold: this.deadline.toSeconds() + WORK_QUEUE_VISIBILITY_TIMEOUTS * this.job.timeoutSeconds,
          comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
          evaluationPeriods: 1,
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
          alarmDescription:
            `slotguard job ${this.jobId}: a window message has waited in the work queue longer than its deadline ` +
            'and one visibility timeout; the function is not consuming the queue (see its throttles and errors).',
        },
        props.alarmActions,
      ),
    };
  }

  /** An alarm, with `actions` when ALARM_PAGING says `key` pages. */
  private alarm(
    key: AlarmKey,
    id: string,
    alarmProps: cloudwatch.AlarmProps,
    actions: readonly cloudwatch.IAlarmAction[] | undefined,
  ): cloudwatch.Alarm {
    const alarm = new cloudwatch.Alarm(this, id, alarmProps);
    if (ALARM_PAGING[key].pages && actions?.length) alarm.addAlarmAction(...actions);
    return alarm;
  }

  /**
   * The role Scheduler assumes to send to the work queue: only Scheduler, only from this account
   * and only for this job's schedule group (confused-deputy protection, as the Scheduler guide
   * advises). SqsSendMessage grants it `sqs:SendMessage` on the work queue and the dead-letter queue.
   */
  private schedulerRole(): iam.Role {
    const stack = Stack.of(this);
    return new iam.Role(this, 'SchedulerRole', {
      description: `slotguard: EventBridge Scheduler sending job ${this.jobId}'s windows`,
      assumedBy: new iam.ServicePrincipal('scheduler.amazonaws.com', {
        conditions: {
          StringEquals: { 'aws:SourceAccount': stack.account },
          // Scheduler's source is the schedule group, not the schedule.
          ArnEquals: { 'aws:SourceArn': this.scheduleGroup.scheduleGroupArn },
        },
      }),
    });
  }

  /**
   * `ses:SendEmail` as `fromAddress` on the identity and, when the job sends through its
   * configuration set, on that too: SES authorizes a send against every resource it names.
   */
  private grantSendEmail(identity: string, fromAddress: string): void {
    const stack = Stack.of(this);
    const configurationSet = this.sesConfigurationSet?.configurationSetName;
    this.function.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['ses:SendEmail'],
        resources: [
          Arn.format({ service: 'ses', resource: 'identity', resourceName: identity }, stack),
          ...(configurationSet
            ? [
                Arn.format(
                  { service: 'ses', resource: 'configuration-set', resourceName: configurationSet },
                  stack,
                ),
              ]
            : []),
        ],
        conditions: { StringEquals: { 'ses:FromAddress': fromAddress } },
      }),
    );
  }

  /** The job's configuration set, publishing the events that settle an effect to the default bus. */
  private configurationSetPublishingEvents(): ses.ConfigurationSet {
    const configurationSet = new ses.ConfigurationSet(this, 'SesConfigurationSet');
    configurationSet.addEventDestination('RecorderDestination', {
      // SES publishes to the default bus only.
      destination: ses.EventDestination.eventBus(
        events.EventBus.fromEventBusName(this, 'DefaultEventBus', 'default'),
      ),
      events: SETTLING_SES_EVENTS.map((type) => SENDING_EVENT_OF[type]),
    });
    return configurationSet;
  }

  /**
   * The job's grace period and what follows it when its SES events are recorded (`recorded`), the
   * grace shorter than the deadline; undefined when they are not, and then neither may be set.
   */
  private validateInDoubt(
    job: JobWithDefaults,
    recorded: boolean,
  ): { graceMinutes: number; afterGrace: AfterGrace } | undefined {
    if (!recorded) {
      const set = (['inDoubtGraceMinutes', 'inDoubtAfterGrace'] as const).find(
        (prop) => job[prop] !== undefined,
      );
      if (set === undefined) return undefined;
      throw new InfraValidationError(
        this,
        `job.${set}`,
        `job.${set} is ${describe(job[set])} but job '${job.id}' records no SES events (no ses prop, or ` +
          'ses.recordEvents false): without them there is no word to wait for or to go without; give the job an ses ' +
          `prop with recordEvents unset (true), or remove job.${set}`,
      );
    }
    const afterGrace = job.inDoubtAfterGrace ?? AfterGrace.Report;
    if (afterGrace !== AfterGrace.Report && afterGrace !== AfterGrace.Resend) {
      throw new InfraValidationError(
        this,
        'job.inDoubtAfterGrace',
        `job.inDoubtAfterGrace is ${describe(afterGrace)}; set 'report' (the email stays in doubt and EffectInDoubt ` +
          "pages, the default) or 'resend' (it is sent again: probably safe, but a late event means a second email)",
      );
    }
    const deadlineMinutes = this.deadline.toMinutes();
    const byDefault = Math.min(DEFAULT_IN_DOUBT_GRACE_MINUTES, Math.floor(deadlineMinutes / 2));
    const graceMinutes = job.inDoubtGraceMinutes ?? byDefault;
    if (!Number.isInteger(graceMinutes) || graceMinutes < 0 || graceMinutes >= deadlineMinutes) {
      throw new InfraValidationError(
        this,
        'job.inDoubtGraceMinutes',
        `job.inDoubtGraceMinutes is ${describe(graceMinutes)}, not a whole number of minutes shorter than the ` +
          `job's deadline (${deadlineMinutes} minutes): the window must finish by its deadline, so it could not ` +
          `wait that long for SES's word; set it below ${deadlineMinutes} (leave it unset for ${byDefault}), ` +
          'or raise job.deadlineMinutes',
      );
    }
    return { graceMinutes, afterGrace };
  }

  private validateJob(job: JobWithDefaults): void {
    if (!JOB_ID_PATTERN.test(job.id)) {
      throw new InfraValidationError(
        this,
        'job.id',
        `job.id ${describe(job.id)} is not a valid job id: it must match ${JOB_ID_PATTERN} ` +
          '(a lower-case letter, then up to 62 lower-case letters, digits or hyphens); rename the job, e.g. "weekly-report"',
      );
    }
    this.validatePositiveInteger('job.timeoutSeconds', job.timeoutSeconds);
    if (job.timeoutSeconds > 900) {
      throw new InfraValidationError(
        this,
        'job.timeoutSeconds',
        `job.timeoutSeconds is ${job.timeoutSeconds}, over Lambda's 900-second limit; set 900 or less ` +
          '(a run that yields is resumed by the next delivery of its window)',
      );
    }
    this.validatePositiveInteger('job.leaseSeconds', job.leaseSeconds);
    if (job.leaseSeconds > job.timeoutSeconds) {
      throw new InfraValidationError(
        this,
        'job.leaseSeconds',
        `job.leaseSeconds is ${job.leaseSeconds}, longer than the function timeout (job.timeoutSeconds ` +
          `${job.timeoutSeconds}): a run killed by the timeout would keep its window's retries out until the lease ` +
          `ends; set job.leaseSeconds to ${job.timeoutSeconds} or less (the runtime renews the lease while the run lasts)`,
      );
    }
    this.validatePositiveInteger('job.effectConcurrency', job.effectConcurrency);
    this.validatePositiveInteger('job.maxAttempts', job.maxAttempts);
    if (!Number.isInteger(job.shards) || job.shards < 1 || job.shards > MAX_SHARDS) {
      throw new InfraValidationError(
        this,
        'job.shards',
        `job.shards is ${describe(job.shards)}; set a whole number from 1 to ${MAX_SHARDS}: the parallel shards each ` +
          'window is split into (1, the default, runs a window in one run at a time)',
      );
    }
    const skewMs = job.takeoverSkewSeconds * 1000;
    if (!(skewMs >= 0 && skewMs < job.leaseSeconds * 1000) || Math.abs(skewMs - Math.round(skewMs)) > 1e-6) {
      throw new InfraValidationError(
        this,
        'job.takeoverSkewSeconds',
        `job.takeoverSkewSeconds is ${describe(job.takeoverSkewSeconds)}; set seconds (to the millisecond) from 0 to ` +
          `less than job.leaseSeconds (${job.leaseSeconds}), or leave it out for ` +
          `${defaultTakeoverSkewMs(job.leaseSeconds * 1000) / 1000}`,
      );
    }
  }

  private validateSchedule(job: JobWithDefaults): AnalysedSchedule {
    const analysis = analyseSchedule(job.schedule, new Date(), {
      gapLimitMs: CLOUDWATCH_ALARM_LIMITS.maxEvaluationSeconds * 1000,
    });
    if (analysis.ok && analysis.schedule.kind === 'at' && analysis.schedule.passed) {
      const { expression, timeZone, nextFire } = analysis.schedule;
      Annotations.of(this).addWarningV2(
        'slotguard:atInPast',
        `job.schedule.expression ${JSON.stringify(expression)} (${timeZone}) of job '${job.id}' was due at ` +
          `${windowOf(nextFire)}, before this synth: no EventBridge Scheduler schedule is created for it, so the ` +
          'stack deploys; its function and alarms stay. Remove the job once it has run, or give it a future at() time',
      );
    }
    if (analysis.ok) return analysis.schedule;
    const prop = `job.schedule.${analysis.field}`;
    throw new InfraValidationError(this, prop, `${prop} ${analysis.problem}; ${analysis.fix}`);
  }

  private validateRetry(retry: ScheduleRetryPolicy | undefined, job: JobWithDefaults) {
    const attempts = retry?.attempts ?? DEFAULT_RETRY_ATTEMPTS;
    if (!Number.isInteger(attempts) || attempts < 0 || attempts > 185) {
      throw new InfraValidationError(
        this,
        'retry.attempts',
        `retry.attempts is ${describe(attempts)}; Scheduler allows a whole number from 0 to 185`,
      );
    }
    const maxEventAge = retry?.maxEventAge ?? DEFAULT_MAX_EVENT_AGE;
    const seconds = maxEventAge.toSeconds();
    if (seconds < 60 || seconds > 6 * 3600) {
      throw new InfraValidationError(
        this,
        'retry.maxEventAge',
        `retry.maxEventAge is ${seconds} seconds; it must be between 60 seconds and 6 hours ` +
          `(Lambda's limit for asynchronous events) for job '${job.id}'`,
      );
    }
    return { attempts, maxEventAge };
  }

  /**
   * The schedule Scheduler gets: a cron or at() as written; a rate() as the UTC cron on the same
   * grid, said at synth, or refused when there is none (see rateAsUtcCron).
   */
  private deploySchedule(schedule: AnalysedSchedule): Required<ScheduleSpec> {
    if (schedule.kind !== 'rate') return { expression: schedule.expression, timeZone: schedule.timeZone };
    const cron = rateAsUtcCron(schedule.longestGap.ms);
    if (cron === undefined) {
      throw new InfraValidationError(
        this,
        'job.schedule.expression',
        `job.schedule.expression ${JSON.stringify(schedule.expression)} cannot be watched: Scheduler counts a rate() ` +
          'from when its schedule is created, which synth cannot know, so the watchdog could not tell which windows ' +
          'it fires. A rate that divides an hour or a day is deployed as the UTC cron on the same grid ' +
          '(rate(15 minutes) as cron(0/15 * * * ? *)); use such a rate, or a cron() expression',
      );
    }
    Annotations.of(this).addInfo(
      `job '${this.jobId}': ${schedule.expression} is deployed as ${cron} in UTC, the same grid the local runner ` +
        "and the CLI compute, so the watchdog knows its windows (Scheduler would count a rate() from the schedule's creation)",
    );
    return { expression: cron, timeZone: 'UTC' };
  }

  private validateWatchedSince(since: Date): Date {
    if (Number.isNaN(since.getTime())) {
      throw new InfraValidationError(
        this,
        'watchedSince',
        "watchedSince is an invalid Date; give the instant the job was first deployed, e.g. new Date('2026-12-01T00:00:00Z')",
      );
    }
    return since;
  }

  /**
   * `job.deadlineMinutes`, or its default from the schedule's shortest gap (see
   * defaultDeadlineSeconds), checked against the function timeout, the message retention and the
   * records' retention.
   */
  private resolveDeadline(job: JobWithDefaults, retentionDays: number): Duration {
    if (job.deadlineMinutes === undefined) {
      const schedule = this.analysedSchedule;
      const shortestGapMs = schedule.kind === 'at' ? undefined : schedule.shortestGap.ms;
      return Duration.seconds(defaultDeadlineSeconds(shortestGapMs, job.timeoutSeconds));
    }
    const minutes = this.validatePositiveInteger('job.deadlineMinutes', job.deadlineMinutes);
    const prop = 'job.deadlineMinutes';
    if (minutes * 60 < job.timeoutSeconds) {
      throw new InfraValidationError(
        this,
        prop,
        `${prop} is ${minutes}, shorter than the function timeout (job.timeoutSeconds ${job.timeoutSeconds}): a ` +
          "window's first run could not use all of its time before the window is given up; set " +
          `${prop} to ${Math.ceil(job.timeoutSeconds / 60)} or more`,
      );
    }
    const maxMinutes = MAX_DEADLINE.toMinutes();
    if (minutes > maxMinutes) {
      throw new InfraValidationError(
        this,
        prop,
        `${prop} is ${minutes} (${(minutes / 1440).toFixed(1)} days), over ${maxMinutes} (7 days): SQS keeps a ` +
          "window's message 14 days from when the schedule sent it, dead-letter queue included, and a window " +
          `given up at its deadline must leave the on-call a week to act on its dead letter; set ${prop} to ` +
          `${maxMinutes} or less`,
      );
    }
    const retentionMinutes = retentionDays * 1440;
    if (minutes > retentionMinutes) {
      throw new InfraValidationError(
        this,
        prop,
        `${prop} is ${minutes}, longer than retentionDays (${retentionDays}, ${retentionMinutes} minutes) keeps ` +
          "the window's records: its slot record could expire before the window ends, and a later run would " +
          `start the window over; set ${prop} to ${retentionMinutes} or less, or raise retentionDays`,
      );
    }
    return Duration.minutes(minutes);
  }

  private validateGrace(grace: Duration): Duration {
    const seconds = grace.toSeconds();
    if (!Number.isInteger(seconds) || seconds < 60 || seconds > 86_400) {
      throw new InfraValidationError(
        this,
        'missedRunGrace',
        `missedRunGrace is ${describe(seconds)} seconds; set 1 minute to 24 hours: how long after its scheduled ` +
          'time a window may have no record before the watchdog reports it missing (Scheduler fires within the minute)',
      );
    }
    return grace;
  }

  private validateMaxConcurrency(maxConcurrency: number, shards: number): number {
    const byDefault = Math.max(DEFAULT_MAX_CONCURRENCY, shards);
    if (!Number.isInteger(maxConcurrency) || maxConcurrency < 2 || maxConcurrency > 1000) {
      throw new InfraValidationError(
        this,
        'maxConcurrency',
        `maxConcurrency is ${describe(maxConcurrency)}; the SQS event source takes a whole number from 2 to 1000 ` +
          `(AWS's limits); leave it unset for ${byDefault}`,
      );
    }
    // Allowed, shards would still finish: in waves, each waiting for a run of the one before, which
    // the deadline was not sized for and which no alarm would explain. Refused, so the split is real.
    if (maxConcurrency < shards) {
      throw new InfraValidationError(
        this,
        'maxConcurrency',
        `maxConcurrency is ${maxConcurrency}, below job.shards (${shards}): a window's ${shards} shards would run ` +
          `${maxConcurrency} at a time, in waves, each waiting for a whole run of the one before; set maxConcurrency ` +
          `to ${shards} or more (leave it unset for ${byDefault}), or lower job.shards to ${maxConcurrency}`,
      );
    }
    return maxConcurrency;
  }

  private validateFlexibleWindow(window: Duration | undefined): Duration | undefined {
    if (window === undefined) return undefined;
    const minutes = window.toMinutes({ integral: false });
    if (!Number.isInteger(minutes) || minutes < 1 || minutes > 1440) {
      throw new InfraValidationError(
        this,
        'flexibleTimeWindow',
        `flexibleTimeWindow is ${minutes} minutes; Scheduler takes whole minutes from 1 to 1440, or leave it unset to fire on time`,
      );
    }
    return window;
  }

  private validateMemory(memorySize: number): number {
    if (!Number.isInteger(memorySize) || memorySize < 128 || memorySize > 10_240) {
      throw new InfraValidationError(
        this,
        'memorySize',
        `memorySize is ${describe(memorySize)}; Lambda takes a whole number of MB from 128 to 10240`,
      );
    }
    return memorySize;
  }

  private validateSes(ses: SesSendingProps): {
    identity: string;
    fromAddress: string;
    rate: number;
    scope: SendRateScope;
  } {
    const identity = ses.identity.toLowerCase();
    const from = ses.fromAddress.toLowerCase();
    const domain = from.slice(from.lastIndexOf('@') + 1);
    if (!from.includes('@') || (from !== identity && domain !== identity)) {
      throw new InfraValidationError(
        this,
        'ses.fromAddress',
        `ses.fromAddress ${describe(ses.fromAddress)} is not at ses.identity ${describe(ses.identity)}; ` +
          'use an address at the verified domain (or the verified address itself)',
      );
    }
    const rate = ses.maxSendRatePerSecond ?? 1;
    if (!(rate > 0) || !Number.isFinite(rate)) {
      throw new InfraValidationError(
        this,
        'ses.maxSendRatePerSecond',
        `ses.maxSendRatePerSecond is ${describe(rate)}; set a positive number, at most your SES account's maximum send rate`,
      );
    }
    const scope = ses.sendRateScope ?? SendRateScope.Job;
    if (!(Object.values(SendRateScope) as string[]).includes(scope)) {
      throw new InfraValidationError(
        this,
        'ses.sendRateScope',
        `ses.sendRateScope is ${describe(scope)}; set 'job' (every run of the job shares the rate) or 'process' ` +
          "(each run keeps to it alone), or leave it unset for 'job'",
      );
    }
    return { identity: ses.identity, fromAddress: ses.fromAddress, rate, scope };
  }

  private validatePositiveInteger(prop: string, value: number): number {
    if (!Number.isInteger(value) || value < 1) {
      throw new InfraValidationError(
        this,
        prop,
        `${prop} is ${describe(value)}; set a whole number of 1 or more`,
      );
    }
    return value;
  }

  private registerJobId(jobId: string): void {
    const root = this.node.root;
    const paths = jobPathsByRoot.get(root) ?? new Map<string, string>();
    jobPathsByRoot.set(root, paths);
    const other = paths.get(jobId);
    if (other !== undefined) {
      throw new InfraValidationError(
        this,
        'job.id',
        `job.id ${describe(jobId)} is already used by the ScheduledJob at '${other}'; job ids are slot keys, ` +
          'metric dimensions and IAM conditions, so give each job in the app its own id',
      );
    }
    paths.set(jobId, this.node.path);
  }
}

/**
 * A JobSpec with every default applied but the deadline's, which needs the analysed schedule (and
 * ScheduledJob.job carries once it is known).
 */
/** Resolved later than the rest: the deadline from the schedule, the grace period from the deadline. */
type ResolvedLater = 'deadlineMinutes' | 'inDoubtGraceMinutes' | 'inDoubtAfterGrace';
type JobWithDefaults = Required<Omit<JobSpec, ResolvedLater>> & Pick<JobSpec, ResolvedLater>;

function withDefaults(job: JobSpec): JobWithDefaults {
  const leaseSeconds = job.leaseSeconds ?? JOB_DEFAULTS.leaseSeconds;
  return {
    ...job,
    schedule: { ...job.schedule, timeZone: job.schedule.timeZone ?? 'UTC' },
    leaseSeconds,
    takeoverSkewSeconds: job.takeoverSkewSeconds ?? defaultTakeoverSkewMs(leaseSeconds * 1000) / 1000,
    effectConcurrency: job.effectConcurrency ?? JOB_DEFAULTS.effectConcurrency,
    timeoutSeconds: job.timeoutSeconds ?? JOB_DEFAULTS.timeoutSeconds,
    maxAttempts: job.maxAttempts ?? JOB_DEFAULTS.maxAttempts,
    shards: job.shards ?? JOB_DEFAULTS.shards,
    reserveAhead: job.reserveAhead ?? false,
    catchUp: job.catchUp ?? JOB_DEFAULTS.catchUp,
  };
}
