import { hostname } from 'node:os';
import { type Clock, type EmailSender, hmacEffectKeys, jsonLog, parseSchedule, windowOf } from 'slotguard';
import { createPostgresPool, migrate, postgresBackend } from 'slotguard/postgres';
import { WEEKLY_REPORT_JOB_ID, weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import { ScheduledReplica } from './scheduled-replica.js';

/**
 * One replica of the example service. Start it three times against one database and every
 * window's weekly report goes out once:
 *
 *   DATABASE_URL=postgres://… SLOTGUARD_EFFECT_KEY_SECRET=$(openssl rand -hex 16) \
 *   REPLICA_NAME=a SCHEDULE='cron(* * * * ? *)' node --import tsx --conditions=slotguard-source examples/replicated-service/main.ts
 *
 * Environment: DATABASE_URL (else the PG* variables), SLOTGUARD_EFFECT_KEY_SECRET (16+ bytes),
 * REPLICA_NAME (default the host name), SCHEDULE (an EventBridge Scheduler expression, default
 * 'cron(0 9 ? * MON *)'), SCHEDULE_TZ (an IANA time zone, default 'Europe/Moscow'),
 * SLOTGUARD_SCHEMA (default 'slotguard'), CUSTOMERS (synthetic recipients, default 100).
 */
const env = process.env;
const name = env.REPLICA_NAME ?? hostname();
const schema = env.SLOTGUARD_SCHEMA ?? 'slotguard';
const log = jsonLog(WEEKLY_REPORT_JOB_ID);
const schedule = {
  expression: env.SCHEDULE ?? 'cron(0 9 ? * MON *)',
  timeZone: env.SCHEDULE_TZ ?? 'Europe/Moscow',
};
// Checked before connecting, with the variable to correct named.
const parsed = parseSchedule(schedule);
if (!parsed.ok) {
  log.error(`${parsed.field === 'timeZone' ? 'SCHEDULE_TZ' : 'SCHEDULE'}: ${parsed.problem}; ${parsed.fix}`);
  process.exit(2);
}
/** The system clock with timers that keep the process alive: the schedule is all this service waits on. */
const serviceClock: Clock = {
  now: () => Date.now(),
  schedule(ms, fn) {
    const timer = setTimeout(fn, ms);
    return () => clearTimeout(timer);
  },
};

const pool = createPostgresPool({
  ...(env.DATABASE_URL ? { connectionString: env.DATABASE_URL } : {}),
  applicationName: `slotguard-${name}`.slice(0, 63),
  onIdleError: (error) =>
    log.warn('idle Postgres connection failed; the pool replaces it', { error: error.message }),
});
// A deploy step would run the migration once; here every replica runs it, which is safe (idempotent
// and serialised by an advisory transaction lock) and keeps the example to one command.
await migrate(pool, { schema });

/** Logs instead of sending: the recipient's domain only, never the address. */
const loggingSender: EmailSender = {
  async send(message) {
    log.info('weekly report sent (example: logged, not emailed)', { domain: message.to.split('@')[1] });
  },
};

const job = weeklyReportJob({
  customers: () => syntheticCustomers(Number(env.CUSTOMERS ?? 100)),
  sender: loggingSender,
});
const replica = new ScheduledReplica({
  name,
  job,
  schedule,
  clock: serviceClock,
  backend: postgresBackend({
    pool,
    schema,
    hashKey: hmacEffectKeys(env.SLOTGUARD_EFFECT_KEY_SECRET ?? ''),
  }),
  log,
}).start();
const nextFire = replica.nextFire();
log.info('replica started', { replica: name, nextFire: nextFire ? windowOf(nextFire) : 'never' });

const shutdown = async () => {
  await replica.stop();
  await pool.end();
};
process.once('SIGTERM', () => void shutdown());
process.once('SIGINT', () => void shutdown());
