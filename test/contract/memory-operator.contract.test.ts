import { afterEach, expect } from 'vitest';
import { memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import { MemoryOperatorStore } from '../../shared/backends/memory/memory-operator-store.js';
import type { MemoryTable } from '../../shared/backends/memory/memory-table.js';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import { TEST_SECRET } from '../helpers/harness.js';
import { describeInDoubtResolverContract } from './in-doubt-resolver-contract.js';
import { describeOperatorContract } from './operator-contract.js';

const tables: MemoryTable[] = [];
// An operator reopens finished windows, which no run may: the table's protocol audit must tell the two apart.
afterEach(() => {
  for (const table of tables.splice(0)) expect(table.audit.violations).toEqual([]);
});

async function freshBackend() {
  const backend = memoryBackend({ hashKey: hmacEffectKeys(TEST_SECRET) });
  tables.push(backend.table);
  return { ...backend, operator: new MemoryOperatorStore({ table: backend.table }) };
}

describeOperatorContract('in-memory operator store', freshBackend);
describeInDoubtResolverContract('in-memory stores', freshBackend);
