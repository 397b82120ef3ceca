/**
 * What one job-wide send rate costs: 8 workers (8 Lambdas of one job: shards, a backfill next to a
 * run), each with 16 senders sending as fast as their SharedRateLimiter lets them, against dynalite
 * in real time, at 500 emails a second between them. Reports the sends a second, the busiest second
 * and tenth of a second, and the DynamoDB requests per send (the limiter item's write rate).
 *
 *   npm run bench:send-rate [-- --rate 500 --workers 8 --senders 16 --seconds 5 --ses-ms 40]
 */
import { setMaxListeners } from 'node:events';
import { parseArgs } from 'node:util';
import { startEmbeddedDynamo } from '../local/embedded-dynamo.js';
import { createDynamoClient, ensureClaimsTable } from '../shared/backends/dynamodb/dynamodb-backend.js';
import { DynamoRateLimitStore } from '../shared/backends/dynamodb/dynamodb-rate-limit-store.js';
import { SharedRateLimiter } from '../shared/effects/shared-rate-limiter.js';
import { meterRequests } from './request-meter.js';

const { values } = parseArgs({
  options: {
    rate: { type: 'string', default: '500' },
    workers: { type: 'string', default: '8' },
    senders: { type: 'string', default: '16' },
    seconds: { type: 'string', default: '5' },
    'ses-ms': { type: 'string', default: '40' },
  },
});
const rate = Number(values.rate);
const workers = Number(values.workers);
const senders = Number(values.senders);
const seconds = Number(values.seconds);
const sesMs = Number(values['ses-ms']);

/** The most sends that start within any `windowMs`. */
function busiest(sends: readonly number[], windowMs: number): number {
  let most = 0;
  let first = 0;
  for (let last = 0; last < sends.length; last++) {
    while (sends[last]! - sends[first]! >= windowMs) first++;
    most = Math.max(most, last - first + 1);
  }
  return most;
}

const dynamo = await startEmbeddedDynamo();
const tableName = 'send-rate-bench';
const setup = createDynamoClient({ endpoint: dynamo.endpoint, region: 'us-east-1' });
await ensureClaimsTable(setup, tableName);
setup.destroy();

// Each worker its own client, as each Lambda has; one meter per client, summed.
const clients = Array.from({ length: workers }, () =>
  createDynamoClient({ endpoint: dynamo.endpoint, region: 'us-east-1' }),
);
const meters = clients.map(meterRequests);
const limiters = clients.map(
  (client) =>
    new SharedRateLimiter({
      store: new DynamoRateLimitStore({ client, tableName, jobId: 'bench-job' }),
      ratePerSecond: rate,
    }),
);

const sends: number[] = [];
const stop = new AbortController();
// Every sender waits on this one signal.
setMaxListeners(0, stop.signal);
const started = performance.now();
const until = started + seconds * 1000;
const sender = async (limiter: SharedRateLimiter) => {
  while (performance.now() < until) {
    try {
      await limiter.take(stop.signal);
    } catch {
      return;
    }
    sends.push(performance.now());
    // The SES call a real sender would make now.
    await new Promise((resolve) => setTimeout(resolve, sesMs));
  }
};
const stopTimer = setTimeout(() => stop.abort(new Error('bench over')), seconds * 1000);
await Promise.all(limiters.flatMap((limiter) => Array.from({ length: senders }, () => sender(limiter))));
clearTimeout(stopTimer);

const elapsed = (performance.now() - started) / 1000;
const requests = meters.reduce((sum, m) => sum + m.requests(), 0);
const stats = limiters.map((l) => l.stats);
const total = (key: keyof (typeof stats)[number]) => stats.reduce((sum, s) => sum + s[key], 0);
const rows = [
  ['workers × senders', `${workers} × ${senders} (SES call ${sesMs} ms)`],
  ['limit', `${rate}/s`],
  ['sent', `${sends.length} in ${elapsed.toFixed(1)} s = ${(sends.length / elapsed).toFixed(1)}/s`],
  ['busiest 1 s', `${busiest(sends, 1000)} (limit + burst = ${rate + 1})`],
  ['busiest 100 ms', `${busiest(sends, 100)} (limit + burst = ${rate / 10 + 1})`],
  [
    'reservations',
    `${total('reservations')} (${(total('reservations') / elapsed).toFixed(1)}/s on the item)`,
  ],
  [
    'DynamoDB requests',
    `${requests} = ${(requests / elapsed).toFixed(1)}/s, ${(requests / sends.length).toFixed(3)} per send`,
  ],
  ['tokens lost', `${total('lost')} of ${total('reserved')} reserved`],
];
for (const [label, value] of rows) process.stdout.write(`${label!.padEnd(18)} ${value}\n`);

for (const client of clients) client.destroy();
await dynamo.close();
