import { SESv2ServiceException } from '@aws-sdk/client-sesv2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SesEmailSender } from '../../shared/effects/ses-email-sender.js';
import { EffectNotPerformedError, NotPerformedReason } from '../../shared/errors.js';
import { safeErrorText } from '../../shared/telemetry/safe-error-text.js';
import { type SesEndpoint, startSesEndpoint } from '../helpers/ses-endpoint.js';

const address = 'alice@example.org';
const message = { to: address, subject: 'Your weekly report', text: 'Hello' };

let endpoint: SesEndpoint;
beforeAll(async () => {
  endpoint = await startSesEndpoint();
});
afterAll(() => endpoint.close());

async function sendThrough(): Promise<Error> {
  const sender = new SesEmailSender({
    client: endpoint.client(),
    fromAddress: 'reports@example.com',
    maxSendRatePerSecond: 1_000,
  });
  const before = endpoint.requests;
  const outcome = await sender.send(message).then(
    () => undefined,
    (error: unknown) => error,
  );
  // One request each: the sender's client never retries a send.
  expect(endpoint.requests - before).toBe(1);
  expect(outcome).toBeInstanceOf(Error);
  const error = outcome as Error;
  const cause = error.cause instanceof Error ? error.cause : undefined;
  for (const text of [error.message, error.stack, cause?.message, cause?.stack, safeErrorText(error)]) {
    expect(text ?? '').not.toContain(address);
  }
  return error;
}

// The errors as SES puts them on the wire, read by the SDK's own deserializer: the generic AWS
// errors arrive with no class of their own, only a name, which is what the classification reads.
describe('SesEmailSender against an endpoint answering as SES does', () => {
  it('stops reporting AccessDenied in doubt: it is a systemic refusal, and the address is masked', async () => {
    endpoint.answerWith({
      status: 400,
      errorType: 'AccessDeniedException:http://internal.amazon.com/coral/com.amazon.coral.service/',
      message: `User arn:aws:iam::123456789012:role/weekly-report is not authorized to perform ses:SendEmail on ${address}`,
    });
    const error = await sendThrough();
    expect(error).toBeInstanceOf(EffectNotPerformedError);
    expect((error as EffectNotPerformedError).reason).toBe(NotPerformedReason.Unauthorized);
    expect((error as EffectNotPerformedError).systemic).toBe(true);
    expect(error.cause).toBeInstanceOf(SESv2ServiceException);
    expect((error.cause as Error).name).toBe('AccessDeniedException');
    expect(error.message).toContain('ses:SendEmail on <address>');
  });

  it('reads MessageRejected by its class, as one rejected recipient', async () => {
    endpoint.answerWith({
      status: 400,
      errorType: 'MessageRejected',
      message: `Email address is not verified. The following identities failed the check: ${address}`,
    });
    const error = await sendThrough();
    expect(error).toBeInstanceOf(EffectNotPerformedError);
    expect((error as EffectNotPerformedError).reason).toBe(NotPerformedReason.Rejected);
    expect((error as EffectNotPerformedError).systemic).toBe(false);
  });

  it.each([
    [503, 'ServiceUnavailable'],
    [500, 'InternalFailure'],
  ])('leaves a %i %s in doubt: SES may have accepted the message first', async (status, errorType) => {
    endpoint.answerWith({ status, errorType, message: `failed while sending to ${address}` });
    const error = await sendThrough();
    expect(error).not.toBeInstanceOf(EffectNotPerformedError);
    expect(error).toBeInstanceOf(SESv2ServiceException);
    expect(error.name).toBe(errorType);
  });

  it('leaves a connection reset after the request reached SES in doubt', async () => {
    endpoint.answerWith('reset-after-request');
    const error = await sendThrough();
    expect(error).not.toBeInstanceOf(EffectNotPerformedError);
    // The SDK names a reset connection a TimeoutError and keeps the socket's code.
    expect(error.name).toBe('TimeoutError');
    expect((error as { code?: string }).code).toBe('ECONNRESET');
  });
});
