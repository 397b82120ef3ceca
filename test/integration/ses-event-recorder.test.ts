import { afterEach, describe, expect, it, vi } from 'vitest';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import { dynamoBackend } from '../../shared/backends/dynamodb/dynamodb-backend.js';
import { effectTags } from '../../shared/effects/effect-context.js';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import { SesEmailSender } from '../../shared/effects/ses-email-sender.js';
import { TokenBucket } from '../../shared/effects/token-bucket.js';
import { ConfigurationError } from '../../shared/errors.js';
import { AfterGrace } from '../../shared/job/in-doubt-resolution.js';
import { jobHandlerFromEnvironment } from '../../shared/job/lambda-environment.js';
import type { HandlerResponse } from '../../shared/job/lambda-handler.js';
import { RuntimeEnv } from '../../shared/job/runtime-env.js';
import {
  createSesEventRecorder,
  type ProviderWordLedger,
  type SesEventResponse,
} from '../../shared/provider-events/ses-event-recorder.js';
import { SesEventType, sesEventPattern } from '../../shared/provider-events/ses-events.js';
import { SesEventsEnv } from '../../shared/provider-events/ses-events-env.js';
import {
  providerWordLedgerFromEnvironment,
  sesEventRecorderFromEnvironment,
} from '../../shared/provider-events/ses-events-environment.js';
import type { Claim } from '../../shared/slot/ports.js';
import { emfMetrics } from '../../shared/telemetry/metrics.js';
import { useDynamo } from '../helpers/dynalite.js';
import { injectFaults } from '../helpers/faults.js';
import { EmfRecorder, RecordingLog, schedulerEvent, TEST_SECRET, testBackend } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { type SesAnswer, startSesEndpoint } from '../helpers/ses-endpoint.js';
import { matchesEventPattern, type SesMessage, sesEvent } from '../helpers/ses-events.js';

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

  it.each([
    SesEventType.Delivery,
    SesEventType.Bounce,
    SesEventType.Complaint,
    SesEventType.DeliveryDelay,
    SesEventType.Open,
    SesEventType.Click,
  ])(
    'records a %s that reaches it (a destination publishing every event) as SES having taken the message, so it is never sent again',
    async (type) => {
      const { backend, keyHash, env, message } = await reservedEffect();
      const { handler } = recorder(providerWordLedgerFromEnvironment(env));

      expect(await handler(sesEvent(type, message))).toEqual({
        status: 'recorded',
        jobId: 'weekly-report',
        keyHash,
      });

      expect((await backend.ledger.read(SLOT, keyHash))?.provider).toMatchObject({
        outcome: 'accepted',
        event: type,
      });
    },
  );

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

  it('warns by hash when SES rejects a message whose effect is done (a Reject after its Send), and changes nothing', async () => {
    const { backend, keyHash, env, message } = await reservedEffect({ done: true });
    const { handler, emf, log } = recorder(providerWordLedgerFromEnvironment(env));

    const response = await handler(sesEvent(SesEventType.Reject, message));

    expect(response).toEqual({ status: 'not-recorded', jobId: 'weekly-report', keyHash, ledger: 'done' });
    expect(await backend.ledger.read(SLOT, keyHash)).toMatchObject({ state: 'DONE', epoch: 1 });
    expect([emf.sum('ProviderWordRecorded'), emf.sum('ProviderWordIgnored')]).toEqual([0, 1]);
    expect(log.lines).toHaveLength(1);
    expect(log.lines[0]).toMatchObject({
      level: 'warn',
      message: expect.stringContaining('provider rejected a message whose effect is done'),
      fields: { effect: keyHash, event: 'Reject', outcome: 'rejected' },
    });
    expect(JSON.stringify(log.lines)).not.toContain('@');
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

    // Its first step failed: the record and the window's done marks, read side by side.
    expect(faults.serverErrors).toBe(2);
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

/*
 * The deployed path end to end: the weekly report's real handler (jobHandlerFromEnvironment, the
 * environment ScheduledJob sets) sends through SES to a loopback endpoint that answers as SES; the
 * replies of five sends are lost, so the run cannot know what SES did with them and leaves them in
 * doubt, reserved by its epoch. SES had taken four of them. What SES then publishes for every message
 * it took (Send, Delivery, Bounce, Reject: SES's own event JSON, in EventBridge's envelope) goes
 * through the job's rule pattern to the real recorder handler (sesEventRecorderFromEnvironment), and
 * the window's next runs settle the effects from what is on record. One Send comes twice (EventBridge
 * delivers at least once), one comes only after the window finished, and one message has no event
 * at all: SES never had it.
 */
describe('the deployed path: the real job handler and the real recorder over SES events', () => {
  const DEPLOYED_START = Date.parse(WINDOW) + 1_000;
  const HOUR = 3_600_000;
  const customer = (n: number) => `customer-c${String(n).padStart(6, '0')}@example.com`;
  /** How SES met each recipient's first request; any other request it accepted and answered. */
  const FIRST_REQUEST: Readonly<Record<string, SesAnswer>> = {
    [customer(1)]: 'accept-reply-lost',
    [customer(2)]: 'accept-reply-lost',
    [customer(3)]: 'accept-reply-lost',
    [customer(4)]: 'reset-after-request',
    [customer(5)]: 'accept-reply-lost',
  };
  /** What SES publishes for a recipient's first message; every other message: Send, then Delivery. */
  const FIRST_MESSAGE_EVENTS: Readonly<Record<string, readonly SesEventType[]>> = {
    // The Send delivered twice by EventBridge.
    [customer(1)]: [SesEventType.Send, SesEventType.Send, SesEventType.Delivery],
    // Sent, and bounced by the recipient's server: sent all the same.
    [customer(2)]: [SesEventType.Send, SesEventType.Bounce],
    // Taken, then not sent (SES found a virus, say).
    [customer(3)]: [SesEventType.Reject],
    // Sent, but its Send arrives after the window finished.
    [customer(5)]: [SesEventType.Send],
  };
  const LATE = customer(5);

  async function deployedWindow(afterGrace: AfterGrace) {
    const clock = new ManualClock(DEPLOYED_START);
    const ses = await startSesEndpoint({ now: () => clock.now() });
    ses.answerWith(({ to, attempt }) => (attempt === 1 ? (FIRST_REQUEST[to] ?? 'accept') : 'accept'));
    const tableName = await dynamo.freshTable('ses-deployed');
    // What ScheduledJob sets on weekly-report's function (ses, recorded events), on dynalite.
    const jobEnv = {
      [RuntimeEnv.jobId]: 'weekly-report',
      [RuntimeEnv.tableName]: tableName,
      [RuntimeEnv.dynamodbEndpoint]: dynamo.endpoint,
      [RuntimeEnv.effectKeySecret]: TEST_SECRET,
      [RuntimeEnv.deadlineSeconds]: '21600',
      [RuntimeEnv.sesFromAddress]: 'reports@example.com',
      [RuntimeEnv.sendRatePerSecond]: '1',
      [RuntimeEnv.sendRateScope]: 'process',
      [RuntimeEnv.sesConfigurationSet]: 'weekly-report-configuration-set',
      [RuntimeEnv.inDoubtGraceSeconds]: '3600',
      [RuntimeEnv.inDoubtAfterGrace]: afterGrace,
    };
    const sender = SesEmailSender.fromEnvironment(jobEnv, {
      client: ses.client(),
      // The test's clock, with room for the window's sends at once: the rate is not what is tested.
      rateLimiter: new TokenBucket({ ratePerSecond: 1, burst: 64, clock }),
    });
    const job = weeklyReportJob({ customers: () => syntheticCustomers(8), sender });
    const handler = jobHandlerFromEnvironment(job, jobEnv, { clock });
    // What SesEventRecorder sets on the recorder's function.
    const recorder = sesEventRecorderFromEnvironment({
      [RuntimeEnv.tableName]: tableName,
      [RuntimeEnv.dynamodbEndpoint]: dynamo.endpoint,
      [SesEventsEnv.jobIds]: 'weekly-report',
    });
    const rule = sesEventPattern('weekly-report');
    const published = new Set<string>();
    const stream = { dropped: [] as string[], responses: [] as SesEventResponse[] };

    /** SES publishes the events of every message it took since the last call; EventBridge routes them. */
    async function publish(options: { late?: boolean } = {}) {
      for (const send of ses.accepted) {
        if (published.has(send.messageId) || (send.to === LATE && !options.late)) continue;
        published.add(send.messageId);
        const first = ses.accepted.find((s) => s.to === send.to) === send;
        const types = (first ? FIRST_MESSAGE_EVENTS[send.to] : undefined) ?? [
          SesEventType.Send,
          SesEventType.Delivery,
        ];
        const message = { ...send, configurationSet: jobEnv[RuntimeEnv.sesConfigurationSet] };
        let previous: Record<string, unknown> | undefined;
        for (const type of types) {
          // A second event of the same type is EventBridge delivering the same event again.
          const event = type === previous?.['detail-type'] ? previous : sesEvent(type, message);
          previous = event;
          if (!matchesEventPattern(rule, event)) {
            stream.dropped.push(`${send.to.slice(0, 16)} ${type}`);
            continue;
          }
          stream.responses.push(await recorder(structuredClone(event)));
        }
      }
    }

    const stdout = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    const stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    const results: HandlerResponse[] = [];
    let lines: string[] = [];
    try {
      for (let run = 0; run < 20; run++) {
        const result = await handler(schedulerEvent('weekly-report', WINDOW));
        results.push(result);
        await publish();
        if (result.status !== 'yielded') break;
        await clock.advance(Math.max(0, (result.resumeAfter ?? clock.now()) - clock.now()));
      }
      await publish({ late: true });
    } finally {
      lines = [...stdout.mock.calls, ...stderr.mock.calls].map(([chunk]) => String(chunk));
      stdout.mockRestore();
      stderr.mockRestore();
      await ses.close();
    }
    const emf = lines
      .filter((line) => line.includes('"CloudWatchMetrics"'))
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    const sum = (name: string) => emf.reduce((total, record) => total + Number(record[name] ?? 0), 0);
    const ledger = testBackend(dynamo.client(), tableName).ledger;
    const states = async () =>
      Promise.all(
        [1, 2, 3, 4, 5, 6, 7, 8].map(async (n) => {
          const record = await ledger.read(SLOT, hmacEffectKeys(TEST_SECRET)(customer(n)));
          return [record?.state, record?.provider?.outcome ?? '-'];
        }),
      );
    /** Emails that reached each recipient: every message SES took, but the one it rejected. */
    const received = (n: number) =>
      ses.accepted.filter((s) => s.to === customer(n)).length - (n === 3 ? 1 : 0);
    const waits = results.flatMap((r) =>
      r.status === 'yielded' && r.resumeAfter ? [r.resumeAfter - DEPLOYED_START] : [],
    );
    return { results, waits, stream, sum, states, received, output: lines.join('') };
  }

  /** The recorder's answers, by status and, for the ones that wrote nothing, why. */
  function answers(responses: readonly SesEventResponse[]) {
    const counts: Record<string, number> = {};
    for (const response of responses) {
      const key = response.status === 'not-recorded' ? `not-recorded:${response.ledger}` : response.status;
      counts[key] = (counts[key] ?? 0) + 1;
    }
    return counts;
  }

  it('confirms what SES took, sends again what it rejected, and pages once for the one it never had and the one whose Send came late', async () => {
    const { results, waits, stream, sum, states, received, output } = await deployedWindow(AfterGrace.Report);

    // The first run sent three and left five in doubt; the window then looked a minute and five
    // minutes after their reservation (the rejected one sent again at once), and at the end of the
    // hour's grace period.
    expect(results[0]).toMatchObject({ status: 'yielded', epoch: 1, summary: { done: 3, inDoubt: 5 } });
    expect(waits).toEqual([60_000, 60_000, 300_000, HOUR]);
    expect(results.at(-1)).toMatchObject({
      status: 'completed',
      state: 'DONE',
      window: { done: 6, inDoubt: 2, failed: 0 },
    });
    // c1 and c2 confirmed by their Send (never sent again), c3 sent again after its Reject; c4 (SES
    // never had it) and c5 (its Send came after the window finished) left in doubt, c5 with SES's
    // word now on its record for `effects resolve`.
    expect(await states()).toEqual([
      ['DONE', 'accepted'],
      ['DONE', 'accepted'],
      ['DONE', '-'],
      ['RESERVED', '-'],
      ['RESERVED', 'accepted'],
      ['DONE', '-'],
      ['DONE', '-'],
      ['DONE', '-'],
    ]);
    // Read against what SES took: nobody twice; c4 has nothing, and the page says so.
    expect([1, 2, 3, 4, 5, 6, 7, 8].map(received)).toEqual([1, 1, 1, 0, 1, 1, 1, 1]);
    expect([sum('InDoubtConfirmed'), sum('InDoubtRejected'), sum('InDoubtResent')]).toEqual([2, 1, 0]);
    // Counted once, at the window's finish; each run's discoveries are not what pages.
    expect(sum('EffectInDoubt')).toBe(2);
    expect(sum('EffectInDoubtFound')).toBe(5 + 5 + 2 + 2 + 2);
    // The rule hands the recorder Send and Reject only; Delivery and Bounce never reach it.
    expect(stream.dropped).toEqual([
      'customer-c000001 Delivery',
      'customer-c000002 Bounce',
      'customer-c000006 Delivery',
      'customer-c000007 Delivery',
      'customer-c000008 Delivery',
      'customer-c000003 Delivery',
    ]);
    // c1's Send twice, c2's, c3's Reject and c5's late Send recorded; the Sends of c6 to c8 and of
    // c3's second message found their effects done already.
    expect(answers(stream.responses)).toEqual({ recorded: 5, 'not-recorded:done': 4 });
    expect([sum('ProviderWordRecorded'), sum('ProviderWordIgnored')]).toEqual([5, 4]);
    expect(output).not.toContain('@');
  });

  it("sends again what SES said nothing of by the grace period's end with afterGrace 'resend': the missing one once, the late one a second time", async () => {
    const { results, waits, stream, sum, states, received, output } = await deployedWindow(AfterGrace.Resend);

    // At the grace period's end the two without a word are due again at once, and sent.
    expect(waits).toEqual([60_000, 60_000, 300_000, HOUR, HOUR]);
    expect(results.at(-1)).toMatchObject({
      status: 'completed',
      state: 'DONE',
      window: { done: 8, inDoubt: 0, failed: 0 },
    });
    expect((await states()).map(([state]) => state)).toEqual(Array(8).fill('DONE'));
    // c4 now has its email. c5 has two: SES had sent the first, and said so only after the grace
    // period. That is the price of 'resend', which is why it is opt-in.
    expect([1, 2, 3, 4, 5, 6, 7, 8].map(received)).toEqual([1, 1, 1, 1, 2, 1, 1, 1]);
    expect([sum('InDoubtConfirmed'), sum('InDoubtRejected'), sum('InDoubtResent')]).toEqual([2, 1, 2]);
    expect(sum('EffectInDoubt')).toBe(0);
    // The late Send finds c5 done by its second message, and writes nothing.
    expect(answers(stream.responses)).toEqual({ recorded: 4, 'not-recorded:done': 7 });
    expect([sum('ProviderWordRecorded'), sum('ProviderWordIgnored')]).toEqual([4, 7]);
    expect(output).not.toContain('@');
  });
});
