import { spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { InvokeCommand, LambdaClient } from '@aws-sdk/client-lambda';
import {
  GetScheduleCommand,
  ListSchedulesCommand,
  SchedulerClient,
  SchedulerServiceException,
  UpdateScheduleCommand,
} from '@aws-sdk/client-scheduler';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { CliIo } from '../../cli/cli-support.js';
import { repositoryLocalRuns } from '../../cli/repository-local-runs.js';
import { main } from '../../cli/slotguard.js';
import { jobCatalog } from '../../functions/catalog.js';
import { localJob } from '../../functions/local-jobs.js';
import { syntheticDueInvoices } from '../../functions/payment-reminder/job.js';
import { type LocalBackend, openLocalBackend } from '../../local/local-backend.js';
import { LocalRunner } from '../../local/local-runner.js';
import { type SmtpSink, startSmtpSink } from '../../local/smtp-sink.js';
import { smtpSender } from '../../shared/effects/smtp-email-sender.js';
import type { RunOptions } from '../../shared/job/run-slot.js';
import { useDynamo } from '../helpers/dynalite.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { type PostgresServer, startPostgres } from '../helpers/postgres.js';

const dynamo = useDynamo();
// One mock for the file: a second mockClient of the same class would take the stub over from the first.
const lambda = mockClient(LambdaClient);
afterEach(() => lambda.reset());
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
const INVOICES = 3;
const job = localJob(paymentSpec, { invoicesPerWindow: INVOICES });
const at = (time: string) => Date.parse(`2026-11-30T${time}:00Z`);

/**
 * A fresh table with the CLI options that point at it, the backend, and a runner on `clock`
 * (`runOptions` over the job's own).
 */
async function world(clock: ManualClock, runOptions?: RunOptions) {
  const table = await dynamo.freshTable('cli');
  const backend = await openLocalBackend({ endpoint: dynamo.endpoint, tableName: table });
  opened.push(backend);
  const runner = new LocalRunner({
    jobs: [job],
    backend: backend.backend,
    senderFor: (from) => smtpSender({ host: sink.host, port: sink.port, from, maxConnections: 2 }),
    sink,
    clock,
    replicas: 2,
    ...(runOptions ? { runOptions } : {}),
  });
  const where = ['--endpoint', dynamo.endpoint, '--table', table];
  return { backend, runner, where };
}

/**
 * Runs one command line in-process, as the bin does in this repository: with the local runner's
 * side (repositoryLocalRuns) and the example app's catalog (slotguard.config.json at the root).
 * `host` replaces parts of that: `{ localRuns: undefined }` is the CLI as an installed package runs it.
 */
async function cli(
  argv: string[],
  clock = new ManualClock(at('07:00')),
  host: Pick<CliIo, 'env' | 'cwd' | 'localRuns'> = {},
) {
  let out = '';
  let err = '';
  const code = await main(argv, {
    stdout: { write: (text: string) => (out += text) },
    stderr: { write: (text: string) => (err += text) },
    clock,
    env: {},
    localRuns: repositoryLocalRuns,
    ...host,
  });
  return { code, out, err };
}

/**
 * A DONE window with `inDoubt` invoices in doubt (two by default): a holder reserved them at epoch 1
 * and died; the takeover at epoch 2 sent the others and left those reported in doubt.
 */
async function windowWithInDoubt(time: string, inDoubt = 2, runOptions?: RunOptions) {
  const clock = new ManualClock(at(time) + 5_000);
  const w = await world(clock, runOptions);
  const slot = { jobId: 'payment-reminder', window: `2026-11-30T${time}:00Z` };
  const crashed = await w.backend.backend.claims.claim(
    slot,
    {
      owner: 'crashed/1',
      leaseMs: 60_000,
      maxAttempts: 3,
      expiresAtSeconds: at(time) / 1000 + 35 * 86_400,
      deadline: at(time) + 3_600_000,
      delivery: {},
    },
    clock.now(),
  );
  if (crashed.kind !== 'claimed') throw new Error(crashed.kind);
  const invoices: { readonly invoiceId: string; readonly email: string }[] = [];
  for await (const invoice of syntheticDueInvoices(new Date(at(time)), INVOICES)) invoices.push(invoice);
  const hashes = invoices.map((invoice) => w.backend.backend.hashKey(invoice.invoiceId));
  for (const hash of hashes.slice(0, inDoubt)) {
    await w.backend.backend.ledger.reserve(crashed.claim, hash, { rerunInDoubt: false, now: clock.now() });
  }
  await clock.advance(63_000);
  const report = await w.runner.fire(job, new Date(at(time)));
  expect(report).toMatchObject({ state: 'DONE', epoch: 2, inDoubt, delivered: INVOICES - inDoubt });
  return { ...w, clock, slot, hashes, invoices };
}

/** `slots list` of payment-reminder's windows from `from` to `to`. */
const listReminders = (from: string, to: string, ...more: string[]) => [
  'slots',
  'list',
  '--job',
  'payment-reminder',
  '--from',
  from,
  '--to',
  to,
  ...more,
];

/** payment-reminder's deadline as deployed: the 15-minute gap to its next window. */
const REMINDER_DEADLINE = 15 * 60_000;

/**
 * Claims a payment-reminder window directly, as a run would, with the deployed deadline; `split`
 * claims one shard of it, or splits a new window into `shards` (its coordinator's claim).
 */
async function claimWindow(
  w: Awaited<ReturnType<typeof world>>,
  time: string,
  now: number,
  owner = 'replica-9/abc',
  split: { readonly shard?: number; readonly shards?: number } = {},
) {
  const window = `2026-11-30T${time}:00Z`;
  const outcome = await w.backend.backend.claims.claim(
    { jobId: 'payment-reminder', window, ...(split.shard !== undefined ? { shard: split.shard } : {}) },
    {
      owner,
      leaseMs: 60_000,
      maxAttempts: 3,
      expiresAtSeconds: at(time) / 1000 + 35 * 86_400,
      deadline: at(time) + REMINDER_DEADLINE,
      delivery: {},
      ...(split.shards !== undefined ? { shards: split.shards } : {}),
    },
    now,
  );
  if (outcome.kind !== 'claimed') throw new Error(outcome.kind);
  return outcome.claim;
}

/** The hashes of a payment-reminder window's invoices, in the order the job sends them. */
async function invoiceHashes(w: Awaited<ReturnType<typeof world>>, time: string): Promise<string[]> {
  const hashes: string[] = [];
  for await (const invoice of syntheticDueInvoices(new Date(at(time)), INVOICES))
    hashes.push(w.backend.backend.hashKey(invoice.invoiceId));
  return hashes;
}

/**
 * A PARTIAL window: its first invoice sent, the other two refused by the provider for good (an
 * unverified address, a quota), as the run left it when it finished.
 */
async function partialWindow(w: Awaited<ReturnType<typeof world>>, time: string) {
  const { claims, ledger } = w.backend.backend;
  const run = await claimWindow(w, time, at(time) + 5_000, 'replica-1/run');
  const hashes = await invoiceHashes(w, time);
  for (const hash of hashes) await ledger.reserve(run, hash, { rerunInDoubt: false, now: at(time) });
  await ledger.markDone(run, [hashes[0]!]);
  await ledger.recordFailure(run, hashes[1]!, { attempts: 5, reason: 'rejected' });
  await ledger.recordFailure(run, hashes[2]!, { attempts: 5, reason: 'quota' });
  await claims.complete(
    run,
    { done: 1, inDoubt: 0, failed: 2, inDoubtKeys: [], failedKeys: [hashes[1]!, hashes[2]!], runs: 1 },
    at(time) + 10_000,
  );
  return { slot: { jobId: 'payment-reminder', window: `2026-11-30T${time}:00Z` }, hashes };
}

/** A window continuation gave up on: STUCK after three runs without progress, two of three invoices sent. */
async function stuckWindow(w: Awaited<ReturnType<typeof world>>, time: string) {
  const { claims, ledger } = w.backend.backend;
  const run = await claimWindow(w, time, at(time) + 5_000, 'replica-2/run');
  const hashes = await invoiceHashes(w, time);
  for (const hash of hashes.slice(0, 2))
    await ledger.reserve(run, hash, { rerunInDoubt: false, now: at(time) });
  await ledger.markDone(run, hashes.slice(0, 2));
  const checkpoint = { positions: { invoices: '2' }, walked: false };
  await claims.release(
    run,
    {
      kind: 'stuck',
      reason: 'no progress in 3 consecutive runs (the last stopped: provider-failing)',
      checkpoint,
      runsWithoutProgress: 3,
    },
    at(time) + 10_000,
  );
  return { slot: { jobId: 'payment-reminder', window: `2026-11-30T${time}:00Z` }, hashes };
}

/**
 * The four windows 06:00 to 06:45 of payment-reminder as the watchdog and slots list see them: DONE
 * through the runner, STUCK half way, PARTIAL, and RELEASED by a run that never came back.
 */
async function fourWindows(clock: ManualClock) {
  const w = await world(clock);
  await w.runner.fire(job, new Date(at('06:00')));
  await stuckWindow(w, '06:15');
  await partialWindow(w, '06:30');
  const released = await claimWindow(w, '06:45', at('06:45') + 5_000);
  await w.backend.backend.claims.release(released, { kind: 'yield', runsWithoutProgress: 1 }, at('06:46'));
  return w;
}

describe('slotguard slots list', () => {
  it('lists each window the schedule produced with its slot, shows a missed one as MISSED, and exits 1', async () => {
    const clock = new ManualClock(at('06:40'));
    const { runner, where } = await world(clock);
    await runner.fire(job, new Date(at('06:00')));
    await runner.fire(job, new Date(at('06:30')));

    const table = await cli(
      [
        'slots',
        'list',
        '--job',
        'payment-reminder',
        '--from',
        '2026-11-30T06:00Z',
        '--to',
        '2026-11-30T06:45Z',
        ...where,
      ],
      clock,
    );
    expect(table.code).toBe(1);
    expect(table.out).toMatch(
      /2026-11-30T06:00:00Z\s+Mon 2026-11-30 06:00 UTC\s+DONE\s+replica-\d\s+1\s+-\s+1\s+3\s+0/,
    );
    expect(table.out).toMatch(/2026-11-30T06:15:00Z\s+Mon 2026-11-30 06:15 UTC\s+MISSED/);
    expect(table.out).toContain('1 windows need a look');

    const json = await cli(
      [
        'slots',
        'list',
        '--job',
        'payment-reminder',
        '--from',
        '2026-11-30T06:00Z',
        '--to',
        '2026-11-30T06:45Z',
        '--json',
        ...where,
      ],
      clock,
    );
    const parsed = JSON.parse(json.out) as {
      windows: { window: string; state: string; effectCounts: { done: number } }[];
      problems: number;
    };
    expect(parsed.windows.map((w) => [w.window, w.state, w.effectCounts.done])).toEqual([
      ['2026-11-30T06:00:00Z', 'DONE', 3],
      ['2026-11-30T06:15:00Z', 'MISSED', 0],
      ['2026-11-30T06:30:00Z', 'DONE', 3],
    ]);
    expect(parsed.problems).toBe(1);

    const clean = await cli(
      [
        'slots',
        'list',
        '--job',
        'payment-reminder',
        '--from',
        '2026-11-30T06:30Z',
        '--to',
        '2026-11-30T06:31Z',
        ...where,
      ],
      clock,
    );
    expect(clean.code).toBe(0);
    expect(clean.out).toContain('Every window that was due ran, once, with nothing in doubt.');
  });
});

describe('slotguard slots show and effects resolve', () => {
  it('shows the effects in doubt by hash only, resolves one as done and re-runs the other through backfill', async () => {
    const { where, clock, slot, hashes } = await windowWithInDoubt('06:15');
    const window = ['--job', 'payment-reminder', '--window', slot.window];

    const shown = await cli(['slots', 'show', ...window, ...where], clock);
    expect(shown.code).toBe(1);
    expect(shown.out).toContain('effects: 1 done, 2 in doubt, 0 under way');
    expect(shown.out).toContain(`${hashes[0]}  reserved at epoch 1`);
    expect(shown.out).not.toMatch(/@example\.com|inv-/);

    const done = await cli(
      ['effects', 'resolve', ...window, '--key', hashes[0]!, '--mark-done', ...where],
      clock,
    );
    expect(done).toMatchObject({ code: 0 });
    expect(done.out).toContain('no run will perform it again');
    const again = await cli(
      ['effects', 'resolve', ...window, '--key', hashes[0]!, '--rerun', ...where],
      clock,
    );
    expect(again.code).toBe(1);
    expect(again.err).toContain('is not in doubt: it is DONE');

    const rerun = await cli(
      ['effects', 'resolve', ...window, '--key', hashes[1]!, '--rerun', '--json', ...where],
      clock,
    );
    expect(rerun.code).toBe(0);
    expect(JSON.parse(rerun.out)).toMatchObject({
      outcome: 'resolved',
      resolution: 'clear',
      slotReopened: true,
    });

    const backfilled = await cli(
      [
        'backfill',
        '--job',
        'payment-reminder',
        '--from',
        slot.window,
        '--to',
        '2026-11-30T06:16Z',
        '--smtp',
        `${sink.host}:${sink.port}`,
        '--invoices',
        String(INVOICES),
        ...where,
      ],
      clock,
    );
    expect(backfilled.code).toBe(0);
    expect(backfilled.out).toMatch(
      /2026-11-30T06:15:00Z\s+unfinished\s+ran\s+DONE epoch 3; effects 3 done, 0 in doubt/,
    );
    // The SMTP server got the takeover's one invoice, then the re-run one: three invoices, nobody twice.
    expect(sink.total()).toBe(2);
    expect(sink.duplicates()).toBe(0);

    const settled = await cli(['slots', 'show', ...window, '--json', ...where], clock);
    expect(settled.code).toBe(0);
    expect(JSON.parse(settled.out)).toMatchObject({
      state: 'DONE',
      epoch: 3,
      backfilled: true,
      effectCounts: { done: 3, inDoubt: 0 },
    });
  });
});

describe('slotguard effects resolve --auto', () => {
  /** The job's runs settle what the provider said before a window finishes; these words come after. */
  const REPORT_AFTER_NO_GRACE: RunOptions = { inDoubtResolution: { graceMs: 0, afterGrace: 'report' } };
  const HOUR = 3_600_000;
  const auto = (window: string, ...more: string[]) => [
    'effects',
    'resolve',
    '--auto',
    '--job',
    'payment-reminder',
    '--window',
    window,
    ...more,
  ];

  it("settles a finished window's effects in doubt by the provider's word: the accepted one done, the rejected one sent again alone, the silent one left", async () => {
    const w = await windowWithInDoubt('06:30', 3, REPORT_AFTER_NO_GRACE);
    const { ledger, claims } = w.backend.backend;
    const [accepted, rejected, silent] = w.hashes;
    // SES's events for the crashed run's sends arrive after the window finished.
    const word = { at: w.clock.now(), epoch: 1 };
    expect(
      await ledger.recordProviderWord(w.slot, accepted!, {
        ...word,
        outcome: 'accepted',
        event: 'Delivery',
        messageId: '0100018f-accepted',
      }),
    ).toBe('recorded');
    expect(
      await ledger.recordProviderWord(w.slot, rejected!, { ...word, outcome: 'rejected', event: 'Reject' }),
    ).toBe('recorded');
    await w.clock.advance(2 * HOUR);

    const first = await cli(auto(w.slot.window, ...w.where), w.clock);
    expect(first.code).toBe(1);
    expect(first.out).toContain('payment-reminder 2026-11-30T06:30:00Z: DONE at epoch 2, 3 in doubt');
    expect(first.out).toMatch(new RegExp(`${accepted}\\s+marked done\\s+Delivery\\s+0100018f-accepted`));
    expect(first.out).toMatch(new RegExp(`${rejected}\\s+re-run\\s+Reject\\s+-`));
    expect(first.out).toMatch(
      new RegExp(
        `${silent}\\s+in doubt\\s+-\\s+-\\s+no word from the provider, past the 1 h grace; reserved 2 h 1 min ago`,
      ),
    );
    // A finished window is delivered again only by the operator: the output says so, with the command.
    const backfill =
      'slotguard backfill --job payment-reminder --from 2026-11-30T06:30:00Z --to 2026-11-30T06:31:00Z';
    expect(first.out).toContain(
      '  The window was DONE and is reopened (RELEASED at epoch 2, deadline 2026-11-30T08:46:08Z) for the ' +
        'rejected effect. Nothing delivers a finished window by itself: deliver it once, once you have decided the ' +
        `ones with no word below: ${backfill}. `,
    );
    // The silent one past the grace is the operator's to decide, and the output says how.
    const decide =
      'slotguard effects resolve --job payment-reminder --window 2026-11-30T06:30:00Z --key HASH';
    expect(first.out).toContain(
      '  1 effect with no word past the 1 h grace, which --auto never sends again.',
    );
    expect(first.out).toContain(`    it went:    ${decide} --mark-done\n`);
    expect(first.out).toContain(
      `    it did not: ${decide} --rerun, then deliver the window once: ${backfill} (probably safe`,
    );
    expect(first.out).toContain(
      'total: 1 marked done, 1 to re-run, 1 still in doubt (1 past the 1 h grace), 0 refused (1 finished window)',
    );
    expect(first.out).not.toMatch(/@|inv-/);
    expect(await ledger.read(w.slot, accepted!)).toMatchObject({ state: 'DONE', epoch: 1 });
    expect(await ledger.read(w.slot, rejected!)).toBeUndefined();
    expect(await ledger.read(w.slot, silent!)).toMatchObject({ state: 'RESERVED', epoch: 1 });
    expect(await claims.read(w.slot)).toMatchObject({ state: 'RELEASED', epoch: 2 });

    // The window's next run sends the rejected invoice, and only it: the others are done or in doubt.
    expect(sink.total()).toBe(0);
    const rerun = await w.runner.fire(job, new Date(at('06:30')));
    expect(rerun).toMatchObject({ state: 'DONE', epoch: 3, inDoubt: 1 });
    expect(sink.total()).toBe(1);
    expect(sink.received.get(w.invoices[1]!.email)).toBe(1);
    expect((await claims.read(w.slot))?.summary).toMatchObject({
      done: 2,
      inDoubt: 1,
      inDoubtKeys: [silent],
    });

    // Nothing new said: a second pass writes nothing and still reports the silent one, inside a
    // grace of 3 hours with when to look again, past one of 2 hours.
    const waiting = await cli(auto(w.slot.window, '--grace', '3h', ...w.where), w.clock);
    expect(waiting.code).toBe(1);
    expect(waiting.out).toMatch(
      new RegExp(
        `${silent}\\s+in doubt\\s+-\\s+-\\s+no word yet, grace until 2026-11-30T09:30:05Z; reserved`,
      ),
    );
    expect(waiting.out).toContain(
      "  1 effect with no word yet, inside the 3 h grace: SES's events can be late. Look again after " +
        '2026-11-30T09:30:05Z: slotguard effects resolve --job payment-reminder --window 2026-11-30T06:30:00Z --auto',
    );
    expect(waiting.out).not.toContain('--mark-done');
    expect(waiting.out).toContain('1 still in doubt (0 past the 3 h grace)');
    const second = await cli(auto(w.slot.window, '--json', '--grace', '2h', ...w.where), w.clock);
    expect(second.code).toBe(1);
    const report = JSON.parse(second.out);
    expect(report.graceMs).toBe(2 * HOUR);
    expect(report.totals).toEqual({
      markedDone: 0,
      rerun: 0,
      inDoubt: 1,
      pastGrace: 1,
      refused: 0,
      movedOn: 0,
    });
    expect(report.windows).toEqual([
      {
        window: '2026-11-30T06:30:00Z',
        result: 'resolved',
        state: 'DONE',
        epoch: 3,
        slotReopened: false,
        effects: [
          {
            keyHash: silent,
            outcome: 'in-doubt',
            event: null,
            messageId: null,
            epoch: 1,
            reservedAt: '2026-11-30T06:30:05Z',
            waitingMs: w.clock.now() - (at('06:30') + 5_000),
            graceEndsAt: '2026-11-30T08:30:05Z',
            pastGrace: true,
          },
        ],
        next: [
          expect.stringMatching(
            /^1 effect with no word past the 2 h grace, which --auto never sends again\./,
          ),
          expect.stringContaining('it went:    slotguard effects resolve'),
          expect.stringContaining('it did not: slotguard effects resolve'),
        ],
      },
    ]);
    expect(await claims.read(w.slot)).toMatchObject({ state: 'DONE', epoch: 3 });
    expect(sink.total()).toBe(1);
  });

  it('refuses a window a run holds under a live lease, and over a range leaves it to its run while settling the finished ones', async () => {
    const clock = new ManualClock(at('06:45') + 5_000);
    const w = await world(clock, REPORT_AFTER_NO_GRACE);
    const { ledger } = w.backend.backend;
    const live = await claimWindow(w, '06:45', clock.now());
    const [hash] = await invoiceHashes(w, '06:45');
    await ledger.reserve(live, hash!, { rerunInDoubt: false, now: clock.now() });
    const liveWindow = { jobId: 'payment-reminder', window: '2026-11-30T06:45:00Z' };
    await ledger.recordProviderWord(liveWindow, hash!, {
      outcome: 'accepted',
      event: 'Send',
      at: clock.now(),
      epoch: 1,
    });
    await clock.advance(1_000);

    const refused = await cli(auto(liveWindow.window, ...w.where), clock);
    expect(refused.code).toBe(1);
    expect(refused.out).toContain(
      'payment-reminder 2026-11-30T06:45:00Z: refused: a run (replica-9, epoch 1) holds it until ' +
        '2026-11-30T06:46:05Z; it settles what the provider said before it finishes. Nothing was written.',
    );
    expect(await ledger.read(liveWindow, hash!)).toMatchObject({ state: 'RESERVED', epoch: 1 });
    const json = await cli(auto(liveWindow.window, '--json', ...w.where), clock);
    expect(JSON.parse(json.out).windows).toEqual([
      {
        window: liveWindow.window,
        result: 'lease-live',
        state: 'RUNNING',
        epoch: 1,
        holder: 'replica-9',
        leaseEndsAt: '2026-11-30T06:46:05Z',
      },
    ]);

    // The window before it finished DONE with one invoice in doubt, which SES has since confirmed.
    const crashed = await claimWindow(w, '06:30', at('06:30') + 5_000, 'replica-1/crashed');
    const [earlier] = await invoiceHashes(w, '06:30');
    await ledger.reserve(crashed, earlier!, { rerunInDoubt: false, now: at('06:30') + 5_000 });
    const takeover = await claimWindow(w, '06:30', at('06:30') + 70_000, 'replica-2/takeover');
    const finished = { done: 2, inDoubt: 1, failed: 0, inDoubtKeys: [earlier!], failedKeys: [], runs: 2 };
    await w.backend.backend.claims.complete(takeover, finished, at('06:30') + 80_000);
    const earlierWindow = { jobId: 'payment-reminder', window: '2026-11-30T06:30:00Z' };
    await ledger.recordProviderWord(earlierWindow, earlier!, {
      outcome: 'accepted',
      event: 'Delivery',
      at: clock.now(),
      epoch: 1,
    });

    const range = ['effects', 'resolve', '--auto', '--job', 'payment-reminder'];
    const ranged = await cli(
      [...range, '--from', '2026-11-30T06:15Z', '--to', '2026-11-30T07:00Z', ...w.where],
      clock,
    );
    expect(ranged.code).toBe(0);
    expect(ranged.out).toMatch(new RegExp(`${earlier}\\s+marked done\\s+Delivery`));
    expect(ranged.out).toContain(
      '2 of 3 windows are not finished (or never ran): their own runs settle what the provider said',
    );
    expect(ranged.out).toContain(
      'total: 1 marked done, 0 to re-run, 0 still in doubt, 0 refused (1 finished window)',
    );
    expect(await ledger.read(earlierWindow, earlier!)).toMatchObject({ state: 'DONE' });
    expect((await w.backend.backend.claims.read(earlierWindow))?.summary).toMatchObject({
      done: 3,
      inDoubt: 0,
    });
    expect(await ledger.read(liveWindow, hash!)).toMatchObject({ state: 'RESERVED' });
  });

  it("marks a split window's accepted effect done, refuses to re-run its rejected one, whose shard has ended, and offers only --mark-done for its silent one", async () => {
    const clock = new ManualClock(at('06:30') + 30_000);
    const w = await world(clock);
    const { claims, ledger } = w.backend.backend;
    const window = { jobId: 'payment-reminder', window: '2026-11-30T06:30:00Z' };
    const coordinator = await claimWindow(w, '06:30', at('06:30') + 1_000, 'replica-1/coordinator', {
      shards: 2,
    });
    await claims.release(coordinator, { kind: 'sharded', shards: 2 }, at('06:30') + 2_000);
    const hashes = await invoiceHashes(w, '06:30');
    const inDoubt = {
      done: 0,
      inDoubt: 3,
      failed: 0,
      inDoubtKeys: hashes,
      failedKeys: [],
      runs: 1,
    };
    const s0 = await claimWindow(w, '06:30', at('06:30') + 3_000, 'replica-2/s0', { shard: 0 });
    for (const hash of hashes) await ledger.reserve(s0, hash, { rerunInDoubt: false, now: at('06:30') });
    await claims.complete(s0, inDoubt, at('06:30') + 4_000);
    await claims.shardFinished(window, 0);
    const s1 = await claimWindow(w, '06:30', at('06:30') + 5_000, 'replica-3/s1', { shard: 1 });
    await claims.complete(s1, { ...inDoubt, inDoubt: 0, inDoubtKeys: [] }, at('06:30') + 6_000);
    await claims.shardFinished(window, 1);
    expect(
      await claims.finishSharded(window, { kind: 'complete', summary: inDoubt }, at('06:30') + 7_000),
    ).toBe('ok');
    const word = { at: clock.now(), epoch: 1 };
    await ledger.recordProviderWord(window, hashes[0]!, { ...word, outcome: 'accepted', event: 'Send' });
    await ledger.recordProviderWord(window, hashes[1]!, { ...word, outcome: 'rejected', event: 'Reject' });

    const result = await cli(auto(window.window, '--grace', '10s', ...w.where), clock);
    expect(result.code).toBe(1);
    expect(result.out).toMatch(new RegExp(`${hashes[0]}\\s+marked done\\s+Send\\s+-\\s+shard 0`));
    expect(result.out).toMatch(
      new RegExp(`${hashes[1]}\\s+refused\\s+Reject\\s+-\\s+shard 0, split window: not re-run`),
    );
    expect(result.out).toContain(
      'the window is split into 2 shards, and running an effect again needs the shard',
    );
    expect(result.out).toMatch(
      new RegExp(
        `${hashes[2]}\\s+in doubt\\s+-\\s+-\\s+shard 0, no word from the provider, past the 10 s grace`,
      ),
    );
    expect(result.out).toContain(
      '    it went:    slotguard effects resolve --job payment-reminder --window 2026-11-30T06:30:00Z --key HASH --mark-done\n' +
        '    it did not: not from here yet: the window is split into 2 shards, and running an effect again needs',
    );
    expect(result.out).toContain(
      'total: 1 marked done, 0 to re-run, 1 still in doubt (1 past the 10 s grace), 1 refused',
    );
    expect(await ledger.read(window, hashes[0]!)).toMatchObject({ state: 'DONE', shard: 0 });
    expect(await ledger.read(window, hashes[1]!)).toMatchObject({ state: 'RESERVED', shard: 0 });
    expect(await ledger.read(window, hashes[2]!)).toMatchObject({ state: 'RESERVED', shard: 0 });
    expect(await claims.read(window)).toMatchObject({ state: 'DONE', summary: { done: 1, inDoubt: 2 } });
  });

  it('refuses --auto with --mark-done, --rerun or --key, a range or --grace without --auto, and a --grace it cannot read, naming the flags', async () => {
    const window = ['--job', 'payment-reminder', '--window', '2026-11-30T06:30:00Z'];
    const both = await cli(['effects', 'resolve', '--auto', '--rerun', '--key', 'abcdef12', ...window]);
    expect(both.code).toBe(2);
    expect(both.err).toContain('--auto is given with --rerun and --key');
    const neither = await cli(['effects', 'resolve', '--auto', '--job', 'payment-reminder']);
    expect(neither.code).toBe(2);
    expect(neither.err).toContain(
      '--auto resolves the finished windows of --window T, or of --from T --to T',
    );
    const byHand = ['effects', 'resolve', ...window, '--key', 'abcdef12'];
    const ranged = await cli([...byHand, '--from', 'now-1d']);
    expect(ranged.code).toBe(2);
    expect(ranged.err).toContain('--from select windows for --auto only');
    const grace = await cli([...byHand, '--rerun', '--grace', '2h']);
    expect(grace.code).toBe(2);
    expect(grace.err).toContain('--grace is for --auto only');
    const badGrace = await cli([...auto('2026-11-30T06:30:00Z'), '--grace', 'an hour']);
    expect(badGrace.code).toBe(2);
    expect(badGrace.err).toContain('--grace is "an hour"; give a whole number and a unit');
  });
});

describe('slotguard slots release', () => {
  it('refuses while the lease holds, releases with --force (fenced on the epoch read), and refuses a DONE slot', async () => {
    const clock = new ManualClock(at('06:45') + 2_000);
    const { backend, where, runner } = await world(clock);
    const slot = { jobId: 'payment-reminder', window: '2026-11-30T06:45:00Z' };
    await backend.backend.claims.claim(
      slot,
      {
        owner: 'replica-9/abc',
        leaseMs: 60_000,
        maxAttempts: 3,
        expiresAtSeconds: at('06:45') / 1000 + 35 * 86_400,
        deadline: at('06:45') + 3_600_000,
        delivery: {},
      },
      clock.now(),
    );
    const args = ['slots', 'release', '--job', 'payment-reminder', '--window', slot.window, ...where];

    const refused = await cli(args, clock);
    expect(refused.code).toBe(1);
    expect(refused.err).toContain('its holder replica-9 has a live lease until 2026-11-30T06:46:02.000Z');
    expect(refused.err).toContain('Nothing was written.');
    expect(await backend.backend.claims.read(slot)).toMatchObject({ state: 'RUNNING', epoch: 1 });

    const forced = await cli([...args, '--force'], clock);
    expect(forced.code).toBe(0);
    // payment-reminder's deadline is its 15-minute gap: released at 06:45:02, the window has until 07:00:02.
    expect(forced.out).toContain(
      'RUNNING at epoch 1 (holder replica-9) → RELEASED, deadline 2026-11-30T07:00:02Z. The next delivery claims it at epoch 2',
    );
    expect(await backend.backend.claims.read(slot)).toMatchObject({ state: 'RELEASED', epoch: 1 });

    await runner.fire(job, new Date(at('06:45')));
    const done = await cli(args, clock);
    expect(done.code).toBe(1);
    expect(done.err).toContain('it is DONE');
    const absent = await cli(
      ['slots', 'release', '--job', 'payment-reminder', '--window', '2026-11-30T05:00:00Z', ...where],
      clock,
    );
    expect(absent.code).toBe(1);
    expect(absent.err).toContain('has no slot record: nothing to release');
  });
});

describe('slotguard backfill', () => {
  it('runs the missed windows per the catch-up policy, each at its own scheduled time and marked backfilled', async () => {
    const clock = new ManualClock(at('07:00'));
    const { where, backend } = await world(clock);
    const range = ['--job', 'payment-reminder', '--from', '2026-11-30T06:10Z', '--to', '2026-11-30T06:50Z'];
    const smtp = ['--smtp', `${sink.host}:${sink.port}`, '--invoices', String(INVOICES)];

    const dry = await cli(['backfill', ...range, '--dry-run', ...where], clock);
    expect(dry.code).toBe(0);
    expect(dry.out).toMatch(/06:45:00Z\s+missed\s+would run/);
    expect(dry.out).toMatch(/06:15:00Z\s+missed\s+not run: policy once: a later window runs/);
    expect(
      await backend.backend.claims.read({ jobId: 'payment-reminder', window: '2026-11-30T06:45:00Z' }),
    ).toBeUndefined();

    // The job's policy (once): only the latest missed window; the rest are left and reported (exit 1).
    const once = await cli(['backfill', ...range, ...smtp, ...where], clock);
    expect(once.code).toBe(1);
    expect(once.out).toMatch(/06:45:00Z\s+missed\s+ran\s+DONE epoch 1; effects 3 done, 0 in doubt/);
    expect(once.out).toContain('add --catch-up all');

    const all = await cli(['backfill', ...range, '--catch-up', 'all', '--json', ...smtp, ...where], clock);
    expect(all.code).toBe(0);
    const result = JSON.parse(all.out) as { windows: { window: string; action: string; state: string }[] };
    expect(result.windows.map((w) => [w.window, w.action, w.state])).toEqual([
      ['2026-11-30T06:15:00Z', 'run', 'DONE'],
      ['2026-11-30T06:30:00Z', 'run', 'DONE'],
    ]);
    for (const window of ['06:15', '06:30', '06:45']) {
      const record = await backend.backend.claims.read({
        jobId: 'payment-reminder',
        window: `2026-11-30T${window}:00Z`,
      });
      expect(record).toMatchObject({ state: 'DONE', attempts: 1, delivery: { backfilled: true } });
    }
    expect(sink.total()).toBe(9);
    expect(sink.duplicates()).toBe(0);

    const nothing = await cli(['backfill', ...range, ...smtp, ...where], clock);
    expect(nothing.code).toBe(0);
    expect(nothing.out).toContain('Nothing to backfill');
  });

  describe('against AWS', () => {
    it('invokes the deployed function asynchronously once per missed window, with its scheduled time and backfilled', async () => {
      lambda.on(InvokeCommand).resolves({ StatusCode: 202 });
      const clock = new ManualClock(at('07:00'));
      const { where } = await world(clock);
      const out = await cli(
        [
          'backfill',
          '--job',
          'payment-reminder',
          '--from',
          '2026-11-30T06:10Z',
          '--to',
          '2026-11-30T06:40Z',
          '--catch-up',
          'all',
          '--function',
          'slotguard-payment-reminder',
          ...where,
        ],
        clock,
      );
      expect(out.code).toBe(0);
      const calls = lambda.commandCalls(InvokeCommand);
      expect(calls).toHaveLength(2);
      const events = calls.map((call) => {
        expect(call.args[0].input).toMatchObject({
          FunctionName: 'slotguard-payment-reminder',
          InvocationType: 'Event',
        });
        return JSON.parse(new TextDecoder().decode(call.args[0].input.Payload as Uint8Array)) as Record<
          string,
          unknown
        >;
      });
      expect(events.map((e) => e.scheduledTime)).toEqual(['2026-11-30T06:15:00Z', '2026-11-30T06:30:00Z']);
      for (const event of events) {
        expect(event).toMatchObject({ jobId: 'payment-reminder', attemptNumber: '1', backfilled: true });
        expect(event.executionId).toMatch(/^backfill-/);
      }
      expect(out.out).toMatch(/06:15:00Z\s+missed\s+invoked\s+queued \(202\)/);
    });

    it('refuses to run jobs in this process against an AWS table, asking for --function', async () => {
      const out = await cli([
        'backfill',
        '--job',
        'payment-reminder',
        '--from',
        'now-1h',
        '--to',
        'now',
        '--table',
        'prod-claims',
      ]);
      expect(out.code).toBe(2);
      expect(out.err).toContain('backfill there invokes the deployed function; pass --function NAME');
    });
  });
});

describe('slotguard watchdog', () => {
  it('pages a weekly window that never ran (exit 1), and pages nothing once it has run', async () => {
    const clock = new ManualClock(Date.parse('2026-11-30T06:20:00Z'));
    const { backend, where } = await world(clock);
    const missing = await cli(['watchdog', '--job', 'weekly-report', ...where], clock);
    expect(missing.code).toBe(1);
    expect(missing.out).toContain(
      'weekly-report: cron(0 9 ? * MON *) Europe/Moscow, 1 windows from 2026-11-28T06:20:00Z to 2026-11-30T06:20:00Z (deadline 6 h, grace 15 min)',
    );
    expect(missing.out).toMatch(
      /2026-11-30T06:00:00Z\s+Mon 2026-11-30 09:00 Europe\/Moscow\s+MISSING\s+-\s+2026-11-30T06:15:00Z\s+no slot record 20 min after/,
    );
    expect(missing.out).toContain('the watchdog pages (WindowMissing 1, WindowIncomplete 0)');

    const slot = { jobId: 'weekly-report', window: '2026-11-30T06:00:00Z' };
    const run = await backend.backend.claims.claim(
      slot,
      {
        owner: 'replica-1/a',
        leaseMs: 60_000,
        maxAttempts: 3,
        expiresAtSeconds: Date.parse(slot.window) / 1000 + 35 * 86_400,
        deadline: Date.parse('2026-11-30T12:00:00Z'),
        delivery: {},
      },
      clock.now(),
    );
    if (run.kind !== 'claimed') throw new Error(run.kind);
    await backend.backend.claims.complete(
      run.claim,
      { done: 12_400, inDoubt: 0, failed: 0, inDoubtKeys: [], failedKeys: [], runs: 1 },
      clock.now(),
    );
    const fine = await cli(['watchdog', '--job', 'weekly-report', ...where], clock);
    expect(fine.code).toBe(0);
    expect(fine.out).toMatch(/2026-11-30T06:00:00Z\s+Mon 2026-11-30 09:00 Europe\/Moscow\s+OK\s+DONE/);
    expect(fine.out).toContain('1 ok, 0 partial, 0 missing, 0 incomplete, 0 pending: nothing would page.');
  });

  it('judges every window of the lookback: ok, stuck half way, partial, past its deadline, not yet due', async () => {
    const clock = new ManualClock(at('07:10'));
    const w = await fourWindows(clock);

    const out = await cli(
      ['watchdog', '--job', 'payment-reminder', '--lookback', '75m', '--json', ...w.where],
      clock,
    );
    expect(out.code).toBe(1);
    const report = JSON.parse(out.out) as {
      counts: Record<string, number>;
      windows: { window: string; verdict: string; state: string | null; reason: string }[];
      deadlineMs: number;
    };
    expect(report.deadlineMs).toBe(REMINDER_DEADLINE);
    expect(report.windows.map((x) => [x.window.slice(11, 16), x.verdict, x.state])).toEqual([
      ['06:00', 'ok', 'DONE'],
      ['06:15', 'incomplete', 'STUCK'],
      ['06:30', 'partial', 'PARTIAL'],
      ['06:45', 'incomplete', 'RELEASED'],
      ['07:00', 'pending', null],
    ]);
    expect(report.counts).toEqual({ ok: 1, partial: 1, missing: 0, incomplete: 2, pending: 1 });
    expect(report.windows[3]?.reason).toBe('RELEASED past its deadline 2026-11-30T07:00:00Z (10 min ago)');
  });
});

describe('slotguard slots show and list for windows that did not finish cleanly', () => {
  it('shows a PARTIAL window’s refused effects by hash, attempts and reason, and the re-drive that sends them', async () => {
    const clock = new ManualClock(at('07:00'));
    const w = await world(clock);
    const { slot, hashes } = await partialWindow(w, '06:30');
    const shown = await cli(
      ['slots', 'show', '--job', 'payment-reminder', '--window', slot.window, ...w.where],
      clock,
    );
    expect(shown.code).toBe(1);
    expect(shown.out).toContain('state        PARTIAL  [partial]');
    expect(shown.out).toContain('window       1 done, 0 in doubt, 2 failed, over 1 runs');
    expect(shown.out).toContain('effects: 1 done, 0 in doubt, 0 under way, 2 refused');
    expect(shown.out).toContain(`${hashes[1]}  5 attempts, rejected, for good`);
    expect(shown.out).toContain(`${hashes[2]}  5 attempts, quota, for good`);
    expect(shown.out).toContain(`slotguard effects redrive --job payment-reminder --window ${slot.window}`);
    expect(shown.out).not.toMatch(/@example\.com|inv-/);
    const json = JSON.parse(
      (
        await cli(
          ['slots', 'show', '--job', 'payment-reminder', '--window', slot.window, '--json', ...w.where],
          clock,
        )
      ).out,
    ) as { effects: { failed: unknown[] }; effectCounts: { failed: number }; problems: string[] };
    expect(json.effectCounts.failed).toBe(2);
    expect(json.effects.failed).toContainEqual({ keyHash: hashes[1], attempts: 5, reason: 'rejected' });
    expect(json.problems).toEqual(['partial']);
  });

  it('shows why a window is STUCK, where it would resume and its runs without progress', async () => {
    const clock = new ManualClock(at('07:00'));
    const w = await world(clock);
    const { slot } = await stuckWindow(w, '06:15');
    const shown = await cli(
      ['slots', 'show', '--job', 'payment-reminder', '--window', slot.window, ...w.where],
      clock,
    );
    expect(shown.code).toBe(1);
    expect(shown.out).toContain('state        STUCK  [stuck]');
    expect(shown.out).toContain('deadline     2026-11-30T06:30:00Z (passed 30 min ago)');
    expect(shown.out).toContain('checkpoint   invoices at "2"; walk not finished');
    expect(shown.out).toContain('no progress  in the last 3 runs (STUCK at 3 in a row)');
    expect(shown.out).toContain(
      'stuck        no progress in 3 consecutive runs (the last stopped: provider-failing)',
    );
    expect(shown.out).toContain('effects: 2 done, 0 in doubt, 0 under way, 0 refused');
  });

  it('shows a released window waiting for a refused effect’s retry, and a running holder’s progress', async () => {
    const clock = new ManualClock(at('06:50'));
    const w = await world(clock);
    const { claims, ledger } = w.backend.backend;
    const hashes = await invoiceHashes(w, '06:45');
    const waiting = await claimWindow(w, '06:45', at('06:45') + 5_000);
    await ledger.reserve(waiting, hashes[0]!, { rerunInDoubt: false, now: at('06:45') });
    await ledger.recordFailure(waiting, hashes[0]!, {
      attempts: 1,
      retryAt: at('06:52'),
      reason: 'throttled',
    });
    await claims.release(
      waiting,
      { kind: 'yield', runsWithoutProgress: 0, resumeAfter: at('06:52') },
      at('06:46'),
    );
    const window = ['--job', 'payment-reminder', '--window', '2026-11-30T06:45:00Z'];
    const shown = await cli(['slots', 'show', ...window, ...w.where], clock);
    expect(shown.out).toContain('state        RELEASED (waiting until 2026-11-30T06:52:00Z)  [unfinished]');
    expect(shown.out).toContain('deadline     2026-11-30T07:00:00Z (in 10 min)');
    expect(shown.out).toContain(`${hashes[0]}  1 attempts, throttled, next retry 2026-11-30T06:52:00Z`);

    const holder = await claimWindow(w, '06:30', at('06:50'));
    await claims.checkpoint(
      holder,
      { positions: {}, walked: false },
      { done: 2, skipped: 0, inDoubt: 0, failed: 0, retrying: 1, inDoubtKeys: [], failedKeys: [], epoch: 1 },
    );
    const running = await cli(
      ['slots', 'show', '--job', 'payment-reminder', '--window', '2026-11-30T06:30:00Z', ...w.where],
      clock,
    );
    expect(running.out).toContain(
      "progress     the holder's run so far (epoch 1): 2 done, 0 skipped, 0 in doubt, 1 retrying, 0 failed",
    );
  });

  it('counts STUCK, PARTIAL and past-deadline windows as problems in slots list', async () => {
    const clock = new ManualClock(at('07:20'));
    const w = await fourWindows(clock);
    const listed = await cli(listReminders('2026-11-30T06:00Z', '2026-11-30T06:50Z', ...w.where), clock);
    expect(listed.code).toBe(1);
    expect(listed.out).toMatch(/06:15:00Z.*STUCK.*stuck/);
    expect(listed.out).toMatch(/06:30:00Z.*PARTIAL.*\s2\s+partial/);
    expect(listed.out).toMatch(/06:45:00Z.*RELEASED.*past deadline, unfinished/);
    expect(listed.out).toContain('3 windows need a look');
  });

  it('releases a STUCK slot with a fresh deadline, so its next run resumes instead of going STUCK again', async () => {
    const clock = new ManualClock(at('08:00'));
    const w = await world(clock);
    const { slot } = await stuckWindow(w, '06:15');
    const released = await cli(
      ['slots', 'release', '--job', 'payment-reminder', '--window', slot.window, ...w.where],
      clock,
    );
    expect(released.code).toBe(0);
    expect(released.out).toContain(
      'STUCK at epoch 1 (holder replica-2) → RELEASED, deadline 2026-11-30T08:15:00Z',
    );
    expect(await w.backend.backend.claims.read(slot)).toMatchObject({
      state: 'RELEASED',
      runsWithoutProgress: 0,
      deadline: at('08:15'),
      checkpoint: { positions: { invoices: '2' }, walked: false },
    });
    const report = await w.runner.fire(job, new Date(at('06:15')));
    expect(report).toMatchObject({ state: 'DONE', epoch: 2, done: 3 });
    expect(sink.total()).toBe(1);
  });
});

/**
 * A payment-reminder window split into 4 shards, as the runtime leaves it half way: shard 0 DONE
 * (sent the first invoice), shard 1 RUNNING under a live lease (the second invoice reserved, under
 * way), shard 2 STUCK, shard 3 not claimed yet. The window is SHARDED, shards 0 and 2 recorded ended.
 */
async function windowInFourShards(w: Awaited<ReturnType<typeof world>>, time: string) {
  const { claims, ledger } = w.backend.backend;
  const window = { jobId: 'payment-reminder', window: `2026-11-30T${time}:00Z` };
  const coordinator = await claimWindow(w, time, at(time) + 1_000, 'replica-1/coordinator', { shards: 4 });
  await claims.release(coordinator, { kind: 'sharded', shards: 4 }, at(time) + 2_000);
  const hashes = await invoiceHashes(w, time);
  const first = await claimWindow(w, time, at(time) + 3_000, 'replica-2/s0', { shard: 0 });
  await ledger.reserve(first, hashes[0]!, { rerunInDoubt: false, now: at(time) + 3_000 });
  await ledger.markDone(first, [hashes[0]!]);
  const one = { done: 1, inDoubt: 0, failed: 0, inDoubtKeys: [], failedKeys: [], runs: 1 };
  await claims.complete(first, one, at(time) + 4_000);
  await claims.shardFinished(window, 0);
  const live = await claimWindow(w, time, at(time) + 20_000, 'replica-3/s1', { shard: 1 });
  await ledger.reserve(live, hashes[1]!, { rerunInDoubt: false, now: at(time) + 20_000 });
  await claims.checkpoint(
    live,
    { positions: { invoices: '1' }, walked: false },
    { done: 0, skipped: 1, inDoubt: 0, failed: 0, retrying: 0, inDoubtKeys: [], failedKeys: [], epoch: 1 },
  );
  const stuck = await claimWindow(w, time, at(time) + 5_000, 'replica-4/s2', { shard: 2 });
  await claims.release(
    stuck,
    {
      kind: 'stuck',
      reason: 'no progress in 3 consecutive runs (the last stopped: provider-failing)',
      checkpoint: { positions: { invoices: '2' }, walked: false },
      runsWithoutProgress: 3,
    },
    at(time) + 6_000,
  );
  await claims.shardFinished(window, 2);
  return { window, hashes, live };
}

describe('slotguard slots for a window split into shards', () => {
  const show = (time: string, ...more: string[]) => [
    'slots',
    'show',
    '--job',
    'payment-reminder',
    '--window',
    `2026-11-30T${time}:00Z`,
    ...more,
  ];

  it('shows which shards finished and each shard’s record in a table; an effect a live shard reserved is under way, not in doubt', async () => {
    const clock = new ManualClock(at('06:30') + 30_000);
    const w = await world(clock);
    await windowInFourShards(w, '06:30');

    const shown = await cli(show('06:30', ...w.where), clock);
    expect(shown.code).toBe(1);
    expect(shown.out).toContain('state        SHARDED  [stuck shard 2]');
    expect(shown.out).toContain('shards       2 of 4 shards finished (0, 2)');
    expect(shown.out).toMatch(
      /shard\s+state\s+epoch\s+holder\s+lease end\s+checkpoint\s+progress\s+no progress\s+done\s+in doubt\s+under way\s+refused/,
    );
    expect(shown.out).toMatch(/\n\s+0\s+DONE\s+1\s+replica-2\s+-\s+-\s+-\s+0\s+1\s+0\s+0\s+0\n/);
    expect(shown.out).toMatch(
      /\n\s+1\s+RUNNING \(lease live\)\s+1\s+replica-3\s+2026-11-30T06:31:20Z\s+invoices at "1"\s+0 done, 1 skipped\s+0\s+0\s+0\s+1\s+0\n/,
    );
    expect(shown.out).toMatch(
      /\n\s+2\s+STUCK\s+1\s+replica-4\s+-\s+invoices at "2"\s+-\s+3\s+0\s+0\s+0\s+0\n/,
    );
    expect(shown.out).toMatch(/\n\s+3\s+PENDING\s+-\s+-\s+-\s+-\s+-\s+-\s+0\s+0\s+0\s+0\n/);
    expect(shown.out).toContain(
      'shard 2 stuck: no progress in 3 consecutive runs (the last stopped: provider-failing)',
    );
    expect(shown.out).toContain('effects: 1 done, 0 in doubt, 1 under way, 0 refused');

    const json = JSON.parse((await cli(show('06:30', '--json', ...w.where), clock)).out) as {
      state: string;
      shards: { count: number; finished: number[]; records: { shard: number; state: string }[] };
      effectCounts: { inFlight: number; inDoubt: number };
      problems: string[];
    };
    expect(json.state).toBe('SHARDED');
    expect(json.shards.count).toBe(4);
    expect(json.shards.finished).toEqual([0, 2]);
    expect(json.shards.records.map((r) => r.state)).toEqual(['DONE', 'RUNNING', 'STUCK', 'PENDING']);
    expect(json.effectCounts).toMatchObject({ inFlight: 1, inDoubt: 0 });
    expect(json.problems).toEqual(['stuck shard 2']);
  });

  it('shows one shard in full with --shard, with only the effects it wrote, and refuses a shard the window does not have', async () => {
    const clock = new ManualClock(at('06:30') + 30_000);
    const w = await world(clock);
    const { hashes } = await windowInFourShards(w, '06:30');

    const live = await cli(show('06:30', '--shard', '1', ...w.where), clock);
    expect(live.code).toBe(0);
    expect(live.out).toContain(
      'payment-reminder 2026-11-30T06:30:00Z shard 1 of 4 (Mon 2026-11-30 06:30 UTC)',
    );
    expect(live.out).toContain('state        RUNNING (lease live)');
    expect(live.out).toContain('lease end    2026-11-30T06:31:20Z (live)');
    expect(live.out).toContain('checkpoint   invoices at "1"; walk not finished');
    expect(live.out).toContain(
      "progress     the holder's run so far (epoch 1): 0 done, 1 skipped, 0 in doubt, 0 retrying, 0 failed",
    );
    expect(live.out).toContain('effects: 0 done, 0 in doubt, 1 under way, 0 refused');
    expect(live.out).toContain(`under way (epoch 1): ${hashes[1]}`);

    const finished = await cli(show('06:30', '--shard', '0', '--json', ...w.where), clock);
    expect(JSON.parse(finished.out)).toMatchObject({
      shard: 0,
      state: 'DONE',
      summary: { done: 1, runs: 1 },
      effects: { done: [hashes[0]], inDoubt: [], inFlight: [] },
    });

    const stuck = await cli(show('06:30', '--shard', '2', ...w.where), clock);
    expect(stuck.code).toBe(1);
    expect(stuck.out).toContain('state        STUCK  [stuck]');
    expect(stuck.out).toContain('its window waits for its other shards');

    const pending = await cli(show('06:30', '--shard', '3', ...w.where), clock);
    expect(pending.code).toBe(0);
    expect(pending.out).toContain(
      "No record yet: no run has claimed this shard's message. Its window is SHARDED.",
    );

    const beyond = await cli(show('06:30', '--shard', '4', ...w.where), clock);
    expect(beyond.code).toBe(1);
    expect(beyond.err).toContain(
      '--shard is 4, but window 2026-11-30T06:30:00Z is split into 4 shards, 0 to 3',
    );
    const malformed = await cli(show('06:30', '--shard', 'two', ...w.where), clock);
    expect(malformed.code).toBe(2);
    expect(malformed.err).toContain('--shard is "two"; give a shard\'s index, a whole number from 0 to 999');

    await w.runner.fire(job, new Date(at('06:15')));
    const unsplit = await cli(show('06:15', '--shard', '0', ...w.where), clock);
    expect(unsplit.code).toBe(1);
    expect(unsplit.err).toContain('window 2026-11-30T06:15:00Z is not split into shards');
  });

  it('lists split windows: SHARDED with its shards finished, a problem once past its deadline, and a finished one’s count', async () => {
    const clock = new ManualClock(at('06:40'));
    const w = await world(clock);
    const { claims } = w.backend.backend;
    // 06:00: split in two, both shards done, finished by the last.
    const done = { jobId: 'payment-reminder', window: '2026-11-30T06:00:00Z' };
    const coordinator = await claimWindow(w, '06:00', at('06:00') + 1_000, 'replica-1/c', { shards: 2 });
    await claims.release(coordinator, { kind: 'sharded', shards: 2 }, at('06:00') + 2_000);
    const nothing = { done: 0, inDoubt: 0, failed: 0, inDoubtKeys: [], failedKeys: [], runs: 1 };
    for (const shard of [0, 1]) {
      const run = await claimWindow(w, '06:00', at('06:00') + 3_000, `replica-2/s${shard}`, { shard });
      await claims.complete(run, nothing, at('06:00') + 4_000);
      await claims.shardFinished(done, shard);
    }
    expect(
      await claims.finishSharded(done, { kind: 'complete', summary: { ...nothing, runs: 3 } }, at('06:01')),
    ).toBe('ok');
    // 06:15: SHARDED, its deadline (06:30) passed; 06:30: SHARDED, within its deadline.
    for (const time of ['06:15', '06:30']) {
      const split = await claimWindow(w, time, at(time) + 1_000, 'replica-1/c', { shards: 4 });
      await claims.release(split, { kind: 'sharded', shards: 4 }, at(time) + 2_000);
      const run = await claimWindow(w, time, at(time) + 3_000, 'replica-2/s0', { shard: 0 });
      await claims.complete(run, nothing, at(time) + 4_000);
      await claims.shardFinished({ jobId: 'payment-reminder', window: `2026-11-30T${time}:00Z` }, 0);
    }

    const listed = await cli(listReminders('2026-11-30T06:00Z', '2026-11-30T06:45Z', ...w.where), clock);
    expect(listed.code).toBe(1);
    expect(listed.out).toMatch(/06:00:00Z.*DONE.*\s2 shards$/m);
    expect(listed.out).toMatch(/06:15:00Z.*SHARDED.*1 of 4 shards finished, past deadline$/m);
    expect(listed.out).toMatch(/06:30:00Z.*SHARDED.*1 of 4 shards finished$/m);
    expect(listed.out).toContain('1 windows need a look');
  });

  it('refuses to release a stuck shard while its window is SHARDED, then releases it and the window once the window is STUCK', async () => {
    const clock = new ManualClock(at('06:30') + 30_000);
    const w = await world(clock);
    const { claims } = w.backend.backend;
    const { window, live } = await windowInFourShards(w, '06:30');
    const release = (...more: string[]) => [
      'slots',
      'release',
      '--job',
      'payment-reminder',
      '--window',
      window.window,
      ...more,
      ...w.where,
    ];

    const sharded = await cli(release(), clock);
    expect(sharded.code).toBe(1);
    expect(sharded.err).toContain('it is SHARDED, and its shards run it (2 of 4 finished)');
    const early = await cli(release('--shard', '2'), clock);
    expect(early.code).toBe(1);
    expect(early.err).toContain('it is STUCK and its message is gone, while its window is still SHARDED');
    expect(await claims.read({ ...window, shard: 2 })).toMatchObject({ state: 'STUCK', epoch: 1 });

    // The other shards end; the last finishes the window STUCK, naming shard 2.
    const nothing = { done: 0, inDoubt: 0, failed: 0, inDoubtKeys: [], failedKeys: [], runs: 1 };
    await claims.complete(live, nothing, at('06:30') + 40_000);
    await claims.shardFinished(window, 1);
    const last = await claimWindow(w, '06:30', at('06:30') + 41_000, 'replica-5/s3', { shard: 3 });
    await claims.complete(last, nothing, at('06:30') + 42_000);
    expect(await claims.shardFinished(window, 3)).toEqual({ shards: 4, finished: [0, 1, 2, 3] });
    await claims.finishSharded(window, { kind: 'stuck', reason: 'shard 2 of 4 ended STUCK' }, at('06:31'));
    const stuckShown = await cli(show('06:30', ...w.where), clock);
    expect(stuckShown.out).toContain(
      `slotguard slots release --job payment-reminder --window ${window.window} --shard 2`,
    );

    const windowFirst = await cli(release(), clock);
    expect(windowFirst.code).toBe(1);
    expect(windowFirst.err).toContain('its shard 2 is still STUCK or FAILED');
    expect(await claims.read(window)).toMatchObject({ state: 'STUCK' });

    const shard = await cli(release('--shard', '2'), clock);
    expect(shard.code).toBe(0);
    // payment-reminder's deadline is its 15-minute gap: released at 06:30:30, the shard has until 06:45:30.
    expect(shard.out).toContain(
      'released payment-reminder 2026-11-30T06:30:00Z shard 2: STUCK at epoch 1 (holder replica-4) → RELEASED, ' +
        'deadline 2026-11-30T06:45:30Z. Its window is STUCK: release the window too',
    );
    expect(await claims.read({ ...window, shard: 2 })).toMatchObject({
      state: 'RELEASED',
      epoch: 1,
      runsWithoutProgress: 0,
      deadline: at('06:45') + 30_000,
    });

    const whole = await cli(release(), clock);
    expect(whole.code).toBe(0);
    expect(whole.out).toContain('The next delivery claims it at epoch 2 and splits it again into 4 shards');
    const after = await claims.read(window);
    expect(after).toMatchObject({ state: 'RELEASED', epoch: 1, shards: 4 });
    expect(after?.finishedShards).toBeUndefined();
  });

  it('releases a shard whose holder is gone while its window runs: its queued message takes it over', async () => {
    const clock = new ManualClock(at('06:30') + 30_000);
    const w = await world(clock);
    const { window, hashes } = await windowInFourShards(w, '06:30');
    const args = ['slots', 'release', '--job', 'payment-reminder', '--window', window.window, '--shard', '1'];

    const live = await cli([...args, ...w.where], clock);
    expect(live.code).toBe(1);
    expect(live.err).toContain('its holder replica-3 has a live lease until 2026-11-30T06:31:20.000Z');

    await clock.advance(60_000);
    const gone = await cli([...args, '--json', ...w.where], clock);
    expect(gone.code).toBe(0);
    expect(JSON.parse(gone.out)).toMatchObject({
      outcome: 'released',
      shard: 1,
      before: { state: 'RUNNING', epoch: 1, holder: 'replica-3/s1' },
      after: { state: 'RELEASED', epoch: 1 },
    });
    const text = await cli(show('06:30', '--shard', '1', ...w.where), clock);
    // Its reservation is in doubt now: the run that made it was fenced out by the release.
    expect(text.out).toContain('state        RELEASED  [unfinished, in doubt]');
    expect(text.out).toContain(`${hashes[1]}  reserved at epoch 1 of shard 1`);
    expect(await w.backend.backend.claims.read(window)).toMatchObject({
      state: 'SHARDED',
      finishedShards: [0, 2],
    });
  });

  it('refuses to re-run effects of a split window (its finished shards would stand down without them), and to mark one a live shard is sending', async () => {
    const clock = new ManualClock(at('06:30') + 30_000);
    const w = await world(clock);
    const { window, hashes } = await windowInFourShards(w, '06:30');
    const target = ['--job', 'payment-reminder', '--window', window.window];

    const rerun = await cli(
      ['effects', 'resolve', ...target, '--key', hashes[1]!, '--rerun', ...w.where],
      clock,
    );
    expect(rerun.code).toBe(1);
    expect(rerun.err).toContain('the window is split into 4 shards');
    expect(rerun.err).toContain('Nothing was written.');
    const redrive = await cli(['effects', 'redrive', ...target, ...w.where], clock);
    expect(redrive.code).toBe(1);
    expect(redrive.err).toContain(
      'refused to re-drive payment-reminder 2026-11-30T06:30:00Z: the window is split',
    );
    expect(await w.backend.backend.ledger.read(window, hashes[1]!)).toMatchObject({
      state: 'RESERVED',
      shard: 1,
    });
    expect(await w.backend.backend.claims.read(window)).toMatchObject({ state: 'SHARDED', epoch: 1 });

    // Marking it done is refused while the shard that reserved it holds its lease: it is under way.
    const markDone = ['effects', 'resolve', ...target, '--key', hashes[1]!, '--mark-done', ...w.where];
    const live = await cli(markDone, clock);
    expect(live.code).toBe(1);
    expect(live.err).toContain(
      `refused to resolve ${hashes[1]}: shard 1's run (replica-3, epoch 1) reserved it and holds its lease until ` +
        '2026-11-30T06:31:20.000Z',
    );
    expect(await w.backend.backend.ledger.read(window, hashes[1]!)).toMatchObject({ state: 'RESERVED' });
    await clock.advance(60_000);
    const gone = await cli(markDone, clock);
    expect(gone.code).toBe(0);
    expect(await w.backend.backend.ledger.read(window, hashes[1]!)).toMatchObject({
      state: 'DONE',
      shard: 1,
    });
  });
});

describe('slotguard effects resolve --rerun on a window a frozen run still holds', () => {
  it('refuses while the run holds it RUNNING past its lease, naming slots release, and clears it once released', async () => {
    const clock = new ManualClock(at('06:45') + 5_000);
    const w = await world(clock);
    const { ledger } = w.backend.backend;
    const slot = { jobId: 'payment-reminder', window: '2026-11-30T06:45:00Z' };
    const frozen = await claimWindow(w, '06:45', clock.now());
    const [hash] = await invoiceHashes(w, '06:45');
    await ledger.reserve(frozen, hash!, { rerunInDoubt: false, now: clock.now() });
    // Ten minutes on its lease is long over, but the run may only be frozen: the window stays RUNNING.
    await clock.advance(10 * 60_000);
    const window = ['--job', 'payment-reminder', '--window', slot.window];
    const rerun = ['effects', 'resolve', ...window, '--key', hash!, '--rerun', ...w.where];

    const refused = await cli(rerun, clock);
    expect(refused.code).toBe(1);
    expect(refused.err).toContain(
      `refused to resolve ${hash}: a run (replica-9, epoch 1) still holds the slot RUNNING. Its lease ended at ` +
        '2026-11-30T06:46:05.000Z, but it may be frozen, not dead',
    );
    expect(refused.err).toContain(
      'Release it first, which fences it out: slotguard slots release --job payment-reminder --window ' +
        '2026-11-30T06:45:00Z; then check the provider again',
    );
    expect(refused.err).toContain('Nothing was written.');
    const json = await cli([...rerun, '--json'], clock);
    expect(JSON.parse(json.out)).toMatchObject({
      outcome: 'refused',
      reason: 'running',
      current: { state: 'RUNNING', epoch: 1 },
    });
    expect(await ledger.read(slot, hash!)).toMatchObject({ state: 'RESERVED', epoch: 1 });

    expect(await cli(['slots', 'release', ...window, ...w.where], clock)).toMatchObject({ code: 0 });
    const cleared = await cli(rerun, clock);
    expect(cleared.code).toBe(0);
    expect(cleared.out).toContain(`cleared ${hash} in payment-reminder ${slot.window}. The next delivery`);
    expect(await ledger.read(slot, hash!)).toBeUndefined();
  });
});

describe('slotguard effects redrive', () => {
  const smtp = () => ['--smtp', `${sink.host}:${sink.port}`, '--invoices', String(INVOICES)];

  it('sends a PARTIAL window’s refused effects once: clears them, reopens it, delivers it, nobody emailed twice', async () => {
    const clock = new ManualClock(at('09:00'));
    const w = await world(clock);
    const { slot, hashes } = await partialWindow(w, '06:30');
    const out = await cli(
      ['effects', 'redrive', '--job', 'payment-reminder', '--window', slot.window, ...smtp(), ...w.where],
      clock,
    );
    expect(out.code).toBe(0);
    expect(out.out).toContain(
      're-drove payment-reminder 2026-11-30T06:30:00Z: PARTIAL at epoch 1 → RELEASED, deadline 2026-11-30T09:15:00Z; cleared 2 refused effects',
    );
    expect(out.out).toContain(`${hashes[1]} (5 attempts, rejected)`);
    expect(out.out).toContain('delivered: DONE epoch 2; effects 3 done, 0 in doubt');
    // The invoice sent before is skipped; the two refused ones go out, once each.
    expect(sink.total()).toBe(2);
    expect(sink.duplicates()).toBe(0);
    expect(await w.backend.backend.claims.read(slot)).toMatchObject({
      state: 'DONE',
      epoch: 2,
      summary: { done: 3, failed: 0, runs: 2 },
      delivery: { backfilled: true },
    });
    const watched = await cli(
      ['watchdog', '--job', 'payment-reminder', '--lookback', '3h', '--json', ...w.where],
      clock,
    );
    const verdicts = (JSON.parse(watched.out) as { windows: { window: string; verdict: string }[] }).windows;
    expect(verdicts.find((x) => x.window === slot.window)?.verdict).toBe('ok');
  });

  it('re-drives only the --key named, and refuses a key that was not refused without writing anything', async () => {
    const clock = new ManualClock(at('09:00'));
    const w = await world(clock);
    const { slot, hashes } = await partialWindow(w, '06:30');
    const args = [
      'effects',
      'redrive',
      '--job',
      'payment-reminder',
      '--window',
      slot.window,
      ...smtp(),
      ...w.where,
    ];

    const notRefused = await cli([...args, '--key', hashes[1]!, '--key', hashes[0]!], clock);
    expect(notRefused.code).toBe(1);
    expect(notRefused.err).toContain(`${hashes[0]} is DONE`);
    expect(notRefused.err).toContain('Nothing was written.');
    expect(await w.backend.backend.claims.read(slot)).toMatchObject({ state: 'PARTIAL', epoch: 1 });
    expect(await w.backend.backend.ledger.read(slot, hashes[1]!)).toMatchObject({ state: 'FAILED' });
    expect(sink.total()).toBe(0);

    const one = await cli([...args, '--key', hashes[1]!, '--json'], clock);
    // The other refused invoice stays refused: the window finishes PARTIAL again, and says so.
    expect(one.code).toBe(1);
    expect(JSON.parse(one.out)).toMatchObject({
      outcome: 'redriven',
      cleared: [{ keyHash: hashes[1], attempts: 5, reason: 'rejected' }],
      delivery: { ok: false, state: 'PARTIAL', epoch: 2 },
    });
    expect(sink.total()).toBe(1);
    expect(await w.backend.backend.ledger.read(slot, hashes[2]!)).toMatchObject({
      state: 'FAILED',
      reason: 'quota',
    });
  });

  it('refuses while a run holds the window RUNNING, its lease live or ended (then naming slots release), deleting nothing', async () => {
    const clock = new ManualClock(at('06:31'));
    const w = await world(clock);
    const slot = { jobId: 'payment-reminder', window: '2026-11-30T06:30:00Z' };
    const hashes = await invoiceHashes(w, '06:30');
    const holder = await claimWindow(w, '06:30', at('06:30') + 30_000);
    await w.backend.backend.ledger.reserve(holder, hashes[0]!, { rerunInDoubt: false, now: at('06:30') });
    await w.backend.backend.ledger.recordFailure(holder, hashes[0]!, {
      attempts: 1,
      retryAt: at('06:32'),
      reason: 'throttled',
    });
    const redrive = () =>
      cli(['effects', 'redrive', '--job', slot.jobId, '--window', slot.window, ...smtp(), ...w.where], clock);

    const live = await redrive();
    expect(live.code).toBe(1);
    expect(live.err).toContain(
      'a run (replica-9, epoch 1) holds it until 2026-11-30T06:31:30.000Z; wait for it to end',
    );
    expect(live.err).toContain('Nothing was written.');

    // Ten minutes on its lease has ended, but the run may only be frozen: still RUNNING, still refused.
    await clock.advance(10 * 60_000);
    const frozen = await redrive();
    expect(frozen.code).toBe(1);
    expect(frozen.err).toContain(
      `refused to re-drive ${slot.jobId} ${slot.window}: a run (replica-9, epoch 1) still holds the slot ` +
        'RUNNING. Its lease ended at 2026-11-30T06:31:30.000Z',
    );
    expect(frozen.err).toContain(
      `slotguard slots release --job ${slot.jobId} --window ${slot.window}; then re-drive it.`,
    );
    expect(frozen.err).toContain('Nothing was written.');
    expect(await w.backend.backend.ledger.read(slot, hashes[0]!)).toMatchObject({ state: 'FAILED' });
    expect(sink.total()).toBe(0);
  });

  describe('against AWS', () => {
    it('re-drives the window and invokes the deployed function once, with its scheduled time', async () => {
      lambda.on(InvokeCommand).resolves({ StatusCode: 202 });
      const clock = new ManualClock(at('09:00'));
      const w = await world(clock);
      const { slot } = await stuckWindow(w, '06:15');
      const out = await cli(
        [
          'effects',
          'redrive',
          '--job',
          'payment-reminder',
          '--window',
          slot.window,
          '--function',
          'slotguard-payment-reminder',
          ...w.where,
        ],
        clock,
      );
      expect(out.code).toBe(0);
      expect(out.out).toContain(
        'STUCK at epoch 1 → RELEASED, deadline 2026-11-30T09:15:00Z; no refused effect to clear',
      );
      expect(out.out).toContain('delivered: queued (202)');
      const calls = lambda.commandCalls(InvokeCommand);
      expect(calls).toHaveLength(1);
      expect(calls[0]!.args[0].input).toMatchObject({
        FunctionName: 'slotguard-payment-reminder',
        InvocationType: 'Event',
      });
      const event = JSON.parse(
        new TextDecoder().decode(calls[0]!.args[0].input.Payload as Uint8Array),
      ) as Record<string, unknown>;
      expect(event).toMatchObject({
        jobId: 'payment-reminder',
        scheduledTime: slot.window,
        backfilled: true,
      });
      expect(event.executionId).toMatch(/^redrive-/);
      expect(await w.backend.backend.claims.read(slot)).toMatchObject({
        state: 'RELEASED',
        deadline: at('09:15'),
      });
    });

    it('refuses to re-drive an AWS table without --function, before reading anything', async () => {
      const out = await cli([
        'effects',
        'redrive',
        '--job',
        'payment-reminder',
        '--window',
        '2026-11-30T06:15:00Z',
        '--table',
        'prod-claims',
      ]);
      expect(out.code).toBe(2);
      expect(out.err).toContain('effects redrive there invokes the deployed function; pass --function NAME');
      expect(lambda.commandCalls(InvokeCommand)).toHaveLength(0);
    });
  });
});

describe('slotguard schedules', () => {
  const scheduler = mockClient(SchedulerClient);
  afterEach(() => scheduler.reset());

  const weekly = {
    Name: 'SlotguardweeklyreportSchedule1A2B',
    GroupName: 'SlotguardweeklyreportScheduleGroup9C8D',
    ScheduleExpression: 'cron(0 9 ? * MON *)',
    ScheduleExpressionTimezone: 'Europe/Moscow',
    State: 'ENABLED' as const,
    Description: 'slotguard job weekly-report',
    FlexibleTimeWindow: { Mode: 'OFF' as const },
    Target: {
      Arn: 'arn:aws:lambda:eu-west-1:123456789012:function:Slotguard-weeklyreport',
      RoleArn: 'arn:aws:iam::123456789012:role/scheduler',
      Input: JSON.stringify({ jobId: 'weekly-report', scheduledTime: '<aws.scheduler.scheduled-time>' }),
    },
  };
  /** The schedule that audits weekly-report every 15 minutes, as ScheduledJob deploys it next to the job's. */
  const weeklyWatchdog = {
    Name: 'SlotguardweeklyreportWatchdogSchedule5E6F',
    GroupName: 'SlotguardWatchdogScheduleGroup7A8B',
    ScheduleExpression: 'rate(15 minutes)',
    State: 'ENABLED' as const,
    Description: 'slotguard watchdog of job weekly-report',
    FlexibleTimeWindow: { Mode: 'OFF' as const },
    Target: {
      Arn: 'arn:aws:lambda:eu-west-1:123456789012:function:Slotguard-watchdog',
      RoleArn: 'arn:aws:iam::123456789012:role/watchdog-scheduler',
      Input: JSON.stringify({
        kind: 'watchdog',
        jobId: 'weekly-report',
        schedule: { expression: 'cron(0 9 ? * MON *)', timeZone: 'Europe/Moscow' },
        deadlineSeconds: 21_600,
        graceSeconds: 900,
        lookbackHours: 48,
      }),
    },
  };
  const other = {
    Name: 'nightly-backup',
    GroupName: 'default',
    ScheduleExpression: 'rate(1 day)',
    State: 'DISABLED' as const,
    FlexibleTimeWindow: { Mode: 'OFF' as const },
    Target: {
      Arn: 'arn:aws:lambda:eu-west-1:123456789012:function:backup',
      RoleArn: 'arn:aws:iam::123456789012:role/x',
    },
  };

  function deployed() {
    scheduler.on(ListSchedulesCommand).resolves({
      Schedules: [weekly, weeklyWatchdog, other].map(({ Name, GroupName }) => ({ Name, GroupName })),
    });
    for (const schedule of [weekly, weeklyWatchdog, other])
      scheduler.on(GetScheduleCommand, { Name: schedule.Name }).resolves(schedule);
  }

  it('lists the deployed schedules with the job each runs and its next fire', async () => {
    deployed();
    const out = await cli(['schedules', 'list'], new ManualClock(Date.parse('2026-11-29T12:00:00Z')));
    expect(out.code).toBe(0);
    expect(out.out).toMatch(
      /weekly-report\s+ENABLED\s+cron\(0 9 \? \* MON \*\)\s+Europe\/Moscow\s+2026-11-30T06:00:00Z\s+SlotguardweeklyreportSchedule1A2B/,
    );
    expect(out.out).toMatch(
      /weekly-report \(watchdog\)\s+ENABLED\s+rate\(15 minutes\)\s+UTC\s+2026-11-29T12:15:00Z\s+SlotguardweeklyreportWatchdogSchedule5E6F/,
    );
    expect(out.out).toMatch(
      /-\s+DISABLED\s+rate\(1 day\)\s+UTC\s+paused\s+nightly-backup\s+default\s+function:backup|-\s+DISABLED\s+rate\(1 day\)\s+UTC\s+paused\s+nightly-backup\s+default\s+backup/,
    );
    const json = JSON.parse((await cli(['schedules', 'list', '--job', 'weekly-report', '--json'])).out) as {
      name: string;
      role: string;
    }[];
    expect(json.map((s) => [s.role, s.name])).toEqual([
      ['job', weekly.Name],
      ['watchdog', weeklyWatchdog.Name],
    ]);
  });

  it('pauses a job’s schedule by job id, not its watchdog’s, sending its definition back unchanged but the state', async () => {
    deployed();
    scheduler.on(UpdateScheduleCommand).resolves({ ScheduleArn: 'arn:aws:scheduler:::schedule/x' });
    const out = await cli(['schedules', 'pause', '--job', 'weekly-report']);
    expect(out.code).toBe(0);
    expect(out.out).toContain("paused job weekly-report's schedule SlotguardweeklyreportSchedule1A2B");
    expect(out.out).toContain('ENABLED → DISABLED');
    expect(scheduler.commandCalls(UpdateScheduleCommand)).toHaveLength(1);
    const [update] = scheduler.commandCalls(UpdateScheduleCommand);
    expect(update!.args[0].input).toEqual({
      Name: weekly.Name,
      GroupName: weekly.GroupName,
      ScheduleExpression: weekly.ScheduleExpression,
      ScheduleExpressionTimezone: 'Europe/Moscow',
      Description: weekly.Description,
      FlexibleTimeWindow: weekly.FlexibleTimeWindow,
      Target: weekly.Target,
      State: 'DISABLED',
    });
  });

  it('resumes by name and group, and leaves an already enabled schedule alone', async () => {
    scheduler.on(GetScheduleCommand, { Name: other.Name }).resolves(other);
    scheduler.on(UpdateScheduleCommand).resolves({ ScheduleArn: 'x' });
    const resumed = await cli(['schedules', 'resume', '--name', 'nightly-backup', '--group', 'default']);
    expect(resumed.code).toBe(0);
    expect(resumed.out).toContain('DISABLED → ENABLED');
    expect(scheduler.commandCalls(UpdateScheduleCommand)[0]!.args[0].input).toMatchObject({
      State: 'ENABLED',
      Name: 'nightly-backup',
    });

    scheduler.reset();
    scheduler.on(GetScheduleCommand).resolves({ ...other, State: 'ENABLED' });
    const unchanged = await cli(['schedules', 'resume', '--name', 'nightly-backup']);
    expect(unchanged.code).toBe(0);
    expect(unchanged.out).toContain('is already ENABLED; nothing was changed');
    expect(scheduler.commandCalls(UpdateScheduleCommand)).toHaveLength(0);
  });

  it('exits 1 for a job no schedule runs, and 3 when Scheduler refuses the credentials', async () => {
    deployed();
    const none = await cli(['schedules', 'pause', '--job', 'payment-reminder']);
    expect(none.code).toBe(1);
    expect(none.err).toContain('no deployed schedule runs job payment-reminder');

    scheduler.reset();
    const accessDenied = new SchedulerServiceException({
      name: 'AccessDeniedException',
      $fault: 'client',
      $metadata: {},
      message: 'not authorized',
    });
    scheduler.on(ListSchedulesCommand).rejects(accessDenied);
    const denied = await cli(['schedules', 'list']);
    expect(denied.code).toBe(3);
    expect(denied.err).toContain(
      'EventBridge Scheduler refused the request (AccessDeniedException: not authorized)',
    );
  });

  describe('with no catalog, against a table in AWS', () => {
    /** The CLI as a team runs it from a directory with no catalog: installed, its project naming none. */
    async function uncatalogued() {
      return { cwd: await teamProject({}), localRuns: undefined };
    }
    /** weekly-report's windows of a range that ends before it starts: refused right after the job is read, before any table is. */
    const BACKWARDS_AGAINST_AWS = [
      'slots',
      'list',
      '--job',
      'weekly-report',
      '--table',
      'prod-claims',
      '--from',
      'now',
      '--to',
      'now-7d',
    ];

    it("reads the job's schedule, time zone and deadline from its deployed schedules", async () => {
      deployed();
      const out = await cli(BACKWARDS_AGAINST_AWS, undefined, await uncatalogued());

      expect(out.code).toBe(2);
      expect(out.err).toContain(
        `note: no catalog named; job weekly-report is read from its deployed schedule ${weekly.Name} (group ` +
          `${weekly.GroupName}): cron(0 9 ? * MON *) Europe/Moscow, deadline 360 min.`,
      );
      expect(out.err).toContain('--to (2026-11-23T07:00:00Z) must be after --from (2026-11-30T07:00:00Z)');
      expect(scheduler.commandCalls(GetScheduleCommand)).toHaveLength(3);
    });

    it('exits 2 for a job no deployed schedule runs, and lists the deployed ones when --job is missing', async () => {
      deployed();
      const host = await uncatalogued();
      const table = ['--table', 'prod-claims', '--region', 'eu-west-1', '--from', 'now-1d', '--to', 'now'];

      const unknown = await cli(['slots', 'list', '--job', 'payment-reminder', ...table], undefined, host);
      expect(unknown.code).toBe(2);
      expect(unknown.err).toContain(
        'no catalog is named, and no deployed schedule in eu-west-1 runs job "payment-reminder" (the jobs ' +
          'deployed there are weekly-report); check --job and --region, or give --catalog',
      );

      const missing = await cli(['slots', 'list', ...table], undefined, host);
      expect(missing.code).toBe(2);
      expect(missing.err).toContain('--job is missing; the jobs deployed in eu-west-1 are weekly-report');
    });

    it('asks Scheduler nothing when a catalog is named, and nothing for a local endpoint', async () => {
      deployed();
      const named = await cli(BACKWARDS_AGAINST_AWS);
      expect(named.code).toBe(2);
      expect(named.err).not.toContain('note: no catalog named');

      const local = await cli(
        ['slots', 'list', '--job', 'weekly-report', '--from', 'now', '--to', 'now-1d', ...DEAD_ENDPOINT],
        undefined,
        await uncatalogued(),
      );
      expect(local.code).toBe(2);
      expect(local.err).toContain('none is named: give --catalog');
      expect(scheduler.commandCalls(ListSchedulesCommand)).toHaveLength(0);
    });
  });
});

describe('slotguard usage, help and an unreachable backend', () => {
  it.each([
    [
      ['slots', 'list', '--from', 'now-1d', '--to', 'now'],
      /--job is missing; the jobs in \.\/functions\/catalog\.ts \(slotguard\.config\.json\) are weekly-report, payment-reminder/,
    ],
    [
      ['slots', 'show', '--job', 'nightly', '--window', '2026-11-30T06:00:00Z'],
      /there is no job "nightly" in \.\/functions\/catalog\.ts \(slotguard\.config\.json\); the jobs are weekly-report, payment-reminder/,
    ],
    [
      ['slots', 'show', '--job', 'weekly-report', '--window', '2026-11-30T09:00'],
      /has no time zone; append Z for UTC/,
    ],
    [
      ['slots', 'list', '--job', 'weekly-report', '--from', 'now', '--to', 'now-1d'],
      /--to .* must be after --from/,
    ],
    [
      [
        'effects',
        'resolve',
        '--job',
        'weekly-report',
        '--window',
        '2026-11-30T06:00:00Z',
        '--key',
        'abc123ff',
      ],
      /exactly one of --mark-done .* or --rerun/,
    ],
    [['slots', 'list', '--job', 'weekly-report', '--bogus'], /Unknown option '--bogus'/],
    [
      ['watchdog', '--job', 'weekly-report', '--lookback', '2x'],
      /--lookback is "2x"; give a whole number and a unit/,
    ],
    [
      ['watchdog', '--job', 'weekly-report', '--lookback', '900h', '--endpoint', 'http://127.0.0.1:9'],
      /--lookback: a lookback of 37 d 12 h is not more than zero and at most 34 d/,
    ],
    [
      ['effects', 'redrive', '--job', 'weekly-report', '--window', '2026-11-30T06:00:00Z', '--key', 'nothex'],
      /--key is "nothex"; give a refused effect's hash/,
    ],
    [['slots', 'lst'], /unknown command "slots lst"/],
  ])('exits 2 with what was wrong: %j', async (argv, message) => {
    const out = await cli(argv);
    expect(out.code).toBe(2);
    expect(out.err).toMatch(message);
  });

  it('documents every command under --help, with the exit codes', async () => {
    const overview = await cli(['--help']);
    expect(overview.code).toBe(0);
    for (const command of [
      'slots list',
      'slots show',
      'slots release',
      'effects resolve',
      'effects redrive',
      'watchdog',
      'backfill',
      'schedules list',
      'schedules pause',
      'schedules resume',
    ]) {
      expect(overview.out).toContain(command);
      const help = await cli([...command.split(' '), '--help']);
      expect(help.code).toBe(0);
      expect(help.out).toContain(`Usage: slotguard ${command}`);
      expect(help.out).toContain('3  the backend or AWS could not be reached');
    }
  });

  it('exits 3 when the backend does not answer, and when there is no local state', async () => {
    const dead = await cli([
      'slots',
      'list',
      '--job',
      'weekly-report',
      '--from',
      'now-7d',
      '--to',
      'now',
      '--endpoint',
      'http://127.0.0.1:9',
    ]);
    expect(dead.code).toBe(3);
    expect(dead.err).toMatch(/DynamoDB at http:\/\/127\.0\.0\.1:9, table slotguard-claims did not answer/);
    const stateDir = await mkdtemp(join(tmpdir(), 'slotguard-cli-'));
    try {
      const empty = await cli([
        'slots',
        'list',
        '--job',
        'weekly-report',
        '--from',
        'now-7d',
        '--to',
        'now',
        '--state-dir',
        stateDir,
      ]);
      expect(empty.code).toBe(3);
      expect(empty.err).toContain('nothing has run here yet. Start the jobs with `npm start -- serve`');
    } finally {
      await rm(stateDir, { recursive: true, force: true });
    }
  });

  it('reads the state `npm start -- serve` keeps in the state directory', async () => {
    const stateDir = await mkdtemp(join(tmpdir(), 'slotguard-cli-'));
    try {
      const clock = new ManualClock(at('06:20'));
      const kept = await openLocalBackend({ path: join(stateDir, 'dynamodb'), thread: true });
      const runner = new LocalRunner({
        jobs: [job],
        backend: kept.backend,
        senderFor: (from) => smtpSender({ host: sink.host, port: sink.port, from }),
        clock,
        replicas: 1,
      });
      await runner.fire(job, new Date(at('06:15')));
      await kept.close();
      const out = await cli(
        [
          'slots',
          'show',
          '--job',
          'payment-reminder',
          '--window',
          '2026-11-30T06:15:00Z',
          '--state-dir',
          stateDir,
        ],
        clock,
      );
      expect(out.code).toBe(0);
      expect(out.out).toContain('state        DONE');
      expect(out.out).toContain('effects: 3 done, 0 in doubt');
    } finally {
      await rm(stateDir, { recursive: true, force: true });
    }
  });

  it('runs from the bin entry (the one test that spawns a process)', () => {
    const run = spawnSync(process.execPath, ['bin/slotguard.mjs', 'slots', 'release', '--help'], {
      encoding: 'utf8',
    });
    expect(run.status).toBe(0);
    expect(run.stdout).toContain('Usage: slotguard slots release --job ID --window T [--shard N] [--force]');
  });
});

/** The job catalog of a team that installed slotguard: its own job, none of the example app's. */
const DIGEST_CATALOG = `export const jobCatalog = [
  {
    id: 'daily-digest',
    description: 'The daily digest, 07:00 Berlin time',
    schedule: { expression: 'cron(0 7 * * ? *)', timeZone: 'Europe/Berlin' },
    entry: 'src/digest-handler.ts',
    deadlineMinutes: 120,
  },
];
`;

/**
 * A team's project in a temporary directory: a package.json (without a "slotguard" field unless
 * `files` gives one) and `files`, by path. Removed after the file's tests.
 */
const projects: string[] = [];
afterAll(() => Promise.all(projects.map((dir) => rm(dir, { recursive: true, force: true }))));
async function teamProject(files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'slotguard-team-'));
  projects.push(dir);
  const all = { 'package.json': JSON.stringify({ name: 'digest-app', type: 'module' }), ...files };
  for (const [path, text] of Object.entries(all)) {
    await mkdir(dirname(join(dir, path)), { recursive: true });
    await writeFile(join(dir, path), text);
  }
  return dir;
}

/** The daily digest's window of 2026-11-29 (07:00 Berlin), DONE with two subscribers emailed. */
async function digestTableWithOneDoneWindow() {
  const table = await dynamo.freshTable('team');
  const store = await openLocalBackend({ endpoint: dynamo.endpoint, tableName: table });
  opened.push(store);
  const window = '2026-11-29T06:00:00Z';
  const claimed = await store.backend.claims.claim(
    { jobId: 'daily-digest', window },
    {
      owner: 'digest-fn/1',
      leaseMs: 60_000,
      maxAttempts: 3,
      expiresAtSeconds: Date.parse(window) / 1000 + 35 * 86_400,
      deadline: Date.parse(window) + 7_200_000,
      delivery: {},
    },
    Date.parse(window) + 1_000,
  );
  if (claimed.kind !== 'claimed') throw new Error(claimed.kind);
  const hashes = ['s1', 's2'].map((id) => store.backend.hashKey(id));
  for (const hash of hashes)
    await store.backend.ledger.reserve(claimed.claim, hash, { rerunInDoubt: false, now: Date.parse(window) });
  await store.backend.ledger.markDone(claimed.claim, hashes);
  await store.backend.claims.complete(
    claimed.claim,
    { done: 2, inDoubt: 0, failed: 0, inDoubtKeys: [], failedKeys: [], runs: 1 },
    Date.parse(window) + 5_000,
  );
  return ['--endpoint', dynamo.endpoint, '--table', table];
}

const DIGEST_RANGE = ['--from', '2026-11-28', '--to', '2026-11-30T12:00Z'];
/** Where nothing answers: a command that got as far as connecting would exit 3, not 2. */
const DEAD_ENDPOINT = ['--endpoint', 'http://127.0.0.1:9'];

describe("slotguard on a team's own job catalog, as an installed package runs it", () => {
  it("lists and shows a team's job from the catalog module --catalog names, with no example app and no local runner", async () => {
    const project = await teamProject({ 'src/catalog.mjs': DIGEST_CATALOG });
    const where = await digestTableWithOneDoneWindow();
    const installed = { cwd: project, localRuns: undefined };
    const catalog = ['--job', 'daily-digest', '--catalog', './src/catalog.mjs'];

    const listed = await cli(
      ['slots', 'list', ...catalog, ...DIGEST_RANGE, ...where, '--json'],
      undefined,
      installed,
    );
    expect(listed.code, listed.err).toBe(1);
    const parsed = JSON.parse(listed.out) as {
      job: string;
      schedule: string;
      windows: { window: string; local: string; state: string; effectCounts: { done: number } }[];
    };
    expect(parsed.job).toBe('daily-digest');
    expect(parsed.windows.map((w) => [w.window, w.local, w.state, w.effectCounts.done])).toEqual([
      ['2026-11-28T06:00:00Z', 'Sat 2026-11-28 07:00 Europe/Berlin', 'MISSED', 0],
      ['2026-11-29T06:00:00Z', 'Sun 2026-11-29 07:00 Europe/Berlin', 'DONE', 2],
      ['2026-11-30T06:00:00Z', 'Mon 2026-11-30 07:00 Europe/Berlin', 'MISSED', 0],
    ]);

    const shown = await cli(
      ['slots', 'show', ...catalog, '--window', '2026-11-29T06:00:00Z', ...where],
      undefined,
      installed,
    );
    expect(shown.code, shown.err).toBe(0);
    expect(shown.out).toContain('daily-digest 2026-11-29T06:00:00Z (Sun 2026-11-29 07:00 Europe/Berlin)');
    expect(shown.out).toContain('state        DONE');
    expect(shown.out).toContain('effects: 2 done, 0 in doubt');
  });

  it.each([
    [
      'SLOTGUARD_CATALOG',
      { 'src/catalog.mjs': DIGEST_CATALOG },
      { SLOTGUARD_CATALOG: 'src/catalog.mjs' },
      '',
    ],
    [
      'slotguard.config.json, from a subdirectory',
      { 'slotguard.config.json': '{ "catalog": "./src/catalog.mjs" }', 'src/catalog.mjs': DIGEST_CATALOG },
      {},
      'src',
    ],
    [
      'the "slotguard" field of package.json, from a subdirectory',
      {
        'package.json': JSON.stringify({ name: 'digest-app', slotguard: { catalog: './src/catalog.mjs' } }),
        'src/catalog.mjs': DIGEST_CATALOG,
      },
      {},
      'src',
    ],
  ])('finds the catalog without --catalog through %s', async (_, files, env, subdirectory) => {
    const project = await teamProject(files);
    const where = await digestTableWithOneDoneWindow();

    const listed = await cli(
      ['slots', 'list', '--job', 'daily-digest', ...DIGEST_RANGE, ...where, '--json'],
      undefined,
      { cwd: join(project, subdirectory), env, localRuns: undefined },
    );

    expect(listed.code, listed.err).toBe(1);
    const windows = (JSON.parse(listed.out) as { windows: { state: string }[] }).windows;
    expect(windows.map((w) => w.state)).toEqual(['MISSED', 'DONE', 'MISSED']);
  });

  it('takes --catalog over SLOTGUARD_CATALOG, and SLOTGUARD_CATALOG over the project’s slotguard.config.json', async () => {
    const project = await teamProject({
      'slotguard.config.json': '{ "catalog": "./config-catalog.mjs" }',
      'config-catalog.mjs': DIGEST_CATALOG,
      'env-catalog.mjs': DIGEST_CATALOG.replace("id: 'daily-digest'", "id: 'weekly-digest'"),
    });
    const host = { cwd: project, env: { SLOTGUARD_CATALOG: 'env-catalog.mjs' }, localRuns: undefined };
    const show = ['slots', 'show', '--window', '2026-11-29T06:00:00Z', ...DEAD_ENDPOINT];

    const fromEnv = await cli([...show, '--job', 'daily-digest'], undefined, host);
    expect(fromEnv.code).toBe(2);
    expect(fromEnv.err).toContain(
      'there is no job "daily-digest" in ./env-catalog.mjs (SLOTGUARD_CATALOG); the jobs are weekly-digest',
    );

    const given = await cli(
      [...show, '--job', 'daily-digest', '--catalog', 'config-catalog.mjs'],
      undefined,
      host,
    );
    expect(given.code).toBe(3); // past the catalog: the dead endpoint is what stops it
    expect(given.err).toContain('DynamoDB at http://127.0.0.1:9');
  });

  it.each([
    [
      'a catalog module that does not exist',
      {},
      ['--catalog', './dist/catalog.mjs'],
      /--catalog "\.\/dist\/catalog\.mjs": there is no such file \(\/.*\/dist\/catalog\.mjs\)/,
    ],
    [
      'a module that exports no job list',
      { 'catalog.mjs': 'export const helper = () => 1;\nexport const retries = 3;\n' },
      ['--catalog', 'catalog.mjs'],
      /\.\/catalog\.mjs \(--catalog\) exports no job list: .*its exports are helper \(function\), retries \(number\)/,
    ],
    [
      'a job id that is not in it',
      { 'catalog.mjs': DIGEST_CATALOG },
      ['--catalog', 'catalog.mjs', '--job', 'nightly-export'],
      /there is no job "nightly-export" in \.\/catalog\.mjs \(--catalog\); the jobs are daily-digest/,
    ],
    [
      'a module that exports two job lists, without #name',
      {
        'catalog.mjs': `${DIGEST_CATALOG}export const retired = [{ id: 'old', schedule: { expression: 'rate(1 day)' } }];\n`,
      },
      ['--catalog', 'catalog.mjs'],
      /exports 2 job lists \(jobCatalog, retired\); name one after #, e\.g\. --catalog '<module>#jobCatalog'/,
    ],
    [
      'a #name that is not a job list',
      { 'catalog.mjs': DIGEST_CATALOG },
      ['--catalog', 'catalog.mjs#jobs'],
      /its export "jobs" is missing, not a list of JobSpecs; its exports are jobCatalog \(job list\)/,
    ],
    [
      'a catalog that throws when loaded',
      { 'catalog.mjs': "throw new Error('DIGEST_DB_URL is not set');\n" },
      ['--catalog', 'catalog.mjs'],
      /--catalog "catalog\.mjs": loading .*catalog\.mjs failed \(Error: DIGEST_DB_URL is not set\); fix the module/,
    ],
    [
      'a job whose schedule cannot be read',
      { 'catalog.mjs': DIGEST_CATALOG.replace('cron(0 7 * * ? *)', 'cron(0 7 * *)') },
      ['--catalog', 'catalog.mjs'],
      /job daily-digest in \.\/catalog\.mjs \(--catalog\) has a schedule the CLI cannot read \(cron\(0 7 \* \*\)\)/,
    ],
    [
      'no catalog named anywhere',
      {},
      [],
      /the CLI reads job "daily-digest" from your job catalog, and none is named: give --catalog/,
    ],
    [
      'a misspelt slotguard.config.json',
      { 'slotguard.config.json': '{ "catalogue": "./catalog.mjs" }' },
      [],
      /slotguard\.config\.json in \/.*\/slotguard\.config\.json is {"catalogue":"\.\/catalog\.mjs"}; the CLI reads one field from it, "catalog"/,
    ],
  ])('exits 2 before it connects, naming the fix, for %s', async (_, files, args, message) => {
    const project = await teamProject(files);

    const out = await cli(
      [
        'slots',
        'show',
        '--job',
        'daily-digest',
        '--window',
        '2026-11-29T06:00:00Z',
        ...DEAD_ENDPOINT,
        ...args,
      ],
      undefined,
      { cwd: project, localRuns: undefined },
    );

    expect(out.code).toBe(2);
    expect(out.err).toMatch(message);
    expect(out.err).not.toContain('did not answer');
  });

  it('picks one export of several with #name', async () => {
    const project = await teamProject({
      'catalog.mjs': `${DIGEST_CATALOG}export const retired = [{ id: 'old', schedule: { expression: 'rate(1 day)' } }];\n`,
    });
    const where = await digestTableWithOneDoneWindow();

    const listed = await cli(
      [
        'slots',
        'list',
        '--job',
        'daily-digest',
        '--catalog',
        'catalog.mjs#jobCatalog',
        ...DIGEST_RANGE,
        ...where,
      ],
      undefined,
      { cwd: project, localRuns: undefined },
    );

    expect(listed.code, listed.err).toBe(1);
    expect(listed.out).toMatch(/2026-11-29T06:00:00Z\s+Sun 2026-11-29 07:00 Europe\/Berlin\s+DONE/);
  });

  it('asks for a backend option, and for --function to deliver, instead of reaching for the local runner', async () => {
    const project = await teamProject({ 'catalog.mjs': DIGEST_CATALOG });
    const installed = { cwd: project, localRuns: undefined };
    const job = ['--job', 'daily-digest', '--catalog', 'catalog.mjs'];

    const nowhere = await cli(['slots', 'list', ...job, ...DIGEST_RANGE], undefined, installed);
    expect(nowhere.code).toBe(2);
    expect(nowhere.err).toContain('name the claims backend: --table NAME (your ClaimsTable in AWS');

    const backfilled = await cli(
      ['backfill', ...job, ...DIGEST_RANGE, ...DEAD_ENDPOINT],
      undefined,
      installed,
    );
    expect(backfilled.code).toBe(2);
    expect(backfilled.err).toContain(
      "backfill delivers each window by invoking the job's deployed function: pass --function NAME",
    );
    expect(backfilled.err).toContain('Nothing was read or written.');

    const help = await cli(['backfill', '--help'], undefined, installed);
    expect(help.out).toContain('--catalog MODULE');
    expect(help.out).not.toMatch(/--state-dir|--smtp|--recipients|--invoices/);
    const repositoryHelp = await cli(['backfill', '--help']);
    expect(repositoryHelp.out).toMatch(/--state-dir DIR[\s\S]*--smtp HOST:PORT/);
  });
});

describe('slotguard postgres migrate and purge', () => {
  let server: PostgresServer;
  beforeAll(async () => {
    server = await startPostgres();
  });
  afterAll(() => server?.close());

  it('creates the schema once, does nothing the second time, and purges nothing fresh', async () => {
    const schema = server.uniqueSchemaName('cli_migrate');
    const env = { env: { DATABASE_URL: server.connectionString } };

    const first = await cli(['postgres', 'migrate', '--schema', schema], undefined, env);
    expect(first.code, first.err).toBe(0);
    expect(first.out).toMatch(new RegExp(`^migrated schema ${schema} to version \\d+\\.`));
    const tables = await server.sql<{ table_name: string }>(
      'SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name',
      [schema],
    );
    expect(tables.map((t) => t.table_name)).toEqual([
      'effects',
      'schema_version',
      'send_rates',
      'shard_slots',
      'slots',
    ]);

    const again = await cli(['postgres', 'migrate', '--schema', schema, '--json'], undefined, env);
    expect(again.code).toBe(0);
    expect(JSON.parse(again.out)).toMatchObject({ command: 'migrate', schema, applied: false });

    const purged = await cli(['postgres', 'purge', '--schema', schema, '--json'], undefined, env);
    expect(purged.code, purged.err).toBe(0);
    expect(JSON.parse(purged.out)).toEqual({ command: 'purge', schema, slots: 0, effects: 0 });
  });

  it('prints the migration without connecting, and exits 3 when the server does not answer, 2 for a bad schema', async () => {
    const dead = { env: { DATABASE_URL: 'postgres://slotguard:secret@127.0.0.1:9/slotguard' } };

    const printed = await cli(['postgres', 'migrate', '--schema', 'reports', '--print'], undefined, dead);
    expect(printed.code).toBe(0);
    expect(printed.out).toContain('CREATE TABLE IF NOT EXISTS "reports".slots');

    const unreachable = await cli(['postgres', 'migrate', '--schema', 'reports'], undefined, dead);
    expect(unreachable.code).toBe(3);
    expect(unreachable.err).toMatch(/^slotguard postgres migrate failed: .*Check DATABASE_URL/);
    expect(unreachable.err).not.toContain('secret');

    const hostile = await cli(
      ['postgres', 'migrate', '--schema', 'x"; DROP SCHEMA public; --'],
      undefined,
      dead,
    );
    expect(hostile.code).toBe(2);
    const batch = await cli(['postgres', 'purge', '--batch-size', '0'], undefined, dead);
    expect(batch.code).toBe(2);
    expect(batch.err).toContain('--batch-size is "0"; use a whole number from 1 to 100000');
  });
});
