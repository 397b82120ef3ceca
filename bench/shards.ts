/**
 * `npm run bench:stream -- --shards 8`: one window of the weekly report, 1,000,000 recipients by
 * default, each send a fixed 50 ms, run as deployed with 1 shard and then with N, on dynalite and
 * on PostgreSQL, in one run; every customer's emails counted. Writes the rows to
 * docs/benchmarks.md's "Shards" section (which `npm run bench` keeps).
 *
 * How it runs, and why: the bench's process holds the job's work queue and Lambda's SQS event
 * source (the in-process ones the local runner uses, with ScheduledJob's visibility timeout,
 * redrive count and a maximumConcurrency of N), and N worker processes are the warm Lambda
 * containers (bench/shard-worker.ts): each invocation goes to a free worker over IPC, which runs
 * the deployed handler. So the window is split by the runtime itself (the coordinator's claim, one
 * message per shard, each shard's claims, continuations when a run's 900 s are up, the last
 * shard's finish), each shard's work runs in a process of its own, and the store runs outside
 * them all (dynalite in its own process, or embedded PostgreSQL). A fixed shard per worker would
 * skip the coordinator and the queue; the queue in one of the workers would put its dispatch on a
 * shard's event loop. The queue's work is a few messages per shard, so the bench's own CPU is small,
 * and it is reported.
 *
 * Per measurement: wall time from the schedule's message to the window's last message gone;
 * recipients per second and the ratio to 1 shard; each worker's peak RSS; DynamoDB requests or
 * Postgres statements per recipient (counted in the workers); CPU time of the workers, the store
 * and the bench, and the cores they kept busy on average, which shows what saturates.
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { arch, cpus, loadavg, totalmem } from 'node:os';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
const { InProcessEventSource } = await import('../shared/continuation/in-process-event-source.js');
const { InProcessWorkQueue } = await import('../shared/continuation/in-process-work-queue.js');
const { MAX_VISIBILITY_MS } = await import('../shared/continuation/work-queue.js');
const { SlotState } = await import('../shared/slot/ports.js');
const { windowOf } = await import('../shared/slot/slot.js');
const { schedulerEvent } = await import('../test/helpers/harness.js');
const { startShardWorker } = await import('./shard-worker.js');
const { docSection, withDocSection, wrapDocSection } = await import('./doc-section.js');
const { machineCpuMs } = await import('./machine-cpu.js');

import type { SqsBatchResponse, SqsEvent } from '../shared/continuation/work-queue.js';
import type { InvocationContext } from '../shared/job/lambda-handler.js';
import type { SlotBackend } from '../shared/job/run-slot.js';
import type { ReplicaStore } from '../test/helpers/replica-process.js';
import type { ShardWorker, WorkerUsage } from './shard-worker.js';

/** What `--shards` runs. */
export interface ShardBenchOptions {
  /** Shards of the second measurement of each backend (the first is 1). */
  readonly shards: number;
  readonly recipients: number;
  readonly backends: readonly ('dynamodb' | 'postgres')[];
  readonly sendMs: number;
  /** Emails in flight per invocation. */
  readonly concurrency: number;
  /** Lambda's time limit per invocation. */
  readonly lambdaTimeoutMs: number;
  /** The Markdown file whose "Shards" section gets the rows. */
  readonly out: string;
}

/** A store the measurements of one backend share, each on its own table or schema. */
interface StoreUnderTest {
  readonly name: 'dynamodb' | 'postgres';
  readonly description: string;
  /** The server process whose CPU time (with its children's) is the store's. */
  readonly pid: number;
  /** A fresh table or schema, and a backend on it to read the window's record with. */
  fresh(label: string): Promise<{ store: ReplicaStore; reader: SlotBackend; close(): Promise<void> }>;
  close(): Promise<void>;
}

/** One measurement: a window of `recipients` run in `shards` shards. */
interface Measurement {
  readonly store: 'dynamodb' | 'postgres';
  /** The store's name and version. */
  readonly backend: string;
  readonly shards: number;
  readonly seconds: number;
  readonly delivered: number;
  /** Customers emailed more than once, and never. */
  readonly twice: number;
  readonly never: number;
  readonly state: string;
  readonly summaryDone: number;
  readonly workers: readonly WorkerUsage[];
  readonly invocations: number;
  readonly storeCpuMs: number;
  readonly benchCpuMs: number;
  /** CPU time every process on the machine used meanwhile, this bench's and others'. */
  readonly machineCpuMs: number;
}

const JOB_ID = 'weekly-report';
/** The stores, in the order their tables appear. */
const STORES = ['dynamodb', 'postgres'] as const;
const log = (line: string) => process.stdout.write(`${line}\n`);
const n = (value: number, digits = 0) =>
  value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
const mb = (bytes: number) => `${n(bytes / 1e6)} MB`;

/**
 * Runs every measurement and checks every delivery; writes each store's table as soon as its
 * measurements are over, so a failure on the next store loses nothing.
 */
export async function runShardBench(o: ShardBenchOptions): Promise<void> {
  for (const backend of o.backends) {
    const load = loadavg()[0] ?? 0;
    const store = backend === 'dynamodb' ? await dynaliteProcess() : await embeddedPostgres();
    const measured: Measurement[] = [];
    try {
      for (const shards of [1, o.shards]) {
        const m = await measure(store, shards, o);
        measured.push(m);
        log(describe(m, o));
        if (m.delivered !== o.recipients || m.twice > 0 || m.never > 0 || m.state !== SlotState.Done) {
          throw new Error(
            `${backend} with ${shards} shards: delivered ${m.delivered}, ${m.twice} customers twice, ` +
              `${m.never} never, window ${m.state}; expected exactly ${o.recipients} deliveries and DONE`,
          );
        }
      }
    } finally {
      await store.close();
    }
    const table = storeTable(measured, o, [load, loadavg()[0] ?? 0]);
    const doc = existsSync(o.out) ? readFileSync(o.out, 'utf8') : '# Benchmarks\n';
    const section = shardsSection(docSection(doc, 'shards') ?? '', new Map([[backend, table]]));
    writeFileSync(o.out, withDocSection(doc, 'shards', section));
    log(`wrote the ${store.description} table of ${o.out}'s Shards section`);
  }
}

async function measure(store: StoreUnderTest, shards: number, o: ShardBenchOptions): Promise<Measurement> {
  const { store: where, reader, close } = await store.fresh(`s${shards}`);
  const window = windowOf(Math.floor(Date.now() / 60_000) * 60_000);
  // ScheduledJob's queue: visibility 6 × the function's timeout, redrive after 2 × runs per deadline + 50.
  const queue = new InProcessWorkQueue({
    visibilityTimeoutMs: Math.min(6 * o.lambdaTimeoutMs, MAX_VISIBILITY_MS),
    maxReceiveCount: Math.min(1000, 2 * Math.ceil((6 * 3_600_000) / o.lambdaTimeoutMs) + 50),
    name: 'bench-shards',
  });
  const emails = new Uint8Array(o.recipients + 1);
  let delivered = 0;
  const workers = await Promise.all(
    Array.from({ length: shards }, (_, i) =>
      startShardWorker(
        {
          store: where,
          name: `worker-${i + 1}`,
          total: o.recipients,
          concurrency: o.concurrency,
          sendMs: o.sendMs,
          shards,
        },
        {
          queue,
          delivered: (customers) => {
            for (const customer of customers) emails[customer] = Math.min(255, (emails[customer] ?? 0) + 1);
            delivered += customers.length;
          },
          log,
        },
      ),
    ),
  );
  const invoke = dispatcher(workers);
  const storeBefore = processTreeCpuMs(store.pid);
  const benchBefore = process.cpuUsage();
  const machineBefore = machineCpuMs();
  const started = performance.now();
  let over: () => void = () => {};
  const finished = new Promise<void>((resolve) => {
    over = resolve;
  });
  const source = new InProcessEventSource({
    queue,
    handler: invoke,
    // Every shard at once; the coordinator's invocation may still be answering when they arrive.
    maximumConcurrency: Math.max(2, shards),
    timeoutMs: o.lambdaTimeoutMs,
    name: 'bench-shards',
    onInvocation: (report) => {
      if (report.outcome !== 'returned')
        log(`  invocation ${report.requestId} ${report.outcome}: ${report.error}`);
      // The window's last message is gone: every shard finished, and the window with them.
      if (source.inFlight === 0 && queue.nextVisibleAt() === undefined) over();
    },
  });
  const progress = setInterval(() => {
    const seconds = (performance.now() - started) / 1000;
    log(
      `  ${store.name} ${shards} shard${shards > 1 ? 's' : ''}: ${n(delivered)} sent in ${n(seconds)} s (${n(delivered / seconds)}/s), ` +
        `${source.invocations} invocations`,
    );
  }, 60_000);
  await queue.send(JSON.stringify(schedulerEvent(JOB_ID, window)), 0);
  source.start();
  await finished;
  const seconds = (performance.now() - started) / 1000;
  clearInterval(progress);
  const benchCpu = process.cpuUsage(benchBefore);
  const storeCpuMs = processTreeCpuMs(store.pid) - storeBefore;
  const machineCpu = machineCpuMs() - machineBefore;
  await source.stop();
  const usage = await Promise.all(workers.map((worker) => worker.finish()));
  const record = await reader.claims.read({ jobId: JOB_ID, window });
  await close();
  let twice = 0;
  let never = 0;
  for (let customer = 1; customer <= o.recipients; customer++) {
    if (emails[customer] === 0) never++;
    else if ((emails[customer] ?? 0) > 1) twice++;
  }
  return {
    store: store.name,
    backend: store.description,
    shards,
    seconds,
    delivered,
    twice,
    never,
    state: record?.state ?? 'MISSED',
    summaryDone: record?.summary?.done ?? 0,
    workers: usage,
    invocations: source.invocations,
    storeCpuMs,
    benchCpuMs: (benchCpu.user + benchCpu.system) / 1000,
    machineCpuMs: machineCpu,
  };
}

/** Lambda's event source handing each invocation to a free warm container, as Lambda would. */
function dispatcher(workers: readonly ShardWorker[]) {
  const idle = [...workers];
  const waiting: ((worker: ShardWorker) => void)[] = [];
  return async (event: SqsEvent, context: InvocationContext): Promise<SqsBatchResponse> => {
    const worker = idle.pop() ?? (await new Promise<ShardWorker>((resolve) => waiting.push(resolve)));
    try {
      return await worker.invoke(event, context.getRemainingTimeInMillis());
    } finally {
      const next = waiting.shift();
      if (next) next(worker);
      else idle.push(worker);
    }
  };
}

/**
 * CPU time of a process and of every process under it, in ms: its own and its live descendants'
 * user and system time, plus what its children that ended left in its cutime and cstime (a
 * Postgres backend whose connection closed). Linux /proc, 100 ticks a second.
 */
export function processTreeCpuMs(root: number): number {
  const stats = new Map<number, { ppid: number; ticks: number; children: number }>();
  for (const entry of readdirSafe('/proc')) {
    const pid = Number(entry);
    if (!Number.isInteger(pid)) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      // The command name may hold spaces; the fields after its closing parenthesis do not.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const field = (index: number) => Number(fields[index - 3]);
      stats.set(pid, { ppid: field(4), ticks: field(14) + field(15), children: field(16) + field(17) });
    } catch {
      // Gone since the listing.
    }
  }
  let ticks = stats.get(root)?.children ?? 0;
  const under = [root];
  while (under.length > 0) {
    const pid = under.pop()!;
    ticks += stats.get(pid)?.ticks ?? 0;
    for (const [child, stat] of stats) if (stat.ppid === pid) under.push(child);
  }
  return ticks * 10;
}

function readdirSafe(path: string): string[] {
  try {
    return readdirSync(path);
  } catch {
    return [];
  }
}

/** dynalite in a process of its own, so its CPU is measured apart from the bench's. */
async function dynaliteProcess(): Promise<StoreUnderTest> {
  const { createDynamoClient, ensureClaimsTable } = await import(
    '../shared/backends/dynamodb/dynamodb-backend.js'
  );
  const { testBackend } = await import('../test/helpers/harness.js');
  const { DeleteTableCommand } = await import('@aws-sdk/client-dynamodb');
  const require = createRequire(import.meta.url);
  const child = spawn(
    process.execPath,
    [
      '-e',
      `const server = require(${JSON.stringify(require.resolve('dynalite'))})({ createTableMs: 0 });
       server.listen(0, '127.0.0.1', () => process.stdout.write(server.address().port + '\\n'));`,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const port = await new Promise<number>((resolve, reject) => {
    child.stdout.once('data', (chunk: Buffer) => resolve(Number(chunk.toString('utf8').trim())));
    child.once('exit', (code) => reject(new Error(`dynalite exited (code ${code}) before it listened`)));
  });
  const endpoint = `http://127.0.0.1:${port}`;
  const version = (
    JSON.parse(readFileSync(require.resolve('dynalite/package.json'), 'utf8')) as { version: string }
  ).version;
  return {
    name: 'dynamodb',
    description: `dynalite ${version}`,
    pid: child.pid ?? 0,
    async fresh(label) {
      const client = createDynamoClient({ endpoint });
      const table = `bench-shards-${label}`;
      await ensureClaimsTable(client, table);
      return {
        store: { backend: 'dynamodb', endpoint, table },
        reader: testBackend(client, table),
        // dynalite holds every item in memory: the next measurement starts from an empty server.
        close: async () => {
          await client.send(new DeleteTableCommand({ TableName: table }));
          client.destroy();
        },
      };
    },
    async close() {
      child.kill();
    },
  };
}

/** An embedded PostgreSQL server (its own processes), a fresh schema per measurement. */
async function embeddedPostgres(): Promise<StoreUnderTest> {
  const { startPostgres } = await import('../test/helpers/postgres.js');
  const server = await startPostgres({ embedded: true });
  const [pidFile] = await server.sql<{ text: string }>("SELECT pg_read_file('postmaster.pid') AS text");
  const [version] = await server.sql<{ server_version: string }>('SHOW server_version');
  return {
    name: 'postgres',
    description: `PostgreSQL ${version?.server_version ?? ''} (embedded)`.trim(),
    pid: Number(pidFile?.text.split('\n')[0]),
    async fresh(label) {
      const schema = await server.freshSchema(`bench_shards_${label}`);
      const backend = server.backend(schema);
      return {
        store: { backend: 'postgres', connectionString: server.connectionString, schema },
        reader: backend,
        close: async () => {},
      };
    },
    close: () => server.close(),
  };
}

function describe(m: Measurement, o: ShardBenchOptions): string {
  return (
    `${m.backend}, ${m.shards} shard${m.shards > 1 ? 's' : ''}: ${n(m.delivered)} delivered in ${n(m.seconds / 60, 1)} min ` +
    `(${n(o.recipients / m.seconds)}/s), ${m.twice} twice, ${m.never} never, window ${m.state}`
  );
}

/** One store's table: its 1-shard and N-shard rows, from this run. */
function storeTable(measured: readonly Measurement[], o: ShardBenchOptions, load: readonly number[]): string {
  const single = measured.find((m) => m.shards === 1);
  const rows = measured.map((m) => {
    const rate = o.recipients / m.seconds;
    const workerCpu = m.workers.reduce((sum, w) => sum + w.cpuMs, 0);
    const requests = m.workers.reduce((sum, w) => sum + w.requests, 0);
    const rss = m.workers.map((w) => w.maxRssBytes);
    const cores = (workerCpu + m.storeCpuMs + m.benchCpuMs) / 1000 / m.seconds;
    const machine = m.machineCpuMs / 1000 / m.seconds;
    return (
      `| ${m.shards} | ${n(m.seconds / 60, 1)} min | ${n(rate)} | ` +
      `${single ? `${n(rate / (o.recipients / single.seconds), 2)}×` : '-'} | ` +
      `${rss.length > 1 ? `${mb(Math.min(...rss))} – ${mb(Math.max(...rss))}` : mb(rss[0] ?? 0)} | ` +
      `${n(requests / o.recipients, 3)} | ${m.invocations} | ` +
      `${n(workerCpu / 1000, 1)} s | ${n(m.storeCpuMs / 1000, 1)} s | ${n(m.benchCpuMs / 1000, 1)} s | ${n(cores, 2)} | ` +
      `${n(machine, 2)} of ${cpus().length} | ` +
      `${n(m.delivered)}, ${m.twice} twice, ${m.never} never; ${m.state} |`
    );
  });
  const machine = `${cpus().length} × ${cpus()[0]?.model.trim() ?? 'unknown CPU'}, ${Math.round(totalmem() / 2 ** 30)} GiB, ${arch()}, Node ${process.version}`;
  return `### ${measured[0]?.backend ?? 'store'}

\`npm run bench:stream -- --shards ${o.shards}\` on ${new Date().toISOString().slice(0, 10)}, one run: ${n(o.recipients)} customers, each
send ${o.sendMs} ms, ${o.concurrency} sends in flight per invocation, Lambda's time limit ${o.lambdaTimeoutMs / 1000} s. ${machine};
load average (1 min) ${n(load[0] ?? 0, 2)} before, ${n(load[1] ?? 0, 2)} after (the machine is shared).

| shards | wall time | recipients/s | vs 1 shard | peak RSS per worker | store requests / recipient | invocations | CPU workers | CPU store | CPU bench | cores busy (bench) | cores busy (machine) | deliveries |
|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|
${rows.join('\n')}`;
}

/**
 * The Shards section: what the bench does, then each store's table. A store this run did not
 * measure keeps the table an earlier run wrote, so each table is one run's.
 */
function shardsSection(previous: string, tables: ReadonlyMap<string, string>): string {
  const kept = STORES.map((store) => {
    const name = `shards-${store}`;
    const fresh = tables.get(store);
    return fresh === undefined ? docSection(previous, name) : wrapDocSection(name, fresh);
  }).filter((table) => table !== undefined);
  return `## Shards: one window split across worker processes

Written by \`npm run bench:stream -- --shards N\`: one window of the weekly report run with 1 shard
and then with N, each send a fixed wait (a stand-in for SES). The bench's process holds the job's
work queue and Lambda's SQS event source (in process, with ScheduledJob's visibility timeout and a
maximumConcurrency of the shard count); N worker processes are warm Lambda containers that run the
deployed handler on each invocation handed to them over IPC (bench/shard-worker.ts). So the
runtime splits the window itself: the coordinator's claim and one message per shard, each shard's
claims and continuations, the last shard's finish. Each shard's \`onceEach\` walks the whole list
and keeps the customers whose key hashes to it. The bench counts every customer's emails from
what the workers sent.

- **store requests**: DynamoDB requests (at the wire, retries included) or Postgres statements
  (BEGIN and COMMIT included), counted in the workers.
- **CPU**: the workers' (from warm), the store's (dynalite's process, or every PostgreSQL process)
  and the bench's (the queue and the dispatch); **cores busy (bench)** is their sum over the wall
  time, **cores busy (machine)** every process's (/proc/stat), others' included: at the machine's
  core count the CPU bounds the run, not the sends, and the difference is what other work took.
- **peak RSS per worker**: each worker process's maximum resident set (getrusage), tsx's
  TypeScript loader included.

${kept.join('\n\n')}`;
}
