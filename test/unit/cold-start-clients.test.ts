import { SESv2Client, SendEmailCommand } from '@aws-sdk/client-sesv2';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { useDynamo } from '../helpers/dynalite.js';

/** AWS SDK clients constructed since the test began, by class name. */
const constructed = vi.hoisted(() => {
  const counts = new Map<string, number>();
  /** `Client`, counting under `name` every instance constructed. */
  const counting = <T extends object>(name: string, Client: T): T =>
    new Proxy(Client, {
      construct(target, args, newTarget) {
        counts.set(name, (counts.get(name) ?? 0) + 1);
        return Reflect.construct(target as new (...args: unknown[]) => object, args, newTarget);
      },
    });
  return { counts, counting };
});

vi.mock('@aws-sdk/client-sesv2', async (importOriginal) => {
  const sdk = await importOriginal<typeof import('@aws-sdk/client-sesv2')>();
  return { ...sdk, SESv2Client: constructed.counting('SESv2Client', sdk.SESv2Client) };
});
vi.mock('@aws-sdk/client-dynamodb', async (importOriginal) => {
  const sdk = await importOriginal<typeof import('@aws-sdk/client-dynamodb')>();
  return { ...sdk, DynamoDBClient: constructed.counting('DynamoDBClient', sdk.DynamoDBClient) };
});
vi.mock('@aws-sdk/client-secrets-manager', async (importOriginal) => {
  const sdk = await importOriginal<typeof import('@aws-sdk/client-secrets-manager')>();
  return {
    ...sdk,
    SecretsManagerClient: constructed.counting('SecretsManagerClient', sdk.SecretsManagerClient),
  };
});

const dynamo = useDynamo();

afterEach(() => {
  vi.unstubAllEnvs();
  constructed.counts.clear();
});

describe('what a cold start creates', () => {
  it('creates no AWS SDK client while the handler module loads, so init pays only for imports', async () => {
    vi.stubEnv('SLOTGUARD_JOB_ID', 'weekly-report');
    vi.stubEnv('SLOTGUARD_TABLE_NAME', 'claims');
    vi.stubEnv('SLOTGUARD_EFFECT_KEY_SECRET_ARN', 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:k');
    vi.stubEnv('SLOTGUARD_SES_FROM', 'reports@example.com');

    const module = await import('../../functions/weekly-report/handler.js');

    expect(typeof module.handler).toBe('function');
    expect(Object.fromEntries(constructed.counts)).toEqual({});
  });

  it('creates the SES client on the first send and reuses it for the next', async () => {
    const ses = mockClient(SESv2Client);
    ses.on(SendEmailCommand).resolves({ MessageId: 'm-1' });
    const { SesEmailSender } = await import('../../shared/effects/ses-email-sender.js');
    const sender = SesEmailSender.fromEnvironment({ SLOTGUARD_SES_FROM: 'reports@example.com' });
    const message = { to: 'customer@example.org', subject: 'Your weekly report', text: 'Hello' };

    expect(constructed.counts.get('SESv2Client') ?? 0).toBe(0);
    await sender.send(message);
    await sender.send(message);

    expect(constructed.counts.get('SESv2Client')).toBe(1);
    expect(ses.commandCalls(SendEmailCommand)).toHaveLength(2);
    ses.restore();
  });

  it("shares one DynamoDB client between the job's claims backend and its shared send rate", async () => {
    const table = await dynamo.freshTable();
    const env = {
      SLOTGUARD_JOB_ID: 'weekly-report',
      SLOTGUARD_TABLE_NAME: table,
      DYNAMODB_ENDPOINT: dynamo.endpoint,
    };
    const { dynamoBackendFromEnvironment } = await import('../../shared/job/lambda-environment.js');
    const { sendRateLimiterFromEnvironment } = await import('../../shared/job/environment-send-rate.js');
    const { hmacEffectKeys } = await import('../../shared/effects/effect-key.js');
    constructed.counts.clear();

    const connect = dynamoBackendFromEnvironment(
      env,
      { jobId: 'weekly-report', effectConcurrency: 4, hashKey: async () => hmacEffectKeys('k'.repeat(32)) },
      35,
    );
    const limiter = sendRateLimiterFromEnvironment(env, { ratePerSecond: 1_000 });
    const backend = await connect();
    await backend.claims.read({ jobId: 'weekly-report', window: '2026-12-01T09:00:00Z' });
    await limiter.take();
    await limiter.take();

    expect(constructed.counts.get('DynamoDBClient')).toBe(1);
  });
});
