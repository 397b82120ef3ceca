import { AuditInputError, auditWindows, duration, planAudit } from '../shared/watchdog/window-audit.js';
import { ExitCode, iso, renderTable, usageError } from './cli-support.js';
import type { CommandContext } from './command.js';

/** What the watchdog's schedule sends by default, and so what the CLI audits by default. */
const DEFAULT_LOOKBACK_MS = 48 * 3_600_000;
const DEFAULT_GRACE_MS = 15 * 60_000;

/** The CLI option each audit input comes from, for the usage error that refuses one. */
const OPTION_OF_INPUT = {
  jobId: '--job',
  schedule: '--job',
  rateStart: '--rate-start',
  notBefore: '--lookback',
  deadline: '--deadline',
  grace: '--grace',
  lookback: '--lookback',
} as const;

/**
 * `watchdog`: the deployed watchdog's audit of one job (shared/watchdog/window-audit.ts), printed:
 * each window the schedule produced over the lookback with its verdict, and exit code 1 when one is
 * missing or incomplete, as WindowMissing and WindowIncomplete would page.
 */
export async function watchdog(ctx: CommandContext): Promise<number> {
  const { spec } = await ctx.job();
  const lookbackMs = ctx.duration('lookback', DEFAULT_LOOKBACK_MS);
  const graceMs = ctx.duration('grace', DEFAULT_GRACE_MS);
  const deadlineMs = ctx.deadlineMs(spec);
  const rateStart = ctx.text('rate-start') === undefined ? undefined : ctx.time('rate-start');
  const args = {
    jobId: spec.id,
    schedule: spec.schedule,
    ...(rateStart !== undefined ? { rateStart } : {}),
    deadlineMs,
    graceMs,
    lookbackMs,
    now: ctx.now,
  };
  try {
    // Before the backend is opened: a lookback that cannot work is a usage error, whatever answers.
    planAudit(args);
  } catch (error) {
    if (error instanceof AuditInputError)
      throw usageError(`${OPTION_OF_INPUT[error.input]}: ${error.message}`);
    throw error;
  }
  const backend = await ctx.backend(spec.id);
  const audit = await auditWindows({ ...args, claims: backend.slots.claims });
  const { counts } = audit;
  const paging = counts.missing + counts.incomplete;
  if (ctx.json) {
    ctx.print(
      JSON.stringify(
        {
          job: spec.id,
          schedule: audit.expression,
          timeZone: audit.timeZone,
          from: iso(audit.from),
          now: iso(audit.now),
          deadlineMs,
          graceMs,
          backend: backend.description,
          counts,
          windows: audit.windows.map((w) => ({ ...w, dueBy: iso(w.dueBy), state: w.state ?? null })),
        },
        null,
        2,
      ),
    );
    return paging === 0 ? ExitCode.Ok : ExitCode.Problem;
  }
  ctx.print(
    `${spec.id}: ${audit.expression} ${audit.timeZone}, ${audit.windows.length} windows from ${iso(audit.from)} to ${iso(audit.now)}` +
      ` (deadline ${duration(deadlineMs)}, grace ${duration(graceMs)})\n(${backend.description})\n`,
  );
  if (audit.windows.length === 0) {
    ctx.print('The schedule has no window in the lookback: nothing to judge.');
    return ExitCode.Ok;
  }
  ctx.print(
    renderTable(
      ['window (UTC)', 'local time', 'verdict', 'state', 'due by', 'why'],
      audit.windows.map((w) => [
        w.window,
        w.local,
        w.verdict.toUpperCase(),
        w.state ?? '-',
        iso(w.dueBy),
        w.reason,
      ]),
    ),
  );
  const tally = `${counts.ok} ok, ${counts.partial} partial, ${counts.missing} missing, ${counts.incomplete} incomplete, ${counts.pending} pending`;
  ctx.print(
    paging === 0
      ? `\n${tally}: nothing would page.`
      : `\n${tally}: the watchdog pages (WindowMissing ${counts.missing}, WindowIncomplete ${counts.incomplete}). ` +
          `Look at each: slotguard slots show --job ${spec.id} --window <window>; docs/operations.md says what to do.`,
  );
  return paging === 0 ? ExitCode.Ok : ExitCode.Problem;
}
