import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { EffectState, SlotState, type WindowSummary } from '../../shared/slot/ports.js';
import { judge } from './invariants.js';
import { FIRST_FIRE, type Phase, recipientAddress, type Scenario, writtenWindow } from './scenario.js';
import { type SimulationResult, simulate } from './simulation.js';
import { covers, SLOT } from './store-watch.js';

/*
 * The checkpoint rule, crash by crash: one small window, run by one process killed at each of its
 * awaited operations in turn (before the operation takes effect, and after), then finished by a
 * healthy run of the final phase. Whatever the crash point, nobody is emailed twice, and the window
 * reports in doubt exactly the crashed run's reservations its last written done marks leave
 * uncovered (numbered at or above `below`, or open): its performed effects the marks cover are
 * DONE, every other reservation of it in doubt, and nothing else.
 */

const RECIPIENTS = Array.from({ length: 6 }, (_, index) => recipientAddress(index));
const CONCURRENCY = 2;
const MARK_BATCH_SIZE = 2;
/** The scheduler's seeds: each a fixed interleaving, so each crash point is one deterministic case. */
const SEEDS = [20_261_202, 7, 1_234_567];

/** The window, fired once by a process that dies at `crash`; every word from the provider is lost. */
function sweptWindow(resumable: boolean, crash: { atOp: number; phase: Phase } | undefined): Scenario {
  return writtenWindow({
    recipients: RECIPIENTS,
    resumable,
    concurrency: CONCURRENCY,
    markBatchSize: MARK_BATCH_SIZE,
    // No word settles an in-doubt effect: what is in doubt is what the marks left uncovered.
    actors: [
      { ...FIRST_FIRE, crash, words: RECIPIENTS.map(() => ({ first: [], rejectedAfter: undefined })) },
    ],
  });
}

async function run(scenario: Scenario, seed: number): Promise<SimulationResult> {
  const [scheduler] = fc.sample(fc.scheduler(), { seed, numRuns: 1 });
  if (!scheduler) throw new Error('fast-check sampled no scheduler');
  return simulate(scenario, scheduler);
}

/** What one crash point came to. */
interface Swept {
  /** Reservations of the crashed run, and those its last written marks leave uncovered. */
  readonly reserved: number;
  readonly uncovered: number;
  /** Effects the crashed run had performed that were left in doubt. */
  readonly performedInDoubt: number;
  /** What the window's summary reports in doubt. */
  readonly inDoubt: number;
}

/** Runs one crash point and checks it; returns what it came to. */
async function sweep(
  resumable: boolean,
  seed: number,
  atOp: number,
  phase: Phase,
): Promise<Swept | undefined> {
  const result = await run(sweptWindow(resumable, { atOp, phase }), seed);
  const at = `a crash ${phase} operation ${atOp} (seed ${seed})`;
  const crashed = result.actors[0];
  if (crashed?.status !== 'crashed') return undefined;
  expect(judge(result).violations, at).toEqual([]);
  const { table, provider, hashKey, watch } = result;
  const epoch = crashed.epoch;
  // Killed before its claim, the run reserved nothing: the later run is epoch 1, and does it all.
  const own = epoch === undefined ? [] : table.listEffects(SLOT).filter(([, item]) => item.epoch === epoch);
  const last = epoch === undefined ? undefined : watch.lastMarks(SLOT, epoch);
  const uncovered = new Set(
    own
      .filter(([, item]) => item.state === EffectState.Reserved && !covers(last, item.seq))
      .map(([keyHash]) => keyHash),
  );
  const sent = new Set(
    provider.records.filter((r) => r.actor === crashed.name && r.fate === 'ok').map((r) => hashKey(r.to)),
  );
  const record = table.getSlot(SLOT);
  expect(record?.state, at).toBe(SlotState.Done);
  const summary = JSON.parse(record?.summary ?? '{}') as WindowSummary;
  // Nobody twice; everyone once but those whose reservation died unsent.
  for (const to of RECIPIENTS) {
    const delivered = provider.deliveriesTo(to).length;
    expect(delivered, `${at}: ${to}`).toBe(uncovered.has(hashKey(to)) && !sent.has(hashKey(to)) ? 0 : 1);
  }
  expect(summary, at).toMatchObject({ done: RECIPIENTS.length - uncovered.size, failed: 0 });
  expect(new Set(summary.inDoubtKeys), at).toEqual(uncovered);
  return {
    reserved: own.length,
    uncovered: uncovered.size,
    performedInDoubt: [...sent].filter((keyHash) => uncovered.has(keyHash)).length,
    inDoubt: summary.inDoubt,
  };
}

describe('a run crashed at every operation in turn, then finished by another', () => {
  it.each(
    [false, true].flatMap((resumable) =>
      SEEDS.map((seed) => ({ source: resumable ? 'a resumable source' : 'a list', resumable, seed })),
    ),
  )(
    'emails nobody twice and reports in doubt exactly what the crashed run reserved past its last done marks ($source, interleaving $seed)',
    async ({ resumable, seed }) => {
      const healthy = await run(sweptWindow(resumable, undefined), seed);
      expect(judge(healthy).violations).toEqual([]);
      const operations = healthy.actors[0]?.operations ?? 0;
      // A claim, six reservations and six sends at least, done marks written as they go, the tally and the completion.
      expect(operations).toBeGreaterThanOrEqual(1 + 2 * RECIPIENTS.length + 2);
      const swept: Swept[] = [];
      for (let atOp = 0; atOp < operations; atOp++) {
        for (const phase of ['before', 'after'] as const) {
          const point = await sweep(resumable, seed, atOp, phase);
          expect(point, `a crash ${phase} operation ${atOp} of ${operations}`).toBeDefined();
          if (point) swept.push(point);
        }
      }
      expect(swept).toHaveLength(2 * operations);
      // A crash leaves in doubt at most the effects in flight and those performed since the last marks.
      const most = Math.max(...swept.map((p) => p.inDoubt));
      expect(most).toBeLessThanOrEqual(CONCURRENCY + MARK_BATCH_SIZE);
      // The sweep reached every kind of crash point: before the first reservation (nothing in doubt),
      // after a reservation and before its send (in doubt, sent to nobody), after a send and before
      // the marks that cover it (in doubt, delivered), and after the last marks (nothing in doubt).
      expect(swept.filter((p) => p.reserved === 0 && p.inDoubt === 0).length).toBeGreaterThan(0);
      expect(swept.filter((p) => p.uncovered > p.performedInDoubt).length).toBeGreaterThan(0);
      expect(swept.filter((p) => p.performedInDoubt > 0).length).toBeGreaterThan(0);
      expect(swept.filter((p) => p.reserved === RECIPIENTS.length && p.inDoubt === 0).length).toBeGreaterThan(
        0,
      );
      console.info(
        `${operations} operations, ${swept.length} crash points: ` +
          [0, 1, 2, 3, 4]
            .map((n) => `${swept.filter((p) => p.inDoubt === n).length} with ${n} in doubt`)
            .join(', ') +
          `; ${swept.filter((p) => p.performedInDoubt > 0).length} left a performed effect in doubt`,
      );
    },
  );
});
