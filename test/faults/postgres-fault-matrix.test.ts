import { escapeIdentifier, type Pool } from 'pg';
import { systemClock } from '../../shared/clock.js';
import type { Slot } from '../../shared/slot/slot.js';
import { usePostgres } from '../helpers/postgres.js';
import { describeFaultMatrix, LEASE_MS } from './fault-matrix.js';

/** One embedded PostgreSQL for this file; a schema per scenario. */
const postgres = usePostgres();

/** Sessions of `applicationName` waiting for a lock right now. */
async function waitingSessions(applicationName: string): Promise<number> {
  const [row] = await postgres.sql<{ n: number }>(
    `SELECT count(*)::integer AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE NOT l.granted AND a.application_name = $1`,
    [applicationName],
  );
  return row?.n ?? 0;
}

/**
 * Lock contention on the slot row: holds it FOR UPDATE (as a takeover's claim would) until
 * `sessions` of the replica wait behind it, then lets go. Reservations lock the row FOR SHARE, so
 * they queue; a bounded poll of pg_locks, not a timer, decides when enough have. Returns how many waited.
 */
async function contend(
  schema: string,
  slot: Slot,
  applicationName: string,
  sessions: number,
): Promise<number> {
  const pool = postgres.pool({ applicationName: 'fault-matrix-contender', max: 1 });
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(
      `SELECT 1 FROM ${escapeIdentifier(schema)}.slots WHERE job_id = $1 AND slot_window = $2 FOR UPDATE`,
      [slot.jobId, slot.window],
    );
    for (let i = 0; i < 5_000; i++) {
      const waiting = await waitingSessions(applicationName);
      if (waiting >= sessions) return waiting;
      await new Promise((resolve) => setImmediate(resolve));
    }
    throw new Error(`fewer than ${sessions} sessions of ${applicationName} ever waited on the slot row`);
  } finally {
    await client.query('COMMIT');
    client.release();
  }
}

describeFaultMatrix({
  name: 'postgres',
  leaseClock: 'database',
  async freshStore() {
    const schema = await postgres.freshSchema('faults');
    const { hostname, port } = new URL(postgres.connectionString);
    return {
      name: schema,
      address: { host: hostname, port: Number(port) },
      replicaStore(via) {
        const url = new URL(postgres.connectionString);
        if (via) {
          url.hostname = via.host;
          url.port = String(via.port);
        }
        return { backend: 'postgres', connectionString: url.toString(), schema };
      },
      backend: postgres.backend(schema),
      // The database's clock ends leases: moving the row's lease end into the past is what that
      // clock passing it looks like to every statement.
      async expireLease(slot) {
        await postgres.ageLease(schema, slot, 2 * LEASE_MS);
        return systemClock;
      },
      async untilSettled(replicaNames) {
        const sessions = await postgres.sql<{ pid: number }>(
          'SELECT pid FROM pg_stat_activity WHERE application_name = ANY($1::text[])',
          [replicaNames],
        );
        await postgres.untilGone(sessions.map((s) => s.pid));
      },
    };
  },
  storeFaults: {
    // Postgres has no throttling to inject: its bursts are the server ending sessions (SQLSTATE
    // 57P01, as on a failover or an operator's pg_terminate_backend) and lock contention.
    async during(replica, store, slot, total) {
      await replica.untilSent(total / 4);
      const first = await postgres.terminate(replica.name);
      await replica.untilSent(total / 2);
      const waited = await contend(store.name, slot, replica.name, 8);
      await replica.untilSent((total * 3) / 4);
      const second = await postgres.terminate(replica.name);
      return (
        `${first} and ${second} sessions ended by the server at 25% and 75%, ` +
        `${waited} sessions queued behind a FOR UPDATE of the slot row at 50%`
      );
    },
  },
  async burstRetryTimes(clients) {
    const schema = await postgres.freshSchema('burst');
    const slot: Slot = { jobId: 'weekly-report', window: '2026-11-30T06:00:00Z' };
    const burst = performance.now();
    return Promise.all(
      Array.from({ length: clients }, async (_, i) => {
        const attempts: number[] = [];
        const real = postgres.pool({ applicationName: `fault-matrix-burst-${i}`, max: 1 });
        // Every client's first three connections fail as a reset would; the instant of each
        // attempt is recorded where the executor asks its pool for a connection.
        const pool = new Proxy(real, {
          get(target, property, receiver) {
            if (property !== 'connect') return Reflect.get(target, property, receiver);
            return async () => {
              attempts.push(performance.now() - burst);
              if (attempts.length <= 3) {
                throw Object.assign(new Error('injected: connect ECONNRESET'), { code: 'ECONNRESET' });
              }
              return target.connect();
            };
          },
        }) as Pool;
        // Five tries rather than the default three, so the burst shows three retries, not two.
        await postgres.backend(schema, { pool, attempts: 5 }).claims.read(slot);
        return attempts;
      }),
    );
  },
  streamRecipients: 25_000,
});
