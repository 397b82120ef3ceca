import { usePostgres } from '../helpers/postgres.js';
import { describeBackendContract } from './backend-contract.js';

const postgres = usePostgres();

const timeouts = { statementMs: 5_000, lockMs: 2_000, idleInTransactionMs: 5_000 };

// The contract moves time by passing later `now` values, so it runs on the caller's clock: the
// database clock cannot be moved (see test/integration/postgres-backend.test.ts for that clock).
describeBackendContract('Postgres, caller clock, timeouts per transaction', async () =>
  postgres.backend(await postgres.freshSchema(), { leaseClock: 'caller' }),
);

describeBackendContract('Postgres, caller clock, timeouts per connection', async () => {
  const schema = await postgres.freshSchema();
  const pool = postgres.pool({ applicationName: `slotguard-test-${schema}`, timeouts });
  return postgres.backend(schema, {
    pool,
    leaseClock: 'caller',
    timeouts: { ...timeouts, scope: 'connection' },
  });
});
