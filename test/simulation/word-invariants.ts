import { slotPartitionKey } from '../../shared/backends/dynamodb/table-layout.js';
import type { EffectItem } from '../../shared/backends/memory/memory-table.js';
import { type EffectRecord, EffectState, type ProviderWord, SlotState } from '../../shared/slot/ports.js';
import type { Slot } from '../../shared/slot/slot.js';
import { MetricName } from '../../shared/telemetry/metric-names.js';
import { afterGraceOf, deadlineOf, graceOf, START } from './scenario.js';
import type { SimulationResult } from './simulation.js';
import { type ObservedCompletion, SLOT, slotLabel, slotOf } from './store-watch.js';

/** The provider's word on a record, when it is about the record's own reservation. */
const wordOf = (record: { readonly epoch: number; readonly provider?: ProviderWord }) =>
  record.provider?.epoch === record.epoch ? record.provider : undefined;

/**
 * Invariant 10, the provider's word: the second emails the protocol allows.
 *
 * A settle that makes an in-doubt effect due again (`retry`) sends it again; when the provider had
 * delivered the message of that reservation, that is a second email. The protocol allows it in one
 * case only, the documented "probably safe" one: the job re-sends what has no word after the grace
 * period (`afterGrace: 'resend'`), the resolver read no word, and the provider's Send arrived only
 * once the grace period was over by the resolver's clock, or never (`byResend`, counted). Under
 * `'report'` nobody gets a second email.
 *
 * Any other second email is a violation, named here (a settle the resolver's rules forbid is named
 * by the store watch as it applies).
 */
export interface Resends {
  /** Second emails each recipient may have, by address. */
  readonly allowed: ReadonlyMap<string, number>;
  readonly byResend: number;
  /** Settles that made due again a message the provider delivered, where the protocol does not allow it. */
  readonly problems: readonly string[];
}

/** The second emails of one case, by settle: the ones the protocol allows, and the ones it does not. */
export function resendsOf(result: SimulationResult): Resends {
  const { scenario, watch, provider, actors } = result;
  const allowed = new Map<string, number>();
  const problems: string[] = [];
  let byResend = 0;
  const grace = graceOf(scenario);
  for (const settle of watch.settles) {
    const read = settle.read;
    if (settle.to !== 'retry' || !read) continue;
    const message = provider.messageOf(settle.keyHash, read.epoch, read.shard);
    // Nothing reached the recipient: sending it again is its first email.
    if (!message?.delivered) continue;
    const word = wordOf(read);
    const again = `${settle.actor} made ${message.to} due again, whose message of epoch ${read.epoch} the provider delivered`;
    if (word?.outcome === 'rejected') {
      problems.push(`${again}, on a rejection the provider never published`);
      continue;
    }
    // A settle on an acceptance, or with no word under 'report': the store watch names it.
    if (word !== undefined || afterGraceOf(scenario) !== 'resend') continue;
    const skew = actors.find((a) => a.name === settle.actor)?.plan.skewMs ?? 0;
    const sendArrived = message.arrivals.find((a) => a.event === 'Send')?.at;
    const graceEndsAt = (read.reservedAt ?? Number.NEGATIVE_INFINITY) + grace;
    const arrivedByResolverClock = sendArrived === undefined ? undefined : START + sendArrived + skew;
    if (arrivedByResolverClock !== undefined && arrivedByResolverClock < graceEndsAt) {
      problems.push(
        `${again}: a second email, though the provider's Send arrived ${graceEndsAt - arrivedByResolverClock} ms ` +
          `before the grace period of ${grace} ms ended`,
      );
      continue;
    }
    byResend++;
    allowed.set(message.to, (allowed.get(message.to) ?? 0) + 1);
  }
  return { allowed, byResend, problems };
}

/**
 * True when `item`, DONE, is done on the provider's Send of a message it then rejected (SES: a Send,
 * then a Reject for a virus): the protocol takes a Send at its word, so nobody got that email, and
 * nobody is told (as for a bounce). The one DONE record with no delivery.
 */
export function doneOnSendRejectedAfter(
  result: SimulationResult,
  keyHash: string,
  item: EffectItem,
): boolean {
  return (
    item.state === EffectState.Done &&
    result.provider.messageOf(keyHash, item.epoch, item.shard)?.rejectedAfterTaking === true
  );
}

/**
 * Invariant 10 against the provider's record and the end of the case: every message names the
 * effect (key hash, epoch, shard) of the run that sent it; an effect settled done was taken by the
 * provider in that reservation; a rejected message whose word reached its record before its slot's
 * completing read was sent again or failed (liveness), never left in doubt; the runs count every
 * settle they made (`metricProblems`); and what `resendsOf` found.
 */
export function wordProblems(result: SimulationResult, resends: Resends): string[] {
  const { table, watch, provider } = result;
  const problems = [
    ...provider.mistagged.map((m) => `a message mistagged: ${m}`),
    ...resends.problems,
    ...metricProblems(result),
  ];
  for (const settle of watch.settles) {
    const read = settle.read;
    if (settle.to !== 'done' || !read) continue;
    const message = provider.messageOf(settle.keyHash, read.epoch, read.shard);
    if (message?.outcome !== 'accepted') {
      problems.push(
        `${settle.actor} settled ${message?.to ?? settle.keyHash} done, but the provider never took its message of ` +
          `epoch ${read.epoch} (${message ? 'it rejected it' : 'it had none'})`,
      );
    }
  }
  for (const message of provider.messages) {
    if (message.outcome !== 'rejected') continue;
    const recorded = message.arrivals.find((a) => a.written);
    const slot = slotOf(message.shard);
    const state = table.getSlot(slot)?.state;
    const completion = watch.completionOf(slot);
    if (!recorded || (state !== SlotState.Done && state !== SlotState.Partial)) continue;
    // A word recorded after the completing run's last read: the window was over for it.
    if ((completion?.listedVersion ?? Number.NEGATIVE_INFINITY) < recorded.version) continue;
    const item = table.effectiveEffect(SLOT, message.keyHash);
    if (item?.state === EffectState.Reserved && item.epoch === message.epoch) {
      problems.push(
        `${message.to}'s message of epoch ${message.epoch} was rejected, its word on record at ${recorded.at} ms, ` +
          `yet ${slotLabel(slot)} completed with it in doubt, never sent again`,
      );
    }
  }
  return problems;
}

/** The resolution metric a settle counts, by what the resolver read: the word of its reservation. */
function metricOf(to: 'done' | 'retry', read: EffectItem | EffectRecord): MetricName {
  if (to === 'done') return MetricName.InDoubtConfirmed;
  return wordOf(read)?.outcome === 'rejected' ? MetricName.InDoubtRejected : MetricName.InDoubtResent;
}

const RESOLUTION_METRICS = [
  MetricName.InDoubtConfirmed,
  MetricName.InDoubtRejected,
  MetricName.InDoubtResent,
] as const;

/**
 * Invariant 10, the resolution's counts equal the settles: each run's ledger answers "settled"
 * exactly for the settles the store committed for it and whose reply it heard, and the run counts
 * InDoubtConfirmed, InDoubtRejected and InDoubtResent exactly for those, by kind. A settle whose
 * reply was lost is not counted (the client's retry meets the record already settled, and the
 * ledger cannot tell its own settle from another's): the statistics count those. And a run that
 * completed its slot counts EffectInDoubt once, for what its summary reports in doubt; any other
 * run that returned counts none.
 */
function metricProblems(result: SimulationResult): string[] {
  const problems: string[] = [];
  for (const actor of result.actors) {
    const heard = result.watch.settles.filter((s) => s.actor === actor.name && s.committed && s.heard);
    if (actor.settlesAnswered !== heard.length) {
      problems.push(
        `${actor.name}'s ledger answered ${actor.settlesAnswered} settles as made, but the store committed ` +
          `${heard.length} whose reply it heard`,
      );
    }
    for (const metric of RESOLUTION_METRICS) {
      const settled = heard.filter((s) => s.to && s.read && metricOf(s.to, s.read) === metric).length;
      const counted = actor.metrics.get(metric) ?? 0;
      if (counted !== settled) {
        problems.push(
          `${actor.name} counted ${metric} ${counted} times for the ${settled} settles it made of that kind`,
        );
      }
    }
    const response = actor.result?.kind === 'returned' ? actor.result.response : undefined;
    if (!response) continue;
    const inDoubt = response.status === 'completed' ? response.window.inDoubt : 0;
    const counted = actor.metrics.get(MetricName.EffectInDoubt) ?? 0;
    if (counted !== inDoubt) {
      problems.push(
        `${actor.name} (${response.status}) counted EffectInDoubt ${counted}, but its summary reports ${inDoubt} in doubt`,
      );
    }
  }
  return problems;
}

function recipientOf(result: SimulationResult, keyHash: string): string {
  return result.scenario.recipients.find((to) => result.hashKey(to) === keyHash) ?? keyHash;
}

/**
 * Invariant 10 against a completed slot's summary: what it reports in doubt is exactly what the
 * provider's word and the grace period could not settle. Each RESERVED record in the ledger the
 * completing run read has no word of its epoch (an accepted one is done, a rejected one due again);
 * it is still inside its grace period only when the window had to finish (its deadline came); and
 * past its grace period only when the job keeps such effects in doubt ('report'). A record the
 * completing run tried to settle and found moved is left out: its tally was read before it moved.
 */
export function resolutionProblems(
  result: SimulationResult,
  slot: Slot,
  completion: ObservedCompletion,
  completedAt: number,
  counts: (item: EffectItem) => boolean,
): string[] {
  const { scenario, actors } = result;
  const problems: string[] = [];
  const grace = graceOf(scenario);
  const deadline = deadlineOf(scenario);
  const who = `${completion.actor} completed ${slotLabel(slot)}`;
  const refused = actors.find((a) => a.name === completion.actor)?.settlesRefused ?? new Set();
  for (const [keyHash, item] of completion.ledger ?? []) {
    if (!counts(item) || item.state !== EffectState.Reserved) continue;
    const moved = refused.has(keyHash);
    if (moved) continue;
    const to = recipientOf(result, keyHash);
    const word = wordOf(item);
    const graceEndsAt = (item.reservedAt ?? Number.NEGATIVE_INFINITY) + grace;
    if (word) {
      problems.push(
        `${who} with ${to} in doubt, though the ledger it read had the provider's ${word.outcome} word (${word.event})`,
      );
    } else if (graceEndsAt > completedAt) {
      if (completedAt <= deadline) {
        problems.push(
          `${who} before its deadline with ${to} in doubt ${graceEndsAt - completedAt} ms before its grace period ` +
            'ended: it should have waited for the provider’s word',
        );
      }
    } else if (afterGraceOf(scenario) === 'resend') {
      problems.push(
        `${who} with ${to} in doubt past its grace period, though the job re-sends what has no word`,
      );
    }
  }
  return problems;
}

/** What happened to the provider's words in one case, for the run's statistics. */
export function wordFacts(result: SimulationResult, resends: Resends): Record<string, number> {
  const { scenario, provider, watch, actors, logged, table } = result;
  const grace = graceOf(scenario);
  const byName = new Map(actors.map((a) => [a.name, a]));
  const taken = provider.messages.filter((m) => m.outcome === 'accepted');
  const arrivals = provider.messages.flatMap((m) => m.arrivals.map((a) => ({ message: m, arrival: a })));
  // A word landing on a reservation a later run of its slot has read, while that run was still going.
  const duringResolution = arrivals.filter(({ message, arrival }) =>
    watch.ledgerReads.some(({ actor, at }) => {
      const reader = byName.get(actor);
      return (
        reader !== undefined &&
        reader.shard === message.shard &&
        (reader.epoch ?? 0) > message.epoch &&
        at <= arrival.at &&
        arrival.at <= (reader.endedAt ?? Number.POSITIVE_INFINITY)
      );
    }),
  );
  // A word arriving once a later epoch of its slot was granted: its sender's lease had passed on.
  const afterTakeover = arrivals.filter(({ message, arrival }) => {
    const slot = slotOf(message.shard);
    const name = `${slotPartitionKey(slot.jobId, slot.window)}${slot.shard === undefined ? '' : `/shard ${slot.shard}`}`;
    return table.audit.grants.some(
      (g) => g.slot === name && g.epoch > message.epoch && g.version < arrival.version,
    );
  });
  const settled = (to: 'done' | 'retry', word: 'accepted' | 'rejected' | undefined) =>
    watch.settles.filter((s) => s.to === to && s.read && wordOf(s.read)?.outcome === word).length;
  const secondEmails = [...resends.allowed.keys()].filter((to) => provider.deliveriesTo(to).length > 1);
  return {
    'a message the provider rejected': provider.messages.length - taken.length,
    'a message taken, then rejected': taken.filter((m) => m.rejectedAfterTaking).length,
    'a word recorded': arrivals.filter(({ arrival }) => arrival.written).length,
    'a word arriving before its sender ended': arrivals.filter(
      ({ message, arrival }) =>
        arrival.written && arrival.at < (byName.get(message.actor)?.endedAt ?? Number.POSITIVE_INFINITY),
    ).length,
    'a word arriving while a later run resolves': duringResolution.length,
    'a word arriving after a takeover': afterTakeover.length,
    'a word arriving after the grace period': arrivals.filter(
      ({ message, arrival }) => grace > 0 && arrival.at >= message.sentAt + grace,
    ).length,
    'a word arriving after its window finished': arrivals.filter(({ arrival }) => arrival.answer === 'done')
      .length,
    'a word for a reservation since replaced': arrivals.filter(({ arrival }) => arrival.answer === 'unknown')
      .length,
    'a word duplicated': provider.messages.filter(
      (m) =>
        m.arrivals.filter((a) => a.event === 'Send').length > 1 ||
        m.arrivals.filter((a) => a.event === 'Reject').length > 1,
    ).length,
    'a taken message whose Send was lost': taken.filter((m) => !m.arrivals.some((a) => a.event === 'Send'))
      .length,
    'a rejection recorded before the acceptance': taken.filter((m) => {
      const reject = m.arrivals.findIndex((a) => a.event === 'Reject' && a.written);
      const send = m.arrivals.findIndex((a) => a.event === 'Send' && a.written);
      return reject !== -1 && send > reject;
    }).length,
    'an in-doubt effect confirmed by its word': settled('done', 'accepted'),
    'an in-doubt effect rejected and due again': settled('retry', 'rejected'),
    'an in-doubt effect re-sent after its grace period': settled('retry', undefined),
    'a settle finding its record moved on': watch.settles.filter((s) => !s.committed).length,
    'a settle committed but unheard (uncounted)': watch.settles.filter((s) => s.committed && !s.heard).length,
    // A done mark on the effect's own record (EffectLedger.markDone) after a later run settled it.
    'a done mark landing after its reservation was settled': table.audit.doneMarksAfterSettle,
    'a second email by the resend policy': resends.byResend > 0 ? secondEmails.length : 0,
    'a recipient missed: done on a Send the provider then rejected': table
      .effectiveEffects(SLOT)
      .filter(
        ([keyHash, item]) =>
          doneOnSendRejectedAfter(result, keyHash, item) &&
          provider.deliveriesTo(recipientOf(result, keyHash)).length === 0,
      ).length,
    "a window waiting for the provider's word":
      logged.get("walk finished; effects in doubt wait for the provider's word") ?? 0,
  };
}
