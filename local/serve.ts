import { appendFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type LocalJobOptions, localJobs } from '../functions/local-jobs.js';
import { type Clock, systemClock } from '../shared/clock.js';
import { smtpSender } from '../shared/effects/smtp-email-sender.js';
import { TokenBucket } from '../shared/effects/token-bucket.js';
import { describeCatchUpPolicy } from '../shared/schedule/catch-up.js';
import { JobSchedule } from '../shared/schedule/fire-times.js';
import { describeInZone } from '../shared/schedule/time-zone.js';
import { windowOf } from '../shared/slot/slot.js';
import { emfMetrics } from '../shared/telemetry/metrics.js';
import { StateDirectoryLockedError } from './embedded-dynamo.js';
import { fileLog } from './file-log.js';
import { type LocalBackend, type LocalBackendKind, openLocalBackend } from './local-backend.js';
import {
  type CatchUpReport,
  describeWindow,
  LocalRunner,
  type TerminalOutput,
  type WindowReport,
} from './local-runner.js';
import { rateLimitedSender } from './rate-limited-sender.js';
import type { FaultKind } from './replica-faults.js';
import { type SmtpSink, startSmtpSink } from './smtp-sink.js';

/** Where `serve` tells other processes (the operator CLI) how to reach its backend and mail server. */
export const SERVE_STATE_FILE = 'serve.json';
/** The LevelDB directory of the embedded DynamoDB, under the state directory. */
export const DYNAMODB_STATE_DIR = 'dynamodb';

/** The contents of `<state dir>/serve.json` while serve runs. */
export interface ServeState {
  readonly pid: number;
  readonly startedAt: string;
  readonly backend: LocalBackendKind;
  /** DynamoDB: the embedded server's endpoint and table. */
  readonly endpoint?: string;
  readonly tableName?: string;
  /** Postgres: the server, when it is the embedded one serve started. */
  readonly databaseUrl?: string;
  readonly smtp: { readonly host: string; readonly port: number };
  /** Set when serve stopped cleanly; the file stays, so the next start knows since when to catch up. */
  readonly stoppedAt?: string;
}

/** `npm start -- serve`'s flags. */
export interface ServeOptions extends LocalJobOptions {
  /** Kept across runs: the embedded DynamoDB's tables and serve.json. @default '.slotguard' */
  readonly stateDir: string;
  /** @default 'dynamodb' */
  readonly backend?: LocalBackendKind;
  readonly databaseUrl?: string;
  /** @default 3 */
  readonly replicas?: number;
  readonly faults?: readonly FaultKind[];
  readonly seed?: number;
  readonly out: TerminalOutput;
  /**
   * Emails a second the SMTP server is sent, by every job together (one provider, one rate).
   * @default unlimited
   */
  readonly sendRatePerSecond?: number;
  /**
   * Lambda's time limit for every invocation, in seconds.
   * @default each job's timeoutSeconds
   */
  readonly lambdaTimeoutSeconds?: number;
  /**
   * Shards every job's windows are split into (each job's RunOptions.shards).
   * @default 1 (not split)
   */
  readonly shards?: number;
  /**
   * The windows' schedules, the work queues, the event sources and Lambda's time limit run on it.
   * @default the system clock
   */
  readonly clock?: Clock;
}

/** A running serve: stop it to end. */
export interface ServeHandle {
  readonly runner: LocalRunner;
  readonly backend: LocalBackend;
  readonly sink: SmtpSink;
  readonly catchUp: readonly CatchUpReport[];
  /** Windows run so far. */
  readonly windows: readonly WindowReport[];
  stop(): Promise<void>;
}

/**
 * `npm start -- serve`: the catalog's jobs on their real schedules until stopped, N replicas each,
 * on a backend kept in the state directory, so a restart after downtime catches up per each job's
 * policy. Each window goes through its job's work queue as deployed, so one bigger than a Lambda
 * run is continued until it is finished. Prints one line per window (with its runs); on a terminal,
 * a status line too.
 */
export async function startServe(options: ServeOptions): Promise<ServeHandle> {
  const { out } = options;
  const clock = options.clock ?? systemClock;
  mkdirSync(options.stateDir, { recursive: true });
  const dynamoPath = join(options.stateDir, DYNAMODB_STATE_DIR);
  const kind = options.backend ?? 'dynamodb';
  const statePath = join(options.stateDir, SERVE_STATE_FILE);
  // Windows missed are those since the last serve started (its own fires left records); a state
  // with no earlier serve has missed nothing.
  const previous = readServeState(statePath);
  if (previous && !previous.stoppedAt && isAlive(previous.pid) && previous.pid !== process.pid) {
    throw new StateDirectoryLockedError(options.stateDir);
  }
  const backend = await openLocalBackend({
    kind,
    ...(kind === 'dynamodb' ? { path: dynamoPath, thread: true } : {}),
    ...(options.databaseUrl ? { databaseUrl: options.databaseUrl } : {}),
  });
  const sink = await startSmtpSink();
  const state: ServeState = {
    pid: process.pid,
    startedAt: new Date(clock.now()).toISOString(),
    backend: kind,
    ...(backend.endpoint ? { endpoint: backend.endpoint, tableName: backend.tableName } : {}),
    smtp: { host: sink.host, port: sink.port },
  };
  writeFileSync(statePath, `${JSON.stringify(state, null, 2)}\n`);

  const jobs = localJobs(options);
  const emfPath = join(options.stateDir, 'serve.emf.jsonl');
  const windows: WindowReport[] = [];
  const status = statusLine(out);
  const bucket =
    options.sendRatePerSecond === undefined
      ? undefined
      : new TokenBucket({ ratePerSecond: options.sendRatePerSecond, clock });
  const runner = new LocalRunner({
    jobs,
    backend: backend.backend,
    // The runner closes each invocation's sender when the invocation is over.
    senderFor: (from) => {
      const smtp = smtpSender({ host: sink.host, port: sink.port, from, maxConnections: 8 });
      return bucket ? rateLimitedSender(smtp, bucket) : smtp;
    },
    sink,
    clock,
    ...(options.lambdaTimeoutSeconds !== undefined
      ? { lambdaTimeoutMs: options.lambdaTimeoutSeconds * 1000 }
      : {}),
    ...(options.shards !== undefined ? { runOptions: { shards: options.shards } } : {}),
    log: fileLog(join(options.stateDir, 'serve.log.jsonl')),
    metrics: (jobId) => emfMetrics({ jobId, write: (line) => appendFileSync(emfPath, `${line}\n`) }),
    ...(options.replicas !== undefined ? { replicas: options.replicas } : {}),
    ...(options.faults ? { faults: options.faults } : {}),
    ...(options.seed !== undefined ? { seed: options.seed } : {}),
    onWindow: (report) => {
      windows.push(report);
      status.print(describeWindow(report));
    },
    onFault: (fault) =>
      status.print(`  fault: ${fault}; the window comes back from its work queue once the lease has run out`),
  });

  const limits = [
    options.sendRatePerSecond !== undefined ? `, ${options.sendRatePerSecond} emails a second` : '',
    options.lambdaTimeoutSeconds !== undefined
      ? `, Lambda's time limit ${options.lambdaTimeoutSeconds} s`
      : '',
    (options.shards ?? 1) > 1 ? `, windows split into ${options.shards} shards` : '',
  ].join('');
  out.write(
    `slotguard serve: ${jobs.length} jobs, ${options.replicas ?? 3} replicas each${
      options.faults?.length ? `, faults ${options.faults.join(',')} (seed ${runner.seed})` : ''
    }${limits}\n  backend: ${backend.description}\n  mail:    SMTP on ${sink.host}:${sink.port}\n  state:   ${statePath}\n`,
  );
  for (const job of jobs) {
    const schedule = new JobSchedule(job.spec.schedule);
    const next = schedule.nextFireAfter(clock.now());
    out.write(
      `  ${job.spec.id.padEnd(18)} ${job.spec.schedule.expression} ${schedule.timeZone}; next ${
        next ? `${windowOf(next)} (${describeInZone(next.getTime(), schedule.timeZone)})` : 'never'
      }\n`,
    );
  }

  const catchUp = await runner.start(
    previous ? { since: Date.parse(previous.startedAt) } : { catchUp: false },
  );
  if (!previous) out.write('  catch-up: a new state directory; nothing was missed\n');
  for (const report of catchUp) out.write(`${describeCatchUp(report)}\n`);
  out.write(out.isTTY ? 'Running until Ctrl-C.\n' : 'Running until SIGINT or SIGTERM.\n');
  status.start(() => statusText(jobs, clock, windows, sink));

  let stopping: Promise<void> | undefined;
  return {
    runner,
    backend,
    sink,
    catchUp,
    windows,
    stop() {
      stopping ??= (async () => {
        status.stop();
        await runner.stop();
        writeFileSync(
          statePath,
          `${JSON.stringify({ ...state, stoppedAt: new Date(clock.now()).toISOString() }, null, 2)}\n`,
        );
        await Promise.all([sink.close(), backend.close()]);
        out.write(
          `Stopped after ${windows.length} windows; ${sink.total().toLocaleString('en-US')} emails delivered.\n`,
        );
      })();
      return stopping;
    },
  };
}

/** serve.json as the last serve left it, if there is one. */
export function readServeState(path: string): ServeState | undefined {
  if (!existsSync(path)) return undefined;
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as ServeState;
  } catch {
    return undefined;
  }
}

/** True while a process with this id exists. */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** What the catch-up at start did for one job, in one line. */
export function describeCatchUp(report: CatchUpReport): string {
  const { plan } = report;
  const missed = plan.run.length + plan.skipped.length;
  const policy = describeCatchUpPolicy(plan.policy);
  if (missed === 0)
    return `  catch-up ${report.jobId}: no window missed since the last start (policy ${policy})`;
  const reasons = new Map<string, number>();
  for (const { reason } of plan.skipped) reasons.set(reason, (reasons.get(reason) ?? 0) + 1);
  const skipped = [...reasons].map(([reason, count]) => `${count} ${reason}`).join(', ');
  return (
    `  catch-up ${report.jobId}: ${missed} windows missed since the last start; policy ${policy}: ` +
    `ran ${plan.run.length}${skipped ? `, not run: ${skipped}` : ''}` +
    (plan.skipped.length > 0 ? ' (slotguard backfill runs them on demand)' : '')
  );
}

function statusText(
  jobs: ReturnType<typeof localJobs>,
  clock: Clock,
  windows: readonly WindowReport[],
  sink: SmtpSink,
): string {
  const now = clock.now();
  let soonest: { id: string; at: Date } | undefined;
  for (const job of jobs) {
    const next = new JobSchedule(job.spec.schedule).nextFireAfter(now);
    if (next && (!soonest || next < soonest.at)) soonest = { id: job.spec.id, at: next };
  }
  const wait = soonest ? Math.max(0, Math.round((soonest.at.getTime() - now) / 1000)) : 0;
  const next = soonest
    ? `next ${soonest.id} at ${windowOf(soonest.at)} (in ${Math.floor(wait / 60)}m${String(wait % 60).padStart(2, '0')}s)`
    : 'nothing scheduled';
  return `  serving · ${next} · ${windows.length} windows · ${sink.total().toLocaleString('en-US')} emails`;
}

/** Plain lines when not on a terminal; on one, a status line kept at the bottom. */
function statusLine(out: TerminalOutput) {
  let timer: NodeJS.Timeout | undefined;
  let text = () => '';
  const draw = () => out.write(`\r\x1b[K${text()}`);
  return {
    start(render: () => string) {
      text = render;
      if (!out.isTTY) return;
      draw();
      timer = setInterval(draw, 1_000);
      timer.unref();
    },
    print(line: string) {
      if (out.isTTY && timer) {
        out.write(`\r\x1b[K${line}\n`);
        draw();
      } else {
        out.write(`${line}\n`);
      }
    },
    stop() {
      if (timer) clearInterval(timer);
      if (out.isTTY && timer) out.write('\r\x1b[K');
      timer = undefined;
    },
  };
}
