import { fileURLToPath } from 'node:url';
import { App, Stack } from 'aws-cdk-lib';
import { BUNDLING_STACKS } from 'aws-cdk-lib/cx-api';
import { expect } from 'vitest';
import { InfraValidationError } from '../../infra/infra-validation-error.js';
import type { JobSpec } from '../../shared/job/job-spec.js';

/** The repository root, where the catalog's handler entries live. */
export const REPOSITORY_ROOT = fileURLToPath(new URL('../..', import.meta.url));

/**
 * A stack whose assets are not bundled (CDK's own `aws:cdk:bundling-stacks` context), for tests of
 * props and template shape that do not need real bundles. The example-app test bundles for real.
 */
export function stackWithoutBundling(): Stack {
  const app = new App({ context: { [BUNDLING_STACKS]: [] } });
  return new Stack(app, 'Test');
}

/**
 * A valid job. Its entry is an existing module (the catalog), since the construct checks the entry
 * exists; nothing is bundled in stacks from `stackWithoutBundling`.
 */
export function jobSpec(overrides: Partial<JobSpec> = {}): JobSpec {
  return {
    id: 'weekly-report',
    description: 'The weekly report',
    schedule: { expression: 'cron(0 9 ? * MON *)', timeZone: 'Europe/Moscow' },
    entry: 'functions/catalog.ts',
    leaseSeconds: 60,
    effectConcurrency: 16,
    timeoutSeconds: 900,
    maxAttempts: 3,
    ...overrides,
  };
}

/**
 * The InfraValidationError `build` throws in a stack from `stackWithoutBundling` (fails the test if
 * it throws nothing or something else).
 */
export function validationError(build: (stack: Stack) => void): InfraValidationError {
  const stack = stackWithoutBundling();
  try {
    build(stack);
  } catch (error) {
    expect(error).toBeInstanceOf(InfraValidationError);
    return error as InfraValidationError;
  }
  throw new Error('expected an InfraValidationError, got none');
}
