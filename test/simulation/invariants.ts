import { StoreError } from '../../shared/errors.js';
import type { RunSummary } from '../../shared/slot/ports.js';
import { EffectState, SlotState } from '../../shared/slot/ports.js';
import { JOB_ID, SAFETY_MARGIN_MS, WINDOW } from './scenario.js';
import type { SimActor } from './sim-actor.js';
import { describeResult } from './sim-actor.js';
import type { SimulationResult } from './simulation.js';

const SLOT = { jobId: JOB_ID, window: WINDOW };

/** How a window ended, after the final healthy actor. */
export type Ending = 'completed' | 'failed' | 'unfinished';

/** What one case came to: the violations, and what happened in it, for the run's statistics. */
export interface Verdict {
  readonly violations: readonly string[];
  readonly ending: Ending;
  /** Things that happened in the case, each counted (a case is "with" a fact when its count is above 0). */
  readonly facts: Readonly<Record<string, number>>;
}

/**
 * Judges one simulated window against the protocol's invariants:
 *
 * 1. each effect runs at most once: no recipient was delivered more than once, across all actors;
 * 2. every effect not done is reported in doubt or failed, exactly: the final summary accounts for
 *    every recipient once (not done = in doubt + failed), every recipient who got nothing is in
 *    doubt or failed, every effect marked done was delivered exactly once, and the summary's done
 *    and failed counts are what its run's sends did;
 * 3. epochs per slot only grow, and every epoch a run was handed was granted (the store's audit);
 * 4. no write from a stale epoch is accepted (the store's audit); with every clock within the
 *    lease's safety margin, no run reserves an effect after a later epoch of its slot was granted;
 *    and no invocation begins a reservation or a send after it returned;
 * 5. a slot is completed at most once (the store's audit, and the runs' own reports);
 * and the window is live: a healthy actor fired after the faults finishes it.
 */
export function judge(result: SimulationResult): Verdict {
  const { scenario, table, provider, actors, final } = result;
  const violations: string[] = [];
  const everyone = [...actors, final];
  const recipients = [...new Set(scenario.recipients)];

  for (const to of recipients) {
    const deliveries = provider.deliveriesTo(to);
    if (deliveries.length > 1) {
      violations.push(
        `${to} was delivered ${deliveries.length} times, by ${deliveries.map((d) => `${d.actor} (epoch ${d.epoch})`).join(', ')}`,
      );
    }
  }

  violations.push(...table.audit.violations.map((v) => `store audit: ${v}`));
  for (const actor of everyone) {
    if (actor.epoch !== undefined && !table.audit.grants.some((g) => g.epoch === actor.epoch)) {
      violations.push(`${actor.name} ran under epoch ${actor.epoch}, which the store never granted`);
    }
  }
  const skews = everyone.map((a) => a.plan.skewMs);
  const clocksAgree = Math.max(...skews) - Math.min(...skews) <= SAFETY_MARGIN_MS;
  if (clocksAgree) {
    for (const late of table.audit.lateReservations) {
      violations.push(
        `epoch ${late.epoch} reserved ${recipientOf(result, late.keyHash)} after epoch ${late.laterEpoch} had ` +
          `been granted, with every clock within the lease's safety margin`,
      );
    }
  }
  for (const actor of everyone) {
    if (actor.afterReturn.length === 0) continue;
    violations.push(
      `${actor.name} began ${actor.afterReturn.length} reservations or sends after its invocation had returned ` +
        `(${actor.result ? describeResult(actor.result) : ''}): ${actor.afterReturn.join(', ')}`,
    );
  }
  const completedBy = everyone.filter(
    (a) => a.result?.kind === 'returned' && a.result.response.status === 'completed',
  );
  if (completedBy.length > 1) {
    violations.push(`${completedBy.map((a) => a.name).join(' and ')} each report completing the window`);
  }

  if (result.stuck) violations.push('the world never settled: some actor kept running without end');
  violations.push(...finalActorProblems(final));

  const record = table.getSlot(SLOT);
  let ending: Ending = 'unfinished';
  let summary: RunSummary | undefined;
  if (record?.state === SlotState.Done) {
    ending = 'completed';
    summary = record.summary ? (JSON.parse(record.summary) as RunSummary) : undefined;
    if (!summary) violations.push('the slot is DONE without a run summary');
    else violations.push(...accountingProblems(result, summary));
  } else if (record?.state === SlotState.Failed) {
    ending = 'failed';
  } else {
    violations.push(
      `after the final healthy actor the slot is ${record?.state ?? 'absent'}, neither done nor failed`,
    );
  }

  const outcomes = actors.map((a) => outcomeOf(a));
  const count = (outcome: string) => outcomes.filter((o) => o === outcome).length;
  return {
    violations,
    ending,
    facts: {
      'a takeover': table.audit.grants.filter((g) => g.epoch > 1 && g.epoch !== final.epoch).length,
      'a crash': actors.filter((a) => a.status === 'crashed').length,
      'a pause': actors.reduce((n, a) => n + a.pauses, 0),
      'a throttled request': result.faults.throttled,
      'a lost reply': result.faults.lostReplies,
      'a slow request': result.faults.slow,
      'a request failing every attempt': result.faults.exhausted,
      'a run completed before the final actor': count('completed'),
      'a duplicate standing down': count('duplicate'),
      'a run fenced': count('fenced'),
      'a run yielding for time': count('yielded for time'),
      'a run yielding on store errors': count('yielded for store-error'),
      'a job failing': count('failed'),
      'a run throwing a StoreError': count('store error'),
      'effects in doubt at the end': summary?.inDoubt ?? 0,
      'failed effects at the end': summary?.failed ?? 0,
      'a reservation in flight across a takeover': table.audit.inFlightStaleReservations,
      'a reservation issued after a takeover': table.audit.lateReservations.length,
      'work after the invocation returned': actors.reduce((n, a) => n + a.afterReturn.length, 0),
    },
  };
}

/** What an actor's invocation came to, in a word. */
function outcomeOf(actor: SimActor): string {
  if (actor.status === 'crashed') return 'crashed';
  const result = actor.result;
  if (!result) return 'unfinished';
  if (result.kind === 'threw') return result.error instanceof StoreError ? 'store error' : 'failed';
  const response = result.response;
  return response.status === 'yielded' ? `yielded for ${response.reason}` : response.status;
}

function finalActorProblems(final: SimActor): string[] {
  const result = final.result;
  if (!result) return ['the final healthy actor never finished'];
  if (result.kind === 'returned') {
    const response = result.response;
    if (response.status === 'completed') return [];
    if (response.status === 'duplicate' && response.outcome.kind !== 'held') return [];
  }
  return [`the final healthy actor could not finish the window: ${describeResult(result)}`];
}

/** Invariant 2, against the slot's final summary, the ledger and what the provider saw. */
function accountingProblems(result: SimulationResult, summary: RunSummary): string[] {
  const { scenario, table, provider, hashKey } = result;
  const problems: string[] = [];
  const total = scenario.recipients.length;
  const { done, skipped, inDoubt, failed, inDoubtKeys } = summary;
  if (done + skipped + inDoubt + failed !== total) {
    problems.push(
      `the final summary accounts for ${done + skipped + inDoubt + failed} of ${total} effects ` +
        `(done ${done}, skipped ${skipped}, in doubt ${inDoubt}, failed ${failed})`,
    );
  }
  if (total - (done + skipped) !== inDoubt + failed) {
    problems.push(`not done (${total - done - skipped}) is not in doubt + failed (${inDoubt} + ${failed})`);
  }
  if (inDoubtKeys.length !== Math.min(inDoubt, 50) || new Set(inDoubtKeys).size !== inDoubtKeys.length) {
    problems.push(
      `the summary lists ${inDoubtKeys.length} distinct-or-not keys for ${inDoubt} effects in doubt`,
    );
  }
  const ranBy = provider.records.filter((r) => r.epoch === summary.epoch);
  const performed = ranBy.filter((r) => r.fate === 'ok').length;
  const refused = ranBy.filter((r) => r.fate === 'refused' || r.fate === 'cancelled');
  if (performed !== done) {
    problems.push(
      `the summary of epoch ${summary.epoch} counts ${done} done, but its run completed ${performed} sends`,
    );
  }
  if (refused.length !== failed) {
    problems.push(
      `the summary of epoch ${summary.epoch} counts ${failed} failed, but ${refused.length} of its sends were refused`,
    );
  }
  const refusedInFinalRun = new Set(refused.map((r) => r.to));
  for (const to of new Set(scenario.recipients)) {
    const keyHash = hashKey(to);
    const delivered = provider.deliveriesTo(to).length;
    const record = table.getEffect(SLOT, keyHash);
    const reportedInDoubt = inDoubtKeys.includes(keyHash);
    if (record?.state === EffectState.Done && delivered !== 1) {
      problems.push(`${to} is marked done (epoch ${record.epoch}) but was delivered ${delivered} times`);
    }
    if (delivered === 0 && !reportedInDoubt && !refusedInFinalRun.has(to)) {
      const state = record ? `${record.state} by epoch ${record.epoch}` : 'no record';
      problems.push(
        `${to} got nothing, yet the final summary reports it neither in doubt nor failed (ledger: ${state})`,
      );
    }
  }
  return problems;
}

function recipientOf(result: SimulationResult, keyHash: string): string {
  return result.scenario.recipients.find((to) => result.hashKey(to) === keyHash) ?? keyHash.slice(0, 8);
}
