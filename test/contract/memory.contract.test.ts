import { memoryBackend } from '../../shared/backends/memory/memory-backend.js';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import { TEST_SECRET } from '../helpers/harness.js';
import { describeBackendContract } from './backend-contract.js';

const hashKey = hmacEffectKeys(TEST_SECRET);

// A new table per test; the simulation (test/simulation) runs the same store under faults.
describeBackendContract('in-memory', async () => memoryBackend({ hashKey }));
describeBackendContract('in-memory without ALL_OLD on conflict', async () =>
  memoryBackend({ hashKey, returnOldOnConflict: false }),
);
