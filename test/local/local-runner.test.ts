import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { jobCatalog } from '../../functions/catalog.js';
import { type LocalJob, localJob } from '../../functions/local-jobs.js';
import { type LocalBackend, openLocalBackend } from '../../local/local-backend.js';
import { describeWindow, LocalRunner, type WindowReport, windowSender } from '../../local/local-runner.js';
import { rateLimitedSender } from '../../local/rate-limited-sender.js';
import type { FaultKind } from '../../local/replica-faults.js';
import { startServe } from '../../local/serve.js';
import { type SmtpSink, startSmtpSink } from '../../local/smtp-sink.js';
import { smtpSender } from '../../shared/effects/smtp-email-sender.js';
import { TokenBucket } from '../../shared/effects/token-bucket.js';
import type { CatchUpPolicy } from '../../shared/job/job-spec.js';
import { useDynamo } from '../helpers/dynalite.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { inVirtualTime, VirtualClock } from '../helpers/virtual-clock.js';
import { InFlight } from './in-flight.js';
import { ScaledClock } from './scaled-clock.js';

const dynamo = useDynamo();
let sink: SmtpSink;
const opened: LocalBackend[] = [];

beforeAll(async () => {
  sink = await startSmtpSink();
});
afterAll(async () => {
  await Promise.all(opened.map((backend) => backend.close()));
  await sink.close();
});
beforeEach(() => sink.reset());

const paymentSpec = jobCatalog.find((job) => job.id === 'payment-reminder')!;

function paymentJob(invoicesPerWindow: number, catchUp?: CatchUpPolicy): LocalJob {
  return localJob({ ...paymentSpec, ...(catchUp ? { catchUp } : {}) }, { invoicesPerWindow });
}

async function freshBackend(): Promise<LocalBackend> {
  const backend = await openLocalBackend({
    endpoint: dynamo.endpoint,
    tableName: await dynamo.freshTable('runner'),
  });
  opened.push(backend);
  return backend;
}

interface RunnerOptions {
  faults?: FaultKind[];
  replicas?: number;
  seed?: number;
  onFault?: (fault: string) => void;
  reports?: WindowReport[];
  /** Counts store requests and emails under way, for a test in virtual time. */
  inFlight?: InFlight;
  /** Emails a second, on the clock. @default unlimited */
  sendRate?: number;
  lambdaTimeoutMs?: number;
  /** The job's RunOptions.shards. @default 1 */
  shards?: number;
}

function runner(backend: LocalBackend, clock: ManualClock, jobs: LocalJob[], options: RunnerOptions = {}) {
  const io = options.inFlight;
  const bucket = options.sendRate ? new TokenBucket({ ratePerSecond: options.sendRate, clock }) : undefined;
  return new LocalRunner({
    jobs,
    backend: io ? io.backend(backend.backend) : backend.backend,
    senderFor: (from) => {
      const smtp = smtpSender({ host: sink.host, port: sink.port, from, maxConnections: 4 });
      const counted = io ? io.sender(smtp) : smtp;
      return bucket ? rateLimitedSender(counted, bucket) : counted;
    },
    sink,
    clock,
    replicas: options.replicas ?? 3,
    faults: options.faults ?? [],
    seed: options.seed ?? 1,
    ...(options.lambdaTimeoutMs ? { lambdaTimeoutMs: options.lambdaTimeoutMs } : {}),
    ...(options.shards ? { runOptions: { shards: options.shards } } : {}),
    ...(options.onFault ? { onFault: options.onFault } : {}),
    ...(options.reports ? { onWindow: (report: WindowReport) => options.reports!.push(report) } : {}),
  });
}

/**
 * Fires the payment reminder's window at `time` with `invoices` on a fresh table and runs it in
 * virtual time until it is over: every lease, send-rate token and redelivery passes at once, no
 * request or email is overtaken by time. Its report, and the faults that struck.
 */
async function windowInVirtualTime(
  time: string,
  invoices: number,
  options: Omit<RunnerOptions, 'inFlight' | 'onFault' | 'reports'>,
) {
  const window = new Date(`2026-11-30T${time}:00Z`);
  const clock = new VirtualClock(window.getTime());
  const io = new InFlight();
  const strikes: string[] = [];
  const job = paymentJob(invoices);
  const local = runner(await freshBackend(), clock, [job], {
    ...options,
    inFlight: io,
    onFault: (fault) => strikes.push(fault),
  });
  const report = await inVirtualTime(clock, io.count, local.fire(job, window));
  await local.stop();
  return { report, strikes, mail: sink.from(windowSender(job.spec.id, window)) };
}

describe('the local runner', () => {
  it('runs each window once on its schedule with 3 replicas, duplicate deliveries and a retry, counted by the SMTP server', async () => {
    const backend = await freshBackend();
    const clock = new ManualClock(Date.parse('2026-11-30T05:59:00Z'));
    const reports: WindowReport[] = [];
    const local = runner(backend, clock, [paymentJob(5)], { faults: ['duplicate', 'retry'], reports });
    await local.start({ catchUp: false });
    for (let i = 0; i < 3; i++) {
      // 05:59 → 06:00, then a quarter of an hour each time: the rate(15 minutes) grid.
      await clock.advance(i === 0 ? 60_000 : 15 * 60_000);
      await local.idle();
    }
    await local.stop();

    expect(reports.map((r) => r.window)).toEqual([
      '2026-11-30T06:00:00Z',
      '2026-11-30T06:15:00Z',
      '2026-11-30T06:30:00Z',
    ]);
    for (const report of reports) {
      // 3 replicas and the retry (attempt number 2), each message's first delivery handed out
      // twice: 8 fires, 1 run.
      expect(report).toMatchObject({
        fires: 8,
        runs: 1,
        state: 'DONE',
        epoch: 1,
        delivered: 5,
        duplicates: 0,
        inDoubt: 0,
        done: 5,
      });
      expect(report.claimedBy).toHaveLength(1);
      const record = await backend.backend.claims.read({ jobId: 'payment-reminder', window: report.window });
      expect(record).toMatchObject({ attempts: 1, state: 'DONE' });
    }
    expect(sink.total()).toBe(15);
    expect(sink.duplicates()).toBe(0);
  });

  it('runs several windows once each with every fault injected: 3 replicas, duplicates, a retry, a crash and a pause per window', async () => {
    const backend = await freshBackend();
    const clock = new VirtualClock(Date.parse('2026-11-30T05:59:00Z'));
    const io = new InFlight();
    const strikes: string[] = [];
    const reports: WindowReport[] = [];
    const local = runner(backend, clock, [paymentJob(20)], {
      faults: ['duplicate', 'retry', 'crash', 'pause'],
      seed: 5,
      reports,
      inFlight: io,
      onFault: (fault) => strikes.push(fault),
    });
    await local.start({ catchUp: false });
    for (const fireAt of ['06:00', '06:15']) {
      await clock.advance(Date.parse(`2026-11-30T${fireAt}:00Z`) - clock.now());
      // A crashed or frozen holder's window comes back from the queue once its lease is over: time
      // moves to each redelivery, and the window ends.
      await inVirtualTime(clock, io.count, local.idle());
    }
    await local.stop();

    expect(reports.map((r) => r.window)).toEqual(['2026-11-30T06:00:00Z', '2026-11-30T06:15:00Z']);
    expect(strikes.filter((s) => s.includes('crashed'))).toHaveLength(2);
    for (const report of reports) {
      expect(report).toMatchObject({ state: 'DONE', duplicates: 0 });
      // One claim per run that performed effects: the first holder, then one per takeover.
      expect(report.claimedBy).toHaveLength(1 + report.faults.length);
      expect(report.runs).toBe(report.claimedBy.length);
      expect(report.epoch).toBe(report.runs);
      expect(report.done + report.inDoubt).toBe(20);
      expect(report.delivered).toBeGreaterThanOrEqual(20 - report.inDoubt);
      expect(report.delivered).toBeLessThanOrEqual(20);
    }
    expect(sink.duplicates()).toBe(0);
  });

  it('does not email an invoice twice when the holder crashes at a random effect and a redelivery takes over after the lease', async () => {
    const { report, strikes, mail } = await windowInVirtualTime('06:00', 40, { faults: ['crash'], seed: 7 });

    expect(strikes).toHaveLength(1);
    expect(strikes[0]).toMatch(/replica-\d crashed at effect \d+ \((before|after)-send\)/);
    // Nobody took the slot before the crashed holder's lease was over; then a message that had
    // found the slot held came back and took it over.
    expect(report.claimedBy).toHaveLength(2);
    expect(report.claimedBy[1]).toMatch(/\/redelivery-1$/);
    expect(report.ms).toBeGreaterThan(60_000);
    expect(report).toMatchObject({ state: 'DONE', epoch: 2, runs: 2, duplicates: 0 });
    // Every invoice is either recorded done or in doubt; what is in doubt was sent at most once.
    expect(report.done + report.inDoubt).toBe(40);
    expect(report.delivered).toBeGreaterThanOrEqual(40 - report.inDoubt);
    expect(report.delivered).toBeLessThanOrEqual(40);
    expect(mail.duplicates).toBe(0);
  });

  it('fences a holder frozen past its lease: the takeover finishes the window and the zombie sends nothing twice', async () => {
    const { report, strikes } = await windowInVirtualTime('06:15', 40, {
      faults: ['pause', 'duplicate'],
      seed: 11,
    });

    expect(strikes).toHaveLength(1);
    expect(strikes[0]).toMatch(/froze at effect/);
    expect(report.claimedBy).toHaveLength(2);
    expect(report).toMatchObject({ state: 'DONE', epoch: 2, duplicates: 0, delivered: 40 });
    expect(report.done + report.inDoubt).toBe(40);
    expect(sink.duplicates()).toBe(0);
  });

  it('finishes a window bigger than one Lambda run from the work queue, none twice, when its holder crashes mid-window', async () => {
    // 10 emails a second and 10-second invocations: a run reserves for 7.5 s (a quarter of its time
    // is kept to stop in), and its 8 effects under way drain in under a second: about 80 a run.
    const { report, strikes, mail } = await windowInVirtualTime('06:30', 200, {
      faults: ['crash'],
      seed: 3,
      replicas: 2,
      sendRate: 10,
      lambdaTimeoutMs: 10_000,
    });

    expect(strikes).toHaveLength(1);
    // The crash struck a continuation: the first run had stopped for time, and its message had
    // come back.
    expect(strikes[0]).toMatch(/replica-\d\/redelivery-\d+ crashed at effect \d+/);
    expect(report).toMatchObject({ state: 'DONE', duplicates: 0, failed: 0, errors: [] });
    // The first run, the continuation that crashed, and the takeover that finished the window.
    expect(report.runs).toBeGreaterThanOrEqual(3);
    expect(report.runs).toBe(report.claimedBy.length);
    expect(report.epoch).toBe(report.runs);
    // Continuations are redeliveries of the window's messages, each run under its own time limit.
    expect(report.claimedBy.slice(1).every((name) => /\/redelivery-\d+$/.test(name))).toBe(true);
    expect(report.done + report.inDoubt).toBe(200);
    expect(mail.duplicates).toBe(0);
    expect(mail.total).toBe(report.delivered);
    expect(report.delivered).toBeGreaterThanOrEqual(200 - report.inDoubt);
    expect(report.delivered).toBeLessThanOrEqual(200);
    expect(describeWindow(report)).toContain(
      `fires ${report.fires}  runs ${report.runs}  claimed by replica-`,
    );
  });

  it('runs a window split into 4 shards at once, each its own invocations, finished by the last shard', async () => {
    const { report, mail } = await windowInVirtualTime('06:45', 40, { shards: 4, replicas: 2 });

    expect(report).toMatchObject({ state: 'DONE', shards: 4, epoch: 1, delivered: 40, duplicates: 0 });
    expect(report).toMatchObject({ done: 40, inDoubt: 0, failed: 0, errors: [] });
    // One replica's message claimed the window and sent one message per shard; each shard's own
    // message claimed its shard.
    expect(report.claimedBy).toHaveLength(5);
    expect(report.claimedBy[0]).toMatch(/^replica-\d$/);
    expect(report.claimedBy.slice(1).sort()).toEqual(['shard-0', 'shard-1', 'shard-2', 'shard-3']);
    expect(report.runs).toBe(5);
    // 2 replicas' messages (one claimed, one found the window held or split) and 4 shard messages.
    expect(report.fires).toBeGreaterThanOrEqual(6);
    expect(mail.duplicates).toBe(0);
    expect(describeWindow(report)).toMatch(/claimed by replica-\d {2}shards 4 \(4 runs\) {2}delivered 40 /);
  });

  it('does not email an invoice twice when a crash kills the invocation running a shard: its message comes back and takes the shard over', async () => {
    const { report, strikes, mail } = await windowInVirtualTime('07:00', 40, {
      faults: ['crash', 'duplicate'],
      shards: 4,
      seed: 7,
    });

    expect(strikes).toHaveLength(1);
    const crashed = /(shard-\d)(\/duplicate)? crashed at effect \d+ \((before|after)-send\)/.exec(
      strikes[0]!,
    );
    expect(crashed).not.toBeNull();
    // The crashed shard, and only it, was claimed again: by its own message, back after the lease.
    const shard = crashed![1]!;
    const ofShard = report.claimedBy.filter((name) => name.startsWith(`${shard}/`) || name === shard);
    expect(ofShard).toHaveLength(2);
    expect(ofShard[1]).toMatch(new RegExp(`^${shard}/redelivery-\\d+$`));
    expect(report.claimedBy).toHaveLength(1 + 4 + 1);
    expect(report).toMatchObject({ state: 'DONE', shards: 4, duplicates: 0, failed: 0, errors: [] });
    expect(report.ms).toBeGreaterThan(60_000);
    expect(report.done + report.inDoubt).toBe(40);
    expect(report.delivered).toBeGreaterThanOrEqual(40 - report.inDoubt);
    expect(report.delivered).toBeLessThanOrEqual(40);
    expect(mail.duplicates).toBe(0);
  });

  it("fences a shard's holder frozen past its lease: its shard is taken over, and it wakes only once that run is over", async () => {
    const { report, strikes, mail } = await windowInVirtualTime('07:15', 40, {
      faults: ['pause'],
      shards: 4,
      seed: 11,
    });

    expect(strikes).toHaveLength(1);
    const frozen = /(shard-\d) froze at effect \d+/.exec(strikes[0]!);
    expect(frozen).not.toBeNull();
    const shard = frozen![1]!;
    expect(report.claimedBy.filter((name) => name.startsWith(`${shard}/`))).toHaveLength(1);
    expect(report.claimedBy).toHaveLength(1 + 4 + 1);
    expect(report).toMatchObject({ state: 'DONE', shards: 4, delivered: 40, duplicates: 0, errors: [] });
    expect(report.done + report.inDoubt).toBe(40);
    expect(mail.duplicates).toBe(0);
  });

  it.each([
    ['skip', { mode: 'skip' }, []],
    ['once', { mode: 'once' }, ['08:00']],
    ['all within 30 minutes', { mode: 'all', maxLatenessMinutes: 30 }, ['07:45', '08:00']],
  ] as const)(
    'catches up the windows missed while stopped per the policy: %s',
    async (_name, policy, expected) => {
      const backend = await freshBackend();
      const job = paymentJob(2, policy as CatchUpPolicy);
      // A first run fires 06:00, then stops.
      const before = new ManualClock(Date.parse('2026-11-30T05:59:00Z'));
      const first = runner(backend, before, [job], { replicas: 2 });
      await first.start({ catchUp: false });
      await before.advance(60_000);
      await first.idle();
      await first.stop();

      // Down until 08:05: 06:15 to 08:00 (eight windows) were due and nothing fired them.
      const after = new ManualClock(Date.parse('2026-11-30T08:05:00Z'));
      const second = runner(backend, after, [job], { replicas: 2 });
      const [report] = await second.start({ since: Date.parse('2026-11-30T05:59:00Z') });
      await second.stop();

      expect(report!.plan.run.map((w) => w.toISOString().slice(11, 16))).toEqual(expected);
      expect(report!.plan.run.length + report!.plan.skipped.length).toBe(8);
      for (const window of report!.reports) {
        expect(window).toMatchObject({ backfilled: true, state: 'DONE', delivered: 2, duplicates: 0 });
      }
      const ran: string[] = [];
      for (const time of ['06:15', '06:30', '06:45', '07:00', '07:15', '07:30', '07:45', '08:00']) {
        const record = await backend.backend.claims.read({
          jobId: 'payment-reminder',
          window: `2026-11-30T${time}:00Z`,
        });
        if (record) {
          expect(record.delivery.backfilled).toBe(true);
          ran.push(time);
        }
      }
      expect(ran).toEqual(expected);
    },
  );
});

/** Runs `test` with a fresh state directory, removed afterwards. */
async function inStateDir(test: (stateDir: string) => Promise<void>): Promise<void> {
  const stateDir = await mkdtemp(join(tmpdir(), 'slotguard-serve-'));
  try {
    await test(stateDir);
  } finally {
    await rm(stateDir, { recursive: true, force: true });
  }
}

describe('npm start -- serve', () => {
  it('runs the catalog on its schedules, one line per window, and catches up after a restart', () =>
    inStateDir(async (stateDir) => {
      const lines: string[] = [];
      const out = { write: (text: string) => lines.push(text) !== 0 };
      // Monday 30 November 2026, 09:00 Moscow is 06:00Z: both jobs are due at 06:00.
      const clock = new ManualClock(Date.parse('2026-11-30T05:59:30Z'));
      const first = await startServe({
        stateDir,
        replicas: 2,
        customers: 30,
        invoicesPerWindow: 3,
        out,
        clock,
      });
      await clock.advance(30_000);
      await first.runner.idle();
      await first.stop();
      const windows = lines
        .join('')
        .split('\n')
        .filter((line) => line.startsWith('2026-11-30T06:00:00Z'));
      expect(windows).toHaveLength(2);
      expect(windows.find((l) => l.includes('weekly-report'))).toMatch(
        /fires 2 {2}runs 1 .*delivered 30 .*duplicates 0 .*in doubt 0 .*DONE epoch 1/,
      );
      expect(windows.find((l) => l.includes('payment-reminder'))).toMatch(/delivered 3 .*DONE epoch 1/);
      const state = JSON.parse(await readFile(join(stateDir, 'serve.json'), 'utf8')) as {
        stoppedAt?: string;
      };
      expect(state.stoppedAt).toBeDefined();

      // Started again at 06:40: 06:15 and 06:30 passed with nothing running; the policy is once.
      lines.length = 0;
      const again = await startServe({
        stateDir,
        replicas: 2,
        customers: 30,
        invoicesPerWindow: 3,
        out,
        clock: new ManualClock(Date.parse('2026-11-30T06:40:00Z')),
      });
      await again.stop();
      const text = lines.join('');
      expect(text).toContain('2026-11-30T06:30:00Z payment-reminder (catch-up)');
      expect(text).toContain(
        'catch-up payment-reminder: 2 windows missed since the last start; policy once within 1440 min: ran 1, not run: 1 superseded',
      );
      expect(text).toContain('catch-up weekly-report: no window missed');
    }));

  it("splits every job's windows into --shards shards, and each line shows them", () =>
    inStateDir(async (stateDir) => {
      const lines: string[] = [];
      const out = { write: (text: string) => lines.push(text) !== 0 };
      const clock = new ManualClock(Date.parse('2026-11-30T05:59:30Z'));
      const serve = await startServe({
        stateDir,
        replicas: 2,
        customers: 60,
        invoicesPerWindow: 3,
        shards: 3,
        out,
        clock,
      });
      await clock.advance(30_000);
      await serve.runner.idle();
      await serve.stop();

      const text = lines.join('');
      expect(text).toContain('windows split into 3 shards');
      const windows = text.split('\n').filter((line) => line.startsWith('2026-11-30T06:00:00Z'));
      expect(windows).toHaveLength(2);
      expect(windows.find((l) => l.includes('weekly-report'))).toMatch(
        /runs 4 {2}claimed by replica-\d {2}shards 3 \(3 runs\) {2}delivered 60 {2}duplicates 0 {2}in doubt 0 {2}DONE epoch 1/,
      );
      // Three invoices in three shards by the hash of their keys: some shard may have none, and
      // still ends, so the window does.
      expect(windows.find((l) => l.includes('payment-reminder'))).toMatch(
        /shards 3 \(3 runs\) {2}delivered 3 {2}duplicates 0 .*DONE epoch 1/,
      );
      expect(serve.sink.duplicates()).toBe(0);
    }));

  it('continues a window longer than one Lambda run from the work queue, and its line shows the runs', () =>
    inStateDir(async (stateDir) => {
      const lines: string[] = [];
      let weeklyOver: () => void = () => {};
      const weekly = new Promise<void>((resolve) => {
        weeklyOver = resolve;
      });
      const out = {
        write: (text: string) => {
          lines.push(text);
          if (text.startsWith('2026-11-30T06:00:00Z weekly-report ')) weeklyOver();
          return true;
        },
      };
      // 300 customers at 10 emails a second are 30 s of sending for 10-second invocations; the
      // clock runs 10 times real time and starts 10 s before Monday's 09:00 Moscow (06:00Z).
      const serve = await startServe({
        stateDir,
        replicas: 2,
        customers: 300,
        invoicesPerWindow: 3,
        sendRatePerSecond: 10,
        lambdaTimeoutSeconds: 10,
        out,
        clock: new ScaledClock(10, Date.parse('2026-11-30T05:59:50Z')),
      });
      await weekly;
      await serve.stop();

      const text = lines.join('');
      expect(text).toContain("10 emails a second, Lambda's time limit 10 s");
      const line = text.split('\n').find((l) => l.startsWith('2026-11-30T06:00:00Z weekly-report '))!;
      expect(line).toMatch(/delivered 300 {2}duplicates 0 {2}in doubt 0 {2}DONE epoch \d+/);
      const runs = Number(/ runs (\d+) /.exec(line)?.[1]);
      expect(runs).toBeGreaterThanOrEqual(3);
      expect(line).toContain(`DONE epoch ${runs}`);
      expect(line).toMatch(/claimed by replica-\d → replica-\d\/redelivery-1 → /);
    }));
});
