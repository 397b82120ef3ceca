import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { Signer } from '@aws-sdk/rds-signer';
import { ConfigurationError } from '../../errors.js';

/**
 * Credentials for createPostgresPool's `password`, which pg calls for every new connection: so an
 * IAM token is always fresh (they last 15 minutes) and a rotated secret is picked up without a
 * restart. Both work through RDS Proxy (IAM authentication to the proxy, or the proxy's own secret).
 */

/** Where an RDS IAM token is for. */
export interface RdsIamAuthOptions {
  /** The instance's or the proxy's endpoint, exactly as the pool connects to it. */
  readonly hostname: string;
  /** @default 5432 */
  readonly port?: number;
  /** The database user, granted `rds_iam` and `rds-db:connect` for this user. */
  readonly username: string;
  /** @default the SDK's (AWS_REGION) */
  readonly region?: string;
}

/**
 * A password function that signs an RDS IAM authentication token per connection, with the default
 * AWS credential chain (the Lambda's or task's role). IAM authentication requires TLS: pass `ssl`
 * with the RDS CA bundle to createPostgresPool.
 * @example createPostgresPool({ host, user: 'slotguard', password: rdsIamPassword({ hostname: host, username: 'slotguard' }), ssl: { ca } })
 */
export function rdsIamPassword(options: RdsIamAuthOptions): () => Promise<string> {
  const signer = new Signer({
    hostname: options.hostname,
    port: options.port ?? 5432,
    username: options.username,
    ...(options.region ? { region: options.region } : {}),
  });
  return () => signer.getAuthToken();
}

/** The connection an RDS-managed Secrets Manager secret describes. */
export interface PostgresSecret {
  readonly host: string;
  readonly port: number;
  readonly user: string;
  readonly password: string;
  /** `dbname` in the secret, if it names one. */
  readonly database?: string;
}

/**
 * Reads an RDS database secret (`{ host, port, username, password, dbname }`, the JSON RDS and
 * the CDK's DatabaseSecret write).
 */
export async function readPostgresSecret(
  secretId: string,
  client: SecretsManagerClient = new SecretsManagerClient({}),
): Promise<PostgresSecret> {
  const { SecretString } = await client.send(new GetSecretValueCommand({ SecretId: secretId }));
  let parsed: Record<string, unknown>;
  try {
    parsed = JSON.parse(SecretString ?? '') as Record<string, unknown>;
  } catch (cause) {
    throw new ConfigurationError(
      'secretId',
      `secret ${secretId} is not JSON; point it at an RDS database secret ({ "host", "port", "username", "password" })`,
      { cause },
    );
  }
  const { host, port, username, password, dbname } = parsed;
  if (typeof host !== 'string' || typeof username !== 'string' || typeof password !== 'string') {
    throw new ConfigurationError(
      'secretId',
      `secret ${secretId} lacks host, username or password as strings; point it at an RDS database secret`,
    );
  }
  return {
    host,
    port: typeof port === 'number' ? port : Number(port ?? 5432),
    user: username,
    password,
    ...(typeof dbname === 'string' ? { database: dbname } : {}),
  };
}

/** Options of secretsManagerPassword. */
export interface SecretsManagerPasswordOptions {
  readonly secretId: string;
  /** @default a new SecretsManagerClient */
  readonly client?: SecretsManagerClient;
  /**
   * How long a read secret is reused before asking again (rotation is picked up after at most this).
   * @default 300_000
   */
  readonly cacheMs?: number;
}

/** A password function that reads (and caches) a Secrets Manager secret's password, for rotation. */
export function secretsManagerPassword(options: SecretsManagerPasswordOptions): () => Promise<string> {
  const client = options.client ?? new SecretsManagerClient({});
  const cacheMs = options.cacheMs ?? 300_000;
  let cached: { password: Promise<string>; at: number } | undefined;
  return () => {
    if (!cached || Date.now() - cached.at > cacheMs) {
      const password = readPostgresSecret(options.secretId, client).then((secret) => secret.password);
      cached = { password, at: Date.now() };
      // A failed read is not cached: the next connection asks again.
      password.catch(() => {
        cached = undefined;
      });
    }
    return cached.password;
  };
}
