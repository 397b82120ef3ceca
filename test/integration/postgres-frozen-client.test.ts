import { escapeIdentifier } from 'pg';
import { describe, expect, it } from 'vitest';
import { PostgresExecutor, resolveTimeouts } from '../../shared/backends/postgres/postgres-executor.js';
import { claimOrFail, slotSequence, untilStopped, usePostgres } from '../helpers/postgres.js';
import { startMarkProcess } from '../helpers/postgres-mark-process.js';

/*
 * The other side of a freeze from postgres-frozen-server.test.ts: here the replica is stopped
 * (SIGSTOP: a paused VM, a suspended container, a long stall), not the server. The server answers
 * while the replica cannot read; when the replica runs again, the answer is waiting in its socket.
 */
const postgres = usePostgres();
const freshSlot = slotSequence('frozen-client');
const DEADLINE = 1_000;

describe('Postgres: a replica stopped mid-call', () => {
  it('reads the reply that arrived while it was stopped past its deadline: its mark lands, nothing left in doubt', async () => {
    const schema = await postgres.freshSchema();
    const backend = postgres.backend(schema);
    const slot = freshSlot();
    const claim = await claimOrFail(backend, slot, 'sent-then-frozen');
    const keyHash = 'k-sent';
    await backend.ledger.reserve(claim, keyHash, { rerunInDoubt: false, now: Date.now() });

    // The mark waits on the effect row until the replica is stopped, so its reply comes while it is.
    const blocker = await postgres.pool({ applicationName: 'frozen-client-blocker', max: 1 }).connect();
    await blocker.query('BEGIN');
    await blocker.query(
      `SELECT 1 FROM ${escapeIdentifier(schema)}.effects WHERE job_id = $1 AND slot_window = $2 AND key_hash = $3 FOR UPDATE`,
      [slot.jobId, slot.window, keyHash],
    );
    const applicationName = 'frozen-client-replica';
    const replica = startMarkProcess({
      connectionString: postgres.connectionString,
      schema,
      applicationName,
      deadlineMs: DEADLINE,
      claim,
      keyHash,
    });
    const pid = replica.process.pid!;
    await postgres.untilSession(applicationName, (s) => s.wait_event_type === 'Lock');
    process.kill(pid, 'SIGSTOP');
    try {
      await untilStopped(pid);
      await blocker.query('COMMIT');
      blocker.release();
      // The server has run the mark and answered; the replica's transaction waits for its COMMIT.
      await postgres.untilSession(applicationName, (s) => s.state === 'idle in transaction');
      // Stopped for longer than its whole deadline: a call with the same deadline, begun only now,
      // against a lock that is never granted, gives up first.
      const witness = await postgres.pool({ applicationName: 'frozen-client-witness', max: 1 }).connect();
      await witness.query('BEGIN');
      await witness.query('SELECT pg_advisory_xact_lock(42)');
      const executor = new PostgresExecutor({
        pool: postgres.pool({ max: 1 }),
        timeouts: resolveTimeouts({ deadlineMs: DEADLINE, lockMs: 5_000 }),
      });
      await expect(executor.query('SELECT pg_advisory_xact_lock(42)', [])).rejects.toThrow(
        /deadline of 1000 ms/,
      );
      await witness.query('COMMIT');
      witness.release();
    } finally {
      process.kill(pid, 'SIGCONT');
    }

    expect(await replica.result).toEqual({ ok: true });
    expect(await backend.ledger.read(slot, keyHash)).toMatchObject({ state: 'DONE', epoch: 1 });
  });
});
