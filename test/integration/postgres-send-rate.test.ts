import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PostgresRateLimitStore } from '../../shared/backends/postgres/index.js';
import { SharedRateLimiter } from '../../shared/effects/shared-rate-limiter.js';
import { sendRateLimiterFromEnvironment } from '../../shared/job/environment-send-rate.js';
// What PostgresClaims injects into a Postgres-backed function's bundle: importing it registers the
// backend, and its send-rate store, for SLOTGUARD_BACKEND=postgres.
import '../../shared/job/lambda-environment-postgres.js';
import { BACKEND_ENV, PostgresRuntimeEnv, RuntimeEnv } from '../../shared/job/runtime-env.js';
import { usePostgres } from '../helpers/postgres.js';

const postgres = usePostgres();
// Secrets Manager is a control plane: its answer is set here, the database is real.
const secrets = mockClient(SecretsManagerClient);
const USER_SECRET_ARN = 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:slotguard-user';

beforeEach(() => {
  const url = new URL(postgres.connectionString);
  secrets.on(GetSecretValueCommand, { SecretId: USER_SECRET_ARN }).resolves({
    SecretString: JSON.stringify({
      // An RDS secret names the cluster; the function connects where SLOTGUARD_PG_HOST says.
      host: 'cluster.invalid',
      username: decodeURIComponent(url.username),
      password: decodeURIComponent(url.password),
    }),
  });
});
afterEach(() => secrets.reset());

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

  it("builds a Postgres-backed function's shared limiter from its environment, reserving on the job's row of its schema", async () => {
    const schema = await postgres.freshSchema();
    const url = new URL(postgres.connectionString);
    const env = {
      [RuntimeEnv.jobId]: 'weekly-report',
      [BACKEND_ENV]: 'postgres',
      [PostgresRuntimeEnv.host]: url.hostname,
      [PostgresRuntimeEnv.port]: url.port || '5432',
      [PostgresRuntimeEnv.database]: url.pathname.slice(1) || 'postgres',
      [PostgresRuntimeEnv.schema]: schema,
      [PostgresRuntimeEnv.secretArn]: USER_SECRET_ARN,
      [PostgresRuntimeEnv.ssl]: 'false',
    };
    const limiters = [1, 2].map(() => sendRateLimiterFromEnvironment(env, { ratePerSecond: 1_000 }));
    expect(limiters.every((l) => l instanceof SharedRateLimiter)).toBe(true);
    // Building them connected to nothing: the pool opens on the first send.
    expect(await postgres.sql(`SELECT job_id FROM "${schema}".send_rates`)).toEqual([]);

    await Promise.all(limiters.map((l) => l.take()));
    expect(await postgres.sql(`SELECT job_id FROM "${schema}".send_rates`)).toEqual([
      { job_id: 'weekly-report' },
    ]);
    expect(limiters.map((l) => (l as SharedRateLimiter).stats.used)).toEqual([1, 1]);
  });
});
