import { usePostgres } from '../helpers/postgres.js';
import { describeShardedWindow, SHARDED_WINDOW_LEASE_MS } from '../helpers/sharded-window.js';

/*
 * The sharded-window scenarios of sharded-window.test.ts on embedded Postgres: each shard a row of
 * shard_slots fenced by its own epoch, the window's ledger one table, the window finished once by
 * its last shard. On the caller's lease clock, the virtual clock the scenarios move (the database's
 * cannot be moved), with the server's limits a third of the scenarios' lease and the client-side
 * deadline its safety margin (a sixth), as a claim requires.
 */

const postgres = usePostgres();
const limitMs = SHARDED_WINDOW_LEASE_MS / 3;

describeShardedWindow('Postgres, caller clock', async () =>
  postgres.backend(await postgres.freshSchema('shards'), {
    leaseClock: 'caller',
    timeouts: {
      statementMs: limitMs,
      lockMs: limitMs,
      idleInTransactionMs: limitMs,
      deadlineMs: SHARDED_WINDOW_LEASE_MS / 6,
    },
  }),
);
