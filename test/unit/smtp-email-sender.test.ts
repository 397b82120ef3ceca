import type { AddressInfo, Socket } from 'node:net';
import { inspect } from 'node:util';
import { SMTPServer } from 'smtp-server';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { smtpSender } from '../../shared/effects/smtp-email-sender.js';
import { EffectNotPerformedError, NotPerformedReason } from '../../shared/errors.js';
import { safeErrorText } from '../../shared/telemetry/safe-error-text.js';

const address = 'alice@example.org';
const message = { to: address, subject: 'Your weekly report', text: 'Hello' };

/** What the server does with the next message. */
type Behaviour =
  | { readonly refuse: 'rcpt' | 'data'; readonly code: number; readonly text: (to: string) => string }
  | 'accept'
  | 'drop-after-data';

/**
 * A real SMTP server on loopback whose answer each test chooses: a refusal of the recipient or of the
 * data, quoting the address as real servers do, or a connection dropped once the whole message
 * is in, before any reply.
 */
let behaviour: Behaviour = 'accept';
let accepted = 0;
let dataReceived = 0;
const sockets = new Set<Socket>();
const server = new SMTPServer({
  authOptional: true,
  disabledCommands: ['STARTTLS', 'AUTH'],
  logger: false,
  disableReverseLookup: true,
  onRcptTo(recipient, _session, callback) {
    if (typeof behaviour === 'object' && behaviour.refuse === 'rcpt') {
      callback(Object.assign(new Error(behaviour.text(recipient.address)), { responseCode: behaviour.code }));
      return;
    }
    callback();
  },
  onData(stream, session, callback) {
    stream.on('data', () => {});
    stream.on('end', () => {
      dataReceived++;
      if (behaviour === 'drop-after-data') {
        // The server has the whole message and may deliver it; the client never hears back.
        for (const socket of sockets) socket.destroy();
        return;
      }
      if (typeof behaviour === 'object' && behaviour.refuse === 'data') {
        const to = session.envelope.rcptTo[0]?.address ?? '';
        callback(Object.assign(new Error(behaviour.text(to)), { responseCode: behaviour.code }));
        return;
      }
      accepted++;
      callback();
    });
  },
});
server.on('error', () => {});
server.server.on('connection', (socket: Socket) => {
  sockets.add(socket);
  socket.on('close', () => sockets.delete(socket));
});
let port = 0;

beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.server.address() as AddressInfo).port;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));
beforeEach(() => {
  accepted = 0;
  dataReceived = 0;
});

async function send(): Promise<Error> {
  const sender = smtpSender({ host: '127.0.0.1', port, maxConnections: 1 });
  try {
    const outcome = await sender.send(message).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(outcome).toBeInstanceOf(Error);
    const error = outcome as Error;
    // Everything a logger could print: message, stack, the cause and its own fields
    // (nodemailer's response, rejected, rejectedErrors), and the one-line text.
    expect(inspect(error, { depth: 10 })).not.toContain(address);
    expect(safeErrorText(error)).not.toContain(address);
    return error;
  } finally {
    sender.close();
  }
}

describe('smtpSender', () => {
  it('delivers the message when the server accepts it', async () => {
    behaviour = 'accept';
    const sender = smtpSender({ host: '127.0.0.1', port, maxConnections: 1 });
    await sender.send(message);
    sender.close();
    expect(accepted).toBe(1);
  });

  it.each([
    [
      550,
      (to: string) => `5.1.1 <${to}>: Recipient address rejected: no such user`,
      NotPerformedReason.Rejected,
      false,
    ],
    [553, (to: string) => `5.1.3 <${to}>: mailbox name not allowed`, NotPerformedReason.Rejected, false],
    [451, (to: string) => `4.7.1 <${to}>: try again later`, NotPerformedReason.Throttled, false],
    [421, (to: string) => `4.4.5 too many connections, try ${to} later`, NotPerformedReason.Throttled, false],
    [
      530,
      (to: string) => `5.7.0 authentication required to send to ${to}`,
      NotPerformedReason.Unauthorized,
      true,
    ],
  ])(
    'releases a recipient the server refused with %i, with its reason, and masks the address',
    async (code, text, reason, systemic) => {
      behaviour = { refuse: 'rcpt', code, text };
      const error = await send();
      expect(error).toBeInstanceOf(EffectNotPerformedError);
      expect((error as EffectNotPerformedError).reason).toBe(reason);
      expect((error as EffectNotPerformedError).systemic).toBe(systemic);
      expect(error.message).toContain(`${code} `);
      expect(error.message).toContain('<address>');
      expect((error.cause as { responseCode?: number }).responseCode).toBe(code);
      expect(dataReceived).toBe(0);
      expect(accepted).toBe(0);
    },
  );

  it('releases a message the server refused at the end of the data (no 250, so not accepted)', async () => {
    behaviour = { refuse: 'data', code: 554, text: (to) => `5.6.0 message for ${to} refused` };
    const error = await send();
    expect(error).toBeInstanceOf(EffectNotPerformedError);
    expect((error as EffectNotPerformedError).reason).toBe(NotPerformedReason.Rejected);
    expect(dataReceived).toBe(1);
    expect(accepted).toBe(0);
  });

  it('leaves the email in doubt when the connection drops after the data went out', async () => {
    behaviour = 'drop-after-data';
    const error = await send();
    expect(error).not.toBeInstanceOf(EffectNotPerformedError);
    expect(dataReceived).toBe(1);
  });
});
