import { parseArgs } from 'node:util';
import { systemClock } from '../shared/clock.js';
import { ConfigurationError } from '../shared/errors.js';
import { backfill } from './backfill-command.js';
import { CliError, type CliIo, ExitCode } from './cli-support.js';
import { CommandContext, type OptionSpec, type OptionValues } from './command.js';
import { effectsRedrive, effectsResolve } from './effect-commands.js';
import { CATALOG_ENV, CONFIG_FILE } from './job-catalog.js';
import type { LocalRuns } from './local-runs.js';
import { postgresMaintenance } from './postgres-commands.js';
import { schedulesList, schedulesSetState } from './schedule-commands.js';
import { slotsList, slotsRelease, slotsShow } from './slot-commands.js';
import { watchdog } from './watchdog-command.js';

/**
 * The operator CLI, `slotguard`: see and repair slot state, backfill missed windows, pause and
 * resume deployed schedules, migrate a Postgres schema. `main` is the whole program, with the
 * process's streams injected, so tests run every command in-process; bin/slotguard.mjs calls it.
 * The jobs are the team's own: their JobSpecs come from the catalog module it names (see
 * findCatalog), the same list its CDK app builds ScheduledJobs from.
 * @example process.exitCode = await main(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr })
 */

const BACKEND_OPTIONS: Record<string, OptionSpec> = {
  endpoint: {
    type: 'string',
    value: 'URL',
    help: 'a DynamoDB API at URL (dynalite, or any DynamoDB-compatible endpoint); also DYNAMODB_ENDPOINT',
  },
  table: {
    type: 'string',
    value: 'NAME',
    help: 'the claims table (default slotguard-claims); alone: that table in AWS',
  },
  region: { type: 'string', value: 'REGION', help: 'AWS region (default AWS_REGION)' },
  backend: { type: 'string', value: 'NAME', help: 'dynamodb (default) or postgres (DATABASE_URL)' },
  schema: { type: 'string', value: 'NAME', help: 'postgres: the schema (default slotguard)' },
};
/** The schema, and how to sign in, of the Postgres maintenance commands. */
const POSTGRES_OPTIONS: Record<string, OptionSpec> = {
  schema: { type: 'string', value: 'NAME', help: 'the schema (default slotguard)' },
  iam: {
    type: 'boolean',
    help: 'sign an RDS IAM token for PGUSER at PGHOST:PGPORT instead of a password',
  },
};
const JSON_OPTION: Record<string, OptionSpec> = {
  json: { type: 'boolean', help: 'print one JSON document instead of a table' },
};
/** The job, and the catalog its JobSpec is read from. */
const JOB_OPTIONS: Record<string, OptionSpec> = {
  job: { type: 'string', value: 'ID', help: "the job's id, as in your catalog" },
  catalog: {
    type: 'string',
    value: 'MODULE',
    help: `your JobSpec[] module (else ${CATALOG_ENV}, ${CONFIG_FILE} or package.json; see --help)`,
  },
};
const WINDOW: OptionSpec = {
  type: 'string',
  value: 'T',
  help: 'the window: its scheduled time, e.g. 2026-11-30T06:00:00Z',
};
/** How backfill and effects redrive deliver a window: the deployed function (LocalRuns add this process). */
const DELIVERY_OPTIONS: Record<string, OptionSpec> = {
  function: { type: 'string', value: 'NAME', help: "invoke the job's deployed function (name or ARN)" },
};
const SHARD: OptionSpec = {
  type: 'string',
  value: 'N',
  help: "one shard of a split window, by its index (0 to the window's shards - 1)",
};
const DEADLINE: OptionSpec = {
  type: 'string',
  value: 'D',
  help: "a window's time to finish, e.g. 6h (default the job's: the earlier of its gap and 6h)",
};
const RANGE = {
  from: { type: 'string', value: 'T', help: 'from this time (inclusive)' },
  to: { type: 'string', value: 'T', help: 'to this time (exclusive)' },
  'rate-start': {
    type: 'string',
    value: 'T',
    help: 'rate() jobs: when the schedule started counting (deployed: its creation); default 1970-01-01',
  },
} satisfies Record<string, OptionSpec>;

interface Command {
  readonly path: readonly [string, string?];
  readonly summary: string;
  readonly usage: string;
  readonly description: string;
  readonly options: Record<string, OptionSpec>;
  /**
   * The LocalRuns options it also takes, when the CLI has them: `backend` for every command that
   * reads slots, `delivery` for the ones that deliver windows.
   * @default none
   */
  readonly localOptions?: readonly (keyof LocalOptionGroups)[];
  readonly run: (ctx: CommandContext) => Promise<number>;
}

/** The option groups LocalRuns add to commands. */
interface LocalOptionGroups {
  readonly backend: Readonly<Record<string, OptionSpec>>;
  readonly delivery: Readonly<Record<string, OptionSpec>>;
}

const READS_SLOTS = ['backend'] as const;
const DELIVERS = ['backend', 'delivery'] as const;

const COMMANDS: readonly Command[] = [
  {
    path: ['slots', 'list'],
    summary: 'the windows a job was due in a range, each with its slot',
    usage: 'slotguard slots list --job ID --from T --to T',
    description:
      "Lists the windows the job's schedule produced from --from to --to (its cron, rate or at, in its time\n" +
      "zone, with Scheduler's daylight-saving rules), each with its slot record: state, holder, epoch, lease\n" +
      'end, claims so far, effects done, in doubt and refused. A window that was due and has no record is\n' +
      'MISSED. A window split into shards says so in its note (SHARDED: 2 of 4 shards finished). Reads one\n' +
      'record per window (no Scan; a SHARDED window also its shards), at most 1,000 windows.\n\n' +
      'Exit code 1 when a window needs a look: missed, FAILED, STUCK, PARTIAL (effects refused for good),\n' +
      'past its deadline unfinished (SHARDED included), RUNNING with its lease ended, RELEASED, with effects in\n' +
      'doubt, or with a shard STUCK, FAILED or whose holder is gone.',
    options: { ...JOB_OPTIONS, ...RANGE, ...JSON_OPTION, ...BACKEND_OPTIONS },
    localOptions: READS_SLOTS,
    run: slotsList,
  },
  {
    path: ['slots', 'show'],
    summary: "one window: its record, deadline, checkpoint, last run's summary, effects by state",
    usage: 'slotguard slots show --job ID --window T [--shard N]',
    description:
      'Shows one slot: state (STUCK with why, RELEASED waiting for retries until when), holder, epoch, lease\n' +
      "end, deadline, checkpoint (where the next run resumes), the holder's progress, runs without progress,\n" +
      "the delivery that claimed it last (execution id, attempt, invocation, backfilled), the window's\n" +
      'summary and last error, and its effects by state: done, in doubt, under way, and refused (hash,\n' +
      'attempts, reason, next retry or "for good"). Effects are shown by their HMAC hash: addresses are\n' +
      'never stored.\n\n' +
      'A window split into shards also shows its shard count, which shards have finished, and a table of\n' +
      'each shard: state, epoch, holder, lease end, checkpoint, progress, runs without progress and its\n' +
      'effects. --shard N shows one shard in full, with the effects it wrote.\n\n' +
      'Exit code 1 when the window needs a look (see slots list).',
    options: {
      ...JOB_OPTIONS,
      window: WINDOW,
      shard: SHARD,
      'rate-start': RANGE['rate-start'],
      ...JSON_OPTION,
      ...BACKEND_OPTIONS,
    },
    localOptions: READS_SLOTS,
    run: slotsShow,
  },
  {
    path: ['slots', 'release'],
    summary: 'give a STUCK, FAILED or abandoned RUNNING slot back, fenced on its epoch',
    usage: 'slotguard slots release --job ID --window T [--shard N] [--force]',
    description:
      'Releases the slot (RUNNING, FAILED or STUCK → RELEASED, failures and runs without progress reset,\n' +
      "a fresh deadline: now plus the job's, or --deadline) with a write conditioned on the epoch just read,\n" +
      'so the next delivery claims it at epoch + 1, resumes from its checkpoint and skips every effect done.\n' +
      "Refused while the holder's lease is live unless --force, which fences the holder out: it stops at its\n" +
      'next renewal, and the effects it had reserved become in doubt. A DONE slot is not released: resolve\n' +
      'its effects with --rerun instead; a PARTIAL one is re-driven (effects redrive).\n\n' +
      'A split window is run by its shards: --shard N releases one. A RUNNING shard whose holder is gone is\n' +
      'released whenever (its message, still queued, takes it over); a STUCK or FAILED one once its window\n' +
      'has ended STUCK. Then release the window (refused while a shard is still STUCK or FAILED) and deliver\n' +
      'it: its next run splits it again, the shards that finished stand down and the released ones run.\n\n' +
      'Exit code 1 when refused; nothing is written then.',
    options: {
      ...JOB_OPTIONS,
      window: WINDOW,
      shard: SHARD,
      force: { type: 'boolean', help: "release even while the holder's lease is live (fences it)" },
      deadline: DEADLINE,
      ...JSON_OPTION,
      ...BACKEND_OPTIONS,
    },
    localOptions: READS_SLOTS,
    run: slotsRelease,
  },
  {
    path: ['effects', 'resolve'],
    summary:
      "settle effects in doubt: by the provider's word (--auto), or one: it went (--mark-done), run it again (--rerun)",
    usage:
      'slotguard effects resolve --job ID --window T --key HASH (--mark-done | --rerun)\n' +
      '       slotguard effects resolve --job ID (--window T | --from T --to T) --auto [--grace 1h]',
    description:
      'An effect in doubt was reserved by a run that died before recording it: the email may or may not\n' +
      "have gone. With the provider's word on record (SES sending events, tagged with the effect), --auto\n" +
      'settles every effect a finished window (DONE, PARTIAL, STUCK, FAILED) left in doubt:\n' +
      '  accepted (Send, Delivery, Bounce…)  marked done: no run sends it again\n' +
      '  rejected (Reject, Rendering Failure)  cleared as --rerun does: a DONE or PARTIAL window is reopened.\n' +
      '                                        Nothing delivers a finished window by itself: deliver it\n' +
      '                                        once (the printed slotguard backfill; effects redrive for a\n' +
      '                                        STUCK or FAILED one) and that run sends it, once\n' +
      '  no word, inside --grace               left in doubt: events can be late; look again after the\n' +
      '                                        time printed\n' +
      '  no word, past --grace                 left in doubt: never sent again without a word. Where the\n' +
      "                                        job's SES events are recorded, SES most likely never took\n" +
      '                                        it: decide each one with --key HASH --rerun (probably safe)\n' +
      '                                        or --mark-done; the output prints both commands\n' +
      'It prints each effect (hash, outcome, event, message id) and a total line. --from and --to take every\n' +
      'window the schedule fired in the range instead of one; windows not finished are left to their runs,\n' +
      "which settle the provider's word themselves before they finish.\n\n" +
      "Without --auto, for one --key, after checking the provider yourself (SES sending events for the hash's\n" +
      'recipient):\n' +
      '  --mark-done  it went: record it done; no run will send it again\n' +
      '  --rerun      it did not: clear the reservation (and reopen the slot, with a fresh deadline, if it\n' +
      '               is DONE or PARTIAL) so the next delivery, or slotguard backfill, sends it\n' +
      "Every write is conditioned on the slot's epoch as just read. --mark-done is refused while a run holds\n" +
      'a live lease; --rerun while a run holds the slot RUNNING at all: one whose lease ended may be frozen,\n' +
      'not dead, so release it first (slots release). A rejected effect of a window split into shards is not\n' +
      're-run.\n\n' +
      'Exit code 1 when refused, when the effect is not in doubt (done, or unknown), or, with --auto, while\n' +
      'an effect is left in doubt or was refused, or the --window is not finished.',
    options: {
      ...JOB_OPTIONS,
      window: WINDOW,
      key: { type: 'string', value: 'HASH', help: 'the effect, by the hash `slots show` lists' },
      'mark-done': { type: 'boolean', help: 'the effect happened' },
      rerun: { type: 'boolean', help: 'the effect did not happen: let the next run perform it' },
      auto: {
        type: 'boolean',
        help: "every effect in doubt of finished windows, by the provider's word on its record",
      },
      from: { ...RANGE.from, help: 'with --auto: the windows from this time (inclusive)' },
      to: { ...RANGE.to, help: 'with --auto: to this time (exclusive)' },
      grace: {
        type: 'string',
        value: 'D',
        help: "with --auto: how long the provider may stay silent before it counts: 1h (default, the construct's)",
      },
      'rate-start': RANGE['rate-start'],
      deadline: DEADLINE,
      ...JSON_OPTION,
      ...BACKEND_OPTIONS,
    },
    localOptions: READS_SLOTS,
    run: effectsResolve,
  },
  {
    path: ['effects', 'redrive'],
    summary: "send a window's refused effects again: clear them, reopen it, deliver it",
    usage: 'slotguard effects redrive --job ID --window T [--key HASH ...] [--function NAME]',
    description:
      'For a PARTIAL window (effects the provider refused for good: EffectFailed paged), a STUCK one\n' +
      '(WindowStuck), or one past its deadline. Once the cause is fixed (a verified address, a raised quota,\n' +
      'the credentials), this:\n' +
      "  1. deletes the window's refused (FAILED) effect records: every one, or the --key hashes given,\n" +
      '     each only if it is still the refusal it read\n' +
      "  2. gives the slot back RELEASED with a fresh deadline (now plus the job's, or --deadline), its runs\n" +
      '     without progress 0 and no checkpoint, whatever its state (PARTIAL, STUCK, DONE, FAILED, RELEASED)\n' +
      "  3. delivers the window again as backfill does: --function invokes the job's deployed function\n" +
      'The run skips every effect done, leaves effects in doubt in doubt, and performs the cleared ones: they\n' +
      'were refused before they were performed, so nobody gets a second email. Every write is conditioned on\n' +
      "the slot's epoch as just read and refused while a run holds the slot RUNNING, its lease live or ended\n" +
      '(one whose lease ended may be frozen, not dead: release it first with slots release).\n\n' +
      'Exit code 1 when refused (nothing written), when a --key is not a refused effect (nothing written), or\n' +
      'when the window was not delivered.',
    options: {
      ...JOB_OPTIONS,
      window: WINDOW,
      key: {
        type: 'string',
        value: 'HASH',
        multiple: true,
        help: 'only this refused effect, by the hash `slots show` lists (repeat for more); default all',
      },
      deadline: DEADLINE,
      ...DELIVERY_OPTIONS,
      ...JSON_OPTION,
      ...BACKEND_OPTIONS,
    },
    localOptions: DELIVERS,
    run: effectsRedrive,
  },
  {
    path: ['watchdog'],
    summary: "the watchdog's report: windows missing, incomplete or partial over a lookback",
    usage: 'slotguard watchdog --job ID [--lookback 48h] [--grace 15m] [--deadline D] [--json]',
    description:
      "The audit the deployed watchdog runs every 15 minutes, printed. Lists the windows the job's schedule\n" +
      'produced over the lookback, reads each slot record, and judges it:\n' +
      '  OK          DONE\n' +
      '  PARTIAL     finished with effects refused for good (EffectFailed pages for these)\n' +
      '  MISSING     no record, and its scheduled time plus the grace has passed (WindowMissing)\n' +
      "  INCOMPLETE  STUCK or FAILED, or not finished past its deadline (the record's) (WindowIncomplete)\n" +
      '  PENDING     not due to be judged yet\n' +
      "The deadline is the job's: the earlier of the gap to its next window and 6 hours. rate() jobs count\n" +
      "from --rate-start, as the schedule's StartDate.\n\n" +
      'Exit code 1 when a window is missing or incomplete: when the watchdog pages.',
    options: {
      ...JOB_OPTIONS,
      lookback: {
        type: 'string',
        value: 'D',
        help: 'how far back: 48h (default), 7d … at most 34 days (the records are kept 35)',
      },
      grace: { type: 'string', value: 'D', help: 'how long a window may have no record: 15m (default)' },
      deadline: DEADLINE,
      'rate-start': RANGE['rate-start'],
      ...JSON_OPTION,
      ...BACKEND_OPTIONS,
    },
    localOptions: READS_SLOTS,
    run: watchdog,
  },
  {
    path: ['backfill'],
    summary: 'run the windows of a range that never ran, each at its own scheduled time',
    usage:
      'slotguard backfill --job ID --from T --to T [--catch-up MODE] [--max-lateness MIN] [--function NAME]',
    description:
      "Runs the windows of the range that were due and have no slot record, as the job's catch-up policy\n" +
      'says (skip, once: the latest, all; within its maximum lateness), and delivers again the ones left\n' +
      'unfinished (RELEASED, or RUNNING under a lease that ended). Each run carries its original scheduled\n' +
      'time and backfilled: true (recorded on the slot). Windows already DONE, FAILED or running stand, and\n' +
      'so do PARTIAL and STUCK ones: re-drive those (effects redrive).\n\n' +
      "--function invokes the job's deployed function asynchronously (InvocationType Event), one invoke per\n" +
      'window, as Scheduler does.\n\n' +
      'Exit code 1 when a window was left out by the policy or did not complete.',
    options: {
      ...JOB_OPTIONS,
      from: RANGE.from,
      to: RANGE.to,
      'rate-start': RANGE['rate-start'],
      'catch-up': { type: 'string', value: 'MODE', help: "skip, once or all, instead of the job's policy" },
      'max-lateness': { type: 'string', value: 'MIN', help: "minutes, or none, instead of the job's policy" },
      'dry-run': { type: 'boolean', help: 'show what would run, run nothing' },
      ...DELIVERY_OPTIONS,
      ...JSON_OPTION,
      ...BACKEND_OPTIONS,
    },
    localOptions: DELIVERS,
    run: backfill,
  },
  {
    path: ['schedules', 'list'],
    summary: "the deployed EventBridge Scheduler schedules, with each one's job and next fire",
    usage: 'slotguard schedules list [--job ID] [--group NAME]',
    description:
      "Lists the account's schedules (ListSchedules, then GetSchedule for each: the job id is in the\n" +
      'target input), with state, expression, time zone, next fire and target function.\n\nExit code 1 when --job names a job no schedule runs.',
    options: {
      job: { type: 'string', value: 'ID', help: 'only the schedule of this job' },
      group: { type: 'string', value: 'NAME', help: 'only this schedule group' },
      region: BACKEND_OPTIONS.region!,
      ...JSON_OPTION,
    },
    run: schedulesList,
  },
  {
    path: ['schedules', 'pause'],
    summary: 'stop a deployed schedule from firing (DISABLED)',
    usage: 'slotguard schedules pause (--job ID | --name NAME [--group NAME])',
    description:
      'Sets the schedule DISABLED (UpdateSchedule with its definition unchanged). Windows due while it is\n' +
      'paused are not fired and are not caught up by themselves: backfill them after resuming.',
    options: {
      job: { type: 'string', value: 'ID', help: 'the schedule that runs this job' },
      name: { type: 'string', value: 'NAME', help: 'the schedule, by name' },
      group: { type: 'string', value: 'NAME', help: 'its group (default: default)' },
      region: BACKEND_OPTIONS.region!,
      ...JSON_OPTION,
    },
    run: (ctx) => schedulesSetState(ctx, 'DISABLED'),
  },
  {
    path: ['schedules', 'resume'],
    summary: 'let a paused schedule fire again (ENABLED)',
    usage: 'slotguard schedules resume (--job ID | --name NAME [--group NAME])',
    description:
      'Sets the schedule ENABLED. The windows missed while it was paused stay missed: backfill them.',
    options: {
      job: { type: 'string', value: 'ID', help: 'the schedule that runs this job' },
      name: { type: 'string', value: 'NAME', help: 'the schedule, by name' },
      group: { type: 'string', value: 'NAME', help: 'its group (default: default)' },
      region: BACKEND_OPTIONS.region!,
      ...JSON_OPTION,
    },
    run: (ctx) => schedulesSetState(ctx, 'ENABLED'),
  },
  {
    path: ['postgres', 'migrate'],
    summary: "create slotguard's tables in a Postgres schema, or do nothing if they are there",
    usage: 'slotguard postgres migrate [--schema NAME] [--print] [--iam]',
    description:
      "Creates the Postgres backend's tables in the schema, in one transaction, or does nothing if they are\n" +
      'there: idempotent, and safe to run from several deploy steps at once. The runtime never creates\n' +
      'tables: run this once per schema before the first deploy that uses it, and after each slotguard\n' +
      'upgrade. --print prints the SQL for a DBA to review or run by hand, and connects to nothing.\n\n' +
      'The server is DATABASE_URL, else the PG* variables (PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSWORD,\n' +
      'PGSSLMODE). Needs the pg package next to slotguard (npm install pg).\n\n' +
      'Exit code 3 when the server cannot be reached or refuses the statements.',
    options: {
      schema: POSTGRES_OPTIONS.schema!,
      print: { type: 'boolean', help: 'print the SQL instead of running it' },
      iam: POSTGRES_OPTIONS.iam!,
      ...JSON_OPTION,
    },
    run: (ctx) => postgresMaintenance(ctx, 'migrate'),
  },
  {
    path: ['postgres', 'purge'],
    summary: 'delete Postgres slot and effect rows past their retention (run daily)',
    usage: 'slotguard postgres purge [--schema NAME] [--batch-size N] [--iam]',
    description:
      'Deletes the slot and effect rows whose retention has passed (the window plus retentionDays, 35 by\n' +
      'default), a batch at a time so that no statement holds many locks. Postgres has no TTL: run it daily\n' +
      '(a cron job, a scheduled task). Safe while jobs run: the runtime refuses windows older than the\n' +
      'retention minus a day. The server is found as for migrate; needs the pg package.\n\n' +
      'Exit code 3 when the server cannot be reached or refuses the statements.',
    options: {
      schema: POSTGRES_OPTIONS.schema!,
      'batch-size': { type: 'string', value: 'N', help: 'rows per statement, 1 to 100000 (default 5000)' },
      iam: POSTGRES_OPTIONS.iam!,
      ...JSON_OPTION,
    },
    run: (ctx) => postgresMaintenance(ctx, 'purge'),
  },
];

const EXIT_CODES =
  'Exit codes:\n' +
  '  0  done, nothing wrong found\n' +
  '  1  refused (a live lease, a stale epoch, a DONE slot) or problems found (missed, stuck or partial windows,\n' +
  '     effects in doubt)\n' +
  '  2  bad usage: a missing or malformed option, an unknown job or command; nothing was read or written\n' +
  '  3  the backend or AWS could not be reached or refused the credentials; nothing was written\n' +
  '  4  an unexpected error (a bug): the message and stack are on stderr';

const TIMES =
  'Times: an instant with its zone (2026-11-30T06:00:00Z, 2026-11-30T09:00+03:00), a UTC date (2026-11-30),\n' +
  'or now, now-2h, now-7d, now+15m. A time without a zone is refused. Durations (D): 90s, 15m, 48h, 7d.';

const CATALOG =
  'Which job (every slots, effects, backfill and watchdog command): --job ID, from your job catalog: the\n' +
  'module exporting the JobSpec[] your CDK app builds ScheduledJobs from (its default export or one named\n' +
  `export; MODULE#name picks one). The first of: --catalog MODULE, ${CATALOG_ENV}, { "catalog": MODULE }\n` +
  `in your project's ${CONFIG_FILE}, or its package.json's "slotguard" field. With none, against a\n` +
  "table in AWS (--table alone): from the job's deployed schedules. Plain Node loads .js and .mjs: for a\n" +
  '.ts catalog give its compiled .js, or use a Node that strips types (22.18+, 23.6+).';

function overview(localRuns: LocalRuns | undefined): string {
  const width = Math.max(...COMMANDS.map((c) => c.path.join(' ').length));
  return [
    'Usage: slotguard <command> [options]    (npx slotguard …; slotguard <command> --help for its options)',
    '',
    'Sees and repairs slotguard state: "did this window run, once, and who got what". docs/operations.md is',
    'the runbook.',
    '',
    'Commands:',
    ...COMMANDS.map((c) => `  ${c.path.join(' ').padEnd(width)}  ${c.summary}`),
    '',
    CATALOG,
    '',
    'Where the slots are (every slots, effects, backfill and watchdog command):',
    ...optionLines({ ...BACKEND_OPTIONS, ...localRuns?.backendOptions }),
    ...(localRuns?.defaultBackendHelp ?? ['  One of --table, --endpoint or --backend postgres is required.']),
    '',
    TIMES,
    '',
    EXIT_CODES,
  ].join('\n');
}

/** The command's options, with the LocalRuns groups it takes when the CLI has them. */
function optionsOf(command: Command, localRuns: LocalRuns | undefined): Record<string, OptionSpec> {
  if (!localRuns) return command.options;
  const groups: LocalOptionGroups = {
    backend: localRuns.backendOptions,
    delivery: localRuns.deliveryOptions,
  };
  return Object.assign({}, command.options, ...(command.localOptions ?? []).map((group) => groups[group]));
}

function commandHelp(command: Command, localRuns: LocalRuns | undefined): string {
  const delivers = localRuns && command.localOptions?.includes('delivery');
  return [
    `Usage: ${command.usage}`,
    '',
    command.description,
    ...(delivers ? ['', localRuns.deliveryHelp] : []),
    '',
    'Options:',
    ...optionLines({ ...optionsOf(command, localRuns), help: { type: 'boolean', help: 'this text' } }),
    '',
    TIMES,
    '',
    EXIT_CODES,
  ].join('\n');
}

function optionLines(options: Record<string, OptionSpec>): string[] {
  const entries = Object.entries(options).map(([name, spec]) => [
    `${name === 'help' ? '-h, ' : ''}--${name}${spec.value ? ` ${spec.value}` : ''}`,
    spec.help,
  ]);
  const width = Math.max(...entries.map(([flag]) => flag!.length));
  return entries.map(([flag, help]) => `  ${flag!.padEnd(width)}  ${help}`);
}

/**
 * Runs one `slotguard` command line and returns its exit code. Never throws: every failure is a
 * message on stderr and a code (see ExitCode).
 */
export async function main(argv: readonly string[], io: CliIo): Promise<number> {
  const words = argv.filter((arg) => !arg.startsWith('-'));
  const wantsHelp = argv.includes('--help') || argv.includes('-h') || words[0] === 'help';
  const command = findCommand(words[0] === 'help' ? words.slice(1) : words);
  if (!command) {
    if (wantsHelp || argv.length === 0) {
      const group = COMMANDS.filter(
        (c) => c.path[0] === words[0] || (words[0] === 'help' && c.path[0] === words[1]),
      );
      io.stdout.write(`${group.length > 0 ? groupHelp(group) : overview(io.localRuns)}\n`);
      return argv.length === 0 ? ExitCode.Usage : ExitCode.Ok;
    }
    const known = COMMANDS.map((c) => c.path.join(' ')).join(', ');
    io.stderr.write(
      `unknown command ${JSON.stringify(words.join(' '))}; the commands are: ${known}. slotguard --help lists them.\n`,
    );
    return ExitCode.Usage;
  }
  if (wantsHelp) {
    io.stdout.write(`${commandHelp(command, io.localRuns)}\n`);
    return ExitCode.Ok;
  }
  let values: OptionValues;
  try {
    const options = Object.fromEntries(
      Object.entries(optionsOf(command, io.localRuns)).map(([name, spec]) => [
        name,
        { type: spec.type, ...(spec.multiple ? { multiple: true } : {}) },
      ]),
    );
    const parsed = parseArgs({ args: [...argv], options, allowPositionals: true, strict: true });
    const extra = parsed.positionals.slice(command.path.filter(Boolean).length);
    if (extra.length > 0) throw new TypeError(`unexpected argument ${JSON.stringify(extra[0])}`);
    values = parsed.values as OptionValues;
  } catch (error) {
    io.stderr.write(
      `${(error as Error).message}\n\nslotguard ${command.path.join(' ')} --help lists its options.\n`,
    );
    return ExitCode.Usage;
  }
  const clock = io.clock ?? systemClock;
  const ctx = new CommandContext(io, values, clock.now());
  try {
    return await command.run(ctx);
  } catch (error) {
    return report(error, io, command);
  } finally {
    await ctx.close().catch(() => {});
  }
}

function findCommand(words: readonly string[]): Command | undefined {
  return COMMANDS.find((c) => c.path[0] === words[0] && (c.path[1] === undefined || c.path[1] === words[1]));
}

function groupHelp(group: readonly Command[]): string {
  return group
    .map((c) => `${c.usage}\n  ${c.summary}`)
    .join('\n\n')
    .concat('\n\nAdd --help to a command for its options.');
}

function report(error: unknown, io: CliIo, command: Command): number {
  if (error instanceof CliError) {
    io.stderr.write(`${error.message}\n`);
    if (error.exitCode === ExitCode.Usage)
      io.stderr.write(`slotguard ${command.path.join(' ')} --help lists its options.\n`);
    return error.exitCode;
  }
  if (error instanceof ConfigurationError) {
    io.stderr.write(`${error.message}\n`);
    return ExitCode.Usage;
  }
  io.stderr.write(
    `slotguard ${command.path.join(' ')} failed unexpectedly; this is a bug, please report it with this output:\n` +
      `${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  return ExitCode.Unexpected;
}
