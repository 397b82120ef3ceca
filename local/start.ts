/**
 * `npm start`: replays the incident locally on embedded defaults (dynalite, a loopback SMTP server).
 * Flags choose replicas, recipients and concurrency; `--help` lists them.
 */
import { parseArgs } from 'node:util';

// Lambda runs Node 22; on this Node 20 machine the SDK's upgrade notice is noise in the demo.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
const { runIncidentDemo } = await import('./incident-demo.js');

const HELP = `Usage: npm start -- [options]

Replays the incident: the weekly report fired for one window by several replicas at once, first
unguarded, then through slotguard, against an embedded DynamoDB (dynalite) and a real SMTP server
on loopback. Ends with the counts side by side, read from what the SMTP server received.

Options:
  --replicas N      replicas firing the window (default 3)
  --recipients N    customers on the list (default 12400)
  --concurrency N   emails in flight per replica (default 16)
  --out DIR         where the run's log and metrics go (default .slotguard)
  -h, --help        this text

Exit code: 0 when slotguard delivered exactly one email per customer, 1 otherwise, 2 on bad flags.`;

function positiveInt(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) {
    process.stderr.write(
      `--${name} is ${JSON.stringify(value)}; give a whole number of at least 1 (default ${fallback})\n`,
    );
    process.exit(2);
  }
  return n;
}

let parsed: ReturnType<typeof parseArgs>;
try {
  parsed = parseArgs({
    options: {
      replicas: { type: 'string' },
      recipients: { type: 'string' },
      concurrency: { type: 'string' },
      out: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
} catch (error) {
  process.stderr.write(`${(error as Error).message}\n\n${HELP}\n`);
  process.exit(2);
}
const values = parsed.values as Record<string, string | boolean | undefined>;
if (values.help) {
  process.stdout.write(`${HELP}\n`);
  process.exit(0);
}
const recipients = positiveInt('recipients', values.recipients as string | undefined, 12_400);
const result = await runIncidentDemo({
  replicas: positiveInt('replicas', values.replicas as string | undefined, 3),
  recipients,
  concurrency: positiveInt('concurrency', values.concurrency as string | undefined, 16),
  outputDir: (values.out as string | undefined) ?? '.slotguard',
  out: process.stdout,
});
process.exit(result.guarded.delivered === recipients && result.guarded.duplicates === 0 ? 0 : 1);
