/**
 * Provider errors quote the recipient ("Recipient command failed: 550 <alice@example.org>", "failed
 * the check: alice@example.org"), and an error text ends up in log lines and in the slot's stored
 * lastError. Everything here removes addresses before an error leaves a sender or reaches a log.
 */

const ADDRESS = /[^\s<>"'(),;:[\]]+@[^\s<>"'(),;:[\]]+/g;

/** Replaces anything shaped like an email address with `<address>`. */
export function redactAddresses(text: string): string {
  return text.replace(ADDRESS, '<address>');
}

/**
 * One line for a log field or a stored lastError: the error's name and message, then its cause's,
 * with every address redacted. A value that is not an Error is shown as its string.
 *
 * @example
 * log.warn('effect did not complete', { effect: keyHash, error: safeErrorText(error) });
 */
export function safeErrorText(error: unknown): string {
  const text = describe(error);
  const cause = error instanceof Error && error.cause !== undefined ? describe(error.cause) : undefined;
  // A sender's refusal already quotes its provider's error; saying it twice only lengthens the line.
  return redactAddresses(cause === undefined || text.includes(cause) ? text : `${text} (cause: ${cause})`);
}

function describe(value: unknown): string {
  if (value instanceof Error) return `${value.name}: ${value.message}`;
  try {
    return String(value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}

/** How deep nested errors are followed: an error, its cause or list of errors, and theirs. */
const MAX_DEPTH = 3;

/**
 * Removes every address from an error, in place, so it can leave a sender with its class, name,
 * `cause` and identity intact (`instanceof` upstream still works) and be logged whole by any
 * logger: the message, the stack (which V8 formats once, with the message of that moment), every
 * own string property (nodemailer's `response` and `recipient`), string lists (`rejected`) and the
 * errors it holds (`cause`, `rejectedErrors`), three levels deep.
 *
 * A string comes back redacted. An error that cannot be changed (frozen) comes back as a new Error
 * with the same name and its redacted text, without the cause it could not clean.
 */
export function withoutAddresses<T>(error: T): T | Error | string {
  if (typeof error === 'string') return redactAddresses(error);
  if (!(error instanceof Error)) return error;
  if (scrub(error, 0, new Set())) return error;
  return Object.assign(new Error(safeErrorText(error)), { name: error.name });
}

/** Redacts `error` and what it holds; false when some property could not be rewritten. */
function scrub(error: Error, depth: number, seen: Set<object>): boolean {
  if (seen.has(error)) return true;
  seen.add(error);
  let clean = true;
  for (const key of Object.getOwnPropertyNames(error)) {
    const value: unknown = Reflect.get(error, key);
    if (typeof value === 'string') {
      const redacted = redactAddresses(value);
      if (redacted !== value) clean = rewrite(error, key, redacted) && clean;
    } else if (Array.isArray(value)) {
      clean = scrubList(value, depth, seen) && clean;
    } else if (value instanceof Error && depth < MAX_DEPTH) {
      clean = scrub(value, depth + 1, seen) && clean;
    }
  }
  return clean;
}

function scrubList(list: unknown[], depth: number, seen: Set<object>): boolean {
  if (Object.isFrozen(list))
    return !list.some((item) => typeof item === 'string' && redactAddresses(item) !== item);
  let clean = true;
  list.forEach((item, index) => {
    if (typeof item === 'string') list[index] = redactAddresses(item);
    else if (item instanceof Error && depth < MAX_DEPTH) clean = scrub(item, depth + 1, seen) && clean;
  });
  return clean;
}

function rewrite(target: object, key: string, value: string): boolean {
  const descriptor = Object.getOwnPropertyDescriptor(target, key);
  if (descriptor?.writable) return Reflect.set(target, key, value);
  // An accessor (or a read-only value) that may be redefined becomes a plain value.
  if (descriptor?.configurable) {
    return Reflect.defineProperty(target, key, {
      value,
      writable: true,
      enumerable: descriptor.enumerable ?? false,
      configurable: true,
    });
  }
  return false;
}
