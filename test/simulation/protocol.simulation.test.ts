import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { checkSimulation, simulationEnvironment } from './run-simulation.js';
import {
  type ActorPlan,
  FIRST_FIRE,
  recipientAddress,
  type Scenario,
  scenarios,
  writtenWindow,
} from './scenario.js';

/*
 * The deterministic simulation of the claim, lease, epoch, effect-ledger and continuation protocol
 * (see docs/simulation.md). Every case is a window fired by 2 to 5 actors through the real handler,
 * each a receive of a message on the job's work queue, which delivers the window again while it is
 * not finished; a third of the windows are split into 2 to 4 shards, whose messages the
 * coordinator sends to the same queue; crashes, pauses, Lambda timeouts, skewed clocks, lost replies,
 * throttling, slow requests, refusals and provider timeouts strike the fires, the first
 * redeliveries and the first shard deliveries, and the provider's word about each message reaches
 * the ledger early, late, twice or never, in an order fast-check's scheduler picks; then a final, healthy phase delivers what is left on the queue until
 * the window is finished, and the invariants are checked. A failure prints fast-check's seed and
 * path, the shrunk scenario, the scheduler's step log and the simulation's trace. To replay it:
 *
 *   SIM_SEED=<seed> SIM_PATH='<path>' npx vitest run test/simulation/protocol.simulation.test.ts
 */

/** Cases per run, and the real time after which no new case starts (whichever comes first). */
const CASES = 12_000;
const TIME_LIMIT_MS = 25_000;
/**
 * Thousands of cases, always: a machine too busy to run this many within the time limit runs on
 * until it has (at the time limit, no new case starts; a top-up of the missing cases follows).
 */
const MIN_CASES = 2_000;

const replay = simulationEnvironment();
const timeLimitMs = replay.seconds !== undefined ? replay.seconds * 1000 : TIME_LIMIT_MS;

describe('the protocol under simulated faults', () => {
  it(
    'sends no email twice, accounts for every effect once, never re-grants an epoch, accepts no stale ' +
      'write, completes a window once, retries refusals by the policy, checkpoints only what is settled, ' +
      "settles in-doubt effects only as the provider's word and the grace period allow, " +
      'marks done only what was performed and, after a crash, leaves in doubt exactly what its last done ' +
      'marks left uncovered, and finishes every window, split into shards or not, whatever the interleaving',
    async () => {
      const report = await checkSimulation({
        numRuns: replay.numRuns ?? CASES,
        timeLimitMs: replay.path === undefined ? timeLimitMs : undefined,
        ...(replay.seed !== undefined ? { seed: replay.seed } : {}),
        ...(replay.path !== undefined ? { path: replay.path } : {}),
      });
      console.info(
        `simulation: ${report.details.numRuns} cases in ${(report.elapsedMs / 1000).toFixed(1)} s ` +
          `(seed ${report.details.seed}${report.details.interrupted ? ', stopped at the time limit' : ''})\n${report.stats}`,
      );
      if (report.failure) throw new Error(report.failure);
      if (replay.path !== undefined) return;
      let cases = report.details.numRuns;
      if (cases < MIN_CASES && replay.numRuns === undefined) {
        const topUp = await checkSimulation({ numRuns: MIN_CASES - cases, stats: report.stats });
        console.info(
          `the machine ran only ${cases} cases in the time limit: ${topUp.details.numRuns} more in ` +
            `${(topUp.elapsedMs / 1000).toFixed(1)} s (seed ${topUp.details.seed})\n${report.stats}`,
        );
        if (topUp.failure) throw new Error(topUp.failure);
        cases += topUp.details.numRuns;
      }
      expect(cases).toBeGreaterThanOrEqual(MIN_CASES);
      // The run reached the states that matter, not only the happy path.
      for (const fact of [
        'a takeover',
        'a crash',
        'a pause',
        'a lost reply',
        'a reservation in flight across a takeover',
        'a continuation with faults',
        'a duplicated continuation',
        'a continuation racing a late Scheduler retry',
        'a crash right after its release',
        'a run yielding for time',
        'a retried refusal',
        'a refusal failing for good',
        'a cancelled send put back',
        'a resume from a checkpoint',
        'a checkpoint written',
        'a split window',
        'a split by the source',
        'a shard taken over',
        'a shard invocation with faults',
        'a shard sent twice',
        'a shard run twice at once',
        'a coordinator stopped between its fan-out and SHARDED',
        'a shard ending before its window was SHARDED',
        'a shard ending again after its window finished',
        'a crash between a shard completing and its window hearing of it',
        'two shards finishing the window at once',
        'a late Scheduler retry racing the shards',
        'a key met by two shards',
        'a shard STUCK',
        'a shard FAILED',
        // The provider's word: before, during and after a takeover, late, lost and duplicated.
        'a word recorded',
        'a word arriving before its sender ended',
        'a word arriving while a later run resolves',
        'a word arriving after a takeover',
        'a word arriving after the grace period',
        'a word arriving after its window finished',
        'a word for a reservation since replaced',
        'a word duplicated',
        'a taken message whose Send was lost',
        'a message taken, then rejected',
        "a window waiting for the provider's word",
        'an in-doubt effect confirmed by its word',
        'an in-doubt effect rejected and due again',
        'an in-doubt effect re-sent after its grace period',
        'a second email by the resend policy',
        // The done marks: effects done by them, a crash leaving performed effects uncovered, and a
        // later run meeting what an earlier epoch's marks cover.
        'a reservation read DONE by its done marks',
        'a performed effect its run left in doubt, uncovered',
        "an earlier epoch's reservation met done by its marks",
      ]) {
        expect(report.stats.casesWith(fact), fact).toBeGreaterThan(0);
      }
      for (const ending of [
        'DONE',
        'PARTIAL',
        'FAILED',
        'STUCK (deadline)',
        'sharded DONE',
        'sharded PARTIAL',
        'sharded STUCK',
      ]) {
        expect(report.stats.endings.get(ending) ?? 0, ending).toBeGreaterThan(0);
      }
    },
    // The time limit, then at worst as long again for a top-up on a busy machine.
    2 * timeLimitMs + 35_000,
  );

  // Finding 1 (docs/simulation.md): the reservation a run met when the same key came twice in its
  // list looked like its own lost reply, so the effect ran again. Fixed in EffectRunner.
  it('does not email a recipient twice when the list names them twice', async () => {
    const repeated = fc
      .array(fc.integer({ min: 0, max: 2 }), { minLength: 2, maxLength: 5 })
      .map((indexes) => indexes.map(recipientAddress));
    const report = await checkSimulation({
      scenarios: scenarios(repeated),
      numRuns: 500,
      endOnFailure: true,
    });
    if (report.failure) throw new Error(report.failure);
  });

  // Finding 2 (docs/simulation.md): when one effect of onceEach threw, the run released its slot and
  // returned while its other workers kept reserving and sending. Fixed in drainConcurrently and runSlot.
  it('reserves and sends nothing once a failed run has released its slot', async () => {
    const stormy: ActorPlan = {
      ...FIRST_FIRE,
      // The claim and two reservations go through; then the store throttles everything for a while,
      // so recording the refused send fails every attempt while the other worker is still sending.
      requests: ['ok', 'ok', 'ok', ...Array<'throttle'>(6).fill('throttle')],
      sends: ['refused'],
    };
    const retry = (startAtMs: number): ActorPlan => ({ ...FIRST_FIRE, startAtMs, attemptNumber: 2 });
    const window = fc.record({ n: fc.integer({ min: 0, max: 8 }), resumable: fc.boolean() }).map(
      ({ n, resumable }): Scenario =>
        writtenWindow({
          recipients: ['r0', 'r1', 'r2', 'r3', 'r4'].map((r) => `${r}@example.test`),
          resumable,
          concurrency: 2,
          markBatchSize: 3,
          actors: [stormy, retry(n * 250)],
        }),
    );
    const report = await checkSimulation({ scenarios: window, numRuns: 500, endOnFailure: true });
    if (report.failure) throw new Error(report.failure);
  });
});
