import { createServer } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { SESv2Client } from '@aws-sdk/client-sesv2';

/**
 * How the endpoint answers a request: `accept` as SES accepts a SendEmail (200 and a message id,
 * the request kept in `accepted`); `accept-reply-lost`, accepted and kept the same, but the
 * connection reset before the reply (the sender cannot know SES took it); an HTTP error as SES
 * sends it; or `reset-after-request`, the connection reset with nothing kept (SES never acted).
 */
export type SesAnswer =
  | 'accept'
  | 'accept-reply-lost'
  | {
      readonly status: number;
      /** The error code, in the `x-amzn-ErrorType` header as AWS's REST-JSON services send it. */
      readonly errorType: string;
      readonly message: string;
    }
  | 'reset-after-request';

/** One SendEmail the endpoint accepted, as SES would have it: what its events are built from. */
export interface AcceptedSend {
  readonly messageId: string;
  /** When it arrived (ISO 8601), by the endpoint's `now`. */
  readonly timestamp: string;
  /** The first To address. */
  readonly to: string;
  readonly tags: readonly { readonly Name: string; readonly Value: string }[];
  readonly configurationSet: string | undefined;
}

/**
 * A loopback HTTP server that answers SES v2 API calls with the bytes SES would send for an error,
 * so a test exercises the SDK's own deserialization: which class or name an error arrives with is
 * what the classification relies on, and no mock can show it. SES itself cannot run locally.
 */
export interface SesEndpoint {
  /** Requests received in full (the body read). */
  readonly requests: number;
  /** Every SendEmail accepted (`accept`, `accept-reply-lost`), in order. */
  readonly accepted: readonly AcceptedSend[];
  /**
   * Sets the answer to every request from now on, or a function that picks it per request from its
   * first To address and how many requests for that address came so far, this one included.
   */
  answerWith(
    answer: SesAnswer | ((request: { readonly to: string; readonly attempt: number }) => SesAnswer),
  ): void;
  /** An SES v2 client pointed at this endpoint, SDK retries off as in production. */
  client(): SESv2Client;
  close(): Promise<void>;
}

/**
 * Starts the endpoint on 127.0.0.1; it answers 500 InternalFailure until told otherwise. `now` dates
 * what it accepts (a test's clock).
 */
export async function startSesEndpoint(options: { readonly now?: () => number } = {}): Promise<SesEndpoint> {
  const now = options.now ?? Date.now;
  let answerOf: (request: { readonly to: string; readonly attempt: number }) => SesAnswer = () => ({
    status: 500,
    errorType: 'InternalFailure',
    message: 'not set up',
  });
  let requests = 0;
  const attempts = new Map<string, number>();
  const accepted: AcceptedSend[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      requests++;
      const body = Buffer.concat(chunks).toString('utf8');
      const to = recipientOf(body);
      const attempt = (attempts.get(to) ?? 0) + 1;
      attempts.set(to, attempt);
      const answer = answerOf({ to, attempt });
      if (answer === 'accept' || answer === 'accept-reply-lost') {
        const send = acceptedSend(body, requests, now());
        accepted.push(send);
        if (answer === 'accept-reply-lost') {
          // SES has taken the message and will report it; the sender never learns that it did.
          request.socket.resetAndDestroy();
          return;
        }
        response.writeHead(200, {
          'content-type': 'application/json',
          'x-amzn-requestid': `request-${requests}`,
        });
        response.end(JSON.stringify({ MessageId: send.messageId }));
        return;
      }
      if (answer === 'reset-after-request') {
        // SES has the whole request and the sender cannot tell whether it acted; here it did not.
        request.socket.resetAndDestroy();
        return;
      }
      response.writeHead(answer.status, {
        'content-type': 'application/json',
        'x-amzn-errortype': answer.errorType,
        'x-amzn-requestid': `request-${requests}`,
      });
      response.end(JSON.stringify({ message: answer.message }));
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    get requests() {
      return requests;
    },
    accepted,
    answerWith(next) {
      answerOf = typeof next === 'function' ? next : () => next;
    },
    client: () =>
      new SESv2Client({
        region: 'eu-west-1',
        endpoint: `http://127.0.0.1:${port}`,
        maxAttempts: 1,
        credentials: { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'example' },
      }),
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/** What the endpoint reads of a SendEmail request body (SES v2, REST-JSON). */
interface SendEmailBody {
  readonly Destination?: { readonly ToAddresses?: readonly string[] };
  readonly EmailTags?: readonly { readonly Name: string; readonly Value: string }[];
  readonly ConfigurationSetName?: string;
}

function parsed(body: string): SendEmailBody {
  try {
    return JSON.parse(body) as SendEmailBody;
  } catch {
    return {};
  }
}

function recipientOf(body: string): string {
  return parsed(body).Destination?.ToAddresses?.[0] ?? '';
}

/** A SendEmail request body as the endpoint keeps it. */
function acceptedSend(body: string, n: number, at: number): AcceptedSend {
  const request = parsed(body);
  return {
    messageId: `0102019${String(n).padStart(6, '0')}-local-ses-000000`,
    timestamp: new Date(at).toISOString(),
    to: recipientOf(body),
    tags: request.EmailTags ?? [],
    configurationSet: request.ConfigurationSetName,
  };
}
