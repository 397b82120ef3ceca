import { EffectResolution } from '../shared/slot/operator-ports.js';
import { windowOf } from '../shared/slot/slot.js';
import { usageError } from './cli-support.js';
import type { CommandContext } from './command.js';
import { holderName, windowNote } from './slot-view.js';

const KEY_HASH = /^[0-9a-f]{8,64}$/;

/**
 * `effects resolve`: an effect left in doubt is marked done (the provider's log shows it went) or
 * cleared for a re-run (it did not), fenced on the slot's epoch as just read.
 */
export async function effectsResolve(ctx: CommandContext): Promise<number> {
  const { spec, schedule } = ctx.job();
  const window = ctx.window();
  const keyHash = ctx.text('key')?.toLowerCase();
  if (!keyHash || !KEY_HASH.test(keyHash)) {
    throw usageError(
      `--key is ${keyHash === undefined ? 'missing' : JSON.stringify(keyHash)}; give the effect's hash as ` +
        '`slotguard slots show` lists it (hex, e.g. 9f2c41d0…); addresses are never stored',
    );
  }
  const markDone = ctx.flag('mark-done');
  const rerun = ctx.flag('rerun');
  if (markDone === rerun) {
    throw usageError(
      'give exactly one of --mark-done (the effect happened) or --rerun (it did not: run it again)',
    );
  }
  const note = windowNote(spec, window, schedule);
  if (note) ctx.warn(note);
  const backend = await ctx.backend(spec.id);
  const operator = ctx.operator(backend);
  const slot = { jobId: spec.id, window: windowOf(window) };
  const record = await backend.slots.claims.read(slot);
  if (!record)
    return ctx.refuse(
      { outcome: 'absent' },
      `${spec.id} ${slot.window} has no slot record; nothing to resolve`,
    );
  const resolution = markDone ? EffectResolution.Done : EffectResolution.Clear;
  const outcome = await operator.resolveEffect(slot, keyHash, resolution, {
    expectedEpoch: record.epoch,
    now: ctx.now,
  });
  const backfill = `slotguard backfill --job ${spec.id} --from ${slot.window} --to ${windowOf(window + 60_000)}`;
  switch (outcome.kind) {
    case 'resolved': {
      const json = {
        outcome: 'resolved',
        resolution,
        keyHash,
        reservedAtEpoch: outcome.before.epoch,
        slotReopened: outcome.slotReopened,
      };
      if (resolution === 'done') {
        return ctx.done(
          json,
          `marked ${keyHash} done in ${spec.id} ${slot.window}: no run will perform it again.`,
        );
      }
      const next = outcome.slotReopened
        ? `The slot was DONE and is reopened (RELEASED at epoch ${record.epoch}); to perform it now: ${backfill}`
        : record.state === 'DONE'
          ? `The slot moved on before it could be reopened; look again: slotguard slots show --job ${spec.id} --window ${slot.window}`
          : `The next delivery of the window performs it; to deliver now: ${backfill}`;
      return ctx.done(json, `cleared ${keyHash} in ${spec.id} ${slot.window}. ${next}`);
    }
    case 'absent':
      return ctx.refuse(
        { outcome: 'absent' },
        `${spec.id} ${slot.window} has no slot record any more; nothing was written`,
      );
    case 'effect-absent':
      return ctx.refuse(
        { outcome: 'effect-absent' },
        `${spec.id} ${slot.window} has no effect ${keyHash}; list its effects: slotguard slots show --job ${spec.id} --window ${slot.window}`,
      );
    case 'effect-not-in-doubt':
      return ctx.refuse(
        { outcome: 'not-in-doubt', current: outcome.current },
        `${keyHash} is not in doubt: it is ${outcome.current.state} (epoch ${outcome.current.epoch}); nothing was written`,
      );
    case 'refused': {
      const current = outcome.current;
      const why =
        outcome.reason === 'lease-live'
          ? `a run (${holderName(current.owner)}, epoch ${current.epoch}) holds the slot until ${new Date(current.leaseEndsAt).toISOString()}; wait for it to end`
          : `the slot moved on to epoch ${current.epoch} (${current.state}) since it was read; look again`;
      return ctx.refuse(
        {
          outcome: 'refused',
          reason: outcome.reason,
          current: { state: current.state, epoch: current.epoch },
        },
        `refused to resolve ${keyHash}: ${why}. Nothing was written.`,
      );
    }
    default:
      return outcome satisfies never;
  }
}
