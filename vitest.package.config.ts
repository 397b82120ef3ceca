import { defineConfig } from 'vitest/config';

/**
 * `npm run test:package`: the package as users get it (npm pack, a CDK app outside the repository).
 * Apart from `npm test` because it packs twice, typechecks and synthesises through the CDK CLI: a
 * couple of minutes on two cores. CI runs both (.ci/run). Nothing here imports `slotguard` by name:
 * the test drives the packed package in child processes.
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
