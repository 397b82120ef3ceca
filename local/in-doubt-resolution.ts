import type { LocalJob } from '../functions/local-jobs.js';
import type { Clock } from '../shared/clock.js';
import type { SlotBackend } from '../shared/job/run-slot.js';
import type { OperatorStore } from '../shared/slot/operator-ports.js';
import { EffectState } from '../shared/slot/ports.js';
import { windowOf } from '../shared/slot/slot.js';

/** What the operator's runbook step came to. */
export interface InDoubtResolution {
  /** Effects reserved and never recorded done, when the step began. */
  readonly inDoubt: number;
  /** Found in the mail server's log: marked done, never sent again. */
  readonly confirmed: number;
  /** Not in the log: cleared, so the re-run sends them (the slot is reopened). */
  readonly cleared: number;
  /**
   * Refused (the slot moved on, a live lease), or not gone in a window split into shards (see
   * `split`): left for a human.
   */
  readonly unresolved: number;
  /**
   * The window is split into shards: what had not gone is left in doubt, not cleared. Running it
   * again needs the shard that reserved it reopened, which the operator port does not do yet; a
   * cleared effect would be dropped (its shard stands down as finished) and its customer get
   * nothing, as `slotguard effects resolve` refuses to.
   */
  readonly split: boolean;
}

/**
 * The runbook's "resolve in-doubt effects" step, played by the local runner: each effect left in
 * doubt is looked up in the mail server's log (here, the loopback SMTP server; deployed, SES's
 * sending events), and either marked done (it went) or cleared (it did not), through the operator
 * port with the epoch read first. The caller then redelivers the window, which sends the cleared
 * ones and skips the rest: nobody gets two emails, and nobody gets none.
 */
export async function resolveInDoubtFromMailLog(args: {
  readonly job: LocalJob;
  readonly window: Date;
  readonly backend: SlotBackend;
  readonly operator: OperatorStore;
  /** The addresses the window's mail reached, from the server's log. */
  readonly delivered: ReadonlyMap<string, number>;
  readonly clock: Clock;
}): Promise<InDoubtResolution> {
  const slot = { jobId: args.job.spec.id, window: windowOf(args.window) };
  const record = await args.backend.claims.read(slot);
  const inDoubt = new Set<string>();
  for await (const effect of args.backend.ledger.list(slot)) {
    if (effect.state === EffectState.Reserved) inDoubt.add(effect.keyHash);
  }
  const split = (record?.shards ?? 1) > 1;
  if (!record || inDoubt.size === 0)
    return { inDoubt: inDoubt.size, confirmed: 0, cleared: 0, unresolved: 0, split };
  // Hashes are all the ledger keeps; the job's own list says which address each one stands for.
  const addressOf = new Map<string, string>();
  for await (const effect of args.job.effects(args.window)) {
    const hash = args.backend.hashKey(effect.key);
    if (inDoubt.has(hash)) addressOf.set(hash, effect.address);
  }
  let confirmed = 0;
  let cleared = 0;
  let unresolved = 0;
  // One at a time: each write is fenced on the epoch read above, and the first clear reopens the slot.
  for (const hash of inDoubt) {
    const address = addressOf.get(hash);
    const went = address !== undefined && (args.delivered.get(address) ?? 0) > 0;
    if (!went && split) {
      unresolved++;
      continue;
    }
    const outcome = await args.operator.resolveEffect(slot, hash, went ? 'done' : 'clear', {
      expectedEpoch: record.epoch,
      now: args.clock.now(),
    });
    if (outcome.kind !== 'resolved') unresolved++;
    else if (went) confirmed++;
    else cleared++;
  }
  return { inDoubt: inDoubt.size, confirmed, cleared, unresolved, split };
}
