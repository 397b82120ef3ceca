import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { dirname } from 'node:path';
import { Worker } from 'node:worker_threads';
import { SlotguardError } from '../shared/errors.js';

/** A DynamoDB API on loopback: nothing to install, gone when closed (unless it has a `path`). */
export interface EmbeddedDynamo {
  readonly endpoint: string;
  close(): Promise<void>;
}

/** How the embedded DynamoDB runs; every field has a default. */
export interface EmbeddedDynamoOptions {
  /**
   * Run dynalite on its own worker thread, so on a machine with two cores the server and the
   * replicas calling it do not share one event loop.
   * @default false
   */
  readonly thread?: boolean;
  /**
   * A LevelDB directory that keeps the tables across runs (`npm start -- serve` and the operator
   * CLI share `.slotguard/dynamodb`). One process at a time may open it.
   * @default in memory
   */
  readonly path?: string;
  /** @default 0, a free port */
  readonly port?: number;
}

/** The directory is held by another process (a running `npm start -- serve`, say). */
export class StateDirectoryLockedError extends SlotguardError {
  readonly path: string;
  constructor(path: string, options?: { cause?: unknown }) {
    super(
      `the local state ${path} is open in another process (is \`npm start -- serve\` running?); ` +
        'stop it, or point at its endpoint with --endpoint',
      options,
    );
    this.path = path;
  }
}

const require = createRequire(import.meta.url);

/**
 * dynalite's entry and its LevelDB's, resolved here so the worker finds them whatever the working
 * directory. Resolved when first needed, not on import: dynalite is a development dependency, and
 * the installed package's operator CLI imports this module without ever starting a server.
 */
function dynaliteModules(): { dynalite: string; level: string } {
  let dynalite: string;
  try {
    dynalite = require.resolve('dynalite');
  } catch (cause) {
    throw new SlotguardError(
      'the embedded DynamoDB needs dynalite, a development dependency of slotguard: run it from a checkout of ' +
        "slotguard's repository (npm ci), or point at a DynamoDB table with --table or --endpoint",
      { cause },
    );
  }
  return { dynalite, level: require.resolve('level', { paths: [dirname(dynalite)] }) };
}

/**
 * Starts dynalite (an open-source DynamoDB API server) bound to 127.0.0.1. With a `path` it first
 * opens the LevelDB itself to find out whether another process holds it: dynalite would only fail
 * at the first request, taking its process down.
 */
export async function startEmbeddedDynamo(options: EmbeddedDynamoOptions = {}): Promise<EmbeddedDynamo> {
  const serverOptions = {
    createTableMs: 0,
    deleteTableMs: 0,
    updateTableMs: 0,
    ...(options.path ? { path: options.path } : {}),
  };
  const modules = dynaliteModules();
  if (options.path) await assertUnlocked(options.path, modules.level);
  if (!options.thread) {
    const dynalite = require(modules.dynalite) as typeof import('dynalite').default;
    const server = dynalite(serverOptions);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port ?? 0, '127.0.0.1', resolve);
    });
    return {
      endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      close: () => new Promise<void>((resolve) => server.close(() => resolve())),
    };
  }
  const worker = new Worker(
    `const { workerData, parentPort } = require('node:worker_threads');
     const dynalite = require(workerData.dynalite);
     const server = dynalite(workerData.options);
     server.once('error', (error) => { throw error; });
     server.listen(workerData.port, '127.0.0.1', () => parentPort.postMessage(server.address().port));
     parentPort.on('message', () => server.close(() => parentPort.postMessage('closed')));`,
    {
      eval: true,
      workerData: { dynalite: modules.dynalite, options: serverOptions, port: options.port ?? 0 },
    },
  );
  const port = await new Promise<number>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  return {
    endpoint: `http://127.0.0.1:${port}`,
    async close() {
      // Closing the server first lets LevelDB flush and release its lock before the thread ends.
      if (options.path) {
        await new Promise<void>((resolve) => {
          worker.once('message', () => resolve());
          worker.postMessage('close');
        });
      }
      await worker.terminate();
    },
  };
}

async function assertUnlocked(path: string, level: string): Promise<void> {
  const { Level } = require(level) as {
    Level: new (path: string) => { open(): Promise<void>; close(): Promise<void> };
  };
  const db = new Level(path);
  try {
    await db.open();
  } catch (error) {
    throw new StateDirectoryLockedError(path, { cause: error });
  }
  await db.close();
}
