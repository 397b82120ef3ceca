import { liveShardHolding } from '../shared/operator/in-doubt-resolver.js';
import { EffectResolution } from '../shared/slot/operator-ports.js';
import type { SlotRecord } from '../shared/slot/ports.js';
import { effectsResolveAuto, SPLIT_WINDOW_RERUN } from './auto-resolve-command.js';
import { CliError, iso, usageError } from './cli-support.js';
import type { CommandContext } from './command.js';
import { backfillCommand, holderName, releaseCommand } from './slot-view.js';
import { assertDeliverable, deliverWindows, type WindowDelivery } from './window-delivery.js';

const KEY_HASH = /^[0-9a-f]{8,64}$/;

/**
 * `effects resolve`: an effect left in doubt is marked done (the provider's log shows it went) or
 * cleared for a re-run (it did not), fenced on the slot's epoch as just read; with `--auto`, every
 * effect finished windows left in doubt, by the provider's word on its record (effectsResolveAuto).
 */
export async function effectsResolve(ctx: CommandContext): Promise<number> {
  const auto = ctx.flag('auto');
  const byHand = ['mark-done', 'rerun', 'key'].filter((name) => ctx.values[name] !== undefined);
  if (auto && byHand.length > 0) {
    throw usageError(
      `--auto is given with ${byHand.map((name) => `--${name}`).join(' and ')}: --auto decides every effect in doubt ` +
        "from the provider's word, --key with --mark-done or --rerun decides one yourself; give one or the other",
    );
  }
  if (auto) return effectsResolveAuto(ctx);
  const ranged = ['from', 'to'].filter((name) => ctx.values[name] !== undefined);
  if (ranged.length > 0) {
    throw usageError(
      `${ranged.map((name) => `--${name}`).join(' and ')} select windows for --auto only; --key resolves one ` +
        'effect of one --window',
    );
  }
  if (ctx.values.grace !== undefined) {
    throw usageError(
      '--grace is for --auto only (how long the provider may stay silent); with --key, --mark-done or --rerun is your own call',
    );
  }
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
  const { spec, slot, backend, operator, record } = await ctx.repairTarget();
  if (!record)
    return ctx.refuse(
      { outcome: 'absent' },
      `${spec.id} ${slot.window} has no slot record; nothing to resolve`,
    );
  const resolution = markDone ? EffectResolution.Done : EffectResolution.Clear;
  if ((record.shards ?? 1) > 1) {
    if (resolution === EffectResolution.Clear) {
      return ctx.refuse(
        { outcome: 'refused', reason: 'split-window', shards: record.shards },
        `refused to clear ${keyHash} in ${spec.id} ${slot.window}: the window is split into ${record.shards} shards, ` +
          `and ${SPLIT_WINDOW_RERUN}. If the provider shows it went, --mark-done is safe. Nothing was written.`,
      );
    }
    // The store fences the write on the window's record, which holds no lease once split: the shard
    // that reserved the effect may be sending it right now. Its own lease is checked here instead.
    const effect = await backend.slots.ledger.read(slot, keyHash);
    const shard = effect && (await liveShardHolding(backend.slots.claims, slot, effect, ctx.now));
    if (effect && shard) {
      return ctx.refuse(
        { outcome: 'refused', reason: 'lease-live', shard: effect.shard },
        `refused to resolve ${keyHash}: shard ${effect.shard}'s run (${holderName(shard.owner)}, epoch ${shard.epoch}) ` +
          `reserved it and holds its lease until ${new Date(shard.leaseEndsAt).toISOString()}: it is under way, not in ` +
          'doubt; wait for the lease to end. Nothing was written.',
      );
    }
  }
  const outcome = await operator.resolveEffect(slot, keyHash, resolution, {
    expectedEpoch: record.epoch,
    now: ctx.now,
    // Used when a clear reopens the window: its old deadline has long passed.
    deadline: ctx.now + ctx.deadlineMs(spec),
  });
  const backfill = backfillCommand(slot);
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
      const finished = record.state === 'DONE' || record.state === 'PARTIAL';
      const next = outcome.slotReopened
        ? `The slot was ${record.state} and is reopened (RELEASED at epoch ${record.epoch}); to perform it now: ${backfill}`
        : finished
          ? `The slot moved on before it could be reopened; look again: slotguard slots show --job ${spec.id} --window ${slot.window}`
          : `The next delivery of the window performs it; to deliver now: ${backfill}`;
      return ctx.done(json, `cleared ${keyHash} in ${spec.id} ${slot.window}. ${next}`);
    }
    case 'absent':
      return ctx.refuseGone(slot);
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
          : outcome.reason === 'running'
            ? releaseFirst(
                current,
                'check the provider again (what it reserved is in doubt now) and resolve it',
              )
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

/**
 * `effects redrive`: clears a window's refused (FAILED) effects, every one or the `--key`s named,
 * gives the slot back RELEASED with a fresh deadline (PARTIAL, STUCK, DONE, FAILED or RELEASED;
 * refused while a run holds it RUNNING), and delivers the window again as `backfill` does. The
 * next run skips what is done, leaves what is in doubt, and performs the cleared effects: they were
 * refused before they were performed, so this is their first time.
 */
export async function effectsRedrive(ctx: CommandContext): Promise<number> {
  const keys = ctx.list('key').map((key) => key.toLowerCase());
  const malformed = keys.find((key) => !KEY_HASH.test(key));
  if (malformed !== undefined) {
    throw usageError(
      `--key is ${JSON.stringify(malformed)}; give a refused effect's hash as \`slotguard slots show\` lists it ` +
        '(hex, e.g. 9f2c41d0…), or no --key for every refused effect of the window',
    );
  }
  assertDeliverable(ctx, 'effects redrive');
  const { spec, slot, backend, operator, record } = await ctx.repairTarget();
  if (!record) {
    return ctx.refuse(
      { outcome: 'absent' },
      `${spec.id} ${slot.window} has no slot record: nothing to re-drive. If it was due, run it: ${backfillCommand(slot)}`,
    );
  }
  if ((record.shards ?? 1) > 1) {
    return ctx.refuse(
      { outcome: 'refused', reason: 'split-window', shards: record.shards },
      `refused to re-drive ${spec.id} ${slot.window}: the window is split into ${record.shards} shards, and ` +
        `${SPLIT_WINDOW_RERUN}. Its refused effects stay listed (slotguard slots show). Nothing was written.`,
    );
  }
  const deadline = ctx.now + ctx.deadlineMs(spec);
  const outcome = await operator.redrive(slot, {
    expectedEpoch: record.epoch,
    now: ctx.now,
    deadline,
    ...(keys.length > 0 ? { keyHashes: keys } : {}),
  });
  switch (outcome.kind) {
    case 'absent':
      return ctx.refuseGone(slot);
    case 'effects-not-failed':
      return ctx.refuse(
        {
          outcome: 'effects-not-failed',
          effects: outcome.effects.map(({ keyHash, current }) => ({
            keyHash,
            state: current?.state ?? null,
          })),
        },
        `refused to re-drive ${spec.id} ${slot.window}: ` +
          outcome.effects
            .map(
              ({ keyHash, current }) =>
                `${keyHash} is ${current ? current.state : 'not an effect of the window'}`,
            )
            .join('; ') +
          `. Only refused (FAILED) effects are re-driven; list them: slotguard slots show --job ${spec.id} ` +
          `--window ${slot.window}. Nothing was written.`,
      );
    case 'refused': {
      const current = outcome.current;
      const why =
        outcome.reason === 'lease-live'
          ? `a run (${holderName(current.owner)}, epoch ${current.epoch}) holds it until ${new Date(current.leaseEndsAt).toISOString()}; wait for it to end`
          : outcome.reason === 'running'
            ? releaseFirst(current, 're-drive it')
            : `it moved on to epoch ${current.epoch} (${current.state}) since it was read; look again: slotguard slots show --job ${spec.id} --window ${slot.window}`;
      const cleared =
        outcome.cleared.length > 0
          ? ` ${outcome.cleared.length} refused effects were cleared before it moved on: the run at epoch ${current.epoch} performs them.`
          : ' Nothing was written.';
      return ctx.refuse(
        {
          outcome: 'refused',
          reason: outcome.reason,
          current: { state: current.state, epoch: current.epoch },
          cleared: outcome.cleared.map((e) => e.keyHash),
        },
        `refused to re-drive ${spec.id} ${slot.window}: ${why}.${cleared}`,
      );
    }
    case 'redriven':
      break;
    default:
      return outcome satisfies never;
  }

  const delivery: WindowDelivery = { window: new Date(slot.window) };
  const reopened = `${record.state} at epoch ${record.epoch} → RELEASED, deadline ${iso(deadline)}`;
  try {
    await deliverWindows(ctx, 'redrive', spec.id, backend, [delivery]);
  } catch (error) {
    if (!(error instanceof CliError)) throw error;
    throw new CliError(
      error.exitCode,
      `${spec.id} ${slot.window} was re-driven (${reopened}) but not delivered: ${error.message} ` +
        `Deliver it once that is fixed: ${backfillCommand(slot)} --function NAME`,
      { cause: error },
    );
  }
  const json = {
    outcome: 'redriven',
    before: { state: record.state, epoch: record.epoch },
    after: { state: outcome.record.state, epoch: outcome.record.epoch, deadline: iso(deadline) },
    cleared: outcome.cleared.map(({ keyHash, attempts, reason }) => ({ keyHash, attempts, reason })),
    delivery: {
      result: delivery.result ?? null,
      ok: delivery.ok === true,
      ...(delivery.report ? { state: delivery.report.state, epoch: delivery.report.epoch } : {}),
    },
  };
  const cleared =
    outcome.cleared.length === 0
      ? 'no refused effect to clear'
      : `cleared ${outcome.cleared.length} refused effects: ${outcome.cleared
          .slice(0, 10)
          .map((e) => `${e.keyHash} (${e.attempts} attempts, ${e.reason ?? 'unspecified'})`)
          .join(', ')}${outcome.cleared.length > 10 ? ', …' : ''}`;
  const text =
    `re-drove ${spec.id} ${slot.window}: ${reopened}; ${cleared}.\n` +
    `delivered: ${delivery.result ?? '-'}` +
    (ctx.text('function')
      ? `; see how it went: slotguard slots show --job ${spec.id} --window ${slot.window}`
      : '');
  if (delivery.ok) return ctx.done(json, text);
  return ctx.refuse(
    json,
    `${text}\nThe window did not finish DONE: slotguard slots show --job ${spec.id} --window ${slot.window} says why.`,
  );
}

/**
 * Why a write that deletes effect records waits for a release (the `running` refusal): a run still
 * holds the slot, or a shard of it, RUNNING past its lease. It may be frozen, not dead, and its late
 * checkpoint would mark what it sent done by number, over a reservation cleared meanwhile; a release
 * fences it.
 */
function releaseFirst(current: SlotRecord, then: string): string {
  const held = current.slot.shard === undefined ? 'the slot' : `shard ${current.slot.shard}`;
  return (
    `a run (${holderName(current.owner)}, epoch ${current.epoch}) still holds ${held} RUNNING. Its lease ended at ` +
    `${new Date(current.leaseEndsAt).toISOString()}, but it may be frozen, not dead, and an effect cleared under it ` +
    `could be sent twice. Release it first, which fences it out: ${releaseCommand(current.slot)}; then ${then}`
  );
}
