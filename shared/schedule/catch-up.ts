import { ConfigurationError } from '../errors.js';
import { type CatchUpMode, type CatchUpPolicy, JOB_DEFAULTS } from '../job/job-spec.js';

/** A catch-up policy with its defaults applied. */
export interface ResolvedCatchUpPolicy {
  readonly mode: CatchUpMode;
  readonly maxLatenessMinutes: number;
}

/** Why a missed window is not run. */
export type CatchUpSkipReason =
  /** The job's mode is `skip`. */
  | 'policy-skip'
  /** Mode `once`: a later missed window runs instead. */
  | 'superseded'
  /** Further back than maxLatenessMinutes. */
  | 'too-late';

/** Which missed windows to run, and why each other one is not run. */
export interface CatchUpPlan {
  readonly policy: ResolvedCatchUpPolicy;
  /** Oldest first, each to be delivered with its own scheduled time. */
  readonly run: readonly Date[];
  readonly skipped: readonly { readonly window: Date; readonly reason: CatchUpSkipReason }[];
}

const MODES: readonly string[] = ['skip', 'once', 'all'];

/** Applies the defaults to a job's catch-up policy and checks it; the error names the value and the fix. */
export function resolveCatchUpPolicy(
  policy: CatchUpPolicy | undefined,
  jobId: string,
): ResolvedCatchUpPolicy {
  const mode = policy?.mode ?? JOB_DEFAULTS.catchUp.mode;
  const maxLatenessMinutes = policy?.maxLatenessMinutes ?? JOB_DEFAULTS.catchUp.maxLatenessMinutes;
  if (!MODES.includes(mode)) {
    throw new ConfigurationError(
      'catchUp.mode',
      `catchUp.mode of job '${jobId}' is ${JSON.stringify(mode)}; use 'skip', 'once' or 'all'`,
    );
  }
  if (typeof maxLatenessMinutes !== 'number' || Number.isNaN(maxLatenessMinutes) || maxLatenessMinutes <= 0) {
    throw new ConfigurationError(
      'catchUp.maxLatenessMinutes',
      `catchUp.maxLatenessMinutes of job '${jobId}' is ${String(maxLatenessMinutes)}; use a positive number of minutes ` +
        `(default ${JOB_DEFAULTS.catchUp.maxLatenessMinutes})`,
    );
  }
  return { mode, maxLatenessMinutes };
}

/**
 * Decides which of a job's missed windows (fired by nothing, no slot record) to run at `now`.
 * Pure: the local runner calls it when it starts after downtime, the CLI's backfill for a range.
 * @example planCatchUp(missed, { mode: 'once' }, Date.now()).run // the latest missed window, if within a day
 */
export function planCatchUp(
  missed: readonly Date[],
  policy: ResolvedCatchUpPolicy,
  now: number,
): CatchUpPlan {
  const oldestAllowed = now - policy.maxLatenessMinutes * 60_000;
  const ordered = [...missed].sort((a, b) => a.getTime() - b.getTime());
  const inReach = ordered.filter((w) => w.getTime() >= oldestAllowed);
  const skipped: { window: Date; reason: CatchUpSkipReason }[] = ordered
    .filter((w) => w.getTime() < oldestAllowed)
    .map((window) => ({ window, reason: 'too-late' }));
  let run: Date[];
  switch (policy.mode) {
    case 'skip':
      run = [];
      skipped.push(...inReach.map((window) => ({ window, reason: 'policy-skip' as const })));
      break;
    case 'once':
      run = inReach.slice(-1);
      skipped.push(...inReach.slice(0, -1).map((window) => ({ window, reason: 'superseded' as const })));
      break;
    case 'all':
      run = inReach;
      break;
    default:
      return policy.mode satisfies never;
  }
  skipped.sort((a, b) => a.window.getTime() - b.window.getTime());
  return { policy, run, skipped };
}

/** One line for logs and tables: `once within 1440 min`. */
export function describeCatchUpPolicy(policy: ResolvedCatchUpPolicy): string {
  const reach = Number.isFinite(policy.maxLatenessMinutes)
    ? `within ${policy.maxLatenessMinutes} min`
    : 'at any age';
  return `${policy.mode} ${reach}`;
}
