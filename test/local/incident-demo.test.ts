import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type IncidentDemoOptions, runIncidentDemo } from '../../local/incident-demo.js';
import { runStart } from '../../local/start-command.js';
import { ScaledClock } from './scaled-clock.js';

let outputDir: string;
beforeAll(async () => {
  outputDir = await mkdtemp(join(tmpdir(), 'slotguard-demo-'));
});
afterAll(() => rm(outputDir, { recursive: true, force: true }));

function collector() {
  const chunks: string[] = [];
  return { out: { write: (text: string) => chunks.push(text) !== 0 }, text: () => chunks.join('') };
}

/**
 * The demo for 300 customers with `faults` (seed 42). Each fault is recovered from the work queue a
 * lease or more later (a copy that found the slot held waits at least 30 s): a 10 s lease on a
 * clock running 5 times real time.
 */
async function demoWithFaults(options: Pick<IncidentDemoOptions, 'faults' | 'shards'>) {
  const { out, text } = collector();
  const result = await runIncidentDemo({
    replicas: 3,
    recipients: 300,
    concurrency: 8,
    outputDir,
    out,
    ...options,
    seed: 42,
    // Each fault is recovered from the work queue a lease or more later (a copy that found the slot
    // held waits at least 30 s): a 10 s lease on a clock running 5 times real time. With a pause,
    // what has no word waits out Lambda's time limit (a frozen holder can send until then): a
    // minute here.
    leaseSeconds: 10,
    lambdaTimeoutSeconds: 60,
    clock: new ScaledClock(5),
  });
  return { result, text };
}

/**
 * What every demo with faults must end with: 300 customers each emailed once, nothing rejected,
 * and whatever the faults left in doubt settled (`resolved`), none left.
 */
function expectEverythingSettled(result: Awaited<ReturnType<typeof runIncidentDemo>>, extra: object = {}) {
  const { confirmed, rejected, resent } = result.resolution;
  expect(rejected).toBe(0);
  expect(result.outcome).toMatchObject({
    delivered: 300,
    duplicates: 0,
    inDoubt: 0,
    resolved: confirmed + resent,
    unfinished: 0,
    failed: 0,
    ...extra,
  });
  return { confirmed, resent };
}

describe('npm start: the incident replay, counted by the SMTP server', () => {
  it('sends each of 300 customers one email through slotguard, and 3 each without it', async () => {
    const { out, text } = collector();
    const result = await runIncidentDemo({ replicas: 3, recipients: 300, concurrency: 16, outputDir, out });

    expect(result.unguarded).toMatchObject({
      fires: 3,
      delivered: 900,
      recipientsReached: 300,
      duplicates: 600,
    });
    expect(result.guarded).toMatchObject({
      fires: 3,
      runs: 1,
      delivered: 300,
      recipientsReached: 300,
      duplicates: 0,
      inDoubt: 0,
    });
    expect(text()).toMatch(/emails delivered\s+900\s+300/);
    expect(text()).toMatch(/runs\s+3\s+1\n/);
    expect(result.outcome).toEqual({
      delivered: 300,
      duplicates: 0,
      inDoubt: 0,
      resolved: 0,
      confirmed: 0,
      rejected: 0,
      resent: 0,
      failed: 0,
      unfinished: 0,
      runs: 1,
      shards: 1,
    });
    // No --json: the output ends with the table's notes, not a JSON line.
    expect(text().trimEnd().split('\n').at(-1)).toMatch(/^Log: /);
    expect(text()).toContain('300 customers, 3 replicas: unguarded sent 900, slotguard sent 300.');
  });

  it('prints the window as slots and logs spell it (…:00Z), not as toISOString does (…:00.000Z)', async () => {
    const { out, text } = collector();
    const ownDir = await mkdtemp(join(outputDir, 'window-'));
    await runIncidentDemo({ replicas: 2, recipients: 10, concurrency: 4, outputDir: ownDir, out });

    const printed = /fire the weekly report for window (\S+), /.exec(text())?.[1];
    expect(printed).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:00Z$/);
    expect(text()).not.toContain('.000Z');
    const logged = (await readFile(join(ownDir, 'last-run.log.jsonl'), 'utf8'))
      .split('\n')
      .filter((line) => line.length > 0)
      .map((line) => (JSON.parse(line) as { window?: string }).window);
    // Claimed, stood down, completed: every line that names the window spells it as printed.
    const named = logged.filter((window) => window !== undefined);
    expect(named.length).toBeGreaterThanOrEqual(3);
    expect(new Set(named)).toEqual(new Set([printed]));
  });

  it('still delivers exactly one email per customer with duplicates, a retry, a crash and a pause injected', async () => {
    const { result, text } = await demoWithFaults({ faults: ['duplicate', 'retry', 'crash', 'pause'] });

    expect(result.faults).toHaveLength(2);
    expect(result.faults[0]).toMatch(/crashed at effect/);
    expect(result.faults[1]).toMatch(/froze at effect/);
    expect(result.guarded).toMatchObject({ delivered: 300, recipientsReached: 300, duplicates: 0 });
    // The crash and the pause left effects in doubt; the window settled every one from the SMTP
    // server's record of each message.
    expect(result.guarded.inDoubt).toBe(0);
    const { confirmed, resent } = expectEverythingSettled(result);
    expect(confirmed + resent).toBeGreaterThan(0);
    expect(result.unguarded.delivered).toBe(900);
    expect(text()).toMatch(
      new RegExp(
        `Left in doubt by the faults: ${confirmed + resent}\\. Settled from the SMTP server's record of each message .*: ` +
          `${confirmed} had gone \\(done, not sent again\\), 0 refused and ${resent} never accepted \\(sent by the window's retry\\); 0 still in doubt\\.`,
      ),
    );
  });

  it('settles what a crashed shard left in doubt from the SMTP server, inside the shard: the email it never sent is sent once', async () => {
    // Seed 42 crashes a shard's holder before a send: that email is reserved and never sent.
    const { result, text } = await demoWithFaults({ faults: ['crash'], shards: 4 });

    expect(result.faults).toHaveLength(1);
    expect(result.faults[0]).toMatch(/^shard-\d crashed at effect \d+ \(before-send\)$/);
    // The email reserved before the crash never reached the server: the shard's retry sent it.
    const { resent } = expectEverythingSettled(result, { shards: 4 });
    expect(resent).toBeGreaterThanOrEqual(1);
    expect(text()).toContain(`${resent} never accepted (sent by the window's retry); 0 still in doubt.`);
  }, 120_000);

  it('runs the slotguard side on Postgres with --backend postgres', async () => {
    const { out, text } = collector();
    const result = await runIncidentDemo({
      replicas: 3,
      recipients: 100,
      concurrency: 8,
      outputDir,
      out,
      backend: 'postgres',
      ...(process.env.DATABASE_URL ? { databaseUrl: process.env.DATABASE_URL } : {}),
    });
    expect(result.guarded).toMatchObject({ runs: 1, delivered: 100, duplicates: 0, inDoubt: 0 });
    expect(text()).toMatch(/slotguard on (embedded )?PostgreSQL/);
  });
});

/**
 * `npm start` with `argv` and `--json`, its own output directory, on a clock running 5 times real
 * time (send rate, Lambda's limit, leases, the queue's visibility alike): the exit code, the JSON
 * line, the table and stderr.
 */
async function startWithJson(command: string) {
  const argv = command.split(' ');
  const stdout = collector();
  const stderr = collector();
  const ownDir = await mkdtemp(join(outputDir, 'json-'));
  const code = await runStart([...argv, '--json', '--out', ownDir], {
    stdout: stdout.out,
    stderr: stderr.out,
    clock: new ScaledClock(5),
    env: {},
  });
  const lines = stdout.text().trimEnd().split('\n');
  const summary = JSON.parse(lines.at(-1)!) as Record<string, number>;
  return { code, summary, table: stdout.text(), stderr: stderr.text() };
}

/** The JSON line of a window in which each of `customers` got one email: none twice, none left out. */
function everyCustomerOnce(customers: number) {
  return { delivered: customers, duplicates: 0, inDoubt: 0, failed: 0, unfinished: 0 };
}

describe('npm start -- --recipients 20000 --send-rate 500 --lambda-timeout 10 --json', () => {
  it('finishes a window four Lambda runs long: every customer one email, none twice, none unfinished, in 3 runs or more', async () => {
    // The command at a tenth of its customers and send rate: the same 40 s of sending for 10-second
    // invocations, four runs' worth, on a clock running 5 times real time: the slotguard side
    // takes about 8 s, not 40.
    const { code, summary, table, stderr } = await startWithJson(
      '--recipients 2000 --send-rate 50 --lambda-timeout 10',
    );

    expect(Object.keys(summary).sort()).toEqual([
      'confirmed',
      'delivered',
      'duplicates',
      'failed',
      'inDoubt',
      'rejected',
      'resent',
      'resolved',
      'runs',
      'shards',
      'unfinished',
    ]);
    // Read from the SMTP server (delivered, duplicates) and the store (the rest).
    expect(summary).toMatchObject({ ...everyCustomerOnce(2000), shards: 1 });
    expect(summary.runs).toBeGreaterThanOrEqual(3);
    expect(code).toBe(0);
    expect(stderr).toBe('');
    // The table agrees: slotguard's runs, and the unguarded replicas stopped at the time limit with
    // a fraction of the list sent, much of it twice.
    expect(table).toMatch(new RegExp(`runs\\s+3\\s+${summary.runs}\\n`));
    expect(table).toMatch(/emails delivered\s+[\d,]+\s+2,000\n/);
    const unguarded = Number(/unguarded sent ([\d,]+),/.exec(table)?.[1]?.replace(/,/g, ''));
    expect(unguarded).toBeGreaterThan(0);
    expect(unguarded).toBeLessThan(2000);
    expect(table).toContain(`slotguard's window took ${summary.runs} runs`);
  }, 120_000);
});

describe('npm start -- --recipients 20000 --shards 8 --send-rate 2000 --lambda-timeout 10 --json', () => {
  it('splits the window into 8 shards run at once: every customer one email, none twice, none unfinished', async () => {
    // The command at a tenth of its customers and send rate: the same 10 s of sending, the rate
    // shared by 8 shards of about 250 customers each, so each shard sends for about 10 s and needs a
    // second 10-second invocation; on a clock running 5 times real time.
    const { code, summary, table, stderr } = await startWithJson(
      '--recipients 2000 --shards 8 --send-rate 200 --lambda-timeout 10',
    );

    // delivered and duplicates are read from the SMTP server; the rest from the store.
    expect(summary).toMatchObject({ ...everyCustomerOnce(2000), shards: 8 });
    // The coordinator's run, then at least one run per shard, and some shard continued.
    expect(summary.runs).toBeGreaterThan(1 + 8);
    expect(code).toBe(0);
    expect(stderr).toBe('');
    expect(table).toMatch(/shards\s+-\s+8\n/);
    expect(table).toMatch(new RegExp(`runs\\s+3\\s+${summary.runs}\\n`));
    expect(table).toMatch(/emails delivered\s+[\d,]+\s+2,000\n/);
    expect(table).toContain('the window split into 8 shards');
    expect(table).toContain("slotguard's window was split into 8 shards that ran at once");
  }, 120_000);
});

describe('npm start -- --faults crash --json', () => {
  it("settles every effect the crash left in doubt from the SMTP server's record: in doubt 0, resolved > 0, nobody twice, nobody missing", async () => {
    // The command at a tenth of its customers, on a clock running 5 times real time (the 5 s lease
    // and the redeliveries alike). Seed 3 crashes the holder before an effect's send.
    const stdout = collector();
    const stderr = collector();
    const ownDir = await mkdtemp(join(outputDir, 'crash-'));
    const code = await runStart(
      ['--faults', 'crash', '--json', '--recipients', '1240', '--seed', '3', '--out', ownDir],
      { stdout: stdout.out, stderr: stderr.out, clock: new ScaledClock(5), env: {} },
    );

    const text = stdout.text();
    const summary = JSON.parse(text.trimEnd().split('\n').at(-1)!) as Record<string, number>;
    expect(text).toMatch(/Faults \(seed 3\): replica-\d crashed at effect \d+ \(before-send\)\./);
    // Read against the SMTP server: every customer one email, none twice, none missing.
    expect(summary).toMatchObject({ delivered: 1240, duplicates: 0, unfinished: 0, failed: 0, inDoubt: 0 });
    // Settled automatically: what the server had, confirmed; what it never had (the email the
    // holder died before sending, at least), sent by the window's retry.
    expect(summary.resolved).toBeGreaterThan(0);
    expect(summary.resolved).toBe(summary.confirmed! + summary.rejected! + summary.resent!);
    expect(summary.resent).toBeGreaterThanOrEqual(1);
    expect(summary.rejected).toBe(0);
    expect(text).toMatch(new RegExp(`in doubt resolved\\s+-\\s+${summary.resolved}\\n`));
    expect(text).toMatch(/in doubt\s+-\s+0\n/);
    expect(code).toBe(0);
    expect(stderr.text()).toBe('');
  }, 120_000);
});
