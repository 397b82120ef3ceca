import { describe, expect, it } from 'vitest';
import { PostgresRateLimitStore } from '../../shared/backends/postgres/index.js';
import { ConfigurationError } from '../../shared/errors.js';
import { usePostgres } from '../helpers/postgres.js';
import { describeSendRateContract } from './send-rate-contract.js';

const postgres = usePostgres();

// The contract moves a virtual clock, so the timeline is kept on the caller's clock here; the
// database clock, which production uses, is checked below.
describeSendRateContract('Postgres, caller clock', async (jobId) => {
  const schema = await postgres.freshSchema();
  const pool = postgres.pool({ max: 8 });
  return { worker: () => new PostgresRateLimitStore({ pool, schema, jobId, clock: 'caller' }) };
});

describe('the send-rate timeline on the database clock', () => {
  it("starts a quiet timeline at the database's now, whatever the worker's clock says, and returns that now", async () => {
    const schema = await postgres.freshSchema();
    const store = new PostgresRateLimitStore({
      pool: postgres.pool({ max: 1 }),
      schema,
      jobId: 'db-clock-job',
    });
    // A worker whose clock is a day behind: the database's clock decides.
    const dayBehind = Date.now() - 86_400_000;
    const first = await store.reserve({ now: dayBehind, spanMs: 250, notBeforeMs: 10 });
    expect(first.storeNow).toBeDefined();
    expect(Math.abs(first.storeNow! - Date.now())).toBeLessThan(60_000);
    expect(first.start - first.storeNow!).toBeCloseTo(10, 3);
    // Busy: the next worker continues from the end of the first one's span.
    const second = await store.reserve({ now: dayBehind, spanMs: 250, notBeforeMs: 0 });
    expect(second.start - first.start).toBeCloseTo(250, 3);
  });

  it('names the missing grant when the functions’ user was granted its tables before send_rates existed', async () => {
    const schema = await postgres.freshSchema();
    const user = `rate_user_${process.pid}`;
    await postgres.sql(`DROP ROLE IF EXISTS ${user}`);
    await postgres.sql(`CREATE ROLE ${user} LOGIN PASSWORD 'rate-user-password'`);
    await postgres.sql(`GRANT USAGE ON SCHEMA ${schema} TO ${user}`);
    await postgres.sql(
      `GRANT SELECT, INSERT, UPDATE, DELETE ON ${schema}.slots, ${schema}.effects TO ${user}`,
    );
    const url = new URL(postgres.connectionString);
    url.username = user;
    url.password = 'rate-user-password';
    const pool = postgres.pool({ max: 1, connectionString: url.toString() });
    const store = new PostgresRateLimitStore({ pool, schema, jobId: 'grant-job' });
    const error = await store
      .reserve({ now: Date.now(), spanMs: 10, notBeforeMs: 0 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConfigurationError);
    expect((error as Error).message).toMatch(
      new RegExp(
        `no rights on ${schema}\\.send_rates \\(SQLSTATE 42501\\); grant them .*GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ${schema}`,
      ),
    );
  });
});
