import { afterEach, describe, expect, it } from 'vitest';
import { type SinkWordListener, type SmtpSink, startSmtpSink } from '../../local/smtp-sink.js';
import { recordSmtpWords } from '../../local/smtp-word-recorder.js';
import { memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import { type EffectContext, withEffectContext } from '../../shared/effects/effect-context.js';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import { smtpSender } from '../../shared/effects/smtp-email-sender.js';
import { EffectNotPerformedError, NotPerformedReason } from '../../shared/errors.js';
import { EffectState } from '../../shared/slot/ports.js';
import { TEST_SECRET } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';

/*
 * The local provider's word: the SMTP sink writes its answer to each message that is an effect
 * onto the effect's record (accepted or rejected) before it gives that answer, so what a sender
 * heard is on record even if the sender dies the next instant.
 */

const WINDOW = '2026-11-30T06:00:00Z';
const SLOT = { jobId: 'sink-words', window: WINDOW };
const START = Date.parse(WINDOW) + 1_000;
const hashKey = hmacEffectKeys(TEST_SECRET);

const opened: { close(): unknown }[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((it) => it.close()));
});

/** A window whose run (epoch 1) has reserved `recipients`, and a sink told to record on its ledger. */
async function reservedWindow(
  recipients: readonly string[],
  sinkOptions: { refuse?: (message: { readonly recipients: readonly string[] }) => boolean } = {},
  listener?: (record: SinkWordListener) => SinkWordListener,
) {
  const clock = new ManualClock(START);
  const backend = memoryBackend({ hashKey });
  const claimed = await backend.claims.claim(
    SLOT,
    {
      owner: 'holder',
      leaseMs: 60_000,
      maxAttempts: 3,
      expiresAtSeconds: Math.ceil(START / 1000) + 35 * 86_400,
      deadline: START + 3_600_000,
      delivery: {},
    },
    START,
  );
  if (claimed.kind !== 'claimed') throw new Error(`expected to claim the slot, got ${claimed.kind}`);
  for (const to of recipients) {
    await backend.ledger.reserve(claimed.claim, hashKey(to), { rerunInDoubt: false, now: START });
  }
  const record = recordSmtpWords(backend.ledger, clock);
  const sink: SmtpSink = await startSmtpSink({
    ...sinkOptions,
    onWord: listener ? listener(record) : record,
  });
  const sender = smtpSender({ host: sink.host, port: sink.port });
  opened.push(sink, sender);
  /** Sends to `to` as its effect of epoch 1 would: inside the effect's context, so with its headers. */
  const send = (to: string, text = 'Your weekly report') => {
    const effect: EffectContext = { jobId: SLOT.jobId, window: WINDOW, keyHash: hashKey(to), epoch: 1 };
    return withEffectContext(effect, () => sender.send({ to, subject: 'Weekly report', text }));
  };
  const recordOf = (to: string) => backend.ledger.read(SLOT, hashKey(to));
  return { sink, sender, send, recordOf };
}

/** What a send that failed threw, for its reason. */
async function refusalOf(sending: Promise<unknown>): Promise<EffectNotPerformedError> {
  const error = await sending.then(
    () => undefined,
    (thrown: unknown) => thrown,
  );
  if (!(error instanceof EffectNotPerformedError)) {
    throw new Error(`expected the send to be refused, got ${String(error)}`);
  }
  return error;
}

describe('the SMTP sink records its word on the effect before it answers', () => {
  it('has the accepted word on the effect of a send that returned, so a sender killed after the 250 leaves it confirmable', async () => {
    const { sink, send, recordOf } = await reservedWindow(['a@example.test']);

    await send('a@example.test');

    const record = await recordOf('a@example.test');
    expect(record).toMatchObject({
      state: EffectState.Reserved,
      epoch: 1,
      provider: { outcome: 'accepted', event: 'Send', at: START, epoch: 1 },
    });
    // nodemailer's Message-ID, without its angle brackets.
    expect(record?.provider?.messageId).toMatch(/^[^<>\s]+@[^<>\s]+$/);
    expect(sink.received.get('a@example.test')).toBe(1);
    expect(sink.refused.size).toBe(0);
  });

  it('records the word rejected on the effect of a message it refuses, before the sender hears the refusal', async () => {
    const { sink, send, recordOf } = await reservedWindow(['a@example.test', 'b@example.test'], {
      refuse: ({ recipients }) => recipients.includes('b@example.test'),
    });

    const refusal = await refusalOf(send('b@example.test'));
    await send('a@example.test');

    expect(refusal.reason).toBe(NotPerformedReason.Rejected);
    expect(refusal.message).toContain('554');
    expect(await recordOf('b@example.test')).toMatchObject({
      state: EffectState.Reserved,
      provider: { outcome: 'rejected', event: 'Reject', epoch: 1 },
    });
    expect(await recordOf('a@example.test')).toMatchObject({ provider: { outcome: 'accepted' } });
    expect([...sink.received.keys()]).toEqual(['a@example.test']);
    expect([...sink.refused]).toEqual([['b@example.test', 1]]);
    expect(sink.total()).toBe(1);
  });

  it('refuses a message over its size limit with a 552 and records the word rejected, instead of counting a message it did not take', async () => {
    const { sink, send, recordOf } = await reservedWindow(['a@example.test']);

    const refusal = await refusalOf(send('a@example.test', 'x'.repeat(70 * 1024)));

    expect(refusal.reason).toBe(NotPerformedReason.Rejected);
    expect(refusal.message).toContain('552');
    expect(await recordOf('a@example.test')).toMatchObject({ provider: { outcome: 'rejected' } });
    expect(sink.total()).toBe(0);
    expect(sink.refused.get('a@example.test')).toBe(1);
  });

  it.each([
    ['fails', (): Promise<unknown> => Promise.reject(new Error('ledger unreachable'))],
    [
      'throws before it returns a promise',
      (): Promise<unknown> => {
        throw new TypeError('ledger.recordProviderWord is not a function');
      },
    ],
  ])(
    'refuses the message with a 451 and counts nothing when recording its word %s, so no send returns without its word',
    async (_, failing) => {
      const { sink, send, recordOf } = await reservedWindow(['a@example.test'], {}, () => failing);

      const refusal = await refusalOf(send('a@example.test'));

      // Temporary: the sender may try again.
      expect(refusal.reason).toBe(NotPerformedReason.Throttled);
      expect(refusal.message).toContain('451');
      expect(sink.total()).toBe(0);
      expect(sink.received.size).toBe(0);
      expect((await recordOf('a@example.test'))?.provider).toBeUndefined();
    },
  );

  it('is idle only once every message handed over is answered and its sender gone, so a dead sender leaves nothing still to count', async () => {
    let release = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let told = () => {};
    const heard = new Promise<void>((resolve) => {
      told = resolve;
    });
    const { sink, sender, send } = await reservedWindow(
      ['a@example.test'],
      {},
      (record) => async (effect, word) => {
        told();
        await held;
        return record(effect, word);
      },
    );
    const sending = send('a@example.test');

    // The message is in, its word held back: not answered, so not counted yet, and not idle.
    await heard;
    let idle = false;
    const idling = sink.idle().then(() => {
      idle = true;
    });
    // A turn of the event loop, for an idle() that wrongly resolved to have done so.
    await new Promise((resolve) => setImmediate(resolve));
    expect([idle, sink.total()]).toEqual([false, 0]);
    release();
    await sending;
    expect(sink.total()).toBe(1);
    // Answered, but the sender's pooled connection is still open.
    expect(idle).toBe(false);
    sender.close();
    await idling;
    expect(idle).toBe(true);
  });

  it('accepts and counts a message that is no effect without telling the listener of it', async () => {
    const told: string[] = [];
    const { sink, sender } = await reservedWindow([], {}, (record) => (effect, word) => {
      told.push(effect.keyHash);
      return record(effect, word);
    });

    await sender.send({ to: 'plain@example.test', subject: 'Not an effect', text: 'hello' });

    expect(told).toEqual([]);
    expect(sink.received.get('plain@example.test')).toBe(1);
    expect(sink.recordsWords).toBe(true);
  });
});
