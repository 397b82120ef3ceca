import {
  type EffectItem,
  effectiveItem,
  type MemoryTable,
  type SlotItem,
} from '../../shared/backends/memory/memory-table.js';
import type { MemoryRequest } from '../../shared/backends/memory/memory-transport.js';
import type { EffectKeyHasher } from '../../shared/effects/effect-key.js';
import { shardOfKeyHash } from '../../shared/effects/resumable-source.js';
import { coveredByMarks, parseDoneMarks, type WindowDoneMarks } from '../../shared/slot/done-marks.js';
import type { Checkpoint, EpochDoneMarks, ProviderWord } from '../../shared/slot/ports.js';
import { EffectState, SlotState } from '../../shared/slot/ports.js';
import type { Slot } from '../../shared/slot/slot.js';
import { afterGraceOf, graceOf, JOB_ID, type Scenario, shardRange, WINDOW } from './scenario.js';
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
  /** The table's version when its tally read the ledger: it saw every write up to it. */
  readonly listedVersion: number | undefined;
  /**
   * The ledger as the completing run's tally read it (a reservation the done marks it read cover
   * is DONE); undefined if it never listed it.
   */
  readonly ledger: ReadonlyMap<string, EffectItem> | undefined;
}

/**
 * A settle of an in-doubt effect (`settleInDoubt`) the store applied, with the record as the
 * settling run's resolver read it (its last list of the ledger) and as the settle found it.
 */
export interface ObservedSettle {
  readonly actor: string;
  readonly keyHash: string;
  readonly committed: boolean;
  /** What the committed settle made of it: done, or due for a retry (FAILED). */
  readonly to: 'done' | 'retry' | undefined;
  /** The record as the resolver read it (done marks applied, as the ledger lists it). */
  readonly read: EffectItem | undefined;
  /**
   * The record the settle replaced (committed), or found (not committed, when the store says), as
   * it stood: a reservation its done marks covered is DONE.
   */
  readonly found: EffectItem | undefined;
  /** True time it applied. */
  readonly at: number;
  /**
   * The settling run's client handed it this committed reply. False for a settle whose reply was
   * lost (the client's retry met the record already settled, and said so) or whose run died first.
   */
  heard: boolean;
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
 * Whether an effect was performed: the provider took its message, sent with fate `ok` by a run of
 * `epoch` of that shard (the run heard it had, unless it died first).
 */
export type PerformedBy = (keyHash: string, epoch: number, shard: number | undefined) => boolean;

/**
 * Watches every request the store applies, as it applies it, for the rules that are about a moment
 * rather than the end: a checkpoint passes no item without an outcome on record (invariant 7); a
 * refused effect is reserved again only once its retry is due, and never once it failed for good
 * (invariant 6); done marks are written only by their own epoch's checkpoints, only grow, and cover
 * only performed effects (invariant 11). It also keeps what the end-of-case invariants need: every
 * release (with its runs without progress), the completion and the ledger its tally read, each
 * epoch's last written marks.
 */
export class StoreWatch {
  readonly violations: string[] = [];
  readonly releases: ObservedRelease[] = [];
  /** Every attempt to finish a split window (finishSharded), committed or not, in order. */
  readonly finishAttempts: { readonly actor: string; readonly committed: boolean }[] = [];
  /** Every settle of an in-doubt effect, committed or not, in order. */
  readonly settles: ObservedSettle[] = [];
  /** The committed settle each settle request made, until its caller hears the reply. */
  readonly #committedSettles = new Map<MemoryRequest, ObservedSettle>();
  /** Every read of a whole ledger (a tally, before a resolution or a retry pass): who, and the true time. */
  readonly ledgerReads: { readonly actor: string; readonly at: number }[] = [];
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
  readonly #scenario: Pick<Scenario, 'recipients' | 'shards' | 'split' | 'resolution'>;
  readonly #hashKey: EffectKeyHasher;
  readonly #lists = new Map<
    string,
    { readonly at: number; readonly version: number; readonly ledger: Map<string, EffectItem> }
  >();
  readonly #completions = new Map<string, ObservedCompletion>();
  readonly #checkedCheckpoints = new Map<string, string>();
  readonly #performed: PerformedBy;
  /** The window's done marks as each actor's ledger last read them (before it lists the effects). */
  readonly #marksRead = new Map<string, WindowDoneMarks>();
  /** The marks each epoch of each slot last wrote, by `slot label#epoch`. */
  readonly #lastMarks = new Map<string, EpochDoneMarks>();
  /** Keys each actor's reservation met as an earlier epoch's reservation its done marks cover. */
  readonly #metCovered = new Map<string, Set<string>>();
  /** Actors a checkpoint write of which did not commit (fenced, or every attempt failed). */
  readonly #checkpointsLost = new Set<string>();
  /** Reservations already reported read DONE though never performed, as `keyHash epoch seq`. */
  readonly #unperformedReported = new Set<string>();

  constructor(
    table: MemoryTable,
    scenario: Pick<Scenario, 'recipients' | 'shards' | 'split' | 'resolution'>,
    hashKey: EffectKeyHasher,
    performed: PerformedBy,
  ) {
    this.#table = table;
    this.#scenario = scenario;
    this.#hashKey = hashKey;
    this.#performed = performed;
  }

  /** The done marks epoch `epoch` of `slot` last wrote with a checkpoint; undefined if it wrote none. */
  lastMarks(slot: Slot, epoch: number): EpochDoneMarks | undefined {
    return this.#lastMarks.get(`${slotLabel(slot)}#${epoch}`);
  }

  /** Whether a run of `epoch` of `shard` performed the effect (see PerformedBy). */
  performedBy(keyHash: string, epoch: number, shard: number | undefined): boolean {
    return this.#performed(keyHash, epoch, shard);
  }

  /** Keys `actor`'s reservations met as an earlier epoch's reservation its done marks cover: done. */
  metCovered(actor: string): ReadonlySet<string> {
    return this.#metCovered.get(actor) ?? new Set();
  }

  /** True when a checkpoint write of `actor`'s did not commit: what it performed since may be left uncovered. */
  lostCheckpoint(actor: string): boolean {
    return this.#checkpointsLost.has(actor);
  }

  /** An invocation ended (returned, threw, or was killed): invariant 11 against the table as it stands. */
  runEnded(actor: SimActor): void {
    this.violations.push(...this.unperformedProblems(`when ${actor.name} ended`));
  }

  /** `actor`'s client gave up on `request`: every attempt failed, whether or not one committed. */
  gaveUp(actor: SimActor, request: MemoryRequest): void {
    if (request.operation === 'checkpoint') this.#checkpointsLost.add(actor.name);
  }

  /**
   * Invariant 11 against the table as it stands: a reservation its epoch's done marks cover (read
   * DONE) was performed by that epoch. Each such reservation is reported once.
   */
  unperformedProblems(when: string): string[] {
    const problems: string[] = [];
    const marks = this.#table.windowDoneMarks(SLOT);
    for (const [keyHash, item] of this.#table.listEffects(SLOT)) {
      if (item.state !== EffectState.Reserved) continue;
      if (effectiveItem(keyHash, item, marks).state !== EffectState.Done) continue;
      if (this.performedBy(keyHash, item.epoch, item.shard)) continue;
      const reported = `${keyHash} ${item.epoch} ${item.seq}`;
      if (this.#unperformedReported.has(reported)) continue;
      this.#unperformedReported.add(reported);
      const slot = slotOf(item.shard);
      problems.push(
        `${when}, ${this.#recipientOf(keyHash)}'s reservation number ${item.seq} of epoch ${item.epoch} ` +
          `(${slotLabel(slot)}) is read DONE by the done marks ${describeMarks(marks.get(item.shard)?.[String(item.epoch)])}, ` +
          `but epoch ${item.epoch} never performed it`,
      );
    }
    return problems;
  }

  /** The completion of `slot` the store committed (for the window, a split window's finish), if any. */
  completionOf(slot: Slot): ObservedCompletion | undefined {
    return this.#completions.get(slotLabel(slot));
  }

  /** `actor`'s request was applied to the table at true time `now`, with `reply`. */
  /** A reply the client handed its caller: a committed settle's is heard. */
  replied(request: MemoryRequest, reply: unknown): void {
    const settle = this.#committedSettles.get(request);
    if (settle && isCommitted(reply)) settle.heard = true;
  }

  applied(actor: SimActor, request: MemoryRequest, reply: unknown, now: number): void {
    if (request.keyHash !== undefined && isCommitted(reply)) this.#effectWritten(actor, request, reply.old);
    switch (request.operation) {
      case 'read':
        // The ledger reads the window's slot records (their done marks) just before it lists its effects.
        if (request.slot.shard === undefined)
          this.#marksRead.set(actor.name, this.#table.windowDoneMarks(SLOT));
        return;
      case 'list': {
        const marks = this.#marksRead.get(actor.name) ?? new Map();
        this.#lists.set(actor.name, {
          at: actor.clock.now(),
          version: this.#table.version,
          ledger: new Map(
            this.#table
              .listEffects(SLOT)
              .map(([keyHash, item]) => [keyHash, effectiveItem(keyHash, item, marks)]),
          ),
        });
        this.ledgerReads.push({ actor: actor.name, at: now });
        return;
      }
      case 'settleInDoubt':
        this.#settled(actor, request, reply, now);
        return;
      case 'reserve': {
        if (isCommitted(reply)) {
          this.#reserved(actor, request, reply.old as EffectItem | undefined);
          return;
        }
        if (request.keyHash === undefined) return;
        const stored = this.#table.getEffect(SLOT, request.keyHash);
        const current = this.#table.effectiveEffect(SLOT, request.keyHash);
        if (current && current.state !== EffectState.Done && current.shard !== request.slot.shard)
          this.counts.keysMetByAnotherShard++;
        // An earlier epoch's reservation its marks cover: the run must take it as done (invariant 11).
        if (
          stored?.state === EffectState.Reserved &&
          current?.state === EffectState.Done &&
          stored.shard === request.slot.shard &&
          stored.epoch !== request.by?.epoch
        ) {
          const met = this.#metCovered.get(actor.name) ?? new Set<string>();
          met.add(request.keyHash);
          this.#metCovered.set(actor.name, met);
        }
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
        if (request.operation === 'checkpoint' && !isCommitted(reply)) this.#checkpointsLost.add(actor.name);
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

  /**
   * Invariant 10 at each settle of an in-doubt effect: it replaces only the exact reservation the
   * resolver read (RESERVED, its epoch and owner), and does what the resolver's rule says of what it
   * read: done only on an accepted word of the record's own epoch; due again only on a rejected one
   * (and no acceptance), or with no word once the grace period is over by the resolver's clock, when
   * the job re-sends.
   */
  #settled(actor: SimActor, request: MemoryRequest, reply: unknown, now: number): void {
    const keyHash = request.keyHash ?? '';
    const read = this.#lists.get(actor.name)?.ledger.get(keyHash);
    const committed = isCommitted(reply);
    const after = this.#table.getEffect(SLOT, keyHash);
    const stored = committed
      ? (reply.old as EffectItem | undefined)
      : (reply as { readonly item?: EffectItem } | undefined)?.item;
    // A reservation the done marks covered was DONE: settling it replaced a done effect.
    const found = stored && effectiveItem(keyHash, stored, this.#table.windowDoneMarks(SLOT));
    const to = !committed ? undefined : after?.state === EffectState.Done ? 'done' : 'retry';
    const settle: ObservedSettle = {
      actor: actor.name,
      keyHash,
      committed,
      to,
      read,
      found,
      at: now,
      heard: false,
    };
    this.settles.push(settle);
    if (!committed) return;
    this.#committedSettles.set(request, settle);
    const who = `${actor.name}'s settle (${to}) of ${this.#recipientOf(keyHash)}`;
    if (!read) {
      this.violations.push(`${who} settled a record its resolver never read`);
      return;
    }
    if (found?.state !== EffectState.Reserved || found.epoch !== read.epoch || found.owner !== read.owner) {
      const covered = found !== stored ? ' (its done marks cover it)' : '';
      this.violations.push(
        `${who} replaced ${found ? `${found.state} of epoch ${found.epoch}${covered}` : 'no record'}, not the ` +
          `reservation of epoch ${read.epoch} its resolver read: a record that had moved on`,
      );
    }
    const word = read.provider?.epoch === read.epoch ? read.provider : undefined;
    if (to === 'done') {
      if (word?.outcome !== 'accepted') {
        this.violations.push(
          `${who} settled it done, though the record it read had ${word ? `a ${word.outcome} word (${word.event})` : 'no word of its epoch'}`,
        );
      }
      return;
    }
    if (word?.outcome === 'rejected') return;
    const grace = graceOf(this.#scenario);
    const retryAt = after?.retryAt ?? Number.NEGATIVE_INFINITY;
    const graceEndsAt = (read.reservedAt ?? Number.NEGATIVE_INFINITY) + grace;
    if (word?.outcome === 'accepted') {
      this.violations.push(
        `${who} made it due again, though the record it read had an accepted word (${word.event})`,
      );
    } else if (afterGraceOf(this.#scenario) !== 'resend') {
      this.violations.push(
        `${who} made it due again with no word, though the job keeps such effects in doubt`,
      );
    } else if (retryAt < graceEndsAt) {
      this.violations.push(
        `${who} made it due again with no word ${graceEndsAt - retryAt} ms before its grace period of ${grace} ms ` +
          "ended, by the resolver's clock",
      );
    }
  }

  /**
   * Invariant 10 at each recording of the provider's word that wrote to the table (by the
   * recorder, `recordProviderWord`): it wrote the word and nothing else, on a record of the word's
   * epoch that is not DONE (a word never revives a done effect, nor touches another reservation's
   * record), and never a rejection over an acceptance.
   */
  recorded(
    keyHash: string,
    word: ProviderWord,
    before: EffectItem | undefined,
    after: EffectItem | undefined,
  ): void {
    const what = `a ${word.outcome} word (${word.event}) of epoch ${word.epoch} about ${this.#recipientOf(keyHash)}`;
    if (!before) {
      this.violations.push(`${what} was written where there was no record`);
      return;
    }
    if (before.state === EffectState.Done) {
      this.violations.push(`${what} was written on its DONE record (epoch ${before.epoch})`);
    }
    if (before.epoch !== word.epoch) {
      this.violations.push(`${what} was written on the record of epoch ${before.epoch}`);
    }
    if (before.provider?.outcome === 'accepted' && word.outcome === 'rejected') {
      this.violations.push(`${what} replaced the provider's acceptance (${before.provider.event})`);
    }
    const changed = [...new Set([...Object.keys(before), ...Object.keys(after ?? {})])].filter(
      (field) =>
        field !== 'provider' &&
        JSON.stringify(before[field as keyof EffectItem]) !==
          JSON.stringify(after?.[field as keyof EffectItem]),
    );
    if (changed.length > 0 || JSON.stringify(after?.provider) !== JSON.stringify(word)) {
      this.violations.push(
        `recording ${what} changed ${changed.length > 0 ? changed.join(', ') : 'the word to something else'}: ` +
          `${before.state} → ${after?.state ?? 'no record'}`,
      );
    }
  }

  #recipientOf(keyHash: string): string {
    return this.#scenario.recipients.find((to) => this.#hashKey(to) === keyHash) ?? keyHash;
  }

  #reserved(actor: SimActor, request: MemoryRequest, before: EffectItem | undefined): void {
    const who = `${actor.name} (epoch ${request.by?.epoch})`;
    if (before?.state === EffectState.Reserved && request.keyHash !== undefined) {
      // A take-over (the rerun policy) of a reservation its done marks cover: a done effect run again.
      const as = effectiveItem(request.keyHash, before, this.#table.windowDoneMarks(SLOT));
      if (as.state === EffectState.Done) {
        this.violations.push(
          `${who} reserved ${this.#recipientOf(request.keyHash)} again over the reservation number ${before.seq} ` +
            `of epoch ${before.epoch}, which its done marks cover: DONE`,
        );
      }
    }
    if (before?.state !== EffectState.Failed) return;
    this.counts.retriedRefusals++;
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
    this.#marksWritten(actor, request, before, after, epoch);
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
          listedVersion: listed?.version,
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

  /**
   * Invariant 11 at each slot write: an epoch's done marks are written only by that epoch's own
   * checkpoints (every other write keeps every epoch's as they were); a checkpoint's marks cover all
   * its earlier ones covered (a reservation read DONE never reads in doubt again); and every
   * reservation they cover was performed by the time they were written.
   */
  #marksWritten(
    actor: SimActor,
    request: MemoryRequest,
    before: SlotItem | undefined,
    after: SlotItem | undefined,
    epoch: number,
  ): void {
    if (before?.doneMarks === after?.doneMarks) return;
    const was = parseDoneMarks(before?.doneMarks) ?? {};
    const now = parseDoneMarks(after?.doneMarks) ?? {};
    const own = request.operation === 'checkpoint' ? String(epoch) : undefined;
    const who = `${actor.name}'s ${request.operation} (epoch ${epoch}) of ${slotLabel(request.slot)}`;
    for (const written of new Set([...Object.keys(was), ...Object.keys(now)])) {
      if (written === own || JSON.stringify(was[written]) === JSON.stringify(now[written])) continue;
      this.violations.push(
        `${who} changed the done marks of epoch ${written} from ${describeMarks(was[written])} to ` +
          `${describeMarks(now[written])}: only that epoch's own checkpoints write them`,
      );
    }
    const mine = own === undefined ? undefined : now[own];
    if (mine === undefined) return;
    const earlier = was[String(epoch)];
    const takenBack = coveredNumbers(earlier).filter((seq) => !covers(mine, seq));
    if (takenBack.length > 0) {
      this.violations.push(
        `${who} wrote done marks ${describeMarks(mine)} that no longer cover numbers ${takenBack.join(', ')}, ` +
          `which its earlier ones (${describeMarks(earlier)}) covered`,
      );
    }
    this.#lastMarks.set(`${slotLabel(request.slot)}#${epoch}`, mine);
    this.violations.push(...this.unperformedProblems(`as ${who} wrote them`));
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

/** One epoch's done marks in a violation: `below 4, open [2]`, or `none`. */
export function describeMarks(marks: EpochDoneMarks | undefined): string {
  return marks ? `below ${marks.below}, open [${marks.open.join(', ')}]` : 'none';
}

/** Whether `marks` cover reservation number `seq`: the one rule (coveredByMarks), for one epoch's marks. */
export function covers(marks: EpochDoneMarks | undefined, seq: number | undefined): boolean {
  const reservation = { keyHash: '', state: EffectState.Reserved, epoch: 1, owner: '', attempts: 0, seq };
  return coveredByMarks(reservation, marks && { '1': marks });
}

/** The numbers `marks` cover. */
function coveredNumbers(marks: EpochDoneMarks | undefined): number[] {
  if (!marks) return [];
  return Array.from({ length: marks.below }, (_, seq) => seq).filter((seq) => covers(marks, seq));
}
