import { describe, expect, it } from 'vitest';
import { takeSendSlot } from '../../shared/effects/send-slot.js';
import type { RateLimiter } from '../../shared/effects/token-bucket.js';
import {
  ConfigurationError,
  EffectNotPerformedError,
  NotPerformedReason,
  StoreError,
} from '../../shared/errors.js';

const failingWith = (error: unknown): RateLimiter => ({ take: () => Promise.reject(error) });

/** The refusal `takeSendSlot` throws for a limiter that fails with `error`. */
async function refusal(error: unknown, signal?: AbortSignal): Promise<EffectNotPerformedError> {
  const thrown = await takeSendSlot(failingWith(error), signal, 'the SES send rate').catch((e: unknown) => e);
  expect(thrown).toBeInstanceOf(EffectNotPerformedError);
  return thrown as EffectNotPerformedError;
}

describe('a send that got no send slot', () => {
  it('is cancelled, not a provider failure, when the run stopped the wait', async () => {
    const controller = new AbortController();
    controller.abort(new Error('lease lost'));
    const error = await refusal(new Error('lease lost'), controller.signal);
    expect(error.reason).toBe(NotPerformedReason.Cancelled);
    expect(error.message).toBe(
      'the send was cancelled while waiting for the SES send rate; nothing was sent',
    );
  });

  it('is throttled, for a later attempt, when the shared rate store could not be reached', async () => {
    const error = await refusal(new StoreError('reserve send rate', 'DynamoDB reservation failed'));
    expect(error.reason).toBe(NotPerformedReason.Throttled);
    expect(error.systemic).toBe(false);
    expect(error.message).toMatch(
      /no send slot could be reserved on the SES send rate \(DynamoDB reservation failed\)/,
    );
  });

  it('stops the run (systemic) when the store cannot work as configured, quoting the fix', async () => {
    const error = await refusal(
      new ConfigurationError(
        'schema',
        'found no slotguard tables; run the migration first: slotguard postgres migrate',
      ),
    );
    expect(error.reason).toBe(NotPerformedReason.Configuration);
    expect(error.systemic).toBe(true);
    expect(error.message).toMatch(/run the migration first/);
  });

  it('leaves no recipient address in the refusal or its cause', async () => {
    const error = await refusal(new Error('store refused a request for customer@example.org'));
    expect(error.message).not.toContain('customer@example.org');
    expect(String((error.cause as Error).message)).not.toContain('customer@example.org');
  });
});
