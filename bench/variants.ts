import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { DynamoDBPersistenceLayer } from '@aws-lambda-powertools/idempotency/dynamodb';
import { CreateTableCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { weeklyReportJob } from '../functions/weekly-report/job.js';
import { syntheticCustomers } from '../functions/weekly-report/recipients.js';
import { dynamoBackend } from '../shared/backends/dynamodb/dynamodb-backend.js';
import { drainConcurrently } from '../shared/effects/concurrent-drain.js';
import { hmacEffectKeys } from '../shared/effects/effect-key.js';
import type { EmailMessage, EmailSender } from '../shared/effects/email-sender.js';
import { createJobHandler } from '../shared/job/lambda-handler.js';
import { silentLog } from '../shared/telemetry/log.js';
import { emfMetrics } from '../shared/telemetry/metrics.js';
import { machineCpuMs } from './machine-cpu.js';
import type { RequestMeter } from './request-meter.js';

/** One way of running the weekly report's fan-out for one window. */
export interface Variant {
  readonly name: string;
  /** The claims table a slotguard variant keeps its slot items in; undefined for the others. */
  readonly claimsTable?: string;
  /** Runs one fire of `window` over `recipients` customers at `concurrency`. */
  fire(window: string, recipients: number, concurrency: number, sender: EmailSender): Promise<void>;
}

/** What one measured run cost and how long it took. */
export interface Measured {
  readonly requests: number;
  readonly writeUnits: number;
  readonly readUnits: number;
  readonly sends: number;
  readonly seconds: number;
  /** CPU time of this process over the run: the variant's code and the embedded DynamoDB's thread. */
  readonly cpuSeconds: number;
  /** CPU time of every process on the machine over the run, others' included. */
  readonly machineCpuSeconds: number;
  /** The run's DynamoDB write round trips in ms, median and 90th percentile (NaN when it wrote nothing). */
  readonly writeMs: { readonly p50: number; readonly p90: number };
}

/** Runs `run` with a fresh `latencyMs` sender, counting its requests from a reset `meter`. */
export async function measureFire(
  meter: RequestMeter,
  latencyMs: number,
  run: (sender: EmailSender) => Promise<void>,
): Promise<Measured> {
  const counted = latencySender(latencyMs);
  meter.reset();
  const cpu = process.cpuUsage();
  const machine = machineCpuMs();
  const started = performance.now();
  await run(counted.sender);
  const seconds = (performance.now() - started) / 1000;
  const { user, system } = process.cpuUsage(cpu);
  return {
    requests: meter.requests(),
    writeUnits: meter.writeUnits(),
    readUnits: meter.readUnits(),
    sends: counted.sends(),
    seconds,
    cpuSeconds: (user + system) / 1e6,
    machineCpuSeconds: (machineCpuMs() - machine) / 1000,
    writeMs: { p50: percentile(meter.writeMs(), 50), p90: percentile(meter.writeMs(), 90) },
  };
}

/** The `p`th percentile of `values` (nearest rank); NaN for none. */
export function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)] ?? Number.NaN;
}

/** The middle value (the lower of the two middle ones for an even count); NaN for none. */
export const median = (values: readonly number[]): number => percentile(values, 50);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A sender that takes a fixed time, like an SES call, and counts what it sent. */
export function latencySender(latencyMs: number) {
  let sends = 0;
  const sender: EmailSender = {
    async send(_message: EmailMessage) {
      await sleep(latencyMs);
      sends++;
    },
  };
  return { sender, sends: () => sends };
}

/** The send loop as the incident's app ran it: no guard at all. */
export const unguardedLoop: Variant = {
  name: 'unguarded loop',
  async fire(_window, recipients, concurrency, sender) {
    await drainConcurrently(syntheticCustomers(recipients), concurrency, (c) =>
      sender.send({ to: c.email, subject: 'Your weekly report', text: '…' }),
    );
  },
};

export interface SlotguardVariantOptions {
  /**
   * Each effect worker reserves its next recipient while its current send is in flight
   * (RunOptions.reserveAhead).
   * @default false
   */
  readonly reserveAhead?: boolean;
}

/**
 * slotguard: one slot claim per fire, one reservation per recipient, and the done marks on the slot
 * item, written with the run's checkpoint (one UpdateItem per 25 performed effects or per second).
 */
export function slotguard(
  client: DynamoDBClient,
  tableName: string,
  { reserveAhead = false }: SlotguardVariantOptions = {},
): Variant {
  const backend = dynamoBackend({
    client,
    tableName,
    hashKey: hmacEffectKeys('bench-secret-0123456789abcdef'),
  });
  return {
    name: reserveAhead ? 'slotguard, reserve-ahead' : 'slotguard',
    claimsTable: tableName,
    async fire(window, recipients, concurrency, sender) {
      const job = weeklyReportJob({ customers: () => syntheticCustomers(recipients), sender });
      const handler = createJobHandler(job, {
        backend,
        metrics: () => emfMetrics({ jobId: job.id, write: () => {} }),
        log: silentLog,
        options: { effectConcurrency: concurrency, reserveAhead },
      });
      await handler({ jobId: job.id, scheduledTime: window, attemptNumber: '1' });
    },
  };
}

/**
 * What a team would otherwise reach for: Powertools for AWS Lambda's idempotency utility wrapping
 * each send, keyed by window and recipient. It has no notion of a slot, so every fire walks the
 * whole list, and a record left IN_PROGRESS past its expiry is run again rather than reported.
 */
export function powertoolsIdempotency(client: DynamoDBClient, tableName: string): Variant {
  const persistenceStore = new DynamoDBPersistenceLayer({ tableName, awsSdkV3Client: client });
  return {
    name: 'Powertools idempotency',
    async fire(window, recipients, concurrency, sender) {
      const config = new IdempotencyConfig({ eventKeyJmesPath: '[window, to]' });
      // As in a Lambda: the in-progress expiry is the invocation's remaining time.
      config.registerLambdaContext({ getRemainingTimeInMillis: () => 900_000 } as Parameters<
        IdempotencyConfig['registerLambdaContext']
      >[0]);
      const send = makeIdempotent(
        async (message: EmailMessage & { window: string }) => {
          await sender.send(message);
          return true;
        },
        { persistenceStore, config },
      );
      await drainConcurrently(syntheticCustomers(recipients), concurrency, async (c) => {
        try {
          await send({ window, to: c.email, subject: 'Your weekly report', text: '…' });
        } catch {
          // Another fire holds this recipient IN_PROGRESS: Powertools refuses; nothing is sent.
        }
      });
    },
  };
}

/** The table Powertools' persistence layer expects: partition key `id`. */
export async function createPowertoolsTable(client: DynamoDBClient, tableName: string): Promise<void> {
  await client.send(
    new CreateTableCommand({
      TableName: tableName,
      BillingMode: 'PAY_PER_REQUEST',
      KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
      AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }],
    }),
  );
}
