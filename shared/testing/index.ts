/**
 * `slotguard/testing`: unit-test your own jobs without a server. `runJobOnce` runs a job's handler
 * for one window against an in-memory backend with the same claim and ledger semantics as the
 * DynamoDB one; `RecordingEmailSender` stands in for SES and counts what each recipient got;
 * `ManualClock` lets a test move time to renew or expire a lease. One re-export per public name.
 */
export {
  type MemoryBackend,
  type MemoryBackendOptions,
  memoryBackend,
} from '../backends/memory/memory-backend.js';
export { MemoryTable } from '../backends/memory/memory-table.js';
export {
  InProcessEventSource,
  type InProcessEventSourceOptions,
  type InvocationReport,
} from '../continuation/in-process-event-source.js';
export {
  type DeadLetter,
  InProcessWorkQueue,
  type InProcessWorkQueueOptions,
  type QueueCounts,
} from '../continuation/in-process-work-queue.js';
export { ManualClock, settle } from './manual-clock.js';
export { EmfRecorder, type RecordedLogLine, RecordingLog } from './recorders.js';
export { RecordingEmailSender } from './recording-email-sender.js';
export {
  type JobRunReport,
  type RunJobOnceOptions,
  runJobOnce,
  schedulerEvent,
  testBackend,
} from './run-job-once.js';
