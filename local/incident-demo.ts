import { writeFileSync } from 'node:fs';
import { findLocalJob } from '../functions/local-jobs.js';
import { WEEKLY_REPORT_JOB_ID } from '../functions/weekly-report/job.js';
import { type Clock, systemClock } from '../shared/clock.js';
import { drainConcurrently } from '../shared/effects/concurrent-drain.js';
import { isResumable } from '../shared/effects/resumable-source.js';
import { smtpSender } from '../shared/effects/smtp-email-sender.js';
import { TokenBucket } from '../shared/effects/token-bucket.js';
import { EffectNotPerformedError, NotPerformedReason, SlotguardError } from '../shared/errors.js';
import type { JobContext } from '../shared/job/job-definition.js';
import { JOB_DEFAULTS } from '../shared/job/job-spec.js';
import { windowOf } from '../shared/slot/slot.js';
import { emfMetrics } from '../shared/telemetry/metrics.js';
import { fileLog } from './file-log.js';
import { type LocalBackendKind, openLocalBackend } from './local-backend.js';
import { LocalRunner, type ResolvedInDoubt, type TerminalOutput, windowSender } from './local-runner.js';
import { rateLimitedSender } from './rate-limited-sender.js';
import { FaultKind } from './replica-faults.js';
import { type SmtpSink, startSmtpSink } from './smtp-sink.js';
import { recordSmtpWords } from './smtp-word-recorder.js';
import { type WindowOutcome, windowOutcome } from './window-outcome.js';

/** The demo's knobs: `npm start`'s flags. */
export interface IncidentDemoOptions {
  readonly replicas: number;
  readonly recipients: number;
  readonly concurrency: number;
  /** Where the run's JSON log and EMF metrics go. */
  readonly outputDir: string;
  /** Progress and the final table. */
  readonly out: TerminalOutput;
  /** @default 'dynamodb' (dynalite, in process) */
  readonly backend?: LocalBackendKind;
  /** Postgres: the server; else an embedded one is started. @default DATABASE_URL */
  readonly databaseUrl?: string;
  /** Faults injected on the slotguard side. @default none */
  readonly faults?: readonly FaultKind[];
  /** Seed of the crash and pause points. @default random, printed */
  readonly seed?: number;
  /**
   * The slotguard side's lease. A crash or a pause is recovered once the lease runs out, so with
   * those faults a short lease keeps the demo short.
   * @default 60, or with crash or pause 5 (DynamoDB), 15 (Postgres)
   */
  readonly leaseSeconds?: number;
  /**
   * The provider's send rate, emails per second: every email of a side goes through one
   * TokenBucket at this rate, as SesEmailSender keeps to SES's.
   * @default unlimited
   */
  readonly sendRatePerSecond?: number;
  /**
   * Lambda's time limit, in seconds, for every invocation of both sides: an unguarded replica is
   * stopped there with whatever it has not sent; slotguard's runs stop in time and the work queue
   * delivers the window again until it is finished.
   * @default the weekly report's timeoutSeconds (900)
   */
  readonly lambdaTimeoutSeconds?: number;
  /**
   * Shards the slotguard side splits the window into (the job's RunOptions.shards): its first run
   * sends one message per shard to the work queue and the shards run at once, each as its own
   * invocations, sharing the send rate.
   * @default 1
   */
  readonly shards?: number;
  /**
   * Ends the output with one line of JSON: the slotguard side's WindowOutcome (`delivered`,
   * `duplicates`, `inDoubt`, `resolved`, `confirmed`, `rejected`, `resent`, `failed`,
   * `unfinished`, `runs`, `shards`).
   * @default false
   */
  readonly json?: boolean;
  /**
   * The clock of the window, the send rate, Lambda's time limit, leases and the work queue.
   * @default the system clock
   */
  readonly clock?: Clock;
}

/** What one side of the comparison came to, read from the SMTP server. */
export interface SideResult {
  /** Invocations the window was delivered to. */
  readonly fires: number;
  /**
   * Invocations that ran the job's loop: unguarded, every replica; slotguard, those that claimed
   * the window (one, plus one per continuation and per takeover).
   */
  readonly runs: number;
  readonly delivered: number;
  readonly recipientsReached: number;
  /** Emails beyond the first to any recipient. */
  readonly duplicates: number;
  /**
   * Effects in doubt once the window is over, as measured in the ledger: what the provider's word
   * did not settle.
   */
  readonly inDoubt: number | undefined;
  readonly seconds: number;
}

/** Both sides of the comparison, and what the provider's word settled. */
export interface IncidentDemoResult {
  readonly unguarded: SideResult;
  readonly guarded: SideResult;
  /** Effects a crash or a pause left in doubt that the window settled from the SMTP server's record. */
  readonly resolution: ResolvedInDoubt;
  /** The faults that struck, in words. */
  readonly faults: readonly string[];
  readonly seed: number;
  /** The slotguard side's window at the end, per recipient: the JSON line. */
  readonly outcome: WindowOutcome;
}

/**
 * Replays the incident on this machine: the weekly report, fired for one window by N replicas at
 * once, first as the app did it (each replica sends to everyone), then through slotguard, by the
 * local runner, with any faults asked for. Email travels over SMTP to a real server on loopback;
 * the counts come from what it received.
 */
export async function runIncidentDemo(options: IncidentDemoOptions): Promise<IncidentDemoResult> {
  const { out } = options;
  const clock = options.clock ?? systemClock;
  const faults = options.faults ?? [];
  const kind = options.backend ?? 'dynamodb';
  const backend = await openLocalBackend({
    kind,
    thread: true,
    ...(options.databaseUrl ? { databaseUrl: options.databaseUrl } : {}),
  });
  // The provider's word on every effect it accepts, on record before the send returns: what the
  // slotguard side's runs settle effects left in doubt from. The unguarded side's mail is no effect.
  const sink = await startSmtpSink({ onWord: recordSmtpWords(backend.backend.ledger, clock) }).catch(
    async (error: unknown) => {
      await backend.close();
      throw error;
    },
  );
  const senders: { close(): void }[] = [];
  // One provider per side: every sender of a side shares its send rate.
  let bucket: TokenBucket | undefined;
  const senderFor = (from: string) => {
    const smtp = smtpSender({ host: sink.host, port: sink.port, from, maxConnections: 16 });
    const sender = bucket ? rateLimitedSender(smtp, bucket) : smtp;
    senders.push(sender);
    return sender;
  };
  const newBucket = () =>
    options.sendRatePerSecond === undefined
      ? undefined
      : new TokenBucket({ ratePerSecond: options.sendRatePerSecond, clock });
  try {
    // The window is this minute, as a schedule firing now would have stamped it.
    const now = clock.now();
    const window = new Date(windowOf(now - (now % 60_000)));
    const job = findLocalJob(WEEKLY_REPORT_JOB_ID, { customers: options.recipients });
    const lambdaTimeoutMs =
      (options.lambdaTimeoutSeconds ?? job.spec.timeoutSeconds ?? JOB_DEFAULTS.timeoutSeconds) * 1000;
    const limits = [
      options.sendRatePerSecond !== undefined ? `${options.sendRatePerSecond} emails a second` : undefined,
      options.lambdaTimeoutSeconds !== undefined
        ? `Lambda's time limit ${options.lambdaTimeoutSeconds} s`
        : undefined,
    ].filter((limit) => limit !== undefined);
    out.write(
      `Replaying the incident: ${options.replicas} replicas fire the weekly report for window ${windowOf(window)}, ` +
        `${options.recipients.toLocaleString('en-US')} customers${limits.length > 0 ? `, ${limits.join(', ')}` : ''}.\n`,
    );

    bucket = newBucket();
    const unguarded = await measure('unguarded', options, clock, sink, async () => {
      // As the app did it: every replica runs the send loop, which assumes it runs once, until
      // Lambda stops it at its time limit.
      const definition = job.definition(senderFor(windowSender(job.spec.id, window)));
      await Promise.all(
        Array.from({ length: options.replicas }, () =>
          definition.run(unguardedContext(window, options.concurrency, clock, lambdaTimeoutMs)),
        ),
      );
      return { fires: options.replicas, runs: options.replicas, inDoubt: undefined };
    });

    sink.reset();
    bucket = newBucket();
    const shards = options.shards ?? 1;
    out.write(
      `slotguard on ${backend.description}${shards > 1 ? `, the window split into ${shards} shards` : ''}` +
        `${faults.length > 0 ? `, faults: ${faults.join(', ')}` : ''}\n`,
    );
    const emfPath = `${options.outputDir}/last-run.emf.jsonl`;
    const emfLines: string[] = [];
    const log = fileLog(`${options.outputDir}/last-run.log.jsonl`);
    // A crash or a pause is recovered once the lease runs out: a short lease keeps the demo short.
    // Postgres needs its 5 s client-side deadline inside the lease's safety margin (a sixth of it).
    const shortLease = faults.includes(FaultKind.Crash) || faults.includes(FaultKind.Pause);
    const leaseSeconds = options.leaseSeconds ?? (shortLease ? (kind === 'postgres' ? 30 : 5) : undefined);
    const runner: LocalRunner = new LocalRunner({
      jobs: [job],
      backend: backend.backend,
      senderFor,
      // It records the provider's word, so the runner settles what a crash or a pause leaves in doubt.
      sink,
      log,
      clock,
      lambdaTimeoutMs,
      metrics: (jobId: string) => emfMetrics({ jobId, write: (line) => emfLines.push(line) }),
      runOptions: {
        effectConcurrency: options.concurrency,
        ...(leaseSeconds ? { leaseMs: leaseSeconds * 1000 } : {}),
        ...(options.shards !== undefined ? { shards: options.shards } : {}),
      },
      replicas: options.replicas,
      faults,
      ...(options.seed !== undefined ? { seed: options.seed } : {}),
      // A run that throws is retried a minute later, then two, and so on until the deadline, as
      // deployed; the demo stops instead and shows the error.
      onError: () => void runner.stop(),
    });
    let resolution: ResolvedInDoubt = { confirmed: 0, rejected: 0, resent: 0 };
    let struck: readonly string[] = [];
    const guarded = await measure('slotguard', options, clock, sink, async () => {
      const report = await runner.fire(job, window);
      // Messages left in the queue (duplicates that would stand down) go with the runner.
      await runner.stop();
      if (report.claimedBy.length === 0 && report.errors.length > 0) {
        throw new SlotguardError(`every delivery of the window failed; the first: ${report.errors[0]}`);
      }
      for (const error of new Set(report.errors)) out.write(`  delivery failed: ${error}\n`);
      struck = report.faults;
      resolution = report.resolved;
      return { fires: report.fires, runs: report.runs, inDoubt: report.inDoubt };
    });
    writeFileSync(emfPath, emfLines.map((line) => `${line}\n`).join(''));

    const outcome = await windowOutcome({
      job,
      window,
      backend: backend.backend,
      mail: sink.from(windowSender(job.spec.id, window)),
      resolved: resolution,
    });
    const result = { unguarded, guarded, resolution, faults: struck, seed: runner.seed, outcome };
    printTable(out, options, result);
    out.write(`Log: ${options.outputDir}/last-run.log.jsonl  Metrics (EMF): ${emfPath}\n`);
    if (options.json) out.write(`${JSON.stringify(outcome)}\n`);
    return result;
  } finally {
    for (const sender of senders) sender.close();
    await Promise.all([sink.close(), backend.close()]);
  }
}

/**
 * The job's context with no guard at all: every effect runs, every time, until Lambda stops the
 * invocation at `timeLimitMs`: from then on it takes no recipient and sends nothing more.
 */
function unguardedContext(window: Date, concurrency: number, clock: Clock, timeLimitMs: number): JobContext {
  const stopped = new AbortController();
  const { signal } = stopped;
  const cancel = clock.schedule(timeLimitMs, () => stopped.abort(new Error("Lambda's time limit")));
  const cutOff = async (send: () => Promise<void>) => {
    try {
      await send();
    } catch (error) {
      // Waiting for the send rate when the time ran out: that email never left.
      const cancelled =
        error instanceof EffectNotPerformedError && error.reason === NotPerformedReason.Cancelled;
      if (!(cancelled && signal.aborted)) throw error;
    }
  };
  return {
    slot: { jobId: WEEKLY_REPORT_JOB_ID, window: windowOf(window) },
    scheduledTime: window,
    epoch: 0,
    delivery: {},
    signal,
    payload: undefined,
    log: { info() {}, warn() {}, error() {} },
    async once(_key, effect) {
      await cutOff(() => effect(signal));
      return 'done';
    },
    async onceEach(items, _options, effect) {
      const all = isResumable(items) ? items.read(undefined) : items;
      try {
        await drainConcurrently(
          all,
          concurrency,
          (item) => cutOff(() => effect(item, signal)),
          () => signal.aborted,
        );
      } finally {
        cancel();
      }
    },
  };
}

async function measure(
  label: string,
  options: IncidentDemoOptions,
  clock: Clock,
  sink: SmtpSink,
  run: () => Promise<{ fires: number; runs: number; inDoubt: number | undefined }>,
): Promise<SideResult> {
  const started = clock.now();
  const progress = startProgress(label, options, clock, sink, started);
  try {
    const { fires, runs, inDoubt } = await run();
    const seconds = (clock.now() - started) / 1000;
    const delivered = sink.total();
    const result = {
      fires,
      runs,
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

function startProgress(
  label: string,
  options: IncidentDemoOptions,
  clock: Clock,
  sink: SmtpSink,
  started: number,
) {
  const { out } = options;
  const line = () =>
    `  ${label.padEnd(10)} ${sink.total().toLocaleString('en-US').padStart(9)} emails delivered  ` +
    `${((clock.now() - started) / 1000).toFixed(1).padStart(5)} s`;
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

function printTable(out: TerminalOutput, options: IncidentDemoOptions, r: IncidentDemoResult): void {
  const n = (value: number | undefined) => (value === undefined ? '-' : value.toLocaleString('en-US'));
  const rows: [string, string, string][] = [
    ['fires', n(r.unguarded.fires), n(r.guarded.fires)],
    ['runs', n(r.unguarded.runs), n(r.guarded.runs)],
    ['shards', '-', n(r.outcome.shards)],
    ['emails delivered', n(r.unguarded.delivered), n(r.guarded.delivered)],
    ['duplicates', n(r.unguarded.duplicates), n(r.guarded.duplicates)],
    ['in doubt', n(r.unguarded.inDoubt), n(r.guarded.inDoubt)],
    ['in doubt resolved', '-', n(r.outcome.resolved)],
    ['time', `${r.unguarded.seconds.toFixed(1)} s`, `${r.guarded.seconds.toFixed(1)} s`],
  ];
  out.write(`\n${''.padEnd(18)}${'unguarded'.padStart(12)}${'slotguard'.padStart(12)}\n`);
  for (const [name, a, b] of rows) out.write(`${name.padEnd(18)}${a.padStart(12)}${b.padStart(12)}\n`);
  out.write(
    `\n${n(options.recipients)} customers, ${options.replicas} replicas: unguarded sent ${n(r.unguarded.delivered)}, ` +
      `slotguard sent ${n(r.guarded.delivered)}.\n`,
  );
  if (r.outcome.shards > 1) {
    out.write(
      `slotguard's window was split into ${n(r.outcome.shards)} shards that ran at once, each continued ` +
        'from the work queue until it was finished; the last one to end finished the window.\n',
    );
  } else if (r.guarded.runs > 1) {
    out.write(
      `slotguard's window took ${n(r.guarded.runs)} runs: the work queue delivered it again after each run ` +
        'that stopped with work left (out of time, or taken over after a fault).\n',
    );
  }
  if (r.outcome.unfinished > 0 || r.outcome.failed > 0) {
    out.write(
      `Not finished: ${n(r.outcome.unfinished)} customers got nothing and are neither in doubt nor failed; ` +
        `${n(r.outcome.failed)} failed.\n`,
    );
  }
  if (r.faults.length > 0) out.write(`Faults (seed ${r.seed}): ${r.faults.join('; ')}.\n`);
  const { resolved, confirmed, rejected, resent, inDoubt } = r.outcome;
  if (resolved > 0) {
    out.write(
      `Left in doubt by the faults: ${n(resolved + inDoubt)}. Settled from the SMTP server's record of each message ` +
        `(the provider's word, on record before it acknowledged the message): ${n(confirmed)} had gone (done, not sent again), ` +
        `${n(rejected)} refused and ${n(resent)} never accepted (sent by the window's retry); ${n(inDoubt)} still in doubt.\n`,
    );
  }
}
