import {
  countOutcomes,
  type InDoubtCounts,
  type InDoubtEffectResult,
  InDoubtOutcome,
  ResolverScope,
  resolveWindowInDoubt,
  type WindowInDoubtResolution,
} from '../shared/operator/in-doubt-resolver.js';
import { SlotState } from '../shared/slot/ports.js';
import { type Slot, windowOf } from '../shared/slot/slot.js';
import { silentLog } from '../shared/telemetry/log.js';
import { duration } from '../shared/watchdog/window-audit.js';
import { count, ExitCode, iso, renderTable, usageError } from './cli-support.js';
import type { CommandContext } from './command.js';
import { MAX_LISTED_WINDOWS } from './slot-commands.js';
import { backfillCommand, holderName, windowNote } from './slot-view.js';

/**
 * Why an effect of a split window is not run again from here: its window would be split again, but
 * the shard that owns the effect has ended (DONE or PARTIAL) and would stand down, so the effect
 * would be dropped and the window counted finished without it. Reopening its shards is still to do.
 */
export const SPLIT_WINDOW_RERUN =
  'running an effect again needs the shard that owns it reopened, which the CLI does not do yet: the window would ' +
  'be split again, that shard would stand down as finished, and the effect would never run';

/** How each outcome reads in the table and the total line. */
const OUTCOME_TEXT: Readonly<Record<InDoubtOutcome, string>> = {
  'marked-done': 'marked done',
  rerun: 're-run',
  rejected: 'rejected',
  'in-doubt': 'in doubt',
  refused: 'refused',
  'moved-on': 'moved on',
};

/**
 * `effects resolve --auto`: settles the effects that finished windows (one `--window`, or those of
 * `--from`/`--to`) left in doubt, each by what the provider said of its message (resolveWindowInDoubt):
 * accepted → marked done, rejected → cleared and the window reopened so its next delivery sends it,
 * no word → left in doubt, with how long it has waited. Exit 1 while anything is left in doubt or was
 * refused, and for one `--window` that is not finished.
 */
export async function effectsResolveAuto(ctx: CommandContext): Promise<number> {
  const one = ctx.text('window') !== undefined;
  if (one === (ctx.text('from') !== undefined || ctx.text('to') !== undefined)) {
    throw usageError(
      '--auto resolves the finished windows of --window T, or of --from T --to T (every window the schedule ' +
        `fired in that range); give ${one ? 'one or the other, not both' : 'one of them'}`,
    );
  }
  const { spec, schedule } = await ctx.job();
  let windows: Date[];
  if (one) {
    const window = ctx.window();
    const note = windowNote(spec, window, schedule);
    if (note) ctx.warn(note);
    windows = [new Date(window)];
  } else {
    const from = ctx.time('from');
    const to = ctx.time('to');
    if (to <= from) throw usageError(`--to (${windowOf(to)}) must be after --from (${windowOf(from)})`);
    windows = schedule.firesBetween(from, to, MAX_LISTED_WINDOWS + 1);
    if (windows.length > MAX_LISTED_WINDOWS) {
      throw usageError(
        `${spec.id} fires more than ${MAX_LISTED_WINDOWS} times from ${windowOf(from)} to ${windowOf(to)}; narrow --from and --to`,
      );
    }
  }
  const backend = await ctx.backend(spec.id);
  const stores = {
    claims: backend.slots.claims,
    ledger: backend.slots.ledger,
    operator: ctx.operator(backend),
  };
  // A window reopened for a re-run has long passed its first deadline: it gets the job's again.
  const deadline = ctx.now + ctx.deadlineMs(spec);

  const reports: WindowReport[] = [];
  // One window at a time: each is fenced on the epoch read just before its own writes.
  for (const window of windows) {
    const slot: Slot = { jobId: spec.id, window: windowOf(window) };
    const resolution = await resolveWindowInDoubt({
      stores,
      slot,
      scope: ResolverScope.All,
      now: ctx.now,
      deadline,
      // Every outcome is printed below, by hash.
      log: silentLog,
      by: 'operator',
    });
    reports.push({ slot, resolution, next: nextStep(slot, resolution, deadline) });
  }

  const totals = sum(reports);
  const unfinished = reports.filter((r) => r.resolution.kind !== 'resolved');
  const problem = totals['in-doubt'] + totals.refused > 0 || (one && unfinished.length > 0);
  if (ctx.json) {
    ctx.print(
      JSON.stringify(
        {
          job: spec.id,
          windows: reports.map((report) => jsonWindow(report, ctx.now)),
          totals: {
            markedDone: totals['marked-done'],
            rerun: totals.rerun,
            inDoubt: totals['in-doubt'],
            refused: totals.refused,
            movedOn: totals['moved-on'],
          },
        },
        null,
        2,
      ),
    );
    return problem ? ExitCode.Problem : ExitCode.Ok;
  }
  const lines: string[] = [];
  for (const report of reports) {
    // Over a range, a window with nothing in doubt, or not finished, is left out of the text.
    if (!one && (report.resolution.kind !== 'resolved' || report.resolution.effects.length === 0)) continue;
    lines.push(...windowLines(report, ctx.now), '');
  }
  if (!one && unfinished.length > 0) {
    lines.push(
      `${unfinished.length} of ${reports.length} windows are not finished (or never ran): their own runs settle ` +
        'what the provider said before they finish; slotguard slots list shows them.',
    );
  }
  lines.push(totalLine(totals, reports.length - unfinished.length));
  ctx.print(lines.join('\n'));
  return problem ? ExitCode.Problem : ExitCode.Ok;
}

interface WindowReport {
  readonly slot: Slot;
  readonly resolution: WindowInDoubtResolution;
  /** What the operator does next, when there is something to do. */
  readonly next?: string;
}

function windowLines(report: WindowReport, now: number): string[] {
  const { slot, resolution } = report;
  const title = `${slot.jobId} ${slot.window}`;
  switch (resolution.kind) {
    case 'absent':
      return [
        `${title}: no slot record; nothing ran, nothing is in doubt. If it was due: ${backfillCommand(slot)}`,
      ];
    case 'not-finished': {
      const { record } = resolution;
      return [
        resolution.leaseLive
          ? `${title}: refused: a run (${holderName(record.owner)}, epoch ${record.epoch}) holds it until ` +
            `${iso(record.leaseEndsAt)}; it settles what the provider said before it finishes. Nothing was written.`
          : `${title}: ${record.state} at epoch ${record.epoch}, not finished: its next run settles what the ` +
            `provider said before it finishes. Nothing was written.`,
      ];
    }
    case 'resolved':
      break;
    default:
      return resolution satisfies never;
  }
  const { record, effects } = resolution;
  const lines = [`${title}: ${record.state} at epoch ${record.epoch}, ${count(effects.length)} in doubt`];
  if (effects.length > 0) {
    lines.push(
      renderTable(
        ['  effect', 'outcome', 'provider said', 'message id', 'note'],
        effects.map((effect) => [
          `  ${effect.keyHash}`,
          OUTCOME_TEXT[effect.outcome],
          effect.word?.event ?? '-',
          effect.word?.messageId ?? '-',
          effectNote(effect, now),
        ]),
      ),
    );
  }
  if (effects.some((e) => e.refusal === 'split-window')) {
    lines.push(
      `  Rejected effects are not re-run here: the window is split into ${record.shards} shards, and ${SPLIT_WINDOW_RERUN}.`,
    );
  }
  if (report.next) lines.push(`  ${report.next}`);
  return lines;
}

function effectNote(effect: InDoubtEffectResult, now: number): string {
  const shard = effect.shard === undefined ? '' : `shard ${effect.shard}, `;
  switch (effect.outcome) {
    case InDoubtOutcome.InDoubt:
      return `${shard}no word from the provider; ${reservedAgo(effect, now)}`;
    case InDoubtOutcome.Refused: {
      const holder = effect.holder;
      if (effect.refusal === 'lease-live' && holder) {
        return (
          `${shard}under way: ${holderName(holder.owner)} (epoch ${holder.epoch}) holds ` +
          `${holder.slot.shard === undefined ? 'the window' : `shard ${holder.slot.shard}`} until ${iso(holder.leaseEndsAt)}`
        );
      }
      if (effect.refusal === 'split-window') return `${shard}split window: not re-run (see below)`;
      return `${shard}the slot moved on since it was read (${effect.refusal}); run again`;
    }
    case InDoubtOutcome.MovedOn:
      return `${shard}settled meanwhile by another resolver or a run`;
    default:
      return shard.replace(/, $/, '');
  }
}

function reservedAgo(effect: InDoubtEffectResult, now: number): string {
  return effect.reservedAt === undefined
    ? 'reserved before reservations were timed'
    : `reserved ${duration(now - effect.reservedAt)} ago`;
}

/** What brings the cleared effects to their re-run, or undefined when nothing was cleared. */
function nextStep(slot: Slot, resolution: WindowInDoubtResolution, deadline: number): string | undefined {
  if (resolution.kind !== 'resolved' || resolution.counts.rerun === 0) return undefined;
  const { record } = resolution;
  const rerun = resolution.counts.rerun;
  const cleared = `${count(rerun)} ${rerun === 1 ? 'effect' : 'effects'} cleared`;
  if (resolution.slotReopened) {
    return (
      `The window was ${record.state} and is reopened (RELEASED at epoch ${record.epoch}, deadline ${iso(deadline)}): ` +
      `its next delivery sends the ${cleared} and skips the rest; to deliver it now: ${backfillCommand(slot)}`
    );
  }
  if (record.state === SlotState.Stuck || record.state === SlotState.Failed) {
    return (
      `The window is ${record.state}: its next run sends the ${cleared} once it is given back and delivered: ` +
      `slotguard effects redrive --job ${slot.jobId} --window ${slot.window}`
    );
  }
  return (
    `The window moved on before it could be reopened; the ${cleared} are sent by whichever run finishes it. ` +
    `Look again: slotguard slots show --job ${slot.jobId} --window ${slot.window}`
  );
}

function sum(reports: readonly WindowReport[]): InDoubtCounts {
  return countOutcomes(
    reports.flatMap(({ resolution }) => (resolution.kind === 'resolved' ? resolution.effects : [])),
  );
}

function totalLine(totals: InDoubtCounts, windows: number): string {
  const parts = [
    `${count(totals['marked-done'])} marked done`,
    `${count(totals.rerun)} to re-run`,
    `${count(totals['in-doubt'])} still in doubt`,
    `${count(totals.refused)} refused`,
    ...(totals['moved-on'] > 0 ? [`${count(totals['moved-on'])} settled meanwhile`] : []),
  ];
  return `total: ${parts.join(', ')} (${count(windows)} finished ${windows === 1 ? 'window' : 'windows'})`;
}

function jsonWindow(report: WindowReport, now: number) {
  const { slot, resolution } = report;
  switch (resolution.kind) {
    case 'absent':
      return { window: slot.window, result: 'absent' };
    case 'not-finished':
      return {
        window: slot.window,
        result: resolution.leaseLive ? 'lease-live' : 'not-finished',
        state: resolution.record.state,
        epoch: resolution.record.epoch,
        ...(resolution.leaseLive
          ? { holder: holderName(resolution.record.owner), leaseEndsAt: iso(resolution.record.leaseEndsAt) }
          : {}),
      };
    case 'resolved':
      return {
        window: slot.window,
        result: 'resolved',
        state: resolution.record.state,
        epoch: resolution.record.epoch,
        slotReopened: resolution.slotReopened,
        effects: resolution.effects.map((effect) => ({
          keyHash: effect.keyHash,
          outcome: effect.outcome,
          event: effect.word?.event ?? null,
          messageId: effect.word?.messageId ?? null,
          epoch: effect.epoch,
          ...(effect.shard !== undefined ? { shard: effect.shard } : {}),
          reservedAt: effect.reservedAt === undefined ? null : iso(effect.reservedAt),
          ...(effect.outcome === InDoubtOutcome.InDoubt && effect.reservedAt !== undefined
            ? { waitingMs: now - effect.reservedAt }
            : {}),
          ...(effect.refusal ? { refusal: effect.refusal } : {}),
        })),
        ...(report.next ? { next: report.next } : {}),
      };
    default:
      return resolution satisfies never;
  }
}
