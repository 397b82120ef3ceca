import { createServer } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { SESv2Client } from '@aws-sdk/client-sesv2';

/**
 * How the endpoint answers a request: `accept` as SES accepts a SendEmail (200 and a message id,
 * the request kept in `accepted`), an HTTP error as SES sends it, or a reset connection.
 */
export type SesAnswer =
  | 'accept'
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
  /** When it arrived (ISO 8601), by the system clock. */
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
  /** Every SendEmail accepted while the answer was `accept`, in order. */
  readonly accepted: readonly AcceptedSend[];
  /** Sets the answer to every request from now on. */
  answerWith(answer: SesAnswer): void;
  /** An SES v2 client pointed at this endpoint, SDK retries off as in production. */
  client(): SESv2Client;
  close(): Promise<void>;
}

/** Starts the endpoint on 127.0.0.1; it answers 500 InternalFailure until told otherwise. */
export async function startSesEndpoint(): Promise<SesEndpoint> {
  let answer: SesAnswer = { status: 500, errorType: 'InternalFailure', message: 'not set up' };
  let requests = 0;
  const accepted: AcceptedSend[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      requests++;
      if (answer === 'accept') {
        const send = acceptedSend(Buffer.concat(chunks).toString('utf8'), requests);
        accepted.push(send);
        response.writeHead(200, {
          'content-type': 'application/json',
          'x-amzn-requestid': `request-${requests}`,
        });
        response.end(JSON.stringify({ MessageId: send.messageId }));
        return;
      }
      if (answer === 'reset-after-request') {
        // SES has the whole request and may have acted on it; the reply never comes.
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
      answer = next;
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

/** A SendEmail request body (SES v2, REST-JSON) as the endpoint keeps it. */
function acceptedSend(body: string, n: number): AcceptedSend {
  const request = JSON.parse(body) as {
    Destination?: { ToAddresses?: string[] };
    EmailTags?: { Name: string; Value: string }[];
    ConfigurationSetName?: string;
  };
  return {
    messageId: `0102019${String(n).padStart(6, '0')}-local-ses-000000`,
    timestamp: new Date().toISOString(),
    to: request.Destination?.ToAddresses?.[0] ?? '',
    tags: request.EmailTags ?? [],
    configurationSet: request.ConfigurationSetName,
  };
}
