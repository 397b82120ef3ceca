import { drainConcurrently } from '../shared/effects/concurrent-drain.js';
import { type Checkpoint, SlotState } from '../shared/slot/ports.js';
import { windowOf } from '../shared/slot/slot.js';
import { duration } from '../shared/watchdog/window-audit.js';
import { count, ExitCode, iso, renderTable, usageError } from './cli-support.js';
import type { CommandContext } from './command.js';
import { backfillCommand, holderName, type SlotView, viewSlot, windowNote } from './slot-view.js';

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
      views[i] = await viewSlot(backend, spec, window.getTime(), ctx.now);
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
            [view.backfilled ? 'backfilled' : '', ...view.problems.filter((p) => p !== 'missed')]
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

/** `slots show`: one window's record, its delivery, its summary and its effects by state. */
export async function slotsShow(ctx: CommandContext): Promise<number> {
  const { spec, schedule } = await ctx.job();
  const window = ctx.window();
  const note = windowNote(spec, window, schedule);
  if (note) ctx.warn(note);
  const backend = await ctx.backend(spec.id);
  const view = await viewSlot(backend, spec, window, ctx.now);
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
  const lines = [`${spec.id} ${view.window} (${view.local})`, `  state        ${describeState(view)}`];
  if (view.state === 'MISSED' || view.state === 'UPCOMING') {
    lines.push(
      view.state === 'UPCOMING'
        ? '  Not due yet.'
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
    lines.push(`  waiting      for refused effects' retries: not resumed before ${view.resumeAfter}`);
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
      `  window       ${count(s.done)} done, ${count(s.inDoubt)} in doubt, ${count(s.failed)} failed, over ${count(s.runs)} runs`,
    );
  }
  if (view.lastError)
    lines.push(`  ${view.state === SlotState.Stuck ? 'stuck       ' : 'last error  '} ${view.lastError}`);
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
    for (const effect of inDoubt.slice(0, 20))
      lines.push(`    ${effect.keyHash}  reserved at epoch ${effect.epoch}`);
    if (inDoubt.length > 20) lines.push(`    … ${count(inDoubt.length - 20)} more; --json lists all`);
    lines.push(
      '  Check the provider (SES sending events) for each, then:',
      `    slotguard effects resolve --job ${spec.id} --window ${view.window} --key <hash> --mark-done   (it went)`,
      `    slotguard effects resolve --job ${spec.id} --window ${view.window} --key <hash> --rerun       (it did not)`,
    );
  }
  if (inFlight.length > 0)
    lines.push(
      `  under way (epoch ${view.epoch}): ${inFlight.slice(0, 10).join(' ')}${inFlight.length > 10 ? ' …' : ''}`,
    );
  if (done.length > 0)
    lines.push(
      `  done: ${done.slice(0, 5).join(' ')}${done.length > 5 ? ` … (${count(done.length - 5)} more; --json lists all)` : ''}`,
    );
  if (view.problems.includes('lease ended')) {
    lines.push(
      '',
      `  The holder's lease ended while RUNNING: it crashed or froze. The next delivery takes it over;`,
      `  to run it now: ${backfillCommand({ jobId: spec.id, window: view.window })}`,
    );
  }
  const redrive = `slotguard effects redrive --job ${spec.id} --window ${view.window}`;
  if (view.state === SlotState.Stuck) {
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
      `  them (a verified address, a raised quota), send them: ${redrive} [--key <hash> …]`,
    );
  }
  if (view.pastDeadline && view.state !== SlotState.Stuck) {
    lines.push(
      '',
      `  Past its deadline and not finished: the next run finishes it PARTIAL or STUCK. To give it more time: ${redrive}`,
    );
  }
  if (view.problems.includes('failed')) {
    lines.push(
      '',
      `  FAILED after ${view.failures} failed runs; fix the cause, then: slotguard slots release --job ${spec.id} --window ${view.window}`,
    );
  }
  ctx.print(lines.join('\n'));
  return view.problems.length === 0 ? ExitCode.Ok : ExitCode.Problem;
}

/**
 * `slots release`: gives a RUNNING (holder gone), FAILED or STUCK slot back, fenced on the epoch just
 * read, with a fresh deadline (now plus the job's), so its next run resumes instead of finding itself
 * late and going STUCK again.
 */
export async function slotsRelease(ctx: CommandContext): Promise<number> {
  const force = ctx.flag('force');
  const { spec, slot, operator, record } = await ctx.repairTarget();
  if (!record) {
    return ctx.refuse(
      { outcome: 'absent' },
      `${spec.id} ${slot.window} has no slot record: nothing to release. If it was due, run it: ${backfillCommand(slot)}`,
    );
  }
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
          before: { state: record.state, epoch: record.epoch, holder: record.owner },
          after: { state: outcome.record.state, epoch: outcome.record.epoch, deadline: iso(deadline) },
        },
        `released ${spec.id} ${slot.window}: ${before} → RELEASED, deadline ${iso(deadline)}. The next delivery claims it at ` +
          `epoch ${record.epoch + 1}, resumes from its checkpoint and skips every effect done; to deliver it now: ` +
          backfillCommand(slot),
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
        `refused to release ${spec.id} ${slot.window}: ${why}. Nothing was written.`,
      );
    }
    default:
      return outcome satisfies never;
  }
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
    effectCounts: {
      done: view.effects.done.length,
      inDoubt: view.effects.inDoubt.length,
      inFlight: view.effects.inFlight.length,
      failed: view.effects.failed.length,
    },
    problems: view.problems,
  };
}
