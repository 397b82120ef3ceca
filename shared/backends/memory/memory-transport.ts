import type { Slot } from '../../slot/slot.js';
import type { StoreOperation } from './memory-table.js';

/** What a request to the in-memory table is about: enough for a transport to pick its fate, and for a trace. */
export interface MemoryRequest {
  readonly operation: StoreOperation;
  readonly slot: Slot;
  /** The grant the request is made under, if any. */
  readonly by?: { readonly owner: string; readonly epoch: number };
  /** The effect key hash it concerns, if it concerns one. */
  readonly keyHash?: string;
  /** The number of keys a batched mark carries. */
  readonly keys?: number;
}

/**
 * How requests travel between an adapter and the in-memory table: the network and the client's
 * retry policy in one. `execute` applies the request to the table, atomically, and returns its
 * reply. A transport may call it at once (directTransport), later (a slow network, a frozen
 * process), more than once (a client retry after a lost reply: the retried request then meets its
 * own write, as the SDK's retry does in DynamoDB), or not at all (throttled); and it may throw
 * instead of returning the reply. The adapters report whatever it throws as a StoreError, as the
 * DynamoDB adapter reports what the SDK throws after its retries.
 */
export interface MemoryTransport {
  send<R>(request: MemoryRequest, execute: () => R): Promise<R>;
}

/** Applies each request the moment it is sent and always delivers the reply: a healthy store. */
export const directTransport: MemoryTransport = {
  send: async (_request, execute) => execute(),
};
