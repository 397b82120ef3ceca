import { escapeIdentifier, type PoolClient } from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { main } from '../../cli/slotguard.js';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import { PostgresDeadlineError, PostgresOperatorStore } from '../../shared/backends/postgres/index.js';
import { translateError } from '../../shared/backends/postgres/postgres-errors.js';
import { PostgresExecutor, resolveTimeouts } from '../../shared/backends/postgres/postgres-executor.js';
import { sqlFor } from '../../shared/backends/postgres/sql.js';
import type { EmailSender } from '../../shared/effects/email-sender.js';
import type { Slot } from '../../shared/slot/slot.js';
import { CountingSender } from '../helpers/counting-sender.js';
import { schedulerEvent, testHandler } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';
import {
  claimOrFail,
  countDestroyedConnections,
  type FrozenProcesses,
  slotSequence,
  usePostgres,
} from '../helpers/postgres.js';

/*
 * "The server is frozen, its connections open": the review stopped Postgres with SIGSTOP and one
 * call hung for 120 s. These tests do the same to real server processes (usePostgres starts its own
 * embedded server for that, whatever DATABASE_URL says): a stopped process keeps its sockets, the
 * kernel buffers what the client sends, and nothing is answered until SIGCONT, when the process
 * reads what was buffered. A proxy that stops forwarding would freeze the bytes, not the server,
 * and would decide itself what the server sees of a client that gives up; only the real process
 * answers the question that matters here: does a write the client gave up on commit once the
 * server thaws?
 *
 * To freeze a process with a write already in its socket, the write is made to wait on the slot
 * row (a blocker holds it FOR UPDATE), the process serving it is stopped while it waits, and the
 * blocker lets go: the lock passes to the stopped process, which on SIGCONT runs the write at once.
 * The server's own limits stay far longer than the freeze, so that what ends each call is the
 * client-side deadline, never a server timer that expired while the process was stopped.
 */
const postgres = usePostgres({ embedded: true });
afterEach(() => postgres.thawAll());

const WINDOW = '2026-11-30T06:00:00Z';
const WINDOW_MS = Date.parse(WINDOW);
const LEASE = 60_000;
const DEADLINE = 400;
const TIMEOUTS = { deadlineMs: DEADLINE, lockMs: 5_000 };
type Scope = 'transaction' | 'connection';
const SCOPES: Scope[] = ['transaction', 'connection'];

/** A slot no other test in this file uses. */
const freshSlot = slotSequence('frozen-job');

/**
 * A fresh schema and slot, claimed by 'holder' through a backend with the test's short deadline,
 * on a one-connection pool named `applicationName` whose destroyed connections are counted. With
 * scope 'connection' the pool's connections carry the limits, and a single statement would go out
 * on its own unless the executor wraps it.
 */
async function claimedOn(applicationName: string, scope: Scope = 'transaction') {
  const schema = await postgres.freshSchema();
  const pool = postgres.pool({
    applicationName,
    max: 1,
    ...(scope === 'connection' ? { timeouts: TIMEOUTS } : {}),
  });
  const destroyed = countDestroyedConnections(pool);
  const backend = postgres.backend(schema, { pool, timeouts: { ...TIMEOUTS, scope } });
  const slot = freshSlot();
  const claim = await claimOrFail(backend, slot, 'holder');
  // The renewal's own statement and parameters, for a test that sends it past the executor.
  const renewal = [
    sqlFor(schema).renewLease,
    [slot.jobId, slot.window, claim.owner, claim.epoch, null, LEASE],
  ] as const;
  return { schema, pool, destroyed, backend, slot, claim, renewal, before: await leaseUntil(schema, slot) };
}

/** The slot's lease end as the server stores it, to the microsecond. */
async function leaseUntil(schema: string, slot: Slot): Promise<string> {
  const [row] = await postgres.sql<{ lease_until: string }>(
    `SELECT lease_until::text AS lease_until FROM ${escapeIdentifier(schema)}.slots WHERE job_id = $1 AND slot_window = $2`,
    [slot.jobId, slot.window],
  );
  return row!.lease_until;
}

/** Whether one timestamptz text is later than another, compared by the server. */
async function isLater(later: string, earlier: string): Promise<boolean> {
  const [row] = await postgres.sql<{ later: boolean }>('SELECT $1::timestamptz > $2::timestamptz AS later', [
    later,
    earlier,
  ]);
  return row!.later;
}

/** A session holding the slot row FOR UPDATE, so a write to it waits. */
async function lockSlotRow(schema: string, slot: Slot): Promise<PoolClient> {
  const blocker = await postgres.pool({ applicationName: 'row-blocker', max: 1 }).connect();
  await blocker.query('BEGIN');
  const { rows } = await blocker.query(
    `SELECT 1 FROM ${escapeIdentifier(schema)}.slots WHERE job_id = $1 AND slot_window = $2 FOR UPDATE`,
    [slot.jobId, slot.window],
  );
  expect(rows).toHaveLength(1);
  return blocker;
}

/**
 * Starts `call`, freezes the server process serving it once it waits for the row `blocker` holds,
 * lets the row go, and returns what the call came to, without thawing the process until then.
 * `abandon` gives up on the call by hand (for a client with no deadline). The process is thawed
 * before this returns, and has ended its session: whatever it was going to commit is committed.
 */
async function whileFrozenMidStatement(
  applicationName: string,
  blocker: PoolClient,
  call: () => Promise<unknown>,
  abandon?: () => void,
): Promise<{ error: unknown }> {
  const settled = call().then(
    () => ({ error: undefined }),
    (error: unknown) => ({ error }),
  );
  const { pid } = await postgres.untilSession(applicationName, (s) => s.wait_event_type === 'Lock');
  let frozen: FrozenProcesses | undefined;
  try {
    frozen = await postgres.freeze([pid]);
    await blocker.query('ROLLBACK');
    abandon?.();
    return await settled;
  } finally {
    frozen?.thaw();
    blocker.release();
    await postgres.untilGone([pid]);
  }
}

// A call the deadline fails to end would hang until the server thaws, which these tests only do
// afterwards: each fails at this timeout instead of vitest's minute.
const HANG = { timeout: 15_000 };

describe(
  'Postgres backend against a frozen server: every call ends at its client-side deadline',
  HANG,
  () => {
    it.each(SCOPES)(
      'does not extend the lease when a renewal is given up at its deadline, even after the server thaws (timeouts per %s)',
      async (scope) => {
        const { schema, destroyed, backend, slot, claim, before } = await claimedOn('frozen-renewer', scope);

        const { error } = await whileFrozenMidStatement(
          'frozen-renewer',
          await lockSlotRow(schema, slot),
          () => backend.claims.renew(claim, LEASE, Date.now()),
        );

        expect(error).toBeInstanceOf(PostgresDeadlineError);
        expect(error).toMatchObject({
          operation: 'renew',
          deadlineMs: DEADLINE,
          awaiting: 'statement',
          mayHaveCommitted: false,
        });
        expect((error as Error).message).toContain(
          `Postgres renew of slot ${slot.jobId} ${slot.window} had no answer within the client-side deadline of 400 ms ` +
            '(timeouts.deadlineMs) while waiting for the reply to a statement, so its connection was destroyed. ' +
            'It did not take effect and cannot later',
        );
        expect(destroyed.count).toBe(1);
        // The thawed server ran the renewal's UPDATE, then found the connection gone instead of a COMMIT.
        expect(await leaseUntil(schema, slot)).toBe(before);

        // The pool has no frozen connection left: the next renewal opens a new one and goes through.
        expect(await backend.claims.renew(claim, LEASE, Date.now())).toMatchObject({ kind: 'renewed' });
        expect(await isLater(await leaseUntil(schema, slot), before)).toBe(true);
      },
    );

    it('shows why writes are sent inside BEGIN … COMMIT: the same renewal sent alone, autocommit, commits when the server thaws', async () => {
      const { schema, pool, slot, renewal, before } = await claimedOn('autocommit-renewer');
      const client = await pool.connect();
      client.on('error', () => {});

      const { error } = await whileFrozenMidStatement(
        'autocommit-renewer',
        await lockSlotRow(schema, slot),
        () => client.query(renewal[0], [...renewal[1]]),
        // Given up on as the deadline gives up: the connection destroyed with the query in flight.
        () => client.release(new Error('given up on')),
      );

      expect((error as Error).message).toMatch(/Connection terminated/);
      expect(await isLater(await leaseUntil(schema, slot), before)).toBe(true);
    });

    it.each(SCOPES)(
      'reserves nothing when a reservation batch is given up at its deadline, even after the server thaws (timeouts per %s)',
      async (scope) => {
        const { schema, destroyed, backend, slot, claim } = await claimedOn('frozen-reserver', scope);
        const keys = ['k1', 'k2', 'k3'];

        const { error } = await whileFrozenMidStatement(
          'frozen-reserver',
          await lockSlotRow(schema, slot),
          () => backend.ledger.reserveMany(claim, keys, { rerunInDoubt: false, now: Date.now() }),
        );

        expect(error).toBeInstanceOf(PostgresDeadlineError);
        expect(error).toMatchObject({ operation: 'reserve', deadlineMs: DEADLINE, mayHaveCommitted: false });
        expect((error as Error).message).toContain(
          `Postgres reserve of an effect of slot ${slot.jobId} ${slot.window} (epoch 1) had no answer within the ` +
            'client-side deadline of 400 ms (timeouts.deadlineMs) while waiting for the reply to a statement',
        );
        expect(destroyed.count).toBe(1);
        const [row] = await postgres.sql<{ n: number }>(
          `SELECT count(*)::integer AS n FROM ${escapeIdentifier(schema)}.effects WHERE job_id = $1 AND slot_window = $2`,
          [slot.jobId, slot.window],
        );
        expect(row!.n).toBe(0);
        expect(
          await backend.ledger.reserveMany(claim, keys, { rerunInDoubt: false, now: Date.now() }),
        ).toEqual(keys.map(() => ({ kind: 'reserved', rerun: false, attempt: 1 })));
      },
    );

    it('reports a write whose COMMIT was sent before the deadline as possibly committed, and it does commit when the server thaws', async () => {
      const { schema, pool, destroyed, slot, renewal, before } = await claimedOn('commit-sent');
      const executor = new PostgresExecutor({ pool, timeouts: resolveTimeouts(TIMEOUTS) });
      let frozen: FrozenProcesses | undefined;

      let error: unknown;
      try {
        await executor.transaction(async (query) => {
          const [session] = await query<{ pid: number }>('SELECT pg_backend_pid() AS pid', []);
          await query(renewal[0], [...renewal[1]]);
          // Stopped after the renewal's reply: the COMMIT the executor sends next waits in the socket.
          frozen = await postgres.freeze([session!.pid]);
        });
      } catch (caught) {
        error = translateError('renew', `slot ${slot.jobId} ${slot.window}`, schema, caught);
      } finally {
        frozen?.thaw();
      }
      await postgres.untilGone(frozen!.pids);

      expect(error).toBeInstanceOf(PostgresDeadlineError);
      expect(error).toMatchObject({ operation: 'renew', awaiting: 'commit', mayHaveCommitted: true });
      expect((error as Error).message).toContain('Its COMMIT had been sent, so it may have taken effect');
      expect(destroyed.count).toBe(1);
      expect(await isLater(await leaseUntil(schema, slot), before)).toBe(true);
    });

    it('gives up an operator’s release at its deadline, and the slot stays with its holder after the thaw', async () => {
      const schema = await postgres.freshSchema();
      const backend = postgres.backend(schema);
      const slot = freshSlot();
      await claimOrFail(backend, slot, 'crashed');
      await postgres.ageLease(schema, slot, 2 * LEASE);
      const pool = postgres.pool({ applicationName: 'frozen-operator', max: 1 });
      const destroyed = countDestroyedConnections(pool);
      const operator = new PostgresOperatorStore({ pool, schema, timeouts: TIMEOUTS });
      const request = { expectedEpoch: 1, now: Date.now(), evenIfLeaseLive: false };

      const { error } = await whileFrozenMidStatement(
        'frozen-operator',
        await lockSlotRow(schema, slot),
        () => operator.forceRelease(slot, request),
      );

      expect(error).toBeInstanceOf(PostgresDeadlineError);
      expect(error).toMatchObject({
        operation: 'forceRelease',
        deadlineMs: DEADLINE,
        mayHaveCommitted: false,
      });
      expect(destroyed.count).toBe(1);
      expect(await backend.claims.read(slot)).toMatchObject({ state: 'RUNNING', owner: 'crashed', epoch: 1 });
      expect(await operator.forceRelease(slot, request)).toMatchObject({
        kind: 'ok',
        record: { state: 'RELEASED', epoch: 1 },
      });
    });

    it('ends an operator CLI command with exit code 3, naming the deadline, when the whole server is frozen', async () => {
      const schema = await postgres.freshSchema();
      let err = '';
      let frozen: FrozenProcesses | undefined;
      let code: number;
      try {
        frozen = await postgres.freezeServer();
        // The CLI takes the backend's default deadline (5 s): it has no setting for it.
        code = await main(
          ['slots', 'show', '--job', 'payment-reminder', '--window', '2026-11-30T06:15:00Z'].concat(
            '--backend',
            'postgres',
            '--schema',
            schema,
          ),
          {
            stdout: { write: () => {} },
            stderr: { write: (text: string) => (err += text) },
            clock: new ManualClock(Date.parse('2026-11-30T07:00:00Z')),
            env: { DATABASE_URL: postgres.connectionString },
          },
        );
      } finally {
        frozen?.thaw();
      }
      expect(code).toBe(3);
      // Frozen, the server takes the connection and never answers; or, under load, the first try
      // already failed and the deadline comes while the client waits to try again.
      expect(err).toMatch(
        /did not answer \(DeadlineExceededError: no answer within the client-side deadline of 5000 ms \(timeouts\.deadlineMs\) while waiting for (a connection|its next try)\)/,
      );
    });
  },
);

describe('a run on a frozen Postgres server', HANG, () => {
  it('ends instead of hanging, commits nothing it gave up on, and the next delivery emails the rest with nobody emailed twice', async () => {
    const schema = await postgres.freshSchema();
    const slot = { jobId: 'weekly-report', window: WINDOW };
    const pool = postgres.pool({ applicationName: 'frozen-run', max: 4 });
    const destroyed = countDestroyedConnections(pool);
    const backend = postgres.backend(schema, { pool, timeouts: TIMEOUTS });
    const mailbox = new CountingSender();
    let frozen: FrozenProcesses | undefined;
    let runSessions: number[] = [];
    // The third email goes out, then the whole server stops: the run's next reservation, its marks
    // and its release each meet it.
    const freezingSender: EmailSender = {
      async send(message) {
        await mailbox.send(message);
        if (mailbox.total !== 3) return;
        const sessions = await postgres.sql<{ pid: number }>(
          "SELECT pid FROM pg_stat_activity WHERE application_name = 'frozen-run'",
        );
        runSessions = sessions.map((s) => s.pid);
        frozen = await postgres.freezeServer();
      },
    };
    const customers = () => syntheticCustomers(10);
    const clock = new ManualClock(WINDOW_MS + 1_000);
    const first = testHandler(weeklyReportJob({ customers, sender: freezingSender }), backend, {
      clock,
      run: { effectConcurrency: 1 },
    });

    let failure: unknown;
    try {
      await first.handler(schedulerEvent('weekly-report', WINDOW, 1, 'exec-frozen'), context('frozen'));
    } catch (error) {
      failure = error;
    } finally {
      frozen?.thaw();
    }
    // The runtime's answer today to a store that does not answer: the release's StoreError, thrown.
    expect(failure).toBeInstanceOf(PostgresDeadlineError);
    expect(failure).toMatchObject({ operation: 'release', mayHaveCommitted: false });
    expect(mailbox.total).toBe(3);
    expect(destroyed.count).toBeGreaterThanOrEqual(1);
    // The fourth reservation, and the done marks of the three sent: both gave up on. The marks are
    // then tried one by one on the effects' own records (markDone), which the frozen server fails too.
    expect(first.log.lines.filter((l) => l.message === 'effect did not complete')).toHaveLength(1);
    const unwritten = first.log.lines.filter(
      (l) => l.message === 'checkpoint not written: performed effects not on record yet',
    );
    expect(unwritten).toMatchObject([
      { level: 'warn', fields: { unrecorded: 3 } },
      { level: 'warn', fields: { unrecorded: 3 } },
    ]);
    expect(String(unwritten[0]?.fields?.error)).toContain('Postgres checkpoint of slot');
    expect(String(unwritten[1]?.fields?.error)).toContain('Postgres markDone of an effect');

    // Once the run's sessions have ended, whatever the server was going to commit for it has.
    await pool.end();
    await postgres.untilGone(runSessions);
    const after = postgres.backend(schema);
    expect(await after.claims.read(slot)).toMatchObject({ state: 'RUNNING', epoch: 1 });
    const effects = await postgres.sql<{ state: string; epoch: number; n: number }>(
      `SELECT state, epoch, count(*)::integer AS n FROM ${escapeIdentifier(schema)}.effects GROUP BY state, epoch`,
    );
    // Three sent and reserved, their marks given up on; the fourth reservation never committed.
    expect(effects).toEqual([{ state: 'RESERVED', epoch: 1, n: 3 }]);

    await postgres.ageLease(schema, slot, 2 * LEASE);
    const next = testHandler(weeklyReportJob({ customers, sender: mailbox }), after, {
      clock,
    });
    const result = await next.handler(
      schedulerEvent('weekly-report', WINDOW, 2, 'exec-next'),
      context('next'),
    );
    expect(result).toMatchObject({
      status: 'completed',
      epoch: 2,
      summary: { done: 7, skipped: 0, inDoubt: 3, failed: 0 },
    });
    expect(mailbox.total).toBe(10);
    expect(mailbox.perRecipient.size).toBe(10);
    expect(mailbox.duplicates()).toBe(0);
  });
});

/** A Lambda-like invocation context, so each run's owner token starts with its name. */
const context = (name: string) => ({ awsRequestId: name, getRemainingTimeInMillis: () => 900_000 });
