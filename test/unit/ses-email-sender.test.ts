import * as sesv2 from '@aws-sdk/client-sesv2';
import {
  AccountSuspendedException,
  AlreadyExistsException,
  BadRequestException,
  ConcurrentModificationException,
  ConflictException,
  InternalServiceErrorException,
  InvalidNextTokenException,
  LimitExceededException,
  MailFromDomainNotVerifiedException,
  MessageRejected,
  NotFoundException,
  SESv2Client,
  SESv2ServiceException,
  SendEmailCommand,
  SendingPausedException,
  TooManyRequestsException,
} from '@aws-sdk/client-sesv2';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, it } from 'vitest';
import { defaultSesClient, redactAddresses, SesEmailSender } from '../../shared/effects/ses-email-sender.js';
import { ConfigurationError, EffectNotPerformedError, NotPerformedReason } from '../../shared/errors.js';
import {
  redactAddresses as redactAddressesFromTelemetry,
  safeErrorText,
} from '../../shared/telemetry/safe-error-text.js';
import { ManualClock, settle } from '../helpers/manual-clock.js';

const ses = mockClient(SESv2Client);
afterEach(() => ses.reset());

const address = 'alice@example.org';
const message = { to: address, subject: 'Your weekly report', text: 'Hello' };

function sender(options: Partial<ConstructorParameters<typeof SesEmailSender>[0]> = {}) {
  return new SesEmailSender({
    client: new SESv2Client({ region: 'eu-west-1' }),
    fromAddress: 'reports@example.com',
    maxSendRatePerSecond: 1_000,
    ...options,
  });
}

/** An error every AWS API can return, as the SDK builds it from the wire: a bare service exception. */
function genericError(name: string, status: number, text: string): SESv2ServiceException {
  return new SESv2ServiceException({
    name,
    message: text,
    $fault: status >= 500 ? 'server' : 'client',
    $metadata: { httpStatusCode: status },
  });
}

/** What a test expects a failed send to be read as. */
type Expected = { readonly reason: NotPerformedReason; readonly systemic: boolean } | 'in doubt';
const refused = (reason: NotPerformedReason, systemic: boolean): Expected => ({ reason, systemic });

async function thrownBy(promise: Promise<unknown>): Promise<Error> {
  const outcome = await promise.then(
    () => undefined,
    (error: unknown) => error,
  );
  expect(outcome).toBeInstanceOf(Error);
  return outcome as Error;
}

/** What reaches a log: the message, the stack, the cause's, and the one-line text. */
function expectNoAddress(error: Error): void {
  const cause = error.cause instanceof Error ? error.cause : undefined;
  for (const text of [error.message, error.stack, cause?.message, cause?.stack, safeErrorText(error)]) {
    expect(text ?? '').not.toContain(address);
  }
}

describe('SesEmailSender', () => {
  it('sends one SendEmail with the From address, the one recipient, subject and text', async () => {
    ses.on(SendEmailCommand).resolves({ MessageId: 'm-1' });
    await sender({ configurationSetName: 'slotguard' }).send(message);
    const calls = ses.commandCalls(SendEmailCommand);
    expect(calls).toHaveLength(1);
    expect(calls[0]!.args[0].input).toEqual({
      FromEmailAddress: 'reports@example.com',
      Destination: { ToAddresses: ['alice@example.org'] },
      Content: {
        Simple: {
          Subject: { Data: 'Your weekly report', Charset: 'UTF-8' },
          Body: { Text: { Data: 'Hello', Charset: 'UTF-8' } },
        },
      },
      ConfigurationSetName: 'slotguard',
    });
  });

  describe('when SES answers with an error (every class the SES v2 client exports)', () => {
    type ExceptionClass = new (options: {
      $metadata: Record<string, never>;
      message: string;
    }) => SESv2ServiceException;

    const everyClass: ReadonlyArray<readonly [ExceptionClass, Expected]> = [
      [TooManyRequestsException, refused(NotPerformedReason.Throttled, false)],
      [LimitExceededException, refused(NotPerformedReason.Quota, true)],
      [SendingPausedException, refused(NotPerformedReason.Configuration, true)],
      [AccountSuspendedException, refused(NotPerformedReason.Configuration, true)],
      [MailFromDomainNotVerifiedException, refused(NotPerformedReason.Configuration, true)],
      [NotFoundException, refused(NotPerformedReason.Configuration, true)],
      [MessageRejected, refused(NotPerformedReason.Rejected, false)],
      [BadRequestException, refused(NotPerformedReason.InvalidRequest, false)],
      [InternalServiceErrorException, 'in doubt'],
      [AlreadyExistsException, 'in doubt'],
      [ConflictException, 'in doubt'],
      [ConcurrentModificationException, 'in doubt'],
      [InvalidNextTokenException, 'in doubt'],
    ];

    it('classifies every exception class the installed client exports (an SDK upgrade adding one fails here)', () => {
      const exported = Object.values(sesv2 as Record<string, unknown>).filter(
        (value): value is ExceptionClass =>
          typeof value === 'function' && value.prototype instanceof SESv2ServiceException,
      );
      expect(exported.map((c) => c.name).sort()).toEqual(everyClass.map(([c]) => c.name).sort());
      expect(exported).toHaveLength(13);
    });

    it.each(everyClass.map(([errorClass, expected]) => [errorClass.name, errorClass, expected] as const))(
      '%s: reads it as SES did, and leaks no address',
      async (name, errorClass, expected) => {
        const sesError = new errorClass({ $metadata: {}, message: `${name} for ${address}` });
        ses.on(SendEmailCommand).rejects(sesError);
        const error = await thrownBy(sender().send(message));
        expect(ses.commandCalls(SendEmailCommand)).toHaveLength(1);
        expectNoAddress(error);
        if (expected === 'in doubt') {
          expect(error).toBe(sesError);
          expect(error).not.toBeInstanceOf(EffectNotPerformedError);
          expect(error).toBeInstanceOf(errorClass);
          expect(error.message).toBe(`${name} for <address>`);
        } else {
          expect(error).toBeInstanceOf(EffectNotPerformedError);
          const refusal = error as EffectNotPerformedError;
          expect({ reason: refusal.reason, systemic: refusal.systemic }).toEqual(expected);
          expect(refusal.cause).toBe(sesError);
          expect(refusal.cause).toBeInstanceOf(errorClass);
          expect(refusal.message).toContain(`${name}: ${name} for <address>`);
        }
      },
    );

    it('reads the daily quota, which SES reports as throttling, as quota: systemic', async () => {
      ses
        .on(SendEmailCommand)
        .rejects(genericError('ThrottlingException', 400, `Daily message quota exceeded for ${address}`));
      const error = await thrownBy(sender().send(message));
      expect(error).toBeInstanceOf(EffectNotPerformedError);
      expect((error as EffectNotPerformedError).reason).toBe(NotPerformedReason.Quota);
      expect((error as EffectNotPerformedError).systemic).toBe(true);
      expectNoAddress(error);
    });
  });

  describe('when AWS answers with an error the client has no class for (by its name)', () => {
    it.each([
      ['AccessDeniedException', 400, refused(NotPerformedReason.Unauthorized, true)],
      ['UnrecognizedClientException', 403, refused(NotPerformedReason.Unauthorized, true)],
      ['InvalidClientTokenId', 403, refused(NotPerformedReason.Unauthorized, true)],
      ['ExpiredTokenException', 403, refused(NotPerformedReason.Unauthorized, true)],
      ['IncompleteSignature', 400, refused(NotPerformedReason.Unauthorized, true)],
      ['SignatureDoesNotMatch', 403, refused(NotPerformedReason.Unauthorized, true)],
      ['NotAuthorized', 400, refused(NotPerformedReason.Unauthorized, true)],
      ['RequestExpired', 400, refused(NotPerformedReason.Unauthorized, true)],
      ['OptInRequired', 403, refused(NotPerformedReason.Configuration, true)],
      ['ThrottlingException', 400, refused(NotPerformedReason.Throttled, false)],
      ['ValidationException', 400, refused(NotPerformedReason.InvalidRequest, false)],
      ['ValidationError', 400, refused(NotPerformedReason.InvalidRequest, false)],
      ['InternalFailure', 500, 'in doubt'],
      ['ServiceUnavailable', 503, 'in doubt'],
      ['RequestTimeout', 408, 'in doubt'],
      ['RequestTimeoutException', 408, 'in doubt'],
      ['SomeErrorAwsAddsNextYear', 400, 'in doubt'],
    ] as const)('%s (HTTP %i): reads it as SES did, and leaks no address', async (name, status, expected) => {
      const sesError = genericError(name, status, `${name} while sending to ${address}`);
      ses.on(SendEmailCommand).rejects(sesError);
      const error = await thrownBy(sender().send(message));
      expectNoAddress(error);
      if (expected === 'in doubt') {
        expect(error).toBe(sesError);
        expect(error).not.toBeInstanceOf(EffectNotPerformedError);
      } else {
        expect(error).toBeInstanceOf(EffectNotPerformedError);
        const refusal = error as EffectNotPerformedError;
        expect({ reason: refusal.reason, systemic: refusal.systemic }).toEqual(expected);
        expect(refusal.cause).toBe(sesError);
        expect((refusal.cause as Error).name).toBe(name);
      }
    });

    it('leaves a refusal name on a server fault in doubt: a 5xx is no proof that nothing was sent', async () => {
      const odd = genericError('AccessDeniedException', 500, 'odd');
      ses.on(SendEmailCommand).rejects(odd);
      await expect(sender().send(message)).rejects.toBe(odd);
    });

    it('does not dispatch on the name of an error that is not from SES: it stays in doubt', async () => {
      for (const name of ['TooManyRequestsException', 'AccessDeniedException']) {
        const impostor = Object.assign(new Error(`throttled? ${address}`), { name });
        ses.on(SendEmailCommand).rejects(impostor);
        const error = await thrownBy(sender().send(message));
        expect(error).toBe(impostor);
        expectNoAddress(error);
      }
    });
  });

  describe('when the request fails without an answer from SES', () => {
    it.each([
      [
        'a timeout',
        () =>
          Object.assign(new Error(`Connection timed out after 5000 ms sending to ${address}`), {
            name: 'TimeoutError',
            $metadata: {},
          }),
      ],
      [
        'a reset connection',
        () => Object.assign(new Error(`read ECONNRESET (${address})`), { code: 'ECONNRESET', $metadata: {} }),
      ],
    ])('leaves %s in doubt, the error itself rethrown without the address', async (_, makeError) => {
      const failure = makeError();
      ses.on(SendEmailCommand).rejects(failure);
      const error = await thrownBy(sender().send(message));
      expect(error).toBe(failure);
      expect(error).not.toBeInstanceOf(EffectNotPerformedError);
      expectNoAddress(error);
    });

    it('masks the address in the cause of an in-doubt error too', async () => {
      const socketError = Object.assign(new Error(`socket closed while writing to ${address}`), {
        code: 'ECONNRESET',
      });
      const failure = new Error('request failed', { cause: socketError });
      ses.on(SendEmailCommand).rejects(failure);
      const error = await thrownBy(sender().send(message));
      expect(error).toBe(failure);
      expect(error.cause).toBe(socketError);
      expectNoAddress(error);
    });
  });

  it('does not send faster than maxSendRatePerSecond: 5 concurrent sends at 2/s span 2 seconds', async () => {
    ses.on(SendEmailCommand).resolves({});
    const clock = new ManualClock(0);
    const limited = sender({ maxSendRatePerSecond: 2, clock });
    const sentAt: number[] = [];
    const sends = Array.from({ length: 5 }, () => limited.send(message).then(() => sentAt.push(clock.now())));
    await settle();
    expect(ses.commandCalls(SendEmailCommand)).toHaveLength(1);
    await clock.advance(1_999);
    expect(ses.commandCalls(SendEmailCommand)).toHaveLength(4);
    await clock.advance(1);
    await Promise.all(sends);
    expect(ses.commandCalls(SendEmailCommand)).toHaveLength(5);
  });

  it('sends nothing and releases the effect when the lease is lost while waiting for a send slot', async () => {
    ses.on(SendEmailCommand).resolves({});
    const clock = new ManualClock(0);
    const limited = sender({ maxSendRatePerSecond: 1, clock });
    await limited.send(message);
    const controller = new AbortController();
    const waiting = limited.send(message, { signal: controller.signal }).catch((e: unknown) => e);
    controller.abort(new Error('lease lost'));
    const error = await waiting;
    expect(error).toBeInstanceOf(EffectNotPerformedError);
    expect((error as EffectNotPerformedError).reason).toBe(NotPerformedReason.Cancelled);
    expect((error as EffectNotPerformedError).systemic).toBe(false);
    await clock.advance(5_000);
    expect(ses.commandCalls(SendEmailCommand)).toHaveLength(1);
  });

  it('reads the From address and the rate from the variables the construct sets', async () => {
    ses.on(SendEmailCommand).resolves({});
    const fromEnv = SesEmailSender.fromEnvironment(
      { SLOTGUARD_SES_FROM: 'billing@example.com', SLOTGUARD_SEND_RATE: '14' },
      { client: new SESv2Client({ region: 'eu-west-1' }) },
    );
    await fromEnv.send(message);
    expect(ses.commandCalls(SendEmailCommand)[0]!.args[0].input.FromEmailAddress).toBe('billing@example.com');
  });

  it('refuses to start without a From address, naming the variable and the fix', () => {
    expect(() => SesEmailSender.fromEnvironment({})).toThrow(ConfigurationError);
    expect(() => SesEmailSender.fromEnvironment({})).toThrow(
      /SLOTGUARD_SES_FROM is not set; give the ScheduledJob an `ses` prop/,
    );
  });

  it('refuses a send rate that is not a positive number', () => {
    expect(() =>
      SesEmailSender.fromEnvironment({ SLOTGUARD_SES_FROM: 'a@example.com', SLOTGUARD_SEND_RATE: 'fast' }),
    ).toThrow(/SLOTGUARD_SEND_RATE is "fast"/);
  });

  it('builds its default client with SDK retries off, so a send whose response was lost is not sent twice', async () => {
    expect(await defaultSesClient().config.maxAttempts()).toBe(1);
  });
});

describe('redactAddresses', () => {
  it('stays importable from the sender, where it used to live', () => {
    expect(redactAddresses).toBe(redactAddressesFromTelemetry);
  });
});
