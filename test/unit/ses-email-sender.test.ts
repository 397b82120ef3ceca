import {
  AccountSuspendedException,
  BadRequestException,
  InternalServiceErrorException,
  LimitExceededException,
  MailFromDomainNotVerifiedException,
  MessageRejected,
  SESv2Client,
  SendEmailCommand,
  SendingPausedException,
  TooManyRequestsException,
} from '@aws-sdk/client-sesv2';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, it } from 'vitest';
import { defaultSesClient, redactAddresses, SesEmailSender } from '../../shared/effects/ses-email-sender.js';
import { ConfigurationError, EffectNotPerformedError } from '../../shared/errors.js';
import { ManualClock, settle } from '../helpers/manual-clock.js';

const ses = mockClient(SESv2Client);
afterEach(() => ses.reset());

const message = { to: 'alice@example.org', subject: 'Your weekly report', text: 'Hello' };
const metadata = { $metadata: {} };

function sender(options: Partial<ConstructorParameters<typeof SesEmailSender>[0]> = {}) {
  return new SesEmailSender({
    client: new SESv2Client({ region: 'eu-west-1' }),
    fromAddress: 'reports@example.com',
    maxSendRatePerSecond: 1_000,
    ...options,
  });
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

  it.each([
    ['TooManyRequestsException', new TooManyRequestsException({ ...metadata, message: 'Too many requests' })],
    ['LimitExceededException', new LimitExceededException({ ...metadata, message: 'Daily quota exceeded' })],
    ['SendingPausedException', new SendingPausedException({ ...metadata, message: 'Sending paused' })],
    ['MessageRejected', new MessageRejected({ ...metadata, message: 'Email address is not verified' })],
    ['AccountSuspendedException', new AccountSuspendedException({ ...metadata, message: 'Suspended' })],
    [
      'MailFromDomainNotVerifiedException',
      new MailFromDomainNotVerifiedException({ ...metadata, message: 'MAIL FROM not verified' }),
    ],
    ['BadRequestException', new BadRequestException({ ...metadata, message: 'Bad request' })],
  ])('releases the effect (EffectNotPerformedError) when SES refuses with %s', async (name, refusal) => {
    ses.on(SendEmailCommand).rejects(refusal);
    const error = await sender()
      .send(message)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EffectNotPerformedError);
    expect((error as Error).message).toContain(name);
    expect((error as Error).cause).toBe(refusal);
    expect(ses.commandCalls(SendEmailCommand)).toHaveLength(1);
  });

  it('leaves the effect in doubt (the SDK error, unchanged) when SES fails in a way that may follow sending', async () => {
    const failure = new InternalServiceErrorException({ ...metadata, message: 'Internal error' });
    ses.on(SendEmailCommand).rejects(failure);
    const error = await sender()
      .send(message)
      .catch((e: unknown) => e);
    expect(error).toBe(failure);
    expect(error).not.toBeInstanceOf(EffectNotPerformedError);
  });

  it('leaves a timeout or dropped connection in doubt: SES may have accepted the message', async () => {
    const dropped = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
    ses.on(SendEmailCommand).rejects(dropped);
    const error = await sender()
      .send(message)
      .catch((e: unknown) => e);
    expect(error).toBe(dropped);
  });

  it('does not dispatch on the error name: an unrelated error named like a refusal stays in doubt', async () => {
    const impostor = Object.assign(new Error('throttled?'), { name: 'TooManyRequestsException' });
    ses.on(SendEmailCommand).rejects(impostor);
    await expect(sender().send(message)).rejects.toBe(impostor);
  });

  it('never puts the raw recipient address in the error it throws, nor in its cause', async () => {
    ses.on(SendEmailCommand).rejects(
      new MessageRejected({
        ...metadata,
        message:
          'Email address is not verified. The following identities failed the check: alice@example.org',
      }),
    );
    const error = (await sender()
      .send(message)
      .catch((e: unknown) => e)) as Error;
    expect(error).toBeInstanceOf(EffectNotPerformedError);
    expect(error.message).not.toContain('alice@example.org');
    expect((error.cause as Error).message).not.toContain('alice@example.org');
    expect(error.message).toContain('<address>');
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
  it('replaces every address-shaped token and keeps the rest', () => {
    expect(redactAddresses('failed: alice@example.org, <bob+x@mail.example.com>')).toBe(
      'failed: <address>, <<address>>',
    );
  });
});
