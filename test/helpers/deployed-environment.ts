import { RuntimeEnv } from '../../shared/job/runtime-env.js';

/**
 * A function's environment as Lambda would hand it over: CloudFormation resolves each token (a
 * table name, a queue URL, a secret ARN) to a real value. Here a token becomes a stand-in of the
 * right shape, because the runtime checks some of them at cold start (the queue URL must be a URL).
 */
export function resolvedEnvironment(variables: Record<string, unknown>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(variables).map(([name, value]) => [
      name,
      typeof value === 'string' ? value : (STAND_INS[name] ?? `resolved-${name}`),
    ]),
  );
}

const STAND_INS: Readonly<Record<string, string>> = {
  [RuntimeEnv.workQueueUrl]: 'https://sqs.eu-west-1.amazonaws.com/111111111111/resolved-work-queue',
};
