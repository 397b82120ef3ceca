import { drainConcurrently } from '../shared/effects/concurrent-drain.js';
import { SlotState } from '../shared/slot/ports.js';
import { windowOf } from '../shared/slot/slot.js';
import { count, ExitCode, renderTable, usageError } from './cli-support.js';
import type { CommandContext } from './command.js';
import { holderName, type SlotView, viewSlot, windowNote } from './slot-view.js';

/** The most windows one `slots list` reads. */
export const MAX_LISTED_WINDOWS = 1_000;

/**
 * `slots list`: the windows the job's schedule produced in [from, to), each with its slot record.
 * Listing by schedule, one GetItem per window, needs no Scan (which the functions' IAM lacks).
 */
export async function slotsList(ctx: CommandContext): Promise<number> {
  const { spec, schedule } = ctx.job();
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
  const { spec, schedule } = ctx.job();
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
          : `  No slot record: nothing claimed this window. Run it with: slotguard backfill --job ${spec.id} --from ${view.window} --to ${windowOf(window + 60_000)}`,
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
  if (view.summary) {
    const s = view.summary;
    lines.push(
      `  window       ${count(s.done)} done, ${count(s.inDoubt)} in doubt, ${count(s.failed)} failed, over ${count(s.runs)} runs`,
    );
  }
  if (view.lastError) lines.push(`  last error   ${view.lastError}`);
  const { done, inDoubt, inFlight } = view.effects;
  lines.push(
    '',
    `  effects: ${count(done.length)} done, ${count(inDoubt.length)} in doubt, ${count(inFlight.length)} under way`,
  );
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
  if (view.problems.includes('stuck')) {
    lines.push(
      '',
      `  The holder's lease ended while RUNNING: it crashed or froze. The next delivery takes it over;`,
      `  to run it now: slotguard backfill --job ${spec.id} --from ${view.window} --to ${windowOf(window + 60_000)}`,
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

/** `slots release`: gives a stuck or FAILED slot back, fenced on the epoch just read. */
export async function slotsRelease(ctx: CommandContext): Promise<number> {
  const { spec, schedule } = ctx.job();
  const window = ctx.window();
  const note = windowNote(spec, window, schedule);
  if (note) ctx.warn(note);
  const force = ctx.flag('force');
  const backend = await ctx.backend(spec.id);
  const operator = ctx.operator(backend);
  const slot = { jobId: spec.id, window: windowOf(window) };
  const record = await backend.slots.claims.read(slot);
  if (!record) {
    return ctx.refuse(
      { outcome: 'absent' },
      `${spec.id} ${slot.window} has no slot record: nothing to release. If it was due, run it: ` +
        `slotguard backfill --job ${spec.id} --from ${slot.window} --to ${windowOf(window + 60_000)}`,
    );
  }
  const outcome = await operator.forceRelease(slot, {
    expectedEpoch: record.epoch,
    now: ctx.now,
    evenIfLeaseLive: force,
  });
  const before = `${record.state} at epoch ${record.epoch} (holder ${holderName(record.owner)})`;
  switch (outcome.kind) {
    case 'ok':
      return ctx.done(
        {
          outcome: 'released',
          before: { state: record.state, epoch: record.epoch, holder: record.owner },
          after: { state: outcome.record.state, epoch: outcome.record.epoch },
        },
        `released ${spec.id} ${slot.window}: ${before} → RELEASED. The next delivery claims it at epoch ${record.epoch + 1}` +
          ` and skips every effect done; to deliver it now: slotguard backfill --job ${spec.id} --from ${slot.window} --to ${windowOf(window + 60_000)}`,
      );
    case 'absent':
      return ctx.refuse(
        { outcome: 'absent' },
        `${spec.id} ${slot.window} has no slot record any more; nothing was written`,
      );
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
  if (view.state === SlotState.Running)
    return view.leaseLive ? 'RUNNING (lease live)' : 'RUNNING (lease ended: stuck)';
  return `${view.state}${view.problems.length ? `  [${view.problems.join(', ')}]` : ''}`;
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
    effectCounts: {
      done: view.effects.done.length,
      inDoubt: view.effects.inDoubt.length,
      inFlight: view.effects.inFlight.length,
    },
    problems: view.problems,
  };
}
