import type { JobSpec } from 'slotguard';

/**
 * Every job this app deploys. The CDK app (infra/app.ts) synthesises one ScheduledJob per entry and
 * the local runner (`npm start`) fires the same entries: what runs locally is what deploys.
 */
export const jobCatalog: readonly JobSpec[] = [
  {
    id: 'weekly-report',
    description: 'The weekly report email, Monday 09:00 Moscow time, one per customer per week',
    schedule: { expression: 'cron(0 9 ? * MON *)', timeZone: 'Europe/Moscow' },
    entry: 'functions/weekly-report/handler.ts',
    leaseSeconds: 60,
    effectConcurrency: 16,
    timeoutSeconds: 900,
  },
  {
    id: 'payment-reminder',
    description: 'A reminder to customers whose invoice fell due, checked every 15 minutes',
    schedule: { expression: 'rate(15 minutes)', timeZone: 'UTC' },
    entry: 'functions/payment-reminder/handler.ts',
    leaseSeconds: 60,
    effectConcurrency: 8,
    timeoutSeconds: 300,
  },
];
