/**
 * `npm start`: replays the incident locally on embedded defaults (dynalite, a loopback SMTP server);
 * `npm start -- serve` runs the catalog's jobs on their schedules until stopped. `--help` lists
 * the flags.
 */
import { parseArgs } from 'node:util';

// Lambda runs Node 22; on this Node 20 machine the SDK's upgrade notice is noise in the demo.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
const { SlotguardError } = await import('../shared/errors.js');
const { parseFaults } = await import('./replica-faults.js');

const HELP = `Usage: npm start -- [options]          replay the incident (the default)
       npm start -- serve [options]    run the catalog's jobs on their schedules until stopped

Replaying the incident: the weekly report fired for one window by several replicas at once, first
unguarded, then through slotguard (the local runner: the same event shape, the same handler as
deployed), against an embedded DynamoDB (dynalite) and a real SMTP server on loopback. Ends with
the counts side by side, read from what the SMTP server received.

serve: every job of functions/catalog.ts fires on its own schedule and time zone, as EventBridge
Scheduler would (cron, rate, at; daylight-saving nights as Scheduler runs them), by N replicas,
on the system clock, until Ctrl-C (SIGINT) or SIGTERM. One line per window: fires, claimed by,
emails delivered (from the SMTP server), in doubt (from the ledger). The embedded DynamoDB keeps
its tables in <state dir>/dynamodb, so a restart catches up the windows missed while stopped per
each job's catchUp policy; the operator CLI (npx slotguard) reads the same state.

Options:
  --replicas N        replicas firing every window (default 3)
  --recipients N      weekly report customers (default 12400)
  --invoices N        serve: payment reminders per 15-minute window (default 5)
  --concurrency N     emails in flight per replica (default 16)
  --backend NAME      dynamodb (default: dynalite in process) or postgres (DATABASE_URL, else an
                      embedded PostgreSQL started for the run)
  --faults LIST       faults injected on the slotguard side, comma-separated:
                        duplicate  each replica's fire delivered twice (Lambda's async duplicate)
                        retry      the window delivered again with attempt number 2
                        crash      the slot's holder dies at a random effect; redelivered after its lease
                        pause      the holder freezes past its lease; a redelivery takes over; it wakes fenced
                      With crash or pause the demo's lease is short, and effects left in doubt are
                      looked up in the SMTP server's log and resolved (marked done, or cleared and
                      re-run) as docs/operations.md tells an operator to.
  --seed N            seed of the crash and pause points (default random, printed)
  --lease-seconds N   the slotguard side's lease (default 60; with crash or pause 5, or 15 on
                      Postgres, whose lease must outlast three statement timeouts)
  --out DIR           demo: where the run's log and metrics go (default .slotguard)
  --state-dir DIR     serve: the kept state (default .slotguard)
  -h, --help          this text

Exit code: 0 when slotguard delivered exactly one email per customer (serve: stopped cleanly),
1 otherwise, 2 on bad flags.`;

function fail(message: string): never {
  process.stderr.write(`${message}\n\nnpm start -- --help lists the options.\n`);
  process.exit(2);
}

function positiveInt(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) {
    fail(`--${name} is ${JSON.stringify(value)}; give a whole number of at least 1 (default ${fallback})`);
  }
  return n;
}

let parsed: ReturnType<typeof parseArgs>;
try {
  parsed = parseArgs({
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
      out: { type: 'string' },
      'state-dir': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
} catch (error) {
  fail((error as Error).message);
}
const values = parsed.values as Record<string, string | boolean | undefined>;
const text = (name: string) => values[name] as string | undefined;
if (values.help) {
  process.stdout.write(`${HELP}\n`);
  process.exit(0);
}
const [command, ...extra] = parsed.positionals;
if ((command !== undefined && command !== 'serve') || extra.length > 0) {
  fail(
    `unknown command ${JSON.stringify(parsed.positionals.join(' '))}; the commands are: (none) for the demo, serve`,
  );
}
const backend = text('backend') ?? 'dynamodb';
if (backend !== 'dynamodb' && backend !== 'postgres') {
  fail(`--backend is ${JSON.stringify(backend)}; use dynamodb or postgres`);
}
let faults: ReturnType<typeof parseFaults>;
try {
  faults = parseFaults(text('faults'));
} catch (error) {
  fail((error as Error).message);
}
const seedText = text('seed');
const seed = seedText === undefined ? undefined : positiveInt('seed', seedText, 1);
const replicas = positiveInt('replicas', text('replicas'), 3);
const recipients = positiveInt('recipients', text('recipients'), 12_400);
const leaseText = text('lease-seconds');
const leaseSeconds = leaseText === undefined ? undefined : positiveInt('lease-seconds', leaseText, 60);
const databaseUrl = process.env.DATABASE_URL;

try {
  if (command === 'serve') {
    const { startServe } = await import('./serve.js');
    const handle = await startServe({
      stateDir: text('state-dir') ?? '.slotguard',
      backend,
      ...(databaseUrl ? { databaseUrl } : {}),
      replicas,
      faults,
      ...(seed !== undefined ? { seed } : {}),
      customers: recipients,
      invoicesPerWindow: positiveInt('invoices', text('invoices'), 5),
      out: process.stdout,
    });
    await new Promise<void>((resolve) => {
      process.once('SIGINT', resolve);
      process.once('SIGTERM', resolve);
    });
    process.stdout.write('\nStopping: waiting for the windows under way…\n');
    await handle.stop();
    process.exit(0);
  }
  const { runIncidentDemo } = await import('./incident-demo.js');
  const result = await runIncidentDemo({
    replicas,
    recipients,
    concurrency: positiveInt('concurrency', text('concurrency'), 16),
    outputDir: text('out') ?? '.slotguard',
    out: process.stdout,
    backend,
    ...(databaseUrl ? { databaseUrl } : {}),
    faults,
    ...(seed !== undefined ? { seed } : {}),
    ...(leaseSeconds !== undefined ? { leaseSeconds } : {}),
  });
  const unresolved = result.resolution ? result.resolution.unresolved : (result.guarded.inDoubt ?? 0);
  const accountedFor =
    result.guarded.delivered + unresolved >= recipients && result.guarded.delivered <= recipients;
  process.exit(result.guarded.duplicates === 0 && accountedFor ? 0 : 1);
} catch (error) {
  if (error instanceof SlotguardError) {
    process.stderr.write(`${error.message}\n`);
    process.exit(1);
  }
  throw error;
}
