import { PostgresOperatorStore } from '../../shared/backends/postgres/index.js';
import { usePostgres } from '../helpers/postgres.js';
import { describeOperatorContract } from './operator-contract.js';

const postgres = usePostgres();

// The contract claims at 2026 instants and moves time by passing later `now` values (a lease that
// ended, a live one a second in), which the database clock cannot follow: the runtime stores and
// the operator store all run on the caller's clock, as in postgres.contract.test.ts. The database
// clock's operator refusals are covered in test/integration/postgres-backend.test.ts.
describeOperatorContract('Postgres operator store, caller clock', async () => {
  const schema = await postgres.freshSchema();
  const pool = postgres.pool({ applicationName: `slotguard-test-${schema}` });
  const { claims, ledger } = postgres.backend(schema, { pool, leaseClock: 'caller' });
  return { claims, ledger, operator: new PostgresOperatorStore({ pool, schema, leaseClock: 'caller' }) };
});
