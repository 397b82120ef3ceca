/**
 * The environment variables a slotguard Lambda reads, set by the `ScheduledJob` construct and by the
 * local runner. One list, so the construct and the runtime agree on the names.
 */
export const RuntimeEnv = {
  /** The job this function serves; an event naming another job is rejected. */
  jobId: 'SLOTGUARD_JOB_ID',
  /** The DynamoDB claims table. */
  tableName: 'SLOTGUARD_TABLE_NAME',
  /** Secrets Manager ARN of the HMAC secret for effect keys (deployed). */
  effectKeySecretArn: 'SLOTGUARD_EFFECT_KEY_SECRET_ARN',
  /** The HMAC secret itself (local runs and tests only). */
  effectKeySecret: 'SLOTGUARD_EFFECT_KEY_SECRET',
  leaseSeconds: 'SLOTGUARD_LEASE_SECONDS',
  effectConcurrency: 'SLOTGUARD_EFFECT_CONCURRENCY',
  maxAttempts: 'SLOTGUARD_MAX_ATTEMPTS',
  retentionDays: 'SLOTGUARD_RETENTION_DAYS',
  /** SES v2: the verified From address and identity. */
  sesFromAddress: 'SLOTGUARD_SES_FROM',
  /** Maximum emails per second (the account's SES quota). */
  sendRatePerSecond: 'SLOTGUARD_SEND_RATE',
  /** Points the DynamoDB client at another endpoint (dynalite locally). */
  dynamodbEndpoint: 'DYNAMODB_ENDPOINT',
} as const;
