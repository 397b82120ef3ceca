import { describe, expect, it } from 'vitest';
import { ScheduledReplica } from '../../examples/replicated-service/scheduled-replica.js';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import type { ScheduleSpec } from '../../shared/job/job-spec.js';
import { JobSchedule } from '../../shared/schedule/fire-times.js';
import { windowOf } from '../../shared/slot/slot.js';
import { emfMetrics } from '../../shared/telemetry/metrics.js';
import { CountingSender } from '../helpers/counting-sender.js';
import { EmfRecorder, RecordingLog } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { usePostgres } from '../helpers/postgres.js';

/** The weekly report's schedule: Mondays 09:00 Moscow time (06:00 UTC). */
const SCHEDULE = { expression: 'cron(0 9 ? * MON *)', timeZone: 'Europe/Moscow' };
const CUSTOMERS = 250;
const DAY_MS = 86_400_000;

const postgres = usePostgres();

describe('a replicated service with an in-process schedule, on Postgres', () => {
  it('runs each of four weekly windows exactly once across three replicas whose timers fire up to 2.4 s apart', async () => {
    const schema = await postgres.freshSchema();
    // The ticks the replicas' timers deliver: the schedule's next four fires after a fixed instant.
    const windows = new JobSchedule(SCHEDULE).firesBetween(
      Date.parse('2026-11-29T00:00:00Z'),
      Date.parse('2026-12-22T00:00:00Z'),
    );
    expect(windows.map((w) => windowOf(w))).toEqual([
      '2026-11-30T06:00:00Z',
      '2026-12-07T06:00:00Z',
      '2026-12-14T06:00:00Z',
      '2026-12-21T06:00:00Z',
    ]);
    const mailbox = new CountingSender();
    const emf = new EmfRecorder();
    const log = new RecordingLog();
    const replicas = ['a', 'b', 'c'].map((name) => {
      const clock = new ManualClock(windows[0]!);
      const replica = new ScheduledReplica({
        name: `replica-${name}`,
        job: weeklyReportJob({ customers: () => syntheticCustomers(CUSTOMERS), sender: mailbox }),
        schedule: SCHEDULE,
        backend: postgres.backend(schema, { pool: postgres.pool({ applicationName: `service-${name}` }) }),
        log,
        clock,
        metrics: () => emfMetrics({ jobId: 'weekly-report', write: emf.write }),
      });
      return { replica, clock };
    });
    // How late each replica's timer fires after the scheduled instant (a busy event loop, a GC pause).
    const lateness = [3, 850, 2_400];

    for (const [week, window] of windows.entries()) {
      const sentBefore = mailbox.total;
      const results = await Promise.all(
        replicas.map(async ({ replica, clock }, i) => {
          const firedAt = window.getTime() + lateness[i]!;
          await clock.advance(firedAt - clock.now());
          return replica.tick(new Date(firedAt));
        }),
      );
      expect(results.map((r) => r?.status).sort(), `week ${week}`).toEqual([
        'completed',
        'duplicate',
        'duplicate',
      ]);
      expect(mailbox.total - sentBefore, `week ${week}`).toBe(CUSTOMERS);
    }

    expect(mailbox.total).toBe(4 * CUSTOMERS);
    expect(mailbox.perRecipient.size).toBe(CUSTOMERS);
    for (const count of mailbox.perRecipient.values()) expect(count).toBe(4);
    expect(emf.sum('ClaimAcquired')).toBe(4);
    expect(emf.sum('DuplicateClaim')).toBe(8);
    expect(emf.sum('EffectDone')).toBe(4 * CUSTOMERS);
    // One slot per scheduled window: the late ticks landed in it, not in a slot of their own second.
    const slots = await postgres.sql<{ slot_window: string; state: string; epoch: number }>(
      `SELECT slot_window, state, epoch FROM ${schema}.slots ORDER BY slot_window`,
    );
    expect(slots).toEqual(windows.map((w) => ({ slot_window: windowOf(w), state: 'DONE', epoch: 1 })));
  });

  it('maps a tick to the occurrence it belongs to, whenever the timer fired, and schedules only once started', async () => {
    const replica = new ScheduledReplica({
      name: 'mapper',
      job: weeklyReportJob({ customers: () => syntheticCustomers(1), sender: new CountingSender() }),
      schedule: SCHEDULE,
      backend: postgres.backend(await postgres.freshSchema()),
      log: new RecordingLog(),
    });
    const monday = Date.parse('2026-11-30T06:00:00Z');
    expect(replica.scheduledInstant(new Date(monday))?.toISOString()).toBe('2026-11-30T06:00:00.000Z');
    expect(replica.scheduledInstant(new Date(monday + 59_999))?.toISOString()).toBe(
      '2026-11-30T06:00:00.000Z',
    );
    expect(replica.scheduledInstant(new Date(monday + 6 * DAY_MS))?.toISOString()).toBe(
      '2026-11-30T06:00:00.000Z',
    );
    expect(replica.scheduledInstant(new Date(monday - 1))?.toISOString()).toBe('2026-11-23T06:00:00.000Z');

    expect(replica.nextFire()).not.toBeNull();
    replica.start();
    expect(replica.nextFire()!.getTime()).toBeGreaterThan(Date.now());
    await replica.stop();
    expect(replica.nextFire()).toBeNull();
  });

  it.each([
    [
      // Lord Howe goes back half an hour at 02:00 on 5 April 2026 (+11 to +10:30): 01:30-01:59
      // happens twice, at 14:30Z and 15:00Z on 4 April. croner fired 01:30 at both.
      'fires Lord Howe’s repeated 01:30 once, at its first occurrence',
      { expression: 'cron(0/30 1 * * ? *)', timeZone: 'Australia/Lord_Howe' },
      '2026-04-04T12:00:00Z',
      '2026-04-06T12:00:00Z',
      ['2026-04-04T14:00:00Z', '2026-04-04T14:30:00Z', '2026-04-05T14:30:00Z', '2026-04-05T15:00:00Z'],
    ],
    [
      // Berlin goes from 02:00 to 03:00 on 29 March 2026: 02:30 does not happen that night.
      // croner fired at 03:00 (01:00Z) instead.
      'skips Berlin’s 02:30 on the night the clocks skip it',
      { expression: 'cron(30 2 * * ? *)', timeZone: 'Europe/Berlin' },
      '2026-03-27T00:00:00Z',
      '2026-03-31T00:00:00Z',
      ['2026-03-27T01:30:00Z', '2026-03-28T01:30:00Z', '2026-03-30T00:30:00Z'],
    ],
  ])('%s, as EventBridge Scheduler does', async (_, schedule: ScheduleSpec, from, to, expected) => {
    const schema = await postgres.freshSchema();
    const mailbox = new CountingSender();
    const clock = new ManualClock(new Date(from));
    const replica = new ScheduledReplica({
      name: 'replica-a',
      job: weeklyReportJob({ customers: () => syntheticCustomers(3), sender: mailbox }),
      schedule,
      backend: postgres.backend(schema),
      log: new RecordingLog(),
      clock,
      metrics: () => emfMetrics({ jobId: 'weekly-report', write: () => {} }),
    }).start();

    // The replica's own timers, driven through the nights in half-hour steps; each run finishes
    // before the clock moves on.
    while (clock.now() < Date.parse(to)) {
      await clock.advance(30 * 60_000);
      await replica.idle();
    }
    await replica.stop();

    const slots = await postgres.sql<{ slot_window: string; state: string }>(
      `SELECT slot_window, state FROM ${schema}.slots ORDER BY slot_window`,
    );
    expect(slots).toEqual(expected.map((window) => ({ slot_window: window, state: 'DONE' })));
    expect(mailbox.total).toBe(3 * expected.length);
  });
});
