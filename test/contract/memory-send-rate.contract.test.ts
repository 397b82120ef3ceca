import { MemoryRateLimitStore } from '../../shared/backends/memory/memory-rate-limit-store.js';
import { describeSendRateContract } from './send-rate-contract.js';

// One map per job, shared by the job's workers as one DynamoDB item or Postgres row would be.
describeSendRateContract('in-memory', async () => {
  const store = new MemoryRateLimitStore();
  return { worker: () => store };
});
