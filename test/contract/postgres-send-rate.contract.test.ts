import { PostgresRateLimitStore } from '../../shared/backends/postgres/index.js';
import { usePostgres } from '../helpers/postgres.js';
import { describeSendRateContract } from './send-rate-contract.js';

const postgres = usePostgres();

// The contract moves a virtual clock, so the timeline is kept on the caller's clock here; the
// database clock is covered in test/integration/postgres-send-rate.test.ts.
describeSendRateContract('Postgres, caller clock', async (jobId) => {
  const schema = await postgres.freshSchema();
  const pool = postgres.pool({ max: 8 });
  return { worker: () => new PostgresRateLimitStore({ pool, schema, jobId, clock: 'caller' }) };
});
