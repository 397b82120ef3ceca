import type { EffectItem, MemoryTable, SlotItem } from '../../shared/backends/memory/memory-table.js';
import type { MemoryRequest } from '../../shared/backends/memory/memory-transport.js';
import type { EffectKeyHasher } from '../../shared/effects/effect-key.js';
import type { Checkpoint } from '../../shared/slot/ports.js';
import { EffectState, SlotState } from '../../shared/slot/ports.js';
import { JOB_ID, WINDOW } from './scenario.js';
import type { ActorRole, SimActor } from './sim-actor.js';
import { isCommitted } from './sim-network.js';

/** The one slot every case is about. */
export const SLOT = { jobId: JOB_ID, window: WINDOW };

/** The name the job's resumable source checkpoints under (the runtime's default). */
export const SOURCE_NAME = 'items';

/** Where recipient `index` stands in the job's resumable source: positions sort as the list does. */
export const positionOf = (index: number) => String(index).padStart(3, '0');

/** The recipient index a position stands for. */
export const indexOfPosition = (position: string) => Number(position);

/** A release the store committed, with what the releasing run could see. */
export interface ObservedRelease {
  /** A yield (RELEASED for a continuation), STUCK, or a failed run's (which counts a failure). */
  readonly kind: 'yield' | 'stuck' | 'error';
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

/** The completion the store committed, with the ledger as the completing run last listed it. */
export interface ObservedCompletion {
  readonly actor: string;
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
  completion: ObservedCompletion | undefined;
  readonly counts: StoreCounts = {
    takeovers: 0,
    resumes: 0,
    checkpoints: 0,
    retriedRefusals: 0,
    refusalsRecorded: 0,
    permanentFailures: 0,
    cancelled: 0,
    unreserved: 0,
  };
  readonly #table: MemoryTable;
  readonly #recipients: readonly string[];
  readonly #hashKey: EffectKeyHasher;
  readonly #lists = new Map<string, { readonly at: number; readonly ledger: Map<string, EffectItem> }>();
  #checkedCheckpoint: string | undefined;

  constructor(table: MemoryTable, recipients: readonly string[], hashKey: EffectKeyHasher) {
    this.#table = table;
    this.#recipients = recipients;
    this.#hashKey = hashKey;
  }

  /** `actor`'s request was applied to the table at true time `now`, with `reply`. */
  applied(actor: SimActor, request: MemoryRequest, reply: unknown, now: number): void {
    switch (request.operation) {
      case 'list':
        this.#lists.set(actor.name, {
          at: actor.clock.now(),
          ledger: new Map(this.#table.listEffects(SLOT)),
        });
        return;
      case 'reserve':
        if (isCommitted(reply)) this.#reserved(actor, request, reply.old as EffectItem | undefined);
        return;
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
      case 'claim':
      case 'renew':
      case 'checkpoint':
      case 'complete':
      case 'release':
        if (isCommitted(reply)) this.#slotWritten(actor, request, reply.old as SlotItem | undefined, now);
        return;
      default:
        return;
    }
  }

  /**
   * Invariant 7 against the ledger as it is now: every recipient at or before the checkpoint's
   * position has an outcome on record (DONE, RESERVED or FAILED).
   */
  checkpointProblems(writtenBy: string): string[] {
    const stored = this.#table.getSlot(SLOT)?.checkpoint;
    if (stored === undefined) return [];
    const checkpoint = JSON.parse(stored) as Checkpoint;
    const problems: string[] = [];
    for (const [name, position] of Object.entries(checkpoint.positions)) {
      if (name !== SOURCE_NAME) {
        problems.push(`${writtenBy} checkpointed a source named '${name}', which the job does not walk`);
        continue;
      }
      const last = indexOfPosition(position);
      for (const [index, to] of this.#recipients.entries()) {
        if (index > last) break;
        if (!this.#table.getEffect(SLOT, this.#hashKey(to))) {
          problems.push(
            `the checkpoint (position ${position}, ${writtenBy}) passes ${to} at position ${positionOf(index)}, ` +
              'which has no outcome on record: a continuation would never send it',
          );
        }
      }
    }
    return problems;
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
    const after = this.#table.getSlot(SLOT);
    const epoch = request.by?.epoch ?? after?.epoch ?? 0;
    switch (request.operation) {
      case 'claim': {
        if (before?.state === SlotState.Running) this.counts.takeovers++;
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
                : after.failures > (before?.failures ?? 0)
                  ? 'error'
                  : 'yield',
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
        this.completion = {
          actor: actor.name,
          epoch,
          at: now,
          listedAt: listed?.at,
          ledger: listed?.ledger,
        };
        break;
      }
      default:
        break;
    }
    if (after?.checkpoint !== undefined && after.checkpoint !== this.#checkedCheckpoint) {
      this.#checkedCheckpoint = after.checkpoint;
      this.violations.push(
        ...this.checkpointProblems(`written by ${actor.name}'s ${request.operation}, epoch ${epoch}`),
      );
    }
  }
}
