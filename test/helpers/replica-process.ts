/**
 * One replica of the weekly report as a real child process, for the crash, freeze and fault tests,
 * and the parent's handle on it. Both sides of the contract live here: the environment the child
 * reads, and the lines it writes.
 *
 * Run as a script (`node --import tsx test/helpers/replica-process.ts`), it fires one window of the
 * weekly report against the store it is given, with its own clock (the system clock plus a skew),
 * and emails every customer over real SMTP; or, given a work-queue message (MESSAGE: one shard's,
 * as the window's coordinator sent it), runs that message as a shard worker does, emailing the
 * customers whose key hashes to its shard. What it does is written to stdout, one line each:
 *
 *   ready                        started; with START=stdin it now waits for a line on stdin
 *   claim <json>                 the claim's outcome: { kind, epoch, via }
 *   sent <n> <email>             the n-th email the SMTP server accepted (unless SENT_LINES=none)
 *   rss <sent> <rss> <heap>      resident set and V8 heap bytes after every RSS_EVERY emails
 *   crash <point> <n> <email>    the next instant it SIGKILLs itself
 *   log <json>                   the runtime's warnings and errors
 *   faults <json>                how many store faults were injected (FAULTS)
 *   result <json>                the handler's response
 *   usage <json>                 peak RSS and CPU time, last
 *
 * Writes to a pipe are synchronous on Linux, so a line is with the parent before the next statement
 * runs, and a crash line is never lost to the kill that follows it.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { Pool } from 'pg';
import { SOURCE_CONDITION } from '../../infra/package-source.js';
import type { HandlerResponse } from '../../shared/job/lambda-handler.js';
import type { SlotBackend } from '../../shared/job/run-slot.js';
import type { ClaimOutcome, ClaimStore } from '../../shared/slot/ports.js';
import type { Slot } from '../../shared/slot/slot.js';

/** Where a replica kills itself (CRASH), if anywhere. */
export const CrashPoint = {
  None: 'none',
  /** When the job pulls its first customer: the slot is claimed, nothing is reserved. */
  BeforeFirstEffect: 'before-first-effect',
  /** Inside the CRASH_AT-th send, before it is handed to SMTP: reserved, not sent. */
  AfterReserve: 'after-reserve',
  /** Right after the CRASH_AT-th SMTP send returned, before its done mark is flushed. */
  AfterSend: 'after-send',
} as const;
export type CrashPoint = (typeof CrashPoint)[keyof typeof CrashPoint];

/** The store a replica runs against. */
export type ReplicaStore =
  | { readonly backend: 'dynamodb'; readonly endpoint: string; readonly table: string }
  | { readonly backend: 'postgres'; readonly connectionString: string; readonly schema: string };

/** How one replica runs; `replicaEnv` turns it into the child's environment. */
export interface ReplicaOptions {
  readonly store: ReplicaStore;
  /** The window's scheduled time, e.g. `2026-11-30T06:00:00Z`. */
  readonly window: string;
  /** Customers in the window (synthetic, streamed). */
  readonly total: number;
  readonly smtpPort: number;
  /**
   * The invocation id (owner tokens start with it) and the Postgres application_name.
   * @default 'replica'
   */
  readonly name?: string;
  /** @default 4 */
  readonly concurrency?: number;
  /** @default 60 */
  readonly leaseSeconds?: number;
  /**
   * Added to Date.now() for every reading of the replica's clock.
   * @default 0
   */
  readonly clockSkewMs?: number;
  /** @default no crash */
  readonly crash?: { readonly point: CrashPoint; readonly at?: number };
  /**
   * DynamoDB only: shares of requests that are throttled, fail with a 500 or lose their reply, as
   * `throttle:0.1,server-error:0.05,lost-reply:0.03` (see test/helpers/faults.ts).
   * @default none
   */
  readonly faults?: string;
  /** @default 1 */
  readonly faultSeed?: number;
  /**
   * Wait for `go()` before firing, so a test can start several replicas and release them in order.
   * @default false
   */
  readonly waitForGo?: boolean;
  /**
   * Write a `sent` line per email; off for long runs, whose parent only wants `rss` lines.
   * @default true
   */
  readonly reportEachSend?: boolean;
  /**
   * Write an `rss` line after every this many emails.
   * @default 0 (never)
   */
  readonly rssEvery?: number;
  /**
   * Node flags for the child, e.g. `['--expose-gc']` so `rss` lines measure the heap after a full
   * collection. Not part of the environment: they go on the child's command line.
   * @default none
   */
  readonly nodeFlags?: readonly string[];
  /**
   * The message to run instead of the schedule's event: a shard's message as the window's
   * coordinator sent it to the work queue (`{ …event, continuation, shard, shards, deadline }`),
   * which makes the replica that shard's worker. See shardWorkerOptions.
   * @default the schedule's event for `window`
   */
  readonly message?: Readonly<Record<string, unknown>>;
}

/**
 * The options of a replica that works one shard of a split window: the message its coordinator
 * sent for that shard (a JSON body, as the work queue carries it), named after the shard.
 */
export function shardWorkerOptions(body: string): Pick<ReplicaOptions, 'message' | 'name'> {
  const message = JSON.parse(body) as Record<string, unknown>;
  if (typeof message.shard !== 'number' || typeof message.shards !== 'number') {
    throw new Error(
      `shardWorkerOptions: ${body.slice(0, 200)} is not a shard's message (no shard and shards)`,
    );
  }
  return { message, name: `shard-${message.shard}-of-${message.shards}` };
}

/** The child's environment for `options`: the contract, spelled out. */
export function replicaEnv(options: ReplicaOptions): Record<string, string> {
  const store: Record<string, string> =
    options.store.backend === 'dynamodb'
      ? { BACKEND: 'dynamodb', DYNAMO_ENDPOINT: options.store.endpoint, TABLE: options.store.table }
      : { BACKEND: 'postgres', DATABASE_URL: options.store.connectionString, SCHEMA: options.store.schema };
  return {
    ...store,
    WINDOW: options.window,
    TOTAL: String(options.total),
    SMTP_PORT: String(options.smtpPort),
    REPLICA: options.name ?? 'replica',
    CONCURRENCY: String(options.concurrency ?? 4),
    LEASE_SECONDS: String(options.leaseSeconds ?? 60),
    CLOCK_SKEW_MS: String(options.clockSkewMs ?? 0),
    CRASH: options.crash?.point ?? CrashPoint.None,
    CRASH_AT: String(options.crash?.at ?? 1),
    FAULTS: options.faults ?? 'none',
    FAULT_SEED: String(options.faultSeed ?? 1),
    START: options.waitForGo ? 'stdin' : 'now',
    SENT_LINES: options.reportEachSend === false ? 'none' : 'each',
    RSS_EVERY: String(options.rssEvery ?? 0),
    MESSAGE: options.message ? JSON.stringify(options.message) : 'schedule',
  };
}

/** A `claim` line. */
export interface ClaimLine {
  readonly kind: ClaimOutcome['kind'];
  readonly epoch?: number;
  readonly via?: string;
}

/** A `crash` line. */
export interface CrashLine {
  readonly point: CrashPoint;
  readonly n: number;
  readonly email: string;
}

/** An `rss` line. */
export interface RssSample {
  /** Emails sent when it was taken. */
  readonly sent: number;
  /** Resident set size. */
  readonly bytes: number;
  /** V8 heap in use. */
  readonly heapBytes: number;
}

/** How a replica ended, from its exit status and its last lines. */
export interface ReplicaExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly result?: HandlerResponse;
  readonly crash?: CrashLine;
  readonly faults?: Record<string, number>;
  /** Peak resident memory (getrusage) and CPU time, from the `usage` line. */
  readonly usage?: { readonly maxRssBytes: number; readonly cpuMs: number };
}

/** The parent's handle on a running replica. */
export interface Replica {
  readonly name: string;
  readonly process: ChildProcess;
  /** Emails the child reported accepted by the SMTP server, in order (with `reportEachSend`). */
  readonly sent: readonly string[];
  /** Emails sent so far, by the child's count (also without `reportEachSend`, from `rss` lines). */
  readonly sentCount: number;
  readonly claims: readonly ClaimLine[];
  /** Memory samples from `rss` lines: resident set and V8 heap in use (after a full GC with --expose-gc). */
  readonly rss: readonly RssSample[];
  readonly logs: readonly { readonly level: string; readonly message: string }[];
  /** Resolves with the first line (seen or to come) that `match` accepts; rejects if the child ends first. */
  until(match: (line: string) => boolean, what: string): Promise<string>;
  /** Resolves once the child has reported `n` emails sent. */
  untilSent(n: number): Promise<void>;
  /** Releases a replica started with `waitForGo`. */
  go(): void;
  /** SIGSTOP: the process freezes where it stands, sockets open, timers stopped. */
  freeze(): void;
  /** SIGCONT. */
  thaw(): void;
  /** Resolves once the process has exited and its output is read. */
  readonly exited: Promise<ReplicaExit>;
}

const SCRIPT = fileURLToPath(import.meta.url);
const REPO = resolve(dirname(SCRIPT), '../..');

/** Starts a replica in a child process (`node --import tsx` on this file). */
export function startReplica(options: ReplicaOptions): Replica {
  const name = options.name ?? 'replica';
  const child = spawn(
    process.execPath,
    // The condition: the job's `slotguard` imports resolve to the sources, as in this process.
    [...(options.nodeFlags ?? []), `--conditions=${SOURCE_CONDITION}`, '--import', 'tsx', SCRIPT],
    { cwd: REPO, env: { ...process.env, ...replicaEnv(options) }, stdio: ['pipe', 'pipe', 'pipe'] },
  );
  const seen: string[] = [];
  const sent: string[] = [];
  const claims: ClaimLine[] = [];
  const rss: RssSample[] = [];
  const logs: { level: string; message: string }[] = [];
  let sentCount = 0;
  let stderr = '';
  let ended: string | undefined;
  const exit: {
    result?: HandlerResponse;
    crash?: CrashLine;
    faults?: Record<string, number>;
    usage?: { maxRssBytes: number; cpuMs: number };
  } = {};
  const waiters = new Set<{
    match: (line: string) => boolean;
    resolve: (line: string) => void;
    fail: () => void;
  }>();

  // A child that died cannot read its `go`: the write fails with EPIPE, which is no test's concern.
  child.stdin.on('error', () => {});
  child.stderr.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString('utf8')).slice(-4_000);
  });
  createInterface({ input: child.stdout }).on('line', (line) => {
    const space = line.indexOf(' ');
    const kind = space < 0 ? line : line.slice(0, space);
    const rest = space < 0 ? '' : line.slice(space + 1);
    switch (kind) {
      case 'sent': {
        const [n, email] = rest.split(' ');
        sentCount = Number(n);
        if (email) sent.push(email);
        break;
      }
      case 'rss': {
        const [n = 0, bytes = 0, heapBytes = 0] = rest.split(' ').map(Number);
        sentCount = Math.max(sentCount, n);
        rss.push({ sent: n, bytes, heapBytes });
        break;
      }
      case 'claim':
        claims.push(JSON.parse(rest) as ClaimLine);
        break;
      case 'log':
        logs.push(JSON.parse(rest) as { level: string; message: string });
        break;
      case 'crash': {
        const [point, n, email] = rest.split(' ');
        exit.crash = { point: point as CrashPoint, n: Number(n), email: email ?? '' };
        break;
      }
      case 'faults':
        exit.faults = JSON.parse(rest) as Record<string, number>;
        break;
      case 'result':
        exit.result = JSON.parse(rest) as HandlerResponse;
        break;
      case 'usage':
        exit.usage = JSON.parse(rest) as { maxRssBytes: number; cpuMs: number };
        break;
      default:
        break;
    }
    // Only the lines a test may wait for are kept, so a long run's `sent` lines cost no memory.
    if (kind !== 'sent' && kind !== 'rss') seen.push(line);
    for (const waiter of waiters) {
      if (waiter.match(line)) {
        waiters.delete(waiter);
        waiter.resolve(line);
      }
    }
  });

  const exited = new Promise<ReplicaExit>((resolveExit) => {
    child.on('close', (code, signal) => {
      ended = `replica ${name} ended (${signal ?? `exit code ${code}`})`;
      for (const waiter of waiters) waiter.fail();
      waiters.clear();
      if (code !== 0 && signal === null) process.stderr.write(`${ended}; its stderr:\n${stderr}\n`);
      resolveExit({ code, signal, ...exit });
    });
  });

  const signal = (which: NodeJS.Signals) => {
    if (child.exitCode === null && child.signalCode === null) child.kill(which);
  };
  return {
    name,
    process: child,
    sent,
    get sentCount() {
      return sentCount;
    },
    claims,
    rss,
    logs,
    until(match, what) {
      const found = seen.find(match);
      if (found !== undefined) return Promise.resolve(found);
      return new Promise<string>((resolveLine, reject) => {
        const fail = () =>
          reject(new Error(`${ended ?? `replica ${name} ended`} before ${what}; its stderr:\n${stderr}`));
        if (ended) return fail();
        waiters.add({ match, resolve: resolveLine, fail });
      });
    },
    untilSent(n) {
      if (sentCount >= n) return Promise.resolve();
      return this.until(() => sentCount >= n, `sending ${n} emails`).then(() => {});
    },
    go: () => {
      child.stdin.write('go\n');
    },
    freeze: () => signal('SIGSTOP'),
    thaw: () => signal('SIGCONT'),
    exited,
  };
}

/** The child: reads its environment, fires the window, reports each step on stdout. */
async function runReplica(): Promise<void> {
  const { syntheticCustomers } = await import('../../functions/weekly-report/recipients.js');
  const { weeklyReportJob } = await import('../../functions/weekly-report/job.js');
  const { systemClock } = await import('../../shared/clock.js');
  const { smtpSender } = await import('../../shared/effects/smtp-email-sender.js');
  const { createJobHandler } = await import('../../shared/job/lambda-handler.js');
  const { emfMetrics } = await import('../../shared/telemetry/metrics.js');
  const { schedulerEvent } = await import('./harness.js');

  const env = readEnv(process.env);
  const write = (line: string) => process.stdout.write(`${line}\n`);
  const crash = (point: CrashPoint, n: number, email: string) => {
    write(`crash ${point} ${n} ${email}`);
    process.kill(process.pid, 'SIGKILL');
  };

  const store = await openStore(env);
  const smtp = smtpSender({
    host: '127.0.0.1',
    port: env.smtpPort,
    maxConnections: Math.min(env.concurrency, 16),
  });
  let started = 0;
  let sent = 0;
  async function* customers() {
    if (env.crash === CrashPoint.BeforeFirstEffect) crash(env.crash, 0, '-');
    yield* syntheticCustomers(env.total);
  }
  const handler = createJobHandler(
    weeklyReportJob({
      customers,
      sender: {
        async send(message, options) {
          if (++started === env.crashAt && env.crash === CrashPoint.AfterReserve) {
            crash(env.crash, started, message.to);
          }
          await smtp.send(message, options);
          const n = ++sent;
          if (env.reportEachSend) write(`sent ${n} ${message.to}`);
          if (env.rssEvery > 0 && n % env.rssEvery === 0) {
            // With --expose-gc (the stream bench), the heap is measured after a full collection:
            // what the run retains, apart from garbage not yet collected.
            (globalThis as { gc?: () => void }).gc?.();
            const { rss, heapUsed } = process.memoryUsage();
            write(`rss ${n} ${rss} ${heapUsed}`);
          }
          if (n === env.crashAt && env.crash === CrashPoint.AfterSend) crash(env.crash, n, message.to);
        },
      },
      concurrency: env.concurrency,
    }),
    {
      backend: { ...store.backend, claims: reportingClaims(store.backend.claims, write) },
      metrics: () => emfMetrics({ jobId: 'weekly-report', write: () => {} }),
      log: {
        info() {},
        warn: (message) => write(`log ${JSON.stringify({ level: 'warn', message })}`),
        error: (message) => write(`log ${JSON.stringify({ level: 'error', message })}`),
      },
      clock: { now: () => Date.now() + env.clockSkewMs, schedule: systemClock.schedule },
      options: { leaseMs: env.leaseSeconds * 1000, effectConcurrency: env.concurrency },
    },
  );

  write('ready');
  if (env.waitForGo) await lineOnStdin();
  const event = env.message ?? schedulerEvent('weekly-report', env.window, env.attempt, `exec-${env.name}`);
  const result = await handler(event, {
    awsRequestId: env.name,
    getRemainingTimeInMillis: () => 900_000,
  });
  write(`result ${JSON.stringify(result)}`);
  if (store.faults) write(`faults ${JSON.stringify(store.faults)}`);
  smtp.close();
  await store.close();
  const usage = process.resourceUsage();
  write(
    `usage ${JSON.stringify({ maxRssBytes: usage.maxRSS * 1024, cpuMs: Math.round((usage.userCPUTime + usage.systemCPUTime) / 1000) })}`,
  );
}

interface ReplicaConfig {
  readonly store: ReplicaStore;
  readonly window: string;
  readonly total: number;
  readonly smtpPort: number;
  readonly name: string;
  readonly attempt: number;
  readonly concurrency: number;
  readonly leaseSeconds: number;
  readonly clockSkewMs: number;
  readonly crash: CrashPoint;
  readonly crashAt: number;
  readonly faults: string;
  readonly faultSeed: number;
  readonly waitForGo: boolean;
  readonly reportEachSend: boolean;
  readonly rssEvery: number;
  /** A work-queue message to run instead of the schedule's event. */
  readonly message: Record<string, unknown> | undefined;
}

function readEnv(env: NodeJS.ProcessEnv): ReplicaConfig {
  const text = (name: string, fallback?: string): string => {
    const value = env[name] ?? fallback;
    if (value === undefined || value === '')
      throw new Error(`replica-process needs ${name} in its environment`);
    return value;
  };
  const number = (name: string, fallback?: number): number => {
    const value = Number(text(name, fallback === undefined ? undefined : String(fallback)));
    if (!Number.isFinite(value)) throw new Error(`replica-process: ${name} is ${env[name]}; use a number`);
    return value;
  };
  const backend = text('BACKEND', 'dynamodb');
  const crash = text('CRASH', CrashPoint.None) as CrashPoint;
  if (!Object.values(CrashPoint).includes(crash)) {
    throw new Error(`replica-process: CRASH is ${crash}; use one of ${Object.values(CrashPoint).join(', ')}`);
  }
  let store: ReplicaStore;
  if (backend === 'dynamodb') {
    store = { backend, endpoint: text('DYNAMO_ENDPOINT'), table: text('TABLE') };
  } else if (backend === 'postgres') {
    store = { backend, connectionString: text('DATABASE_URL'), schema: text('SCHEMA') };
  } else {
    throw new Error(`replica-process: BACKEND is ${backend}; use dynamodb or postgres`);
  }
  return {
    store,
    window: text('WINDOW'),
    total: number('TOTAL'),
    smtpPort: number('SMTP_PORT'),
    name: text('REPLICA', 'replica'),
    attempt: number('ATTEMPT', 1),
    concurrency: number('CONCURRENCY', 4),
    leaseSeconds: number('LEASE_SECONDS', 60),
    clockSkewMs: number('CLOCK_SKEW_MS', 0),
    crash,
    crashAt: number('CRASH_AT', 1),
    faults: text('FAULTS', 'none'),
    faultSeed: number('FAULT_SEED', 1),
    waitForGo: text('START', 'now') === 'stdin',
    reportEachSend: text('SENT_LINES', 'each') !== 'none',
    rssEvery: number('RSS_EVERY', 0),
    message: readMessage(text('MESSAGE', 'schedule')),
  };
}

/** MESSAGE: `schedule` (fire the window), or a work-queue message's JSON body to run. */
function readMessage(text: string): Record<string, unknown> | undefined {
  if (text === 'schedule') return undefined;
  try {
    return JSON.parse(text) as Record<string, unknown>;
  } catch {
    throw new Error(
      `replica-process: MESSAGE is ${text.slice(0, 80)}; use 'schedule' or a message's JSON body`,
    );
  }
}

/** The backend the child runs on, with the store faults it was asked for, and how to let it go. */
async function openStore(env: ReplicaConfig) {
  const plan = parseFaults(env.faults);
  if (plan && env.store.backend !== 'dynamodb')
    throw new Error('replica-process: FAULTS are injected into DynamoDB clients only');
  const { injectFaults } = await import('./faults.js');
  let faults: ReturnType<typeof injectFaults> | undefined;
  const store = await openReplicaStore(env.store, {
    name: env.name,
    poolMax: Math.min(env.concurrency + 2, 32),
    dynamoClient: (client) => {
      if (plan) faults = injectFaults(client, { ...plan, seed: env.faultSeed });
    },
  });
  return { ...store, faults };
}

/**
 * A backend on `store` as a replica (or the shards bench's worker) opens it: the test effect-key
 * secret, a client or pool of its own named `name`. `dynamoClient` and `postgresPool` see the
 * client or pool before any request, to inject faults or count requests.
 */
export async function openReplicaStore(
  store: ReplicaStore,
  options: {
    readonly name: string;
    readonly poolMax: number;
    readonly dynamoClient?: (client: DynamoDBClient) => void;
    readonly postgresPool?: (pool: Pool) => void;
  },
): Promise<{ readonly backend: SlotBackend; close(): Promise<void> }> {
  const { hmacEffectKeys } = await import('../../shared/effects/effect-key.js');
  const { TEST_SECRET, testBackend } = await import('./harness.js');
  if (store.backend === 'dynamodb') {
    const { createDynamoClient } = await import('../../shared/backends/dynamodb/dynamodb-backend.js');
    const client = createDynamoClient({ endpoint: store.endpoint });
    options.dynamoClient?.(client);
    return { backend: testBackend(client, store.table), close: async () => client.destroy() };
  }
  const { createPostgresPool, postgresBackend } = await import('../../shared/backends/postgres/index.js');
  const pool = createPostgresPool({
    connectionString: store.connectionString,
    applicationName: options.name,
    max: options.poolMax,
  });
  options.postgresPool?.(pool);
  return {
    backend: postgresBackend({ pool, schema: store.schema, hashKey: hmacEffectKeys(TEST_SECRET) }),
    close: () => pool.end(),
  };
}

/** `throttle:0.1,server-error:0.05,lost-reply:0.03`, or undefined for `none`. */
function parseFaults(text: string): { throttle: number; serverError: number; lostReply: number } | undefined {
  if (text === 'none') return undefined;
  const plan = { throttle: 0, serverError: 0, lostReply: 0 };
  const names = { throttle: 'throttle', 'server-error': 'serverError', 'lost-reply': 'lostReply' } as const;
  for (const part of text.split(',')) {
    const [name, share] = part.split(':');
    const field = names[name as keyof typeof names];
    const value = Number(share);
    if (!field || !(value >= 0 && value < 1)) {
      throw new Error(
        `replica-process: FAULTS has ${JSON.stringify(part)}; use e.g. throttle:0.1,server-error:0.05,lost-reply:0.03`,
      );
    }
    plan[field] = value;
  }
  return plan;
}

/** The claim store, writing each claim's outcome as a `claim` line. */
function reportingClaims(claims: ClaimStore, write: (line: string) => void): ClaimStore {
  return {
    async claim(slot: Slot, lease, now) {
      const outcome = await claims.claim(slot, lease, now);
      const line =
        outcome.kind === 'claimed'
          ? { kind: outcome.kind, epoch: outcome.claim.epoch, via: outcome.claim.via }
          : { kind: outcome.kind, ...(outcome.kind === 'held' ? { epoch: outcome.epoch } : {}) };
      write(`claim ${JSON.stringify(line)}`);
      return outcome;
    },
    renew: (claim, leaseMs, now) => claims.renew(claim, leaseMs, now),
    checkpoint: (claim, checkpoint, progress, doneMarks) =>
      claims.checkpoint(claim, checkpoint, progress, doneMarks),
    complete: (claim, summary, now) => claims.complete(claim, summary, now),
    release: (claim, reason, now) => claims.release(claim, reason, now),
    read: (slot) => claims.read(slot),
    shardFinished: (window, shard) => claims.shardFinished(window, shard),
    finishSharded: (window, finish, now) => claims.finishSharded(window, finish, now),
  };
}

function lineOnStdin(): Promise<void> {
  return new Promise((resolveLine) => {
    const lines = createInterface({ input: process.stdin });
    lines.once('line', () => {
      lines.close();
      resolveLine();
    });
  });
}

if (resolve(process.argv[1] ?? '') === SCRIPT) {
  try {
    await runReplica();
    process.exit(0);
  } catch (error) {
    process.stderr.write(
      `replica failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exit(1);
  }
}
