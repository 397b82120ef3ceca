import { describe, expect, it } from 'vitest';
import { memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import type { Clock } from '../../shared/clock.js';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import { resumableSource } from '../../shared/effects/resumable-source.js';
import { EffectNotPerformedError, NotPerformedReason } from '../../shared/errors.js';
import { defineJob } from '../../shared/job/job-definition.js';
import { type RunOptions, type RunResult, runSlot, type SlotBackend } from '../../shared/job/run-slot.js';
import { SlotState } from '../../shared/slot/ports.js';
import type { Log } from '../../shared/telemetry/log.js';
import type { JobMetrics } from '../../shared/telemetry/metrics.js';
import { TEST_SECRET } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';

/*
 * Runtime defects the simulation found on the continuation protocol (docs/simulation.md,
 * "Findings"), each pinned by a focused, deterministic test that fails without its fix.
 */

const WINDOW = '2026-11-30T06:00:00Z';
const SLOT = { jobId: 'findings', window: WINDOW };
const START = Date.parse(WINDOW) + 1_000;
const LEASE_MS = 6_000;
const OPTIONS: RunOptions = { leaseMs: LEASE_MS, maxAttempts: 1 };
const hashKey = hmacEffectKeys(TEST_SECRET);
const silentMetrics: JobMetrics = { count() {}, flush: async () => {} };
const silentLog: Log = { info() {}, warn() {}, error() {} };

/** What the job sends to one recipient: resolves when sent, throws when not. */
type Send = (to: string, signal: AbortSignal) => Promise<void>;

/** One delivery of the window: the job walks `recipients` (a resumable source with `resumable`) and sends. */
function deliver(
  backend: SlotBackend,
  clock: Clock,
  send: Send,
  options: { recipients?: readonly string[]; resumable?: boolean; remainingTimeMs?: () => number } = {},
): Promise<RunResult> {
  const recipients = options.recipients ?? ['r0@example.test'];
  const source = options.resumable
    ? resumableSource({
        read: (after) => recipients.filter((to) => after === undefined || to > after),
        position: (to: string) => to,
      })
    : recipients;
  const job = defineJob({
    id: SLOT.jobId,
    run: (ctx) => ctx.onceEach(source, { key: (to) => to }, (to, signal) => send(to, signal)),
  });
  return runSlot({
    job,
    backend,
    clock,
    metrics: silentMetrics,
    log: silentLog,
    slot: SLOT,
    delivery: { invocationId: 'finding' },
    options: OPTIONS,
    ...(options.remainingTimeMs ? { remainingTimeMs: options.remainingTimeMs } : {}),
  });
}

/** A provider that sends everything except the first `refusals` sends to each address in `refusing`. */
function provider(refusing: Readonly<Record<string, number>> = {}) {
  const left = new Map(Object.entries(refusing));
  const sent: string[] = [];
  const send: Send = async (to) => {
    const refusals = left.get(to) ?? 0;
    if (refusals > 0) {
      left.set(to, refusals - 1);
      throw new EffectNotPerformedError('throttled', { reason: NotPerformedReason.Throttled });
    }
    sent.push(to);
  };
  return { send, sent };
}

describe('a window continued across runs', () => {
  // Finding 4: a run that yielded to wait for a retry kept the count of runs without progress it
  // found, whatever it achieved, so later faulty runs could declare a moving window STUCK.
  it('does not give a window up as STUCK when the run before it made progress and waited for a retry', async () => {
    const clock = new ManualClock(START);
    const backend = memoryBackend({ hashKey });
    const { send, sent } = provider({ 'r1@example.test': 1 });
    const recipients = ['r0@example.test', 'r1@example.test'];
    const outOfTime = { recipients, remainingTimeMs: () => 0 };
    // Two runs stop before their first effect: two runs without progress.
    expect(await deliver(backend, clock, send, outOfTime)).toMatchObject({
      status: 'yielded',
      reason: 'time',
    });
    expect(await deliver(backend, clock, send, outOfTime)).toMatchObject({
      status: 'yielded',
      reason: 'time',
    });
    // The third sends r0, records r1's refusal, and waits for r1's retry: it made progress.
    const waiting = await deliver(backend, clock, send, { recipients });
    expect(waiting).toMatchObject({ status: 'yielded', reason: 'retry-wait' });
    expect(sent).toEqual(['r0@example.test']);
    expect((await backend.claims.read(SLOT))?.runsWithoutProgress).toBe(0);

    await clock.advance(((waiting.status === 'yielded' && waiting.resumeAfter) || 0) - clock.now());
    // One more run out of time is the first without progress since, not the third.
    expect(await deliver(backend, clock, send, outOfTime)).toMatchObject({
      status: 'yielded',
      reason: 'time',
    });
    expect(await backend.claims.read(SLOT)).toMatchObject({
      state: SlotState.Released,
      runsWithoutProgress: 1,
    });
  });
});
