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
import { backfillCommand, holderName, releaseCommand, windowNote } from './slot-view.js';

/**
 * Why an effect of a split window is not run again from here: its window would be split again, but
 * the shard that owns the effect has ended (DONE or PARTIAL) and would stand down, so the effect
 * would be dropped and the window counted finished without it. Reopening its shards is still to do.
 */
export const SPLIT_WINDOW_RERUN =
  'running an effect again needs the shard that owns it reopened, which the CLI does not do yet: the window would ' +
  'be split again, that shard would stand down as finished, and the effect would never run';

/**
 * How long the provider is given to speak of a message before its silence counts (`--grace`): the
 * grace period the ScheduledJob construct gives a job whose SES events it records.
 */
export const DEFAULT_AUTO_GRACE_MS = 3_600_000;

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
 * accepted → marked done, rejected → cleared and the window reopened, to be delivered once more
 * (nothing delivers a finished window by itself: the output gives the command), no word → left in
 * doubt, told apart by `--grace`: still inside it (look again later) or past it (the operator decides
 * each one: the output says how). Nothing is sent again without the provider's word: silence also
 * means a late event, or a job whose events are not recorded. Exit 1 while anything is left in doubt
 * or was refused, and for one `--window` that is not finished.
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
  const graceMs = ctx.duration('grace', DEFAULT_AUTO_GRACE_MS);
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
    reports.push({
      slot,
      resolution,
      next: nextSteps(slot, resolution, { deadline, now: ctx.now, graceMs }),
    });
  }

  const totals = sum(reports);
  const pastGrace = reports
    .flatMap(({ resolution }) => (resolution.kind === 'resolved' ? resolution.effects : []))
    .filter(
      (effect) => effect.outcome === InDoubtOutcome.InDoubt && isPastGrace(effect, ctx.now, graceMs),
    ).length;
  const unfinished = reports.filter((r) => r.resolution.kind !== 'resolved');
  const problem = totals['in-doubt'] + totals.refused > 0 || (one && unfinished.length > 0);
  if (ctx.json) {
    ctx.print(
      JSON.stringify(
        {
          job: spec.id,
          graceMs,
          windows: reports.map((report) => jsonWindow(report, ctx.now, graceMs)),
          totals: {
            markedDone: totals['marked-done'],
            rerun: totals.rerun,
            inDoubt: totals['in-doubt'],
            pastGrace,
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
    lines.push(...windowLines(report, ctx.now, graceMs), '');
  }
  if (!one && unfinished.length > 0) {
    lines.push(
      `${unfinished.length} of ${reports.length} windows are not finished (or never ran): their own runs settle ` +
        'what the provider said before they finish; slotguard slots list shows them.',
    );
  }
  lines.push(totalLine(totals, pastGrace, graceMs, reports.length - unfinished.length));
  ctx.print(lines.join('\n'));
  return problem ? ExitCode.Problem : ExitCode.Ok;
}

interface WindowReport {
  readonly slot: Slot;
  readonly resolution: WindowInDoubtResolution;
  /** What the operator does next: empty when there is nothing to do. */
  readonly next: readonly string[];
}

function windowLines(report: WindowReport, now: number, graceMs: number): string[] {
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
          effectNote(effect, now, graceMs),
        ]),
      ),
    );
  }
  if (effects.some((e) => e.refusal === 'split-window')) {
    lines.push(
      `  Rejected effects are not re-run here: the window is split into ${record.shards} shards, and ${SPLIT_WINDOW_RERUN}.`,
    );
  }
  lines.push(...report.next.map((step) => `  ${step}`));
  return lines;
}

function effectNote(effect: InDoubtEffectResult, now: number, graceMs: number): string {
  const shard = effect.shard === undefined ? '' : `shard ${effect.shard}, `;
  switch (effect.outcome) {
    case InDoubtOutcome.InDoubt:
      return isPastGrace(effect, now, graceMs)
        ? `${shard}no word from the provider, past the ${duration(graceMs)} grace; ${reservedAgo(effect, now)}`
        : `${shard}no word yet, grace until ${iso(graceEndsAt(effect, graceMs))}; ${reservedAgo(effect, now)}`;
    case InDoubtOutcome.Refused: {
      const holder = effect.holder;
      const held = holder?.slot.shard === undefined ? 'the window' : `shard ${holder.slot.shard}`;
      if (effect.refusal === 'lease-live' && holder) {
        return `${shard}under way: ${holderName(holder.owner)} (epoch ${holder.epoch}) holds ${held} until ${iso(holder.leaseEndsAt)}`;
      }
      if (effect.refusal === 'running' && holder) {
        return (
          `${shard}${holderName(holder.owner)} (epoch ${holder.epoch}) holds ${held} RUNNING past its lease: ` +
          `release it first (${releaseCommand(holder.slot)})`
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

/**
 * When the grace period of an effect with no word ends: its reservation plus the grace. One reserved
 * before reservations were timed has waited long enough, as in the window's own runs.
 */
function graceEndsAt(effect: InDoubtEffectResult, graceMs: number): number {
  return (effect.reservedAt ?? Number.NEGATIVE_INFINITY) + graceMs;
}

function isPastGrace(effect: InDoubtEffectResult, now: number, graceMs: number): boolean {
  return now >= graceEndsAt(effect, graceMs);
}

/** What the operator does next about one window: deliver what was cleared, wait, or decide. */
function nextSteps(
  slot: Slot,
  resolution: WindowInDoubtResolution,
  at: { readonly deadline: number; readonly now: number; readonly graceMs: number },
): string[] {
  if (resolution.kind !== 'resolved') return [];
  const { record, counts } = resolution;
  const steps: string[] = [];
  const deliver = deliverCommand(slot, record.state);
  const silent = resolution.effects.filter((effect) => effect.outcome === InDoubtOutcome.InDoubt);
  const waiting = silent.filter((effect) => !isPastGrace(effect, at.now, at.graceMs));
  const pastGrace = silent.length - waiting.length;
  if (counts.rerun > 0) {
    const [cleared, is] =
      counts.rerun === 1
        ? ['the rejected effect', 'is']
        : [`the ${count(counts.rerun)} rejected effects`, 'are'];
    if (resolution.slotReopened) {
      // One delivery sends whatever was cleared by then: the silent ones decided below too.
      const when = pastGrace > 0 ? 'once you have decided the ones with no word below' : 'now';
      steps.push(
        `The window was ${record.state} and is reopened (RELEASED at epoch ${record.epoch}, deadline ${iso(at.deadline)}) ` +
          `for ${cleared}. Nothing delivers a finished window by itself: deliver it once, ${when}: ${deliver}. That run ` +
          `sends what was cleared and skips the rest; undelivered, the watchdog counts it incomplete after ${iso(at.deadline)}.`,
      );
    } else if (record.state === SlotState.Stuck || record.state === SlotState.Failed) {
      steps.push(
        `The window is ${record.state}: ${cleared} ${is} sent once it is given back and delivered: ${deliver}`,
      );
    } else {
      steps.push(
        `The window moved on before it could be reopened; ${cleared} ${is} sent by whichever run finishes it. ` +
          `Look again: slotguard slots show --job ${slot.jobId} --window ${slot.window}`,
      );
    }
  }
  if (waiting.length > 0) {
    const lookAgain = Math.max(...waiting.map((effect) => graceEndsAt(effect, at.graceMs)));
    steps.push(
      `${effects(waiting.length)} with no word yet, inside the ${duration(at.graceMs)} grace: SES's events can be late. ` +
        `Look again after ${iso(lookAgain)}: slotguard effects resolve --job ${slot.jobId} --window ${slot.window} --auto`,
    );
  }
  if (pastGrace > 0) {
    const decide = `slotguard effects resolve --job ${slot.jobId} --window ${slot.window} --key HASH`;
    steps.push(
      `${effects(pastGrace)} with no word past the ${duration(at.graceMs)} grace, which --auto never sends again. Where ` +
        "the job's SES events are recorded, SES most likely never took it (the run stopped before sending); where they " +
        'are not, silence says nothing: check the provider. Decide each one:',
      `  it went:    ${decide} --mark-done`,
      (record.shards ?? 1) > 1
        ? `  it did not: not from here yet: the window is split into ${record.shards} shards, and ${SPLIT_WINDOW_RERUN}`
        : `  it did not: ${decide} --rerun, then deliver the window once: ${deliver} ` +
            '(probably safe: an event later still means that recipient gets it twice)',
    );
  }
  return steps;
}

const effects = (n: number) => `${count(n)} ${n === 1 ? 'effect' : 'effects'}`;

/** What delivers a window whose effects were cleared: a backfill, or a re-drive for a STUCK or FAILED one. */
function deliverCommand(slot: Slot, state: SlotState): string {
  return state === SlotState.Stuck || state === SlotState.Failed
    ? `slotguard effects redrive --job ${slot.jobId} --window ${slot.window}`
    : backfillCommand(slot);
}

function sum(reports: readonly WindowReport[]): InDoubtCounts {
  return countOutcomes(
    reports.flatMap(({ resolution }) => (resolution.kind === 'resolved' ? resolution.effects : [])),
  );
}

function totalLine(totals: InDoubtCounts, pastGrace: number, graceMs: number, windows: number): string {
  const parts = [
    `${count(totals['marked-done'])} marked done`,
    `${count(totals.rerun)} to re-run`,
    `${count(totals['in-doubt'])} still in doubt${totals['in-doubt'] > 0 ? ` (${count(pastGrace)} past the ${duration(graceMs)} grace)` : ''}`,
    `${count(totals.refused)} refused`,
    ...(totals['moved-on'] > 0 ? [`${count(totals['moved-on'])} settled meanwhile`] : []),
  ];
  return `total: ${parts.join(', ')} (${count(windows)} finished ${windows === 1 ? 'window' : 'windows'})`;
}

function jsonWindow(report: WindowReport, now: number, graceMs: number) {
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
          ...(effect.outcome === InDoubtOutcome.InDoubt
            ? {
                ...(effect.reservedAt !== undefined
                  ? { waitingMs: now - effect.reservedAt, graceEndsAt: iso(graceEndsAt(effect, graceMs)) }
                  : {}),
                pastGrace: isPastGrace(effect, now, graceMs),
              }
            : {}),
          ...(effect.refusal ? { refusal: effect.refusal } : {}),
        })),
        ...(report.next.length > 0 ? { next: report.next } : {}),
      };
    default:
      return resolution satisfies never;
  }
}
