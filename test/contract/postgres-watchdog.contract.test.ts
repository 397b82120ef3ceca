import { describePostgresWatchdogAudit } from './postgres-watchdog-audit.js';

describePostgresWatchdogAudit();
