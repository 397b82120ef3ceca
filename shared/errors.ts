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
 * Thrown by an effect function (a sender) when it knows the effect did NOT happen: the provider
 * refused the request before acting on it (throttled, rejected address, quota). The ledger then
 * releases the reservation so a later run may try again. Any other error from an effect leaves the
 * reservation in doubt, because the effect may have happened.
 */
export class EffectNotPerformedError extends SlotguardError {}
