import { spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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
import { main } from '../../cli/slotguard.js';
import { jobCatalog } from '../../functions/catalog.js';
import { localJob } from '../../functions/local-jobs.js';
import { syntheticDueInvoices } from '../../functions/payment-reminder/job.js';
import { type LocalBackend, openLocalBackend } from '../../local/local-backend.js';
import { LocalRunner } from '../../local/local-runner.js';
import { type SmtpSink, startSmtpSink } from '../../local/smtp-sink.js';
import { smtpSender } from '../../shared/effects/smtp-email-sender.js';
import { useDynamo } from '../helpers/dynalite.js';
import { ManualClock } from '../helpers/manual-clock.js';

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
const INVOICES = 3;
const job = localJob(paymentSpec, { invoicesPerWindow: INVOICES });
const at = (time: string) => Date.parse(`2026-11-30T${time}:00Z`);

/** A fresh table with the CLI options that point at it, the backend, and a runner on `clock`. */
async function world(clock: ManualClock) {
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
  });
  const where = ['--endpoint', dynamo.endpoint, '--table', table];
  return { backend, runner, where };
}

async function cli(argv: string[], clock = new ManualClock(at('07:00'))) {
  let out = '';
  let err = '';
  const code = await main(argv, {
    stdout: { write: (text: string) => (out += text) },
    stderr: { write: (text: string) => (err += text) },
    clock,
    env: {},
  });
  return { code, out, err };
}

/**
 * A DONE window with two invoices in doubt: a holder reserved them at epoch 1 and died; the
 * takeover at epoch 2 sent the third and left those two reported in doubt.
 */
async function windowWithTwoInDoubt(time: string) {
  const clock = new ManualClock(at(time) + 5_000);
  const w = await world(clock);
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
  const invoices: string[] = [];
  for await (const invoice of syntheticDueInvoices(new Date(at(time)), INVOICES))
    invoices.push(invoice.invoiceId);
  const hashes = invoices.map((id) => w.backend.backend.hashKey(id));
  await w.backend.backend.ledger.reserve(crashed.claim, hashes[0]!, {
    rerunInDoubt: false,
    now: clock.now(),
  });
  await w.backend.backend.ledger.reserve(crashed.claim, hashes[1]!, {
    rerunInDoubt: false,
    now: clock.now(),
  });
  await clock.advance(63_000);
  const report = await w.runner.fire(job, new Date(at(time)));
  expect(report).toMatchObject({ state: 'DONE', epoch: 2, inDoubt: 2, delivered: 1 });
  return { ...w, clock, slot, hashes };
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
    const { where, clock, slot, hashes } = await windowWithTwoInDoubt('06:15');
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
    expect(forced.out).toContain(
      'RUNNING at epoch 1 (holder replica-9) → RELEASED. The next delivery claims it at epoch 2',
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
    const lambda = mockClient(LambdaClient);
    afterEach(() => lambda.reset());

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
      Schedules: [
        { Name: weekly.Name, GroupName: weekly.GroupName },
        { Name: other.Name, GroupName: other.GroupName },
      ],
    });
    scheduler.on(GetScheduleCommand, { Name: weekly.Name }).resolves(weekly);
    scheduler.on(GetScheduleCommand, { Name: other.Name }).resolves(other);
  }

  it('lists the deployed schedules with the job each runs and its next fire', async () => {
    deployed();
    const out = await cli(['schedules', 'list'], new ManualClock(Date.parse('2026-11-29T12:00:00Z')));
    expect(out.code).toBe(0);
    expect(out.out).toMatch(
      /weekly-report\s+ENABLED\s+cron\(0 9 \? \* MON \*\)\s+Europe\/Moscow\s+2026-11-30T06:00:00Z\s+SlotguardweeklyreportSchedule1A2B/,
    );
    expect(out.out).toMatch(
      /-\s+DISABLED\s+rate\(1 day\)\s+UTC\s+paused\s+nightly-backup\s+default\s+function:backup|-\s+DISABLED\s+rate\(1 day\)\s+UTC\s+paused\s+nightly-backup\s+default\s+backup/,
    );
    const json = JSON.parse(
      (await cli(['schedules', 'list', '--job', 'weekly-report', '--json'])).out,
    ) as unknown[];
    expect(json).toHaveLength(1);
  });

  it('pauses a job’s schedule by job id, sending its definition back unchanged but the state', async () => {
    deployed();
    scheduler.on(UpdateScheduleCommand).resolves({ ScheduleArn: 'arn:aws:scheduler:::schedule/x' });
    const out = await cli(['schedules', 'pause', '--job', 'weekly-report']);
    expect(out.code).toBe(0);
    expect(out.out).toContain("paused job weekly-report's schedule SlotguardweeklyreportSchedule1A2B");
    expect(out.out).toContain('ENABLED → DISABLED');
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
});

describe('slotguard usage, help and an unreachable backend', () => {
  it.each([
    [
      ['slots', 'list', '--from', 'now-1d', '--to', 'now'],
      /--job is missing; the jobs are weekly-report, payment-reminder/,
    ],
    [
      ['slots', 'show', '--job', 'nightly', '--window', '2026-11-30T06:00:00Z'],
      /there is no job "nightly" in functions\/catalog.ts/,
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
    expect(run.stdout).toContain('Usage: slotguard slots release --job ID --window T [--force]');
  });
});
