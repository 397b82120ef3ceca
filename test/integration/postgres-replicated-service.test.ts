import { Cron } from 'croner';
import { describe, expect, it } from 'vitest';
import { ScheduledReplica } from '../../examples/replicated-service/scheduled-replica.js';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import { windowOf } from '../../shared/slot/slot.js';
import { emfMetrics } from '../../shared/telemetry/metrics.js';
import { CountingSender } from '../helpers/counting-sender.js';
import { EmfRecorder, RecordingLog } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { usePostgres } from '../helpers/postgres.js';

/** The weekly report's schedule, as croner reads it: Mondays 09:00 Moscow time (06:00 UTC). */
const SCHEDULE = { pattern: '0 9 * * MON', timezone: 'Europe/Moscow' };
const CUSTOMERS = 250;
const DAY_MS = 86_400_000;

const postgres = usePostgres();

describe('a replicated service with an in-process croner schedule, on Postgres', () => {
  it('runs each of four weekly windows exactly once across three replicas whose timers fire up to 2.4 s apart', async () => {
    const schema = await postgres.freshSchema();
    // The ticks croner would deliver: the schedule's next four occurrences after a fixed instant.
    const windows = new Cron(SCHEDULE.pattern, { timezone: SCHEDULE.timezone }).nextRuns(
      4,
      new Date('2026-11-29T00:00:00Z'),
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
});
