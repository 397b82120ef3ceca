import { Duration, Lazy, Stack, Validations } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct, type IConstruct } from 'constructs';
import { type SesEventPattern, sesEventPattern } from '../shared/provider-events/ses-events.js';
import { SesEventsEnv } from '../shared/provider-events/ses-events-env.js';
import type { ClaimsBackend } from './claims-backend.js';
import { deadLetterArrivals } from './dead-letter-arrivals.js';
import { runtimeModulePath } from './package-source.js';
import { ALARM_PAGING } from './paging.js';
import { onePerStackAndBackend, type PerBackendRegistry } from './per-backend.js';
import { type SlotguardServiceFunctionProps, serviceFunction } from './slotguard-function.js';

/**
 * The recorder's Lambda handler module, bundled like the watchdog's: its source in slotguard's
 * repository, its compiled module in an installed package.
 */
export const SES_EVENT_RECORDER_MODULE = runtimeModulePath('shared/provider-events/ses-events-handler');

/**
 * How long EventBridge keeps trying to hand an event to the recorder (throttling, Lambda
 * unavailable), and how long Lambda's own queue keeps an event the handler failed on: each
 * service's maximum. A late word still settles a window inside its grace period; one that never
 * comes leaves the effect in doubt, so an event is worth every retry there is.
 */
const EVENTBRIDGE_RETRY = { attempts: 185, maxEventAge: Duration.hours(24) } as const;
const LAMBDA_RETRY = { attempts: 2, maxEventAge: Duration.hours(6) } as const;

/** SQS keeps a message at most this long: the on-call has two weeks to look at a lost event. */
const DEAD_LETTER_RETENTION = Duration.days(14);
const ALARM_PERIOD = Duration.minutes(5);
/** CloudWatch's limit on the actions of one alarm state. */
const MAX_ALARM_ACTIONS = 5;

/** A job whose SES events the recorder records. */
export interface RecordedJob {
  readonly jobId: string;
  /**
   * The job's alarm actions; the recorder's ProviderEventsLost alarm notifies the union of its jobs'.
   * @default none
   */
  readonly alarmActions?: readonly cloudwatch.IAlarmAction[];
}

/** Props of a `SesEventRecorder`. */
export interface SesEventRecorderProps extends SlotguardServiceFunctionProps {
  /** The claims backend whose effect records it writes the provider's word on. */
  readonly claims: ClaimsBackend;
}

/** The one recorder per stack and claims backend, keyed by the backend. */
const recordersByStack: PerBackendRegistry<SesEventRecorder> = new WeakMap();

/**
 * The SES event recorder: one small Lambda per stack and claims backend, invoked by one EventBridge
 * rule per job. Each rule matches SES's Send, Reject and Rendering Failure events (source `aws.ses`,
 * which only SES can publish) whose message carries the job's `slotguard-job` tag, and hands the
 * event to the recorder, which writes what SES said onto the effect's record (shared/provider-events).
 *
 * One function for the stack rather than one per job, as with the watchdog: a job adds four
 * resources (its configuration set, event destination, rule and the rule's invoke permission), not
 * a function, role, policy, log group, dead-letter queue and alarm of its own, so a stack of
 * SES-recording jobs holds 16 of them within CloudFormation's 500 resources.
 *
 * Nothing is lost quietly: EventBridge retries a delivery for 24 hours, Lambda retries a failed
 * invocation twice within 6 hours, and what is left of either lands in the recorder's dead-letter
 * queue, whose every new message pages (ProviderEventsLost). Least privilege: UpdateItem and GetItem
 * on its jobs' items (a DynamoDB claims table) and a Query of their done marks alone, no effect-key
 * secret, no SES action.
 *
 * ScheduledJob creates it lazily (`SesEventRecorder.of`) for a job with `ses`, as the watchdog is.
 */
export class SesEventRecorder extends Construct {
  /**
   * The recorder of `claims` in `scope`'s stack, created on first use.
   * @example const recorder = SesEventRecorder.of(job, claims, { projectRoot });
   */
  static of(
    scope: IConstruct,
    claims: ClaimsBackend,
    props: Omit<SesEventRecorderProps, 'claims'> = {},
  ): SesEventRecorder {
    return onePerStackAndBackend(
      recordersByStack,
      scope,
      claims,
      'SesEventRecorder',
      (stack, id) => new SesEventRecorder(stack, id, { ...props, claims }),
    );
  }

  /** The recorder's Lambda function. */
  readonly function: nodejs.NodejsFunction;
  /**
   * Where an event goes that could not be recorded: one EventBridge could not deliver, or one the
   * handler failed on three times. Each message is the SES event (with its addresses): SQS-managed
   * encryption, TLS only, kept 14 days.
   */
  readonly deadLetterQueue: sqs.Queue;
  /** Pages on each new message in the dead-letter queue: an SES event that will not be recorded. */
  readonly eventsLostAlarm: cloudwatch.Alarm;
  private readonly claims: ClaimsBackend;
  private readonly jobIds: string[] = [];
  private readonly ruleArns: string[] = [];
  private readonly actionArns = new Set<string>();

  constructor(scope: Construct, id: string, props: SesEventRecorderProps) {
    super(scope, id);
    this.claims = props.claims;
    this.deadLetterQueue = new sqs.Queue(this, 'DeadLetterQueue', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: DEAD_LETTER_RETENTION,
    });
    Validations.of(this.deadLetterQueue).acknowledge({
      id: 'AwsSolutions-SQS3',
      reason: "This queue is itself the dead-letter queue of the recorder's rules and of its function.",
    });
    // One statement for every rule of the recorder, its condition listing them: a statement per
    // rule (what the rule target would add) would pass SQS's 20 statements per policy at 20 jobs.
    this.deadLetterQueue.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'SesEventRulesDeadLetters',
        principals: [new iam.ServicePrincipal('events.amazonaws.com')],
        actions: ['sqs:SendMessage'],
        resources: [this.deadLetterQueue.queueArn],
        conditions: { ArnEquals: { 'aws:SourceArn': Lazy.list({ produce: () => [...this.ruleArns] }) } },
      }),
    );

    this.function = serviceFunction(this, props.claims, props, {
      role: 'slotguard SES event recorder',
      description:
        "slotguard SES event recorder: what SES said of each job's emails, onto their effect records",
      entry: SES_EVENT_RECORDER_MODULE,
      // Two reads side by side and one conditional write per event.
      timeout: Duration.seconds(30),
      retryAttempts: LAMBDA_RETRY.attempts,
      maxEventAge: LAMBDA_RETRY.maxEventAge,
      deadLetterQueue: this.deadLetterQueue,
      environment: { [SesEventsEnv.jobIds]: Lazy.string({ produce: () => this.jobIds.join(',') }) },
    });

    this.eventsLostAlarm = new cloudwatch.Alarm(this, 'EventsLostAlarm', {
      metric: this.metricDeadLetterArrivals(),
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      alarmDescription: Lazy.string({
        produce: () =>
          `slotguard SES event recorder of jobs ${this.jobIds.join(', ')}: ${ALARM_PAGING.providerEventsLost.why}. ` +
          "The dead-letter queue holds the event; see docs/operations.md, 'ProviderEventsLost'.",
      }),
    });
    this.node.addValidation({ validate: () => this.validateActions() });
  }

  /** New arrivals in the dead-letter queue per 5 minutes (see deadLetterArrivals). */
  metricDeadLetterArrivals(): cloudwatch.MathExpression {
    return deadLetterArrivals(this.deadLetterQueue, ALARM_PERIOD);
  }

  /**
   * Records `job`'s SES events: grants the function the provider's word on its effect records,
   * adds the rule that hands it the job's Send, Reject and Rendering Failure events (in `scope`, the
   * job's construct, so the rule goes when the job goes), and puts the job under the
   * ProviderEventsLost alarm, which notifies its actions.
   */
  record(scope: Construct, job: RecordedJob): events.Rule {
    this.claims.bindProviderWords(this.function, job.jobId);
    this.jobIds.push(job.jobId);
    const rule = new events.Rule(scope, 'SesEventsRule', {
      description: `slotguard: SES's word on the emails of job ${job.jobId}, to its recorder`,
      eventPattern: eventPatternOf(sesEventPattern(job.jobId)),
    });
    const invoke = new targets.LambdaFunction(this.function, {
      retryAttempts: EVENTBRIDGE_RETRY.attempts,
      maxEventAge: EVENTBRIDGE_RETRY.maxEventAge,
    });
    // The dead-letter queue is set here rather than through the target's own prop, which would add
    // a queue policy statement per rule; the one statement above lists every rule instead.
    rule.addTarget({
      bind: (boundRule, id) => ({
        ...invoke.bind(boundRule, id),
        deadLetterConfig: { arn: this.deadLetterQueue.queueArn },
      }),
    });
    this.ruleArns.push(rule.ruleArn);
    if (ALARM_PAGING.providerEventsLost.pages) this.addAlarmActions(job.alarmActions ?? []);
    return rule;
  }

  /** Adds each action not already on the alarm: jobs that share a pager share one action. */
  private addAlarmActions(actions: readonly cloudwatch.IAlarmAction[]): void {
    const stack = Stack.of(this);
    for (const action of actions) {
      const arn = JSON.stringify(stack.resolve(action.bind(this, this.eventsLostAlarm).alarmActionArn));
      if (this.actionArns.has(arn)) continue;
      this.actionArns.add(arn);
      this.eventsLostAlarm.addAlarmAction(action);
    }
  }

  private validateActions(): string[] {
    if (this.actionArns.size <= MAX_ALARM_ACTIONS) return [];
    return [
      `the ProviderEventsLost alarm of the SES event recorder of jobs ${this.jobIds.join(', ')} would notify ` +
        `${this.actionArns.size} alarm actions (the union of their alarmActions), over CloudWatch's ` +
        `${MAX_ALARM_ACTIONS}; give these jobs one SNS topic that fans out to your pagers`,
    ];
  }
}

/** An EventBridge pattern as EventBridge spells it, as the CDK spells it. */
function eventPatternOf(pattern: SesEventPattern): events.EventPattern {
  return { source: [...pattern.source], detailType: [...pattern['detail-type']], detail: pattern.detail };
}
