import { randomUUID } from 'node:crypto';
import { InvokeCommand, LambdaClient, LambdaServiceException } from '@aws-sdk/client-lambda';
import { findLocalJob, LOCAL_JOB_DEFAULTS } from '../functions/local-jobs.js';
import { LocalRunner, type WindowReport } from '../local/local-runner.js';
import { type SmtpSink, startSmtpSink } from '../local/smtp-sink.js';
import { systemClock } from '../shared/clock.js';
import { smtpSender } from '../shared/effects/smtp-email-sender.js';
import { type CatchUpMode, JOB_DEFAULTS } from '../shared/job/job-spec.js';
import type { SlotBackend } from '../shared/job/run-slot.js';
import type { SchedulerEvent } from '../shared/job/scheduler-event.js';
import {
  type CatchUpSkipReason,
  describeCatchUpPolicy,
  planCatchUp,
  resolveCatchUpPolicy,
} from '../shared/schedule/catch-up.js';
import { SlotState } from '../shared/slot/ports.js';
import { windowOf } from '../shared/slot/slot.js';
import { CliError, count, ExitCode, renderTable, usageError } from './cli-support.js';
import type { CommandContext } from './command.js';
import { MAX_LISTED_WINDOWS } from './slot-commands.js';

const DAY_MS = 86_400_000;

/** Why a window in the range is, or is not, run. */
type BackfillAction =
  | { readonly kind: 'run'; readonly why: 'missed' | 'unfinished' | 'stuck' }
  | { readonly kind: 'skip'; readonly why: CatchUpSkipReason | 'too-old-to-claim' };

interface BackfillRow {
  readonly window: Date;
  readonly action: BackfillAction;
  result?: string;
  report?: WindowReport;
  ok?: boolean;
}

/**
 * `backfill`: runs the windows of [from, to) that never ran (no slot record), per the job's
 * catch-up policy (or the one given), and delivers again the ones left unfinished (RELEASED, or
 * RUNNING under a lease that ended). Each run carries its original scheduled time and
 * `backfilled: true`. Locally the handler runs in this process; with --function the deployed
 * function is invoked asynchronously, as Scheduler does.
 */
export async function backfill(ctx: CommandContext): Promise<number> {
  const { spec, schedule } = ctx.job();
  const from = ctx.time('from');
  const to = ctx.time('to');
  if (to <= from) throw usageError(`--to (${windowOf(to)}) must be after --from (${windowOf(from)})`);
  const policy = resolveCatchUpPolicy(
    {
      mode:
        (ctx.text('catch-up') as CatchUpMode | undefined) ?? spec.catchUp?.mode ?? JOB_DEFAULTS.catchUp.mode,
      maxLatenessMinutes:
        lateness(ctx.text('max-lateness')) ??
        spec.catchUp?.maxLatenessMinutes ??
        JOB_DEFAULTS.catchUp.maxLatenessMinutes,
    },
    spec.id,
  );
  const functionName = ctx.text('function');
  const dryRun = ctx.flag('dry-run');
  // Only windows that are due: a window not yet reached is the schedule's to fire.
  const windows = schedule.firesBetween(from, Math.min(to, ctx.now + 1), MAX_LISTED_WINDOWS + 1);
  if (windows.length > MAX_LISTED_WINDOWS) {
    throw usageError(
      `${spec.id} fires more than ${MAX_LISTED_WINDOWS} times in that range; narrow --from and --to`,
    );
  }
  const inAws = ctx.text('table') !== undefined && !ctx.text('endpoint') && !ctx.env.DYNAMODB_ENDPOINT;
  if (inAws && !functionName && !dryRun) {
    throw usageError(
      `table ${ctx.text('table')} is in AWS: backfill there invokes the deployed function; pass --function NAME ` +
        "(the schedule's target, as `slotguard schedules list` shows it), or --dry-run to see what would run",
    );
  }
  const backend = await ctx.backend(spec.id);
  const retentionDays = JOB_DEFAULTS.retentionDays;
  const claimable = ctx.now - (retentionDays - 1) * DAY_MS;
  const rows: BackfillRow[] = [];
  const missed: Date[] = [];
  for (const window of windows) {
    const record = await backend.slots.claims.read({ jobId: spec.id, window: windowOf(window) });
    if (!record) {
      if (window.getTime() < claimable)
        rows.push({ window, action: { kind: 'skip', why: 'too-old-to-claim' } });
      else missed.push(window);
    } else if (record.state === SlotState.Released) {
      rows.push({ window, action: { kind: 'run', why: 'unfinished' } });
    } else if (record.state === SlotState.Running && record.leaseEndsAt < ctx.now) {
      rows.push({ window, action: { kind: 'run', why: 'stuck' } });
    }
  }
  const plan = planCatchUp(missed, policy, ctx.now);
  for (const window of plan.run) rows.push({ window, action: { kind: 'run', why: 'missed' } });
  for (const { window, reason } of plan.skipped) rows.push({ window, action: { kind: 'skip', why: reason } });
  rows.sort((a, b) => a.window.getTime() - b.window.getTime());
  const toRun = rows.filter((row) => row.action.kind === 'run');

  if (!dryRun && toRun.length > 0) {
    if (functionName) await invokeDeployed(ctx, spec.id, functionName, toRun);
    else await runLocally(ctx, spec.id, backend.slots, backend.serveSmtp, toRun);
  }

  const skipped = rows.filter((row) => row.action.kind === 'skip');
  const failed = toRun.filter((row) => row.ok === false);
  const ok = dryRun || (failed.length === 0 && skipped.length === 0);
  if (ctx.json) {
    ctx.print(
      JSON.stringify(
        {
          job: spec.id,
          from: windowOf(from),
          to: windowOf(to),
          policy,
          mode: dryRun ? 'dry-run' : functionName ? 'invoke' : 'in-process',
          windows: rows.map((row) => ({
            window: windowOf(row.window),
            action: row.action.kind,
            why: row.action.why,
            result: row.result ?? null,
            ...(row.report
              ? {
                  state: row.report.state,
                  epoch: row.report.epoch,
                  done: row.report.done,
                  inDoubt: row.report.inDoubt,
                  delivered: row.report.delivered ?? null,
                }
              : {}),
          })),
        },
        null,
        2,
      ),
    );
    return ok ? ExitCode.Ok : ExitCode.Problem;
  }
  ctx.print(
    `${spec.id} from ${windowOf(from)} to ${windowOf(to)}: ${windows.length} windows due, catch-up policy ${describeCatchUpPolicy(policy)}` +
      `${ctx.text('catch-up') || ctx.text('max-lateness') ? ' (given)' : " (the job's)"}\n(${backend.description})\n`,
  );
  if (rows.length === 0) {
    ctx.print('Nothing to backfill: every window that was due has run or is running.');
    return ExitCode.Ok;
  }
  ctx.print(
    renderTable(
      ['window (UTC)', 'found', 'action', 'result'],
      rows.map((row) => [
        windowOf(row.window),
        row.action.kind === 'run' ? row.action.why : 'missed',
        row.action.kind === 'run'
          ? dryRun
            ? 'would run'
            : functionName
              ? 'invoked'
              : 'ran'
          : `not run: ${explain(row.action.why)}`,
        row.result ?? '-',
      ]),
    ),
  );
  if (skipped.some((row) => row.action.why !== 'too-old-to-claim')) {
    ctx.print(
      `\nTo run the windows the policy leaves out: add --catch-up all (and --max-lateness none for old ones).`,
    );
  }
  if (skipped.some((row) => row.action.why === 'too-old-to-claim')) {
    ctx.print(
      `Windows older than the ${retentionDays}-day retention minus a day cannot be claimed safely and are never run.`,
    );
  }
  if (functionName && toRun.length > 0 && !dryRun) {
    ctx.print(
      `\nThe function runs them asynchronously; see how they went: slotguard slots list --job ${spec.id} --from ${windowOf(from)} --to ${windowOf(to)}`,
    );
  }
  return ok ? ExitCode.Ok : ExitCode.Problem;
}

function lateness(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  if (value === 'none') return Number.POSITIVE_INFINITY;
  const minutes = Number(value);
  if (!Number.isFinite(minutes) || minutes <= 0) {
    throw usageError(`--max-lateness is ${JSON.stringify(value)}; give minutes (e.g. 1440) or none`);
  }
  return minutes;
}

function explain(why: CatchUpSkipReason | 'too-old-to-claim'): string {
  switch (why) {
    case 'policy-skip':
      return 'policy skip';
    case 'superseded':
      return 'policy once: a later window runs';
    case 'too-late':
      return 'past max lateness';
    case 'too-old-to-claim':
      return 'older than retention';
    default:
      return why satisfies never;
  }
}

/** As Scheduler does: an asynchronous invoke (InvocationType Event) per window, oldest first. */
async function invokeDeployed(
  ctx: CommandContext,
  jobId: string,
  functionName: string,
  rows: BackfillRow[],
): Promise<void> {
  const region = ctx.text('region');
  const lambda = new LambdaClient({ ...(region ? { region } : {}), maxAttempts: 3 });
  try {
    for (const row of rows) {
      const event: SchedulerEvent = {
        jobId,
        scheduledTime: windowOf(row.window),
        executionId: `backfill-${randomUUID()}`,
        attemptNumber: '1',
        backfilled: true,
      };
      try {
        const response = await lambda.send(
          new InvokeCommand({
            FunctionName: functionName,
            InvocationType: 'Event',
            Payload: new TextEncoder().encode(JSON.stringify(event)),
          }),
        );
        row.ok = response.StatusCode === 202;
        row.result = row.ok ? 'queued (202)' : `not queued (status ${response.StatusCode})`;
      } catch (error) {
        if (error instanceof LambdaServiceException && rows.indexOf(row) === 0) {
          throw new CliError(
            ExitCode.Unreachable,
            `invoking ${functionName} failed (${error.name}: ${error.message}); check --function, --region and ` +
              'lambda:InvokeFunction on it. Nothing was invoked.',
            { cause: error },
          );
        }
        row.ok = false;
        row.result = `failed: ${error instanceof Error ? error.message : String(error)}`;
      }
    }
  } finally {
    lambda.destroy();
  }
}

/**
 * In this process, through the same handler as deployed (the local runner, one replica, no faults),
 * one window at a time, oldest first. Mail goes to --smtp, else the running serve's server, else a
 * server started for the backfill, whose counts are shown.
 */
async function runLocally(
  ctx: CommandContext,
  jobId: string,
  slots: SlotBackend,
  serveSmtp: { host: string; port: number } | undefined,
  rows: BackfillRow[],
): Promise<void> {
  const job = findLocalJob(jobId, {
    customers: positive(ctx.text('recipients'), 'recipients') ?? LOCAL_JOB_DEFAULTS.customers,
    invoicesPerWindow: positive(ctx.text('invoices'), 'invoices') ?? LOCAL_JOB_DEFAULTS.invoicesPerWindow,
  });
  const given = ctx.text('smtp');
  let target = serveSmtp;
  if (given) {
    const match = /^([^:]+):(\d+)$/.exec(given);
    if (!match) throw usageError(`--smtp is ${JSON.stringify(given)}; give host:port, e.g. 127.0.0.1:2525`);
    target = { host: match[1]!, port: Number(match[2]) };
  }
  let sink: SmtpSink | undefined;
  if (!target) {
    sink = await startSmtpSink();
    target = { host: sink.host, port: sink.port };
    ctx.warn(
      `mail goes to an SMTP server started for this backfill on ${sink.host}:${sink.port}; its counts are shown`,
    );
  }
  const mail = target;
  try {
    const runner = new LocalRunner({
      jobs: [job],
      backend: slots,
      senderFor: (from) => smtpSender({ host: mail.host, port: mail.port, from, maxConnections: 8 }),
      ...(sink ? { sink } : {}),
      replicas: 1,
      clock: ctx.io.clock ?? systemClock,
    });
    // One window at a time: in the order the schedule would have run them.
    for (const row of rows) {
      const report = await runner.fire(job, row.window, { backfilled: true });
      row.report = report;
      row.ok = report.state === SlotState.Done;
      row.result =
        `${report.state} epoch ${report.epoch}; effects ${count(report.done)} done, ${count(report.inDoubt)} in doubt` +
        (report.delivered !== undefined ? `; ${count(report.delivered)} emails delivered` : '');
    }
  } finally {
    await sink?.close();
  }
}

function positive(value: string | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1)
    throw usageError(`--${name} is ${JSON.stringify(value)}; give a whole number of at least 1`);
  return n;
}
