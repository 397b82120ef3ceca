import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { dynamoBackend } from '../../shared/backends/dynamodb/dynamodb-backend.js';
import type { Clock } from '../../shared/clock.js';
import { type EffectKeyRing, hmacEffectKeys } from '../../shared/effects/effect-key.js';
import type { JobDefinition } from '../../shared/job/job-definition.js';
import { createJobHandler } from '../../shared/job/lambda-handler.js';
import type { RunOptions, SlotBackend } from '../../shared/job/run-slot.js';
import { emfMetrics } from '../../shared/telemetry/metrics.js';
import { EmfRecorder, RecordingLog } from '../../shared/testing/recorders.js';

export const TEST_SECRET = 'test-secret-0123456789abcdef';

// One copy of each: slotguard/testing ships them to users.
export { EmfRecorder, RecordingLog } from '../../shared/testing/recorders.js';
export { schedulerEvent } from '../../shared/testing/run-job-once.js';

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
  options: {
    clock?: Clock;
    run?: RunOptions;
    emf?: EmfRecorder;
    log?: RecordingLog;
    keyRing?: EffectKeyRing;
  } = {},
) {
  const emf = options.emf ?? new EmfRecorder();
  const log = options.log ?? new RecordingLog();
  const handler = createJobHandler(job, {
    backend,
    metrics: () => emfMetrics({ jobId: job.id, write: emf.write }),
    log,
    ...(options.clock ? { clock: options.clock } : {}),
    ...(options.run ? { options: options.run } : {}),
    ...(options.keyRing ? { keyRing: options.keyRing } : {}),
  });
  return { handler, emf, log };
}
