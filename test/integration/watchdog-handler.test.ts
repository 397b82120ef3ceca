import { afterEach, describe, expect, it, vi } from 'vitest';
import { DynamoClaimStore } from '../../shared/backends/dynamodb/dynamodb-claim-store.js';
import { ConfigurationError } from '../../shared/errors.js';
import { emfMetrics } from '../../shared/telemetry/metrics.js';
import {
  watchdogClaimsFromEnvironment,
  watchdogHandlerFromEnvironment,
  watchdogInDoubtStoresFromEnvironment,
} from '../../shared/watchdog/watchdog-environment.js';
import type { WatchdogEvent } from '../../shared/watchdog/watchdog-event.js';
import { createWatchdogHandler, type SlotReader } from '../../shared/watchdog/watchdog-lambda.js';
import { useDynamo } from '../helpers/dynalite.js';
import { EmfRecorder, RecordingLog, testBackend } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';

const dynamo = useDynamo();
afterEach(() => {
  vi.unstubAllEnvs();
  vi.restoreAllMocks();
});

const weekly: WatchdogEvent = {
  kind: 'watchdog',
  jobId: 'weekly-report',
  schedule: { expression: 'cron(0 9 ? * MON *)', timeZone: 'Europe/Moscow' },
  deadlineSeconds: 21_600,
  lookbackHours: 8 * 24,
};

/** A handler on `claims` at `now`, recording its metrics and logs. */
function watchdog(claims: SlotReader | (() => Promise<SlotReader>), now: string) {
  const emf = new EmfRecorder();
  const log = new RecordingLog();
  const handler = createWatchdogHandler({
    claims,
    metrics: (jobId) => emfMetrics({ jobId, write: emf.write }),
    log: () => log,
    clock: new ManualClock(Date.parse(now)),
  });
  return { handler, emf, log };
}

describe('the watchdog handler', () => {
  it('pages a weekly job whose window never ran and one whose window got stuck half way, with no effect-key secret', async () => {
    const tableName = await dynamo.freshTable('watchdog');
    const env = { SLOTGUARD_TABLE_NAME: tableName, DYNAMODB_ENDPOINT: dynamo.endpoint };
    const store = new DynamoClaimStore({ client: dynamo.client(), tableName });
    const slot = { jobId: 'weekly-report', window: '2026-11-23T06:00:00Z' };
    const claimed = await store.claim(
      slot,
      {
        owner: 'replica-1/a',
        leaseMs: 60_000,
        maxAttempts: 3,
        expiresAtSeconds: Date.parse(slot.window) / 1000 + 35 * 86_400,
        deadline: Date.parse(slot.window) + 21_600_000,
        delivery: {},
      },
      Date.parse('2026-11-23T06:00:05Z'),
    );
    if (claimed.kind !== 'claimed') throw new Error(claimed.kind);
    await store.release(
      claimed.claim,
      { kind: 'stuck', reason: 'no progress in 3 consecutive runs', runsWithoutProgress: 3 },
      Date.parse('2026-11-23T06:30:00Z'),
    );

    const { handler, emf, log } = watchdog(watchdogClaimsFromEnvironment(env), '2026-11-30T06:20:00Z');
    const response = await handler(weekly);

    expect(response).toEqual({
      status: 'audited',
      jobId: 'weekly-report',
      from: '2026-11-22T06:20:00.000Z',
      counts: { ok: 0, partial: 0, missing: 1, incomplete: 1, pending: 0 },
      missing: ['2026-11-30T06:00:00Z'],
      incomplete: ['2026-11-23T06:00:00Z'],
      partial: [],
    });
    expect(emf.records).toHaveLength(1);
    expect(emf.records[0]).toMatchObject({
      JobId: 'weekly-report',
      WindowMissing: 1,
      WindowIncomplete: 1,
      WatchdogRun: 1,
    });
    expect(log.lines.filter((l) => l.level === 'error').map((l) => [l.message, l.fields.window])).toEqual([
      ['window incomplete', '2026-11-23T06:00:00Z'],
      ['window missing', '2026-11-30T06:00:00Z'],
    ]);
  });

  it.each([
    [{ ...weekly, kind: 'job' }, 'kind', /kind is "job"; this function is the watchdog/],
    [{ jobId: 'weekly-report', scheduledTime: '2026-11-30T06:00:00Z' }, 'kind', /kind is missing/],
    [{ ...weekly, jobId: 'Weekly Report' }, 'jobId', /jobId "Weekly Report" is not a valid job id/],
    [
      { ...weekly, schedule: 'cron(0 9 ? * MON *)' },
      'schedule',
      /schedule is "cron\(0 9 \? \* MON \*\)"; send/,
    ],
    [{ ...weekly, schedule: { expression: 'cron(0 9 * * MON *)' } }, 'schedule', /cannot be read/],
    [{ ...weekly, deadlineSeconds: undefined }, 'deadlineSeconds', /deadlineSeconds is missing/],
    [{ ...weekly, deadlineSeconds: 30 }, 'deadlineSeconds', /a deadline of 30 s is too short/],
    [{ ...weekly, graceSeconds: '900' }, 'graceSeconds', /graceSeconds is "900"; send a number of seconds/],
    [{ ...weekly, lookbackHours: 900 }, 'lookbackHours', /a lookback of 37 d 12 h .* at most 34 d/],
    [
      { ...weekly, schedule: { expression: 'rate(15 minutes)' } },
      'rateStart',
      /rateStart is missing for "rate\(15 minutes\)"/,
    ],
    [
      { ...weekly, schedule: { expression: 'rate(1 minute)' }, rateStart: 'yesterday' },
      'rateStart',
      /rateStart is "yesterday"; send an ISO 8601 instant/,
    ],
    [
      {
        ...weekly,
        schedule: { expression: 'rate(1 minute)' },
        rateStart: '2026-01-01T00:00:00Z',
        lookbackHours: 48,
      },
      'lookbackHours',
      /fires more than 1000 times in a 48 h lookback.*shorten the lookback to 16 h or less/,
    ],
  ])(
    'rejects an event it can never audit, naming the field, and emits no WatchdogRun: %j',
    async (event, field, message) => {
      const reads: string[] = [];
      const { handler, emf, log } = watchdog(
        {
          read: async (slot) => {
            reads.push(slot.window);
            return undefined;
          },
        },
        '2026-11-30T06:20:00Z',
      );
      const response = await handler(event);
      expect(response).toMatchObject({ status: 'rejected', field });
      expect(response.status === 'rejected' && response.message).toMatch(message);
      expect(reads).toEqual([]);
      expect(emf.records).toEqual([]);
      expect(log.lines).toHaveLength(1);
      expect(log.lines[0]).toMatchObject({ level: 'error', fields: { field } });
    },
  );

  it('audits as ever and warns when an event asks to confirm in-doubt effects it has no stores for', async () => {
    const { handler, emf, log } = watchdog({ read: async () => undefined }, '2026-11-30T06:20:00Z');
    const response = await handler({ ...weekly, confirmInDoubt: true });
    expect(response).toMatchObject({ status: 'audited', counts: { missing: 2 } });
    expect(response).not.toHaveProperty('inDoubt');
    expect(emf.records[0]).toMatchObject({ WatchdogRun: 1, WindowMissing: 2 });
    expect(log.lines.filter((l) => l.level === 'warn').map((l) => l.message)).toEqual([
      'watchdog event asks to confirm in-doubt effects, but this watchdog has no effect ledger or operator ' +
        'store for its backend (DynamoDB only, so far): only the audit ran',
    ]);
  });

  it('rejects a confirmInDoubt that is not a boolean, naming the field', async () => {
    const { handler } = watchdog({ read: async () => undefined }, '2026-11-30T06:20:00Z');
    const response = await handler({ ...weekly, confirmInDoubt: 'yes' });
    expect(response).toMatchObject({ status: 'rejected', field: 'confirmInDoubt' });
    expect(response.status === 'rejected' && response.message).toMatch(/confirmInDoubt is "yes"; send true/);
  });

  it('connects again on the next invocation when the first connection failed', async () => {
    let attempts = 0;
    const { handler, emf } = watchdog(async () => {
      if (++attempts === 1) throw new Error('ECONNREFUSED');
      return { read: async () => undefined };
    }, '2026-11-30T06:20:00Z');
    await expect(handler(weekly)).rejects.toThrow('ECONNREFUSED');
    expect(emf.records).toEqual([]);
    expect(await handler(weekly)).toMatchObject({ status: 'audited', counts: { missing: 2 } });
    expect(attempts).toBe(2);
  });
});

describe('the watchdog configured from its environment', () => {
  it.each([
    [{}, /SLOTGUARD_TABLE_NAME is not set/],
    [{ SLOTGUARD_BACKEND: 'mysql' }, /SLOTGUARD_BACKEND is "mysql"; set "dynamodb" or "postgres"/],
    [{ SLOTGUARD_BACKEND: 'postgres' }, /does not include the postgres backend/],
  ])('refuses %j at cold start, naming the variable and the fix', (env, message) => {
    expect(() => watchdogHandlerFromEnvironment(env)).toThrow(ConfigurationError);
    expect(() => watchdogHandlerFromEnvironment(env)).toThrow(message);
  });

  it("confirms an in-doubt effect the provider accepted on its environment's table, and has no such stores on Postgres", async () => {
    const tableName = await dynamo.freshTable('watchdog');
    const env = { SLOTGUARD_TABLE_NAME: tableName, DYNAMODB_ENDPOINT: dynamo.endpoint };
    const backend = testBackend(dynamo.client(), tableName);
    const slot = { jobId: 'weekly-report', window: '2026-11-23T06:00:00Z' };
    const lease = (owner: string) => ({
      owner,
      leaseMs: 60_000,
      maxAttempts: 3,
      expiresAtSeconds: Date.parse(slot.window) / 1000 + 35 * 86_400,
      deadline: Date.parse(slot.window) + 21_600_000,
      delivery: {},
    });
    const crashed = await backend.claims.claim(
      slot,
      lease('replica-1/a'),
      Date.parse('2026-11-23T06:00:05Z'),
    );
    if (crashed.kind !== 'claimed') throw new Error(crashed.kind);
    await backend.ledger.reserve(crashed.claim, 'ab12cd34', {
      rerunInDoubt: false,
      now: Date.parse(slot.window),
    });
    const takeover = await backend.claims.claim(
      slot,
      lease('replica-2/b'),
      Date.parse('2026-11-23T06:02:00Z'),
    );
    if (takeover.kind !== 'claimed') throw new Error(takeover.kind);
    const summary = { done: 0, inDoubt: 1, failed: 0, inDoubtKeys: ['ab12cd34'], failedKeys: [], runs: 2 };
    await backend.claims.complete(takeover.claim, summary, Date.parse('2026-11-23T06:03:00Z'));
    const word = {
      outcome: 'accepted',
      event: 'Send',
      at: Date.parse('2026-11-23T06:04:00Z'),
      epoch: 1,
    } as const;
    expect(await backend.ledger.recordProviderWord(slot, 'ab12cd34', word)).toBe('recorded');

    const inDoubt = watchdogInDoubtStoresFromEnvironment(env);
    expect(inDoubt).toBeDefined();
    const emf = new EmfRecorder();
    const handler = createWatchdogHandler({
      claims: watchdogClaimsFromEnvironment(env),
      ...(inDoubt ? { inDoubt } : {}),
      metrics: (jobId) => emfMetrics({ jobId, write: emf.write }),
      log: () => new RecordingLog(),
      clock: new ManualClock(Date.parse('2026-11-30T06:20:00Z')),
    });
    expect(await handler({ ...weekly, confirmInDoubt: true })).toMatchObject({
      status: 'audited',
      inDoubt: { windows: 1, confirmed: 1, stillInDoubt: 0 },
    });
    expect(await backend.ledger.read(slot, 'ab12cd34')).toMatchObject({ state: 'DONE' });
    expect((await backend.claims.read(slot))?.summary).toMatchObject({ done: 1, inDoubt: 0 });
    expect(emf.sum('InDoubtConfirmedLate')).toBe(1);

    expect(
      watchdogInDoubtStoresFromEnvironment({ SLOTGUARD_BACKEND: 'postgres', SLOTGUARD_PG_HOST: 'db' }),
    ).toBeUndefined();
  });

  it('runs from its Lambda entry with the table and endpoint of its environment, EMF on stdout', async () => {
    vi.stubEnv('SLOTGUARD_TABLE_NAME', await dynamo.freshTable('watchdog'));
    vi.stubEnv('DYNAMODB_ENDPOINT', dynamo.endpoint);
    vi.stubEnv('POWERTOOLS_LOG_LEVEL', 'SILENT');
    const stdout = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    const { handler } = await import('../../shared/watchdog/watchdog-handler.js');
    // A schedule with no window in any recent lookback: whatever today is, nothing is due.
    const response = await handler({ ...weekly, schedule: { expression: 'cron(0 9 1 1 ? 2020)' } });
    const emf = stdout.mock.calls
      .map(([chunk]) => String(chunk))
      .filter((line) => line.includes('"CloudWatchMetrics"'))
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    stdout.mockRestore();
    expect(response).toMatchObject({
      status: 'audited',
      counts: { ok: 0, partial: 0, missing: 0, incomplete: 0, pending: 0 },
    });
    expect(emf).toHaveLength(1);
    expect(emf[0]).toMatchObject({
      JobId: 'weekly-report',
      WindowMissing: 0,
      WindowIncomplete: 0,
      WatchdogRun: 1,
    });
  });
});
