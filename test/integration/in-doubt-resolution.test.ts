import { describe, expect, it } from 'vitest';
import { memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import { AfterGrace as After, type AfterGrace } from '../../shared/job/in-doubt-resolution.js';
import { defineJob } from '../../shared/job/job-definition.js';
import { type RunResult, runSlot, type SlotBackend } from '../../shared/job/run-slot.js';
import type { Claim, ProviderWord } from '../../shared/slot/ports.js';
import type { Log } from '../../shared/telemetry/log.js';
import type { JobMetrics } from '../../shared/telemetry/metrics.js';
import { TEST_SECRET } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';

/*
 * Effects left in doubt settled from the provider's word before the window finishes: a run died
 * after reserving five recipients; the provider said it accepted one message and rejected another,
 * and nothing about the rest. The next runs confirm the first (never re-sent), send the rejected one
 * again, wait up to the grace period for a word about the others, then keep them in doubt (the
 * default, paged) or re-send them (opt-in).
 */

const WINDOW = '2026-11-30T06:00:00Z';
const SLOT = { jobId: 'resolution', window: WINDOW };
const START = Date.parse(WINDOW) + 1_000;
const LEASE_MS = 6_000;
const HOUR = 3_600_000;
const RECIPIENTS = [
  'r0@example.test',
  'r1@example.test',
  'r2@example.test',
  'r3@example.test',
  'r4@example.test',
];
const hashKey = hmacEffectKeys(TEST_SECRET);
const silentLog: Log = { info() {}, warn() {}, error() {} };

/** Counts every metric a run emits, by name. */
function countingMetrics() {
  const counts = new Map<string, number>();
  const metrics: JobMetrics = {
    count(name, value = 1) {
      counts.set(name, (counts.get(name) ?? 0) + value);
    },
    flush: async () => {},
  };
  return { metrics, count: (name: string) => counts.get(name) ?? 0 };
}

/**
 * The window after a run (epoch 1) reserved r0, r1 and r2 (`spreadMs` apart) and died before
 * sending or recording any of them, its lease run out; `words` are what the provider said of each
 * by key.
 */
async function windowLeftInDoubt(words: Readonly<Record<string, ProviderWord['outcome']>>, spreadMs = 0) {
  const clock = new ManualClock(START);
  const backend = memoryBackend({ hashKey });
  const claimed = await backend.claims.claim(
    SLOT,
    {
      owner: 'died',
      leaseMs: LEASE_MS,
      maxAttempts: 3,
      expiresAtSeconds: Math.ceil(START / 1000) + 35 * 86_400,
      deadline: START + 6 * HOUR,
      delivery: {},
    },
    START,
  );
  if (claimed.kind !== 'claimed') throw new Error(claimed.kind);
  const died: Claim = claimed.claim;
  for (const [i, to] of RECIPIENTS.slice(0, 3).entries()) {
    await backend.ledger.reserve(died, hashKey(to), { rerunInDoubt: false, now: START + i * spreadMs });
  }
  for (const [to, outcome] of Object.entries(words)) {
    await backend.ledger.recordProviderWord(SLOT, hashKey(to), {
      outcome,
      event: outcome === 'accepted' ? 'Send' : 'Reject',
      at: START + 100,
      epoch: 1,
    });
  }
  await clock.advance(LEASE_MS + 3_000);
  return { clock, backend };
}

/** Delivers the window until it finishes, moving the clock to each `resumeAfter`; returns every result. */
async function runToTheEnd(
  backend: SlotBackend,
  clock: ManualClock,
  resolution: { graceMs?: number; afterGrace?: AfterGrace },
  between: (result: RunResult) => Promise<void> = async () => {},
) {
  const sent: string[] = [];
  const metrics = countingMetrics();
  const job = defineJob({
    id: SLOT.jobId,
    run: (ctx) =>
      ctx.onceEach(RECIPIENTS, { key: (to) => to }, async (to) => {
        sent.push(to);
      }),
  });
  const results: RunResult[] = [];
  for (let run = 0; run < 20; run++) {
    const result = await runSlot({
      job,
      backend,
      clock,
      metrics: metrics.metrics,
      log: silentLog,
      slot: SLOT,
      delivery: { invocationId: `run-${run}` },
      options: { leaseMs: LEASE_MS, inDoubtResolution: resolution },
    });
    results.push(result);
    if (result.status !== 'yielded') break;
    await between(result);
    await clock.advance(Math.max(0, (result.resumeAfter ?? clock.now()) - clock.now()));
  }
  return { sent, results, count: metrics.count, last: results.at(-1) };
}

describe("effects in doubt, settled by the provider's word", () => {
  it('confirms the accepted, re-sends the rejected, waits out the grace period, then reports the silent one', async () => {
    const { clock, backend } = await windowLeftInDoubt({
      'r0@example.test': 'accepted',
      'r1@example.test': 'rejected',
    });
    const { sent, results, count, last } = await runToTheEnd(backend, clock, { graceMs: HOUR });
    expect(sent.sort()).toEqual(['r1@example.test', 'r3@example.test', 'r4@example.test']);
    expect(last).toMatchObject({
      status: 'completed',
      state: 'DONE',
      window: { done: 4, inDoubt: 1, failed: 0, inDoubtKeys: [hashKey('r2@example.test')] },
    });
    // It looked again a minute and five minutes after the reservation, then at the grace period's end.
    const waits = results.flatMap((r) =>
      r.status === 'yielded' && r.resumeAfter ? [r.resumeAfter - START] : [],
    );
    expect(waits.filter((w) => w >= 60_000)).toEqual([60_000, 300_000, HOUR]);
    expect(clock.now()).toBeGreaterThanOrEqual(START + HOUR);
    expect([count('InDoubtConfirmed'), count('InDoubtRejected'), count('InDoubtResent')]).toEqual([1, 1, 0]);
    // Paged once, at the finish, for the one still unknown; each run's discoveries are not paged.
    expect(count('EffectInDoubt')).toBe(1);
    expect(count('EffectInDoubtFound')).toBeGreaterThanOrEqual(3);
    expect(await backend.ledger.read(SLOT, hashKey('r0@example.test'))).toMatchObject({ state: 'DONE' });
    expect(await backend.ledger.read(SLOT, hashKey('r2@example.test'))).toMatchObject({
      state: 'RESERVED',
      epoch: 1,
    });
  });

  it('settles a word that arrives while the window waits for it, and finishes with nothing in doubt', async () => {
    const { clock, backend } = await windowLeftInDoubt({ 'r0@example.test': 'accepted' });
    let arrived = false;
    const { sent, last, count } = await runToTheEnd(backend, clock, { graceMs: HOUR }, async () => {
      // The events for r1 and r2 come a minute late: a Send, then a duplicate of it, and a Reject.
      if (arrived || clock.now() < START + 60_000) return;
      arrived = true;
      const word = { event: 'Send', at: clock.now(), epoch: 1 } as const;
      await backend.ledger.recordProviderWord(SLOT, hashKey('r1@example.test'), {
        ...word,
        outcome: 'accepted',
      });
      await backend.ledger.recordProviderWord(SLOT, hashKey('r1@example.test'), {
        ...word,
        outcome: 'accepted',
      });
      await backend.ledger.recordProviderWord(SLOT, hashKey('r2@example.test'), {
        ...word,
        event: 'Reject',
        outcome: 'rejected',
      });
    });
    expect(arrived).toBe(true);
    expect(sent.sort()).toEqual(['r2@example.test', 'r3@example.test', 'r4@example.test']);
    expect(last).toMatchObject({ status: 'completed', state: 'DONE', window: { done: 5, inDoubt: 0 } });
    // Settled at the five-minute look, not at the end of the grace period.
    expect(clock.now()).toBe(START + 300_000);
    expect([count('InDoubtConfirmed'), count('InDoubtRejected'), count('EffectInDoubt')]).toEqual([2, 1, 0]);
  });

  it('re-sends what the provider never spoke of once the grace period is over, when the job opts in', async () => {
    const { clock, backend } = await windowLeftInDoubt({ 'r0@example.test': 'accepted' });
    const { sent, last, count } = await runToTheEnd(backend, clock, {
      graceMs: HOUR,
      afterGrace: After.Resend,
    });
    expect(sent.sort()).toEqual(['r1@example.test', 'r2@example.test', 'r3@example.test', 'r4@example.test']);
    expect(last).toMatchObject({ status: 'completed', window: { done: 5, inDoubt: 0 } });
    expect([count('InDoubtResent'), count('EffectInDoubt')]).toEqual([2, 0]);
  });

  it('looks again once for effects reserved moments apart, not once for each: a run per look, not a run per effect', async () => {
    const { clock, backend } = await windowLeftInDoubt({}, 2_000);
    const { results, last } = await runToTheEnd(backend, clock, { graceMs: HOUR });
    // Each look waits for the last reservation's: the first one's is due 4 s before it.
    const waits = results.flatMap((r) =>
      r.status === 'yielded' && r.resumeAfter ? [r.resumeAfter - START] : [],
    );
    expect(waits).toEqual([64_000, 304_000, HOUR + 4_000]);
    expect(results).toHaveLength(4);
    expect(last).toMatchObject({ status: 'completed', window: { done: 2, inDoubt: 3 } });
  });

  it('waits for nothing without a grace period, yet still applies the words on record', async () => {
    const { clock, backend } = await windowLeftInDoubt({ 'r0@example.test': 'accepted' });
    const { sent, results, last } = await runToTheEnd(backend, clock, {});
    expect(results).toHaveLength(1);
    expect(sent.sort()).toEqual(['r3@example.test', 'r4@example.test']);
    expect(last).toMatchObject({ status: 'completed', window: { done: 3, inDoubt: 2 } });
  });

  it('finishes at the deadline with the silent ones in doubt when the grace period would outlast it', async () => {
    const { clock, backend } = await windowLeftInDoubt({});
    const { last } = await runToTheEnd(backend, clock, { graceMs: 12 * HOUR, afterGrace: After.Resend });
    expect(last).toMatchObject({ status: 'completed', window: { done: 2, inDoubt: 3 } });
    expect(clock.now()).toBeGreaterThan(START + 6 * HOUR);
    expect(clock.now()).toBeLessThan(START + 7 * HOUR);
  });
});
