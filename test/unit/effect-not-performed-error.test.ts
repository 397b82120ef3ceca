import { describe, expect, it } from 'vitest';
import { EffectNotPerformedError, NotPerformedReason } from '../../shared/errors.js';

describe('EffectNotPerformedError', () => {
  it('keeps the old call shape working: message and cause, reason unspecified, not systemic', () => {
    const cause = new Error('throttled');
    const error = new EffectNotPerformedError('not sent', { cause });
    expect(error.cause).toBe(cause);
    expect(error.reason).toBe(NotPerformedReason.Unspecified);
    expect(error.systemic).toBe(false);
    expect(new EffectNotPerformedError('not sent')).not.toHaveProperty('cause');
  });

  it.each([
    [NotPerformedReason.Throttled, false],
    [NotPerformedReason.Quota, true],
    [NotPerformedReason.Unauthorized, true],
    [NotPerformedReason.Configuration, true],
    [NotPerformedReason.Rejected, false],
    [NotPerformedReason.InvalidRequest, false],
    [NotPerformedReason.Cancelled, false],
    [NotPerformedReason.Unspecified, false],
  ])(
    'marks %s systemic=%s by default, so the run stops only on refusals every send will meet',
    (reason, systemic) => {
      const error = new EffectNotPerformedError('not sent', { reason });
      expect(error.reason).toBe(reason);
      expect(error.systemic).toBe(systemic);
    },
  );

  it('lets a sender that knows better override systemic', () => {
    const error = new EffectNotPerformedError('From address not verified', {
      reason: NotPerformedReason.Rejected,
      systemic: true,
    });
    expect(error.systemic).toBe(true);
  });
});
