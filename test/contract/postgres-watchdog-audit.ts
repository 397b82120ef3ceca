import { usePostgres } from '../helpers/postgres.js';
import { describeWatchdogAudit } from './watchdog-audit-contract.js';

/**
 * The watchdog audit's contract on Postgres, waiting for the Postgres backend's port to the issue-9
 * slot records (deadline, PARTIAL, STUCK): until then PostgresClaimStore is not a ClaimStore and
 * this does not typecheck. Once it does, the lead wires it in with a one-line test file,
 * test/contract/postgres-watchdog.contract.test.ts:
 * ```ts
 * describePostgresWatchdogAudit();
 * ```
 * It runs on the caller's clock, as postgres.contract.test.ts does: the contract writes records at
 * 2026 instants the database clock cannot follow.
 */
export function describePostgresWatchdogAudit(): void {
  const postgres = usePostgres();
  describeWatchdogAudit(
    'Postgres, caller clock',
    async () => postgres.backend(await postgres.freshSchema(), { leaseClock: 'caller' }).claims,
  );
}
