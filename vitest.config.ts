import { defaultServerConditions } from 'vite';
import { configDefaults, defineConfig } from 'vitest/config';
import { SOURCE_CONDITION } from './infra/package-source.js';

export default defineConfig({
  // `slotguard`, `slotguard/cdk`, … resolve to this repository's sources, not to a dist/ that a fresh
  // clone does not have (docs/packaging.md). Tests run in Vite's server (SSR) environment; the rest
  // is Vitest's own default, which leaves out `module` (the AWS SDK's bundler-only builds).
  ssr: {
    resolve: {
      conditions: [
        SOURCE_CONDITION,
        ...defaultServerConditions.filter((condition) => condition !== 'module'),
      ],
    },
  },
  test: {
    include: ['test/**/*.test.ts'],
    // The packed package in a scratch app takes minutes: `npm run test:package` (vitest.package.config.ts).
    exclude: [...configDefaults.exclude, 'test/package/**'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // Two cores: two test files at a time keeps each one's servers responsive.
    maxWorkers: 2,
    // Lambda runs Node 22; the SDK's notice about this machine's Node 20 would bury test output.
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  },
});
