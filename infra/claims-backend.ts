import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type { IConstruct } from 'constructs';
import type { JobSpec } from '../shared/job/job-spec.js';

/**
 * Where a job's slot claims and effect ledger live, as the CDK sees it: `ClaimsTable` (DynamoDB)
 * or `PostgresClaims` (Postgres on RDS or Aurora, directly or through RDS Proxy).
 */
export interface ClaimsBackend {
  /**
   * What a function must be created with, asked before it is created: a Lambda function's VPC and
   * its bundle are fixed at creation, and `bind` or `bindReader` comes after. ScheduledJob asks for
   * its job's function, passing the job (`spec`): the place to check the job against the
   * backend's limits, throwing an InfraValidationError naming `scope` (the ScheduledJob) and the
   * prop. The watchdog and the SES event recorder ask for their own functions with no `spec`.
   *
   * Optional: a backend without it (ClaimsTable) gets functions outside any VPC, bundled from the
   * handler entry alone.
   */
  functionOptions?(scope: IConstruct, spec?: Required<JobSpec>): ClaimsBackendFunctionOptions;
  /**
   * Gives `fn` access to job `jobId`'s claims and no other job's, and sets the environment
   * variables the runtime reads to find the store.
   */
  bind(fn: lambda.Function, jobId: string): void;
  /**
   * Gives `fn` read access to job `jobId`'s slot records (the watchdog reads them to find windows
   * that never ran or never finished) and sets the variables the runtime reads to find the store.
   * Called once per job a function watches, so one function may read several jobs' records.
   */
  bindReader(fn: lambda.Function, jobId: string): void;
  /**
   * Gives `fn` the one write of the SES event recorder on job `jobId`'s effect records (the
   * provider's word, conditioned on the record; a read back when the condition fails) and nothing
   * else of the job's, and sets the variables the runtime reads to find the store. Called once per
   * job a function records for, so one function may write several jobs' words.
   */
  bindProviderWords(fn: lambda.Function, jobId: string): void;
}

/** What a claims backend needs the job's function to be created with. */
export interface ClaimsBackendFunctionOptions {
  /**
   * The VPC the function runs in, to reach a database with no public endpoint. ScheduledJob then
   * grants the function's role the network-interface actions Lambda checks at creation.
   * @default not in a VPC
   */
  readonly vpc?: ec2.IVpc;
  /**
   * Where in `vpc`.
   * @default Lambda's default selection: the VPC's private subnets
   */
  readonly vpcSubnets?: ec2.SubnetSelection;
  /**
   * The function's security groups in `vpc`.
   * @default a new security group for the function, all outbound traffic allowed
   */
  readonly securityGroups?: ec2.ISecurityGroup[];
  /**
   * Modules esbuild evaluates before the handler module (its `inject` option), by absolute path:
   * how a backend adds its runtime part, e.g. shared/job/lambda-environment-postgres.ts, to the
   * functions that use it without every handler module importing it.
   * @default none
   */
  readonly inject?: readonly string[];
}
