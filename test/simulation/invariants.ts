import { type EffectItem, effectiveItem, type SlotItem } from '../../shared/backends/memory/memory-table.js';
import { shardOfKeyHash } from '../../shared/effects/resumable-source.js';
import { StoreError } from '../../shared/errors.js';
import type { Checkpoint, WindowSummary } from '../../shared/slot/ports.js';
import { EffectState, SlotState } from '../../shared/slot/ports.js';
import type { Slot } from '../../shared/slot/slot.js';
import { deadlineOf, MAX_RUNS_WITHOUT_PROGRESS, MAX_SKEW_MS, SAFETY_MARGIN_MS, START } from './scenario.js';
import type { SimActor } from './sim-actor.js';
import { describeResult } from './sim-actor.js';
import { FINAL_DELIVERIES, type SimulationResult } from './simulation.js';
import {
  covers,
  describeMarks,
  isTerminal,
  ownsRecipient,
  runSlots,
  SLOT,
  slotLabel,
  slotOf,
} from './store-watch.js';
import {
  doneOnSendRejectedAfter,
  type Resends,
  resendsOf,
  resolutionProblems,
  wordFacts,
  wordProblems,
} from './word-invariants.js';

/** How a slot ended, after the final phase. */
type SlotEnding =
  | 'DONE'
  | 'PARTIAL'
  | 'FAILED'
  | 'STUCK (deadline)'
  | 'STUCK (no progress)'
  | 'STUCK (provider failing)'
  | 'unfinished';

/** How a window ended, after the final phase: as a slot of its own, or split, as its shards finished it. */
export type Ending = SlotEnding | 'sharded DONE' | 'sharded PARTIAL' | 'sharded STUCK';

/** What one case came to: the violations, and what happened in it, for the run's statistics. */
export interface Verdict {
  readonly violations: readonly string[];
  readonly ending: Ending;
  /** Things that happened in the case, each counted (a case is "with" a fact when its count is above 0). */
  readonly facts: Readonly<Record<string, number>>;
}

/** The most keys a window summary lists per list (the runtime's). */
const LISTED_KEYS = 50;

/**
 * Judges one simulated window against the protocol's invariants:
 *
 * 1. each effect runs at most once: no recipient was delivered more than once, across all actors,
 *    but for the second emails the resend policy makes (invariant 10, resendsOf);
 * 2. every recipient has exactly one outcome, and the window's summary says which: counted from the
 *    ledger its completing run read, done + in doubt + failed is every distinct recipient, each key
 *    listed once; a DONE record was delivered exactly once, a FAILED one never; whoever got nothing
 *    is in doubt or failed; a window completes with a refusal still waiting for its retry only past
 *    its deadline; and each run's own count of done effects is what its sends did;
 * 3. epochs per slot only grow, and every epoch a run was handed was granted (the store's audit);
 * 4. no write from a stale epoch is accepted (the store's audit); with every clock within the
 *    lease's safety margin, no run reserves an effect after a later epoch of its slot was granted;
 *    and no invocation begins a reservation or a send after it returned;
 * 5. a slot is completed at most once (the store's audit, and the runs' own reports);
 * 6. refusals are retried by the policy: a refused effect is reserved again only once its retry is
 *    due, never once it failed for good, reaches the provider at most `effectAttempts` times, and
 *    fails for good only on its last attempt; a run that performed an effect records progress;
 * 7. a checkpoint on record never passes an item without an outcome on record (checked at every
 *    write of the checkpoint, and at the end);
 * 8. liveness: the world settles, and once the final phase has delivered the window's messages,
 *    the window is DONE or PARTIAL, FAILED after maxAttempts failed runs, or STUCK where the
 *    scenario's faults made that the protocol's own answer (see stuckProblems);
 * 9. a split window (shards): each shard is held to invariants 2 to 8 as a slot of its own,
 *    counting the recipients it handles; the window is finished once, only when every shard has ended and is
 *    recorded as such, with one summary that is the whole ledger (done + in doubt + failed is every
 *    recipient, runs the shards' epochs) or STUCK naming a shard that is; a shard splitting by key
 *    hash performs only keys that hash to it, and one whose source splits itself only its range; no
 *    run reports fenced unless a later epoch of its own slot was granted;
 * 10. the provider's word: each message names the effect that sent it; a recorded word changes
 *    nothing but the word, only on a record of its epoch that is not DONE, never a rejection over
 *    an acceptance; a settle of an in-doubt effect replaces only the exact reservation its resolver
 *    read, settles done only on an accepted word of that reservation's epoch and a message the
 *    provider took, and makes it due again only on a rejection or, when the job re-sends, with no
 *    word once the grace period is over; a second email only under 'resend', for a word lost or
 *    later than the grace period (resendsOf); a rejected message whose word was on record is sent
 *    again, unless its window was over first; a completed slot reports in doubt exactly what no
 *    word and no grace period could settle; and each run counts the settles it made;
 * 11. the checkpoint rule (done marks): a reservation is read DONE by its epoch's done marks only if
 *    that epoch performed its effect (checked at every write of marks, after every run and at the
 *    end); an epoch's marks are written only by its own checkpoints and only grow (store watch);
 *    after a crash, what is read in doubt of the crashed run's epoch is exactly its reservations not
 *    covered by the last marks it wrote (numbered at or above `below`, or open); a run that
 *    returned with every checkpoint written left nothing it performed uncovered; and no run
 *    reports in doubt an earlier epoch's reservation its marks cover. Reads of the ledger in the
 *    other invariants go through the marks, as the ledger's own do (MemoryTable.effectiveEffect).
 */
export function judge(result: SimulationResult): Verdict {
  const { scenario, table, provider, actors, watch } = result;
  const violations: string[] = [];
  const recipients = [...new Set(scenario.recipients)];
  const resends = resendsOf(result);

  // 1
  for (const to of recipients) {
    const deliveries = provider.deliveriesTo(to);
    if (deliveries.length > 1 + (resends.allowed.get(to) ?? 0)) {
      violations.push(
        `${to} was delivered ${deliveries.length} times, by ${deliveries.map((d) => `${d.actor} (epoch ${d.epoch})`).join(', ')}`,
      );
    }
  }

  // 3, 4, 5 (the store's audit), 6 and 7 (as the store applied each request)
  violations.push(...table.audit.violations.map((v) => `store audit: ${v}`));
  violations.push(...watch.violations.map((v) => `as applied: ${v}`));
  for (const slot of runSlots(scenario)) {
    violations.push(...watch.checkpointProblems(slot, 'the last checkpoint, at the end'));
  }
  for (const actor of actors) {
    // Epochs of a slot are granted one by one from 1: any up to the latest was granted.
    const latest = table.audit.latestEpoch(slotOf(actor.shard));
    if (actor.epoch !== undefined && !(actor.epoch >= 1 && actor.epoch <= latest)) {
      violations.push(
        `${actor.name} ran ${slotLabel(slotOf(actor.shard))} under epoch ${actor.epoch}, which the store never granted`,
      );
    }
  }
  const skews = actors.map((a) => a.plan.skewMs);
  const clocksAgree = Math.max(...skews) - Math.min(...skews) <= SAFETY_MARGIN_MS;
  if (clocksAgree) {
    for (const late of table.audit.lateReservations) {
      violations.push(
        `epoch ${late.epoch} reserved ${recipientOf(result, late.keyHash)} after epoch ${late.laterEpoch} had ` +
          `been granted, with every clock within the lease's safety margin`,
      );
    }
  }
  for (const actor of actors) {
    if (actor.afterReturn.length === 0) continue;
    violations.push(
      `${actor.name} began ${actor.afterReturn.length} reservations or sends after its invocation had returned ` +
        `(${actor.result ? describeResult(actor.result) : ''}): ${actor.afterReturn.join(', ')}`,
    );
  }
  for (const slot of runSlots(scenario)) {
    const completedBy = actors.filter((a) => a.shard === slot.shard && responseOf(a)?.status === 'completed');
    if (completedBy.length > 1) {
      violations.push(
        `${completedBy.map((a) => a.name).join(' and ')} each report completing ${slotLabel(slot)}`,
      );
    }
  }

  violations.push(
    ...runProblems(result),
    ...ledgerProblems(result, resends),
    ...retryProblems(result),
    ...fencedProblems(result),
    ...shardProblems(result),
    ...wordProblems(result, resends),
    ...markProblems(result),
  );

  // 8
  if (result.stuck) violations.push('the world never settled: some actor kept running without end');
  if (result.finalDeliveriesExhausted) {
    violations.push(`the final phase delivered the window ${FINAL_DELIVERIES} times without finishing it`);
  }
  for (const actor of actors.filter((a) => a.role === 'final')) {
    if (actor.result?.kind === 'threw') {
      violations.push(
        `${actor.name}, a healthy delivery in the final phase, ${describeResult(actor.result)}`,
      );
    }
  }
  const record = table.getSlot(SLOT);
  const judged = scenario.shards > 1 ? splitWindowEnding(result) : slotEnding(result, SLOT);
  violations.push(...judged.problems);

  return {
    violations,
    ending: judged.ending,
    facts: { ...facts(result, record), ...wordFacts(result, resends) },
  };
}

/** Invariants 2 and 8 for one slot a run walks: the window, or one of its shards. */
function slotEnding(result: SimulationResult, slot: Slot): { ending: SlotEnding; problems: string[] } {
  const { scenario, table } = result;
  const record = table.getSlot(slot);
  const ending = endingOf(record);
  switch (ending) {
    case 'DONE':
    case 'PARTIAL':
      return { ending, problems: accountingProblems(result, slot, record) };
    case 'FAILED':
      return {
        ending,
        problems:
          (record?.failures ?? 0) < scenario.maxAttempts
            ? [
                `${slotLabel(slot)} is FAILED after ${record?.failures} failed runs, fewer than ${scenario.maxAttempts}`,
              ]
            : [],
      };
    case 'STUCK (deadline)':
    case 'STUCK (no progress)':
    case 'STUCK (provider failing)':
      return { ending, problems: stuckProblems(result, slot, ending) };
    case 'unfinished':
      return {
        ending,
        problems: [
          `after the final phase ${slotLabel(slot)} is ${record?.state ?? 'absent'}: neither finished nor given up ` +
            `(messages: ${result.queue.messages.map((m) => `${m.id} ${m.state}`).join(', ')})`,
        ],
      };
    default:
      return ending satisfies never;
  }
}

/**
 * Invariants 8 and 9 for a split window: every shard ended as a slot of its own is allowed to
 * (DONE, PARTIAL, FAILED, or STUCK for a reason the scenario gave it); the window is finished (DONE or
 * PARTIAL when every shard completed, with the whole ledger's summary; else STUCK naming a shard
 * that is STUCK or FAILED) and lists every shard as finished.
 */
function splitWindowEnding(result: SimulationResult): { ending: Ending; problems: string[] } {
  const { scenario, table } = result;
  const record = table.getSlot(SLOT);
  const shards = runSlots(scenario).map((slot) => ({ slot, record: table.getSlot(slot) }));
  const problems = runSlots(scenario).flatMap((slot) => slotEnding(result, slot).problems);
  const listed = new Set(record?.finishedShards ?? []);
  const states = shards
    .map(({ slot, record }) => `${slotLabel(slot)} ${record?.state ?? 'absent'}`)
    .join(', ');
  if (isTerminal(record?.state) && shards.some(({ slot }) => !listed.has(slot.shard ?? -1))) {
    problems.push(
      `the window is ${record?.state} but lists only shards ${[...listed].join(', ')} of ${scenario.shards} as finished`,
    );
  }
  switch (record?.state) {
    case SlotState.Done:
    case SlotState.Partial: {
      const notCompleted = shards.filter(
        ({ record }) => record?.state !== SlotState.Done && record?.state !== SlotState.Partial,
      );
      if (notCompleted.length > 0) problems.push(`the window is ${record.state} though ${states}`);
      const runs = shards.reduce((n, { record }) => n + (record?.epoch ?? 0), 0);
      problems.push(...accountingProblems(result, SLOT, record, runs));
      return { ending: record.state === SlotState.Done ? 'sharded DONE' : 'sharded PARTIAL', problems };
    }
    case SlotState.Stuck: {
      const named = /^shard (\d+) of/.exec(record.lastError ?? '');
      const shard = named ? Number(named[1]) : undefined;
      const state = shard === undefined ? undefined : table.getSlot(slotOf(shard))?.state;
      if (state !== SlotState.Stuck && state !== SlotState.Failed) {
        problems.push(`the window is STUCK (${record.lastError}) though ${states}`);
      }
      return { ending: 'sharded STUCK', problems };
    }
    default:
      problems.push(
        `after the final phase the window is ${record?.state ?? 'absent'} with ${listed.size} of ${scenario.shards} ` +
          `shards recorded as finished (${states}): it is neither finished nor given up ` +
          `(messages: ${result.queue.messages.map((m) => `${m.id} ${m.state}`).join(', ')})`,
      );
      return { ending: 'unfinished', problems };
  }
}

function endingOf(record: SlotItem | undefined): SlotEnding {
  switch (record?.state) {
    case SlotState.Done:
      return 'DONE';
    case SlotState.Partial:
      return 'PARTIAL';
    case SlotState.Failed:
      return 'FAILED';
    case SlotState.Stuck:
      if (/deadline/.test(record.lastError ?? '')) return 'STUCK (deadline)';
      return /provider-failing/.test(record.lastError ?? '')
        ? 'STUCK (provider failing)'
        : 'STUCK (no progress)';
    default:
      return 'unfinished';
  }
}

/** The handler's response, when the invocation returned one. */
function responseOf(actor: SimActor) {
  return actor.result?.kind === 'returned' ? actor.result.response : undefined;
}

/**
 * Invariant 2 against a completed slot: the stored summary, the ledger its completing run's tally
 * read (a zombie may still mark an in-doubt effect done afterwards: the summary is not wrong for
 * it), the final ledger and the provider's counts. A shard's summary counts the records it wrote,
 * which are the recipients it handles; a split window's (`splitRuns`: the runs of its shards), the
 * whole ledger its last shard read when it finished the window.
 */
function accountingProblems(
  result: SimulationResult,
  slot: Slot,
  record: SlotItem | undefined,
  splitRuns?: number,
): string[] {
  const { scenario, provider, hashKey, watch, actors } = result;
  const problems: string[] = [];
  const label = slotLabel(slot);
  const summary = record?.summary ? (JSON.parse(record.summary) as WindowSummary) : undefined;
  const completion = watch.completionOf(slot);
  if (!summary || !completion) return [`${label} is ${record?.state} without a summary or a completion`];
  // The recipients this slot handles, and whether their records are all its own: by a shard's key
  // hash they are; a source that splits itself shares its boundary recipients with the next shard.
  const owned = new Set(
    scenario.recipients.filter((_, index) =>
      splitRuns !== undefined ? true : ownsRecipient(scenario, hashKey, slot.shard, index),
    ),
  );
  const shared = slot.shard !== undefined && scenario.split === 'source';
  const counts = (item: EffectItem) => splitRuns !== undefined || item.shard === slot.shard;
  const recipients = [...owned];
  const { done, inDoubt, failed, inDoubtKeys, failedKeys, runs } = summary;
  const expectedState = failed > 0 ? SlotState.Partial : SlotState.Done;
  if (record?.state !== expectedState) {
    problems.push(
      `${label} is ${record?.state} with ${failed} failed effects: it should be ${expectedState}`,
    );
  }
  if (!shared && done + inDoubt + failed !== recipients.length) {
    problems.push(
      `the summary of ${label} accounts for ${done + inDoubt + failed} of ${recipients.length} recipients ` +
        `(done ${done}, in doubt ${inDoubt}, failed ${failed})`,
    );
  }
  for (const [name, keys, count] of [
    ['in-doubt', inDoubtKeys, inDoubt],
    ['failed', failedKeys, failed],
  ] as const) {
    if (keys.length !== Math.min(count, LISTED_KEYS) || new Set(keys).size !== keys.length) {
      problems.push(`the summary lists ${keys.length} ${name} keys (distinct or not) for ${count} effects`);
    }
  }
  const expectedRuns = splitRuns ?? completion.epoch;
  if (runs !== expectedRuns) {
    problems.push(
      splitRuns === undefined
        ? `the summary of ${label} counts ${runs} runs, but epoch ${completion.epoch} completed it`
        : `the window's summary counts ${runs} runs, but its shards' epochs add up to ${splitRuns}`,
    );
  }
  const ledger = completion.ledger ?? new Map<string, EffectItem>();
  const tallied = { done: 0, inDoubt: 0, failed: 0 };
  for (const [keyHash, item] of ledger) {
    if (!counts(item)) continue;
    if (!owned.has(recipientOf(result, keyHash))) {
      problems.push(`${recipientOf(result, keyHash)} is on record for ${label}, which does not handle it`);
    }
    if (item.state === EffectState.Done) tallied.done++;
    else if (item.state === EffectState.Reserved) tallied.inDoubt++;
    else tallied.failed++;
  }
  if (tallied.done !== done || tallied.inDoubt !== inDoubt || tallied.failed !== failed) {
    problems.push(
      `the summary of ${label} (done ${done}, in doubt ${inDoubt}, failed ${failed}) is not the ledger ` +
        `${completion.actor} read before completing it (done ${tallied.done}, in doubt ${tallied.inDoubt}, ` +
        `failed ${tallied.failed})`,
    );
  }
  const deadline = deadlineOf(scenario);
  for (const to of recipients) {
    const keyHash = hashKey(to);
    const item = ledger.get(keyHash);
    const listed = [inDoubtKeys.includes(keyHash), failedKeys.includes(keyHash)].filter(Boolean).length;
    if (!item) {
      problems.push(`${to} had no outcome on record when ${completion.actor} completed ${label}`);
      continue;
    }
    // Another shard's record of a recipient both sources read: that shard's summary counts it.
    if (!counts(item)) continue;
    const expected = item.state === EffectState.Done ? 0 : 1;
    if (listed !== expected) {
      problems.push(
        `${to} is ${item.state} on record, yet the summary lists it ${listed === 0 ? 'nowhere' : `${listed} times`}`,
      );
    }
    // A split window's finish reads the ledger after its shards completed: a zombie of a shard may
    // have recorded a refusal since, which that shard's completion never saw.
    if (
      splitRuns === undefined &&
      item.state === EffectState.Failed &&
      item.retryAt !== undefined &&
      (completion.listedAt ?? 0) <= deadline
    ) {
      problems.push(
        `${completion.actor} completed ${label} while ${to}'s refusal waited for its retry, before the deadline`,
      );
    }
    if (
      provider.deliveriesTo(to).length === 0 &&
      !inDoubtKeys.includes(keyHash) &&
      !failedKeys.includes(keyHash) &&
      !doneOnSendRejectedAfter(result, keyHash, item)
    ) {
      problems.push(`${to} got nothing, yet the summary of ${label} reports it neither in doubt nor failed`);
    }
  }
  // A split window's finish reads the ledger its shards settled; it resolves nothing itself.
  if (splitRuns === undefined) {
    problems.push(...resolutionProblems(result, slot, completion, record?.completedAt ?? 0, counts));
  }
  const completer = actors.find((a) => a.name === completion.actor);
  const response = completer ? responseOf(completer) : undefined;
  // The run that finished a split window returns what its own shard came to.
  if (splitRuns === undefined && response?.status === 'completed') {
    if (JSON.stringify(response.window) !== JSON.stringify(summary) || response.state !== record?.state) {
      problems.push(
        `${completer?.name} returned ${describeResult({ kind: 'returned', response })}, not what it stored`,
      );
    }
  }
  return problems;
}

/**
 * Invariant 2 against the ledger as it ends, whatever the ending: DONE was delivered once (or not
 * at all, when done on the provider's Send of a message it then rejected), FAILED never; beyond
 * the second emails the resend policy makes (invariant 10).
 */
function ledgerProblems(result: SimulationResult, resends: Resends): string[] {
  const { scenario, table, provider, hashKey } = result;
  const problems: string[] = [];
  for (const to of new Set(scenario.recipients)) {
    const item = table.effectiveEffect(SLOT, hashKey(to));
    const delivered = provider.deliveriesTo(to).length;
    const allowed = resends.allowed.get(to) ?? 0;
    const atLeast = item && doneOnSendRejectedAfter(result, hashKey(to), item) ? 0 : 1;
    if (item?.state === EffectState.Done && (delivered < atLeast || delivered > 1 + allowed)) {
      problems.push(`${to} is marked done (epoch ${item.epoch}) but was delivered ${delivered} times`);
    }
    if (item?.state === EffectState.Failed && delivered > allowed) {
      problems.push(`${to} is recorded FAILED (epoch ${item.epoch}) but was delivered ${delivered} times`);
    }
  }
  return problems;
}

/**
 * Invariant 2, per run: a run's own counts (its result, logs and metrics) are what happened: its
 * done effects are what its sends did, and it reports as skipped only effects done on record (a
 * DONE record never changes) or a key its own list named again.
 */
function runProblems(result: SimulationResult): string[] {
  const { scenario, table, hashKey, provider } = result;
  const problems: string[] = [];
  const doneOnRecord = [...new Set(scenario.recipients)].filter(
    (to) => table.effectiveEffect(SLOT, hashKey(to))?.state === EffectState.Done,
  ).length;
  const repeats = scenario.recipients.length - new Set(scenario.recipients).size;
  for (const actor of result.actors) {
    const response = responseOf(actor);
    if (
      !response ||
      response.status === 'duplicate' ||
      response.status === 'rejected' ||
      response.status === 'sharded'
    )
      continue;
    const { done, skipped } = response.summary;
    const performed = provider.records.filter((r) => r.actor === actor.name && r.fate === 'ok').length;
    if (done !== performed) {
      problems.push(
        `${actor.name} (epoch ${response.epoch}) counts ${done} effects done, but its sends completed ${performed}`,
      );
    }
    if (skipped > doneOnRecord + repeats) {
      problems.push(
        `${actor.name} (epoch ${response.epoch}) reports ${skipped} effects skipped as done, but only ${doneOnRecord} are done on record`,
      );
    }
    // A record belongs to the shard that first wrote it, for good: a run reports only its own.
    for (const [kind, keys] of [
      ['in doubt', response.summary.inDoubtKeys],
      ['failed', response.summary.failedKeys],
    ] as const) {
      for (const keyHash of keys) {
        const owner = table.getEffect(SLOT, keyHash)?.shard;
        if (owner !== actor.shard) {
          problems.push(
            `${actor.name} of ${slotLabel(slotOf(actor.shard))} counts ${recipientOf(result, keyHash)} ${kind}, ` +
              `whose record is ${owner === undefined ? 'the window' : `shard ${owner}`}'s`,
          );
        }
      }
    }
  }
  return problems;
}

/**
 * Invariant 6 at the end: a recipient reaches the provider at most `effectAttempts` times; a
 * refusal failed for good only on its last attempt; a run that performed an effect and released the
 * window records no run without progress (else a window still moving could be declared STUCK).
 */
function retryProblems(result: SimulationResult): string[] {
  const { scenario, table, provider, hashKey, watch, actors } = result;
  const problems: string[] = [];
  for (const to of new Set(scenario.recipients)) {
    const attempts = provider.attemptsFor(to);
    // A settle that makes an in-doubt effect due again (a rejection, or the resend policy) grants
    // it one attempt more, whatever the retry policy had left: once per rejected reservation.
    const settledAgain = watch.settles.filter((s) => s.to === 'retry' && s.keyHash === hashKey(to)).length;
    if (attempts > scenario.effectAttempts + settledAgain) {
      problems.push(
        `${to} reached the provider ${attempts} times, more than the ${scenario.effectAttempts} attempts the retry policy allows` +
          (settledAgain > 0 ? ` and the ${settledAgain} its in-doubt settles added` : ''),
      );
    }
    const item = table.getEffect(SLOT, hashKey(to));
    if (
      item?.state === EffectState.Failed &&
      item.retryAt === undefined &&
      (item.attempts ?? 0) < scenario.effectAttempts
    ) {
      problems.push(`${to} failed for good after ${item.attempts} of ${scenario.effectAttempts} attempts`);
    }
  }
  for (const release of watch.releases) {
    if (release.kind === 'error' || release.noProgress === 0) continue;
    const actor = actors.find((a) => a.name === release.actor);
    // A run the provider stopped achieved nothing by the protocol's rule, whatever it sent.
    if (actor && stoppedByProvider(result, actor)) continue;
    const performed = provider.records.filter((r) => r.actor === release.actor && r.fate === 'ok').length;
    if (performed > 0) {
      problems.push(
        `${release.actor} (epoch ${release.epoch}) performed ${performed} effects, yet its release recorded ` +
          `${release.noProgress} runs without progress`,
      );
    }
  }
  return problems;
}

/**
 * Invariant 9: a run reports fenced only when it was: a later epoch of its own slot was granted
 * (a shard's epochs are its own; another shard's never fence it).
 */
function fencedProblems(result: SimulationResult): string[] {
  const problems: string[] = [];
  for (const actor of result.actors) {
    const response = responseOf(actor);
    if (response?.status !== 'fenced') continue;
    const slot = slotOf(actor.shard);
    const latest = result.table.audit.latestEpoch(slot);
    if (latest <= response.epoch) {
      problems.push(
        `${actor.name} reports ${slotLabel(slot)} fenced at epoch ${response.epoch}, yet no later epoch of it ` +
          `was granted (the latest is ${latest})`,
      );
    }
  }
  return problems;
}

/**
 * Invariant 9, who handles whom: a shard that splits by key hash writes and sends only keys that
 * hash to it; one whose source splits itself only the recipients of its range; a window's
 * coordinator sends nothing; the records of a window that is not split name no shard.
 */
function shardProblems(result: SimulationResult): string[] {
  const { scenario, table, provider, hashKey, actors } = result;
  const problems: string[] = [];
  const handles = (shard: number | undefined, to: string) =>
    scenario.recipients.some(
      (address, index) => address === to && ownsRecipient(scenario, hashKey, shard, index),
    );
  for (const [keyHash, item] of table.listEffects(SLOT)) {
    const to = recipientOf(result, keyHash);
    if (scenario.shards === 1) {
      if (item.shard !== undefined)
        problems.push(`${to} is on record for shard ${item.shard} of a window not split`);
      continue;
    }
    if (item.shard === undefined || !handles(item.shard, to)) {
      const by =
        scenario.split === 'by-key'
          ? `its key hashes to shard ${shardOfKeyHash(keyHash, scenario.shards)}`
          : 'outside its range';
      problems.push(`${to} is on record for shard ${item.shard ?? '(none)'}, ${by}`);
    }
  }
  if (scenario.shards === 1) return problems;
  const byName = new Map(actors.map((a) => [a.name, a]));
  for (const send of provider.records) {
    const shard = byName.get(send.actor)?.shard;
    if (shard === undefined) problems.push(`${send.actor}, the window's coordinator, sent to ${send.to}`);
    else if (!handles(shard, send.to))
      problems.push(`${send.actor} of shard ${shard} sent to ${send.to}, not its own`);
  }
  return problems;
}

/**
 * Invariant 11 at the end: what the done marks make DONE was performed; a crashed run's epoch reads
 * in doubt exactly its reservations its last written marks leave uncovered; a run that returned
 * with its every checkpoint written left none of its performed effects uncovered (the checkpointer
 * writes what is left before the run tallies); and no run counts in doubt a reservation it met
 * covered by an earlier epoch's marks.
 */
function markProblems(result: SimulationResult): string[] {
  const { table, watch, provider, hashKey, actors } = result;
  const problems = watch.unperformedProblems('at the end');
  const marks = table.windowDoneMarks(SLOT);
  const stored = table.listEffects(SLOT);
  for (const actor of actors) {
    const epoch = actor.epoch;
    if (epoch === undefined) continue;
    const slot = slotOf(actor.shard);
    const last = watch.lastMarks(slot, epoch);
    const own = stored.filter(
      ([, item]) => item.state === EffectState.Reserved && item.epoch === epoch && item.shard === actor.shard,
    );
    if (actor.status === 'crashed') {
      for (const [keyHash, item] of own) {
        const inDoubt = effectiveItem(keyHash, item, marks).state === EffectState.Reserved;
        if (inDoubt === !covers(last, item.seq)) continue;
        problems.push(
          `${actor.name} (epoch ${epoch}) crashed, and ${recipientOf(result, keyHash)}'s reservation number ${item.seq} ` +
            `reads ${inDoubt ? 'in doubt' : 'DONE'}, though the last done marks it wrote (${describeMarks(last)}) ` +
            `${inDoubt ? 'cover' : 'do not cover'} it`,
        );
      }
    }
    const response = responseOf(actor);
    const clean =
      (response?.status === 'completed' || response?.status === 'yielded' || response?.status === 'stuck') &&
      !watch.lostCheckpoint(actor.name);
    if (clean) {
      const performed = new Set(
        provider.records.filter((r) => r.actor === actor.name && r.fate === 'ok').map((r) => hashKey(r.to)),
      );
      for (const [keyHash, item] of own) {
        if (!performed.has(keyHash) || effectiveItem(keyHash, item, marks).state !== EffectState.Reserved)
          continue;
        problems.push(
          `${actor.name} (epoch ${epoch}) returned ${response.status} with every checkpoint written, yet ` +
            `${recipientOf(result, keyHash)}, which it performed (number ${item.seq}), reads in doubt: its last ` +
            `done marks (${describeMarks(last)}) do not cover it`,
        );
      }
    }
    if (!response || !('summary' in response)) continue;
    for (const keyHash of response.summary.inDoubtKeys) {
      if (!watch.metCovered(actor.name).has(keyHash)) continue;
      problems.push(
        `${actor.name} (epoch ${epoch}) counts ${recipientOf(result, keyHash)} in doubt, though the reservation it ` +
          "met was an earlier epoch's that its done marks cover: DONE",
      );
    }
  }
  return problems;
}

/**
 * When STUCK is the protocol's own answer, not a liveness failure:
 *
 * - Past the deadline: the STUCK was written by a run whose clock was past the window's deadline
 *   (less the largest skew), the walk had never reached the end (else the window finishes PARTIAL
 *   or DONE), and no healthy final delivery claimed the window before the deadline without the
 *   provider stopping it (a healthy run that claims in time walks to the end).
 * - No progress: at least 3 runs without progress are on record, and either the STUCK was written
 *   in the faulty phase, or by a run the provider stopped: its last `failureStreakLimit` sends were
 *   refused, which is how the runtime tells a failing provider (a healthy run otherwise always makes
 *   progress or waits for a retry, which is not a run without progress). Invariant 6 already holds
 *   every release to the rule that a run that performed an effect resets the count.
 */
function stuckProblems(result: SimulationResult, slot: Slot, ending: SlotEnding): string[] {
  const { scenario, table, watch } = result;
  const actors = result.actors.filter((a) => a.shard === slot.shard);
  const record = table.getSlot(slot);
  const stuck = [...watch.releases]
    .reverse()
    .find((r) => r.shard === slot.shard && r.state === SlotState.Stuck);
  if (!record || !stuck) return [`${slotLabel(slot)} is STUCK, yet no release wrote it`];
  const why = `${slotLabel(slot)} STUCK by ${stuck.actor} (${record.lastError})`;
  const problems: string[] = [];
  if (ending === 'STUCK (deadline)') {
    const deadline = deadlineOf(scenario);
    const walked = record.checkpoint ? (JSON.parse(record.checkpoint) as Checkpoint).walked : false;
    if (stuck.clockAt <= deadline - MAX_SKEW_MS) problems.push(`${why} before the deadline by its own clock`);
    if (walked)
      problems.push(`${why} although its walk had reached the end: it should finish PARTIAL or DONE`);
    const inTime = actors.find(
      (a) =>
        a.role === 'final' &&
        a.epoch !== undefined &&
        START + (a.startedAt ?? 0) <= deadline &&
        !stoppedByProvider(result, a),
    );
    if (inTime)
      problems.push(`${why} although ${inTime.name}, a healthy delivery, claimed it before the deadline`);
    return problems;
  }
  if ((record.noProgress ?? 0) < MAX_RUNS_WITHOUT_PROGRESS) {
    problems.push(`${why} after ${record.noProgress ?? 0} runs without progress`);
  }
  const writer = actors.find((a) => a.name === stuck.actor);
  if (stuck.role === 'final' && !(writer && stoppedByProvider(result, writer))) {
    problems.push(`${why}: a healthy run in the final phase gave up, and the provider had not stopped it`);
  }
  return problems;
}

/**
 * True when the run stopped for a failing provider: it says so (or, killed before it could say,
 * given up as STUCK, or answered fenced, it may have), and at least `failureStreakLimit` of its sends failed (refused
 * or timed out), which is what makes the runtime stop. The runtime counts the streak in the order
 * failures are recorded, which concurrent sends can make differ from the order the provider saw
 * them: the count is what holds.
 */
function stoppedByProvider(result: SimulationResult, actor: SimActor): boolean {
  const failed = result.provider.records.filter(
    (r) => r.actor === actor.name && r.fate !== 'ok' && r.fate !== 'cancelled',
  ).length;
  if (failed < result.scenario.failureStreakLimit) return false;
  const response = responseOf(actor);
  // A STUCK run's reason names the deadline or the count, not what stopped it, and a run whose
  // release committed but answered fenced (its reply lost, a later epoch there by the client's
  // retry) says nothing of it: the sends tell.
  if (!response || response.status === 'stuck' || response.status === 'fenced') return true;
  return response.status === 'yielded' && response.reason === 'provider-failing';
}

function facts(result: SimulationResult, record: SlotItem | undefined): Record<string, number> {
  const { scenario, table, actors, watch, faults, provider } = result;
  const responses = actors.map(responseOf);
  const count = (predicate: (a: SimActor) => boolean) => actors.filter(predicate).length;
  const yielded = (reason: string) =>
    responses.filter((r) => r?.status === 'yielded' && r.reason === reason).length;
  const continuations = actors.filter((a) => a.role !== 'fire');
  const retries = actors.filter((a) => a.role === 'fire' && a.attemptNumber > 1);
  const overlaps = (a: SimActor, b: SimActor) =>
    (a.startedAt ?? 0) <= (b.endedAt ?? Number.POSITIVE_INFINITY) &&
    (b.startedAt ?? 0) <= (a.endedAt ?? Number.POSITIVE_INFINITY);
  const summary = record?.summary ? (JSON.parse(record.summary) as WindowSummary) : undefined;
  const shardActors = actors.filter((a) => a.shard !== undefined);
  const shardStates = runSlots(scenario).map((slot) =>
    slot.shard === undefined ? undefined : table.getSlot(slot)?.state,
  );
  return {
    ...(scenario.shards > 1
      ? {
          'a split window': 1,
          'a split by the source': scenario.split === 'source' ? 1 : 0,
          'a shard taken over': watch.counts.shardTakeovers,
          'a shard invocation with faults': count((a) => a.shard !== undefined && a.role === 'continuation'),
          'a shard sent twice': runSlots(scenario).filter(
            (slot) => result.queue.shardMessages(slot.shard ?? 0).length > 1,
          ).length,
          'a shard run twice at once': shardActors.filter((a) =>
            shardActors.some((b) => b !== a && b.shard === a.shard && overlaps(a, b)),
          ).length,
          'a coordinator stopped between its fan-out and SHARDED': count(
            (a) =>
              a.fanOuts > 0 &&
              ((a.status === 'crashed' && /^fan-out\b/.test(a.lastLanded ?? '')) ||
                a.pausedAt.some((at) => /^(after fan-out|before release)\b/.test(at))),
          ),
          'a shard ending before its window was SHARDED': watch.counts.shardEndsBeforeSharded,
          'a shard ending again after its window finished': watch.counts.shardEndsAfterFinish,
          'a crash between a shard completing and its window hearing of it': count(
            (a) => a.shard !== undefined && a.status === 'crashed' && /^complete\b/.test(a.lastLanded ?? ''),
          ),
          'two shards finishing the window at once':
            new Set(watch.finishAttempts.map((f) => f.actor)).size > 1 ? 1 : 0,
          'a late Scheduler retry racing the shards': retries.filter((r) =>
            shardActors.some((s) => overlaps(r, s)),
          ).length,
          'a key met by two shards': watch.counts.keysMetByAnotherShard,
          'a shard STUCK': shardStates.filter((s) => s === SlotState.Stuck).length,
          'a shard FAILED': shardStates.filter((s) => s === SlotState.Failed).length,
        }
      : {}),
    'a takeover': watch.counts.takeovers,
    'a crash': count((a) => a.status === 'crashed'),
    'a pause': actors.reduce((n, a) => n + a.pauses, 0),
    'a throttled request': faults.throttled,
    'a lost reply': faults.lostReplies,
    'a slow request': faults.slow,
    'a request failing every attempt': faults.exhausted,
    'a resumable source': scenario.resumable ? 1 : 0,
    'a continuation': continuations.length,
    'a continuation with faults': count((a) => a.role === 'continuation'),
    'a duplicated continuation': result.engine.duplicates,
    'a continuation racing a late Scheduler retry': continuations.filter((c) =>
      retries.some((r) => overlaps(c, r)),
    ).length,
    'a continuation left for the final phase': result.engine.deferred,
    'a crash right after its release': count(
      (a) => a.status === 'crashed' && /^release\b/.test(a.lastLanded ?? ''),
    ),
    'a resume from a checkpoint': watch.counts.resumes,
    'a checkpoint written': watch.counts.checkpoints,
    'a refusal recorded': watch.counts.refusalsRecorded,
    'a retried refusal': watch.counts.retriedRefusals,
    'a refusal failing for good': watch.counts.permanentFailures,
    'a cancelled send put back': watch.counts.cancelled,
    'a reservation deleted': watch.counts.unreserved,
    'a run completed before the final phase': count(
      (a) => a.role !== 'final' && responseOf(a)?.status === 'completed',
    ),
    'a duplicate standing down': responses.filter((r) => r?.status === 'duplicate').length,
    'a continuation told to wait': responses.filter(
      (r) => r?.status === 'duplicate' && r.outcome.kind === 'waiting',
    ).length,
    'a run fenced': responses.filter((r) => r?.status === 'fenced').length,
    'a run losing its lease': responses.filter((r) => r?.status === 'lease-lost').length,
    'a run yielding for time': yielded('time'),
    'a run yielding on store errors': yielded('store-error'),
    'a run yielding on a failing provider': yielded('provider-failing'),
    'a run waiting for a retry': yielded('retry-wait'),
    'a job failing': count((a) => a.result?.kind === 'threw' && !(a.result.error instanceof StoreError)),
    'a run throwing a StoreError': count(
      (a) => a.result?.kind === 'threw' && a.result.error instanceof StoreError,
    ),
    'effects in doubt at the end': summary?.inDoubt ?? 0,
    'failed effects at the end': summary?.failed ?? 0,
    'a window ending past its deadline': (record?.completedAt ?? 0) > deadlineOf(scenario) ? 1 : 0,
    'a reservation in flight across a takeover': table.audit.inFlightStaleReservations,
    'a reservation issued after a takeover': table.audit.lateReservations.length,
    'work after the invocation returned': actors.reduce((n, a) => n + a.afterReturn.length, 0),
    'an email delivered': provider.records.filter((r) => r.delivered).length,
    ...markFacts(result),
  };
}

/** What the done marks came to in one case (invariant 11), for the run's statistics. */
function markFacts(result: SimulationResult): Record<string, number> {
  const { table, actors, watch } = result;
  const marks = table.windowDoneMarks(SLOT);
  const reserved = table.listEffects(SLOT).filter(([, item]) => item.state === EffectState.Reserved);
  const covered = reserved.filter(([keyHash, item]) => effectiveItem(keyHash, item, marks) !== item);
  return {
    'a reservation read DONE by its done marks': covered.length,
    'a performed effect its run left in doubt, uncovered': reserved.filter(
      ([keyHash, item]) =>
        effectiveItem(keyHash, item, marks) === item && watch.performedBy(keyHash, item.epoch, item.shard),
    ).length,
    "an earlier epoch's reservation met done by its marks": actors.filter(
      (a) => watch.metCovered(a.name).size > 0,
    ).length,
  };
}

function recipientOf(result: SimulationResult, keyHash: string): string {
  return result.scenario.recipients.find((to) => result.hashKey(to) === keyHash) ?? keyHash.slice(0, 8);
}
