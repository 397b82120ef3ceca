import type { EffectItem, MemoryTable, SlotItem } from '../../shared/backends/memory/memory-table.js';
import type { MemoryRequest } from '../../shared/backends/memory/memory-transport.js';
import type { EffectKeyHasher } from '../../shared/effects/effect-key.js';
import { shardOfKeyHash } from '../../shared/effects/resumable-source.js';
import type { Checkpoint } from '../../shared/slot/ports.js';
import { EffectState, SlotState } from '../../shared/slot/ports.js';
import type { Slot } from '../../shared/slot/slot.js';
import { JOB_ID, type Scenario, shardRange, WINDOW } from './scenario.js';
import type { ActorRole, SimActor } from './sim-actor.js';
import { isCommitted } from './sim-network.js';

/** The one window every case is about. */
export const SLOT: Slot = { jobId: JOB_ID, window: WINDOW };

/** Shard `shard` of the window, or the window itself. */
export const slotOf = (shard: number | undefined): Slot => (shard === undefined ? SLOT : { ...SLOT, shard });

/** The slots whose runs walk the recipients: the window, or each of its shards when it is split. */
export function runSlots(scenario: Pick<Scenario, 'shards'>): Slot[] {
  return scenario.shards > 1 ? Array.from({ length: scenario.shards }, (_, shard) => slotOf(shard)) : [SLOT];
}

/** A slot's name in a violation: `the window`, or `shard 2`. */
export const slotLabel = (slot: Slot) => (slot.shard === undefined ? 'the window' : `shard ${slot.shard}`);

/** True for a slot state no run changes: DONE, PARTIAL, STUCK or FAILED. */
export const isTerminal = (state: SlotState | undefined) =>
  state === SlotState.Done ||
  state === SlotState.Partial ||
  state === SlotState.Stuck ||
  state === SlotState.Failed;

/**
 * Whether the runs of `shard` are to handle recipient `index`: every recipient is the window's when
 * it is not split; a split window's by the hash of the key (`by-key`) or by the range its source
 * reads (`source`, where a recipient at a boundary is two shards').
 */
export function ownsRecipient(
  scenario: Pick<Scenario, 'recipients' | 'shards' | 'split'>,
  hashKey: EffectKeyHasher,
  shard: number | undefined,
  index: number,
): boolean {
  if (shard === undefined) return true;
  if (scenario.split === 'source') {
    const { from, to } = shardRange(shard, scenario.shards, scenario.recipients.length);
    return index >= from && index < to;
  }
  return shardOfKeyHash(hashKey(scenario.recipients[index] ?? ''), scenario.shards) === shard;
}

/** The name the job's resumable source checkpoints under (the runtime's default). */
export const SOURCE_NAME = 'items';

/** Where recipient `index` stands in the job's resumable source: positions sort as the list does. */
export const positionOf = (index: number) => String(index).padStart(3, '0');

/** The recipient index a position stands for. */
export const indexOfPosition = (position: string) => Number(position);

/** A release the store committed, with what the releasing run could see. */
export interface ObservedRelease {
  /**
   * A yield (RELEASED for a continuation), STUCK, a failed run's (which counts a failure), or a
   * coordinator's handing the window to its shards.
   */
  readonly kind: 'yield' | 'stuck' | 'error' | 'sharded';
  /** The shard whose slot it released; undefined for the window. */
  readonly shard: number | undefined;
  readonly actor: string;
  readonly role: ActorRole;
  readonly epoch: number;
  readonly state: SlotState;
  /** Runs without progress on record after the release (a failed run's release leaves it as it was). */
  readonly noProgress: number;
  /** Its reason, for STUCK. */
  readonly lastError: string | undefined;
  /** True time, and the releasing process's clock, when it committed. */
  readonly at: number;
  readonly clockAt: number;
}

/**
 * The completion the store committed, with the ledger as the completing run last listed it: a
 * run's own (a slot's), or the finish of a split window by the run that ended its last shard.
 */
export interface ObservedCompletion {
  readonly actor: string;
  /** The epoch of the run that completed it; for a split window's finish, the coordinator's. */
  readonly epoch: number;
  readonly at: number;
  /** The completing process's clock when its tally read the ledger. */
  readonly listedAt: number | undefined;
  /** The ledger as the completing run's tally read it; undefined if it never listed it. */
  readonly ledger: ReadonlyMap<string, EffectItem> | undefined;
}

/** Counts of what the store saw, for the run's statistics. */
export interface StoreCounts {
  takeovers: number;
  /** Claims that handed their run a checkpoint with a position to resume from. */
  resumes: number;
  checkpoints: number;
  /** Reservations of a refused (FAILED) effect: its retry. */
  retriedRefusals: number;
  refusalsRecorded: number;
  /** Refusals recorded on the last allowed attempt: failed for good. */
  permanentFailures: number;
  /** Sends cancelled before they reached the provider, put back FAILED and due at once. */
  cancelled: number;
  /** Reservations deleted: the runner no longer deletes any, so this stays 0 unless something regresses. */
  unreserved: number;
  /** Takeovers of a shard's slot. */
  shardTakeovers: number;
  /** A shard's end refused because its window was not SHARDED yet (its coordinator had not marked it). */
  shardEndsBeforeSharded: number;
  /** A shard's end reported again after its window had finished (a repeated shard message). */
  shardEndsAfterFinish: number;
  /** Reservations that met another shard's record not yet done (a source that splits itself imperfectly). */
  keysMetByAnotherShard: number;
}

/**
 * Watches every request the store applies, as it applies it, for the rules that are about a moment
 * rather than the end: a checkpoint passes no item without an outcome on record (invariant 7); a
 * refused effect is reserved again only once its retry is due, and never once it failed for good
 * (invariant 6). It also keeps what the end-of-case invariants need: every release (with its runs
 * without progress), the completion and the ledger its tally read.
 */
export class StoreWatch {
  readonly violations: string[] = [];
  readonly releases: ObservedRelease[] = [];
  /** Every attempt to finish a split window (finishSharded), committed or not, in order. */
  readonly finishAttempts: { readonly actor: string; readonly committed: boolean }[] = [];
  readonly counts: StoreCounts = {
    takeovers: 0,
    resumes: 0,
    checkpoints: 0,
    retriedRefusals: 0,
    refusalsRecorded: 0,
    permanentFailures: 0,
    cancelled: 0,
    unreserved: 0,
    shardTakeovers: 0,
    shardEndsBeforeSharded: 0,
    shardEndsAfterFinish: 0,
    keysMetByAnotherShard: 0,
  };
  readonly #table: MemoryTable;
  readonly #scenario: Pick<Scenario, 'recipients' | 'shards' | 'split'>;
  readonly #hashKey: EffectKeyHasher;
  readonly #lists = new Map<string, { readonly at: number; readonly ledger: Map<string, EffectItem> }>();
  readonly #completions = new Map<string, ObservedCompletion>();
  readonly #checkedCheckpoints = new Map<string, string>();

  constructor(
    table: MemoryTable,
    scenario: Pick<Scenario, 'recipients' | 'shards' | 'split'>,
    hashKey: EffectKeyHasher,
  ) {
    this.#table = table;
    this.#scenario = scenario;
    this.#hashKey = hashKey;
  }

  /** The completion of `slot` the store committed (for the window, a split window's finish), if any. */
  completionOf(slot: Slot): ObservedCompletion | undefined {
    return this.#completions.get(slotLabel(slot));
  }

  /** `actor`'s request was applied to the table at true time `now`, with `reply`. */
  applied(actor: SimActor, request: MemoryRequest, reply: unknown, now: number): void {
    if (request.keyHash !== undefined && isCommitted(reply)) this.#effectWritten(actor, request, reply.old);
    switch (request.operation) {
      case 'list':
        this.#lists.set(actor.name, {
          at: actor.clock.now(),
          ledger: new Map(this.#table.listEffects(SLOT)),
        });
        return;
      case 'reserve': {
        if (isCommitted(reply)) {
          this.#reserved(actor, request, reply.old as EffectItem | undefined);
          return;
        }
        const current = request.keyHash ? this.#table.getEffect(SLOT, request.keyHash) : undefined;
        if (current && current.state !== EffectState.Done && current.shard !== request.slot.shard)
          this.counts.keysMetByAnotherShard++;
        return;
      }
      case 'recordFailure':
        if (isCommitted(reply)) {
          this.counts.refusalsRecorded++;
          const after = request.keyHash ? this.#table.getEffect(SLOT, request.keyHash) : undefined;
          if (after?.state === EffectState.Failed && after.retryAt === undefined)
            this.counts.permanentFailures++;
          if (after?.reason === 'cancelled') this.counts.cancelled++;
        }
        return;
      case 'unreserve':
        if (isCommitted(reply)) this.counts.unreserved++;
        return;
      case 'shardFinished':
        if (!isCommitted(reply)) {
          const state = this.#table.getSlot(SLOT)?.state;
          if (isTerminal(state)) this.counts.shardEndsAfterFinish++;
          else this.counts.shardEndsBeforeSharded++;
        }
        return;
      case 'claim':
      case 'renew':
      case 'checkpoint':
      case 'complete':
      case 'release':
        if (request.operation === 'complete' && !request.by) {
          // A split window's finish: no claim of its own, conditioned on SHARDED alone.
          this.finishAttempts.push({ actor: actor.name, committed: isCommitted(reply) });
        }
        if (isCommitted(reply)) this.#slotWritten(actor, request, reply.old as SlotItem | undefined, now);
        return;
      default:
        return;
    }
  }

  /**
   * Invariant 7 against the ledger as it is now: every recipient of `slot` (see ownsRecipient) at
   * or before its checkpoint's position has an outcome on record (DONE, RESERVED or FAILED).
   */
  checkpointProblems(slot: Slot, writtenBy: string): string[] {
    const stored = this.#table.getSlot(slot)?.checkpoint;
    if (stored === undefined) return [];
    const checkpoint = JSON.parse(stored) as Checkpoint;
    const problems: string[] = [];
    for (const [name, position] of Object.entries(checkpoint.positions)) {
      if (name !== SOURCE_NAME) {
        problems.push(`${writtenBy} checkpointed a source named '${name}', which the job does not walk`);
        continue;
      }
      const last = indexOfPosition(position);
      for (const [index, to] of this.#scenario.recipients.entries()) {
        if (index > last) break;
        if (!ownsRecipient(this.#scenario, this.#hashKey, slot.shard, index)) continue;
        if (!this.#table.getEffect(SLOT, this.#hashKey(to))) {
          problems.push(
            `the checkpoint of ${slotLabel(slot)} (position ${position}, ${writtenBy}) passes ${to} at position ` +
              `${positionOf(index)}, which has no outcome on record: a continuation would never send it`,
          );
        }
      }
    }
    return problems;
  }

  /** A record stays with the shard that first wrote it (the window's, unsplit): no other shard writes it. */
  #effectWritten(actor: SimActor, request: MemoryRequest, old: unknown): void {
    const before = old as EffectItem | undefined;
    const after = request.keyHash ? this.#table.getEffect(SLOT, request.keyHash) : undefined;
    if (before && after && before.shard !== after.shard) {
      this.violations.push(
        `${actor.name}'s ${request.operation} moved the record of ${request.keyHash} from ` +
          `${slotLabel(slotOf(before.shard))} to ${slotLabel(slotOf(after.shard))}`,
      );
    }
  }

  #reserved(actor: SimActor, request: MemoryRequest, before: EffectItem | undefined): void {
    if (before?.state !== EffectState.Failed) return;
    this.counts.retriedRefusals++;
    const who = `${actor.name} (epoch ${request.by?.epoch})`;
    if (before.retryAt === undefined) {
      this.violations.push(
        `${who} reserved ${request.keyHash} again after it failed for good (${before.attempts} attempts)`,
      );
    } else if (before.retryAt > actor.clock.now()) {
      this.violations.push(
        `${who} reserved ${request.keyHash} for a retry ${before.retryAt - actor.clock.now()} ms before its ` +
          'retryAt, by its own clock',
      );
    }
  }

  #slotWritten(actor: SimActor, request: MemoryRequest, before: SlotItem | undefined, now: number): void {
    const slot = request.slot;
    const after = this.#table.getSlot(slot);
    const epoch = request.by?.epoch ?? after?.epoch ?? 0;
    switch (request.operation) {
      case 'claim': {
        if (before?.state === SlotState.Running) {
          this.counts.takeovers++;
          if (slot.shard !== undefined) this.counts.shardTakeovers++;
        }
        const resumeFrom = before?.checkpoint ? (JSON.parse(before.checkpoint) as Checkpoint) : undefined;
        if (resumeFrom && Object.keys(resumeFrom.positions).length > 0) this.counts.resumes++;
        break;
      }
      case 'checkpoint':
        this.counts.checkpoints++;
        break;
      case 'release':
        if (after) {
          this.releases.push({
            kind:
              after.state === SlotState.Stuck
                ? 'stuck'
                : after.state === SlotState.Sharded
                  ? 'sharded'
                  : after.failures > (before?.failures ?? 0)
                    ? 'error'
                    : 'yield',
            shard: slot.shard,
            actor: actor.name,
            role: actor.role,
            epoch,
            state: after.state,
            noProgress: after.noProgress ?? 0,
            lastError: after.lastError,
            at: now,
            clockAt: actor.clock.now(),
          });
        }
        break;
      case 'complete': {
        const listed = this.#lists.get(actor.name);
        this.#completions.set(slotLabel(slot), {
          actor: actor.name,
          epoch,
          at: now,
          listedAt: listed?.at,
          ledger: listed?.ledger,
        });
        if (!request.by) this.violations.push(...this.#finishProblems(actor, after));
        break;
      }
      default:
        break;
    }
    const label = slotLabel(slot);
    if (after?.checkpoint !== undefined && after.checkpoint !== this.#checkedCheckpoints.get(label)) {
      this.#checkedCheckpoints.set(label, after.checkpoint);
      this.violations.push(
        ...this.checkpointProblems(slot, `written by ${actor.name}'s ${request.operation}, epoch ${epoch}`),
      );
    }
  }

  /** A split window finishes only once every shard has reached its end, and has been recorded as such. */
  #finishProblems(actor: SimActor, after: SlotItem | undefined): string[] {
    const problems: string[] = [];
    const finished = new Set(after?.finishedShards ?? []);
    for (let shard = 0; shard < this.#scenario.shards; shard++) {
      const state = this.#table.getSlot(slotOf(shard))?.state;
      if (!isTerminal(state) || !finished.has(shard)) {
        problems.push(
          `${actor.name} finished the window ${after?.state} while shard ${shard} was ${state ?? 'without a record'}` +
            `${finished.has(shard) ? '' : ' and not recorded as finished'}`,
        );
      }
    }
    return problems;
  }
}
