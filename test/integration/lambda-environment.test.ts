import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import { ConfigurationError } from '../../shared/errors.js';
import { jobHandlerFromEnvironment } from '../../shared/job/lambda-environment.js';
import { CountingSender } from '../helpers/counting-sender.js';
import { useDynamo } from '../helpers/dynalite.js';

const dynamo = useDynamo();
const secrets = mockClient(SecretsManagerClient);
afterEach(() => {
  secrets.reset();
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
    const first = await handler({ jobId: 'weekly-report', scheduledTime: window(), attemptNumber: '1' });
    const second = await handler({ jobId: 'weekly-report', scheduledTime: window(), attemptNumber: '2' });
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
      /SLOTGUARD_LEASE_SECONDS is "ten"; set a positive number \(default 60\)/,
    ],
  ])('refuses a bad environment at cold start: %j', (env, message) => {
    expect(() => jobHandlerFromEnvironment(job(new CountingSender()), env)).toThrow(ConfigurationError);
    expect(() => jobHandlerFromEnvironment(job(new CountingSender()), env)).toThrow(message);
  });
});
