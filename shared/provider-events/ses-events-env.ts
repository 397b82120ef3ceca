/**
 * The variables of the SES event recorder's function beyond the claims backend's (RuntimeEnv,
 * PostgresRuntimeEnv), set by the SesEventRecorder construct. Apart from the runtime that reads
 * them, so the construct imports names, not the runtime.
 */
export const SesEventsEnv = {
  /** The jobs whose SES events the function records, comma-separated: each has a rule that targets it. */
  jobIds: 'SLOTGUARD_RECORDED_JOBS',
} as const;
