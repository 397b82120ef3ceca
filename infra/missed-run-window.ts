import { Duration } from 'aws-cdk-lib';

/**
 * CloudWatch's limits on how far back one alarm can look (PutMetricAlarm): Period multiplied by
 * EvaluationPeriods may not exceed 7 days (604,800 s), and may not exceed 1 day (86,400 s) when
 * the period is shorter than an hour.
 */
export const CLOUDWATCH_ALARM_LIMITS = {
  maxEvaluationSeconds: 604_800,
  maxEvaluationSecondsBelowHourPeriod: 86_400,
} as const;

/** How the missed-run alarm looks back: `evaluationPeriods` buckets of `period`, all empty to alarm. */
export interface MissedRunWindow {
  readonly period: Duration;
  readonly evaluationPeriods: number;
  /** The look-back the schedule needs: its longest gap plus the grace. */
  readonly wantedSeconds: number;
  /** True when the look-back had to be shortened to CloudWatch's 7-day limit. */
  readonly capped: boolean;
}

const FIVE_MINUTES = 300;
const ONE_HOUR = 3_600;

/**
 * The missed-run alarm's window: it goes off when every bucket in it lacks a ClaimAcquired, so it
 * must span the longest gap between fires plus the grace for the claim's metric to arrive.
 *
 * Short windows use 5-minute buckets, long ones hourly buckets (CloudWatch allows at most a day of
 * sub-hour buckets). One extra bucket absorbs the bucket boundaries falling between the fire and
 * the look-back's start. Windows beyond 7 days are capped there; see `capped`.
 */
export function missedRunWindow(longestGapSeconds: number, graceSeconds: number): MissedRunWindow {
  const wantedSeconds = longestGapSeconds + graceSeconds;
  const fitsInADayOfShortBuckets =
    wantedSeconds + FIVE_MINUTES <= CLOUDWATCH_ALARM_LIMITS.maxEvaluationSecondsBelowHourPeriod;
  const bucket = fitsInADayOfShortBuckets ? FIVE_MINUTES : ONE_HOUR;
  const maxBuckets = fitsInADayOfShortBuckets
    ? CLOUDWATCH_ALARM_LIMITS.maxEvaluationSecondsBelowHourPeriod / FIVE_MINUTES
    : CLOUDWATCH_ALARM_LIMITS.maxEvaluationSeconds / ONE_HOUR;
  const buckets = Math.ceil(wantedSeconds / bucket) + 1;
  return {
    period: Duration.seconds(bucket),
    evaluationPeriods: Math.min(buckets, maxBuckets),
    wantedSeconds,
    capped: buckets > maxBuckets,
  };
}
