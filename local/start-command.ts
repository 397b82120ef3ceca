import { parseArgs } from 'node:util';
import type { Clock } from '../shared/clock.js';
import { SlotguardError } from '../shared/errors.js';
import { MAX_SHARDS } from '../shared/slot/slot.js';
import type { LocalBackendKind } from './local-backend.js';
import type { TerminalOutput } from './local-runner.js';
import { type FaultKind, parseFaults } from './replica-faults.js';

/** `npm start -- --help`. */
export const START_HELP = `Usage: npm start -- [options]          replay the incident (the default)
       npm start -- serve [options]    run the catalog's jobs on their schedules until stopped

Replaying the incident: the weekly report fired for one window by several replicas at once, first
unguarded, then through slotguard (the local runner: the same event shape, the same handler as
deployed, each window's message on the job's work queue as on SQS), against an embedded DynamoDB
(dynalite) and a real SMTP server on loopback. Ends with the counts side by side, read from what
the SMTP server received.

serve: every job of functions/catalog.ts fires on its own schedule and time zone, as EventBridge
Scheduler would (cron, rate, at; daylight-saving nights as Scheduler runs them), by N replicas,
on the system clock, until Ctrl-C (SIGINT) or SIGTERM. One line per window: fires, runs, claimed
by, emails delivered (from the SMTP server), in doubt (from the ledger), and the effects left in
doubt that were resolved from the SMTP server's record. The embedded DynamoDB keeps
its tables in <state dir>/dynamodb, so a restart catches up the windows missed while stopped per
each job's catchUp policy; the operator CLI (npx slotguard) reads the same state.

Options:
  --replicas N        replicas firing every window (default 3)
  --recipients N      weekly report customers (default 12400)
  --invoices N        serve: payment reminders per 15-minute window (default 5)
  --concurrency N     demo: emails in flight per run (default 16)
  --send-rate R       emails per second the SMTP server is sent, through the runtime's token bucket,
                      as SES's sending rate limits a deployment (default: unlimited)
  --lambda-timeout S  Lambda's time limit in seconds, 1 to 900 (default: each job's timeoutSeconds,
                      900 for the weekly report). A run stops in time and the job's work queue
                      delivers the window again until it is finished; the table counts the runs.
                      The demo's unguarded replicas are stopped at the limit, as Lambda stops them.
  --shards N          split each slotguard window into N shards, 1 to 1000 (default 1): the
                      window's first run sends one message per shard to the job's work queue and
                      the shards run at once, each its own invocations, sharing --send-rate; the
                      last shard to end finishes the window
  --json              demo: end with one line of JSON, the slotguard side's window read from the
                      SMTP server and the ledger: {"delivered","duplicates","inDoubt","resolved",
                      "confirmed","rejected","resent","failed","unfinished","runs","shards"}.
                      resolved counts the effects left in doubt that were settled from the SMTP
                      server's record:
                      confirmed (it had the message: done), rejected or resent (it never had it:
                      sent by the window's retry). unfinished counts customers with no outcome (not
                      delivered, not in doubt, not failed; in a window not finished, those waiting
                      for a retry too)
  --backend NAME      dynamodb (default: dynalite in process) or postgres (DATABASE_URL, else an
                      embedded PostgreSQL started for the run)
  --faults LIST       faults injected on the slotguard side, comma-separated:
                        duplicate  each message's first delivery handed out twice (SQS at least once)
                        retry      the window sent again with attempt number 2
                        crash      the slot's holder dies at a random effect; its window comes back
                                   from the queue and is taken over after the lease
                        pause      the holder freezes past its lease; a redelivery takes over; it wakes fenced
                      With crash or pause the demo's lease is short. The SMTP server records each
                      message on its effect before acknowledging it (as SES's events do deployed),
                      so the window settles what the fault left in doubt: done if the server has
                      it, sent again if not, once a grace period is over: a lease, or with pause
                      Lambda's time limit (a frozen holder can send until then).
  --seed N            seed of the crash and pause points (default random, printed)
  --lease-seconds N   the slotguard side's lease (default 60; with crash or pause 5, or 30 on
                      Postgres, whose 5 s call deadline must fit in a sixth of the lease)
  --out DIR           demo: where the run's log and metrics go (default .slotguard)
  --state-dir DIR     serve: the kept state (default .slotguard)
  -h, --help          this text

Example: npm start -- --recipients 20000 --send-rate 500 --lambda-timeout 10 --json
         npm start -- --recipients 20000 --shards 8 --send-rate 2000 --lambda-timeout 10 --json

Exit code: 0 when slotguard's window ended with no duplicate, no customer unfinished and none
failed (serve: stopped cleanly), 1 otherwise, 2 on bad flags.`;

/** Flags that cannot work: the message names the flag, the value received and the fix. */
export class StartUsageError extends SlotguardError {}

/** `npm start`'s flags, checked. */
export interface StartArgs {
  readonly command: 'demo' | 'serve';
  readonly help: boolean;
  readonly backend: LocalBackendKind;
  readonly faults: readonly FaultKind[];
  /** @default random, printed */
  readonly seed?: number;
  readonly replicas: number;
  readonly recipients: number;
  readonly invoices: number;
  readonly concurrency: number;
  /** @default 60, or shorter with crash or pause (see IncidentDemoOptions.leaseSeconds) */
  readonly leaseSeconds?: number;
  /** @default unlimited */
  readonly sendRatePerSecond?: number;
  /** @default each job's timeoutSeconds */
  readonly lambdaTimeoutSeconds?: number;
  /** @default 1 (windows are not split) */
  readonly shards?: number;
  readonly json: boolean;
  readonly outputDir: string;
  readonly stateDir: string;
}

/** Reads `npm start`'s arguments; throws StartUsageError naming the flag, the value and the fix. */
export function parseStartArgs(argv: readonly string[]): StartArgs {
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({
      args: [...argv],
      allowPositionals: true,
      options: {
        replicas: { type: 'string' },
        recipients: { type: 'string' },
        invoices: { type: 'string' },
        concurrency: { type: 'string' },
        backend: { type: 'string' },
        faults: { type: 'string' },
        seed: { type: 'string' },
        'lease-seconds': { type: 'string' },
        'send-rate': { type: 'string' },
        'lambda-timeout': { type: 'string' },
        shards: { type: 'string' },
        json: { type: 'boolean' },
        out: { type: 'string' },
        'state-dir': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (error) {
    throw new StartUsageError((error as Error).message);
  }
  const values = parsed.values as Record<string, string | boolean | undefined>;
  const text = (name: string) => values[name] as string | undefined;
  const [command, ...extra] = parsed.positionals;
  if ((command !== undefined && command !== 'serve') || extra.length > 0) {
    throw new StartUsageError(
      `unknown command ${JSON.stringify(parsed.positionals.join(' '))}; the commands are: (none) for the demo, serve`,
    );
  }
  const backend = text('backend') ?? 'dynamodb';
  if (backend !== 'dynamodb' && backend !== 'postgres') {
    throw new StartUsageError(`--backend is ${JSON.stringify(backend)}; use dynamodb or postgres`);
  }
  let faults: FaultKind[];
  try {
    faults = parseFaults(text('faults'));
  } catch (error) {
    throw new StartUsageError((error as Error).message, { cause: error });
  }
  const json = values.json === true;
  if (json && command === 'serve') {
    throw new StartUsageError(
      "--json is the demo's summary line; serve runs until stopped and prints one line per window: leave --json out",
    );
  }
  const seed = optional(text('seed'), (value) => positiveInt('seed', value, 'random'));
  const leaseSeconds = optional(text('lease-seconds'), (value) => positiveInt('lease-seconds', value, 60));
  const sendRatePerSecond = optional(text('send-rate'), sendRate);
  const lambdaTimeoutSeconds = optional(text('lambda-timeout'), lambdaTimeout);
  const shards = optional(text('shards'), shardCount);
  return {
    command: command === 'serve' ? 'serve' : 'demo',
    help: values.help === true,
    backend,
    faults,
    replicas: positiveInt('replicas', text('replicas') ?? '3', 3),
    recipients: positiveInt('recipients', text('recipients') ?? '12400', 12_400),
    invoices: positiveInt('invoices', text('invoices') ?? '5', 5),
    concurrency: positiveInt('concurrency', text('concurrency') ?? '16', 16),
    json,
    outputDir: text('out') ?? '.slotguard',
    stateDir: text('state-dir') ?? '.slotguard',
    ...(seed !== undefined ? { seed } : {}),
    ...(leaseSeconds !== undefined ? { leaseSeconds } : {}),
    ...(sendRatePerSecond !== undefined ? { sendRatePerSecond } : {}),
    ...(lambdaTimeoutSeconds !== undefined ? { lambdaTimeoutSeconds } : {}),
    ...(shards !== undefined ? { shards } : {}),
  };
}

function optional<T>(value: string | undefined, read: (value: string) => T): T | undefined {
  return value === undefined ? undefined : read(value);
}

function positiveInt(name: string, value: string, fallback: number | string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isInteger(n) || n < 1) {
    throw new StartUsageError(
      `--${name} is ${JSON.stringify(value)}; give a whole number of at least 1 (default ${fallback})`,
    );
  }
  return n;
}

function sendRate(value: string): number {
  const rate = Number(value);
  if (value.trim() === '' || !Number.isFinite(rate) || rate <= 0) {
    throw new StartUsageError(
      `--send-rate is ${JSON.stringify(value)}; give emails per second, a number above 0 such as 500 or 0.5 ` +
        '(leave it out for no limit)',
    );
  }
  return rate;
}

function lambdaTimeout(value: string): number {
  const seconds = Number(value);
  if (value.trim() === '' || !Number.isInteger(seconds) || seconds < 1 || seconds > 900) {
    throw new StartUsageError(
      `--lambda-timeout is ${JSON.stringify(value)}; give whole seconds from 1 to 900, Lambda's limits, such as 10 ` +
        "(leave it out for each job's timeoutSeconds)",
    );
  }
  return seconds;
}

function shardCount(value: string): number {
  const shards = Number(value);
  if (value.trim() === '' || !Number.isInteger(shards) || shards < 1 || shards > MAX_SHARDS) {
    throw new StartUsageError(
      `--shards is ${JSON.stringify(value)}; give a whole number from 1 to ${MAX_SHARDS}, such as 8 ` +
        '(leave it out for windows that are not split)',
    );
  }
  return shards;
}

/** Where `npm start` writes, and what it waits on; tests pass collectors and a clock. */
export interface StartIo {
  readonly stdout: TerminalOutput;
  readonly stderr: { write(text: string): unknown };
  /** DATABASE_URL is read from here. @default process.env */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** @default the system clock */
  readonly clock?: Clock;
  /** serve runs until this resolves (SIGINT or SIGTERM). @default never */
  readonly untilStopped?: () => Promise<void>;
}

/**
 * `npm start`: the incident demo, or `serve`, with the flags in `argv`. Returns the exit code: 0
 * when slotguard's window ended with no duplicate, no customer unfinished and none failed (serve:
 * stopped cleanly), 1 otherwise, 2 on bad flags.
 * @example process.exit(await runStart(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr }))
 */
export async function runStart(argv: readonly string[], io: StartIo): Promise<number> {
  let args: StartArgs;
  try {
    args = parseStartArgs(argv);
  } catch (error) {
    if (!(error instanceof StartUsageError)) throw error;
    io.stderr.write(`${error.message}\n\nnpm start -- --help lists the options.\n`);
    return 2;
  }
  if (args.help) {
    io.stdout.write(`${START_HELP}\n`);
    return 0;
  }
  const databaseUrl = (io.env ?? process.env).DATABASE_URL;
  try {
    if (args.command === 'serve') {
      const { startServe } = await import('./serve.js');
      const handle = await startServe({
        stateDir: args.stateDir,
        backend: args.backend,
        ...(databaseUrl ? { databaseUrl } : {}),
        replicas: args.replicas,
        faults: args.faults,
        ...(args.seed !== undefined ? { seed: args.seed } : {}),
        ...(args.sendRatePerSecond !== undefined ? { sendRatePerSecond: args.sendRatePerSecond } : {}),
        ...(args.lambdaTimeoutSeconds !== undefined
          ? { lambdaTimeoutSeconds: args.lambdaTimeoutSeconds }
          : {}),
        ...(args.shards !== undefined ? { shards: args.shards } : {}),
        ...(io.clock ? { clock: io.clock } : {}),
        customers: args.recipients,
        invoicesPerWindow: args.invoices,
        out: io.stdout,
      });
      await (io.untilStopped ?? (() => new Promise<void>(() => {})))();
      io.stdout.write('\nStopping: waiting for the invocations under way…\n');
      await handle.stop();
      return 0;
    }
    const { runIncidentDemo } = await import('./incident-demo.js');
    const result = await runIncidentDemo({
      replicas: args.replicas,
      recipients: args.recipients,
      concurrency: args.concurrency,
      outputDir: args.outputDir,
      out: io.stdout,
      backend: args.backend,
      ...(databaseUrl ? { databaseUrl } : {}),
      faults: args.faults,
      ...(args.seed !== undefined ? { seed: args.seed } : {}),
      ...(args.leaseSeconds !== undefined ? { leaseSeconds: args.leaseSeconds } : {}),
      ...(args.sendRatePerSecond !== undefined ? { sendRatePerSecond: args.sendRatePerSecond } : {}),
      ...(args.lambdaTimeoutSeconds !== undefined ? { lambdaTimeoutSeconds: args.lambdaTimeoutSeconds } : {}),
      ...(args.shards !== undefined ? { shards: args.shards } : {}),
      json: args.json,
      ...(io.clock ? { clock: io.clock } : {}),
    });
    const { duplicates, unfinished, failed } = result.outcome;
    return duplicates === 0 && unfinished === 0 && failed === 0 ? 0 : 1;
  } catch (error) {
    if (error instanceof SlotguardError) {
      io.stderr.write(`${error.message}\n`);
      return 1;
    }
    throw error;
  }
}
