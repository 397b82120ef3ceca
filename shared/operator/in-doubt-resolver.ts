import type { OperatorStore } from '../slot/operator-ports.js';
import {
  type ClaimStore,
  type EffectLedger,
  type EffectRecord,
  EffectState,
  type ProviderWord,
  type SlotRecord,
  SlotState,
  TERMINAL_SLOT_STATES,
} from '../slot/ports.js';
import { type Slot, windowSlot } from '../slot/slot.js';
import type { Log } from '../telemetry/log.js';

/**
 * Settling the effects a finished window left in doubt from the provider's word, after the window's
 * own runs are over: `slotguard effects resolve --auto`, and the watchdog's safe half. A window's
 * runs settle what the provider said before the window finishes (shared/job/in-doubt-resolution.ts);
 * this is for the words that came later, and for windows that finished before the words were recorded.
 */

/** The stores the resolver reads and writes: a slot's record, the window's effects, the operator's writes. */
export interface InDoubtResolverStores {
  readonly claims: Pick<ClaimStore, 'read'>;
  readonly ledger: Pick<EffectLedger, 'list'>;
  readonly operator: Pick<OperatorStore, 'resolveEffect'>;
}

/** How much of the provider's word the resolver acts on. */
export const ResolverScope = {
  /**
   * Accepted → done; rejected → cleared (the window reopened if it was DONE or PARTIAL) so the
   * window's next run sends it again, as `effects resolve --rerun` does. `effects resolve --auto`.
   */
  All: 'all',
  /** Accepted → done, and nothing else: nothing is ever made to be sent again. The watchdog's. */
  ConfirmOnly: 'confirm-only',
} as const;
export type ResolverScope = (typeof ResolverScope)[keyof typeof ResolverScope];

/** What became of one effect found in doubt. */
export const InDoubtOutcome = {
  /** The provider accepted its message: recorded done, never sent again. */
  MarkedDone: 'marked-done',
  /** The provider did not accept it: its reservation cleared, so the window's next run sends it. */
  Rerun: 'rerun',
  /** The provider did not accept it, and this scope sends nothing again: left for `effects resolve --auto`. */
  Rejected: 'rejected',
  /** No word from the provider about this reservation: left in doubt. */
  InDoubt: 'in-doubt',
  /** Not written: a run holds it under a live lease, its window is split, or the slot moved on. */
  Refused: 'refused',
  /** No longer in doubt when written: another resolver or an operator settled it meanwhile. */
  MovedOn: 'moved-on',
} as const;
export type InDoubtOutcome = (typeof InDoubtOutcome)[keyof typeof InDoubtOutcome];

/** Why an effect was not written. */
export type InDoubtRefusal =
  /** The run that reserved it (its window's, or its shard's) holds a live lease: it is under way. */
  | 'lease-live'
  /**
   * A run holds the slot RUNNING past its lease, and a re-run is refused until it is released
   * (HolderRule). Not met on the finished windows the resolver writes to; passed on as the port says.
   */
  | 'running'
  /** Rejected, but the window is split into shards, whose finished ones would never send it. */
  | 'split-window'
  /** The slot's epoch moved since it was read: a run claimed it. */
  | 'epoch-moved'
  /** The slot's state does not allow the write, or the slot is gone. */
  | 'state';

/** One effect found in doubt, and what became of it. Hashes only: no address is ever stored. */
export interface InDoubtEffectResult {
  readonly keyHash: string;
  /** The epoch of the reservation left in doubt (its shard's epoch, in a split window). */
  readonly epoch: number;
  /** The shard whose run reserved it. @default absent: the window is not split */
  readonly shard?: number;
  readonly outcome: InDoubtOutcome;
  /** What the provider said of this reservation's message. @default absent: it said nothing */
  readonly word?: ProviderWord;
  /** When the reservation was made (epoch ms). @default absent: a record from before reservations were timed */
  readonly reservedAt?: number;
  /** Why it was not written. @default absent: it was written, or left alone */
  readonly refusal?: InDoubtRefusal;
  /** Who holds it, for a `lease-live` or `running` refusal. @default absent: another refusal, or none */
  readonly holder?: SlotRecord;
}

/** Each outcome, counted. */
export type InDoubtCounts = Readonly<Record<InDoubtOutcome, number>>;

/** What the resolver made of one window. */
export type WindowInDoubtResolution =
  | { readonly kind: 'absent' }
  /**
   * Not finished (RUNNING, RELEASED, SHARDED): its own runs settle what the provider said before
   * it finishes. `leaseLive` when a run holds it now.
   */
  | { readonly kind: 'not-finished'; readonly record: SlotRecord; readonly leaseLive: boolean }
  | {
      readonly kind: 'resolved';
      /** The window's record as read before any write: the writes were fenced on its epoch. */
      readonly record: SlotRecord;
      /** Every effect found in doubt, those the provider accepted first, in the order they were settled. */
      readonly effects: readonly InDoubtEffectResult[];
      readonly counts: InDoubtCounts;
      /** A re-run reopened the DONE or PARTIAL window (RELEASED, same epoch): its next delivery runs it. */
      readonly slotReopened: boolean;
    };

/** What resolveWindowInDoubt needs. */
export interface ResolveWindowInDoubtArgs {
  readonly stores: InDoubtResolverStores;
  /** The window (a shard's index, if given, is ignored: the window's effects are every shard's). */
  readonly slot: Slot;
  readonly scope: ResolverScope;
  /** The caller's clock reading (epoch ms): leases are judged by it. */
  readonly now: number;
  /**
   * The deadline a window reopened for a re-run is given (epoch ms), usually now plus the job's.
   * @default the window keeps the deadline its first claim stored, long past by now
   */
  readonly deadline?: number;
  /** Where each resolution is logged, by the effect's hash. */
  readonly log: Log;
  /** Who resolves, in each log line: `operator`, `watchdog`. */
  readonly by: string;
}

/**
 * Settles the effects a finished window (DONE, PARTIAL, STUCK or FAILED: no run will come to settle
 * them) left in doubt, each by what the provider said of its own reservation's message (a word of
 * another epoch says nothing about it):
 * - accepted: marked done through the operator port (fenced on the window's epoch as read, and on
 *   that exact reservation), which also moves it from in doubt to done in the window's summary;
 * - rejected: with ResolverScope.All, cleared through the operator port as `effects resolve --rerun`
 *   does (a DONE or PARTIAL window is reopened; its next delivery sends it, once: nothing delivers
 *   a finished window by itself, so the caller says how to); refused for a window split into
 *   shards, whose finished shards would stand down without sending it. With
 *   ResolverScope.ConfirmOnly, left and reported;
 * - no word: left in doubt, reported with its reservation time. Nothing is sent again without a word:
 *   re-sending after a grace period is the window's runs' policy, not the resolver's.
 * An effect whose run still holds a live lease (a shard running again) is refused, not touched.
 * Every resolution is logged by hash; the counts are the caller's to emit.
 * @throws StoreError when a store does not answer; what was written before stays written
 * @example const result = await resolveWindowInDoubt({ stores, slot, scope: 'all', now, deadline, log, by: 'operator' });
 */
export async function resolveWindowInDoubt(args: ResolveWindowInDoubtArgs): Promise<WindowInDoubtResolution> {
  const { stores, now, log, by } = args;
  const slot = windowSlot(args.slot);
  const record = await stores.claims.read(slot);
  if (!record) return { kind: 'absent' };
  if (!TERMINAL_SLOT_STATES.includes(record.state)) {
    return { kind: 'not-finished', record, leaseLive: leaseIsLive(record, now) };
  }

  const reserved: EffectRecord[] = [];
  for await (const effect of stores.ledger.list(slot)) {
    if (effect.state === EffectState.Reserved) reserved.push(effect);
  }
  // Confirmations first: they count in the summary only while the window is still finished, and a
  // re-run reopens it.
  const order = (effect: EffectRecord) =>
    ({ accepted: 0, rejected: 1, none: 2 })[wordOf(effect)?.outcome ?? 'none'];
  reserved.sort((a, b) => order(a) - order(b));

  const effects: InDoubtEffectResult[] = [];
  let slotReopened = false;
  for (const effect of reserved) {
    const result = await settle(args, slot, record, effect);
    effects.push(result.effect);
    slotReopened ||= result.slotReopened;
    logResult(log, slot, by, result.effect);
  }
  return { kind: 'resolved', record, effects, counts: countOutcomes(effects), slotReopened };
}

/** The effects counted by outcome, zero included: one window's, or several windows' together. */
export function countOutcomes(effects: readonly InDoubtEffectResult[]): InDoubtCounts {
  const counts = Object.fromEntries(Object.values(InDoubtOutcome).map((o) => [o, 0])) as Record<
    InDoubtOutcome,
    number
  >;
  for (const effect of effects) counts[effect.outcome]++;
  return counts;
}

/**
 * The live lease over an effect in doubt of a split window: its shard's record, when the very run
 * that reserved it (same shard, same epoch) still holds that shard under a lease that has not ended.
 * Such an effect is under way, not in doubt: no operator write may touch it. The window's own record
 * holds no lease once split, so its operator writes cannot see this.
 */
export async function liveShardHolding(
  claims: Pick<ClaimStore, 'read'>,
  window: Slot,
  effect: EffectRecord,
  now: number,
): Promise<SlotRecord | undefined> {
  if (effect.shard === undefined) return undefined;
  const shard = await claims.read({ ...windowSlot(window), shard: effect.shard });
  return shard && leaseIsLive(shard, now) && shard.epoch === effect.epoch ? shard : undefined;
}

/** What the provider said of this very reservation's message, if anything. */
function wordOf(effect: EffectRecord): ProviderWord | undefined {
  return effect.provider?.epoch === effect.epoch ? effect.provider : undefined;
}

function leaseIsLive(record: SlotRecord, now: number): boolean {
  return record.state === SlotState.Running && record.leaseEndsAt >= now;
}

async function settle(
  args: ResolveWindowInDoubtArgs,
  slot: Slot,
  record: SlotRecord,
  effect: EffectRecord,
): Promise<{ effect: InDoubtEffectResult; slotReopened: boolean }> {
  const word = wordOf(effect);
  const found: InDoubtEffectResult = {
    keyHash: effect.keyHash,
    epoch: effect.epoch,
    ...(effect.shard !== undefined ? { shard: effect.shard } : {}),
    ...(word ? { word } : {}),
    ...(effect.reservedAt !== undefined ? { reservedAt: effect.reservedAt } : {}),
    outcome: InDoubtOutcome.InDoubt,
  };
  const left = (outcome: InDoubtOutcome, refusal?: InDoubtRefusal, holder?: SlotRecord) => ({
    effect: { ...found, outcome, ...(refusal ? { refusal } : {}), ...(holder ? { holder } : {}) },
    slotReopened: false,
  });
  if (!word) return left(InDoubtOutcome.InDoubt);
  const rerun = word.outcome === 'rejected';
  if (rerun && args.scope === ResolverScope.ConfirmOnly) return left(InDoubtOutcome.Rejected);
  if (rerun && (record.shards ?? 1) > 1) return left(InDoubtOutcome.Refused, 'split-window');
  const holder = await liveShardHolding(args.stores.claims, slot, effect, args.now);
  if (holder) return left(InDoubtOutcome.Refused, 'lease-live', holder);

  const outcome = await args.stores.operator.resolveEffect(slot, effect.keyHash, rerun ? 'clear' : 'done', {
    expectedEpoch: record.epoch,
    now: args.now,
    ...(rerun && args.deadline !== undefined ? { deadline: args.deadline } : {}),
  });
  switch (outcome.kind) {
    case 'resolved':
      return {
        effect: { ...found, outcome: rerun ? InDoubtOutcome.Rerun : InDoubtOutcome.MarkedDone },
        slotReopened: outcome.slotReopened,
      };
    case 'effect-absent':
    case 'effect-not-in-doubt':
      return left(InDoubtOutcome.MovedOn);
    case 'refused':
      return left(
        InDoubtOutcome.Refused,
        outcome.reason,
        outcome.reason === 'lease-live' || outcome.reason === 'running' ? outcome.current : undefined,
      );
    case 'absent':
      return left(InDoubtOutcome.Refused, 'state');
    default:
      return outcome satisfies never;
  }
}

function logResult(log: Log, slot: Slot, by: string, effect: InDoubtEffectResult): void {
  const fields = {
    window: slot.window,
    keyHash: effect.keyHash,
    epoch: effect.epoch,
    ...(effect.shard !== undefined ? { shard: effect.shard } : {}),
    by,
  };
  const word = effect.word;
  switch (effect.outcome) {
    case InDoubtOutcome.MarkedDone:
      log.info('in-doubt effect confirmed by the provider after its window finished: marked done', {
        ...fields,
        event: word?.event,
        messageId: word?.messageId,
      });
      return;
    case InDoubtOutcome.Rerun:
      log.info(
        "in-doubt effect rejected by the provider: cleared, sent by the window's next run once the window is delivered",
        {
          ...fields,
          event: word?.event,
        },
      );
      return;
    case InDoubtOutcome.Rejected:
      log.warn('in-doubt effect rejected by the provider: left for slotguard effects resolve --auto', {
        ...fields,
        event: word?.event,
      });
      return;
    case InDoubtOutcome.Refused:
      log.warn('in-doubt effect with a word from the provider not resolved: refused', {
        ...fields,
        event: word?.event,
        refusal: effect.refusal,
      });
      return;
    case InDoubtOutcome.InDoubt:
    case InDoubtOutcome.MovedOn:
      // No resolution: what is still in doubt is the caller's to report, once per window.
      return;
    default:
      effect.outcome satisfies never;
  }
}
