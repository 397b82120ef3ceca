import { connect, createServer, type Socket } from 'node:net';

/** A TCP proxy in front of a real server, whose connections a test can drop at will. */
export interface TcpProxy {
  readonly host: string;
  /** The port clients connect to instead of the server's. */
  readonly port: number;
  /** Connections open through the proxy right now. */
  readonly open: number;
  /** Connections dropped by `dropAll` so far. */
  readonly dropped: number;
  /**
   * Drops every open connection at once, as a network failure or a load balancer would: the
   * client's side is reset (it reads ECONNRESET), the server's side is closed (the server ends
   * that session and rolls back its open transaction). New connections are accepted as before.
   * Returns how many were dropped.
   */
  dropAll(): number;
  close(): Promise<void>;
}

/**
 * Starts a proxy on 127.0.0.1 that pipes each connection to `target`. Nothing in the protocol is
 * read or changed; only the connections' lives are in the test's hands.
 */
export async function startTcpProxy(target: {
  readonly host: string;
  readonly port: number;
}): Promise<TcpProxy> {
  const pairs = new Set<{ client: Socket; server: Socket }>();
  let dropped = 0;
  const proxy = createServer((client) => {
    const server = connect(target.port, target.host);
    const pair = { client, server };
    pairs.add(pair);
    const end = () => {
      pairs.delete(pair);
      client.destroy();
      server.destroy();
    };
    // Either side failing ends the pair; the other side then sees its connection close.
    client.on('error', end).on('close', end);
    server.on('error', end).on('close', end);
    client.pipe(server);
    server.pipe(client);
  });
  await new Promise<void>((resolve, reject) => {
    proxy.once('error', reject);
    proxy.listen(0, '127.0.0.1', () => resolve());
  });
  const address = proxy.address();
  if (typeof address !== 'object' || address === null) throw new Error('the TCP proxy has no address');
  return {
    host: '127.0.0.1',
    port: address.port,
    get open() {
      return pairs.size;
    },
    get dropped() {
      return dropped;
    },
    dropAll() {
      const open = [...pairs];
      pairs.clear();
      for (const { client, server } of open) {
        client.resetAndDestroy();
        server.destroy();
      }
      dropped += open.length;
      return open.length;
    },
    close() {
      for (const { client, server } of pairs) {
        client.destroy();
        server.destroy();
      }
      return new Promise<void>((resolve) => proxy.close(() => resolve()));
    },
  };
}
