import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { SesEmailSender } from '../../shared/effects/ses-email-sender.js';
import { SharedRateLimiter } from '../../shared/effects/shared-rate-limiter.js';
import { TokenBucket } from '../../shared/effects/token-bucket.js';
import { ConfigurationError, EffectNotPerformedError, NotPerformedReason } from '../../shared/errors.js';
import type { Env } from '../../shared/job/environment-backend.js';
import { sendRateLimiterFromEnvironment } from '../../shared/job/environment-send-rate.js';
import { BACKEND_ENV, RuntimeEnv } from '../../shared/job/runtime-env.js';
import { useDynamo } from '../helpers/dynalite.js';
import { type SesEndpoint, startSesEndpoint } from '../helpers/ses-endpoint.js';
import { VirtualClock } from '../helpers/virtual-clock.js';

const dynamo = useDynamo();
let ses: SesEndpoint;
beforeAll(async () => {
  ses = await startSesEndpoint();
  // Every send reaches SES and is refused there: what matters here is when it arrived.
  ses.answerWith({ status: 400, errorType: 'MessageRejected', message: 'Email address is not verified.' });
});
afterAll(() => ses.close());

const T0 = Date.parse('2026-11-30T06:00:00Z');
const message = { to: 'customer@example.org', subject: 'Your weekly report', text: 'Hello' };

/** What ScheduledJob sets on a DynamoDB-backed job's function with an `ses` prop, on dynalite. */
async function jobEnvironment(overrides: Env = {}): Promise<Env> {
  return {
    [RuntimeEnv.jobId]: 'weekly-report',
    [RuntimeEnv.tableName]: await dynamo.freshTable('send-rate-env'),
    [RuntimeEnv.dynamodbEndpoint]: dynamo.endpoint,
    [RuntimeEnv.sesFromAddress]: 'reports@example.com',
    [RuntimeEnv.sendRatePerSecond]: '1',
    ...overrides,
  };
}

/** A send that reached SES and was refused there (the endpoint's answer), as opposed to one still waiting. */
const refusedBySes = (error: unknown) =>
  error instanceof EffectNotPerformedError && error.reason === NotPerformedReason.Rejected;

describe('the send rate of a deployed function', () => {
  it('shares one rate between two Lambdas of the job: the second send waits for the first one’s slot', async () => {
    const env = await jobEnvironment();
    const clock = new VirtualClock(T0);
    // Two functions of one job (a run and a backfill), each with its own sender from the same variables.
    const [first, second] = [1, 2].map(() =>
      SesEmailSender.fromEnvironment(env, { client: ses.client(), clock }),
    );
    const before = ses.requests;

    const one = first!.send(message).catch((error: unknown) => error);
    await vi.waitFor(() => expect(ses.requests).toBe(before + 1));
    const two = second!.send(message).catch((error: unknown) => error);
    // The second reservation lands one second (1/rate) after the first on the job's timeline.
    await vi.waitFor(() => expect(clock.nextTimerAt).toBe(T0 + 1_000));
    expect(ses.requests).toBe(before + 1);

    await clock.advance(1_000);
    await vi.waitFor(() => expect(ses.requests).toBe(before + 2));
    expect(refusedBySes(await one)).toBe(true);
    expect(refusedBySes(await two)).toBe(true);
  });

  it('lets each Lambda send at the full rate with SLOTGUARD_SEND_RATE_SCOPE=process', async () => {
    const env = await jobEnvironment({ [RuntimeEnv.sendRateScope]: 'process' });
    const clock = new VirtualClock(T0);
    const senders = [1, 2].map(() => SesEmailSender.fromEnvironment(env, { client: ses.client(), clock }));
    const before = ses.requests;
    const outcomes = await Promise.all(senders.map((s) => s.send(message).catch((error: unknown) => error)));
    expect(outcomes.every(refusedBySes)).toBe(true);
    expect(ses.requests).toBe(before + 2);
    expect(clock.now()).toBe(T0);
  });

  it('picks the shared limiter in a job’s function and a process bucket outside any job', async () => {
    const env = await jobEnvironment();
    expect(sendRateLimiterFromEnvironment(env, { ratePerSecond: 14 })).toBeInstanceOf(SharedRateLimiter);
    const { [RuntimeEnv.jobId]: _job, ...noJob } = env;
    expect(sendRateLimiterFromEnvironment(noJob, { ratePerSecond: 14 })).toBeInstanceOf(TokenBucket);
  });

  it('refuses an unknown scope at cold start, naming the variable, the value and the choices', async () => {
    const env = await jobEnvironment({ [RuntimeEnv.sendRateScope]: 'account' });
    expect(() => SesEmailSender.fromEnvironment(env)).toThrow(ConfigurationError);
    expect(() => SesEmailSender.fromEnvironment(env)).toThrow(
      /SLOTGUARD_SEND_RATE_SCOPE is "account"; set "job" .* or "process"/,
    );
  });

  it('names the missing table and the way out when the job-wide rate has nowhere to live', () => {
    const env = { [RuntimeEnv.jobId]: 'weekly-report', [RuntimeEnv.sesFromAddress]: 'reports@example.com' };
    expect(() => SesEmailSender.fromEnvironment(env)).toThrow(
      /SLOTGUARD_TABLE_NAME is not set, and the job-wide send rate .* or set SLOTGUARD_SEND_RATE_SCOPE=process/,
    );
  });

  it('names the bundle to include when the Postgres backend is not registered in this process', async () => {
    const env = { ...(await jobEnvironment()), [BACKEND_ENV]: 'postgres' };
    expect(() => SesEmailSender.fromEnvironment(env)).toThrow(
      /SLOTGUARD_BACKEND is "postgres" but this bundle does not include the postgres backend; deploy the job with PostgresClaims/,
    );
  });
});
