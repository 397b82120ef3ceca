import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import {
  SendMessageBatchCommand,
  type SendMessageBatchCommandInput,
  SendMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import { ConfigurationError } from '../../shared/errors.js';
import { type Env, jobHandlerFromEnvironment } from '../../shared/job/lambda-environment.js';
import { CountingSender } from '../helpers/counting-sender.js';
import { useDynamo } from '../helpers/dynalite.js';
import { testBackend } from '../helpers/harness.js';

const dynamo = useDynamo();
const secrets = mockClient(SecretsManagerClient);
const sqs = mockClient(SQSClient);
afterEach(() => {
  secrets.reset();
  sqs.reset();
  vi.restoreAllMocks();
});

const job = (sender: CountingSender) => weeklyReportJob({ customers: () => syntheticCustomers(25), sender });
const window = () => new Date(Math.floor(Date.now() / 60_000) * 60_000).toISOString().replace('.000', '');

describe('a handler configured from the environment the construct sets', () => {
  it('runs the job with the secret read once from Secrets Manager and EMF on stdout', async () => {
    secrets.on(GetSecretValueCommand).resolves({ SecretString: 'a-generated-secret-of-32-characters' });
    const stdout = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    const sender = new CountingSender();
    const handler = jobHandlerFromEnvironment(job(sender), {
      SLOTGUARD_JOB_ID: 'weekly-report',
      SLOTGUARD_TABLE_NAME: await dynamo.freshTable(),
      SLOTGUARD_EFFECT_KEY_SECRET_ARN: 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:effect-key',
      SLOTGUARD_LEASE_SECONDS: '90',
      DYNAMODB_ENDPOINT: dynamo.endpoint,
    });
    // One window for both fires: read twice, the minute could turn between them.
    const scheduledTime = window();
    const first = await handler({ jobId: 'weekly-report', scheduledTime, attemptNumber: '1' });
    const second = await handler({ jobId: 'weekly-report', scheduledTime, attemptNumber: '2' });
    const emf = stdout.mock.calls
      .map(([chunk]) => String(chunk))
      .filter((line) => line.includes('"CloudWatchMetrics"'))
      .map((line) => JSON.parse(line) as Record<string, number>);
    stdout.mockRestore();

    expect(first).toMatchObject({ status: 'completed', summary: { done: 25 } });
    expect(second).toMatchObject({ status: 'duplicate', outcome: { kind: 'done' } });
    expect(sender.total).toBe(25);
    expect(secrets.commandCalls(GetSecretValueCommand)).toHaveLength(1);
    // First run: ClaimAcquired flushed at the claim, the effects at the end; second: the duplicate.
    expect(emf.map((r) => Object.keys(r).filter((k) => k !== 'JobId' && k !== '_aws'))).toEqual([
      ['ClaimAcquired'],
      ['EffectDone'],
      ['DuplicateClaim'],
    ]);
    expect(emf[1]?.EffectDone).toBe(25);
  });

  it.each([
    [{}, /SLOTGUARD_JOB_ID is not set/],
    [
      { SLOTGUARD_JOB_ID: 'payment-reminder' },
      /"payment-reminder" but this handler runs job 'weekly-report'/,
    ],
    [{ SLOTGUARD_JOB_ID: 'weekly-report' }, /SLOTGUARD_TABLE_NAME is not set/],
    [
      { SLOTGUARD_JOB_ID: 'weekly-report', SLOTGUARD_TABLE_NAME: 't', SLOTGUARD_LEASE_SECONDS: 'ten' },
      /SLOTGUARD_LEASE_SECONDS is "ten"; set a whole number of seconds, at least 1 \(default 60\)/,
    ],
  ])('refuses a bad environment at cold start: %j', (env, message) => {
    expect(() => jobHandlerFromEnvironment(job(new CountingSender()), env)).toThrow(ConfigurationError);
    expect(() => jobHandlerFromEnvironment(job(new CountingSender()), env)).toThrow(message);
  });
});

const SECRET_ARN = 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:effect-key';
const QUEUE_URL = 'https://sqs.eu-west-1.amazonaws.com/123456789012/weekly-report-work';

/** A deployable environment on a fresh table, with `overrides`. */
async function environment(overrides: Env = {}): Promise<Env & { SLOTGUARD_TABLE_NAME: string }> {
  return {
    SLOTGUARD_JOB_ID: 'weekly-report',
    SLOTGUARD_TABLE_NAME: await dynamo.freshTable(),
    SLOTGUARD_EFFECT_KEY_SECRET: 'an-inline-secret-for-tests-0123456789',
    DYNAMODB_ENDPOINT: dynamo.endpoint,
    ...overrides,
  };
}

/** Lambda's life of one function: its module is loaded (cold start), then it is invoked. */
async function coldStartAndFire(env: Env, event: unknown, sender = new CountingSender()) {
  let handler: ReturnType<typeof jobHandlerFromEnvironment>;
  try {
    handler = jobHandlerFromEnvironment(job(sender), env);
  } catch (initError) {
    return { initError, sender };
  }
  const result = await handler(event).catch((error: unknown) => ({ threw: error }));
  return { result, sender };
}

describe('a configuration that cannot work', () => {
  it.each([
    ['SLOTGUARD_EFFECT_CONCURRENCY', '2.5', 'a whole number of effects, at least 1 (default 16)'],
    ['SLOTGUARD_EFFECT_CONCURRENCY', '0', 'a whole number of effects, at least 1 (default 16)'],
    ['SLOTGUARD_LEASE_SECONDS', '0.5', 'a whole number of seconds, at least 1 (default 60)'],
    ['SLOTGUARD_MAX_ATTEMPTS', '2.5', 'a whole number of attempts, at least 1 (default 3)'],
    ['SLOTGUARD_RETENTION_DAYS', '1', 'a whole number of days, at least 2 (default 35)'],
    ['SLOTGUARD_DEADLINE_SECONDS', '30', 'a whole number of seconds, at least 60 (or leave it unset)'],
    ['SLOTGUARD_DEADLINE_SECONDS', '6h', 'a whole number of seconds, at least 60 (or leave it unset)'],
    ['SLOTGUARD_WORK_QUEUE_URL', 'weekly-report-work', "set the queue's URL"],
    ['SLOTGUARD_SHARDS', '0', 'a whole number of shards, from 1 to 1000 (default 1)'],
    ['SLOTGUARD_SHARDS', '2.5', 'a whole number of shards, from 1 to 1000 (default 1)'],
    ['SLOTGUARD_SHARDS', '1001', 'a whole number of shards, from 1 to 1000 (default 1)'],
    [
      'SLOTGUARD_RESERVE_AHEAD',
      'yes',
      "set 'true' (reserve each worker's next effect during its send) or 'false'",
    ],
    [
      'SLOTGUARD_TAKEOVER_SKEW_SECONDS',
      'two',
      'from 0 to less than the lease (SLOTGUARD_LEASE_SECONDS, 60), or leave it unset for 2',
    ],
    [
      'SLOTGUARD_TAKEOVER_SKEW_SECONDS',
      '-1',
      'from 0 to less than the lease (SLOTGUARD_LEASE_SECONDS, 60), or leave it unset for 2',
    ],
    [
      'SLOTGUARD_TAKEOVER_SKEW_SECONDS',
      '60',
      'from 0 to less than the lease (SLOTGUARD_LEASE_SECONDS, 60), or leave it unset for 2',
    ],
    ['SLOTGUARD_TAKEOVER_SKEW_SECONDS', '0.0005', 'a number of seconds (to the millisecond)'],
  ])(
    '%s=%s fails the cold start, naming the variable, and never claims a window',
    async (name, value, fix) => {
      const env = await environment({ [name]: value });
      const event = { jobId: 'weekly-report', scheduledTime: window(), attemptNumber: '1' };
      const fired = await coldStartAndFire(env, event);

      expect(fired.initError).toBeInstanceOf(ConfigurationError);
      expect(fired.initError).toMatchObject({ setting: name });
      expect((fired.initError as Error).message).toContain(`${name} is ${JSON.stringify(value)}`);
      expect((fired.initError as Error).message).toContain(fix);
      const claims = testBackend(dynamo.client(), env.SLOTGUARD_TABLE_NAME).claims;
      expect(await claims.read({ jobId: 'weekly-report', window: event.scheduledTime })).toBeUndefined();
      expect(fired.sender.total).toBe(0);
    },
  );

  it('fails the cold start when no effect-key secret is configured, instead of every invocation', async () => {
    const env = await environment({ SLOTGUARD_EFFECT_KEY_SECRET: undefined });
    const fired = await coldStartAndFire(env, { jobId: 'weekly-report', scheduledTime: window() });
    expect(fired.initError).toMatchObject({ setting: 'SLOTGUARD_EFFECT_KEY_SECRET_ARN' });
    expect((fired.initError as Error).message).toMatch(
      /neither SLOTGUARD_EFFECT_KEY_SECRET_ARN nor SLOTGUARD_EFFECT_KEY_SECRET is set/,
    );
  });
});

describe('the takeover skew allowance a job sets (SLOTGUARD_TAKEOVER_SKEW_SECONDS)', () => {
  /** A window whose holder crashed: its 60 s lease ended 5 s ago by this machine's clock. */
  async function crashedWindow(env: Env & { SLOTGUARD_TABLE_NAME: string }) {
    const scheduledTime = window();
    const slot = { jobId: 'weekly-report', window: scheduledTime };
    const claimedAt = Date.now() - 65_000;
    const claims = testBackend(dynamo.client(), env.SLOTGUARD_TABLE_NAME).claims;
    const crashed = await claims.claim(
      slot,
      {
        owner: 'crashed',
        leaseMs: 60_000,
        maxAttempts: 3,
        expiresAtSeconds: Math.ceil(claimedAt / 1000) + 35 * 86_400,
        deadline: claimedAt + 6 * 3_600_000,
        delivery: {},
      },
      claimedAt,
    );
    expect(crashed).toMatchObject({ kind: 'claimed' });
    return { event: { jobId: 'weekly-report', scheduledTime, attemptNumber: '1' }, claims, slot };
  }

  it('waits out the allowance it is given before taking over a crashed run, where the 2 s default would not', async () => {
    const patient = await environment({ SLOTGUARD_TAKEOVER_SKEW_SECONDS: '10' });
    const held = await crashedWindow(patient);
    const waited = await coldStartAndFire(patient, held.event);
    expect(waited.result).toMatchObject({
      status: 'duplicate',
      outcome: { kind: 'held', holder: 'crashed' },
    });
    expect(waited.sender.total).toBe(0);
    expect(await held.claims.read(held.slot)).toMatchObject({ state: 'RUNNING', owner: 'crashed', epoch: 1 });

    // The same crash with the variable unset: 5 s past the lease is past the default allowance.
    const byDefault = await environment();
    const taken = await crashedWindow(byDefault);
    const tookOver = await coldStartAndFire(byDefault, taken.event);
    expect(tookOver.result).toMatchObject({ status: 'completed', epoch: 2, summary: { done: 25 } });
    expect(tookOver.sender.total).toBe(25);
  });
});

describe('a cold start whose secret read fails once', () => {
  it('reads the secret again on the next invocation, which runs the window', async () => {
    secrets
      .on(GetSecretValueCommand)
      .rejectsOnce(Object.assign(new Error('connect ETIMEDOUT secretsmanager'), { name: 'TimeoutError' }))
      .resolves({ SecretString: 'a-generated-secret-of-32-characters' });
    vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    const sender = new CountingSender();
    const env = await environment({
      SLOTGUARD_EFFECT_KEY_SECRET: undefined,
      SLOTGUARD_EFFECT_KEY_SECRET_ARN: SECRET_ARN,
    });
    const handler = jobHandlerFromEnvironment(job(sender), env);
    const event = { jobId: 'weekly-report', scheduledTime: window(), attemptNumber: '1' };

    await expect(handler(event)).rejects.toThrow(/ETIMEDOUT/);
    const second = await handler(event);

    expect(second).toMatchObject({ status: 'completed', summary: { done: 25 } });
    expect(secrets.commandCalls(GetSecretValueCommand)).toHaveLength(2);
    expect(sender.total).toBe(25);
  });
});

describe('an effect-key secret rotated in Secrets Manager', () => {
  it('pins each window to the version current at its first claim and reads older versions by id', async () => {
    const OLD = 'b7b8c7f0-0000-4000-8000-000000000001';
    const NEW = 'b7b8c7f0-0000-4000-8000-000000000002';
    secrets
      .on(GetSecretValueCommand, { SecretId: SECRET_ARN })
      .resolvesOnce({ SecretString: 'the-old-secret-0123456789abcdef', VersionId: OLD })
      .resolves({ SecretString: 'the-new-secret-0123456789abcdef', VersionId: NEW });
    secrets
      .on(GetSecretValueCommand, { SecretId: SECRET_ARN, VersionId: OLD })
      .resolves({ SecretString: 'the-old-secret-0123456789abcdef', VersionId: OLD });
    vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    const env = await environment({
      SLOTGUARD_EFFECT_KEY_SECRET: undefined,
      SLOTGUARD_EFFECT_KEY_SECRET_ARN: SECRET_ARN,
    });
    const sender = new CountingSender();
    const slot = { jobId: 'weekly-report', window: window() };
    const event = { jobId: 'weekly-report', scheduledTime: slot.window, attemptNumber: '1' };
    // A container started before the rotation runs part of the window under the old version…
    const before = jobHandlerFromEnvironment(job(sender), env);
    const first = await before(event, {
      awsRequestId: 'before-rotation',
      getRemainingTimeInMillis: () => (sender.total >= 10 ? 0 : 900_000),
    });
    expect(first).toMatchObject({ status: 'yielded' });
    // …and a container started after it finishes the window with the version the window pinned.
    const after = jobHandlerFromEnvironment(job(sender), env);
    const second = await after({ ...event, continuation: true });
    expect(second).toMatchObject({ status: 'completed', window: { done: 25 } });
    expect(sender.total).toBe(25);
    expect(sender.duplicates()).toBe(0);
    expect(
      secrets.commandCalls(GetSecretValueCommand, { SecretId: SECRET_ARN, VersionId: OLD }),
    ).toHaveLength(1);
  });
});

describe('a handler with a work queue and a deadline from the environment', () => {
  it('touches no queue for a window it finishes, and stores the deadline it was given', async () => {
    vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    const env = await environment({ SLOTGUARD_WORK_QUEUE_URL: QUEUE_URL, SLOTGUARD_DEADLINE_SECONDS: '900' });
    const event = { jobId: 'weekly-report', scheduledTime: window(), attemptNumber: '1' };
    const fired = await coldStartAndFire(env, event);

    expect(fired.result).toMatchObject({ status: 'completed' });
    expect(sqs.calls()).toHaveLength(0);
    const record = await testBackend(dynamo.client(), env.SLOTGUARD_TABLE_NAME).claims.read({
      jobId: 'weekly-report',
      window: event.scheduledTime,
    });
    // The deadline runs from the scheduled time, or from the first claim when that came later.
    const windowMs = Date.parse(event.scheduledTime);
    expect(record?.deadline).toBeGreaterThanOrEqual(windowMs + 900_000);
    expect(record?.deadline).toBeLessThanOrEqual(Date.now() + 900_000);
  });

  it('sends the continuation of a run that stopped for time to SLOTGUARD_WORK_QUEUE_URL', async () => {
    vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    sqs.on(SendMessageCommand).resolves({ MessageId: 'continuation-1' });
    const env = await environment({ SLOTGUARD_WORK_QUEUE_URL: QUEUE_URL });
    const sender = new CountingSender();
    const handler = jobHandlerFromEnvironment(job(sender), env);
    const event = { jobId: 'weekly-report', scheduledTime: window(), attemptNumber: '1' };
    // No time left: the run reserves nothing and yields.
    const result = await handler(event, { awsRequestId: 'req-1', getRemainingTimeInMillis: () => 0 });

    expect(result).toMatchObject({ status: 'yielded', reason: 'time' });
    expect(sender.total).toBe(0);
    expect(sqs.commandCalls(SendMessageCommand).map((c) => c.args[0].input)).toEqual([
      { QueueUrl: QUEUE_URL, MessageBody: JSON.stringify({ ...event, continuation: true }), DelaySeconds: 1 },
    ]);
  });

  it("sends a 100-shard window's shard messages as 10 SendMessageBatch requests, not 100 SendMessage", async () => {
    vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    sqs.on(SendMessageBatchCommand).callsFake(async (input: SendMessageBatchCommandInput) => ({
      Successful: (input.Entries ?? []).map((e) => ({
        Id: e.Id,
        MessageId: `m-${e.Id}`,
        MD5OfMessageBody: '',
      })),
      Failed: [],
    }));
    const env = await environment({ SLOTGUARD_WORK_QUEUE_URL: QUEUE_URL, SLOTGUARD_SHARDS: '100' });
    const event = { jobId: 'weekly-report', scheduledTime: window(), attemptNumber: '1' };
    const fired = await coldStartAndFire(env, event);

    expect(fired.result).toMatchObject({ status: 'sharded', shards: 100 });
    const requests = sqs.commandCalls(SendMessageBatchCommand).map((c) => c.args[0].input);
    expect(requests).toHaveLength(10);
    expect(requests.map((r) => r.Entries?.length)).toEqual(Array(10).fill(10));
    expect(sqs.commandCalls(SendMessageCommand)).toHaveLength(0);
    // Every shard once, each message the window's event naming its shard.
    const shards = requests
      .flatMap((r) => r.Entries ?? [])
      .map((e) => (JSON.parse(String(e.MessageBody)) as { shard: number }).shard);
    expect(shards.sort((a, b) => a - b)).toEqual(Array.from({ length: 100 }, (_, i) => i));
    expect(fired.sender.total).toBe(0);
  });
});
