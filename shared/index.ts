/**
 * `slotguard`: the runtime a job's Lambda handler imports. Define a job (`defineJob`), turn it into
 * a handler (`jobHandlerFromEnvironment` in a function deployed by ScheduledJob, `createJobHandler`
 * with your own backend), send through SES or SMTP. The CDK constructs are `slotguard/cdk`, the
 * Postgres backend `slotguard/postgres`, test helpers `slotguard/testing`.
 *
 * One re-export per public name, so adding a name is one line.
 * @example
 * import { defineJob, jobHandlerFromEnvironment, SesEmailSender } from 'slotguard';
 */
export {
  createDynamoClient,
  type DynamoBackendOptions,
  type DynamoClientOptions,
  dynamoBackend,
  ensureClaimsTable,
} from './backends/dynamodb/dynamodb-backend.js';
export {
  DynamoRateLimitStore,
  type DynamoRateLimitStoreOptions,
} from './backends/dynamodb/dynamodb-rate-limit-store.js';
export {
  MemoryRateLimitStore,
  type MemoryRateLimitStoreOptions,
} from './backends/memory/memory-rate-limit-store.js';
export { type Clock, scheduleAt, systemClock } from './clock.js';
export { SqsWorkQueue, type SqsWorkQueueOptions } from './continuation/sqs-work-queue.js';
export {
  BatchSendError,
  type Disposition,
  dispositionOf,
  type SqsBatchResponse,
  type SqsEvent,
  type SqsRecord,
  type WorkQueue,
  WorkQueueError,
} from './continuation/work-queue.js';
export { type EffectKeyHasher, hmacEffectKeys } from './effects/effect-key.js';
export {
  DEFAULT_EFFECT_RETRY,
  type EffectResult,
  type EffectRetryPolicy,
  InDoubtPolicy,
  type StopReason,
} from './effects/effect-runner.js';
export type { EmailMessage, EmailSender } from './effects/email-sender.js';
export {
  lazyRateLimitStore,
  type RateLimitStore,
  type RateReservation,
  type RateReservationRequest,
} from './effects/rate-limit-store.js';
export { isResumable, type ResumableSource, resumableSource } from './effects/resumable-source.js';
export { redactAddresses, SesEmailSender, type SesEmailSenderOptions } from './effects/ses-email-sender.js';
export {
  SharedRateLimiter,
  type SharedRateLimiterOptions,
  type SharedRateLimiterStats,
} from './effects/shared-rate-limiter.js';
export { type SmtpSenderOptions, smtpSender } from './effects/smtp-email-sender.js';
export { type RateLimiter, TokenBucket, type TokenBucketOptions } from './effects/token-bucket.js';
export {
  ConfigurationError,
  EffectNotPerformedError,
  InvalidEventError,
  NotPerformedReason,
  SlotguardError,
  StoreError,
} from './errors.js';
export {
  type EnvironmentSendRateStore,
  registerEnvironmentSendRateStore,
} from './job/environment-backend.js';
export { sendRateLimiterFromEnvironment, sendRateScope } from './job/environment-send-rate.js';
export { defineJob, type JobContext, type JobDefinition } from './job/job-definition.js';
export {
  CatchUpMode,
  type CatchUpPolicy,
  DEFAULT_DEADLINE_CAP_MINUTES,
  defaultDeadlineSeconds,
  JOB_DEFAULTS,
  type JobSpec,
  type ScheduleSpec,
} from './job/job-spec.js';
export {
  type Env,
  type EnvironmentBackend,
  type EnvironmentBackendContext,
  type JobHandlerEnvironmentOptions,
  jobHandlerFromEnvironment,
  registerEnvironmentBackend,
  requiredVariable,
} from './job/lambda-environment.js';
export {
  createJobHandler,
  type HandlerResponse,
  type InvocationContext,
  type JobHandlerDeps,
  JobRunFailedError,
} from './job/lambda-handler.js';
export { LeaseLostError } from './job/lease-keeper.js';
export {
  type RunOptions,
  type RunResult,
  type RunSlotArgs,
  resolveRunOptions,
  runSlot,
  type SlotBackend,
  type YieldReason,
} from './job/run-slot.js';
export {
  BACKEND_ENV,
  BackendKind,
  PostgresRuntimeEnv,
  RuntimeEnv,
  SendRateScope,
} from './job/runtime-env.js';
export type { SchedulerEvent } from './job/scheduler-event.js';
export { JobSchedule, type JobScheduleOptions, ScheduleError } from './schedule/fire-times.js';
export {
  type ParsedSchedule,
  parseSchedule,
  type ScheduleExpression,
} from './schedule/schedule-expression.js';
export type {
  Checkpoint,
  Claim,
  ClaimOutcome,
  ClaimStore,
  Delivery,
  EffectFailure,
  EffectLedger,
  EffectRecord,
  LeaseRequest,
  ReleaseReason,
  ReserveOptions,
  ReserveOutcome,
  RunSummary,
  SlotRecord,
  WindowProgress,
  WindowSummary,
} from './slot/ports.js';
export { EffectState, SlotState, TERMINAL_SLOT_STATES } from './slot/ports.js';
export { canonicalSlot, type Slot, windowOf } from './slot/slot.js';
export { jsonLog, type Log, silentLog } from './telemetry/log.js';
export { JOB_ID_DIMENSION, METRICS_NAMESPACE, MetricName } from './telemetry/metric-names.js';
export { type EmfMetricsOptions, emfMetrics, type JobMetrics } from './telemetry/metrics.js';
