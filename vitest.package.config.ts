import { defineConfig } from 'vitest/config';

/**
 * `npm run test:package`: the package as users get it (npm pack, a CDK app outside the repository).
 * Apart from `npm test`: it builds the package twice, typechecks and synthesises through the CDK
 * CLI, about 30 s on a quiet two-core machine and two minutes on a busy one, and its builds would
 * compete with the suite's servers for the same cores. CI runs both (.ci/run). Nothing here imports
 * `slotguard` by name: the test drives the packed package in child processes.
 */
export default defineConfig({
  test: {
    include: ['test/package/**/*.test.ts'],
    testTimeout: 180_000,
    hookTimeout: 240_000,
    pool: 'forks',
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  },
});
