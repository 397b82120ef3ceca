/**
 * The one error base class of slotguard. Every subclass carries the context a reader needs to act
 * and, where another error caused it, that error as `cause`.
 */
export class SlotguardError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * An event that can never succeed however often it is retried: a missing or malformed scheduled
 * time, a job id outside the allowlist, an unknown job, an oversized payload. The handler turns it
 * into a logged rejection and an InvalidEvent metric, never a thrown error that would make Lambda
 * retry it.
 */
export class InvalidEventError extends SlotguardError {
  readonly field: string;
  constructor(field: string, message: string) {
    super(message);
    this.field = field;
  }
}

/** A configuration value that cannot work; the message names the value and the fix. */
export class ConfigurationError extends SlotguardError {
  readonly setting: string;
  constructor(setting: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.setting = setting;
  }
}

/** The claims store failed in a way the caller cannot resolve by reading the outcome. */
export class StoreError extends SlotguardError {
  readonly operation: string;
  constructor(operation: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.operation = operation;
  }
}

/** Why a provider did not perform an effect. */
export const NotPerformedReason = {
  /** Rate exceeded: a later attempt will likely succeed. */
  Throttled: 'throttled',
  /** A daily quota or limit exceeded: retry much later. */
  Quota: 'quota',
  /** Access denied or bad credentials: every send fails until an operator fixes it. */
  Unauthorized: 'unauthorized',
  /** Sending paused, account suspended, identity not verified: every send fails until fixed. */
  Configuration: 'configuration',
  /** This message or recipient was rejected. */
  Rejected: 'rejected',
  /** The request is malformed. */
  InvalidRequest: 'invalid-request',
  /** The wait for a send slot was cancelled (the run is stopping); nothing was sent or attempted. */
  Cancelled: 'cancelled',
  /** No reason given. */
  Unspecified: 'unspecified',
} as const;
export type NotPerformedReason = (typeof NotPerformedReason)[keyof typeof NotPerformedReason];

/** Reasons that will refuse every other effect of the run alike. */
const SYSTEMIC_REASONS: readonly NotPerformedReason[] = [
  NotPerformedReason.Unauthorized,
  NotPerformedReason.Configuration,
];

/**
 * Thrown by an effect function (a sender) when it knows the effect did NOT happen: the provider
 * refused the request before acting on it (throttled, rejected address, quota). The ledger then
 * records the refusal so a later run may try again. Any other error from an effect leaves the
 * reservation in doubt, because the effect may have happened.
 */
export class EffectNotPerformedError extends SlotguardError {
  /** Why the provider refused. */
  readonly reason: NotPerformedReason;
  /** True when the same refusal will hit every other effect of the run (an operator must act). */
  readonly systemic: boolean;
  constructor(message: string, options: { cause?: unknown; reason?: NotPerformedReason } = {}) {
    super(message, options);
    this.reason = options.reason ?? NotPerformedReason.Unspecified;
    this.systemic = SYSTEMIC_REASONS.includes(this.reason);
  }
}
