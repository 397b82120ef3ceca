import { type CatchUpMode, JOB_DEFAULTS } from '../shared/job/job-spec.js';
import {
  type CatchUpSkipReason,
  describeCatchUpPolicy,
  planCatchUp,
  resolveCatchUpPolicy,
} from '../shared/schedule/catch-up.js';
import { SlotState } from '../shared/slot/ports.js';
import { windowOf } from '../shared/slot/slot.js';
import { ExitCode, renderTable, usageError } from './cli-support.js';
import type { CommandContext } from './command.js';
import { MAX_LISTED_WINDOWS } from './slot-commands.js';
import { assertDeliverable, deliverWindows, type WindowDelivery } from './window-delivery.js';

const DAY_MS = 86_400_000;

/** Why a window in the range is, or is not, run. */
type BackfillAction =
  | { readonly kind: 'run'; readonly why: 'missed' | 'unfinished' | 'lease ended' }
  | { readonly kind: 'skip'; readonly why: CatchUpSkipReason | 'too-old-to-claim' };

interface BackfillRow extends WindowDelivery {
  readonly action: BackfillAction;
}

/**
 * `backfill`: runs the windows of [from, to) that never ran (no slot record), per the job's
 * catch-up policy (or the one given), and delivers again the ones left unfinished (RELEASED, or
 * RUNNING under a lease that ended). Each run carries its original scheduled time and
 * `backfilled: true`. Locally the handler runs in this process; with --function the deployed
 * function is invoked asynchronously, as Scheduler does.
 */
export async function backfill(ctx: CommandContext): Promise<number> {
  const { spec, schedule } = await ctx.job();
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
  if (!dryRun) assertDeliverable(ctx, 'backfill', '--dry-run to see what would run');
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
      rows.push({ window, action: { kind: 'run', why: 'lease ended' } });
    }
  }
  const plan = planCatchUp(missed, policy, ctx.now);
  for (const window of plan.run) rows.push({ window, action: { kind: 'run', why: 'missed' } });
  for (const { window, reason } of plan.skipped) rows.push({ window, action: { kind: 'skip', why: reason } });
  rows.sort((a, b) => a.window.getTime() - b.window.getTime());
  const toRun = rows.filter((row) => row.action.kind === 'run');

  if (!dryRun && toRun.length > 0) await deliverWindows(ctx, 'backfill', spec.id, backend, toRun);

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
