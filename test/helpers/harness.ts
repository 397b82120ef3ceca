import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { dynamoBackend } from '../../shared/backends/dynamodb/dynamodb-backend.js';
import type { Clock } from '../../shared/clock.js';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import type { JobDefinition } from '../../shared/job/job-definition.js';
import { createJobHandler } from '../../shared/job/lambda-handler.js';
import type { RunOptions, SlotBackend } from '../../shared/job/run-slot.js';
import type { Log } from '../../shared/telemetry/log.js';
import { emfMetrics } from '../../shared/telemetry/metrics.js';

export const TEST_SECRET = 'test-secret-0123456789abcdef';

/** The EMF lines a handler wrote, parsed, with the sum of each metric across them. */
export class EmfRecorder {
  readonly records: Record<string, unknown>[] = [];
  readonly write = (line: string) => {
    this.records.push(JSON.parse(line) as Record<string, unknown>);
  };
  sum(metric: string): number {
    return this.records.reduce(
      (total, r) => total + (typeof r[metric] === 'number' ? (r[metric] as number) : 0),
      0,
    );
  }
  /** Records that carry `metric`. */
  withMetric(metric: string): Record<string, unknown>[] {
    return this.records.filter((r) => metric in r);
  }
}

/** A log that keeps its lines, so tests can assert what an operator would read. */
export class RecordingLog implements Log {
  readonly lines: { level: string; message: string; fields: Record<string, unknown> }[] = [];
  info(message: string, fields: Record<string, unknown> = {}) {
    this.lines.push({ level: 'info', message, fields });
  }
  warn(message: string, fields: Record<string, unknown> = {}) {
    this.lines.push({ level: 'warn', message, fields });
  }
  error(message: string, fields: Record<string, unknown> = {}) {
    this.lines.push({ level: 'error', message, fields });
  }
  text(): string {
    return this.lines.map((l) => `${l.level} ${l.message} ${JSON.stringify(l.fields)}`).join('\n');
  }
}

export function testBackend(
  client: DynamoDBClient,
  tableName: string,
  returnOldOnConflict = true,
): SlotBackend {
  return dynamoBackend({ client, tableName, hashKey: hmacEffectKeys(TEST_SECRET), returnOldOnConflict });
}

/** A handler for `job` against `backend` that records its metrics and logs. */
export function testHandler(
  job: JobDefinition,
  backend: SlotBackend,
  options: { clock?: Clock; run?: RunOptions; emf?: EmfRecorder; log?: RecordingLog } = {},
) {
  const emf = options.emf ?? new EmfRecorder();
  const log = options.log ?? new RecordingLog();
  const handler = createJobHandler(job, {
    backend,
    metrics: () => emfMetrics({ jobId: job.id, write: emf.write }),
    log,
    ...(options.clock ? { clock: options.clock } : {}),
    ...(options.run ? { options: options.run } : {}),
  });
  return { handler, emf, log };
}

/** The event EventBridge Scheduler delivers for one window. */
export function schedulerEvent(
  jobId: string,
  scheduledTime: string,
  attemptNumber = 1,
  executionId?: string,
) {
  return {
    jobId,
    scheduledTime,
    executionId: executionId ?? `exec-${scheduledTime}-${attemptNumber}`,
    attemptNumber: String(attemptNumber),
  };
}
