import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * The environment of a machine with no AWS credentials and no instance metadata to fall back on,
 * for a `cdk synth` (or any AWS-aware command) run as a child process. Docker must never be
 * needed: bundling uses the local esbuild, and CDK_DOCKER points at nothing.
 */
export function offlineEnvironment(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const name of Object.keys(env)) {
    if (/^AWS_/.test(name) || name === 'CDK_DOCKER') delete env[name];
  }
  return {
    ...env,
    AWS_EC2_METADATA_DISABLED: 'true',
    // Credential lookups see empty files, not the developer's ~/.aws.
    AWS_CONFIG_FILE: join(tmpdir(), 'slotguard-no-aws-config'),
    AWS_SHARED_CREDENTIALS_FILE: join(tmpdir(), 'slotguard-no-aws-credentials'),
    CDK_DISABLE_VERSION_CHECK: '1',
    CDK_DISABLE_CLI_TELEMETRY: 'true',
    CDK_DOCKER: join(tmpdir(), 'slotguard-docker-must-not-run'),
  };
}
