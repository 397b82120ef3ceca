import type { AddressInfo } from 'node:net';

/** What the server accepted, from one envelope sender or from all of them. */
export interface MailTally {
  /** Messages accepted (end of DATA), counted once per envelope recipient. */
  readonly total: number;
  /** Messages per envelope recipient. */
  readonly recipients: ReadonlyMap<string, number>;
  /** Messages beyond the first to any recipient. */
  readonly duplicates: number;
}

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
  /**
   * What one envelope sender got through. The local runner sends each window's mail from its own
   * address (`<job>.<window>@slotguard.local`), so this is one window's delivery report.
   */
  from(sender: string): MailTally;
  reset(): void;
  close(): Promise<void>;
}

/**
 * Starts the sink on 127.0.0.1. The counts the demo, the runner and the tests show are read from
 * what this server accepted, not from counters inside the job.
 */
export async function startSmtpSink(port = 0): Promise<SmtpSink> {
  // Loaded here, not on import: smtp-server is a development dependency, and the installed package's
  // operator CLI imports this module without ever starting a sink.
  const { SMTPServer } = await import('smtp-server');
  const received = new Map<string, number>();
  const bySender = new Map<string, Map<string, number>>();
  let total = 0;
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    size: 64 * 1024,
    onData(stream, session, callback) {
      stream.on('data', () => {});
      stream.on('end', () => {
        const mailFrom = session.envelope.mailFrom ? session.envelope.mailFrom.address : '';
        const senderTally = bySender.get(mailFrom) ?? new Map<string, number>();
        bySender.set(mailFrom, senderTally);
        for (const rcpt of session.envelope.rcptTo) {
          received.set(rcpt.address, (received.get(rcpt.address) ?? 0) + 1);
          senderTally.set(rcpt.address, (senderTally.get(rcpt.address) ?? 0) + 1);
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
    from(sender) {
      const recipients =
        bySender.get(sender.toLowerCase()) ?? bySender.get(sender) ?? new Map<string, number>();
      let count = 0;
      for (const n of recipients.values()) count += n;
      return { total: count, recipients, duplicates: count - recipients.size };
    },
    reset() {
      received.clear();
      bySender.clear();
      total = 0;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
