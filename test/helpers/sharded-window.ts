import { describe, expect, it } from 'vitest';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomerSource, syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import { gatedBackend, gatedWorkQueue, InvocationGate } from '../../local/replica-faults.js';
import { InProcessEventSource } from '../../shared/continuation/in-process-event-source.js';
import { InProcessWorkQueue } from '../../shared/continuation/in-process-work-queue.js';
import type { EmailMessage, EmailSender } from '../../shared/effects/email-sender.js';
import { TokenBucket } from '../../shared/effects/token-bucket.js';
import type { JobDefinition } from '../../shared/job/job-definition.js';
import { createJobHandler } from '../../shared/job/lambda-handler.js';
import type { RunOptions, SlotBackend } from '../../shared/job/run-slot.js';
import { emfMetrics } from '../../shared/telemetry/metrics.js';
import { InFlight } from '../local/in-flight.js';
import { EmfRecorder, RecordingLog, schedulerEvent } from './harness.js';
import { quiet, VirtualClock } from './virtual-clock.js';

/*
 * A window split into shards, end to end in virtual time, on any backend: the schedule's message
 * reaches the coordinator, which sends one message per shard and hands the window to them; each
 * shard runs as its own invocations (several at once, each yielding when its Lambda time runs short
 * and continued by its message's redelivery); the last shard to end finishes the window with one
 * summary counted from the window's ledger. The queue and Lambda's SQS trigger are in process; the
 * backend is the test file's (dynalite, embedded Postgres), on the virtual clock.
 */

const WINDOW = '2026-11-30T06:00:00Z';
const TIMEOUT_MS = 10_000;

/** The lease every run takes: renewed by the lease keeper, taken over by another invocation once it ends. */
export const SHARDED_WINDOW_LEASE_MS = 6_000;

/** One sharded window's run. */
export interface ShardedWindowScenario {
  readonly recipients: number;
  readonly shards: number;
  /** Emails per second, per invocation (each shard's process has its own bucket here). */
  readonly ratePerSecond: number;
  readonly resumable: boolean;
  /** @default false: each message is delivered once per send */
  readonly duplicateDeliveries?: boolean;
  /**
   * The email that kills its invocation (its process dies right after the send returns).
   * @default none: no invocation dies
   */
  readonly killAt?: number;
}

/**
 * Runs one sharded window of the weekly report to its end on `backend`, whose lease clock must be
 * the caller's (the virtual clock moves hours in a second), and returns what was emailed and the
 * window's and shards' records as they ended.
 */
export async function runShardedWindow(backend: SlotBackend, s: ShardedWindowScenario) {
  const clock = new VirtualClock(Date.parse(WINDOW) + 500);
  // Time moves only when no store request is under way: no run is overtaken while it waits for one.
  const io = new InFlight();
  const store = io.backend(backend);
  const delivered: string[] = [];
  // The invocation whose send is the `killAt`-th dies right after it: nothing it does lands any more.
  const sender = (bucket: TokenBucket, gate: InvocationGate): EmailSender => ({
    async send(message: EmailMessage, options: { signal?: AbortSignal } = {}) {
      await bucket.take(options.signal);
      await gate.pass(async () => {
        delivered.push(message.to);
      });
      if (delivered.length === s.killAt) gate.crash();
    },
  });
  const job = (gate: InvocationGate): JobDefinition =>
    weeklyReportJob({
      customers: () =>
        s.resumable ? syntheticCustomerSource(s.recipients) : syntheticCustomers(s.recipients),
      sender: sender(new TokenBucket({ ratePerSecond: s.ratePerSecond, clock }), gate),
    });
  const queue = new InProcessWorkQueue({
    clock,
    visibilityTimeoutMs: 6 * TIMEOUT_MS,
    maxReceiveCount: 200,
    ...(s.duplicateDeliveries ? { duplicate: () => true } : {}),
  });
  const emf = new EmfRecorder();
  const options: RunOptions = { leaseMs: SHARDED_WINDOW_LEASE_MS, effectConcurrency: 8, shards: s.shards };
  // One handler per invocation, as one Lambda container each: a killed one leaves its lease behind.
  let invocations = 0;
  const source = new InProcessEventSource({
    queue,
    handler: (event, context) => {
      const gate = new InvocationGate(`invocation-${++invocations}`);
      const handler = createJobHandler(job(gate), {
        backend: gatedBackend(store, gate),
        metrics: () => emfMetrics({ jobId: 'weekly-report', write: emf.write }),
        log: new RecordingLog(),
        clock,
        options,
        workQueue: gatedWorkQueue(queue, gate),
      });
      return handler(event, context);
    },
    clock,
    maximumConcurrency: s.shards,
    timeoutMs: TIMEOUT_MS,
    onInvocation: () => {},
  });
  await queue.send(JSON.stringify(schedulerEvent('weekly-report', WINDOW)), 0);
  source.start();
  for (;;) {
    await quiet(io.count);
    if (queue.nextVisibleAt() === undefined && source.inFlight === 0) break;
    const next = clock.nextTimerAt;
    if (next === undefined)
      throw new Error('stalled: work is left, nothing is in flight and no timer is set');
    await clock.advance(next - clock.now());
  }
  await source.stop();
  const window = await backend.claims.read({ jobId: 'weekly-report', window: WINDOW });
  const shards = await Promise.all(
    Array.from({ length: s.shards }, (_, shard) =>
      backend.claims.read({ jobId: 'weekly-report', window: WINDOW, shard }),
    ),
  );
  return { delivered, window, shards, emf, invocations, queue };
}

/**
 * The sharded-window scenarios, run against the backend `makeBackend` opens (a fresh table or
 * schema each, on the caller's lease clock).
 */
export function describeShardedWindow(name: string, makeBackend: () => Promise<SlotBackend>): void {
  describe(`a window split into shards (${name})`, () => {
    it('runs its four shards in parallel and finishes once, with one summary, nobody emailed twice', async () => {
      const run = await runShardedWindow(await makeBackend(), {
        recipients: 2_000,
        shards: 4,
        ratePerSecond: 25,
        resumable: true,
      });
      expect(run.delivered).toHaveLength(2_000);
      expect(new Set(run.delivered).size).toBe(2_000);
      expect(run.window).toMatchObject({
        state: 'DONE',
        shards: 4,
        finishedShards: [0, 1, 2, 3],
        summary: { done: 2_000, inDoubt: 0, failed: 0 },
      });
      // Each shard did its own part, over several runs of ~10 s each.
      for (const shard of run.shards) expect(shard).toMatchObject({ state: 'DONE' });
      expect(run.shards.every((shard) => (shard?.epoch ?? 0) >= 2)).toBe(true);
      expect(run.window?.summary?.runs).toBe(run.shards.reduce((n, r) => n + (r?.epoch ?? 0), 0));
      expect(run.emf.sum('DuplicateClaim')).toBe(0);
      expect(run.queue.deadLetters).toHaveLength(0);
    });

    it('splits a list that cannot split itself by the hash of each key, and survives every message twice', async () => {
      const run = await runShardedWindow(await makeBackend(), {
        recipients: 600,
        shards: 3,
        ratePerSecond: 40,
        resumable: false,
        duplicateDeliveries: true,
      });
      expect(run.delivered).toHaveLength(600);
      expect(new Set(run.delivered).size).toBe(600);
      expect(run.window).toMatchObject({ state: 'DONE', summary: { done: 600, inDoubt: 0 } });
    });

    it('takes over a shard whose invocation was killed mid-run, and still finishes the window', async () => {
      const run = await runShardedWindow(await makeBackend(), {
        recipients: 800,
        shards: 4,
        ratePerSecond: 25,
        resumable: true,
        killAt: 100,
      });
      expect(new Set(run.delivered).size).toBe(run.delivered.length);
      expect(run.window).toMatchObject({ state: 'DONE' });
      const { done = 0, inDoubt = 0 } = run.window?.summary ?? {};
      expect(done + inDoubt).toBe(800);
      // Everyone not in doubt got exactly one email; those in doubt got at most one.
      expect(run.delivered.length).toBeGreaterThanOrEqual(done);
      expect(run.delivered.length).toBeLessThanOrEqual(done + inDoubt);
      expect(run.emf.sum('LeaseTakeover')).toBeGreaterThanOrEqual(1);
    });
  });
}
