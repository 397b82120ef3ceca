import { describe, expect, it } from 'vitest';
import { memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import { MemoryTable } from '../../shared/backends/memory/memory-table.js';
import type { Clock } from '../../shared/clock.js';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import { resumableSource } from '../../shared/effects/resumable-source.js';
import { EffectNotPerformedError, NotPerformedReason, StoreError } from '../../shared/errors.js';
import { defineJob } from '../../shared/job/job-definition.js';
import {
  type RunOptions,
  type RunResult,
  runSlot,
  type ShardAssignment,
  type ShardPlan,
  type SlotBackend,
} from '../../shared/job/run-slot.js';
import { EffectState, SlotState } from '../../shared/slot/ports.js';
import type { Log } from '../../shared/telemetry/log.js';
import type { JobMetrics } from '../../shared/telemetry/metrics.js';
import { useDynamo } from '../helpers/dynalite.js';
import { TEST_SECRET, testBackend } from '../helpers/harness.js';
import { ManualClock, settle } from '../helpers/manual-clock.js';
import { usePostgres } from '../helpers/postgres.js';
import { backendWith } from './wrapped-backend.js';

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

/**
 * One delivery of the window: the job walks `recipients` (a resumable source with `resumable`) and
 * sends. With `shard`, a shard's message (the job keeps to the shard's keys); with `fanOut`, the
 * window's delivery to a coordinator that sends its shards' messages through it.
 */
function deliver(
  backend: SlotBackend,
  clock: Clock,
  send: Send,
  options: {
    recipients?: readonly string[];
    resumable?: boolean;
    remainingTimeMs?: () => number;
    options?: RunOptions;
    shard?: ShardAssignment;
    fanOut?: (plan: ShardPlan) => Promise<void>;
  } = {},
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
    delivery: options.shard
      ? { invocationId: `shard-${options.shard.index}`, continuation: true }
      : { invocationId: 'finding' },
    options: options.options ?? OPTIONS,
    ...(options.remainingTimeMs ? { remainingTimeMs: options.remainingTimeMs } : {}),
    ...(options.shard ? { shard: options.shard } : {}),
    ...(options.fanOut ? { fanOut: options.fanOut } : {}),
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

/** A promise the test opens: holds a run at one point while the test arranges the rest. */
class Gate {
  #open: () => void = () => {};
  readonly opened = new Promise<void>((resolve) => {
    this.#open = resolve;
  });
  reached = false;
  async pass(): Promise<void> {
    this.reached = true;
    await this.opened;
  }
  open(): void {
    this.#open();
  }
}

async function until(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !condition(); i++) await settle();
  expect(condition()).toBe(true);
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

  // Finding 5: a send cancelled because its run lost the lease deleted its reservation, though a
  // run that took the window over had already met it and counted it in doubt; that run's tally
  // then found no record, and the window finished without the recipient, who got nothing.
  it('does not finish a window without a recipient whose send a run that lost its lease cancelled', async () => {
    const table = new MemoryTable();
    const zombieClock = new ManualClock(START);
    const takeoverClock = new ManualClock(START);
    const sendGate = new Gate();
    const tallyGate = new Gate();
    const sent: string[] = [];
    const plain = memoryBackend({ table, hashKey });
    const heldTally = backendWith(plain, {
      ledger: {
        async *list(slot) {
          await tallyGate.pass();
          yield* plain.ledger.list(slot);
        },
      },
    });
    // The zombie reserves r0, then freezes (a long pause) before it sends.
    const zombie = deliver(plain, zombieClock, async (to, signal) => {
      await sendGate.pass();
      if (signal.aborted) {
        throw new EffectNotPerformedError('the run is stopping; nothing was sent', {
          reason: NotPerformedReason.Cancelled,
        });
      }
      sent.push(to);
    });
    await until(() => sendGate.reached);
    // Its lease runs out; a second run takes the window over, meets r0 reserved and counts it in doubt.
    await takeoverClock.advance(LEASE_MS + 4_000);
    const takeover = deliver(heldTally, takeoverClock, async (to) => {
      sent.push(to);
    });
    await until(() => tallyGate.reached);
    // The zombie thaws, learns its lease is gone, and cancels its send.
    await zombieClock.advance(LEASE_MS);
    sendGate.open();
    expect(await zombie).toMatchObject({ status: 'fenced', epoch: 1 });
    tallyGate.open();
    const second = await takeover;
    expect(second).toMatchObject({ status: 'yielded', reason: 'retry-wait', epoch: 2 });

    // A continuation sends r0: it had never been sent.
    const third = await deliver(plain, takeoverClock, async (to) => {
      sent.push(to);
    });
    expect(third).toMatchObject({
      status: 'completed',
      state: 'DONE',
      window: { done: 1, inDoubt: 0, failed: 0, runs: 3 },
    });
    expect(sent).toEqual(['r0@example.test']);
  });

  // Finding 5, again: a retry of a refused effect whose send was cancelled lost the refusals before
  // it, so the provider could be asked more often than the retry policy allows.
  it('keeps the refused attempts of a retry whose send was cancelled', async () => {
    const clock = new ManualClock(START);
    const backend = memoryBackend({ hashKey });
    const { send } = provider({ 'r0@example.test': 1 });
    const refused = await deliver(backend, clock, send);
    expect(refused).toMatchObject({ status: 'yielded', reason: 'retry-wait' });
    await clock.advance(((refused.status === 'yielded' && refused.resumeAfter) || 0) - clock.now());
    // The retry is reserved, then the run loses its lease before the send starts.
    const losing = backendWith(backend, { claims: { renew: async () => ({ kind: 'lost' }) } });
    const cancelled = await deliver(losing, clock, async (_to, signal) => {
      await clock.advance(LEASE_MS);
      if (signal.aborted) {
        throw new EffectNotPerformedError('cancelled', { reason: NotPerformedReason.Cancelled });
      }
    });
    expect(cancelled).toMatchObject({ status: 'fenced' });
    expect(await backend.ledger.read(SLOT, hashKey('r0@example.test'))).toMatchObject({
      state: EffectState.Failed,
      attempts: 1,
      retryAt: clock.now(),
    });
  });

  // Finding 7: a continuation's retry pass met again a key the run had found in doubt (a zombie
  // then recorded its refusal, already due) and counted it skipped, as done by an earlier run: one
  // effect counted twice in the run's summary, once as done, which it was not.
  it('does not count an effect twice, as skipped, when its retry pass meets one it found in doubt', async () => {
    const table = new MemoryTable();
    const clock = new ManualClock(START);
    const zombieClock = new ManualClock(START);
    const recipients = ['r0@example.test', 'r1@example.test'];
    // A refusal is due 5 s later: not yet by the zombie's frozen clock, already by the takeover's.
    const retrySoon: RunOptions = { ...OPTIONS, effectConcurrency: 1, effectRetry: { firstDelayMs: 5_000 } };
    const plain = memoryBackend({ table, hashKey });
    const { send } = provider({ 'r1@example.test': 1 });
    // A first run sends r0 and runs out of time: the checkpoint stands after r0.
    let sends = 0;
    const first = await deliver(
      plain,
      clock,
      async (to, signal) => {
        sends++;
        await send(to, signal);
      },
      { recipients, resumable: true, remainingTimeMs: () => (sends > 0 ? 0 : 60_000), options: retrySoon },
    );
    expect(first).toMatchObject({ status: 'yielded', reason: 'time' });
    // A second run reserves r1, is refused, and freezes before it records the refusal.
    const failureGate = new Gate();
    const frozen = backendWith(plain, {
      ledger: {
        recordFailure: async (...args) => {
          await failureGate.pass();
          return plain.ledger.recordFailure(...args);
        },
      },
    });
    const zombie = deliver(frozen, zombieClock, send, { recipients, resumable: true, options: retrySoon });
    await until(() => failureGate.reached);
    // A third takes the window over, meets r1 reserved (in doubt), and reads the ledger for its retry pass...
    const tallyGate = new Gate();
    const heldTally = backendWith(plain, {
      ledger: {
        async *list(slot) {
          await tallyGate.pass();
          yield* plain.ledger.list(slot);
        },
      },
    });
    await clock.advance(LEASE_MS + 4_000);
    const takeover = deliver(heldTally, clock, send, { recipients, resumable: true, options: retrySoon });
    await until(() => tallyGate.reached);
    // ...just after the zombie recorded r1's refusal, which is due by the takeover's clock.
    failureGate.open();
    expect(await zombie).toMatchObject({ status: 'fenced', epoch: 2 });
    tallyGate.open();
    const third = await takeover;
    expect(third).toMatchObject({ status: 'yielded', reason: 'retry-wait', epoch: 3 });
    expect(third.status === 'yielded' && third.summary).toMatchObject({ done: 0, skipped: 0, inDoubt: 1 });
  });

  // Finding 6: the ledger read of a continuation's retry pass was left to throw out of the job, so
  // a store failing once counted as the job failing (FAILED with maxAttempts 1) instead of a yield.
  it('yields on a store error in the retry pass, without counting a failure of the job', async () => {
    const clock = new ManualClock(START);
    const backend = memoryBackend({ hashKey });
    const recipients = ['r0@example.test', 'r1@example.test'];
    const { send, sent } = provider({ 'r1@example.test': 1 });
    const first = await deliver(backend, clock, send, { recipients, resumable: true });
    expect(first).toMatchObject({ status: 'yielded', reason: 'retry-wait' });
    await clock.advance(((first.status === 'yielded' && first.resumeAfter) || 0) - clock.now());

    const failingRead = backendWith(backend, {
      ledger: {
        list: () => {
          throw new StoreError('list', 'the store did not answer after the client retries');
        },
      },
    });
    const second = await deliver(failingRead, clock, send, { recipients, resumable: true });
    expect(second).toMatchObject({ status: 'yielded', reason: 'store-error' });
    expect(await backend.claims.read(SLOT)).toMatchObject({ state: SlotState.Released, failures: 0 });

    const third = await deliver(backend, clock, send, { recipients, resumable: true });
    expect(third).toMatchObject({ status: 'completed', state: 'DONE', window: { done: 2, failed: 0 } });
    expect(sent).toEqual(['r0@example.test', 'r1@example.test']);
  });
});

describe('a window split into shards', () => {
  const recipients = ['r0@example.test', 'r1@example.test', 'r2@example.test', 'r3@example.test'];
  /** A delivery of the window's message, to a coordinator splitting it in two. */
  const coordinate = (backend: SlotBackend, clock: Clock, fanOut: (plan: ShardPlan) => Promise<void>) =>
    deliver(backend, clock, () => Promise.reject(new Error('a coordinator sends nothing')), {
      options: { ...OPTIONS, shards: 2 },
      fanOut,
    });
  /** Shard `index`'s message, run to its end: the list kept to the shard's keys by their hash. */
  const deliverShard = (
    backend: SlotBackend,
    clock: Clock,
    send: Send,
    plan: ShardPlan,
    index: number,
    list: readonly string[],
  ) =>
    deliver(backend, clock, send, {
      recipients: list,
      shard: { index, count: plan.shards, deadline: plan.deadline },
    });

  // Finding 8: a shard that ended while its coordinator was still sending the other shards'
  // messages found its window not yet SHARDED, so its end was never recorded; its message was
  // deleted, and the window stayed SHARDED for good, every recipient emailed and nobody to finish it.
  it('finishes a window whose shards all ended before its coordinator marked it SHARDED', async () => {
    const clock = new ManualClock(START);
    const backend = memoryBackend({ hashKey });
    const { send, sent } = provider();
    const shardRuns: RunResult[] = [];
    const coordinator = await coordinate(backend, clock, async (plan) => {
      for (let index = 0; index < plan.shards; index++) {
        shardRuns.push(await deliverShard(backend, clock, send, plan, index, recipients));
      }
    });
    expect(coordinator).toMatchObject({ status: 'sharded', shards: 2 });
    expect(shardRuns).toMatchObject([{ status: 'completed' }, { status: 'completed' }]);
    expect(await backend.claims.read(SLOT)).toMatchObject({
      state: SlotState.Done,
      finishedShards: [0, 1],
      summary: { done: 4, inDoubt: 0, failed: 0, runs: 2 },
    });
    expect([...sent].sort()).toEqual(recipients);
  });

  it('finishes a split window at the next delivery of its message when its coordinator died after marking it SHARDED', async () => {
    const clock = new ManualClock(START);
    const backend = memoryBackend({ hashKey });
    const { send } = provider();
    // The coordinator's process dies once the window is SHARDED: its reads of the shards never answer.
    const dying = backendWith(backend, {
      claims: {
        read: (slot) =>
          slot.shard === undefined
            ? backend.claims.read(slot)
            : Promise.reject(new StoreError('read', 'the process died')),
      },
    });
    await expect(
      coordinate(dying, clock, async (plan) => {
        for (let index = 0; index < plan.shards; index++) {
          await deliverShard(backend, clock, send, plan, index, recipients);
        }
      }),
    ).rejects.toThrow(StoreError);
    expect(await backend.claims.read(SLOT)).toMatchObject({ state: SlotState.Sharded, finishedShards: [] });

    // Its message comes back (it answered nothing): the delivery finds the window SHARDED.
    const again = await coordinate(backend, clock, async () => {
      throw new Error('a SHARDED window is not split again');
    });
    expect(again).toMatchObject({ status: 'duplicate', outcome: { kind: 'sharded', shards: 2 } });
    expect(await backend.claims.read(SLOT)).toMatchObject({
      state: SlotState.Done,
      finishedShards: [0, 1],
      summary: { done: 4, inDoubt: 0, failed: 0, runs: 2 },
    });
  });

  // Finding 9: the coordinator's SHARDED mark committed, its reply was lost, and its shards finished
  // the window before the client's retry, which found the window DONE under the coordinator's own
  // grant: the coordinator reported itself fenced, though nobody had taken the window over.
  it('does not report a coordinator fenced when its shards finish the window before its lost reply is retried', async () => {
    const clock = new ManualClock(START);
    const backend = memoryBackend({ hashKey });
    const { send } = provider();
    let plan: ShardPlan | undefined;
    const lostReply = backendWith(backend, {
      claims: {
        release: async (claim, reason, now) => {
          if (reason.kind !== 'sharded') return backend.claims.release(claim, reason, now);
          await backend.claims.release(claim, reason, now);
          for (let index = 0; plan && index < plan.shards; index++) {
            await deliverShard(backend, clock, send, plan, index, recipients);
          }
          // The client's retry of the write meets the window finished.
          return backend.claims.release(claim, reason, now);
        },
      },
    });
    const coordinator = await coordinate(lostReply, clock, async (sent) => {
      plan = sent;
    });
    expect(coordinator).toMatchObject({ status: 'sharded', epoch: 1, shards: 2 });
    expect(await backend.claims.read(SLOT)).toMatchObject({ state: SlotState.Done, epoch: 1 });
  });

  it('finishes a split window whose every shard was recorded as finished but whose finish was lost', async () => {
    const clock = new ManualClock(START);
    const backend = memoryBackend({ hashKey });
    const { send } = provider();
    const losing = backendWith(backend, {
      claims: { finishSharded: () => Promise.reject(new StoreError('finishSharded', 'no reply')) },
    });
    await expect(
      coordinate(losing, clock, async (plan) => {
        for (let index = 0; index < plan.shards; index++) {
          await deliverShard(backend, clock, send, plan, index, recipients);
        }
      }),
    ).rejects.toThrow(StoreError);
    expect(await backend.claims.read(SLOT)).toMatchObject({
      state: SlotState.Sharded,
      finishedShards: [0, 1],
    });

    const again = await coordinate(backend, clock, async () => {
      throw new Error('a SHARDED window is not split again');
    });
    expect(again).toMatchObject({ status: 'duplicate', outcome: { kind: 'sharded', finished: [0, 1] } });
    expect(await backend.claims.read(SLOT)).toMatchObject({
      state: SlotState.Done,
      summary: { done: 4, inDoubt: 0, failed: 0, runs: 2 },
    });
  });
});

const dynamo = useDynamo();
const postgres = usePostgres();

describe.each([
  ['in memory', async (): Promise<SlotBackend> => memoryBackend({ hashKey })],
  ['on DynamoDB', async () => testBackend(dynamo.client(), await dynamo.freshTable())],
  ['on Postgres', async () => postgres.backend(await postgres.freshSchema(), { leaseClock: 'caller' })],
])('a send cancelled before its first attempt, %s', (_name, makeBackend) => {
  it('is put back FAILED with no attempts and reserved again once due', async () => {
    const backend = await makeBackend();
    const now = START;
    const outcome = await backend.claims.claim(
      SLOT,
      {
        owner: 'finding/1',
        // Long enough for every backend's own timeouts (Postgres refuses a lease under three of them).
        leaseMs: 60_000,
        maxAttempts: 1,
        expiresAtSeconds: Math.ceil(now / 1000) + 86_400 * 35,
        deadline: now + 3_600_000,
        delivery: {},
      },
      now,
    );
    if (outcome.kind !== 'claimed') throw new Error(`claim: ${outcome.kind}`);
    const claim = outcome.claim;
    const key = hashKey('r0@example.test');
    const options = { rerunInDoubt: false, now };
    expect(await backend.ledger.reserve(claim, key, options)).toEqual({
      kind: 'reserved',
      rerun: false,
      attempt: 1,
    });
    await backend.ledger.recordFailure(claim, key, {
      attempts: 0,
      retryAt: now,
      reason: NotPerformedReason.Cancelled,
    });
    expect(await backend.ledger.read(SLOT, key)).toMatchObject({ state: EffectState.Failed, attempts: 0 });
    expect(await backend.ledger.reserve(claim, key, options)).toEqual({
      kind: 'reserved',
      rerun: false,
      attempt: 1,
    });
  });
});
