/**
 * One warm Lambda container of the weekly report, as a real process, for the shards benchmark
 * (bench/shards.ts), and the bench's handle on it. Both sides of the contract live here.
 *
 * The bench's process holds the job's work queue and Lambda's event source (in process, as the
 * local runner does); each invocation the event source makes is handed to a free worker over IPC
 * with the SQS event and the time it has left, and the worker runs the deployed handler
 * (createJobHandler) on it and answers with the batch response. The handler's own queue calls (the
 * coordinator's shard messages, one call per batch, visibility heartbeats, retry delays) come back
 * over IPC to the queue. So each shard's work (claims, reservations, sends, checkpoints) runs in a
 * process of its own, against a store outside it, and the queue costs the workers nothing they
 * would not pay SQS.
 *
 * A send is a fixed wait (`sendMs`, a stand-in for an SES call); each worker reports the customers
 * it sent to, so the bench counts every customer's emails itself. Each worker counts its own
 * DynamoDB requests (at the wire, retries included) or Postgres statements (BEGIN and COMMIT
 * included: every round trip), and reports its peak RSS and CPU time when the bench finishes it.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type {
  SqsBatchResponse,
  SqsEvent,
  VisibilityOutcome,
  WorkQueue,
} from '../shared/continuation/work-queue.js';
import type { ReplicaStore } from '../test/helpers/replica-process.js';

/** How every worker of a measurement runs the job. */
export interface ShardWorkerConfig {
  readonly store: ReplicaStore;
  /** Names the worker in logs and its Postgres application_name. */
  readonly name: string;
  /** Customers in the window. */
  readonly total: number;
  /** Emails in flight per invocation (the job's effectConcurrency). */
  readonly concurrency: number;
  /** How long each send takes. */
  readonly sendMs: number;
  /** The job's RunOptions.shards. */
  readonly shards: number;
}

/** What a worker used, over every invocation it ran. */
export interface WorkerUsage {
  /** Peak resident set over the worker's life. */
  readonly maxRssBytes: number;
  /** CPU time since the worker was warm. */
  readonly cpuMs: number;
  /** DynamoDB requests, or Postgres statements. */
  readonly requests: number;
  readonly invocations: number;
}

type ToWorker =
  | { readonly kind: 'invoke'; readonly id: number; readonly event: SqsEvent; readonly remainingMs: number }
  | {
      readonly kind: 'queue-answer';
      readonly id: number;
      readonly outcome?: VisibilityOutcome;
      readonly error?: string;
    }
  | { readonly kind: 'finish' };

type FromWorker =
  | { readonly kind: 'ready' }
  | {
      readonly kind: 'queue';
      readonly id: number;
      readonly op: 'send';
      readonly body: string;
      readonly delayMs: number;
    }
  | {
      readonly kind: 'queue';
      readonly id: number;
      readonly op: 'sendBatch';
      readonly bodies: readonly string[];
      readonly delayMs: number;
    }
  | {
      readonly kind: 'queue';
      readonly id: number;
      readonly op: 'changeVisibility';
      readonly receiptHandle: string;
      readonly visibleInMs: number;
    }
  | { readonly kind: 'delivered'; readonly customers: readonly number[] }
  | { readonly kind: 'log'; readonly level: string; readonly message: string }
  | {
      readonly kind: 'answer';
      readonly id: number;
      readonly response?: SqsBatchResponse;
      readonly error?: string;
    }
  | { readonly kind: 'usage'; readonly usage: WorkerUsage };

/** The bench's handle on one worker process. */
export interface ShardWorker {
  readonly name: string;
  readonly pid: number;
  /** Runs one invocation; rejects as Lambda's invocation fails when the handler throws. */
  invoke(event: SqsEvent, remainingMs: number): Promise<SqsBatchResponse>;
  /** Ends the worker once its invocations are over, with what it used. */
  finish(): Promise<WorkerUsage>;
}

const SCRIPT = fileURLToPath(import.meta.url);
const CONFIG_ENV = 'SLOTGUARD_SHARD_WORKER';

/**
 * Starts a worker and resolves once it is warm (its modules loaded, its store client made): a warm
 * container, so no measurement counts a cold start.
 */
export async function startShardWorker(
  config: ShardWorkerConfig,
  parent: {
    readonly queue: WorkQueue;
    readonly delivered: (customers: readonly number[]) => void;
    readonly log: (line: string) => void;
  },
): Promise<ShardWorker> {
  const child: ChildProcess = fork(SCRIPT, [], {
    execArgv: ['--conditions=slotguard-source', '--import', 'tsx'],
    env: { ...process.env, [CONFIG_ENV]: JSON.stringify(config) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const answers = new Map<number, { resolve: (r: SqsBatchResponse) => void; reject: (e: Error) => void }>();
  let usage: ((usage: WorkerUsage) => void) | undefined;
  let ready: () => void = () => {};
  let exited: (error: Error) => void = () => {};
  const started = new Promise<void>((resolveReady, reject) => {
    ready = resolveReady;
    exited = reject;
  });
  const send = (message: ToWorker) => child.send(message);
  child.on('message', (raw) => {
    const message = raw as FromWorker;
    switch (message.kind) {
      case 'ready':
        ready();
        break;
      case 'queue': {
        const done =
          message.op === 'send'
            ? parent.queue.send(message.body, message.delayMs).then(() => undefined)
            : message.op === 'sendBatch'
              ? parent.queue.sendBatch(message.bodies, message.delayMs).then(() => undefined)
              : parent.queue.changeVisibility(message.receiptHandle, message.visibleInMs);
        done.then(
          (outcome) => send({ kind: 'queue-answer', id: message.id, ...(outcome ? { outcome } : {}) }),
          (error: unknown) => send({ kind: 'queue-answer', id: message.id, error: String(error) }),
        );
        break;
      }
      case 'delivered':
        parent.delivered(message.customers);
        break;
      case 'log':
        parent.log(`${config.name} ${message.level}: ${message.message}`);
        break;
      case 'answer': {
        const answer = answers.get(message.id);
        answers.delete(message.id);
        if (message.error !== undefined) answer?.reject(new Error(message.error));
        else answer?.resolve(message.response ?? { batchItemFailures: [] });
        break;
      }
      case 'usage':
        usage?.(message.usage);
        break;
      default:
        message satisfies never;
    }
  });
  child.on('exit', (code, signal) => {
    const error = new Error(`shard worker ${config.name} exited (${signal ?? `exit code ${code}`})`);
    exited(error);
    for (const answer of answers.values()) answer.reject(error);
    answers.clear();
  });
  await started;
  let nextId = 0;
  return {
    name: config.name,
    pid: child.pid ?? 0,
    invoke(event, remainingMs) {
      const id = ++nextId;
      return new Promise<SqsBatchResponse>((resolveAnswer, reject) => {
        answers.set(id, { resolve: resolveAnswer, reject });
        send({ kind: 'invoke', id, event, remainingMs });
      });
    },
    finish() {
      return new Promise<WorkerUsage>((resolveUsage) => {
        usage = resolveUsage;
        send({ kind: 'finish' });
      });
    },
  };
}

/** The customer number in a synthetic customer's address (`customer-c000042@example.com` is 42). */
export function customerNumberOf(address: string): number {
  const match = /^customer-c(\d+)@/.exec(address);
  if (!match) throw new RangeError(`${JSON.stringify(address)} is not a synthetic customer's address`);
  return Number(match[1]);
}

/** The child: one handler, warm, invoked over IPC until told to finish. */
async function runWorker(): Promise<void> {
  const { weeklyReportJob } = await import('../functions/weekly-report/job.js');
  const { syntheticCustomerSource } = await import('../functions/weekly-report/recipients.js');
  const { systemClock } = await import('../shared/clock.js');
  const { createJobHandler } = await import('../shared/job/lambda-handler.js');
  const { emfMetrics } = await import('../shared/telemetry/metrics.js');

  const config = JSON.parse(process.env[CONFIG_ENV] ?? 'null') as ShardWorkerConfig | null;
  if (!config) throw new Error(`shard-worker needs ${CONFIG_ENV} in its environment`);
  const post = (message: FromWorker) => process.send?.(message);
  const store = await openMeteredStore(config);

  // Customers sent to, reported in batches: the bench counts every customer's emails.
  let delivered: number[] = [];
  const flush = () => {
    if (delivered.length === 0) return;
    post({ kind: 'delivered', customers: delivered });
    delivered = [];
  };
  const queueAnswers = new Map<
    number,
    { resolve: (o: VisibilityOutcome | undefined) => void; reject: (e: Error) => void }
  >();
  let nextQueueId = 0;
  const askQueue = (
    request:
      | { readonly op: 'send'; readonly body: string; readonly delayMs: number }
      | { readonly op: 'sendBatch'; readonly bodies: readonly string[]; readonly delayMs: number }
      | { readonly op: 'changeVisibility'; readonly receiptHandle: string; readonly visibleInMs: number },
  ) =>
    new Promise<VisibilityOutcome | undefined>((resolveAnswer, reject) => {
      const id = ++nextQueueId;
      queueAnswers.set(id, { resolve: resolveAnswer, reject });
      post({ kind: 'queue', id, ...request });
    });
  const workQueue: WorkQueue = {
    async send(body, delayMs) {
      await askQueue({ op: 'send', body, delayMs });
    },
    // One IPC round trip per batch, as SQS makes one request of it.
    async sendBatch(bodies, delayMs) {
      await askQueue({ op: 'sendBatch', bodies, delayMs });
    },
    async changeVisibility(receiptHandle, visibleInMs) {
      return (await askQueue({ op: 'changeVisibility', receiptHandle, visibleInMs })) ?? 'not-in-flight';
    },
  };

  const handler = createJobHandler(
    weeklyReportJob({
      customers: () => syntheticCustomerSource(config.total),
      sender: {
        async send(message) {
          await sleep(config.sendMs);
          delivered.push(customerNumberOf(message.to));
          if (delivered.length >= 1_000) flush();
        },
      },
    }),
    {
      backend: store.backend,
      metrics: () => emfMetrics({ jobId: 'weekly-report', write: () => {} }),
      log: {
        info() {},
        warn: (message) => post({ kind: 'log', level: 'warn', message }),
        error: (message) => post({ kind: 'log', level: 'error', message }),
      },
      clock: systemClock,
      options: { effectConcurrency: config.concurrency, shards: config.shards },
      workQueue,
    },
  );

  // CPU is counted from here: loading and compiling the modules is the cold start, not the work.
  const warm = process.cpuUsage();
  let invocations = 0;
  process.on('message', (raw) => {
    const message = raw as ToWorker;
    switch (message.kind) {
      case 'invoke': {
        invocations++;
        const endsAt = Date.now() + message.remainingMs;
        handler(message.event, {
          awsRequestId: `${config.name}-${invocations}`,
          getRemainingTimeInMillis: () => endsAt - Date.now(),
        }).then(
          (response) => {
            // What was sent is with the bench before the invocation's answer is.
            flush();
            post({ kind: 'answer', id: message.id, response: response as SqsBatchResponse });
          },
          (error: unknown) => {
            flush();
            post({
              kind: 'answer',
              id: message.id,
              error: error instanceof Error ? error.message : String(error),
            });
          },
        );
        break;
      }
      case 'queue-answer': {
        const answer = queueAnswers.get(message.id);
        queueAnswers.delete(message.id);
        if (message.error !== undefined) answer?.reject(new Error(message.error));
        else answer?.resolve(message.outcome);
        break;
      }
      case 'finish': {
        flush();
        void store.close().then(() => {
          const cpu = process.cpuUsage(warm);
          const report: FromWorker = {
            kind: 'usage',
            usage: {
              maxRssBytes: process.resourceUsage().maxRSS * 1024,
              cpuMs: Math.round((cpu.user + cpu.system) / 1000),
              requests: store.requests(),
              invocations,
            },
          };
          // The channel closes once the report is out; then nothing keeps the process alive.
          process.send?.(report, () => process.disconnect());
        });
        break;
      }
      default:
        message satisfies never;
    }
  });
  post({ kind: 'ready' });
}

/** The worker's backend, counting what it sends to the store. */
async function openMeteredStore(config: ShardWorkerConfig) {
  const { openReplicaStore } = await import('../test/helpers/replica-process.js');
  const { meterRequests } = await import('./request-meter.js');
  let requests = () => 0;
  const store = await openReplicaStore(config.store, {
    name: config.name,
    // As deployed (effectConcurrency + 1), within what eight workers may hold of the server's 300.
    poolMax: Math.min(config.concurrency + 1, 32),
    dynamoClient: (client) => {
      const meter = meterRequests(client);
      requests = () => meter.requests();
    },
    postgresPool: (pool) => {
      // Every statement is a round trip: BEGIN and COMMIT count.
      let statements = 0;
      requests = () => statements;
      pool.on('connect', (client) => {
        const query = client.query.bind(client) as (...args: unknown[]) => unknown;
        (client as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
          statements++;
          return query(...args);
        };
      });
    },
  });
  return { ...store, requests: () => requests() };
}

if (resolve(process.argv[1] ?? '') === SCRIPT) {
  runWorker().catch((error: unknown) => {
    process.stderr.write(
      `shard worker failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exit(1);
  });
}
