/**
 * `npm run bench`: the guarded fan-out against an unguarded loop, side by side in one run, on the
 * same embedded DynamoDB (dynalite on loopback) and with the same simulated send latency.
 * Reports DynamoDB requests and write units per recipient and recipients per second at
 * concurrency 1, 16 and 64, and writes docs/benchmarks.md.
 */
import { writeFileSync } from 'node:fs';
import { arch, cpus, totalmem } from 'node:os';
import { parseArgs } from 'node:util';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
const { weeklyReportJob } = await import('../functions/weekly-report/job.js');
const { syntheticCustomers } = await import('../functions/weekly-report/recipients.js');
const { startEmbeddedDynamo } = await import('../local/embedded-dynamo.js');
const { createDynamoClient, dynamoBackend, ensureClaimsTable } = await import(
  '../shared/backends/dynamodb/dynamodb-backend.js'
);
const { drainConcurrently } = await import('../shared/effects/concurrent-drain.js');
const { hmacEffectKeys } = await import('../shared/effects/effect-key.js');
const { createJobHandler } = await import('../shared/job/lambda-handler.js');
const { silentLog } = await import('../shared/telemetry/log.js');
const { emfMetrics } = await import('../shared/telemetry/metrics.js');
const { meterRequests } = await import('./request-meter.js');

const { values } = parseArgs({
  options: {
    recipients: { type: 'string', default: '3000' },
    latency: { type: 'string', default: '5' },
    out: { type: 'string', default: 'docs/benchmarks.md' },
  },
});
const RECIPIENTS = Number(values.recipients);
const SEND_LATENCY_MS = Number(values.latency);
const CONCURRENCIES = [1, 16, 64];

interface Row {
  readonly variant: 'unguarded loop' | 'slotguard';
  readonly concurrency: number;
  readonly recipients: number;
  readonly seconds: number;
  readonly requestsPerRecipient: number;
  readonly writeUnitsPerRecipient: number;
  readonly sends: number;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** A sender that takes a fixed time, like an SES call, and counts what it sent. */
function latencySender() {
  let sends = 0;
  return {
    sender: {
      async send(_message: { to: string; subject: string; text: string }) {
        await sleep(SEND_LATENCY_MS);
        sends++;
      },
    },
    sends: () => sends,
  };
}

const dynamo = await startEmbeddedDynamo({ thread: true });
const client = createDynamoClient({ endpoint: dynamo.endpoint, region: 'us-east-1' });
const meter = meterRequests(client);
const tableName = 'bench-claims';
await ensureClaimsTable(client, tableName);
const rows: Row[] = [];

for (const concurrency of CONCURRENCIES) {
  // Concurrency 1 is latency-bound: a smaller list keeps the run short without changing the rate.
  const recipients = concurrency === 1 ? Math.min(RECIPIENTS, 500) : RECIPIENTS;

  const plain = latencySender();
  let started = performance.now();
  await drainConcurrently(syntheticCustomers(recipients), concurrency, (c) =>
    plain.sender.send({ to: c.email, subject: '', text: '' }),
  );
  rows.push({
    variant: 'unguarded loop',
    concurrency,
    recipients,
    seconds: (performance.now() - started) / 1000,
    requestsPerRecipient: 0,
    writeUnitsPerRecipient: 0,
    sends: plain.sends(),
  });

  const guarded = latencySender();
  const job = weeklyReportJob({ customers: () => syntheticCustomers(recipients), sender: guarded.sender });
  const handler = createJobHandler(job, {
    backend: dynamoBackend({ client, tableName, hashKey: hmacEffectKeys('bench-secret-0123456789abcdef') }),
    metrics: () => emfMetrics({ jobId: job.id, write: () => {} }),
    log: silentLog,
    options: { effectConcurrency: concurrency },
  });
  meter.reset();
  started = performance.now();
  const window = new Date(Math.floor(Date.now() / 60_000) * 60_000 - concurrency * 60_000).toISOString();
  await handler({ jobId: job.id, scheduledTime: window, attemptNumber: '1' });
  rows.push({
    variant: 'slotguard',
    concurrency,
    recipients,
    seconds: (performance.now() - started) / 1000,
    requestsPerRecipient: meter.requests() / recipients,
    writeUnitsPerRecipient: meter.writeUnits() / recipients,
    sends: guarded.sends(),
  });
  process.stdout.write(`concurrency ${concurrency}: done\n`);
}
client.destroy();
await dynamo.close();

const table = [
  '| variant | concurrency | recipients | recipients/s | DynamoDB requests / recipient | write units / recipient | emails sent |',
  '|---|---:|---:|---:|---:|---:|---:|',
  ...rows.map(
    (r) =>
      `| ${r.variant} | ${r.concurrency} | ${r.recipients} | ${Math.round(r.recipients / r.seconds)} | ` +
      `${r.requestsPerRecipient.toFixed(3)} | ${r.writeUnitsPerRecipient.toFixed(3)} | ${r.sends} |`,
  ),
].join('\n');
const pkg = (name: string) =>
  import(`${name}/package.json`, { with: { type: 'json' } })
    .then((m) => m.default.version as string)
    .catch(() => '?');
const doc = `# Benchmarks

Generated by \`npm run bench\` on ${new Date().toISOString().slice(0, 10)}. Do not edit by hand.

The weekly report's fan-out, guarded by slotguard and as a plain loop, side by side in one run
against the same embedded DynamoDB (dynalite ${await pkg('dynalite')} on loopback, its own thread),
with every send taking a fixed ${SEND_LATENCY_MS} ms (a stand-in for an SES call).

${table}

- Requests per recipient: one conditional PutItem (the reservation) plus 1/25 of a BatchWriteItem
  (the done marks, 25 a request), plus the claim and completion spread over the list.
- Write units per recipient: 2 (reservation and mark), plus the slot's own writes.
- dynalite's speed is not DynamoDB's: the recipients/s of the guarded rows are bounded by this
  machine's dynalite, and in AWS by the account's SES rate long before DynamoDB.

Machine: ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, ${Math.round(totalmem() / 2 ** 30)} GiB, ${arch()},
Node ${process.version}, @aws-sdk/client-dynamodb ${await pkg('@aws-sdk/client-dynamodb')}.
`;
writeFileSync(values.out, doc);
process.stdout.write(`\n${table}\n\nwrote ${values.out}\n`);
