import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { DynamoDBPersistenceLayer } from '@aws-lambda-powertools/idempotency/dynamodb';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { weeklyReportJob } from '../functions/weekly-report/job.js';
import { syntheticCustomerSource, syntheticCustomers } from '../functions/weekly-report/recipients.js';
import { dynamoBackend } from '../shared/backends/dynamodb/dynamodb-backend.js';
import { drainConcurrently } from '../shared/effects/concurrent-drain.js';
import { hmacEffectKeys } from '../shared/effects/effect-key.js';
import type { EmailMessage } from '../shared/effects/email-sender.js';
import { createJobHandler } from '../shared/job/lambda-handler.js';
import { silentLog } from '../shared/telemetry/log.js';
import { emfMetrics } from '../shared/telemetry/metrics.js';
import type { RequestMeter } from './request-meter.js';
import { latencySender } from './variants.js';

/** What finishing one window over several runs cost one variant. */
export interface ContinuationRow {
  readonly variant: string;
  readonly runs: number;
  readonly requests: number;
  readonly writeUnits: number;
  readonly sends: number;
}

export interface ContinuationBenchOptions {
  readonly client: DynamoDBClient;
  readonly meter: RequestMeter;
  readonly claimsTable: string;
  readonly powertoolsTable: string;
  readonly window: () => string;
  readonly recipients: number;
  /** The window is finished in this many runs: each run's Lambda time ends after recipients / runs sends. */
  readonly runs: number;
  readonly latencyMs: number;
}

/**
 * A window too big for one Lambda run, finished over `runs` runs: each run's time ends after its
 * share of sends, as a 900-second Lambda's does, and the next run carries on. slotguard with a
 * resumable list reads on from its checkpoint; with a plain list it walks the list again, skipping
 * what is done at one conditional write each; a per-send idempotency wrapper (Powertools) has no
 * checkpoint either, and pays its own lookup for every recipient an earlier run sent.
 */
export async function windowOverRuns(o: ContinuationBenchOptions): Promise<ContinuationRow[]> {
  const perRun = Math.ceil(o.recipients / o.runs);
  const rows: ContinuationRow[] = [];
  const backend = dynamoBackend({
    client: o.client,
    tableName: o.claimsTable,
    hashKey: hmacEffectKeys('bench-secret-0123456789abcdef'),
  });
  for (const resumable of [true, false]) {
    const counted = latencySender(o.latencyMs);
    const customers = () =>
      resumable ? syntheticCustomerSource(o.recipients) : syntheticCustomers(o.recipients);
    const job = weeklyReportJob({ customers, sender: counted.sender });
    const handler = createJobHandler(job, {
      backend,
      metrics: () => emfMetrics({ jobId: job.id, write: () => {} }),
      log: silentLog,
    });
    const window = o.window();
    o.meter.reset();
    let runs = 0;
    for (let status = 'yielded'; status === 'yielded' && runs < 4 * o.runs; runs++) {
      const before = counted.sends();
      const result = await handler(
        {
          jobId: job.id,
          scheduledTime: window,
          attemptNumber: '1',
          ...(runs > 0 ? { continuation: true } : {}),
        },
        {
          awsRequestId: `run-${runs}`,
          getRemainingTimeInMillis: () => (counted.sends() - before >= perRun ? 0 : 900_000),
        },
      );
      status = result.status;
    }
    rows.push({
      variant: resumable ? 'slotguard, resumable list' : 'slotguard, plain list',
      runs,
      requests: o.meter.requests(),
      writeUnits: o.meter.writeUnits(),
      sends: counted.sends(),
    });
  }
  rows.push(await powertoolsOverRuns(o, perRun));
  return rows;
}

async function powertoolsOverRuns(o: ContinuationBenchOptions, perRun: number): Promise<ContinuationRow> {
  const persistenceStore = new DynamoDBPersistenceLayer({
    tableName: o.powertoolsTable,
    awsSdkV3Client: o.client,
  });
  const counted = latencySender(o.latencyMs);
  const window = o.window();
  o.meter.reset();
  let runs = 0;
  while (counted.sends() < o.recipients && runs < 4 * o.runs) {
    runs++;
    const before = counted.sends();
    const config = new IdempotencyConfig({ eventKeyJmesPath: '[window, to]' });
    config.registerLambdaContext({ getRemainingTimeInMillis: () => 900_000 } as Parameters<
      IdempotencyConfig['registerLambdaContext']
    >[0]);
    const send = makeIdempotent(
      async (message: EmailMessage & { window: string }) => {
        await counted.sender.send(message);
        return true;
      },
      { persistenceStore, config },
    );
    await drainConcurrently(
      syntheticCustomers(o.recipients),
      16,
      async (c) => {
        await send({ window, to: c.email, subject: 'Your weekly report', text: '…' }).catch(() => {});
      },
      () => counted.sends() - before >= perRun,
    );
  }
  return {
    variant: 'Powertools idempotency, plain list',
    runs,
    requests: o.meter.requests(),
    writeUnits: o.meter.writeUnits(),
    sends: counted.sends(),
  };
}
