/**
 * `slotguard/cdk`: the CDK constructs. A `ScheduledJob` per job (schedule, work queue, function
 * bundled from your handler with the local esbuild, dead-letter queue, alarms, and for a job that
 * sends through SES its configuration set), a `ClaimsTable` (DynamoDB) or `PostgresClaims` for their
 * claims, the `SlotguardWatchdog` and `SesEventRecorder` each backend gets, a
 * `SlotguardDashboard` over them, and `SlotguardStacks` to spread many jobs over stacks with one
 * table and one effect-key secret. aws-cdk-lib and constructs are peer dependencies: the app's own
 * copies are used.
 *
 * One re-export per public name, so adding a name is one line.
 * @example
 * import { ClaimsTable, ScheduledJob } from 'slotguard/cdk';
 */

export type { CatchUpPolicy, JobSpec, ScheduleSpec } from '../shared/job/job-spec.js';
export type { ClaimsBackend, ClaimsBackendFunctionOptions } from './claims-backend.js';
export {
  CLAIMS_TABLE_ACTIONS,
  CLAIMS_TABLE_DONE_MARKS_ACTIONS,
  CLAIMS_TABLE_DONE_MARKS_ATTRIBUTES,
  CLAIMS_TABLE_IN_DOUBT_CONFIRMER_ACTIONS,
  CLAIMS_TABLE_PROVIDER_WORD_ACTIONS,
  ClaimsTable,
  type ClaimsTableProps,
} from './claims-table.js';
export { CLOUDFORMATION_STACK_LIMITS } from './cloudformation-limits.js';
export {
  effectKeySecretReference,
  namedEffectKeySecret,
  sharedEffectKeySecret,
} from './effect-key-secret.js';
export { InfraValidationError } from './infra-validation-error.js';
export { ALARM_PAGING, type AlarmKey, DASHBOARD_ONLY } from './paging.js';
export {
  DATABASE_USER_PATTERN,
  LAMBDA_RUNTIME_CA_BUNDLE,
  PostgresClaims,
  type PostgresClaimsProps,
  PostgresEndpoint,
  type PostgresHostOptions,
} from './postgres-claims.js';
export { rateAsUtcCron } from './rate-as-cron.js';
export {
  ScheduledJob,
  type ScheduledJobAlarms,
  type ScheduledJobProps,
  type ScheduleRetryPolicy,
  type SesSendingProps,
  workQueueMaxReceiveCount,
} from './scheduled-job.js';
export {
  type RecordedJob,
  SES_EVENT_RECORDER_MODULE,
  SesEventRecorder,
  type SesEventRecorderProps,
} from './ses-event-recorder.js';
export { SlotguardDashboard, type SlotguardDashboardProps } from './slotguard-dashboard.js';
export type { SlotguardServiceFunctionProps } from './slotguard-function.js';
export {
  jobStackNumber,
  type SlotguardJobProps,
  SlotguardStacks,
  type SlotguardStacksProps,
} from './slotguard-stacks.js';
export {
  JOBS_PER_STOPPED_ALARM,
  SlotguardWatchdog,
  type SlotguardWatchdogProps,
  WATCHDOG_RATE,
  type WatchedJob,
} from './slotguard-watchdog.js';
