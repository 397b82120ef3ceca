import { Annotations, Arn, Duration, RemovalPolicy, Stack, TimeZone, Validations } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as scheduler from 'aws-cdk-lib/aws-scheduler';
import * as targets from 'aws-cdk-lib/aws-scheduler-targets';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct, type IConstruct } from 'constructs';
import { JOB_DEFAULTS, type JobSpec } from '../shared/job/job-spec.js';
import { RuntimeEnv } from '../shared/job/runtime-env.js';
import { type AnalysedSchedule, analyseSchedule } from '../shared/schedule/schedule-analysis.js';
import { describe, JOB_ID_PATTERN, windowOf } from '../shared/slot/slot.js';
import { JOB_ID_DIMENSION, METRICS_NAMESPACE, MetricName } from '../shared/telemetry/metric-names.js';
import type { ClaimsBackend } from './claims-backend.js';
import { sharedEffectKeySecret } from './effect-key-secret.js';
import { locateHandlerEntry } from './handler-entry.js';
import { InfraValidationError } from './infra-validation-error.js';
import { CLOUDWATCH_ALARM_LIMITS, missedRunWindow } from './missed-run-window.js';
import { BUNDLING_CONDITIONS } from './package-source.js';

/** How EventBridge Scheduler and Lambda retry a fire that did not get through. */
export interface ScheduleRetryPolicy {
  /**
   * Scheduler's retries when invoking the function fails (throttling, service errors). The
   * function's own failures are retried by Lambda's asynchronous invocation, `maxAttempts - 1`
   * times (at most 2), against the same slot.
   * @default 20
   */
  readonly attempts?: number;
  /**
   * How old a fire may get and still be delivered, by Scheduler and by Lambda's async queue. A late
   * fire still lands in its own window's slot. Between 1 minute and 6 hours (Lambda's limit).
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
   * Emails per second this job may send: the account's SES maximum send rate, divided among the
   * jobs that send at once.
   * @default 1
   */
  readonly maxSendRatePerSecond?: number;
}

/** Props of a `ScheduledJob`. */
export interface ScheduledJobProps {
  /** The job: id, schedule, handler entry and the knobs around it (see functions/catalog.ts). */
  readonly job: JobSpec;
  /** Where claims and the effect ledger live, e.g. a `ClaimsTable` shared by the app's jobs. */
  readonly claims: ClaimsBackend;
  /**
   * The HMAC secret for effect keys.
   * @default one generated secret per stack, shared by its jobs
   */
  readonly effectKeySecret?: secretsmanager.ISecret;
  /**
   * SES sending: grants `ses:SendEmail` on this identity only, from this address only.
   * @default no SES permission, and SLOTGUARD_SES_FROM / SLOTGUARD_SEND_RATE are not set
   */
  readonly ses?: SesSendingProps;
  /**
   * Retries of a fire that did not get through.
   * @default 20 Scheduler attempts, events up to 1 hour old
   */
  readonly retry?: ScheduleRetryPolicy;
  /**
   * Where fires that exhausted their retries go, from Scheduler and from Lambda's async queue.
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
   * Actions for every alarm of this job, e.g. `new SnsAction(topic)`.
   * @default no actions (alarms change state and show on the dashboard only)
   */
  readonly alarmActions?: readonly cloudwatch.IAlarmAction[];
  /**
   * How long after a fire's longest gap the missed-run alarm waits for its ClaimAcquired metric.
   * The runtime flushes ClaimAcquired as soon as the slot is claimed, so this covers delivery,
   * Lambda's async retry delays (up to about 3 minutes) and CloudWatch's ingestion.
   * @default 15 minutes
   */
  readonly missedRunGrace?: Duration;
  /**
   * Whether the missed-run alarm of a schedule whose longest gap plus grace exceeds what CloudWatch
   * can watch (7 days; e.g. a weekly cron) gets `alarmActions`. Such an alarm can only look back 7
   * days, so it is in ALARM from each fire until that run's claim metric arrives: it would page on
   * every run.
   * @default false: the capped alarm is created, shown on the dashboard, and pages nobody
   */
  readonly pageOnCappedMissedRun?: boolean;
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

/** The alarms a ScheduledJob creates. */
export interface ScheduledJobAlarms {
  /** A fire found its slot held or done: slotguard absorbed a duplicate delivery. */
  readonly duplicateClaims: cloudwatch.Alarm;
  /** An effect was reserved by an earlier run and never marked done: it may not have happened. */
  readonly effectsInDoubt: cloudwatch.Alarm;
  /**
   * No claim over the schedule's longest gap plus grace. Not created for one-time (`at`)
   * schedules; without actions when capped at 7 days (see `pageOnCappedMissedRun`).
   */
  readonly missedRun?: cloudwatch.Alarm;
  /** A fire landed in the dead-letter queue. */
  readonly deadLetters: cloudwatch.Alarm;
  /** The function threw (Lambda retries the fire). */
  readonly functionErrors: cloudwatch.Alarm;
  /** Scheduler's call to invoke the function failed. */
  readonly targetErrors: cloudwatch.Alarm;
  /** Scheduler gave up on a fire after its retry policy. */
  readonly droppedInvocations: cloudwatch.Alarm;
}

/** One job per app, per id: slot keys, metrics and IAM conditions all use the id. */
const jobPathsByRoot = new WeakMap<IConstruct, Map<string, string>>();

const DEFAULT_RETRY_ATTEMPTS = 20;
const DEFAULT_MAX_EVENT_AGE = Duration.hours(1);
const DEFAULT_MEMORY_MB = 512;
const ALARM_PERIOD = Duration.minutes(5);

/**
 * One scheduled job: an EventBridge Scheduler schedule (in its own schedule group, so Scheduler's
 * metrics are per job) invoking a Lambda function bundled from `job.entry` by the local esbuild,
 * with the claims backend, the effect-key secret, a dead-letter queue and alarms.
 *
 * Every fire's input carries the job id and Scheduler's context attributes; the scheduled time is
 * the window's slot key, so retries of one fire, however late, land in the same slot.
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
  /** The job as deployed, with defaults applied. */
  readonly job: Required<JobSpec>;
  /** The schedule as analysed at synth time. */
  readonly analysedSchedule: AnalysedSchedule;
  /** The job's Lambda function. */
  readonly function: nodejs.NodejsFunction;
  /**
   * The EventBridge Scheduler schedule that fires the function; undefined for a one-time (`at()`)
   * job whose time had passed at synth (it has fired), which synthesises with a warning instead.
   */
  readonly schedule: scheduler.Schedule | undefined;
  /** This job's schedule group (one per job, so AWS/Scheduler metrics are per job). */
  readonly scheduleGroup: scheduler.ScheduleGroup;
  /** Where fires that exhausted their retries land, from Scheduler and from Lambda. */
  readonly deadLetterQueue: sqs.IQueue;
  /** The HMAC secret the function hashes effect keys with. */
  readonly effectKeySecret: secretsmanager.ISecret;
  /** The job's alarms, all sending to `alarmActions`. */
  readonly alarms: ScheduledJobAlarms;

  constructor(scope: Construct, id: string, props: ScheduledJobProps) {
    super(scope, id);
    const job = withDefaults(props.job);
    this.job = job;
    this.jobId = job.id;
    this.validateJob(job);
    this.analysedSchedule = this.validateSchedule(job);
    const retry = this.validateRetry(props.retry, job);
    const flexibleTimeWindow = this.validateFlexibleWindow(props.flexibleTimeWindow);
    const retentionDays = this.validatePositiveInteger(
      'retentionDays',
      props.retentionDays ?? JOB_DEFAULTS.retentionDays,
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
        retentionPeriod: Duration.days(14),
      });
    if (!props.deadLetterQueue) {
      Validations.of(this.deadLetterQueue).acknowledge({
        id: 'AwsSolutions-SQS3',
        reason: 'This queue is itself the dead-letter queue of the schedule and the function.',
      });
    }
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
    const backendOptions = props.claims.functionOptions?.(this, job) ?? {};

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
      // Function errors: Lambda's async retries deliver the same event, i.e. the same slot.
      retryAttempts: Math.min(2, job.maxAttempts - 1),
      maxEventAge: retry.maxEventAge,
      deadLetterQueue: this.deadLetterQueue,
      ...(backendOptions.vpc
        ? {
            vpc: backendOptions.vpc,
            ...(backendOptions.vpcSubnets ? { vpcSubnets: backendOptions.vpcSubnets } : {}),
            ...(backendOptions.securityGroups ? { securityGroups: backendOptions.securityGroups } : {}),
          }
        : {}),
      environment: {
        NODE_OPTIONS: '--enable-source-maps',
        [RuntimeEnv.jobId]: job.id,
        [RuntimeEnv.effectKeySecretArn]: this.effectKeySecret.secretArn,
        [RuntimeEnv.leaseSeconds]: String(job.leaseSeconds),
        [RuntimeEnv.effectConcurrency]: String(job.effectConcurrency),
        [RuntimeEnv.maxAttempts]: String(job.maxAttempts),
        [RuntimeEnv.retentionDays]: String(retentionDays),
        ...(ses
          ? { [RuntimeEnv.sesFromAddress]: ses.fromAddress, [RuntimeEnv.sendRatePerSecond]: String(ses.rate) }
          : {}),
      },
      bundling: {
        // Never Docker: locateHandlerEntry has checked that esbuild is installed locally.
        forceDockerBundling: false,
        // `slotguard` in the handler resolves to the same form as this construct: sources or compiled.
        ...(BUNDLING_CONDITIONS.length
          ? { esbuildArgs: { '--conditions': BUNDLING_CONDITIONS.join(',') } }
          : {}),
        minify: true,
        sourceMap: true,
        format: nodejs.OutputFormat.ESM,
        mainFields: ['module', 'main'],
        // The Node.js runtime ships AWS SDK v3.
        externalModules: ['@aws-sdk/*'],
        // CommonJS dependencies bundled into ESM still call require().
        banner:
          "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
        ...(backendOptions.inject?.length ? { inject: [...backendOptions.inject] } : {}),
      },
    });
    if (backendOptions.vpc) this.grantNetworkInterfaces(role);
    props.claims.bind(this.function, job.id);
    this.effectKeySecret.grantRead(this.function);
    if (ses) this.grantSendEmail(ses.identity, ses.fromAddress);

    // The group holds this job's schedule only; it goes when the job goes, so re-adding the job can
    // create it again under the same generated name.
    this.scheduleGroup = new scheduler.ScheduleGroup(this, 'ScheduleGroup', {
      removalPolicy: RemovalPolicy.DESTROY,
    });
    // A one-time job that has fired keeps its function and alarms, so the stack still deploys.
    if (!(this.analysedSchedule.kind === 'at' && this.analysedSchedule.passed)) {
      this.schedule = new scheduler.Schedule(this, 'Schedule', {
        description: `slotguard job ${job.id}`,
        schedule: scheduler.ScheduleExpression.expression(
          job.schedule.expression,
          TimeZone.of(this.analysedSchedule.timeZone),
        ),
        scheduleGroup: this.scheduleGroup,
        timeWindow: flexibleTimeWindow
          ? scheduler.TimeWindow.flexible(flexibleTimeWindow)
          : scheduler.TimeWindow.off(),
        enabled: props.enabled ?? true,
        target: new targets.LambdaInvoke(this.function, {
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

  /** Effects found reserved by an earlier run and never marked done. @default Sum over 5 minutes */
  metricEffectsInDoubt(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.metric(MetricName.EffectInDoubt, props);
  }

  /** Events rejected without a claim (malformed, or for another job). @default Sum over 5 minutes */
  metricInvalidEvents(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.metric(MetricName.InvalidEvent, props);
  }

  /** Fires that won their slot. @default Sum over 5 minutes */
  metricClaimsAcquired(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.metric(MetricName.ClaimAcquired, props);
  }

  private createAlarms(props: ScheduledJobProps): ScheduledJobAlarms {
    const atLeastOnce = (id: string, metric: cloudwatch.IMetric, description: string): cloudwatch.Alarm =>
      this.alarm(
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
    const missedRun = this.createMissedRunAlarm(props);
    return {
      duplicateClaims: atLeastOnce(
        'DuplicateClaimsAlarm',
        this.metricDuplicateClaims(),
        'a fire found its slot already held or done (a duplicate delivery was absorbed).',
      ),
      effectsInDoubt: atLeastOnce(
        'EffectsInDoubtAlarm',
        this.metricEffectsInDoubt(),
        'effects were reserved by an earlier run and never marked done; check whether they happened.',
      ),
      ...(missedRun ? { missedRun } : {}),
      deadLetters: atLeastOnce(
        'DeadLettersAlarm',
        this.deadLetterQueue.metricApproximateNumberOfMessagesVisible({
          period: ALARM_PERIOD,
          statistic: cloudwatch.Stats.MAXIMUM,
        }),
        'a fire exhausted its retries and is in the dead-letter queue; its window did not complete.',
      ),
      functionErrors: atLeastOnce(
        'FunctionErrorsAlarm',
        this.function.metricErrors({ period: ALARM_PERIOD, statistic: cloudwatch.Stats.SUM }),
        'the function threw; Lambda retries the fire against the same slot.',
      ),
      targetErrors: atLeastOnce(
        'TargetErrorsAlarm',
        this.scheduleGroup.metricTargetErrors({ period: ALARM_PERIOD, statistic: cloudwatch.Stats.SUM }),
        "Scheduler's call to invoke the function failed.",
      ),
      droppedInvocations: atLeastOnce(
        'DroppedInvocationsAlarm',
        this.scheduleGroup.metricDropped({ period: ALARM_PERIOD, statistic: cloudwatch.Stats.SUM }),
        'Scheduler gave up on a fire after its retry policy.',
      ),
    };
  }

  /**
   * The missed-run alarm: every bucket of the window without a ClaimAcquired, missing data
   * breaching (silence is exactly what it watches for).
   */
  private createMissedRunAlarm(props: ScheduledJobProps): cloudwatch.Alarm | undefined {
    const schedule = this.analysedSchedule;
    if (schedule.kind === 'at') return undefined;
    const grace = props.missedRunGrace ?? Duration.minutes(15);
    const window = missedRunWindow(schedule.longestGap.ms / 1000, grace.toSeconds());
    const pages = !window.capped || props.pageOnCappedMissedRun === true;
    if (window.capped) {
      Annotations.of(this).addWarningV2(
        'slotguard:missedRunWindowCapped',
        `the missed-run alarm of job '${this.jobId}' needs to look back ${(window.wantedSeconds / 3600).toFixed(1)} hours ` +
          `(the longest gap of ${JSON.stringify(schedule.expression)} plus grace), but CloudWatch alarms look back at most ` +
          `${CLOUDWATCH_ALARM_LIMITS.maxEvaluationSeconds / 86_400} days. Watching the last 7 days, it goes into ALARM ` +
          "from each fire until that run's ClaimAcquired arrives, so " +
          (pages
            ? 'it will page briefly on every run (pageOnCappedMissedRun is set)'
            : 'it is created without alarm actions (dashboard only); set pageOnCappedMissedRun to page anyway'),
      );
    }
    return this.alarm(
      'MissedRunAlarm',
      {
        metric: this.metricClaimsAcquired({ period: window.period }),
        threshold: 1,
        comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
        evaluationPeriods: window.evaluationPeriods,
        datapointsToAlarm: window.evaluationPeriods,
        treatMissingData: cloudwatch.TreatMissingData.BREACHING,
        alarmDescription:
          `slotguard job ${this.jobId}: no ClaimAcquired for ${window.period.toMinutes() * window.evaluationPeriods} ` +
          `minutes (schedule ${schedule.expression} ${schedule.timeZone}); a window did not run.`,
      },
      pages ? props.alarmActions : undefined,
    );
  }

  private alarm(
    id: string,
    alarmProps: cloudwatch.AlarmProps,
    actions: readonly cloudwatch.IAlarmAction[] | undefined,
  ): cloudwatch.Alarm {
    const alarm = new cloudwatch.Alarm(this, id, alarmProps);
    if (actions?.length) alarm.addAlarmAction(...actions);
    return alarm;
  }

  /**
   * The role Scheduler assumes to invoke the function: only Scheduler, only from this account and
   * only for this job's schedule group (confused-deputy protection, as the Scheduler guide advises).
   */
  private schedulerRole(): iam.Role {
    const stack = Stack.of(this);
    const role = new iam.Role(this, 'SchedulerRole', {
      description: `slotguard: EventBridge Scheduler invoking job ${this.jobId}`,
      assumedBy: new iam.ServicePrincipal('scheduler.amazonaws.com', {
        conditions: {
          StringEquals: { 'aws:SourceAccount': stack.account },
          // Scheduler's source is the schedule group, not the schedule.
          ArnEquals: { 'aws:SourceArn': this.scheduleGroup.scheduleGroupArn },
        },
      }),
    });
    // LambdaInvoke grants lambda:InvokeFunction on the function and on `<function>:*` (its versions
    // and aliases). Acknowledge exactly that finding, for exactly this function.
    const functionLogicalId = stack.resolve(
      stack.getLogicalId(this.function.node.defaultChild as lambda.CfnFunction),
    );
    Validations.of(role).acknowledge({
      id: `AwsSolutions-IAM5[Resource::<${functionLogicalId}.Arn>:*]`,
      reason:
        "CDK's Lambda invoke grant adds the function's versions and aliases (<function>:*); no other function.",
    });
    return role;
  }

  /**
   * The EC2 actions Lambda needs to attach a function to a VPC, which it checks when the function is
   * created (hence the dependency): the EC2 part of AWSLambdaVPCAccessExecutionRole, without that
   * managed policy's log permissions on every log group. In a policy of its own, so the one
   * acknowledged wildcard belongs to it alone.
   */
  private grantNetworkInterfaces(role: iam.Role): void {
    const policy = new iam.Policy(this, 'NetworkInterfacePolicy', {
      roles: [role],
      statements: [
        new iam.PolicyStatement({
          actions: [
            'ec2:CreateNetworkInterface',
            'ec2:DescribeNetworkInterfaces',
            'ec2:DescribeSubnets',
            'ec2:DeleteNetworkInterface',
            'ec2:AssignPrivateIpAddresses',
            'ec2:UnassignPrivateIpAddresses',
          ],
          resources: ['*'],
        }),
      ],
    });
    this.function.node.addDependency(policy);
    Validations.of(policy).acknowledge({
      id: 'AwsSolutions-IAM5[Resource::*]',
      reason:
        "Lambda's VPC network-interface actions: the Describe actions take no resource, and the interfaces " +
        'Lambda creates have no ARN until they exist (the same statement as AWSLambdaVPCAccessExecutionRole).',
    });
  }

  private grantSendEmail(identity: string, fromAddress: string): void {
    this.function.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['ses:SendEmail'],
        resources: [
          Arn.format({ service: 'ses', resource: 'identity', resourceName: identity }, Stack.of(this)),
        ],
        conditions: { StringEquals: { 'ses:FromAddress': fromAddress } },
      }),
    );
  }

  private validateJob(job: Required<JobSpec>): void {
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
  }

  private validateSchedule(job: Required<JobSpec>): AnalysedSchedule {
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

  private validateRetry(retry: ScheduleRetryPolicy | undefined, job: Required<JobSpec>) {
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

  private validateSes(ses: SesSendingProps): { identity: string; fromAddress: string; rate: number } {
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
    return { identity: ses.identity, fromAddress: ses.fromAddress, rate };
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

function withDefaults(job: JobSpec): Required<JobSpec> {
  return {
    ...job,
    schedule: { ...job.schedule, timeZone: job.schedule.timeZone ?? 'UTC' },
    leaseSeconds: job.leaseSeconds ?? JOB_DEFAULTS.leaseSeconds,
    effectConcurrency: job.effectConcurrency ?? JOB_DEFAULTS.effectConcurrency,
    timeoutSeconds: job.timeoutSeconds ?? JOB_DEFAULTS.timeoutSeconds,
    maxAttempts: job.maxAttempts ?? JOB_DEFAULTS.maxAttempts,
    catchUp: job.catchUp ?? JOB_DEFAULTS.catchUp,
  };
}
