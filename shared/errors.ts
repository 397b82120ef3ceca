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

/**
 * Why a provider did not perform an effect. The runtime reads it (with `systemic`) to decide whether
 * the rest of the run can succeed; the ledger treats every reason the same way: the reservation is
 * released and a later run may perform the effect.
 */
export const NotPerformedReason = {
  /** The provider's rate limit refused the request: a later attempt, even a moment later, will likely succeed. */
  Throttled: 'throttled',
  /** A daily quota or account limit is used up: every send fails until it frees up, hours later. */
  Quota: 'quota',
  /**
   * The credentials were refused or lack a permission (AccessDenied, an invalid or expired token, a
   * bad signature): every send fails until an operator fixes them.
   */
  Unauthorized: 'unauthorized',
  /**
   * The sending account or identity cannot send (sending paused, account suspended, identity or
   * MAIL FROM domain not verified, configuration set missing): every send fails until fixed.
   */
  Configuration: 'configuration',
  /** This message or this recipient was refused (MessageRejected, a bad address): this one effect only. */
  Rejected: 'rejected',
  /** The request was malformed (BadRequest, validation): most likely this message's own data. */
  InvalidRequest: 'invalid-request',
  /** The wait for a send slot was cancelled (the run is stopping); nothing reached the provider. */
  Cancelled: 'cancelled',
  /** No reason given: the default for callers that predate reasons. */
  Unspecified: 'unspecified',
} as const;
/** One of {@link NotPerformedReason}'s values. */
export type NotPerformedReason = (typeof NotPerformedReason)[keyof typeof NotPerformedReason];

/**
 * Whether a refusal for this reason will hit every other effect of the run too, so sending on only
 * collects more of the same refusal. Quota counts: the account's 24-hour quota frees up hours after
 * the run. Throttling does not: it clears within seconds. Cancelled does not: it is the run
 * stopping, not the provider refusing.
 */
const SYSTEMIC: Readonly<Record<NotPerformedReason, boolean>> = {
  [NotPerformedReason.Throttled]: false,
  [NotPerformedReason.Quota]: true,
  [NotPerformedReason.Unauthorized]: true,
  [NotPerformedReason.Configuration]: true,
  [NotPerformedReason.Rejected]: false,
  [NotPerformedReason.InvalidRequest]: false,
  [NotPerformedReason.Cancelled]: false,
  [NotPerformedReason.Unspecified]: false,
};

/** Options of an {@link EffectNotPerformedError}. */
export interface EffectNotPerformedOptions {
  /**
   * The provider's error. Keep it free of raw addresses (see `withoutAddresses`): it is logged.
   * @default none
   */
  readonly cause?: unknown;
  /**
   * Why the provider did not perform the effect.
   * @default NotPerformedReason.Unspecified
   */
  readonly reason?: NotPerformedReason;
  /**
   * Whether the same refusal will hit every other effect of the run.
   * @default true for unauthorized, configuration and quota; false otherwise
   */
  readonly systemic?: boolean;
}

/**
 * Thrown by an effect function (a sender) when it knows the effect did NOT happen: the provider
 * refused the request before acting on it (throttled, rejected address, quota). The ledger then
 * releases the reservation so a later run may try again. Any other error from an effect leaves the
 * reservation in doubt, because the effect may have happened: throw this only on proof that
 * nothing was sent, since a wrong "not performed" is a duplicate email on the next run.
 */
export class EffectNotPerformedError extends SlotguardError {
  /** Why the provider did not perform the effect. */
  readonly reason: NotPerformedReason;
  /** True when the same refusal will hit every other effect of the run (bad credentials, paused account). */
  readonly systemic: boolean;
  constructor(message: string, options: EffectNotPerformedOptions = {}) {
    super(message, 'cause' in options ? { cause: options.cause } : undefined);
    this.reason = options.reason ?? NotPerformedReason.Unspecified;
    this.systemic = options.systemic ?? SYSTEMIC[this.reason];
  }
}
