import {
  DescribeTableCommand,
  InternalServerError,
  ProvisionedThroughputExceededException,
} from '@aws-sdk/client-dynamodb';
import { describe, expect, it, onTestFinished } from 'vitest';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import { startSmtpSink } from '../../local/smtp-sink.js';
import { smtpSender } from '../../shared/effects/smtp-email-sender.js';
import { useDynamo } from '../helpers/dynalite.js';
import { schedulerEvent, testBackend, testHandler } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { describeFaultMatrix, LEASE_MS } from './fault-matrix.js';

const dynamo = useDynamo();
/** The seed of the injected store faults; FAULT_SEED replays a run. */
const SEED = Number(process.env.FAULT_SEED ?? Date.now() % 100_000);

describeFaultMatrix({
  name: 'dynamodb',
  leaseClock: 'caller',
  async freshStore() {
    const table = await dynamo.freshTable('faults');
    const { hostname, port } = new URL(dynamo.endpoint);
    return {
      name: table,
      address: { host: hostname, port: Number(port) },
      replicaStore: (via) => ({
        backend: 'dynamodb',
        endpoint: via ? `http://${via.host}:${via.port}` : dynamo.endpoint,
        table,
      }),
      backend: testBackend(dynamo.client(), table),
      // A claimer takes over once its own clock passes the lease end the holder wrote by the
      // holder's clock: the survivor's clock is put past it instead of anyone waiting.
      expireLease: async (_slot, holderSkewMs) => new ManualClock(Date.now() + holderSkewMs + 2 * LEASE_MS),
    };
  },
  storeFaults: {
    // Injected inside the child's SDK client, under its retry middleware: the production retry
    // policy handles them as it would DynamoDB's own.
    replica: { faults: 'throttle:0.1,server-error:0.05,lost-reply:0.03', faultSeed: SEED },
    seed: SEED,
    describe: (exit) =>
      `seed ${SEED}: of ${exit.faults?.requests} requests, ${exit.faults?.throttled} throttled, ` +
      `${exit.faults?.serverErrors} 500s, ${exit.faults?.lostReplies} replies lost after the write`,
  },
  async burstRetryTimes(clients) {
    const table = await dynamo.freshTable('burst');
    const burst = performance.now();
    return Promise.all(
      Array.from({ length: clients }, async () => {
        const client = dynamo.client();
        const attempts: number[] = [];
        // Every client's request is throttled twice, then fails with a 500, then is served: the
        // instant of each attempt is recorded inside the SDK's retry loop.
        client.middlewareStack.add(
          (next) => async (args) => {
            attempts.push(performance.now() - burst);
            if (attempts.length <= 2) {
              throw new ProvisionedThroughputExceededException({
                message: 'injected: a burst of throttling',
                $metadata: { httpStatusCode: 400 },
              });
            }
            if (attempts.length === 3) {
              throw new InternalServerError({
                message: 'injected: a 500',
                $metadata: { httpStatusCode: 500 },
              });
            }
            return next(args);
          },
          { step: 'finalizeRequest', priority: 'low', name: 'faultMatrixBurst' },
        );
        await client.send(new DescribeTableCommand({ TableName: table }));
        return attempts;
      }),
    );
  },
  streamRecipients: 12_000,
});

describe('DynamoDB: a correlated burst of 500s', () => {
  // The SDK's standard retry strategy has a client-wide retry quota (500 tokens, 14 per retry of a
  // 5xx) that ran dry when effectConcurrency requests failed together: from then on nothing was
  // retried, whatever maxAttempts said, and a 500 ms burst stopped the run. createDynamoClient now
  // uses JitteredRetryStrategy, which has no such quota and whose 8 attempts span at least 3,175 ms.
  it('rides out a 500 ms burst of 500s at effect concurrency 16 and completes with the same counts', async () => {
    const table = await dynamo.freshTable('burst');
    const client = dynamo.client();
    const sink = await startSmtpSink();
    const smtp = smtpSender({ host: sink.host, port: sink.port });
    onTestFinished(async () => {
      smtp.close();
      await sink.close();
    });
    let burstFrom = Number.POSITIVE_INFINITY;
    let failedAttempts = 0;
    client.middlewareStack.add(
      (next) => async (args) => {
        const now = performance.now();
        if (now >= burstFrom && now < burstFrom + 500) {
          failedAttempts++;
          throw new InternalServerError({
            message: 'injected: a burst of 500s',
            $metadata: { httpStatusCode: 500 },
          });
        }
        return next(args);
      },
      { step: 'finalizeRequest', priority: 'low', name: 'faultMatrixBurstOf500s' },
    );
    let sent = 0;
    const { handler } = testHandler(
      weeklyReportJob({
        customers: () => syntheticCustomers(2_000),
        sender: {
          async send(message, options) {
            await smtp.send(message, options);
            // The burst starts the moment the 500th email is accepted, mid-run.
            if (++sent === 500) burstFrom = performance.now();
          },
        },
        concurrency: 16,
      }),
      testBackend(client, table),
    );
    const window = new Date(Math.floor(Date.now() / 60_000) * 60_000).toISOString().replace('.000Z', 'Z');
    const result = await handler(schedulerEvent('weekly-report', window)).catch((error: unknown) => ({
      status: 'threw',
      error: error instanceof Error ? error.message : String(error),
    }));
    console.info(
      `[dynamodb] burst of 500s for 500 ms at concurrency 16: ${failedAttempts} attempts failed; run ${result.status}` +
        `${'summary' in result ? ` (done ${result.summary.done})` : ''}${'error' in result ? ` (${result.error.slice(0, 90)})` : ''}; ` +
        `sink ${sink.total()} emails`,
    );
    expect(result).toMatchObject({ status: 'completed', summary: { done: 2_000, inDoubt: 0 } });
    expect(sink.total()).toBe(2_000);
  });
});
