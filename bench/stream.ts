/**
 * `npm run bench:stream -- --shards 8 [--recipients 1000000] [--backend dynamodb,postgres]
 * [--send-ms 50] [--concurrency 64] [--lambda-timeout 900]`: one window split into shards, each run
 * by worker processes, against 1 shard in the same run (bench/shards.ts); the rows go to
 * docs/benchmarks.md's Shards section.
 *
 * `npm run bench:stream -- --recipients 1000000 [--backend postgres|dynamodb] [--concurrency 64]`:
 * one replica streams a whole window through the real runtime, in its own process, while the store
 * (embedded PostgreSQL, or dynalite on its own thread) and the SMTP sink run elsewhere, so the
 * replica's memory is the runtime's own. It samples the replica's resident set and its V8 heap
 * (after a full collection) every `--every` emails, checks that every customer got exactly one
 * email, and appends the peak RSS and the duration to docs/benchmarks-stream.md.
 *
 * A million recipients take a while on two cores (see the doc for this machine's rates); the
 * fault-matrix suite streams a smaller count through the same replica on every `npm test`.
 */
import { appendFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { arch, cpus, totalmem } from 'node:os';
import { parseArgs } from 'node:util';
import type { ReplicaStore } from '../test/helpers/replica-process.js';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
const { startEmbeddedDynamo } = await import('../local/embedded-dynamo.js');
const { startSmtpSink } = await import('../local/smtp-sink.js');
const { createDynamoClient, ensureClaimsTable } = await import(
  '../shared/backends/dynamodb/dynamodb-backend.js'
);
const { startPostgres } = await import('../test/helpers/postgres.js');
const { startReplica } = await import('../test/helpers/replica-process.js');

const { values } = parseArgs({
  options: {
    recipients: { type: 'string', default: '1000000' },
    backend: { type: 'string' },
    concurrency: { type: 'string', default: '64' },
    every: { type: 'string', default: '5000' },
    out: { type: 'string' },
    shards: { type: 'string' },
    'send-ms': { type: 'string', default: '50' },
    'lambda-timeout': { type: 'string', default: '900' },
  },
});
const RECIPIENTS = Number(values.recipients);
const CONCURRENCY = Number(values.concurrency);

if (values.shards !== undefined) {
  const shards = Number(values.shards);
  const sendMs = Number(values['send-ms']);
  const lambdaTimeout = Number(values['lambda-timeout']);
  const backends = (values.backend ?? 'dynamodb,postgres').split(',');
  const bad = [
    !(Number.isInteger(shards) && shards >= 2 && shards <= 1000) &&
      `--shards is ${JSON.stringify(values.shards)}; give the shard count to set against 1 shard, 2 to 1000, such as 8`,
    !(Number.isInteger(RECIPIENTS) && RECIPIENTS >= 1) &&
      `--recipients is ${JSON.stringify(values.recipients)}; give a whole number of at least 1`,
    !(Number.isInteger(CONCURRENCY) && CONCURRENCY >= 1) &&
      `--concurrency is ${JSON.stringify(values.concurrency)}; give a whole number of at least 1`,
    !(sendMs >= 0) &&
      `--send-ms is ${JSON.stringify(values['send-ms'])}; give milliseconds per send, such as 50`,
    !(Number.isInteger(lambdaTimeout) && lambdaTimeout >= 1 && lambdaTimeout <= 900) &&
      `--lambda-timeout is ${JSON.stringify(values['lambda-timeout'])}; give whole seconds from 1 to 900`,
    backends.some((b) => b !== 'dynamodb' && b !== 'postgres') &&
      `--backend is ${JSON.stringify(values.backend)}; use dynamodb, postgres or dynamodb,postgres`,
  ].filter((problem) => typeof problem === 'string');
  if (bad.length > 0) throw new Error(bad.join('\n'));
  const { runShardBench } = await import('./shards.js');
  await runShardBench({
    shards,
    recipients: RECIPIENTS,
    backends: backends as ('dynamodb' | 'postgres')[],
    sendMs,
    concurrency: CONCURRENCY,
    lambdaTimeoutMs: lambdaTimeout * 1000,
    out: values.out ?? 'docs/benchmarks.md',
  });
  process.exit(0);
}

const EVERY = Number(values.every);
const BACKEND = values.backend ?? 'postgres';
const OUT = values.out ?? 'docs/benchmarks-stream.md';
if (BACKEND !== 'postgres' && BACKEND !== 'dynamodb') {
  throw new Error(`--backend is ${JSON.stringify(BACKEND)}; use postgres or dynamodb`);
}
if (!Number.isInteger(RECIPIENTS) || RECIPIENTS < EVERY || RECIPIENTS % EVERY !== 0) {
  throw new Error(`--recipients is ${values.recipients}; use a whole multiple of --every (${EVERY})`);
}

const log = (line: string) => process.stdout.write(`${line}\n`);
const mb = (bytes: number) => (bytes / 1e6).toFixed(0);

/** The store, started outside the replica's process. */
async function startStore(): Promise<{ store: ReplicaStore; close: () => Promise<void> }> {
  if (BACKEND === 'dynamodb') {
    const dynamo = await startEmbeddedDynamo({ thread: true });
    const client = createDynamoClient({ endpoint: dynamo.endpoint });
    await ensureClaimsTable(client, 'bench-stream');
    return {
      store: { backend: 'dynamodb', endpoint: dynamo.endpoint, table: 'bench-stream' },
      close: async () => {
        client.destroy();
        await dynamo.close();
      },
    };
  }
  const postgres = await startPostgres();
  const schema = await postgres.freshSchema('bench_stream');
  return {
    store: { backend: 'postgres', connectionString: postgres.connectionString, schema },
    close: () => postgres.close(),
  };
}

const [{ store, close }, sink] = await Promise.all([startStore(), startSmtpSink()]);
const window = new Date(Math.floor(Date.now() / 60_000) * 60_000).toISOString().replace('.000Z', 'Z');
log(
  `streaming ${RECIPIENTS.toLocaleString('en-US')} recipients through one replica on ${BACKEND}, concurrency ${CONCURRENCY}`,
);
const started = performance.now();
const replica = startReplica({
  store,
  window,
  total: RECIPIENTS,
  smtpPort: sink.port,
  name: 'bench-stream',
  concurrency: CONCURRENCY,
  reportEachSend: false,
  rssEvery: EVERY,
  nodeFlags: ['--expose-gc'],
});
// Progress, a line per tenth of the run.
let tenths = 0;
const progress = setInterval(() => {
  const last = replica.rss.at(-1);
  if (!last || Math.floor((last.sent * 10) / RECIPIENTS) <= tenths) return;
  tenths = Math.floor((last.sent * 10) / RECIPIENTS);
  const seconds = (performance.now() - started) / 1000;
  log(
    `  ${last.sent.toLocaleString('en-US')} sent in ${seconds.toFixed(0)} s: RSS ${mb(last.bytes)} MB, heap ${mb(last.heapBytes)} MB`,
  );
}, 1_000);
const exit = await replica.exited;
clearInterval(progress);
const seconds = (performance.now() - started) / 1000;
sink.close();
await close();

const result = exit.result;
const done = result && 'summary' in result ? result.summary.done : 0;
const ok =
  result?.status === 'completed' &&
  done === RECIPIENTS &&
  sink.total() === RECIPIENTS &&
  sink.received.size === RECIPIENTS &&
  sink.duplicates() === 0;
if (!ok) {
  log(
    `FAILED: ${JSON.stringify(result)}; sink ${sink.total()} emails, ${sink.duplicates()} recipients twice`,
  );
  process.exit(1);
}

const at = (share: number) => replica.rss.find((s) => s.sent >= share * RECIPIENTS);
const first = at(0.2);
const last = replica.rss.at(-1);
const peakSampled = Math.max(...replica.rss.map((s) => s.bytes));
const peak = exit.usage?.maxRssBytes ?? peakSampled;
const row =
  `| ${new Date().toISOString().slice(0, 10)} | ${BACKEND} | ${RECIPIENTS.toLocaleString('en-US')} | ${CONCURRENCY} | ` +
  `${(seconds / 60).toFixed(1)} min | ${Math.round(RECIPIENTS / seconds).toLocaleString('en-US')} | ${mb(peak)} MB | ` +
  `${mb(first?.bytes ?? 0)} → ${mb(last?.bytes ?? 0)} MB | ${mb(first?.heapBytes ?? 0)} → ${mb(last?.heapBytes ?? 0)} MB | ` +
  `${((exit.usage?.cpuMs ?? 0) / 1000 / (RECIPIENTS / 1000)).toFixed(2)} s | ${cpus().length} × ${cpus()[0]?.model.trim() ?? 'unknown CPU'}, Node ${process.version} |`;

if (!existsSync(OUT) || !readFileSync(OUT, 'utf8').includes('| date |')) {
  writeFileSync(
    OUT,
    `# Streaming a window with bounded memory

Appended by \`npm run bench:stream -- --recipients N [--backend postgres|dynamodb]\`, one row per run.
One replica (test/helpers/replica-process.ts, the real runtime in its own process) streams N synthetic
customers through \`onceEach\` at the given concurrency, each email guarded by the ledger and sent over
real SMTP to a sink in the bench's process; the store runs outside the replica too (embedded
PostgreSQL, or dynalite on its own thread). So the replica's memory is the runtime's: the customer
list is pulled as workers free up, never held.

- **peak RSS**: the replica's maximum resident set over the whole run (getrusage).
- **RSS, heap 20% → end**: sampled every 5,000 emails after a forced full GC (\`--expose-gc\`); flat
  means nothing accumulates per recipient.
- **CPU / 1,000**: the replica's own CPU time per thousand recipients. dynalite and embedded
  PostgreSQL are far slower than DynamoDB and RDS, and share the machine's two cores with the
  replica and the sink: rates are this machine's, not the services'.

| date | backend | recipients | concurrency | duration | recipients/s | peak RSS | RSS 20% → end | heap 20% → end | replica CPU / 1,000 | machine |
|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|
`,
  );
}
appendFileSync(OUT, `${row}\n`);
log(`${row}\nappended to ${OUT} (machine: ${Math.round(totalmem() / 2 ** 30)} GiB, ${arch()})`);
process.exit(0);
