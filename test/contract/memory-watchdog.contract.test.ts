import { memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import { TEST_SECRET } from '../helpers/harness.js';
import { describeWatchdogAudit } from './watchdog-audit-contract.js';

describeWatchdogAudit(
  'in-memory',
  async () => memoryBackend({ hashKey: hmacEffectKeys(TEST_SECRET) }).claims,
);
