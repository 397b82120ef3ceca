import { drainConcurrently } from '../shared/effects/concurrent-drain.js';
import { type Checkpoint, type RunSummary, type SlotRecord, SlotState } from '../shared/slot/ports.js';
import { type Slot, windowOf, windowSlot } from '../shared/slot/slot.js';
import { duration } from '../shared/watchdog/window-audit.js';
import type { CliBackend } from './cli-backend.js';
import { count, ExitCode, iso, renderTable, usageError } from './cli-support.js';
import type { CommandContext } from './command.js';
import type { CatalogJob } from './job-catalog.js';
import {
  backfillCommand,
  holderName,
  readShards,
  type ShardsView,
  type SlotView,
  viewSlot,
  windowNote,
} from './slot-view.js';

/** The most windows one `slots list` reads. */
export const MAX_LISTED_WINDOWS = 1_000;

/**
 * `slots list`: the windows the job's schedule produced in [from, to), each with its slot record.
 * Listing by schedule, one GetItem per window, needs no Scan (which the functions' IAM lacks).
 */
export async function slotsList(ctx: CommandContext): Promise<number> {
  const { spec, schedule } = await ctx.job();
  const from = ctx.time('from');
  const to = ctx.time('to');
  if (to <= from) throw usageError(`--to (${windowOf(to)}) must be after --from (${windowOf(from)})`);
  const windows = schedule.firesBetween(from, to, MAX_LISTED_WINDOWS + 1);
  if (windows.length > MAX_LISTED_WINDOWS) {
    throw usageError(
      `${spec.id} fires more than ${MAX_LISTED_WINDOWS} times from ${windowOf(from)} to ${windowOf(to)}; narrow --from and --to`,
    );
  }
  const backend = await ctx.backend(spec.id);
  const views: SlotView[] = new Array(windows.length);
  // Eight at a time: a day of a 15-minute job is 96 windows of 17 requests each.
  await drainConcurrently(
    windows.map((window, i) => ({ window, i })),
    8,
    async ({ window, i }) => {
      views[i] = await viewSlot(backend, spec, window.getTime(), ctx.now, { shardRecords: 'while-split' });
    },
  );
  const problems = views.filter((view) => view.problems.length > 0).length;
  if (ctx.json) {
    ctx.print(
      JSON.stringify(
        {
          job: spec.id,
          schedule: spec.schedule.expression,
          timeZone: schedule.timeZone,
          from: windowOf(from),
          to: windowOf(to),
          backend: backend.description,
          windows: views.map(jsonSlot),
          problems,
        },
        null,
        2,
      ),
    );
  } else {
    ctx.print(
      `${spec.id}: ${spec.schedule.expression} ${schedule.timeZone}, ${windows.length} windows from ${windowOf(from)} to ${windowOf(to)}\n` +
        `(${backend.description})\n`,
    );
    if (views.length === 0) ctx.print('The schedule has no fire time in this range.');
    else {
      ctx.print(
        renderTable(
          [
            'window (UTC)',
            'local time',
            'state',
            'holder',
            'epoch',
            'lease end',
            'attempts',
            'done',
            'in doubt',
            'refused',
            'note',
          ],
          views.map((view) => [
            view.window,
            view.local,
            view.leaseLive ? 'RUNNING (lease live)' : view.state,
            holderName(view.holder),
            view.epoch === undefined ? '-' : String(view.epoch),
            view.state === SlotState.Running ? (view.leaseEndsAt ?? '-') : '-',
            view.attempts === undefined ? '-' : String(view.attempts),
            view.state === 'MISSED' || view.state === 'UPCOMING' ? '-' : count(view.effects.done.length),
            view.state === 'MISSED' || view.state === 'UPCOMING' ? '-' : count(view.effects.inDoubt.length),
            view.state === 'MISSED' || view.state === 'UPCOMING' ? '-' : count(view.effects.failed.length),
            [
              view.shards ? describeSplit(view.shards, view.state) : '',
              view.backfilled ? 'backfilled' : '',
              ...view.problems.filter((p) => p !== 'missed'),
            ]
              .filter(Boolean)
              .join(', '),
          ]),
        ),
      );
      ctx.print(
        problems === 0
          ? '\nEvery window that was due ran, once, with nothing in doubt.'
          : `\n${problems} windows need a look: slotguard slots show --job ${spec.id} --window <window>`,
      );
    }
  }
  return problems === 0 ? ExitCode.Ok : ExitCode.Problem;
}

/**
 * `slots show`: one window's record, its delivery, its summary and its effects by state; for a split
 * window also each shard's record in a table, and with `--shard` one shard in full.
 */
export async function slotsShow(ctx: CommandContext): Promise<number> {
  const { spec, schedule } = await ctx.job();
  const window = ctx.window();
  const shard = ctx.shard();
  const note = windowNote(spec, window, schedule);
  if (note) ctx.warn(note);
  const backend = await ctx.backend(spec.id);
  // A shard is shown with its window's record beside it: the window says whether it is split, into
  // how many, and whether it has ended, which decides what the shard's state means.
  const whole =
    shard === undefined
      ? undefined
      : await viewSlot(backend, spec, window, ctx.now, { shardRecords: 'while-split' });
  if (whole && shard !== undefined) {
    const refusal = shardRefusal(whole, shard);
    if (refusal) return ctx.refuse({ outcome: 'no-such-shard', shards: whole.shards?.count ?? 1 }, refusal);
  }
  const view = await viewSlot(backend, spec, window, ctx.now, shard === undefined ? {} : { shard });
  if (ctx.json) {
    ctx.print(
      JSON.stringify(
        { job: spec.id, backend: backend.description, ...jsonSlot(view), effects: view.effects },
        null,
        2,
      ),
    );
    return view.problems.length === 0 ? ExitCode.Ok : ExitCode.Problem;
  }
  const title = `${spec.id} ${view.window}${view.shard === undefined ? '' : ` shard ${view.shard} of ${whole?.shards?.count}`}`;
  const lines = [`${title} (${view.local})`, `  state        ${describeState(view)}`];
  if (view.state === 'MISSED' || view.state === 'UPCOMING' || view.state === 'PENDING') {
    lines.push(
      view.state === 'UPCOMING'
        ? '  Not due yet.'
        : view.state === 'PENDING'
          ? `  No record yet: no run has claimed this shard's message. Its window is ${whole?.state}` +
            `${whole?.pastDeadline ? ', past its deadline' : ''}.`
          : note
            ? '  No slot record, and this is not a window of the schedule: check the time (see the note).'
            : `  No slot record: nothing claimed this window. Run it with: ${backfillCommand({ jobId: spec.id, window: view.window })}`,
    );
    ctx.print(lines.join('\n'));
    return view.state === 'MISSED' ? ExitCode.Problem : ExitCode.Ok;
  }
  const delivery = view.delivery;
  lines.push(
    `  holder       ${view.holder ?? '-'}`,
    `  epoch        ${view.epoch}  (claims so far: ${view.attempts}, failed runs: ${view.failures})`,
    `  lease end    ${view.state === SlotState.Running ? `${view.leaseEndsAt} (${view.leaseLive ? 'live' : 'ended'})` : '-'}`,
    `  delivery     execution ${delivery?.executionId || '-'}, attempt ${delivery?.attemptNumber || '-'}, invocation ${delivery?.invocationId || '-'}${view.backfilled ? ', backfilled' : ''}`,
  );
  if (view.completedAt) lines.push(`  completed    ${view.completedAt}`);
  if (view.deadline) lines.push(`  deadline     ${view.deadline} (${untilOrAgo(view.deadline, ctx.now)})`);
  if (view.resumeAfter)
    lines.push(
      `  waiting      for refused effects' retries, or an operator's clear or redrive under way: not resumed before ${view.resumeAfter}`,
    );
  if (view.checkpoint) lines.push(`  checkpoint   ${describeCheckpoint(view.checkpoint)}`);
  if (view.progress && view.state === SlotState.Running) {
    const p = view.progress;
    lines.push(
      `  progress     the holder's run so far (epoch ${p.epoch}): ${count(p.done)} done, ${count(p.skipped)} skipped, ` +
        `${count(p.inDoubt)} in doubt, ${count(p.retrying)} retrying, ${count(p.failed)} failed`,
    );
  }
  if (view.runsWithoutProgress)
    lines.push(`  no progress  in the last ${view.runsWithoutProgress} runs (STUCK at 3 in a row)`);
  if (view.summary) {
    const s = view.summary;
    lines.push(
      `  ${view.shard === undefined ? 'window ' : 'shard  '}      ${count(s.done)} done, ${count(s.inDoubt)} in doubt, ${count(s.failed)} failed, over ${count(s.runs)} runs`,
    );
  }
  if (view.lastError)
    lines.push(`  ${view.state === SlotState.Stuck ? 'stuck       ' : 'last error  '} ${view.lastError}`);
  if (view.shards) lines.push(...shardLines(view.shards, view.state));
  const { done, inDoubt, inFlight, failed } = view.effects;
  lines.push(
    '',
    `  effects: ${count(done.length)} done, ${count(inDoubt.length)} in doubt, ${count(inFlight.length)} under way, ` +
      `${count(failed.length)} refused`,
  );
  if (failed.length > 0) {
    lines.push('  refused by the provider before they were performed (never sent):');
    for (const effect of failed.slice(0, 20))
      lines.push(
        `    ${effect.keyHash}  ${effect.attempts} attempts, ${effect.reason}, ${effect.retryAt ? `next retry ${effect.retryAt}` : 'for good'}`,
      );
    if (failed.length > 20) lines.push(`    … ${count(failed.length - 20)} more; --json lists all`);
  }
  if (inDoubt.length > 0) {
    lines.push('  in doubt (reserved by a run that did not record them; they may or may not have happened):');
    // Epochs count per shard: "epoch 1" alone would not say whose run it was.
    for (const effect of inDoubt.slice(0, 20))
      lines.push(
        `    ${effect.keyHash}  reserved at epoch ${effect.epoch}${effect.shard === undefined ? '' : ` of shard ${effect.shard}`}`,
      );
    if (inDoubt.length > 20) lines.push(`    … ${count(inDoubt.length - 20)} more; --json lists all`);
    lines.push(
      "  Settle those the provider has spoken of (its word is on their records, from SES's events):",
      `    slotguard effects resolve --auto --job ${spec.id} --window ${view.window}`,
      '  Or check the provider (SES sending events) for each, then:',
      `    slotguard effects resolve --job ${spec.id} --window ${view.window} --key <hash> --mark-done   (it went)`,
      `    slotguard effects resolve --job ${spec.id} --window ${view.window} --key <hash> --rerun       (it did not)`,
    );
  }
  if (inFlight.length > 0)
    lines.push(
      `  under way (${view.shards ? 'the live shards' : `epoch ${view.epoch}`}): ${inFlight.slice(0, 10).join(' ')}${inFlight.length > 10 ? ' …' : ''}`,
    );
  if (done.length > 0)
    lines.push(
      `  done: ${done.slice(0, 5).join(' ')}${done.length > 5 ? ` … (${count(done.length - 5)} more; --json lists all)` : ''}`,
    );
  lines.push(...(whole ? shardAdvice(spec.id, view, whole) : windowAdvice(spec.id, view)));
  ctx.print(lines.join('\n'));
  return view.problems.length === 0 ? ExitCode.Ok : ExitCode.Problem;
}

/** What an operator can do about a window, by its state and problems. */
function windowAdvice(jobId: string, view: SlotView): string[] {
  const lines: string[] = [];
  const window = { jobId, window: view.window };
  if (view.problems.includes('lease ended')) {
    lines.push(
      '',
      `  The holder's lease ended while RUNNING: it crashed or froze. The next delivery takes it over;`,
      `  to run it now: ${backfillCommand(window)}`,
    );
  }
  const redrive = `slotguard effects redrive --job ${jobId} --window ${view.window}`;
  const release = `slotguard slots release --job ${jobId} --window ${view.window}`;
  if (view.state === SlotState.Stuck && view.shards) {
    const stuck = (view.shards.records ?? []).filter(
      (row) => row.state === SlotState.Stuck || row.state === SlotState.Failed,
    );
    lines.push(
      '',
      `  STUCK: ${stuck.length ? `shard ${stuck.map((row) => row.shard).join(', ')} could not finish` : 'a shard could not finish'} ` +
        '(the table and `stuck` say why). Fix the cause, then release each stuck shard and the window,',
      '  and deliver it: its next run splits it again, the shards that finished stand down and the released ones run.',
      ...stuck.map((row) => `    ${release} --shard ${row.shard}`),
      `    ${release}`,
      `    ${backfillCommand(window)}`,
    );
  } else if (view.state === SlotState.Stuck) {
    lines.push(
      '',
      '  STUCK: continuation gave up and no delivery will run it. Fix what stopped it (the reason above), then',
      `  re-drive it (clears its refused effects, gives it a fresh deadline, delivers it): ${redrive}`,
    );
  }
  if (view.state === SlotState.Partial) {
    lines.push(
      '',
      '  PARTIAL: finished, but the refused effects above were never performed. Once the provider accepts',
      view.shards
        ? '  them, they cannot be re-driven from here yet: the window is split, and its shards that finished would'
        : `  them (a verified address, a raised quota), send them: ${redrive} [--key <hash> …]`,
      ...(view.shards
        ? ['  stand down without sending them (effects redrive refuses it, and says why).']
        : []),
    );
  }
  if (view.pastDeadline && view.state === SlotState.Sharded) {
    lines.push(
      '',
      '  Past its deadline and not finished: each shard still running finishes or gives up at its next run, and',
      '  the last shard to end finishes the window (STUCK if a shard could not finish).',
    );
  } else if (view.pastDeadline && view.state !== SlotState.Stuck) {
    lines.push(
      '',
      `  Past its deadline and not finished: the next run finishes it PARTIAL or STUCK. To give it more time: ${redrive}`,
    );
  }
  if (view.problems.includes('failed')) {
    lines.push('', `  FAILED after ${view.failures} failed runs; fix the cause, then: ${release}`);
  }
  return lines;
}

/** What an operator can do about one shard, by its state and its window's. */
function shardAdvice(jobId: string, view: SlotView, whole: SlotView): string[] {
  const release = `slotguard slots release --job ${jobId} --window ${view.window}`;
  if (view.state === SlotState.Running && !view.leaseLive) {
    return [
      '',
      "  The shard's holder crashed or froze. Its message is still in the work queue: the next delivery takes",
      `  it over. To release it now: ${release} --shard ${view.shard}`,
    ];
  }
  if (view.state !== SlotState.Stuck && view.state !== SlotState.Failed) return [];
  if (whole.state === SlotState.Sharded) {
    return [
      '',
      `  ${view.state}: this shard has ended; its window waits for its other shards. When the last ends, the window`,
      `  goes STUCK naming this shard; then release this shard and the window, and deliver it (slots show says how).`,
    ];
  }
  return [
    '',
    `  ${view.state}: fix the cause, then release this shard and its window, and deliver the window:`,
    `    ${release} --shard ${view.shard}`,
    `    ${release}`,
    `    ${backfillCommand({ jobId, window: view.window })}`,
  ];
}

/** Why `--shard` names no shard of this window, or undefined when it does. */
function shardRefusal(whole: SlotView, shard: number): string | undefined {
  if (whole.state === 'MISSED' || whole.state === 'UPCOMING')
    return `window ${whole.window} has no slot record, so no shards; drop --shard to see the window`;
  if (!whole.shards)
    return `window ${whole.window} is not split into shards (its record says none); drop --shard to see the window`;
  if (shard >= whole.shards.count)
    return `--shard is ${shard}, but window ${whole.window} is split into ${whole.shards.count} shards, 0 to ${whole.shards.count - 1}`;
  return undefined;
}

/** `2 of 4 shards finished` while SHARDED; `4 shards` once the window has ended. */
function describeSplit(shards: ShardsView, state: SlotView['state']): string {
  return state === SlotState.Sharded
    ? `${shards.finished.length} of ${shards.count} shards finished`
    : `${shards.count} shards`;
}

/** The `shards` line of `slots show` and the table of each shard's record. */
function shardLines(shards: ShardsView, state: SlotView['state']): string[] {
  const lines = [
    `  shards       ${describeSplit(shards, state)}${shards.finished.length && state === SlotState.Sharded ? ` (${shards.finished.join(', ')})` : ''}`,
  ];
  const rows = shards.records;
  if (!rows) return lines;
  lines.push(
    '',
    renderTable(
      [
        'shard',
        'state',
        'epoch',
        'holder',
        'lease end',
        'checkpoint',
        'progress',
        'no progress',
        'done',
        'in doubt',
        'under way',
        'refused',
      ],
      rows.map((row) => [
        String(row.shard),
        row.state === SlotState.Running ? `RUNNING (lease ${row.leaseLive ? 'live' : 'ended'})` : row.state,
        row.epoch === undefined ? '-' : String(row.epoch),
        holderName(row.holder),
        row.leaseEndsAt ?? '-',
        row.checkpoint ? compactCheckpoint(row.checkpoint) : '-',
        row.progress && row.state === SlotState.Running ? compactProgress(row.progress) : '-',
        row.runsWithoutProgress === undefined ? '-' : String(row.runsWithoutProgress),
        count(row.effectCounts.done),
        count(row.effectCounts.inDoubt),
        count(row.effectCounts.inFlight),
        count(row.effectCounts.failed),
      ]),
    )
      .split('\n')
      .map((line) => `  ${line}`)
      .join('\n'),
  );
  for (const row of rows) {
    if (row.lastError && (row.state === SlotState.Stuck || row.state === SlotState.Failed))
      lines.push(
        `  shard ${row.shard} ${row.state === SlotState.Stuck ? 'stuck' : 'failed'}: ${row.lastError}`,
      );
  }
  return lines;
}

/** `customers at "6200"`, `customers at "9000" (walked)`, `-` with no resumable source. */
function compactCheckpoint(checkpoint: Checkpoint): string {
  const positions = Object.entries(checkpoint.positions).map(
    ([source, at]) => `${source} at ${JSON.stringify(at)}`,
  );
  const where = positions.length > 0 ? positions.join(', ') : 'no source';
  return checkpoint.walked ? `${where} (walked)` : where;
}

/** `120 done, 3 retrying`: done always, the others when not 0. */
function compactProgress(progress: RunSummary): string {
  const others = (
    [
      ['skipped', progress.skipped],
      ['in doubt', progress.inDoubt],
      ['retrying', progress.retrying],
      ['failed', progress.failed],
    ] as const
  )
    .filter(([, n]) => n > 0)
    .map(([label, n]) => `${count(n)} ${label}`);
  return [`${count(progress.done)} done`, ...others].join(', ');
}

/**
 * `slots release`: gives a RUNNING (holder gone), FAILED or STUCK slot back, fenced on the epoch just
 * read, with a fresh deadline (now plus the job's), so its next run resumes instead of finding itself
 * late and going STUCK again. With `--shard`, one shard of a split window: a RUNNING one whenever
 * (its message is still queued and takes it over), a STUCK or FAILED one once its window has ended
 * (its message is gone: releasing the window and delivering it splits it again).
 */
export async function slotsRelease(ctx: CommandContext): Promise<number> {
  const force = ctx.flag('force');
  const { spec, slot, backend, operator, record } = await ctx.repairTarget();
  const name =
    slot.shard === undefined ? `${spec.id} ${slot.window}` : `${spec.id} ${slot.window} shard ${slot.shard}`;
  const whole = slot.shard === undefined ? record : await backend.slots.claims.read(windowSlot(slot));
  const split = whole?.shards !== undefined && whole.shards > 1 ? whole.shards : undefined;
  const misaimed = shardTargetRefusal(ctx, spec, slot, whole, split);
  if (misaimed !== undefined) return misaimed;
  if (!record) {
    return ctx.refuse(
      { outcome: 'absent' },
      slot.shard === undefined
        ? `${spec.id} ${slot.window} has no slot record: nothing to release. If it was due, run it: ${backfillCommand(slot)}`
        : `${name} has no record yet: no run has claimed its message, so there is nothing to release. Nothing was written.`,
    );
  }
  const refusal = await releaseRefusal(ctx, { spec, slot, backend, record, whole, split });
  if (refusal !== undefined) return refusal;
  const deadline = ctx.now + ctx.deadlineMs(spec);
  const outcome = await operator.forceRelease(slot, {
    expectedEpoch: record.epoch,
    now: ctx.now,
    evenIfLeaseLive: force,
    deadline,
  });
  const before = `${record.state} at epoch ${record.epoch} (holder ${holderName(record.owner)})`;
  switch (outcome.kind) {
    case 'ok':
      return ctx.done(
        {
          outcome: 'released',
          ...(slot.shard !== undefined ? { shard: slot.shard } : {}),
          before: { state: record.state, epoch: record.epoch, holder: record.owner },
          after: { state: outcome.record.state, epoch: outcome.record.epoch, deadline: iso(deadline) },
        },
        `released ${name}: ${before} → RELEASED, deadline ${iso(deadline)}. ${afterRelease(spec.id, slot, record, whole, split)}`,
      );
    case 'absent':
      return ctx.refuseGone(slot);
    case 'refused': {
      const current = outcome.current;
      const why =
        outcome.reason === 'lease-live'
          ? `its holder ${holderName(current.owner)} has a live lease until ${new Date(current.leaseEndsAt).toISOString()}. ` +
            'Wait for it to end (a crashed holder is taken over then), or pass --force to fence the holder out ' +
            '(it stops at its next renewal; effects it reserved become in doubt)'
          : outcome.reason === 'epoch-moved'
            ? `it moved on to epoch ${current.epoch} (${current.state}) since it was read; look again: slotguard slots show --job ${spec.id} --window ${slot.window}`
            : current.state === SlotState.Done
              ? 'it is DONE; to run effects again, resolve them: slotguard effects resolve … --rerun'
              : current.state === SlotState.Partial
                ? `it is PARTIAL; to send its refused effects: slotguard effects redrive --job ${spec.id} --window ${slot.window}`
                : `it is ${current.state}, which needs no release`;
      return ctx.refuse(
        {
          outcome: 'refused',
          reason: outcome.reason,
          current: { state: current.state, epoch: current.epoch, holder: current.owner },
        },
        `refused to release ${name}: ${why}. Nothing was written.`,
      );
    }
    default:
      return outcome satisfies never;
  }
}

/** Refuses a `--shard` of a window that is not split, or that has no such shard. */
function shardTargetRefusal(
  ctx: CommandContext,
  spec: CatalogJob,
  slot: Slot,
  whole: SlotRecord | undefined,
  split: number | undefined,
): number | undefined {
  if (slot.shard === undefined) return undefined;
  if (split === undefined) {
    return ctx.refuse(
      { outcome: 'not-split' },
      `${spec.id} ${slot.window} is not split into shards (${whole ? 'its record says none' : 'it has no slot record'}); ` +
        'drop --shard to release the window itself. Nothing was written.',
    );
  }
  if (slot.shard >= split) {
    return ctx.refuse(
      { outcome: 'no-such-shard', shards: split },
      `--shard is ${slot.shard}, but ${spec.id} ${slot.window} is split into ${split} shards, 0 to ${split - 1}. Nothing was written.`,
    );
  }
  return undefined;
}

/**
 * Why a release of a split window or one of its shards is refused before anything is written, or
 * undefined when it may go ahead: a SHARDED window (its shards run it); a STUCK or FAILED shard of a
 * window still SHARDED (its message is gone, and the window could not be released to run it again
 * until its other shards end); a STUCK split window with shards still STUCK or FAILED (splitting it
 * again would find them so, and it would go STUCK again at once).
 */
async function releaseRefusal(
  ctx: CommandContext,
  target: {
    readonly spec: CatalogJob;
    readonly slot: Slot;
    readonly backend: CliBackend;
    readonly record: SlotRecord;
    readonly whole: SlotRecord | undefined;
    readonly split: number | undefined;
  },
): Promise<number | undefined> {
  const { spec, slot, backend, record, whole, split } = target;
  const show = `slotguard slots show --job ${spec.id} --window ${slot.window}`;
  if (slot.shard === undefined && record.state === SlotState.Sharded) {
    return ctx.refuse(
      { outcome: 'refused', reason: 'sharded', current: { state: record.state, epoch: record.epoch } },
      `refused to release ${spec.id} ${slot.window}: it is SHARDED, and its shards run it ` +
        `(${record.finishedShards?.length ?? 0} of ${split ?? '?'} finished). Release a shard whose run is gone or stuck ` +
        `with --shard N (${show} lists them). Nothing was written.`,
    );
  }
  const ended = record.state === SlotState.Stuck || record.state === SlotState.Failed;
  if (slot.shard !== undefined && ended && whole?.state === SlotState.Sharded) {
    return ctx.refuse(
      { outcome: 'refused', reason: 'window-sharded', current: { state: record.state, epoch: record.epoch } },
      `refused to release ${spec.id} ${slot.window} shard ${slot.shard}: it is ${record.state} and its message is gone, ` +
        `while its window is still SHARDED (${whole.finishedShards?.length ?? 0} of ${split} shards finished). When the ` +
        'last shard ends, the window goes STUCK naming this one; then release this shard and the window, and deliver ' +
        `the window, which splits it again (${show} says so then). Nothing was written.`,
    );
  }
  if (slot.shard === undefined && split !== undefined && record.state === SlotState.Stuck) {
    const shards = await readShards(backend, slot, split);
    const stuck = shards.flatMap((shard, i) =>
      shard?.state === SlotState.Stuck || shard?.state === SlotState.Failed ? [i] : [],
    );
    if (stuck.length > 0) {
      return ctx.refuse(
        { outcome: 'refused', reason: 'shards-stuck', shards: stuck },
        `refused to release ${spec.id} ${slot.window}: its shard${stuck.length === 1 ? '' : 's'} ${stuck.join(', ')} ` +
          `${stuck.length === 1 ? 'is' : 'are'} still STUCK or FAILED, and splitting the window again would find ` +
          `${stuck.length === 1 ? 'it' : 'them'} so: it would go STUCK again at once. Release ` +
          `${stuck.length === 1 ? 'it' : 'each'} first: ${stuck
            .map(
              (shard) => `slotguard slots release --job ${spec.id} --window ${slot.window} --shard ${shard}`,
            )
            .join('; ')}. Nothing was written.`,
      );
    }
  }
  return undefined;
}

/** What happens next to a slot just released, and the command that hurries it. */
function afterRelease(
  jobId: string,
  slot: Slot,
  before: SlotRecord,
  whole: SlotRecord | undefined,
  split: number | undefined,
): string {
  const window = windowSlot(slot);
  if (slot.shard === undefined && split === undefined) {
    return (
      `The next delivery claims it at epoch ${before.epoch + 1}, resumes from its checkpoint and skips every effect ` +
      `done; to deliver it now: ${backfillCommand(window)}`
    );
  }
  if (slot.shard === undefined) {
    return (
      `The next delivery claims it at epoch ${before.epoch + 1} and splits it again into ${split} shards: the shards ` +
      `that finished stand down, the released ones resume from their checkpoints; to deliver it now: ${backfillCommand(window)}`
    );
  }
  if (whole?.state === SlotState.Sharded) {
    return (
      `Its message is still in the work queue: its next delivery claims it at epoch ${before.epoch + 1}, resumes from ` +
      'its checkpoint and skips every effect done.'
    );
  }
  return (
    `Its window is ${whole?.state ?? 'gone'}: release the window too, then deliver it; its next run splits it again ` +
    `and this shard resumes at epoch ${before.epoch + 1} from its checkpoint: ` +
    `slotguard slots release --job ${jobId} --window ${slot.window}, then ${backfillCommand(window)}`
  );
}

function describeState(view: SlotView): string {
  const problems = view.problems.length ? `  [${view.problems.join(', ')}]` : '';
  if (view.state === SlotState.Running)
    return `${view.leaseLive ? 'RUNNING (lease live)' : 'RUNNING (lease ended: the holder crashed or froze)'}${problems}`;
  if (view.resumeAfter) return `RELEASED (waiting until ${view.resumeAfter})${problems}`;
  return `${view.state}${problems}`;
}

/** `customers at "6200", walk not finished` */
function describeCheckpoint(checkpoint: Checkpoint): string {
  const positions = Object.entries(checkpoint.positions).map(
    ([source, at]) => `${source} at ${JSON.stringify(at)}`,
  );
  const where = positions.length > 0 ? positions.join(', ') : 'no resumable source';
  return `${where}; ${checkpoint.walked ? 'walked to the end (only retries left)' : 'walk not finished'}`;
}

/** `in 5 h 40 min` or `passed 2 h ago` */
function untilOrAgo(instant: string, now: number): string {
  const delta = Date.parse(instant) - now;
  return delta >= 0 ? `in ${duration(delta)}` : `passed ${duration(-delta)} ago`;
}

function jsonSlot(view: SlotView) {
  return {
    window: view.window,
    ...(view.shard !== undefined ? { shard: view.shard } : {}),
    local: view.local,
    state: view.state,
    holder: view.holder ?? null,
    epoch: view.epoch ?? null,
    leaseEndsAt: view.leaseEndsAt ?? null,
    leaseLive: view.leaseLive,
    attempts: view.attempts ?? null,
    failures: view.failures ?? null,
    backfilled: view.backfilled,
    delivery: view.delivery ?? null,
    completedAt: view.completedAt ?? null,
    summary: view.summary ?? null,
    lastError: view.lastError ?? null,
    deadline: view.deadline ?? null,
    pastDeadline: view.pastDeadline,
    resumeAfter: view.resumeAfter ?? null,
    checkpoint: view.checkpoint ?? null,
    progress: view.progress ?? null,
    runsWithoutProgress: view.runsWithoutProgress ?? null,
    shards: view.shards ?? null,
    effectCounts: {
      done: view.effects.done.length,
      inDoubt: view.effects.inDoubt.length,
      inFlight: view.effects.inFlight.length,
      failed: view.effects.failed.length,
    },
    problems: view.problems,
  };
}
