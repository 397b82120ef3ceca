import type { Clock } from '../shared/clock.js';
import type { EffectContext } from '../shared/effects/effect-context.js';
import type { EffectLedger, ProviderWordOutcome } from '../shared/slot/ports.js';
import type { SinkWord } from './smtp-sink.js';

/**
 * The local provider's word: the SMTP sink's answer to each message that is an effect, written onto
 * the effect's record through the same port as the SES event recorder deployed: accepted as a
 * `Send`, refused as a `Reject`, with the message's id, at the clock's time, for the epoch that
 * sent it. The sink waits for the write before it answers, so a send that returned has its word on
 * record. Answers what the ledger answered: 'done' (marked already) and 'unknown' (another epoch's
 * reservation) need nothing more, as a word only ever settles the reservation it is about.
 * @example startSmtpSink({ onWord: recordSmtpWords(backend.ledger, clock) })
 */
export function recordSmtpWords(
  ledger: EffectLedger,
  clock: Clock,
): (effect: EffectContext, word: SinkWord) => Promise<ProviderWordOutcome> {
  return (effect, word) => {
    const slot = {
      jobId: effect.jobId,
      window: effect.window,
      ...(effect.shard !== undefined ? { shard: effect.shard } : {}),
    };
    return ledger.recordProviderWord(slot, effect.keyHash, {
      outcome: word.outcome,
      event: word.outcome === 'accepted' ? 'Send' : 'Reject',
      messageId: word.messageId,
      at: clock.now(),
      epoch: effect.epoch,
    });
  };
}
