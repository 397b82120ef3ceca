import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LocalBackend, openLocalBackend } from '../../local/local-backend.js';
import { rateLimitedSender } from '../../local/rate-limited-sender.js';
import { type SmtpSink, startSmtpSink } from '../../local/smtp-sink.js';
import type { EmailSender } from '../../shared/effects/email-sender.js';
import type { RateLimitStore } from '../../shared/effects/rate-limit-store.js';
import { SharedRateLimiter } from '../../shared/effects/shared-rate-limiter.js';
import { smtpSender } from '../../shared/effects/smtp-email-sender.js';
import { EffectNotPerformedError, NotPerformedReason, StoreError } from '../../shared/errors.js';
import { useDynamo } from '../helpers/dynalite.js';
import { busiestWindow } from '../helpers/send-rate-fleet.js';
import { inVirtualTime, VirtualClock } from '../helpers/virtual-clock.js';
import { InFlight } from './in-flight.js';

const dynamo = useDynamo();
let sink: SmtpSink;
let backend: LocalBackend;
beforeAll(async () => {
  sink = await startSmtpSink();
  backend = await openLocalBackend({
    endpoint: dynamo.endpoint,
    tableName: await dynamo.freshTable('local-rate'),
  });
});
afterAll(async () => {
  await backend.close();
  await sink.close();
});

const T0 = Date.parse('2026-11-30T06:00:00Z');

describe('one send rate for the local runner’s workers of a job', () => {
  it('keeps a run and a backfill sending through the SMTP sink to one rate on the local backend', async () => {
    const clock = new VirtualClock(T0);
    const inFlight = new InFlight();
    const sentAt: number[] = [];
    const worker = (name: string): EmailSender & { close(): void } => {
      const store = backend.sendRateStore('payment-reminder');
      const counted: RateLimitStore = { reserve: (request) => inFlight.pass(() => store.reserve(request)) };
      const smtp = inFlight.sender(
        smtpSender({ host: sink.host, port: sink.port, from: `${name}@slotguard.local` }),
      );
      const limited = rateLimitedSender(
        {
          send: (message, options) => {
            sentAt.push(clock.now());
            return smtp.send(message, options);
          },
          close: () => smtp.close(),
        },
        new SharedRateLimiter({ store: counted, ratePerSecond: 5, clock }),
      );
      return limited;
    };
    const senders = [worker('run'), worker('backfill')];
    const before = sink.total();
    const sendTen = (sender: EmailSender, name: string) =>
      Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          sender.send({ to: `${name}-${i}@example.org`, subject: 'Reminder', text: 'Due' }),
        ),
      );
    await inVirtualTime(
      clock,
      inFlight.count,
      Promise.all([sendTen(senders[0]!, 'run'), sendTen(senders[1]!, 'backfill')]),
    );
    for (const sender of senders) sender.close();

    expect(sink.total() - before).toBe(20);
    expect(sink.duplicates()).toBe(0);
    // Twenty at 5 a second between them: 3.8 s from the first to the last, never 6 in a second.
    expect(sentAt.at(-1)! - sentAt[0]!).toBeGreaterThanOrEqual(3_800);
    expect(busiestWindow(sentAt, 1_000)).toBeLessThanOrEqual(5 + 1);
  });

  it('reports a send whose shared rate could not be reserved as throttled and not sent, never in doubt', async () => {
    let sends = 0;
    const failing: RateLimitStore = {
      reserve: () =>
        Promise.reject(new StoreError('reserve send rate', 'DynamoDB reservation failed after the retries')),
    };
    const sender = rateLimitedSender(
      { send: async () => void sends++ },
      new SharedRateLimiter({ store: failing, ratePerSecond: 5 }),
    );
    const error = await sender
      .send({ to: 'a@example.org', subject: 's', text: 't' })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EffectNotPerformedError);
    expect((error as EffectNotPerformedError).reason).toBe(NotPerformedReason.Throttled);
    expect((error as Error).message).toMatch(
      /no send slot could be reserved on the send rate .*nothing was sent/,
    );
    expect(sends).toBe(0);
  });
});
