/**
 * PLACEHOLDER, replaced at merge by the watchdog's real handler (issue 9): the CDK's
 * SlotguardWatchdog bundles this module as the watchdog function's entry, so it must exist for
 * `cdk synth` and the infra tests. It is never meant to deploy.
 *
 * The deployed input, one Scheduler schedule per job every 15 minutes (infra/slotguard-watchdog.ts):
 * `{ kind: 'watchdog', jobId, schedule: { expression, timeZone }, deadlineSeconds, graceSeconds, lookbackHours }`.
 */
export async function handler(_event: unknown): Promise<never> {
  throw new Error('not implemented: the slotguard watchdog handler is a placeholder until issue 9 merges');
}
