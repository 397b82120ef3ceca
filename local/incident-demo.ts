import { writeFileSync } from 'node:fs';
import { weeklyReportJob } from '../functions/weekly-report/job.js';
import { syntheticCustomers } from '../functions/weekly-report/recipients.js';
import {
  createDynamoClient,
  dynamoBackend,
  ensureClaimsTable,
} from '../shared/backends/dynamodb/dynamodb-backend.js';
import { drainConcurrently } from '../shared/effects/concurrent-drain.js';
import { hmacEffectKeys } from '../shared/effects/effect-key.js';
import { smtpSender } from '../shared/effects/smtp-email-sender.js';
import type { JobContext } from '../shared/job/job-definition.js';
import { createJobHandler, type HandlerResponse } from '../shared/job/lambda-handler.js';
import { windowOf } from '../shared/slot/slot.js';
import { emfMetrics } from '../shared/telemetry/metrics.js';
import { startEmbeddedDynamo } from './embedded-dynamo.js';
import { fileLog } from './file-log.js';
import { type SmtpSink, startSmtpSink } from './smtp-sink.js';

export interface IncidentDemoOptions {
  readonly replicas: number;
  readonly recipients: number;
  readonly concurrency: number;
  /** Where the run's JSON log and EMF metrics go. */
  readonly outputDir: string;
  /** Progress and the final table. */
  readonly out: NodeJS.WritableStream & { isTTY?: boolean };
}

/** What one side of the comparison came to, read from the SMTP server. */
export interface SideResult {
  readonly fires: number;
  readonly claims: number | undefined;
  readonly delivered: number;
  readonly recipientsReached: number;
  /** Emails beyond the first to any recipient. */
  readonly duplicates: number;
  readonly inDoubt: number | undefined;
  readonly seconds: number;
}

export interface IncidentDemoResult {
  readonly unguarded: SideResult;
  readonly guarded: SideResult;
}

/** A local secret for the demo only; deployed jobs read theirs from Secrets Manager. */
const DEMO_SECRET = 'slotguard-local-demo-secret-not-for-production';

/**
 * Replays the incident on this machine: the weekly report, fired for one window by N replicas at
 * once, first as the app did it (each replica sends to everyone), then through slotguard. Email
 * travels over SMTP to a real server on loopback; the counts come from what it received.
 */
export async function runIncidentDemo(options: IncidentDemoOptions): Promise<IncidentDemoResult> {
  const { out } = options;
  const [dynamo, sink] = await Promise.all([startEmbeddedDynamo({ thread: true }), startSmtpSink()]);
  const sender = smtpSender({ host: sink.host, port: sink.port, maxConnections: 16 });
  try {
    // The window is this minute, as a schedule firing now would have stamped it.
    const now = Date.now();
    const window = new Date(windowOf(now - (now % 60_000)));
    const job = weeklyReportJob({ customers: () => syntheticCustomers(options.recipients), sender });
    out.write(
      `Replaying the incident: ${options.replicas} replicas fire the weekly report for window ${window.toISOString()}, ` +
        `${options.recipients.toLocaleString('en-US')} customers.\n`,
    );

    const unguarded = await measure('unguarded', options, sink, async () => {
      // As the app did it: every replica runs the send loop, which assumes it runs once.
      await Promise.all(
        Array.from({ length: options.replicas }, () =>
          job.run(unguardedContext(window, options.concurrency)),
        ),
      );
      return { claims: undefined, inDoubt: undefined };
    });

    sink.reset();
    const client = createDynamoClient({ endpoint: dynamo.endpoint, region: 'us-east-1' });
    const tableName = 'slotguard-claims';
    await ensureClaimsTable(client, tableName);
    const emfPath = `${options.outputDir}/last-run.emf.jsonl`;
    const emfLines: string[] = [];
    const handler = createJobHandler(job, {
      backend: dynamoBackend({ client, tableName, hashKey: hmacEffectKeys(DEMO_SECRET) }),
      metrics: () => emfMetrics({ jobId: job.id, write: (line) => emfLines.push(line) }),
      log: fileLog(`${options.outputDir}/last-run.log.jsonl`),
      options: { effectConcurrency: options.concurrency },
    });
    const guarded = await measure('slotguard', options, sink, async () => {
      const responses = await Promise.all(
        Array.from({ length: options.replicas }, (_, replica) =>
          handler(
            {
              jobId: job.id,
              scheduledTime: window.toISOString(),
              executionId: `local-replica-${replica + 1}`,
              attemptNumber: '1',
            },
            { awsRequestId: `replica-${replica + 1}`, getRemainingTimeInMillis: () => 900_000 },
          ),
        ),
      );
      return {
        claims: responses.filter((r) => r.status !== 'duplicate' && r.status !== 'rejected').length,
        inDoubt: inDoubtOf(responses),
      };
    });
    writeFileSync(emfPath, emfLines.map((line) => `${line}\n`).join(''));
    client.destroy();

    printTable(out, options, { unguarded, guarded });
    out.write(`Log: ${options.outputDir}/last-run.log.jsonl  Metrics (EMF): ${emfPath}\n`);
    return { unguarded, guarded };
  } finally {
    sender.close();
    await Promise.all([sink.close(), dynamo.close()]);
  }
}

/** The job's context with no guard at all: every effect runs, every time. */
function unguardedContext(window: Date, concurrency: number): JobContext {
  const signal = new AbortController().signal;
  return {
    slot: { jobId: 'weekly-report', window: window.toISOString() },
    scheduledTime: window,
    epoch: 0,
    delivery: {},
    signal,
    payload: undefined,
    log: { info() {}, warn() {}, error() {} },
    async once(_key, effect) {
      await effect(signal);
      return 'done';
    },
    async onceEach(items, _options, effect) {
      await drainConcurrently(items, concurrency, (item) => effect(item, signal));
    },
  };
}

async function measure(
  label: string,
  options: IncidentDemoOptions,
  sink: SmtpSink,
  run: () => Promise<{ claims: number | undefined; inDoubt: number | undefined }>,
): Promise<SideResult> {
  const started = performance.now();
  const progress = startProgress(label, options, sink, started);
  try {
    const { claims, inDoubt } = await run();
    const seconds = (performance.now() - started) / 1000;
    const delivered = sink.total();
    const result = {
      fires: options.replicas,
      claims,
      delivered,
      recipientsReached: sink.received.size,
      duplicates: delivered - sink.received.size,
      inDoubt,
      seconds,
    };
    progress.finish(result);
    return result;
  } finally {
    progress.stop();
  }
}

function startProgress(label: string, options: IncidentDemoOptions, sink: SmtpSink, started: number) {
  const { out } = options;
  const line = () =>
    `  ${label.padEnd(10)} ${sink.total().toLocaleString('en-US').padStart(9)} emails delivered  ` +
    `${((performance.now() - started) / 1000).toFixed(1).padStart(5)} s`;
  const timer = out.isTTY ? setInterval(() => out.write(`\r${line()}`), 200) : undefined;
  return {
    finish(result: SideResult) {
      const tail = `, ${result.recipientsReached.toLocaleString('en-US')} customers reached`;
      out.write(out.isTTY ? `\r${line()}${tail}\n` : `${line()}${tail}\n`);
    },
    stop() {
      if (timer) clearInterval(timer);
    },
  };
}

function inDoubtOf(responses: HandlerResponse[]): number {
  return responses.reduce(
    (sum, r) =>
      sum +
      (r.status === 'completed' || r.status === 'yielded' || r.status === 'fenced' ? r.summary.inDoubt : 0),
    0,
  );
}

function printTable(out: NodeJS.WritableStream, options: IncidentDemoOptions, r: IncidentDemoResult): void {
  const n = (value: number | undefined) => (value === undefined ? '-' : value.toLocaleString('en-US'));
  const rows: [string, string, string][] = [
    ['fires', n(r.unguarded.fires), n(r.guarded.fires)],
    ['claims', n(r.unguarded.claims), n(r.guarded.claims)],
    ['emails delivered', n(r.unguarded.delivered), n(r.guarded.delivered)],
    ['duplicates', n(r.unguarded.duplicates), n(r.guarded.duplicates)],
    ['in doubt', n(r.unguarded.inDoubt), n(r.guarded.inDoubt)],
    ['time', `${r.unguarded.seconds.toFixed(1)} s`, `${r.guarded.seconds.toFixed(1)} s`],
  ];
  out.write(`\n${''.padEnd(18)}${'unguarded'.padStart(12)}${'slotguard'.padStart(12)}\n`);
  for (const [name, a, b] of rows) out.write(`${name.padEnd(18)}${a.padStart(12)}${b.padStart(12)}\n`);
  out.write(
    `\n${n(options.recipients)} customers, ${options.replicas} replicas: unguarded sent ${n(r.unguarded.delivered)}, ` +
      `slotguard sent ${n(r.guarded.delivered)}.\n`,
  );
}
