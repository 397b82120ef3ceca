import type { EffectKeyHasher } from '../effects/effect-key.js';
import type { RateLimitStore } from '../effects/rate-limit-store.js';
import { ConfigurationError } from '../errors.js';
import type { SlotBackend } from './run-slot.js';
import { BACKEND_ENV, BackendKind } from './runtime-env.js';

/**
 * Which claims backend the environment names, and the registry of the backends other than
 * DynamoDB: the composition roots (jobHandlerFromEnvironment for a job's function, the watchdog's
 * handler) pick their backend here, so both read SLOTGUARD_BACKEND the same way and neither imports
 * `pg` unless a bundle registered it.
 */

/** The environment a handler is configured from: `process.env`, or a record in tests. */
export type Env = Readonly<Record<string, string | undefined>>;

/** What a backend built from the environment gets from the composition root that builds it. */
export interface EnvironmentBackendContext {
  /** The job the function serves (names its database sessions); the watchdog passes `watchdog`. */
  readonly jobId: string;
  /** The run's effect concurrency, which sizes a connection pool. */
  readonly effectConcurrency: number;
  /**
   * The effect-key hasher, from the secret read on first use: kept once read, read again by the
   * next call when a read fails.
   */
  readonly hashKey: () => Promise<EffectKeyHasher>;
}

/**
 * Builds a claims backend from the environment in two steps: the call checks the variables (so a
 * misconfigured function fails at cold start, naming the variable), and the function it returns
 * connects, on the first invocation.
 */
export type EnvironmentBackend = (env: Env, context: EnvironmentBackendContext) => () => Promise<SlotBackend>;

/**
 * Backends other than DynamoDB, registered by their own modules. This module never imports them,
 * not even with a dynamic `import()`: esbuild inlines a dynamic import into a single-file bundle, so
 * `pg` would ride along in every DynamoDB-only Lambda. See registerEnvironmentBackend.
 */
const registeredBackends = new Map<BackendKind, EnvironmentBackend>();

/**
 * Makes `SLOTGUARD_BACKEND=<kind>` available to jobHandlerFromEnvironment in this process.
 * shared/job/lambda-environment-postgres.ts registers the Postgres backend when it is imported;
 * PostgresClaims adds that module to its functions' bundles (esbuild's `inject`), so the handler
 * modules stay the same for both backends.
 * @example registerEnvironmentBackend('postgres', postgresBackendFromEnvironment)
 */
export function registerEnvironmentBackend(
  kind: Exclude<BackendKind, typeof BackendKind.DynamoDB>,
  build: EnvironmentBackend,
): void {
  registeredBackends.set(kind, build);
}

/**
 * Builds a job's send-rate timeline store (see SharedRateLimiter) from the environment: checks the
 * variables at once, connects on the first reservation.
 */
export type EnvironmentSendRateStore = (env: Env, jobId: string) => RateLimitStore;

/** The send-rate stores of the backends other than DynamoDB, registered next to the backends. */
const registeredSendRateStores = new Map<BackendKind, EnvironmentSendRateStore>();

/**
 * Makes the shared send rate (SLOTGUARD_SEND_RATE_SCOPE=job) available on `SLOTGUARD_BACKEND=<kind>`
 * in this process, as registerEnvironmentBackend does for the claims.
 * @example registerEnvironmentSendRateStore('postgres', postgresSendRateStoreFromEnvironment)
 */
export function registerEnvironmentSendRateStore(
  kind: Exclude<BackendKind, typeof BackendKind.DynamoDB>,
  build: EnvironmentSendRateStore,
): void {
  registeredSendRateStores.set(kind, build);
}

/** The send-rate store registered for `kind`, or a ConfigurationError saying how to include it. */
export function registeredSendRateStore(
  kind: Exclude<BackendKind, typeof BackendKind.DynamoDB>,
): EnvironmentSendRateStore {
  return lookUp(registeredSendRateStores, kind);
}

/** The backend SLOTGUARD_BACKEND names: DynamoDB when it is unset, or a ConfigurationError naming it. */
export function backendKind(env: Env): BackendKind {
  const raw = env[BACKEND_ENV];
  if (raw === undefined || raw === '') return BackendKind.DynamoDB;
  const kinds: readonly string[] = Object.values(BackendKind);
  if (!kinds.includes(raw)) {
    throw new ConfigurationError(
      BACKEND_ENV,
      `${BACKEND_ENV} is ${JSON.stringify(raw)}; set ${kinds.map((k) => JSON.stringify(k)).join(' or ')}, or leave ` +
        'it unset for DynamoDB',
    );
  }
  return raw as BackendKind;
}

/** How a bundle comes to include each registered backend: the fix when one is missing. */
const HOW_TO_INCLUDE: Record<Exclude<BackendKind, typeof BackendKind.DynamoDB>, string> = {
  postgres:
    'deploy the job with PostgresClaims, which injects shared/job/lambda-environment-postgres.ts into the ' +
    "function's bundle, or import that module before building the handler",
};

/** The builder registered for `kind`, or a ConfigurationError saying how to include it. */
export function registeredBackend(
  kind: Exclude<BackendKind, typeof BackendKind.DynamoDB>,
): EnvironmentBackend {
  return lookUp(registeredBackends, kind);
}

/** What `registry` holds for `kind`, or a ConfigurationError saying how to include that backend. */
function lookUp<T>(
  registry: ReadonlyMap<BackendKind, T>,
  kind: Exclude<BackendKind, typeof BackendKind.DynamoDB>,
): T {
  const build = registry.get(kind);
  if (build) return build;
  throw new ConfigurationError(
    BACKEND_ENV,
    `${BACKEND_ENV} is ${JSON.stringify(kind)} but this bundle does not include the ${kind} backend; ${HOW_TO_INCLUDE[kind]}`,
  );
}

/** The value of `name`, or a ConfigurationError naming it. */
export function requiredVariable(env: Env, name: string): string {
  const value = env[name];
  if (!value) throw new ConfigurationError(name, `${name} is not set; the ScheduledJob construct sets it`);
  return value;
}
