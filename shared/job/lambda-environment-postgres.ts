import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import {
  assertSchemaName,
  createPostgresPool,
  DEFAULT_SCHEMA,
  PostgresRateLimitStore,
  postgresBackend,
  rdsIamPassword,
  readPostgresSecret,
  secretsManagerPassword,
} from '../backends/postgres/index.js';
import { lazyRateLimitStore } from '../effects/rate-limit-store.js';
import { ConfigurationError } from '../errors.js';
import { type EnvironmentSendRateStore, registerEnvironmentSendRateStore } from './environment-backend.js';
import {
  type Env,
  type EnvironmentBackend,
  registerEnvironmentBackend,
  requiredVariable,
} from './lambda-environment.js';
import { BACKEND_ENV, BackendKind, PostgresRuntimeEnv } from './runtime-env.js';

/**
 * The Postgres side of jobHandlerFromEnvironment, in a module of its own so that only the bundles
 * that include it include `pg`. Importing it registers the backend for `SLOTGUARD_BACKEND=postgres`;
 * PostgresClaims puts it in its functions' bundles with esbuild's `inject`, which evaluates it
 * before the handler module, so a job's handler.ts is the same for both backends.
 *
 * Why not a dynamic `import()` in lambda-environment.ts: NodejsFunction writes one file per
 * function (no code splitting), and esbuild inlines a dynamically imported module into that file,
 * so every DynamoDB-only bundle would carry `pg` and its dependencies (85 KB of the 114 KB this
 * module adds to a minified bundle) whether it ran them or not.
 */

/** How the function authenticates to the database, checked at cold start. */
type Authentication =
  | { readonly kind: 'secret'; readonly secretArn: string; readonly user: string | undefined }
  | { readonly kind: 'iam'; readonly user: string };

/**
 * The Postgres backend configured from PostgresRuntimeEnv: checks the variables at once and, on the
 * first invocation, opens a pool (TLS unless SLOTGUARD_PG_SSL=false) authenticated by the secret or
 * by an RDS IAM token per connection. The schema must have been migrated (see docs/postgres.md);
 * the runtime never creates tables.
 */
export const postgresBackendFromEnvironment: EnvironmentBackend = (env, context) => {
  const { schema, openPool } = postgresConnectionFromEnvironment(env);
  return async () => {
    const pool = await openPool({
      // Each effect in flight holds a connection for its reservation or mark; one more for the
      // lease renewal, so a renewal never queues behind the run's own effects.
      max: context.effectConcurrency + 1,
      applicationName: `slotguard-${context.jobId}`,
    });
    return postgresBackend({ pool, schema, hashKey: await context.hashKey() });
  };
};

/**
 * The job's send-rate timeline (SLOTGUARD_SEND_RATE_SCOPE=job) on the same database and schema, on
 * the database's clock: a pool of its own with one connection, opened on the first send, since a
 * worker has one reservation in flight at a time and the run's pool is sized to its effects.
 */
export const postgresSendRateStoreFromEnvironment: EnvironmentSendRateStore = (env, jobId) => {
  const { schema, openPool } = postgresConnectionFromEnvironment(env);
  return lazyRateLimitStore(
    async () =>
      new PostgresRateLimitStore({
        pool: await openPool({ max: 1, applicationName: `slotguard-${jobId}-send-rate` }),
        schema,
        jobId,
      }),
  );
};

registerEnvironmentBackend(BackendKind.Postgres, postgresBackendFromEnvironment);
registerEnvironmentSendRateStore(BackendKind.Postgres, postgresSendRateStoreFromEnvironment);

/**
 * The database PostgresRuntimeEnv names, checked at once, and a function that opens a pool on it
 * (TLS unless SLOTGUARD_PG_SSL=false), authenticated by the secret or by an RDS IAM token per
 * connection.
 */
function postgresConnectionFromEnvironment(env: Env) {
  const host = requiredVariable(env, PostgresRuntimeEnv.host);
  const port = portNumber(env);
  const database = requiredVariable(env, PostgresRuntimeEnv.database);
  const schema = schemaName(env);
  const ssl = booleanVariable(env, PostgresRuntimeEnv.ssl, true);
  const auth = authentication(env, ssl);
  const openPool = async (options: { max: number; applicationName: string }) => {
    const credentials =
      auth.kind === 'iam'
        ? {
            user: auth.user,
            password: rdsIamPassword({
              hostname: host,
              port,
              username: auth.user,
              ...(env.AWS_REGION ? { region: env.AWS_REGION } : {}),
            }),
          }
        : await secretCredentials(auth);
    return createPostgresPool({ host, port, database, ...credentials, ssl, ...options });
  };
  return { schema, openPool };
}

/**
 * The user from SLOTGUARD_PG_USER or the secret's `username`, and a password function that re-reads
 * the secret (cached five minutes), so a rotated password reaches new connections. The secret's
 * `host` is ignored: behind RDS Proxy it names the cluster, not the proxy the function must use.
 */
async function secretCredentials(auth: Extract<Authentication, { kind: 'secret' }>) {
  const client = new SecretsManagerClient({});
  const user = auth.user ?? (await readPostgresSecret(auth.secretArn, client)).user;
  return { user, password: secretsManagerPassword({ secretId: auth.secretArn, client }) };
}

function authentication(env: Env, ssl: boolean): Authentication {
  const secretArn = env[PostgresRuntimeEnv.secretArn] || undefined;
  const iam = booleanVariable(env, PostgresRuntimeEnv.iamAuth, false);
  if (secretArn && iam) {
    throw new ConfigurationError(
      PostgresRuntimeEnv.secretArn,
      `both ${PostgresRuntimeEnv.secretArn} and ${PostgresRuntimeEnv.iamAuth}=true are set; set one: the secret ` +
        'for password authentication, or IAM authentication',
    );
  }
  if (iam) {
    if (!ssl) {
      throw new ConfigurationError(
        PostgresRuntimeEnv.ssl,
        `${PostgresRuntimeEnv.iamAuth}=true with ${PostgresRuntimeEnv.ssl}=false; RDS accepts IAM authentication ` +
          `tokens over TLS only: unset ${PostgresRuntimeEnv.ssl}`,
      );
    }
    return { kind: 'iam', user: requiredVariable(env, PostgresRuntimeEnv.user) };
  }
  if (!secretArn) {
    throw new ConfigurationError(
      PostgresRuntimeEnv.secretArn,
      `${BACKEND_ENV} is postgres but neither ${PostgresRuntimeEnv.secretArn} nor ${PostgresRuntimeEnv.iamAuth}=true ` +
        'is set; PostgresClaims sets one of them (its `secret` or `iamAuthUser` prop)',
    );
  }
  return { kind: 'secret', secretArn, user: env[PostgresRuntimeEnv.user] || undefined };
}

function schemaName(env: Env): string {
  const schema = env[PostgresRuntimeEnv.schema] || DEFAULT_SCHEMA;
  try {
    assertSchemaName(schema);
  } catch (cause) {
    if (!(cause instanceof ConfigurationError)) throw cause;
    throw new ConfigurationError(
      PostgresRuntimeEnv.schema,
      `${PostgresRuntimeEnv.schema}: ${cause.message}`,
      {
        cause,
      },
    );
  }
  return schema;
}

function portNumber(env: Env): number {
  const raw = env[PostgresRuntimeEnv.port];
  if (raw === undefined || raw === '') return 5432;
  const port = Number(raw);
  if (!Number.isInteger(port) || port < 1 || port > 65_535) {
    throw new ConfigurationError(
      PostgresRuntimeEnv.port,
      `${PostgresRuntimeEnv.port} is ${JSON.stringify(raw)}; set a TCP port from 1 to 65535 (default 5432)`,
    );
  }
  return port;
}

function booleanVariable(env: Env, name: string, fallback: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (raw === 'true' || raw === 'false') return raw === 'true';
  throw new ConfigurationError(
    name,
    `${name} is ${JSON.stringify(raw)}; set "true" or "false" (default ${fallback})`,
  );
}
