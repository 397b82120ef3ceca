import { afterEach, describe, expect, it, vi } from 'vitest';
import { dynamoBackend } from '../../shared/backends/dynamodb/dynamodb-backend.js';
import { effectTags } from '../../shared/effects/effect-context.js';
import { ConfigurationError } from '../../shared/errors.js';
import {
  createSesEventRecorder,
  type ProviderWordLedger,
} from '../../shared/provider-events/ses-event-recorder.js';
import { SesEventType } from '../../shared/provider-events/ses-events.js';
import { SesEventsEnv } from '../../shared/provider-events/ses-events-env.js';
import {
  providerWordLedgerFromEnvironment,
  sesEventRecorderFromEnvironment,
} from '../../shared/provider-events/ses-events-environment.js';
import type { Claim } from '../../shared/slot/ports.js';
import { emfMetrics } from '../../shared/telemetry/metrics.js';
import { useDynamo } from '../helpers/dynalite.js';
import { injectFaults } from '../helpers/faults.js';
import { EmfRecorder, RecordingLog, testBackend } from '../helpers/harness.js';
import { type SesMessage, sesEvent } from '../helpers/ses-events.js';

const dynamo = useDynamo();
afterEach(() => vi.restoreAllMocks());

const WINDOW = '2026-11-30T06:00:00Z';
const SLOT = { jobId: 'weekly-report', window: WINDOW };
const RESERVED_AT = Date.parse(WINDOW) + 2_000;
const ADDRESS = 'alice.recipient@example.org';

/** A table where a run (epoch 1) reserved `alice` and, with `done`, marked her effect done. */
async function reservedEffect(options: { done?: boolean } = {}) {
  const tableName = await dynamo.freshTable('ses-events');
  const backend = testBackend(dynamo.client(), tableName);
  const claimed = await backend.claims.claim(
    SLOT,
    {
      owner: 'run-1',
      leaseMs: 60_000,
      maxAttempts: 3,
      expiresAtSeconds: Math.ceil(RESERVED_AT / 1000) + 35 * 86_400,
      deadline: RESERVED_AT + 6 * 3_600_000,
      delivery: {},
    },
    RESERVED_AT,
  );
  if (claimed.kind !== 'claimed') throw new Error(claimed.kind);
  const claim: Claim = claimed.claim;
  const keyHash = backend.hashKey(ADDRESS);
  await backend.ledger.reserve(claim, keyHash, { rerunInDoubt: false, now: RESERVED_AT });
  if (options.done) await backend.ledger.markDone(claim, [keyHash]);
  const env = {
    SLOTGUARD_TABLE_NAME: tableName,
    DYNAMODB_ENDPOINT: dynamo.endpoint,
    [SesEventsEnv.jobIds]: 'weekly-report,payment-reminder',
  };
  const message: SesMessage = {
    messageId: '010201900000001-local-ses-000000',
    timestamp: new Date(RESERVED_AT + 300).toISOString(),
    to: ADDRESS,
    tags: effectTags({ ...SLOT, keyHash, epoch: claim.epoch }),
  };
  return { backend, keyHash, env, message };
}

/** The recorder over `ledger`, for jobs weekly-report and payment-reminder, recording metrics and logs. */
function recorder(ledger: ProviderWordLedger | (() => Promise<ProviderWordLedger>)) {
  const emf = new EmfRecorder();
  const log = new RecordingLog();
  const handler = createSesEventRecorder({
    ledger,
    jobIds: new Set(['weekly-report', 'payment-reminder']),
    metrics: (jobId) => emfMetrics({ jobId, write: emf.write }),
    log: () => log,
  });
  return { handler, emf, log };
}

describe('the SES event recorder', () => {
  it("writes a Send onto the effect a run left in doubt, with SES's message id and time, once however often it comes", async () => {
    const { backend, keyHash, env, message } = await reservedEffect();
    const { handler, emf, log } = recorder(providerWordLedgerFromEnvironment(env));
    const event = sesEvent(SesEventType.Send, message);

    const first = await handler(event);
    const duplicate = await handler(structuredClone(event));

    expect(first).toEqual({ status: 'recorded', jobId: 'weekly-report', keyHash });
    expect(duplicate).toEqual(first);
    expect(await backend.ledger.read(SLOT, keyHash)).toMatchObject({
      state: 'RESERVED',
      epoch: 1,
      provider: {
        outcome: 'accepted',
        event: 'Send',
        messageId: message.messageId,
        at: Date.parse(message.timestamp),
        epoch: 1,
      },
    });
    expect(emf.sum('ProviderWordRecorded')).toBe(2);
    expect(emf.sum('ProviderWordIgnored')).toBe(0);
    expect(emf.records.map((r) => r.JobId)).toEqual(['weekly-report', 'weekly-report']);
    expect(log.lines.map((l) => [l.level, l.message, l.fields.effect])).toEqual([
      ['info', 'provider word recorded', keyHash],
      ['info', 'provider word recorded', keyHash],
    ]);
  });

  it('records a Reject as not accepted, and lets the Send of the same reservation win over it', async () => {
    const { backend, keyHash, env, message } = await reservedEffect();
    const { handler } = recorder(providerWordLedgerFromEnvironment(env));

    expect(await handler(sesEvent(SesEventType.Reject, message))).toMatchObject({ status: 'recorded' });
    expect((await backend.ledger.read(SLOT, keyHash))?.provider).toMatchObject({
      outcome: 'rejected',
      event: 'Reject',
    });
    expect(await handler(sesEvent(SesEventType.Send, message))).toMatchObject({ status: 'recorded' });
    // A Rendering Failure after it (out of order) does not turn the acceptance back.
    expect(await handler(sesEvent(SesEventType.RenderingFailure, message))).toMatchObject({
      status: 'recorded',
    });
    expect((await backend.ledger.read(SLOT, keyHash))?.provider).toMatchObject({
      outcome: 'accepted',
      event: 'Send',
    });
  });

  it('does not revive an effect the run marked done: the Send that follows writes nothing and is counted ignored', async () => {
    const { backend, keyHash, env, message } = await reservedEffect({ done: true });
    const { handler, emf, log } = recorder(providerWordLedgerFromEnvironment(env));

    const response = await handler(sesEvent(SesEventType.Send, message));

    expect(response).toEqual({ status: 'not-recorded', jobId: 'weekly-report', keyHash, ledger: 'done' });
    const record = await backend.ledger.read(SLOT, keyHash);
    expect(record).toMatchObject({ state: 'DONE', epoch: 1 });
    expect(record?.provider).toBeUndefined();
    expect([emf.sum('ProviderWordRecorded'), emf.sum('ProviderWordIgnored')]).toEqual([0, 1]);
    // The usual case (the run was quicker than SES's event) logs nothing.
    expect(log.lines).toEqual([]);
  });

  it("writes nothing for a word about another epoch's send than the reservation on record", async () => {
    const { backend, keyHash, env, message } = await reservedEffect();
    const { handler, emf, log } = recorder(providerWordLedgerFromEnvironment(env));
    const stale = { ...message, tags: effectTags({ ...SLOT, keyHash, epoch: 7 }) };

    const response = await handler(sesEvent(SesEventType.Send, stale));

    expect(response).toEqual({ status: 'not-recorded', jobId: 'weekly-report', keyHash, ledger: 'unknown' });
    expect((await backend.ledger.read(SLOT, keyHash))?.provider).toBeUndefined();
    expect(emf.sum('ProviderWordIgnored')).toBe(1);
    expect(log.lines.map((l) => [l.level, l.message, l.fields.epoch])).toEqual([
      ['warn', 'provider word for no open reservation', 7],
    ]);
  });

  it('records the word of a shard’s message on the window’s effect record', async () => {
    const { backend, keyHash, env, message } = await reservedEffect();
    const { handler } = recorder(providerWordLedgerFromEnvironment(env));
    const tags = [...message.tags, { Name: 'slotguard-shard', Value: '3' }];
    expect(await handler(sesEvent(SesEventType.Send, { ...message, tags }))).toMatchObject({
      status: 'recorded',
    });
    expect((await backend.ledger.read(SLOT, keyHash))?.provider?.outcome).toBe('accepted');
  });

  it('ignores and counts a subscription event, another job’s message and an untagged one, writing nothing', async () => {
    const { backend, keyHash, env, message } = await reservedEffect();
    const { handler, emf, log } = recorder(providerWordLedgerFromEnvironment(env));
    const otherJob = message.tags.map((t) => (t.Name === 'slotguard-job' ? { ...t, Value: 'invoices' } : t));

    const responses = [
      await handler(sesEvent(SesEventType.Subscription, message)),
      await handler(sesEvent(SesEventType.Send, { ...message, tags: otherJob })),
      await handler(
        sesEvent(SesEventType.Send, { ...message, tags: [{ Name: 'campaign', Value: 'spring' }] }),
      ),
    ];

    expect(responses).toEqual([
      { status: 'ignored', reason: 'event-type', jobId: 'weekly-report' },
      { status: 'ignored', reason: 'other-job', jobId: 'invoices' },
      { status: 'ignored', reason: 'untagged' },
    ]);
    expect((await backend.ledger.read(SLOT, keyHash))?.provider).toBeUndefined();
    // Counted under the job each names; an untagged message names none, and is only logged.
    expect(emf.records.map((r) => [r.JobId, r.ProviderWordIgnored])).toEqual([
      ['weekly-report', 1],
      ['invoices', 1],
    ]);
    expect(log.lines.map((l) => [l.level, l.fields.reason])).toEqual([
      ['warn', 'event-type'],
      ['warn', 'other-job'],
      ['warn', 'untagged'],
    ]);
    expect(log.text()).not.toContain('@');
  });

  it.each([
    ['an EventBridge event from another source', { source: 'aws.sns' }, 'source', /source is "aws\.sns"/],
    ['no mail object', { detail: { eventType: 'Send' } }, 'detail.mail', /detail\.mail is missing/],
    [
      'an event type SES does not have',
      { eventType: 'Sent' },
      'detail.eventType',
      /detail\.eventType is "Sent" \(detail-type "Email Sent"\); SES's event types are Send, Delivery/,
    ],
    [
      'a job tag that is not a job id',
      { tags: { 'slotguard-job': ['Weekly Report'] } },
      'detail.mail.tags.slotguard-job',
      /is "Weekly Report", not a job id/,
    ],
    [
      'an epoch tag that is not a number',
      { tags: { 'slotguard-epoch': ['one'] } },
      'detail.mail.tags',
      /do not name an effect: .* got slotguard-job="weekly-report", slotguard-window="20261130T060000Z", .*slotguard-epoch="one"/,
    ],
    [
      'no timestamp',
      { mail: { timestamp: undefined } },
      'detail.mail.timestamp',
      /detail\.mail\.timestamp is missing; SES gives when it accepted the request/,
    ],
  ] as const)(
    'drops %s, naming the field, logging no address, and answers instead of throwing (a retry cannot fix it)',
    async (_, change, field, message) => {
      const { backend, keyHash, env, message: sent } = await reservedEffect();
      const { handler, emf, log } = recorder(providerWordLedgerFromEnvironment(env));
      const event = sesEvent(SesEventType.Send, sent) as {
        source: string;
        detail: { eventType?: string; mail: Record<string, unknown> & { tags: Record<string, string[]> } };
      };
      if ('source' in change) event.source = change.source;
      if ('detail' in change) event.detail = change.detail as never;
      if ('eventType' in change) event.detail.eventType = change.eventType;
      if ('tags' in change) Object.assign(event.detail.mail.tags, change.tags);
      if ('mail' in change) Object.assign(event.detail.mail, change.mail);

      const response = await handler(event);

      expect(response).toMatchObject({ status: 'rejected', field });
      expect(response.status === 'rejected' && response.message).toMatch(message);
      expect((await backend.ledger.read(SLOT, keyHash))?.provider).toBeUndefined();
      expect(log.lines).toHaveLength(1);
      expect(log.lines[0]).toMatchObject({ level: 'error', fields: { field } });
      expect(log.text()).not.toContain('@');
      expect(JSON.stringify(response)).not.toContain('@');
      // Counted under its job once the event names one of the recorder's jobs, else only logged.
      const named =
        field !== 'source' && field !== 'detail.mail' && field !== 'detail.mail.tags.slotguard-job';
      expect(emf.sum('ProviderWordIgnored')).toBe(named ? 1 : 0);
    },
  );

  it('throws when the store fails, so Lambda retries the event and then dead-letters it; logs it by hash', async () => {
    const { keyHash, env, message } = await reservedEffect();
    const client = dynamo.client({ maxAttempts: 1 });
    const faults = injectFaults(client, { serverError: 1, seed: 7 });
    const failing = dynamoBackend({
      client,
      tableName: env.SLOTGUARD_TABLE_NAME,
      hashKey: () => 'unused',
    }).ledger;
    const { handler, emf, log } = recorder(failing);

    await expect(handler(sesEvent(SesEventType.Send, message))).rejects.toThrow(/internal server error/);

    expect(faults.serverErrors).toBe(1);
    expect(emf.records).toEqual([]);
    expect(log.lines).toHaveLength(1);
    expect(log.lines[0]).toMatchObject({
      level: 'error',
      message: 'provider word not recorded: the store failed; the event is retried',
      fields: { window: WINDOW, effect: keyHash, epoch: 1, event: 'Send' },
    });
    expect(log.text()).not.toContain('@');
  });
});

describe('the SES event recorder configured from its environment', () => {
  it('records with the table and jobs alone: no effect-key secret, EMF on stdout under the job', async () => {
    const { backend, keyHash, env, message } = await reservedEffect();
    const stdout = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    const handler = sesEventRecorderFromEnvironment(env);

    const response = await handler(sesEvent(SesEventType.Send, message));
    const lines = stdout.mock.calls.map(([chunk]) => String(chunk));
    stdout.mockRestore();

    expect(response).toEqual({ status: 'recorded', jobId: 'weekly-report', keyHash });
    expect((await backend.ledger.read(SLOT, keyHash))?.provider?.outcome).toBe('accepted');
    const emf = lines.filter((line) => line.includes('"CloudWatchMetrics"')).map((line) => JSON.parse(line));
    expect(emf).toHaveLength(1);
    expect(emf[0]).toMatchObject({ JobId: 'weekly-report', ProviderWordRecorded: 1 });
    expect(lines.join('')).not.toContain(ADDRESS);
  });

  it.each([
    [{}, 'SLOTGUARD_TABLE_NAME', /SLOTGUARD_TABLE_NAME is not set/],
    [{ SLOTGUARD_TABLE_NAME: 't' }, 'SLOTGUARD_RECORDED_JOBS', /SLOTGUARD_RECORDED_JOBS is not set/],
    [
      { SLOTGUARD_TABLE_NAME: 't', SLOTGUARD_RECORDED_JOBS: 'weekly-report,Invoices' },
      'SLOTGUARD_RECORDED_JOBS',
      /SLOTGUARD_RECORDED_JOBS is "weekly-report,Invoices", and "Invoices" is not a job id; list the recorded jobs/,
    ],
    [
      { SLOTGUARD_TABLE_NAME: 't', SLOTGUARD_RECORDED_JOBS: 'weekly-report', SLOTGUARD_BACKEND: 'postgres' },
      'SLOTGUARD_BACKEND',
      /SLOTGUARD_BACKEND is "postgres" but this bundle does not include the postgres backend/,
    ],
  ])('fails the cold start on %j, naming the variable', (env, setting, message) => {
    expect(() => sesEventRecorderFromEnvironment(env)).toThrow(ConfigurationError);
    expect(() => sesEventRecorderFromEnvironment(env)).toThrow(message);
    try {
      sesEventRecorderFromEnvironment(env);
    } catch (error) {
      expect(error).toMatchObject({ setting });
    }
  });
});
