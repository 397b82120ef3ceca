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
  /** Maximum emails per second (the account's SES quota), across every worker of the job at once. */
  sendRatePerSecond: 'SLOTGUARD_SEND_RATE',
  /**
   * Who shares SLOTGUARD_SEND_RATE (SendRateScope): `job`, every worker of the job together through
   * its claims backend; `process`, each Lambda on its own. Default `job` where SLOTGUARD_JOB_ID is set.
   */
  sendRateScope: 'SLOTGUARD_SEND_RATE_SCOPE',
  /**
   * The SES configuration set the job's emails go through: it publishes their send events, tagged
   * with the effect each message is, to the job's recorder (docs/design.md, "In doubt, resolved").
   */
  sesConfigurationSet: 'SLOTGUARD_SES_CONFIGURATION_SET',
  /**
   * Seconds to wait for the provider's word on an effect left in doubt before judging it without
   * one (InDoubtResolution.graceMs); unset: 0, nothing to wait for.
   */
  inDoubtGraceSeconds: 'SLOTGUARD_IN_DOUBT_GRACE_SECONDS',
  /** What becomes of an in-doubt effect still without a word after the grace period: `report` or `resend`. */
  inDoubtAfterGrace: 'SLOTGUARD_IN_DOUBT_AFTER_GRACE',
  /** Points the DynamoDB client at another endpoint (dynalite locally). */
  dynamodbEndpoint: 'DYNAMODB_ENDPOINT',
  /**
   * The job's SQS work queue: the schedule sends each window there, and a run invoked directly
   * (not from the queue) that stops with work left sends its continuation there.
   */
  workQueueUrl: 'SLOTGUARD_WORK_QUEUE_URL',
  /** How long after its scheduled time a window must be finished (RunOptions.deadlineMs, in seconds). */
  deadlineSeconds: 'SLOTGUARD_DEADLINE_SECONDS',
  /** Shards each new window is split into (RunOptions.shards); unset: 1. */
  shards: 'SLOTGUARD_SHARDS',
  /** `true`: each effect worker reserves its next effect while its current one is performed (RunOptions.reserveAhead). */
  reserveAhead: 'SLOTGUARD_RESERVE_AHEAD',
  /**
   * How long after a lease's end, by the claimer's clock, another run may take it over
   * (RunOptions.takeoverSkewMs, in seconds, to the millisecond); unset: defaultTakeoverSkewMs.
   */
  takeoverSkewSeconds: 'SLOTGUARD_TAKEOVER_SKEW_SECONDS',
} as const;

/**
 * The values of SLOTGUARD_SEND_RATE_SCOPE. `job`: one send rate for every worker of the job at once
 * (shards, continuations, a backfill next to a run), kept on a shared timeline in the claims
 * backend. `process`: each process keeps to the rate by itself, so N workers may send N times it.
 */
export const SendRateScope = { Job: 'job', Process: 'process' } as const;
export type SendRateScope = (typeof SendRateScope)[keyof typeof SendRateScope];

/**
 * Selects the claims backend: `postgres` (set by PostgresClaims) or `dynamodb`, the default when it
 * is unset. Not in RuntimeEnv, whose every name a DynamoDB-backed function is deployed with.
 */
export const BACKEND_ENV = 'SLOTGUARD_BACKEND';

/** The values of SLOTGUARD_BACKEND. */
export const BackendKind = { DynamoDB: 'dynamodb', Postgres: 'postgres' } as const;
export type BackendKind = (typeof BackendKind)[keyof typeof BackendKind];

/**
 * The variables of a Postgres-backed function, set by PostgresClaims (infra/postgres-claims.ts) and
 * read by shared/job/lambda-environment-postgres.ts. Exactly one of `secretArn` and `iamAuth`.
 */
export const PostgresRuntimeEnv = {
  /** The endpoint: an RDS Proxy, a cluster or an instance. */
  host: 'SLOTGUARD_PG_HOST',
  /** Default 5432. */
  port: 'SLOTGUARD_PG_PORT',
  database: 'SLOTGUARD_PG_DATABASE',
  /** The schema `migrate` created. Default `slotguard`. */
  schema: 'SLOTGUARD_PG_SCHEMA',
  /** The database user. Required with IAM authentication; with a secret, default the secret's `username`. */
  user: 'SLOTGUARD_PG_USER',
  /** An RDS database secret (`username`, `password`): password authentication, re-read for rotation. */
  secretArn: 'SLOTGUARD_PG_SECRET_ARN',
  /** `true`: sign an RDS IAM authentication token per connection with the function's role. */
  iamAuth: 'SLOTGUARD_PG_IAM_AUTH',
  /** `true` (default): TLS, verifying the server's certificate; `false`: plain TCP (local servers only). */
  ssl: 'SLOTGUARD_PG_SSL',
} as const;
