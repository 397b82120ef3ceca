import type * as lambda from 'aws-cdk-lib/aws-lambda';

/**
 * Where a job's slot claims and effect ledger live, as the CDK sees it. `ClaimsTable` (DynamoDB)
 * is the one implementation today; a Postgres backend would grant its connection secret and set
 * its own environment variables in `bind`.
 */
export interface ClaimsBackend {
  /**
   * Gives `fn` access to job `jobId`'s claims and no other job's, and sets the environment
   * variables the runtime reads to find the store.
   */
  bind(fn: lambda.Function, jobId: string): void;
}
