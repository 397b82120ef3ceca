import { memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import { MemoryOperatorStore } from '../../shared/backends/memory/memory-operator-store.js';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import { TEST_SECRET } from '../helpers/harness.js';
import { describeWatchdogAudit } from './watchdog-audit-contract.js';
import { describeWatchdogInDoubt } from './watchdog-in-doubt-contract.js';

describeWatchdogAudit(
  'in-memory',
  async () => memoryBackend({ hashKey: hmacEffectKeys(TEST_SECRET) }).claims,
);

describeWatchdogInDoubt('in-memory', async () => {
  const backend = memoryBackend({ hashKey: hmacEffectKeys(TEST_SECRET) });
  return { ...backend, operator: new MemoryOperatorStore({ table: backend.table }) };
});
