import { Validations } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import type { Construct } from 'constructs';
import type { ClaimsBackendFunctionOptions } from './claims-backend.js';
import { BUNDLING_CONDITIONS } from './package-source.js';

/**
 * How every slotguard function is bundled (a job's and the watchdog's): one minified ESM file by the
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
