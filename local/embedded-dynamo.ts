import type { AddressInfo } from 'node:net';
import { Worker } from 'node:worker_threads';
import dynalite from 'dynalite';

/** A DynamoDB API on loopback, in memory: nothing to install, gone when closed. */
export interface EmbeddedDynamo {
  readonly endpoint: string;
  close(): Promise<void>;
}

/**
 * Starts dynalite (an open-source DynamoDB API server) bound to 127.0.0.1 on a free port.
 * `thread: true` runs it on its own worker thread, so on a machine with two cores the server and
 * the replicas calling it do not share one event loop.
 */
export async function startEmbeddedDynamo(options: { thread?: boolean } = {}): Promise<EmbeddedDynamo> {
  if (!options.thread) {
    const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return {
      endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      close: () => new Promise<void>((resolve) => server.close(() => resolve())),
    };
  }
  const worker = new Worker(
    `const dynalite = require('dynalite');
     const { parentPort } = require('node:worker_threads');
     const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
     server.listen(0, '127.0.0.1', () => parentPort.postMessage(server.address().port));`,
    { eval: true },
  );
  const port = await new Promise<number>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  return { endpoint: `http://127.0.0.1:${port}`, close: async () => void (await worker.terminate()) };
}
