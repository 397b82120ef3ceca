/**
 * CloudWatch's limit on how far back one alarm can look (PutMetricAlarm): Period multiplied by
 * EvaluationPeriods may not exceed 7 days (604,800 s). No slotguard alarm watches for a missing run
 * any more (the watchdog does, for any schedule); ScheduledJob still measures a schedule's longest
 * gap only up to this.
 */
export const CLOUDWATCH_ALARM_LIMITS = {
  maxEvaluationSeconds: 604_800,
} as const;
