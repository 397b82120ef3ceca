import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';

/** A real SMTP server on loopback that accepts everything and counts deliveries per recipient. */
export interface SmtpSink {
  readonly host: string;
  readonly port: number;
  /** Messages accepted (end of DATA), per envelope recipient. */
  readonly received: ReadonlyMap<string, number>;
  /** Messages accepted in all. */
  total(): number;
  /** Recipients who received more than one message. */
  duplicates(): number;
  reset(): void;
  close(): Promise<void>;
}

/**
 * Starts the sink on 127.0.0.1. The counts the demo and the tests show are read from what this
 * server accepted, not from counters inside the job.
 */
export async function startSmtpSink(port = 0): Promise<SmtpSink> {
  const received = new Map<string, number>();
  let total = 0;
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    size: 64 * 1024,
    onData(stream, session, callback) {
      stream.on('data', () => {});
      stream.on('end', () => {
        for (const rcpt of session.envelope.rcptTo) {
          received.set(rcpt.address, (received.get(rcpt.address) ?? 0) + 1);
          total++;
        }
        callback();
      });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  // A client that dies mid-session (a SIGKILLed replica) resets its connection; that is the
  // client's failure, not the server's, so it must not crash the process hosting the sink.
  server.on('error', () => {});
  const address = server.server.address() as AddressInfo;
  return {
    host: '127.0.0.1',
    port: address.port,
    received,
    total: () => total,
    duplicates: () => [...received.values()].filter((n) => n > 1).length,
    reset() {
      received.clear();
      total = 0;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
