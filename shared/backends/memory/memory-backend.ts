import type { EffectKeyHasher } from '../../effects/effect-key.js';
import { JOB_DEFAULTS } from '../../job/job-spec.js';
import type { SlotBackend } from '../../job/run-slot.js';
import { MemoryClaimStore } from './memory-claim-store.js';
import { MemoryEffectLedger } from './memory-effect-ledger.js';
import { MemoryTable } from './memory-table.js';
import { directTransport, type MemoryTransport } from './memory-transport.js';

/** How to build an in-memory backend: its table, its transport, and the DynamoDB options it mirrors. */
export interface MemoryBackendOptions {
  readonly hashKey: EffectKeyHasher;
  /**
   * The items. Give several backends one table to model replicas of a service sharing one store,
   * each with its own transport (its own network and client).
   * @default a new, empty table
   */
  readonly table?: MemoryTable;
  /**
   * How this backend's requests reach the table and their replies come back.
   * @default directTransport (every request applied at once, every reply delivered)
   */
  readonly transport?: MemoryTransport;
  /**
   * Return the item that failed a condition with the failure (DynamoDB's ALL_OLD); off, a lost
   * race costs a separate read, as on dynalite.
   * @default true
   */
  readonly returnOldOnConflict?: boolean;
  /**
   * Record retention from the window, for the TTL attribute. Keep it equal to the run option.
   * @default 35
   */
  readonly retentionDays?: number;
}

/** The in-memory backend, with the table it writes to. */
export interface MemoryBackend extends SlotBackend {
  readonly claims: MemoryClaimStore;
  readonly ledger: MemoryEffectLedger;
  readonly table: MemoryTable;
}

/**
 * A claims backend in process memory with the DynamoDB adapter's conditional-write semantics, for
 * the deterministic simulation and for tests that need no server. It passes the same contract
 * suite as the DynamoDB and Postgres backends. Not for production: nothing is persisted.
 * @example
 * const table = new MemoryTable();
 * const replica = memoryBackend({ table, hashKey: hmacEffectKeys(secret), transport: replicaNetwork });
 */
export function memoryBackend(options: MemoryBackendOptions): MemoryBackend {
  const table = options.table ?? new MemoryTable();
  const retentionSeconds = (options.retentionDays ?? JOB_DEFAULTS.retentionDays) * 86_400;
  const shared = {
    table,
    transport: options.transport ?? directTransport,
    ...(options.returnOldOnConflict !== undefined
      ? { returnOldOnConflict: options.returnOldOnConflict }
      : {}),
  };
  return {
    claims: new MemoryClaimStore(shared),
    ledger: new MemoryEffectLedger({
      ...shared,
      expiresAtSeconds: (slot) => Math.ceil(Date.parse(slot.window) / 1000) + retentionSeconds,
    }),
    hashKey: options.hashKey,
    table,
  };
}
