import { type Duration, Validations } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import type { Construct } from 'constructs';
import type { ClaimsBackend, ClaimsBackendFunctionOptions } from './claims-backend.js';
import { BUNDLING_CONDITIONS } from './package-source.js';

/** How a function slotguard keeps one of per stack and claims backend (the watchdog, the SES event recorder) is built. */
export interface SlotguardServiceFunctionProps {
  /**
   * The directory holding the lock file and node_modules, with esbuild installed.
   * @default process.cwd()
   */
  readonly projectRoot?: string;
  /**
   * The lock file the bundling reads.
   * @default none: NodejsFunction looks for one in `projectRoot`
   */
  readonly depsLockFilePath?: string;
  /**
   * How long the function's logs are kept.
   * @default logs.RetentionDays.THREE_MONTHS
   */
  readonly logRetention?: logs.RetentionDays;
}

/** What differs between the functions `serviceFunction` builds. */
export interface ServiceFunctionSpec
  extends Pick<lambda.FunctionOptions, 'retryAttempts' | 'maxEventAge' | 'deadLetterQueue'> {
  /** Its role's description, e.g. `slotguard watchdog`. */
  readonly role: string;
  readonly description: string;
  /** The handler module (exports `handler`). */
  readonly entry: string;
  readonly timeout: Duration;
  /**
   * Variables beyond NODE_OPTIONS and the claims backend's.
   * @default none
   */
  readonly environment?: Record<string, string>;
}

/**
 * A function slotguard keeps one of per stack and claims backend, in `scope` (`Logs`, `FunctionRole`,
 * `Function`): 256 MB on arm64, bundled as the jobs' functions are, where `claims` asks for it (a
 * VPC), with a log group of its own and a role that writes to it alone, instead of
 * AWSLambdaBasicExecutionRole, whose log permissions span every log group.
 */
export function serviceFunction(
  scope: Construct,
  claims: ClaimsBackend,
  props: SlotguardServiceFunctionProps,
  spec: ServiceFunctionSpec,
): nodejs.NodejsFunction {
  const logGroup = new logs.LogGroup(scope, 'Logs', {
    retention: props.logRetention ?? logs.RetentionDays.THREE_MONTHS,
  });
  const role = new iam.Role(scope, 'FunctionRole', {
    assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
    description: spec.role,
  });
  logGroup.grantWrite(role);
  const backendOptions = claims.functionOptions?.(scope) ?? {};
  const { role: _role, environment, ...options } = spec;
  const fn = new nodejs.NodejsFunction(scope, 'Function', {
    ...options,
    ...(props.projectRoot ? { projectRoot: props.projectRoot } : {}),
    ...(props.depsLockFilePath ? { depsLockFilePath: props.depsLockFilePath } : {}),
    handler: 'handler',
    runtime: lambda.Runtime.NODEJS_24_X,
    architecture: lambda.Architecture.ARM_64,
    memorySize: 256,
    role,
    logGroup,
    ...slotguardVpcPlacement(backendOptions),
    environment: { NODE_OPTIONS: '--enable-source-maps', ...environment },
    bundling: slotguardBundling(backendOptions),
  });
  if (backendOptions.vpc) grantNetworkInterfaces(scope, role, fn);
  return fn;
}

/**
 * How every slotguard function is bundled (a job's, the watchdog's and the SES event recorder's): one minified ESM file by the
 * local esbuild, never Docker, with the AWS SDK v3 left to the runtime and the claims backend's
 * injected modules.
 */
export function slotguardBundling(backend: ClaimsBackendFunctionOptions): nodejs.BundlingOptions {
  return {
    // Never Docker: the construct has checked that esbuild is installed locally.
    forceDockerBundling: false,
    // `slotguard` in the handler resolves to the same form as this construct: sources or compiled.
    ...(BUNDLING_CONDITIONS.length ? { esbuildArgs: { '--conditions': BUNDLING_CONDITIONS.join(',') } } : {}),
    minify: true,
    sourceMap: true,
    format: nodejs.OutputFormat.ESM,
    mainFields: ['module', 'main'],
    // The Node.js runtime ships AWS SDK v3.
    externalModules: ['@aws-sdk/*'],
    // CommonJS dependencies bundled into ESM still call require().
    banner: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
    ...(backend.inject?.length ? { inject: [...backend.inject] } : {}),
  };
}

/** The VPC placement a claims backend asked for, as Lambda function props. */
export function slotguardVpcPlacement(
  backend: ClaimsBackendFunctionOptions,
): Pick<lambda.FunctionProps, 'vpc' | 'vpcSubnets' | 'securityGroups'> {
  if (!backend.vpc) return {};
  return {
    vpc: backend.vpc,
    ...(backend.vpcSubnets ? { vpcSubnets: backend.vpcSubnets } : {}),
    ...(backend.securityGroups ? { securityGroups: backend.securityGroups } : {}),
  };
}

/**
 * The EC2 actions Lambda needs to attach a function to a VPC, which it checks when the function is
 * created (hence the dependency): the EC2 part of AWSLambdaVPCAccessExecutionRole, without that
 * managed policy's log permissions on every log group. In a policy of its own
 * (`<scope>/NetworkInterfacePolicy`), so the one acknowledged wildcard belongs to it alone.
 */
export function grantNetworkInterfaces(scope: Construct, role: iam.IRole, fn: lambda.IFunction): void {
  const policy = new iam.Policy(scope, 'NetworkInterfacePolicy', {
    roles: [role],
    statements: [
      new iam.PolicyStatement({
        actions: [
          'ec2:CreateNetworkInterface',
          'ec2:DescribeNetworkInterfaces',
          'ec2:DescribeSubnets',
          'ec2:DeleteNetworkInterface',
          'ec2:AssignPrivateIpAddresses',
          'ec2:UnassignPrivateIpAddresses',
        ],
        resources: ['*'],
      }),
    ],
  });
  fn.node.addDependency(policy);
  Validations.of(policy).acknowledge({
    id: 'AwsSolutions-IAM5[Resource::*]',
    reason:
      "Lambda's VPC network-interface actions: the Describe actions take no resource, and the interfaces " +
      'Lambda creates have no ARN until they exist (the same statement as AWSLambdaVPCAccessExecutionRole).',
  });
}
