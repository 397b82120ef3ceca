import { inspect } from 'node:util';
import { describe, expect, it } from 'vitest';
import { EffectNotPerformedError, SlotguardError } from '../../shared/errors.js';
import { redactAddresses, safeErrorText, withoutAddresses } from '../../shared/telemetry/safe-error-text.js';

const address = 'alice@example.org';

describe('safeErrorText', () => {
  it('gives the name and message, then the cause, with no address in either', () => {
    const cause = Object.assign(new Error(`550 <${address}>: no such user`), { name: 'SmtpError' });
    const error = new EffectNotPerformedError(`refused ${address}`, { cause });
    expect(safeErrorText(error)).toBe(
      'EffectNotPerformedError: refused <address> (cause: SmtpError: 550 <<address>>: no such user)',
    );
  });

  it('does not repeat a cause the message already quotes', () => {
    const cause = new Error(`rejected ${address}`);
    const error = new EffectNotPerformedError(`SES refused it (Error: rejected ${address})`, { cause });
    expect(safeErrorText(error)).toBe('EffectNotPerformedError: SES refused it (Error: rejected <address>)');
  });

  it('describes a thrown value that cannot be turned into a string', () => {
    expect(safeErrorText(Object.create(null))).toBe('[object Object]');
  });

  it('redacts a thrown value that is not an Error', () => {
    expect(safeErrorText(`failed for ${address}`)).toBe('failed for <address>');
  });

  it('redacts an address that sits only in the cause (the run log used to print the cause-less text)', () => {
    const error = new SlotguardError('send failed', { cause: new Error(`rejected ${address}`) });
    expect(safeErrorText(error)).toBe('SlotguardError: send failed (cause: Error: rejected <address>)');
  });
});

describe('withoutAddresses', () => {
  it('keeps the error itself (class, name, cause) and removes every address a logger could print', () => {
    class ProviderError extends Error {}
    const rejected = Object.assign(new Error(`Recipient command failed: 550 <${address}>`), {
      recipient: address,
    });
    const cause = new Error(`socket for ${address}`);
    const error = Object.assign(
      new ProviderError(`all recipients were rejected: 550 <${address}>`, { cause }),
      {
        response: `550 <${address}>: no such user`,
        responseCode: 550,
        rejected: [address],
        rejectedErrors: [rejected],
      },
    );
    // V8 formats the stack, message included, the first time it is read; a logger may have read it.
    expect(error.stack).toContain(address);

    const masked = withoutAddresses(error);

    expect(masked).toBe(error);
    expect(masked).toBeInstanceOf(ProviderError);
    expect(error.cause).toBe(cause);
    expect(inspect(error, { depth: 10 })).not.toContain(address);
    expect(error.message).toBe('all recipients were rejected: 550 <<address>>');
    expect(error.stack).not.toContain(address);
    expect(error.response).toBe('550 <<address>>: no such user');
    expect(error.responseCode).toBe(550);
    expect(error.rejected).toEqual(['<address>']);
    expect(rejected.recipient).toBe('<address>');
    expect(cause.message).toBe('socket for <address>');
  });

  it('returns a string redacted', () => {
    expect(withoutAddresses(`no such user ${address}`)).toBe('no such user <address>');
  });

  it('replaces an error it cannot change with a redacted copy of the same name, dropping the cause', () => {
    const frozen = Object.freeze(
      Object.assign(new Error(`refused ${address}`, { cause: new Error(address) }), { name: 'FrozenError' }),
    );
    const masked = withoutAddresses(frozen);
    expect(masked).not.toBe(frozen);
    expect(masked).toBeInstanceOf(Error);
    expect((masked as Error).name).toBe('FrozenError');
    expect(inspect(masked, { depth: 10 })).not.toContain(address);
  });

  it('stops on an error that is its own cause', () => {
    const error = new Error(`loop ${address}`);
    (error as { cause?: unknown }).cause = error;
    expect(withoutAddresses(error)).toBe(error);
    expect(error.message).toBe('loop <address>');
  });

  it('replaces every address-shaped token and keeps the rest', () => {
    expect(redactAddresses('failed: alice@example.org, <bob+x@mail.example.com>')).toBe(
      'failed: <address>, <<address>>',
    );
  });
});
