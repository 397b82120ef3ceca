import { escapeIdentifier } from 'pg';
import { describe, expect, it } from 'vitest';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { type Customer, syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import { runPostgresCli } from '../../shared/backends/postgres/cli.js';
import {
  advisoryLockKey,
  migrate,
  migrationScript,
  type PostgresBackend,
  PostgresOperatorStore,
  postgresBackend,
  purgeExpired,
  SCHEMA_VERSION,
} from '../../shared/backends/postgres/index.js';
import { resolveTimeouts } from '../../shared/backends/postgres/postgres-executor.js';
import { shortestLeaseMs } from '../../shared/backends/postgres/postgres-settings.js';
import { beginTransaction, sqlFor } from '../../shared/backends/postgres/sql.js';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import type { EmailSender } from '../../shared/effects/email-sender.js';
import { ConfigurationError, InvalidEventError, StoreError } from '../../shared/errors.js';
import type { Claim, EffectRecord, LeaseRequest } from '../../shared/slot/ports.js';
import type { Slot } from '../../shared/slot/slot.js';
import { CountingSender } from '../helpers/counting-sender.js';
import { EmfRecorder, schedulerEvent, TEST_SECRET, testHandler } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { losingReplies, slotSequence, usePostgres } from '../helpers/postgres.js';

const WINDOW = '2026-11-30T06:00:00Z';
const WINDOW_MS = Date.parse(WINDOW);
const LEASE = 60_000;
const JOB = 'weekly-report';

const postgres = usePostgres();

/** A slot no other test in this file uses. */
const freshSlot = slotSequence('pg-job');

const DEADLINE = WINDOW_MS + 6 * 3_600_000;

function lease(owner: string, overrides: Partial<LeaseRequest> = {}): LeaseRequest {
  return {
    owner,
    leaseMs: LEASE,
    maxAttempts: 3,
    expiresAtSeconds: Math.ceil(WINDOW_MS / 1000) + 35 * 86_400,
    deadline: DEADLINE,
    delivery: { invocationId: owner },
    ...overrides,
  };
}

/** Reservation options at the current time; in-doubt effects are re-run only with `rerunInDoubt`. */
const reserving = (rerunInDoubt = false) => ({ rerunInDoubt, now: Date.now() });

async function claimOrFail(backend: PostgresBackend, slot: Slot, owner: string, now = Date.now()) {
  const outcome = await backend.claims.claim(slot, lease(owner), now);
  if (outcome.kind !== 'claimed')
    throw new Error(`expected ${owner} to claim, got ${JSON.stringify(outcome)}`);
  return outcome;
}

/** The database's clock, in epoch milliseconds. */
async function dbNow(): Promise<number> {
  const [row] = await postgres.sql<{ now: Date }>('SELECT clock_timestamp() AS now');
  return row!.now.getTime();
}

async function listAll(backend: PostgresBackend, slot: Slot): Promise<EffectRecord[]> {
  const records: EffectRecord[] = [];
  for await (const record of backend.ledger.list(slot)) records.push(record);
  return records;
}

/** A Lambda-like invocation context, so each replica's owner token starts with its name. */
const context = (name: string) => ({ awsRequestId: name, getRemainingTimeInMillis: () => 900_000 });

/**
 * Holds every caller past the first `free` until opened: a replica that froze mid-run. Resolves
 * `arrived(n)` once n callers are held, so a test acts only when the replica is where it wants it.
 */
class Gate {
  #open!: () => void;
  readonly #opened = new Promise<void>((resolve) => {
    this.#open = resolve;
  });
  #held = 0;
  #watchers: { n: number; resolve: () => void }[] = [];
  #calls = 0;

  constructor(private readonly free: number) {}

  async pass(): Promise<void> {
    if (++this.#calls <= this.free) return;
    this.#held++;
    for (const w of this.#watchers) if (this.#held >= w.n) w.resolve();
    await this.#opened;
  }

  arrived(n: number): Promise<void> {
    return new Promise((resolve) => {
      if (this.#held >= n) resolve();
      else this.#watchers.push({ n, resolve });
    });
  }

  open(): void {
    this.#open();
  }
}

/** A replica's sender: passes through `gate`, then delivers to the shared mailbox. */
const gatedSender = (gate: Gate, mailbox: CountingSender): EmailSender => ({
  async send(message) {
    await gate.pass();
    await mailbox.send(message);
  },
});

/** Sessions of the test server that wait for a lock right now (pg_locks), by application name. */
async function waitingSessions(applicationName: string): Promise<number> {
  const rows = await postgres.sql<{ n: number }>(
    `SELECT count(*)::integer AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE NOT l.granted AND a.application_name = $1`,
    [applicationName],
  );
  return rows[0]!.n;
}

/** Resolves once `applicationName` has a session waiting on a lock; a bounded poll, no sleep. */
async function untilWaiting(applicationName: string): Promise<void> {
  for (let i = 0; i < 2_000; i++) {
    if ((await waitingSessions(applicationName)) > 0) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error(`${applicationName} never waited on a lock`);
}

describe('Postgres backend: advisory-lock key', () => {
  it('hashes a slot to the pinned 64-bit key, the same one Postgres computes from SHA-256', async () => {
    const slots: [Slot, bigint][] = [
      [{ jobId: 'weekly-report', window: '2026-11-30T06:00:00Z' }, 3657830839355548778n],
      [{ jobId: 'payment-reminder', window: '2026-12-01T09:15:00Z' }, -2861915803679066729n],
    ];
    for (const [slot, golden] of slots) {
      expect(advisoryLockKey(slot)).toBe(golden);
      // The same definition in SQL: first 8 bytes of SHA-256 of `${jobId}\n${window}`, signed.
      const [row] = await postgres.sql<{ key: string }>(
        `SELECT ('x' || left(encode(sha256(convert_to($1 || chr(10) || $2, 'UTF8')), 'hex'), 16))::bit(64)::bigint::text AS key`,
        [slot.jobId, slot.window],
      );
      expect(BigInt(row!.key)).toBe(golden);
    }
  });

  it("gives each shard a pinned key of its own, so a shard's claimers never queue behind its window's or a sibling's", async () => {
    const window = { jobId: 'weekly-report', window: '2026-11-30T06:00:00Z' };
    const shards: [number, bigint][] = [
      [0, -3772732447102152469n],
      [3, 4717759141520556958n],
      [999, 6001973466191977464n],
    ];
    for (const [shard, golden] of shards) {
      expect(advisoryLockKey({ ...window, shard })).toBe(golden);
      // First 8 bytes of SHA-256 of `${jobId}\n${window}\nshard ${shard}`, signed.
      const [row] = await postgres.sql<{ key: string }>(
        `SELECT ('x' || left(encode(sha256(convert_to($1 || chr(10) || $2 || chr(10) || 'shard ' || $3, 'UTF8')), 'hex'), 16))::bit(64)::bigint::text AS key`,
        [window.jobId, window.window, shard],
      );
      expect(BigInt(row!.key)).toBe(golden);
    }
    const keys = new Set([
      advisoryLockKey(window),
      ...shards.map(([shard]) => advisoryLockKey({ ...window, shard })),
    ]);
    expect(keys.size).toBe(4);
    expect(advisoryLockKey(window)).toBe(3657830839355548778n);
  });
});

describe('Postgres backend: a holder that dies, freezes or drifts', () => {
  it('keeps a killed holder’s slot until its lease ends, then one replica takes over, the old holder is fenced and no recipient is emailed twice', async () => {
    const schema = await postgres.freshSchema();
    const slot = { jobId: JOB, window: WINDOW };
    const mailbox = new CountingSender();
    const emf = new EmfRecorder();
    const gate = new Gate(100);
    const clock = new ManualClock(WINDOW_MS + 1_000);
    const replica = (name: string, sender: EmailSender) => {
      const backend = postgres.backend(schema, { pool: postgres.pool({ applicationName: name }) });
      const job = weeklyReportJob({ customers: () => syntheticCustomers(400), sender });
      // Marks after every effect: once every worker is held at the gate, every earlier send gets marked.
      return { backend, ...testHandler(job, backend, { clock, emf, run: { markBatchSize: 1 } }) };
    };
    const a = replica('replica-a', gatedSender(gate, mailbox));
    const b = replica('replica-b', mailbox);
    const c = replica('replica-c', mailbox);
    const event = (name: string) => schedulerEvent(JOB, WINDOW, 1, `exec-${name}`);

    const runA = a.handler(event('a'), context('replica-a'));
    await gate.arrived(16);
    const held = await a.backend.claims.read(slot);
    expect(held).toMatchObject({ state: 'RUNNING', epoch: 1 });
    const ownerA = held!.owner;
    expect(ownerA.startsWith('replica-a/')).toBe(true);
    // Its done marks are written behind its sends (one write at a time): read until they cover
    // the 100 sends that returned, each read a round trip to the database, never a sleep.
    let before = await listAll(a.backend, slot);
    for (let read = 0; read < 500 && before.filter((r) => r.state === 'DONE').length < 100; read++) {
      before = await listAll(a.backend, slot);
    }
    expect(before.filter((r) => r.state === 'DONE')).toHaveLength(100);
    expect(before.filter((r) => r.state === 'RESERVED')).toHaveLength(16);

    expect(await postgres.terminate('replica-a')).toBeGreaterThan(0);
    // The lease row outlives the connection: while it holds, nobody else enters.
    expect(await b.handler(event('b'), context('replica-b'))).toMatchObject({
      status: 'duplicate',
      outcome: { kind: 'held', holder: ownerA, epoch: 1 },
    });
    expect(mailbox.total).toBe(100);

    await postgres.ageLease(schema, slot, 2 * LEASE);
    expect(await c.handler(event('c'), context('replica-c'))).toMatchObject({
      status: 'completed',
      epoch: 2,
      summary: { done: 284, skipped: 100, inDoubt: 16, failed: 0 },
    });

    // The frozen holder wakes: its 16 sends in flight finish, and its next reservation is fenced.
    gate.open();
    expect(await runA).toMatchObject({ status: 'fenced', epoch: 1 });
    expect(mailbox.total).toBe(400);
    expect(mailbox.perRecipient.size).toBe(400);
    expect(mailbox.duplicates()).toBe(0);

    const claimA: Claim = {
      slot,
      owner: ownerA,
      epoch: 1,
      leaseEndsAt: 0,
      via: 'new',
      window: { deadline: DEADLINE, runsWithoutProgress: 0 },
    };
    const completedC = await c.backend.claims.read(slot);
    expect(await a.backend.claims.complete(claimA, completedC!.summary!, Date.now())).toEqual({
      kind: 'fenced',
      holder: completedC!.owner,
      epoch: 2,
      state: 'DONE',
    });
    expect(await a.backend.claims.renew(claimA, LEASE, Date.now())).toMatchObject({ kind: 'lost', epoch: 2 });
    expect(await a.backend.ledger.reserve(claimA, 'late-key', reserving())).toEqual({
      kind: 'fenced',
      epoch: 2,
    });
    expect(await a.backend.ledger.read(slot, 'late-key')).toBeUndefined();

    const after = await listAll(c.backend, slot);
    expect(after).toHaveLength(400);
    // The thawed holder's 16 sends went out; its done marks are fenced, so it recorded them done on
    // their own records. The window's summary, counted when C finished, still says 16 in doubt.
    expect(after.filter((r) => r.state === 'DONE')).toHaveLength(400);
    expect(completedC?.summary).toMatchObject({ done: 384, inDoubt: 16 });
    expect(after.filter((r) => r.epoch === 1)).toHaveLength(116);
    expect(after.filter((r) => r.epoch === 2)).toHaveLength(284);
    expect(emf.sum('ClaimAcquired')).toBe(2);
    expect(emf.sum('DuplicateClaim')).toBe(1);
    expect(emf.sum('LeaseTakeover')).toBe(1);
  });

  it('lets a frozen holder reserve nothing once the database clock passes its lease, and rejects its writes after a takeover', async () => {
    const schema = await postgres.freshSchema();
    const backend = postgres.backend(schema);
    const slot = freshSlot();
    const { claim: a } = await claimOrFail(backend, slot, 'frozen');
    expect(await backend.ledger.reserveMany(a, ['k1', 'k2', 'k3'], reserving())).toEqual([
      { kind: 'reserved', rerun: false, attempt: 1 },
      { kind: 'reserved', rerun: false, attempt: 1 },
      { kind: 'reserved', rerun: false, attempt: 1 },
    ]);
    await backend.ledger.markDone(a, ['k1']);

    // Paused past its lease: before anyone takes over, the database clock alone already fences it.
    await postgres.ageLease(schema, slot, LEASE + 1);
    expect(await backend.ledger.reserve(a, 'k4', reserving())).toEqual({
      kind: 'fenced',
      epoch: 1,
    });

    const takeover = await claimOrFail(backend, slot, 'successor');
    expect(takeover).toMatchObject({ claim: { epoch: 2, via: 'takeover' }, previousHolder: 'frozen' });

    // It resumes and every write it tries is rejected.
    expect(await backend.ledger.reserveMany(a, ['k5', 'k6'], reserving(true))).toEqual([
      { kind: 'fenced', epoch: 2 },
      { kind: 'fenced', epoch: 2 },
    ]);
    expect(await backend.claims.renew(a, LEASE, Date.now())).toMatchObject({
      kind: 'lost',
      holder: 'successor',
      epoch: 2,
    });
    expect(await backend.claims.complete(a, summaryOf(1), Date.now())).toMatchObject({
      kind: 'fenced',
      epoch: 2,
    });
    expect(await backend.claims.release(a, { kind: 'error', message: 'late' }, Date.now())).toMatchObject({
      kind: 'fenced',
      epoch: 2,
    });
    // Its mark of an effect it really performed is kept: DONE is the truth whoever writes it.
    await backend.ledger.markDone(a, ['k2']);

    const b = takeover.claim;
    expect(await backend.ledger.reserveMany(b, ['k1', 'k2', 'k3', 'k5'], reserving())).toEqual([
      { kind: 'done' },
      { kind: 'done' },
      { kind: 'in-doubt', epoch: 1 },
      { kind: 'reserved', rerun: false, attempt: 1 },
    ]);
    const records = await listAll(backend, slot);
    expect(records.map((r) => [r.keyHash, r.state, r.epoch])).toEqual([
      ['k1', 'DONE', 1],
      ['k2', 'DONE', 1],
      ['k3', 'RESERVED', 1],
      ['k5', 'RESERVED', 2],
    ]);
    expect(await backend.claims.read(slot)).toMatchObject({ state: 'RUNNING', owner: 'successor', epoch: 2 });
  });

  it('takes over from a claimer frozen inside its transaction once idle_in_transaction_session_timeout ends its session', async () => {
    const schema = await postgres.freshSchema();
    const backend = postgres.backend(schema, {
      pool: postgres.pool({ applicationName: 'successor' }),
      timeouts: { lockMs: 4_000 },
    });
    const sql = sqlFor(schema);
    const slot = freshSlot();
    await claimOrFail(backend, slot, 'first');
    await postgres.ageLease(schema, slot, 2 * LEASE);

    // A claimer that froze between its upsert and its COMMIT, holding the row and the advisory lock.
    const frozen = await postgres.pool({ applicationName: 'frozen-claimer', max: 1 }).connect();
    frozen.on('error', () => {});
    await frozen.query(beginTransaction({ statementMs: 5_000, lockMs: 2_000, idleInTransactionMs: 300 }));
    await frozen.query(sql.probeSlot, [advisoryLockKey(slot).toString(), slot.jobId, slot.window, null]);
    const [granted] = (
      await frozen.query(sql.claimSlot, [
        slot.jobId,
        slot.window,
        'frozen-claimer',
        null,
        LEASE,
        3,
        new Date(),
        null,
        null,
        null,
        Math.ceil(WINDOW_MS / 1000) + 86_400 * 35,
        false,
        new Date(DEADLINE),
        null,
        null,
        1, // the window's split: not split
      ])
    ).rows;
    expect(granted).toMatchObject({ epoch: 2 });

    const started = Date.now();
    const outcome = await backend.claims.claim(slot, lease('successor'), Date.now());
    // It waited for the server to end the frozen session (300 ms), within one lock_timeout.
    expect(Date.now() - started).toBeLessThan(4_000);
    expect(outcome).toMatchObject({
      kind: 'claimed',
      claim: { epoch: 2, via: 'takeover' },
      previousHolder: 'first',
    });
    await expect(frozen.query('SELECT 1')).rejects.toThrow();
    frozen.release(true);
  });

  it('gives up within lock_timeout with a StoreError, not a wrong answer, while a frozen claimer holds the slot', async () => {
    const schema = await postgres.freshSchema();
    const backend = postgres.backend(schema, {
      timeouts: { statementMs: 1_000, lockMs: 200, idleInTransactionMs: 1_000 },
    });
    const slot = freshSlot();
    const frozen = await postgres.pool({ applicationName: 'long-frozen', max: 1 }).connect();
    await frozen.query('BEGIN');
    await frozen.query('SELECT pg_advisory_xact_lock($1::bigint)', [advisoryLockKey(slot).toString()]);

    await expect(backend.claims.claim(slot, lease('impatient'), Date.now())).rejects.toBeInstanceOf(
      StoreError,
    );
    expect(await backend.claims.read(slot)).toBeUndefined();

    await frozen.query('ROLLBACK');
    frozen.release();
    expect(await backend.claims.claim(slot, lease('impatient'), Date.now())).toMatchObject({
      kind: 'claimed',
      claim: { epoch: 1 },
    });
  });

  it('only delays a claim whose advisory key another session holds (a hash collision): the row still decides', async () => {
    const schema = await postgres.freshSchema();
    const backend = postgres.backend(schema, { pool: postgres.pool({ applicationName: 'collider-victim' }) });
    const slot = freshSlot();
    const colliding = await postgres.pool({ applicationName: 'collider', max: 1 }).connect();
    await colliding.query('BEGIN');
    await colliding.query('SELECT pg_advisory_xact_lock($1::bigint)', [advisoryLockKey(slot).toString()]);

    const claims = Promise.all([
      backend.claims.claim(slot, lease('first'), Date.now()),
      backend.claims.claim(slot, lease('second'), Date.now()),
    ]);
    await untilWaiting('collider-victim');
    expect(await backend.claims.read(slot)).toBeUndefined();
    await colliding.query('COMMIT');
    colliding.release();

    const outcomes = await claims;
    expect(outcomes.map((o) => o.kind).sort()).toEqual(['claimed', 'held']);
    expect(await backend.claims.read(slot)).toMatchObject({ state: 'RUNNING', epoch: 1, attempts: 1 });
  });

  it('grants each epoch exactly once with no advisory lock at all: 20 bare upserts race for a new and an expired slot', async () => {
    const schema = await postgres.freshSchema();
    const sql = sqlFor(schema);
    const pool = postgres.pool({ applicationName: 'bare-upserts', max: 20 });
    const slot = freshSlot();
    const race = (prefix: string) =>
      Promise.all(
        Array.from({ length: 20 }, async (_, i) => {
          const { rows } = await pool.query(sql.claimSlot, [
            slot.jobId,
            slot.window,
            `${prefix}-${i}`,
            null,
            LEASE,
            3,
            new Date(),
            null,
            null,
            null,
            Math.ceil(WINDOW_MS / 1000) + 86_400 * 35,
            false,
            new Date(DEADLINE),
            null,
            null,
            1, // the window's split: not split
          ]);
          return rows as { epoch: number }[];
        }),
      );
    const first = (await race('new')).flat();
    expect(first).toHaveLength(1);
    expect(first[0]!.epoch).toBe(1);

    await postgres.ageLease(schema, slot, 2 * LEASE);
    const second = (await race('takeover')).flat();
    expect(second).toHaveLength(1);
    expect(second[0]!.epoch).toBe(2);
  });

  it('decides who holds a slot by the database clock, however far the replicas’ clocks disagree', async () => {
    const schema = await postgres.freshSchema();
    const backend = postgres.backend(schema);
    const slot = freshSlot();
    const slowClock = Date.now() - 5 * 60_000;
    const fastClock = Date.now() + 5 * 60_000;

    const before = await dbNow();
    const { claim: slow } = await claimOrFail(backend, slot, 'slow-replica', slowClock);
    const after = await dbNow();
    // The lease runs from the database's clock; the claimer's own reading is only recorded.
    expect(slow.leaseEndsAt).toBeGreaterThanOrEqual(before + LEASE);
    expect(slow.leaseEndsAt).toBeLessThanOrEqual(after + LEASE);
    const record = await backend.claims.read(slot);
    expect(record?.claimerClock).toBe(slowClock);
    expect(record?.claimedAt).toBeGreaterThanOrEqual(before);
    expect(record?.claimedAt).toBeLessThanOrEqual(after);

    // By its own clock the slow replica's lease ended four minutes ago; the database says it holds.
    expect(await backend.claims.claim(slot, lease('fast-replica'), fastClock)).toMatchObject({
      kind: 'held',
      holder: 'slow-replica',
      epoch: 1,
      leaseEndsAt: slow.leaseEndsAt,
    });
    // What the caller's clock would have done with the same row: a takeover of a live lease.
    const callerClocked = postgres.backend(schema, { leaseClock: 'caller' });
    const contrast = freshSlot();
    await claimOrFail(backend, contrast, 'slow-replica', slowClock);
    expect(await callerClocked.claims.claim(contrast, lease('fast-replica'), fastClock)).toMatchObject({
      kind: 'claimed',
      claim: { via: 'takeover' },
    });

    // Once the database clock passes the lease, the fast replica takes over and the slow one is fenced.
    await postgres.ageLease(schema, slot, 2 * LEASE);
    expect(await backend.claims.claim(slot, lease('fast-replica'), slowClock)).toMatchObject({
      kind: 'claimed',
      claim: { epoch: 2, via: 'takeover' },
      previousHolder: 'slow-replica',
    });
    expect(await backend.claims.complete(slow, summaryOf(1), fastClock)).toMatchObject({
      kind: 'fenced',
      holder: 'fast-replica',
      epoch: 2,
    });
  });

  it('does not let a replica whose clock runs five minutes fast take over a live run, so nobody is emailed twice', async () => {
    const schema = await postgres.freshSchema();
    const mailbox = new CountingSender();
    const emf = new EmfRecorder();
    const gate = new Gate(50);
    const replica = (name: string, clockMs: number, sender: EmailSender) => {
      const backend = postgres.backend(schema, { pool: postgres.pool({ applicationName: name }) });
      const job = weeklyReportJob({ customers: () => syntheticCustomers(300), sender });
      return testHandler(job, backend, { clock: new ManualClock(clockMs), emf });
    };
    const slow = replica('skew-slow', WINDOW_MS + 1_000, gatedSender(gate, mailbox));
    const fast = replica('skew-fast', WINDOW_MS + 1_000 + 5 * 60_000, mailbox);

    const running = slow.handler(schedulerEvent(JOB, WINDOW, 1, 'exec-slow'), context('skew-slow'));
    await gate.arrived(16);
    expect(
      await fast.handler(schedulerEvent(JOB, WINDOW, 1, 'exec-fast'), context('skew-fast')),
    ).toMatchObject({
      status: 'duplicate',
      outcome: { kind: 'held', epoch: 1 },
    });
    gate.open();
    expect(await running).toMatchObject({
      status: 'completed',
      epoch: 1,
      summary: { done: 300, inDoubt: 0 },
    });
    expect(mailbox.total).toBe(300);
    expect(mailbox.duplicates()).toBe(0);
    expect(emf.sum('LeaseTakeover')).toBe(0);
    expect(emf.sum('DuplicateClaim')).toBe(1);
  });
});

describe('Postgres backend: replies lost after commit', () => {
  it('recognises its own claim, reservations, completion and failed release when each reply is lost once', async () => {
    const schema = await postgres.freshSchema();
    // Every odd COMMIT loses its reply: each operation's first try commits and looks failed, and
    // its retry (the backend's own) meets the write it already made.
    const { pool, counts } = losingReplies(postgres.pool({ applicationName: 'lossy' }), (n) => n % 2 === 1);
    const backend = postgres.backend(schema, { pool });
    const slot = freshSlot();

    const { claim } = await claimOrFail(backend, slot, 'a');
    expect(claim).toMatchObject({ epoch: 1, owner: 'a' });
    expect(await backend.claims.read(slot)).toMatchObject({ state: 'RUNNING', epoch: 1, attempts: 1 });
    expect(await backend.ledger.reserveMany(claim, ['k1', 'k2'], reserving())).toEqual([
      { kind: 'reserved', rerun: false, attempt: 1 },
      { kind: 'reserved', rerun: false, attempt: 1 },
    ]);
    await backend.ledger.markDone(claim, ['k1']);
    expect(await backend.claims.renew(claim, LEASE, Date.now())).toMatchObject({ kind: 'renewed' });
    expect(await backend.claims.complete(claim, summaryOf(1), Date.now())).toEqual({ kind: 'ok' });
    expect(await backend.claims.read(slot)).toMatchObject({ state: 'DONE', epoch: 1, attempts: 1 });
    expect((await listAll(backend, slot)).map((r) => [r.keyHash, r.state, r.epoch])).toEqual([
      ['k1', 'DONE', 1],
      ['k2', 'RESERVED', 1],
    ]);

    const failing = freshSlot();
    const { claim: b } = await claimOrFail(backend, failing, 'b');
    expect(await backend.claims.release(b, { kind: 'error', message: 'boom' }, Date.now())).toEqual({
      kind: 'ok',
    });
    // Counted once, though the release statement ran twice.
    expect(await backend.claims.read(failing)).toMatchObject({ state: 'RELEASED', failures: 1, attempts: 1 });
    expect(counts.lost).toBeGreaterThanOrEqual(8);
  });

  it('completes a run with every recipient emailed once and nothing in doubt when one reply in 25 is lost', async () => {
    const schema = await postgres.freshSchema();
    const { pool, counts } = losingReplies(
      postgres.pool({ applicationName: 'lossy-run' }),
      (n) => n % 25 === 0,
    );
    const sender = new CountingSender();
    const { handler } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomers(300), sender }),
      postgres.backend(schema, { pool }),
      { clock: new ManualClock(WINDOW_MS + 1_000) },
    );
    expect(await handler(schedulerEvent(JOB, WINDOW), context('lossy-run'))).toMatchObject({
      status: 'completed',
      epoch: 1,
      summary: { done: 300, inDoubt: 0, failed: 0 },
    });
    expect(sender.total).toBe(300);
    expect(sender.duplicates()).toBe(0);
    expect(counts.lost).toBeGreaterThan(5);
  });
});

describe('Postgres backend: hostile input', () => {
  it('rejects hostile job ids and windows before any SQL runs, and the tables survive', async () => {
    const schema = await postgres.freshSchema();
    const backend = postgres.backend(schema);
    const jobIds = [
      "x'; DROP TABLE slots; --",
      'weekly-report"; DROP SCHEMA public; --',
      'a;b',
      'nul\u0000byte',
      'j'.repeat(10_000),
      '\u202Eevil\u202C',
      'WEEKLY-REPORT',
      '',
    ];
    for (const jobId of jobIds) {
      const slot = { jobId, window: WINDOW };
      await expect(backend.claims.claim(slot, lease('x'), Date.now())).rejects.toThrow(/not a valid job id/);
      await expect(backend.claims.read(slot)).rejects.toBeInstanceOf(InvalidEventError);
    }
    // Another spelling of an instant (`….000Z`) is no such window: canonicalSlot makes it the one
    // slot (the contract's "one rule for keys"). These are not instants at all.
    const badWindows = ["2026-11-30T06:00:00Z'; --", '2026-11-30 06:00:00', '2026-02-31T00:00:00Z'];
    for (const window of badWindows) {
      await expect(backend.claims.claim({ jobId: JOB, window }, lease('x'), Date.now())).rejects.toThrow(
        /is not an ISO-8601 instant/,
      );
    }
    const [row] = await postgres.sql<{ n: number }>(`SELECT count(*)::integer AS n FROM ${schema}.slots`);
    expect(row!.n).toBe(0);
  });

  it('stores hostile effect key hashes byte for byte, and refuses with a clear error what Postgres cannot hold', async () => {
    const backend = postgres.backend(await postgres.freshSchema());
    const slot = freshSlot();
    const { claim } = await claimOrFail(backend, slot, 'owner');
    const stored = [
      `o'brien"; DROP TABLE effects; --`,
      '\u202Eevil\u202C.example.com',
      'semi;colon',
      'emoji-\u{1F44B}',
      "$1 ' \\ %s ::text",
      'k'.repeat(512),
    ];
    const outcomes = await backend.ledger.reserveMany(claim, stored, reserving());
    expect(outcomes.every((o) => o.kind === 'reserved')).toBe(true);
    for (const keyHash of stored) expect((await backend.ledger.read(slot, keyHash))?.keyHash).toBe(keyHash);
    expect(new Set((await listAll(backend, slot)).map((r) => r.keyHash))).toEqual(new Set(stored));

    for (const bad of ['nul\u0000inside', 'k'.repeat(513), 'lone \uD800 surrogate', '']) {
      await expect(backend.ledger.reserve(claim, bad, reserving())).rejects.toSatisfy(
        (error: unknown) => error instanceof ConfigurationError && /effect key hash/.test(error.message),
      );
    }
    expect(await listAll(backend, slot)).toHaveLength(stored.length);
  });

  it('hashes hostile recipient addresses before they reach the ledger, and emails each exactly once', async () => {
    const schema = await postgres.freshSchema();
    const backend = postgres.backend(schema);
    const hostile: Customer[] = [
      `o'brien@example.com'; DROP TABLE effects; --`,
      'nul\u0000@example.com',
      '\u202Emoc.elpmaxe@evil',
      `${'x'.repeat(10_000)}@example.com`,
      'semi;colon@example.com',
    ].map((email, i) => ({ id: `c${i}`, email }));
    const mailbox = new CountingSender();
    async function* customers() {
      yield* hostile;
    }
    const { handler } = testHandler(weeklyReportJob({ customers, sender: mailbox }), backend, {
      clock: new ManualClock(WINDOW_MS + 1_000),
    });
    expect(await handler(schedulerEvent(JOB, WINDOW), context('hostile'))).toMatchObject({
      status: 'completed',
      summary: { done: 5 },
    });
    expect(await handler(schedulerEvent(JOB, WINDOW, 2), context('hostile-retry'))).toMatchObject({
      status: 'duplicate',
      outcome: { kind: 'done' },
    });
    expect(mailbox.total).toBe(5);
    expect([...mailbox.perRecipient.keys()].sort()).toEqual(hostile.map((c) => c.email).sort());
    const records = await listAll(backend, { jobId: JOB, window: WINDOW });
    expect(records).toHaveLength(5);
    for (const record of records) expect(record.keyHash).toMatch(/^[0-9a-f]{32}$/);
  });

  it('stores hostile free text (an error message with NUL, a delivery id with quotes) safely instead of failing the release', async () => {
    const backend = postgres.backend(await postgres.freshSchema());
    const slot = freshSlot();
    const outcome = await backend.claims.claim(
      slot,
      lease('owner', { delivery: { executionId: `exec'; --`, invocationId: 'req\u0000\u202E' } }),
      Date.now(),
    );
    if (outcome.kind !== 'claimed') throw new Error(outcome.kind);
    expect(
      await backend.claims.release(
        outcome.claim,
        { kind: 'error', message: 'boom\u0000 "quoted"' },
        Date.now(),
      ),
    ).toEqual({
      kind: 'ok',
    });
    expect(await backend.claims.read(slot)).toMatchObject({
      state: 'RELEASED',
      failures: 1,
      lastError: 'boom\uFFFD "quoted"',
      delivery: { executionId: `exec'; --`, invocationId: 'req\uFFFD\u202E' },
    });
  });

  it('refuses hostile schema names everywhere a schema is named', async () => {
    const pool = postgres.pool({ max: 1 });
    const output = { out: () => {}, err: () => {} };
    for (const schema of ['x"; DROP SCHEMA public; --', 'Public', 'pg_catalog', 'a-b', '', 's'.repeat(64)]) {
      expect(() => postgresBackend({ pool, schema, hashKey: hmacEffectKeys(TEST_SECRET) })).toThrow(
        ConfigurationError,
      );
      await expect(migrate(pool, { schema })).rejects.toBeInstanceOf(ConfigurationError);
      expect(
        await runPostgresCli(
          ['migrate', '--schema', schema],
          { DATABASE_URL: postgres.connectionString },
          output,
        ),
      ).toBe(1);
    }
  });
});

describe('Postgres backend: schema, timeouts and operations', () => {
  it('migrates idempotently, also when three replicas migrate one new schema at once', async () => {
    const pool = postgres.pool({ max: 3 });
    const schema = postgres.uniqueSchemaName('concurrent');
    const results = await Promise.all([1, 2, 3].map(() => migrate(pool, { schema })));
    expect(results.filter((r) => r.applied)).toHaveLength(1);
    expect(results.every((r) => r.version === SCHEMA_VERSION)).toBe(true);
    expect(await migrate(pool, { schema })).toEqual({ schema, version: SCHEMA_VERSION, applied: false });
    const tables = await postgres.sql<{ table_name: string }>(
      'SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name',
      [schema],
    );
    expect(tables.map((t) => t.table_name)).toEqual([
      'effects',
      'schema_version',
      'send_rates',
      'shard_slots',
      'slots',
    ]);
  });

  it('migrates from the command line and prints the script for review', async () => {
    const lines: string[] = [];
    const output = { out: (line: string) => lines.push(line), err: (line: string) => lines.push(line) };
    const env = { DATABASE_URL: postgres.connectionString };
    const schema = postgres.uniqueSchemaName('cli');
    expect(await runPostgresCli(['migrate', '--schema', schema], env, output)).toBe(0);
    expect(await runPostgresCli(['migrate', '--schema', schema], env, output)).toBe(0);
    expect(lines.map((l) => JSON.parse(l).applied)).toEqual([true, false]);
    expect(await runPostgresCli(['migrate', '--schema', schema, '--print'], env, output)).toBe(0);
    expect(lines[2]).toContain(`CREATE TABLE IF NOT EXISTS "${schema}".slots`);
    expect(lines[2]).toBe(migrationScript(schema));
    expect(await runPostgresCli(['drop-everything'], env, output)).toBe(2);
  });

  it('tells an operator to run the migration when the schema has no tables', async () => {
    const backend = postgres.backend(postgres.uniqueSchemaName('never_migrated'));
    await expect(backend.claims.claim(freshSlot(), lease('a'), Date.now())).rejects.toSatisfy(
      (error: unknown) => error instanceof ConfigurationError && /run the migration/.test(error.message),
    );
  });

  it('refuses a lease too short for its timeouts, and a connection scope the pool does not honour', async () => {
    const schema = await postgres.freshSchema();
    const backend = postgres.backend(schema);
    // The default 5 s deadline needs a 30 s lease (a sixth of it is the margin), whatever three of it would say.
    await expect(
      backend.claims.claim(freshSlot(), lease('a', { leaseMs: 10_000 }), Date.now()),
    ).rejects.toThrow(/use a lease of at least 30000 ms/);
    // A short deadline fits a 10 s lease's margin, but the server's 5 s limits still need three of them.
    const quick = postgres.backend(schema, { timeouts: { deadlineMs: 1_000 } });
    await expect(
      quick.claims.claim(freshSlot(), lease('a', { leaseMs: 10_000 }), Date.now()),
    ).rejects.toThrow(/allow a single operation to take 5000 ms; use a lease of at least 15000 ms/);
    const unconfigured = postgres.backend(schema, { timeouts: { scope: 'connection' } });
    await expect(unconfigured.claims.claim(freshSlot(), lease('a'), Date.now())).rejects.toThrow(
      /create the pool with createPostgresPool\(\{ timeouts \}\)/,
    );
  });

  it('refuses a client-side deadline out of range, one longer than the lease’s safety margin, and a pool that would wait forever to connect', async () => {
    const schema = await postgres.freshSchema();
    expect(() => postgres.backend(schema, { timeouts: { deadlineMs: 0 } })).toThrow(
      'timeouts.deadlineMs is 0; use whole milliseconds from 100 to 600000',
    );
    // Unset, the deadline is the longest of the server limits, so it never lowers the shortest lease.
    expect(resolveTimeouts().deadlineMs).toBe(5_000);
    expect(resolveTimeouts({ statementMs: 7_000 }).deadlineMs).toBe(7_000);
    expect(shortestLeaseMs(resolveTimeouts())).toBe(30_000);
    const slow = postgres.backend(schema, { timeouts: { deadlineMs: 8_000 } });
    await expect(slow.claims.claim(freshSlot(), lease('a', { leaseMs: 20_000 }), Date.now())).rejects.toThrow(
      /the run's lease safety margin is 3333 ms \(a sixth of the 20000 ms lease\).*use a lease of at least 48000 ms/,
    );

    expect(() => postgres.pool({ connectionTimeoutMs: 0 })).toThrow(
      /connectionTimeoutMs is 0; use whole milliseconds from 100 to 600000/,
    );
    // A pool's connect is bounded by the deadline unless told otherwise.
    expect(postgres.pool().options.connectionTimeoutMillis).toBe(5_000);
    expect(postgres.pool({ timeouts: { deadlineMs: 800 } }).options.connectionTimeoutMillis).toBe(800);
  });

  it('refuses an 8 s deadline with a 24 s lease, whose safety margin is 4 s: three deadlines are not enough', async () => {
    const schema = await postgres.freshSchema();
    const slow = postgres.backend(schema, { timeouts: { deadlineMs: 8_000 } });
    const slot = freshSlot();
    const refused = slow.claims.claim(slot, lease('a', { leaseMs: 24_000 }), Date.now());
    await expect(refused).rejects.toBeInstanceOf(ConfigurationError);
    await expect(refused).rejects.toMatchObject({
      setting: 'timeouts.deadlineMs',
      message:
        "timeouts.deadlineMs is 8000 but the run's lease safety margin is 4000 ms (a sixth of the 24000 ms lease): " +
        'a call still under way when the run stops taking new effects could outlast the lease; lower ' +
        'timeouts.deadlineMs to 4000 or less, or use a lease of at least 48000 ms',
    });
    expect(await slow.claims.read(slot)).toBeUndefined();
    // The lease it names is taken.
    expect(await slow.claims.claim(slot, lease('a', { leaseMs: 48_000 }), Date.now())).toMatchObject({
      kind: 'claimed',
      claim: { epoch: 1 },
    });
  });

  it('refuses a run whose own safety margin is shorter than the deadline, before it claims the window', async () => {
    const schema = await postgres.freshSchema();
    const backend = postgres.backend(schema);
    const sender = new CountingSender();
    const { handler } = testHandler(
      weeklyReportJob({ customers: () => syntheticCustomers(3), sender }),
      backend,
      {
        clock: new ManualClock(WINDOW_MS + 500),
        run: { leaseMs: LEASE, leaseSafetyMarginMs: 4_000 },
      },
    );
    const run = handler(schedulerEvent(JOB, WINDOW));
    await expect(run).rejects.toMatchObject({
      setting: 'timeouts.deadlineMs',
      message: expect.stringContaining(
        "timeouts.deadlineMs is 5000 but the run's lease safety margin is 4000 ms (leaseSafetyMarginMs, of a " +
          '60000 ms lease)',
      ),
    });
    await expect(run).rejects.toThrow(/or raise leaseSafetyMarginMs to 5000/);
    expect(await backend.claims.read({ jobId: JOB, window: WINDOW })).toBeUndefined();
    expect(sender.total).toBe(0);
  });

  it('purges slots and effects past their retention and keeps the rest', async () => {
    const schema = await postgres.freshSchema();
    const backend = postgres.backend(schema);
    const old = freshSlot();
    const recent = freshSlot();
    const expired = await backend.claims.claim(old, lease('a', { expiresAtSeconds: 1_000 }), Date.now());
    const live = await claimOrFail(backend, recent, 'b');
    if (expired.kind !== 'claimed') throw new Error(expired.kind);
    await backend.ledger.reserveMany(expired.claim, ['e1', 'e2', 'e3'], reserving());
    await backend.ledger.reserveMany(live.claim, ['k1'], reserving());

    expect(await purgeExpired(postgres.pool({ max: 1 }), { schema, batchSize: 2 })).toEqual({
      slots: 1,
      effects: 3,
    });
    expect(await backend.claims.read(old)).toBeUndefined();
    expect(await listAll(backend, old)).toHaveLength(0);
    expect(await backend.claims.read(recent)).toMatchObject({ state: 'RUNNING' });
    expect(await listAll(backend, recent)).toHaveLength(1);
  });
});

describe('Postgres backend: backfills and the operator', () => {
  it('records a backfilled claim on the slot, and a later ordinary claim of the window as not backfilled', async () => {
    const schema = await postgres.freshSchema();
    const backend = postgres.backend(schema);
    const slot = freshSlot();
    const backfill = await backend.claims.claim(
      slot,
      lease('backfill', { delivery: { invocationId: 'backfill', backfilled: true } }),
      Date.now(),
    );
    if (backfill.kind !== 'claimed') throw new Error(backfill.kind);
    expect(await backend.claims.read(slot)).toMatchObject({
      state: 'RUNNING',
      delivery: { invocationId: 'backfill', backfilled: true },
    });
    await backend.claims.release(backfill.claim, { kind: 'yield', runsWithoutProgress: 0 }, Date.now());
    await claimOrFail(backend, slot, 'scheduled');
    const retried = await backend.claims.read(slot);
    expect(retried).toMatchObject({ epoch: 2, delivery: { invocationId: 'scheduled' } });
    expect(retried?.delivery.backfilled).toBeUndefined();
  });

  it('refuses an operator release on the database clock while the lease is live, however far ahead the operator’s clock is', async () => {
    const schema = await postgres.freshSchema();
    const pool = postgres.pool({ applicationName: `slotguard-test-${schema}` });
    const backend = postgres.backend(schema, { pool });
    const operator = new PostgresOperatorStore({ pool, schema });
    const slot = freshSlot();
    const holder = await claimOrFail(backend, slot, 'live');
    const fastOperator = { expectedEpoch: 1, now: Date.now() + 3_600_000, evenIfLeaseLive: false };
    expect(await operator.forceRelease(slot, fastOperator)).toMatchObject({
      kind: 'refused',
      reason: 'lease-live',
      current: { state: 'RUNNING', epoch: 1 },
    });
    expect(await backend.claims.renew(holder.claim, LEASE, Date.now())).toMatchObject({ kind: 'renewed' });

    await postgres.ageLease(schema, slot, 2 * LEASE);
    const released = await operator.forceRelease(slot, { ...fastOperator, now: 0 });
    expect(released).toMatchObject({ kind: 'ok', record: { state: 'RELEASED', epoch: 1, failures: 0 } });
    const [note] = await postgres.sql<{ operator_action: string }>(
      `SELECT operator_action FROM ${escapeIdentifier(schema)}.slots WHERE job_id = $1 AND slot_window = $2`,
      [slot.jobId, slot.window],
    );
    expect(note?.operator_action).toBe('released by an operator at 1970-01-01T00:00:00.000Z');
    expect(await backend.claims.complete(holder.claim, summaryOf(1), Date.now())).toMatchObject({
      kind: 'fenced',
    });
  });

  it('releases a STUCK window for another run with fresh budgets, its checkpoint and deadline kept', async () => {
    const schema = await postgres.freshSchema();
    const pool = postgres.pool({ applicationName: `slotguard-test-${schema}` });
    const backend = postgres.backend(schema, { pool });
    const operator = new PostgresOperatorStore({ pool, schema });
    const slot = freshSlot();
    const { claim } = await claimOrFail(backend, slot, 'gave-up');
    const checkpoint = { positions: { customers: 'c000420' }, walked: false };
    const stuck = {
      kind: 'stuck' as const,
      reason: 'no progress in 3 runs',
      checkpoint,
      runsWithoutProgress: 3,
    };
    expect(await backend.claims.release(claim, stuck, Date.now())).toEqual({ kind: 'ok' });
    expect(await backend.claims.claim(slot, lease('next'), Date.now())).toMatchObject({
      kind: 'stuck',
      epoch: 1,
    });

    const released = await operator.forceRelease(slot, {
      expectedEpoch: 1,
      now: Date.now(),
      evenIfLeaseLive: false,
    });
    expect(released).toMatchObject({
      kind: 'ok',
      record: {
        state: 'RELEASED',
        epoch: 1,
        failures: 0,
        runsWithoutProgress: 0,
        checkpoint,
        deadline: DEADLINE,
      },
    });
    expect(await backend.claims.claim(slot, lease('next'), Date.now())).toMatchObject({
      kind: 'claimed',
      claim: { epoch: 2, via: 'retry', window: { deadline: DEADLINE, checkpoint, runsWithoutProgress: 0 } },
    });
  });

  it('reopens a PARTIAL window as it does a DONE one, and leaves its refused effect failed, not in doubt', async () => {
    const schema = await postgres.freshSchema();
    const pool = postgres.pool({ applicationName: `slotguard-test-${schema}` });
    const backend = postgres.backend(schema, { pool });
    const operator = new PostgresOperatorStore({ pool, schema });
    const slot = freshSlot();
    const { claim } = await claimOrFail(backend, slot, 'partial');
    expect(await backend.ledger.reserveMany(claim, ['in-doubt', 'refused'], reserving())).toHaveLength(2);
    await backend.ledger.recordFailure(claim, 'refused', { attempts: 5, reason: 'rejected' });
    const window = {
      ...summaryOf(1),
      inDoubt: 1,
      inDoubtKeys: ['in-doubt'],
      failed: 1,
      failedKeys: ['refused'],
    };
    expect(await backend.claims.complete(claim, window, Date.now())).toEqual({ kind: 'ok' });
    const request = { expectedEpoch: 1, now: Date.now() };

    expect(await operator.resolveEffect(slot, 'refused', 'clear', request)).toMatchObject({
      kind: 'effect-not-in-doubt',
      current: { state: 'FAILED', attempts: 5, reason: 'rejected' },
    });
    // Clearing the in-doubt effect of a PARTIAL window reopens it, as it would a DONE one.
    expect(await operator.resolveEffect(slot, 'in-doubt', 'clear', request)).toMatchObject({
      kind: 'resolved',
      before: { state: 'RESERVED', epoch: 1, owner: 'partial', attempts: 0 },
      slotReopened: true,
    });
    expect(await backend.claims.read(slot)).toMatchObject({ state: 'RELEASED', epoch: 1, summary: window });
    const { claim: next } = await claimOrFail(backend, slot, 'next');
    expect(await backend.ledger.reserveMany(next, ['in-doubt', 'refused'], reserving())).toEqual([
      { kind: 'reserved', rerun: false, attempt: 1 },
      { kind: 'failed', attempts: 5 },
    ]);
    expect(
      await backend.claims.complete(next, { ...window, inDoubt: 0, inDoubtKeys: [], done: 1 }, Date.now()),
    ).toEqual({
      kind: 'ok',
    });

    // Reopened directly, without touching an effect.
    expect(await operator.reopen(slot, { expectedEpoch: 2, now: Date.now() })).toMatchObject({
      kind: 'ok',
      record: { state: 'RELEASED', epoch: 2 },
    });
  });
});

describe('the incident on Postgres: three replicas fire the weekly report for one window', () => {
  it('sends each of 12,400 customers exactly one email, with 2 DuplicateClaim and nothing in doubt', async () => {
    const schema = await postgres.freshSchema();
    const sender = new CountingSender();
    const emf = new EmfRecorder();
    const clock = new ManualClock(WINDOW_MS + 1_000);
    const backends = ['a', 'b', 'c'].map((name) =>
      postgres.backend(schema, { pool: postgres.pool({ applicationName: `incident-${name}` }) }),
    );
    const replicas = backends.map((backend) =>
      testHandler(weeklyReportJob({ customers: () => syntheticCustomers(12_400), sender }), backend, {
        clock,
        emf,
      }),
    );
    const results = await Promise.all(
      replicas.map((r, i) => r.handler(schedulerEvent(JOB, WINDOW, 1, `exec-replica-${i}`))),
    );
    const problems = replicas.flatMap((r) => r.log.lines.filter((l) => l.level !== 'info'));

    expect(results.map((r) => r.status).sort(), JSON.stringify(problems.slice(0, 5))).toEqual([
      'completed',
      'duplicate',
      'duplicate',
    ]);
    expect(sender.total).toBe(12_400);
    expect(sender.perRecipient.size).toBe(12_400);
    expect(sender.duplicates()).toBe(0);
    expect(emf.sum('ClaimAcquired')).toBe(1);
    expect(emf.sum('DuplicateClaim')).toBe(2);
    expect(emf.sum('EffectDone')).toBe(12_400);
    expect(emf.sum('EffectInDoubt')).toBe(0);
    const completed = results.find((r) => r.status === 'completed');
    expect(completed).toMatchObject({ summary: { done: 12_400, skipped: 0, inDoubt: 0, failed: 0 } });
    // One write per recipient: each stays RESERVED under its number, and the run's done marks
    // cover every one of them.
    const [row] = await postgres.sql<{ numbered: number; done: number }>(
      `SELECT count(*) FILTER (WHERE state = 'RESERVED' AND seq IS NOT NULL)::integer AS numbered,
              count(*) FILTER (WHERE state = 'DONE')::integer AS done FROM ${schema}.effects`,
    );
    expect(row).toEqual({ numbered: 12_400, done: 0 });
    const listed = await listAll(backends[0]!, { jobId: JOB, window: WINDOW });
    expect(listed.filter((r) => r.state === 'DONE')).toHaveLength(12_400);
  });
});

/** A window summary of `runs` runs that did nothing. */
const summaryOf = (runs: number) => ({
  done: 0,
  inDoubt: 0,
  failed: 0,
  inDoubtKeys: [],
  failedKeys: [],
  runs,
});

describe('Postgres backend: shards on the database clock', () => {
  it('refuses a split it cannot store, a shard split again and a shard out of range, naming the value', async () => {
    const backend = postgres.backend(await postgres.freshSchema());
    const window = freshSlot();
    for (const shards of [0, 2.5, 1_001]) {
      await expect(backend.claims.claim(window, lease('a', { shards }), Date.now())).rejects.toThrow(
        new RegExp(
          `lease.shards is number ${shards}; a window is split into a whole number of shards from 1`,
        ),
      );
    }
    expect(await backend.claims.read(window)).toBeUndefined();
    const { claim: shard } = await claimOrFail(backend, { ...window, shard: 1 }, 'shard-1');
    await expect(backend.claims.release(shard, { kind: 'sharded', shards: 2 }, Date.now())).rejects.toThrow(
      /shard 1 was released as split into 2 shards, but it is itself a shard/,
    );
    expect(await backend.claims.read({ ...window, shard: 1 })).toMatchObject({ state: 'RUNNING' });
    await expect(backend.claims.shardFinished(window, -1)).rejects.toThrow(
      /shard is number -1; a shard is a whole number from 0/,
    );
  });

  it("fences a shard's reservations by its own row: a lock on its window's row never holds them up, a takeover of the shard ends them", async () => {
    const schema = await postgres.freshSchema();
    const backend = postgres.backend(schema, { timeouts: { lockMs: 1_000 } });
    const window = freshSlot();
    const shard0 = { ...window, shard: 0 };
    const coordinator = await backend.claims.claim(window, lease('coordinator', { shards: 2 }), Date.now());
    if (coordinator.kind !== 'claimed') throw new Error(coordinator.kind);
    await backend.claims.release(coordinator.claim, { kind: 'sharded', shards: 2 }, Date.now());
    const { claim: first } = await claimOrFail(backend, shard0, 'shard-0');

    // Someone holds the window's row (as finishing the window does): the shard reserves regardless,
    // within its lock_timeout, since its lease check locks the shard's row alone.
    const holder = await postgres.pool({ applicationName: 'window-row-holder', max: 1 }).connect();
    await holder.query('BEGIN');
    await holder.query(
      `SELECT 1 FROM ${escapeIdentifier(schema)}.slots WHERE job_id = $1 AND slot_window = $2 FOR UPDATE`,
      [window.jobId, window.window],
    );
    try {
      expect(await backend.ledger.reserveMany(first, ['k1', 'k2'], reserving())).toEqual([
        { kind: 'reserved', rerun: false, attempt: 1 },
        { kind: 'reserved', rerun: false, attempt: 1 },
      ]);
    } finally {
      await holder.query('COMMIT');
      holder.release();
    }
    await backend.ledger.markDone(first, ['k1']);

    // The database clock passes the shard's lease end: another run takes the shard over.
    await postgres.ageLease(schema, shard0, 2 * LEASE);
    const { claim: second } = await claimOrFail(backend, shard0, 'shard-0-again');
    expect(second).toMatchObject({ epoch: 2, via: 'takeover' });
    expect(await backend.ledger.reserve(first, 'k3', reserving())).toEqual({ kind: 'fenced', epoch: 2 });
    expect(await backend.ledger.reserve(second, 'k2', reserving())).toEqual({ kind: 'in-doubt', epoch: 1 });
    // The effects are the window's, each stamped with the shard that wrote it; the window is untouched.
    expect((await listAll(backend, window)).map((r) => [r.keyHash, r.state, r.shard])).toEqual([
      ['k1', 'DONE', 0],
      ['k2', 'RESERVED', 0],
    ]);
    expect(await backend.claims.read(window)).toMatchObject({ state: 'SHARDED', epoch: 1, shards: 2 });
  });
});
