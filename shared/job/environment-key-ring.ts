import {
  GetSecretValueCommand,
  ResourceNotFoundException,
  SecretsManagerClient,
} from '@aws-sdk/client-secrets-manager';
import {
  type EffectKeyHasher,
  type EffectKeyRing,
  hmacEffectKeys,
  hmacKeyRing,
  unreadableVersion,
} from '../effects/effect-key.js';
import { ConfigurationError } from '../errors.js';
import { type Env, requiredVariable } from './environment-backend.js';
import { RuntimeEnv } from './runtime-env.js';

/** The version a secret given inline (SLOTGUARD_EFFECT_KEY_SECRET: local runs and tests) is known by. */
export const INLINE_KEY_VERSION = 'inline';

/**
 * The effect-key ring a function reads from its environment: the secret inline, as one version,
 * or the Secrets Manager secret the ScheduledJob construct names, whose versions are Secrets
 * Manager's own (its VersionId). The current version is AWSCURRENT when the ring is read; a window
 * pinned to an older one reads that version by its id, so rotating the secret (a new value with
 * `put-secret-value`) sends nobody of an open window a second email, as long as the old version
 * still exists (docs/operations.md says how long to keep it).
 */
export async function effectKeyRingFromEnvironment(env: Env): Promise<EffectKeyRing> {
  const inline = env[RuntimeEnv.effectKeySecret];
  if (inline) return hmacKeyRing({ current: INLINE_KEY_VERSION, secrets: { [INLINE_KEY_VERSION]: inline } });
  const arn = requiredVariable(env, RuntimeEnv.effectKeySecretArn);
  const client = new SecretsManagerClient({});
  const read = async (versionId?: string) => {
    const { SecretString, VersionId } = await client.send(
      new GetSecretValueCommand({ SecretId: arn, ...(versionId ? { VersionId: versionId } : {}) }),
    );
    if (!SecretString) {
      throw new ConfigurationError(
        RuntimeEnv.effectKeySecretArn,
        `secret ${arn}${versionId ? ` version ${versionId}` : ''} has no string value; store the key as text`,
      );
    }
    // Secrets Manager always names the version; a stand-in that does not is one unnamed version.
    return { version: VersionId ?? versionId ?? 'AWSCURRENT', hasher: hmacEffectKeys(SecretString) };
  };
  const current = await read();
  const hashers = new Map<string, EffectKeyHasher>([[current.version, current.hasher]]);
  return {
    current: current.version,
    async hasher(version) {
      const known = hashers.get(version);
      if (known) return known;
      try {
        const older = await read(version);
        hashers.set(version, older.hasher);
        return older.hasher;
      } catch (error) {
        // Gone for good (deleted, or never a version of this secret); anything else is retried.
        if (error instanceof ResourceNotFoundException) throw unreadableVersion(version, error);
        throw error;
      }
    },
  };
}
