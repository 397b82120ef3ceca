import { Lazy, RemovalPolicy } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import { Construct } from 'constructs';
import { leadingKeysPattern, TableLayout } from '../shared/backends/dynamodb/table-layout.js';
import { RuntimeEnv } from '../shared/job/runtime-env.js';
import { describe, JOB_ID_PATTERN } from '../shared/slot/slot.js';
import type { ClaimsBackend } from './claims-backend.js';
import { InfraValidationError } from './infra-validation-error.js';

/** Props of a `ClaimsTable`. */
export interface ClaimsTableProps {
  /**
   * What CloudFormation does with the table when it leaves the stack. The table is the record of
   * which windows ran and which emails went out; deleting it lets every retained fire run again.
   * @default RemovalPolicy.RETAIN
   */
  readonly removalPolicy?: RemovalPolicy;
  /**
   * A customer managed KMS key, for when you must control or revoke the key yourself.
   * @default the AWS managed key for DynamoDB (`aws/dynamodb`)
   */
  readonly encryptionKey?: kms.IKey;
  /**
   * DynamoDB deletion protection.
   * @default true unless `removalPolicy` is DESTROY
   */
  readonly deletionProtection?: boolean;
}

/**
 * The item-level actions the DynamoDB adapter performs. No Scan and no table-level action: the
 * LeadingKeys condition below only confines requests that name a partition key.
 */
export const CLAIMS_TABLE_ACTIONS = [
  'dynamodb:GetItem',
  'dynamodb:PutItem',
  'dynamodb:UpdateItem',
  'dynamodb:DeleteItem',
  'dynamodb:BatchWriteItem',
  'dynamodb:Query',
] as const;

/**
 * What a slot reader (the watchdog) does: a consistent GetItem of one window's slot record. No
 * Query: a slot record is one item, and an effect partition is not the reader's business.
 */
export const CLAIMS_TABLE_READER_ACTIONS = ['dynamodb:GetItem'] as const;

/**
 * What the SES event recorder does: a GetItem of an effect item, one conditional UpdateItem of it
 * (the provider's word), and a GetItem of it again when the condition fails without the old item.
 * No Put, no Delete: it never creates or removes a record. (It also reads the window's done marks:
 * CLAIMS_TABLE_DONE_MARKS_ACTIONS.)
 */
export const CLAIMS_TABLE_PROVIDER_WORD_ACTIONS = ['dynamodb:UpdateItem', 'dynamodb:GetItem'] as const;

/**
 * What reading a window's done marks takes: a Query of its slot partition (the window's item and
 * its shards'). Granted on its own with the attributes it may return (CLAIMS_TABLE_DONE_MARKS_ATTRIBUTES),
 * so a grantee that needs no other Query lists no effect records with it.
 */
export const CLAIMS_TABLE_DONE_MARKS_ACTIONS = ['dynamodb:Query'] as const;

/** The attributes a done-marks Query may name and return: the key and the marks. */
export const CLAIMS_TABLE_DONE_MARKS_ATTRIBUTES = [
  TableLayout.partitionKey,
  TableLayout.sortKey,
  TableLayout.doneMarksAttribute,
] as const;

/**
 * What the watchdog does to confirm a finished window's in-doubt effects from the provider's word:
 * GetItem of the slot record, a Query of the window's effect items, and the conditional UpdateItems
 * that record an accepted effect done and take it off the window's summary. No Put, no Delete.
 */
export const CLAIMS_TABLE_IN_DOUBT_CONFIRMER_ACTIONS = [
  'dynamodb:GetItem',
  'dynamodb:Query',
  'dynamodb:UpdateItem',
] as const;

/**
 * The DynamoDB table that holds every job's slot claims and effect ledger (layout in
 * shared/backends/dynamodb/table-layout.ts), one table shared by any number of jobs.
 *
 * - On-demand capacity: a job's writes come in bursts at its fire time and nothing in between.
 * - Point-in-time recovery on: the table is the exactly-once record.
 * - Encrypted with the AWS managed key by default: KMS encryption with key use visible in
 *   CloudTrail, at no key cost and with no key policy to get wrong. The table holds slot states and
 *   HMAC-hashed effect keys, never a raw address, so a customer key (`encryptionKey`) is only
 *   needed when policy requires controlling the key.
 * - Retained by default, and the table's construct id inside this construct never changes, so its
 *   logical ID stays put across slotguard upgrades. Renaming or moving *this* construct changes the
 *   logical ID: CloudFormation then creates a new, empty table (the old one is retained, orphaned).
 *
 * @example
 * const claims = new ClaimsTable(stack, 'ClaimsTable');
 * new ScheduledJob(stack, 'weekly-report', { job: weeklyReport, claims });
 */
export class ClaimsTable extends Construct implements ClaimsBackend {
  /** The underlying table. */
  readonly table: dynamodb.Table;
  /** Per grantee and action list, its one statement and the jobs' LeadingKeys patterns in it. */
  private readonly jobGrants = new Map<string, { patterns: string[]; grant: iam.Grant }>();
  private readonly granteeIds = new Map<iam.IGrantable, number>();

  constructor(scope: Construct, id: string, props: ClaimsTableProps = {}) {
    super(scope, id);
    const removalPolicy = props.removalPolicy ?? RemovalPolicy.RETAIN;
    // 'Table' is part of the table's logical ID: changing it replaces the table.
    this.table = new dynamodb.Table(this, 'Table', {
      partitionKey: { name: TableLayout.partitionKey, type: dynamodb.AttributeType.STRING },
      sortKey: { name: TableLayout.sortKey, type: dynamodb.AttributeType.STRING },
      billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
      timeToLiveAttribute: TableLayout.ttlAttribute,
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      ...(props.encryptionKey
        ? { encryption: dynamodb.TableEncryption.CUSTOMER_MANAGED, encryptionKey: props.encryptionKey }
        : { encryption: dynamodb.TableEncryption.AWS_MANAGED }),
      deletionProtection: props.deletionProtection ?? removalPolicy !== RemovalPolicy.DESTROY,
      removalPolicy,
    });
  }

  /**
   * Grants `grantee` the claim and ledger actions on items of job `jobId` only.
   *
   * `ForAllValues:StringLike` on `dynamodb:LeadingKeys` holds when every partition key a request
   * touches starts with `<jobId>#`. It is also true, vacuously, for a request that names no key
   * (a Scan), which is why the action list stays item-level.
   */
  grantClaims(grantee: iam.IGrantable, jobId: string): iam.Grant {
    this.checkGrantJobId('grantClaims', jobId);
    return iam.Grant.addToPrincipal({
      grantee,
      actions: [...CLAIMS_TABLE_ACTIONS],
      resourceArns: [this.table.tableArn],
      conditions: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [leadingKeysPattern(jobId)] } },
    });
  }

  /** Grants `fn` job `jobId`'s items and tells the runtime the table's name. */
  bind(fn: lambda.Function, jobId: string): void {
    this.grantClaims(fn, jobId);
    fn.addEnvironment(RuntimeEnv.tableName, this.table.tableName);
  }

  /**
   * Grants `grantee` GetItem on the items of job `jobId`, and of every job passed before for the
   * same grantee: one statement per grantee whose LeadingKeys condition lists each job's
   * `<jobId>#*`, so a watchdog of many jobs keeps one short policy. No write, no Query, no Scan.
   */
  grantSlotReads(grantee: iam.IGrantable, jobId: string): iam.Grant {
    this.checkGrantJobId('grantSlotReads', jobId);
    return this.grantPerJob(grantee, CLAIMS_TABLE_READER_ACTIONS, jobId);
  }

  /**
   * Grants `grantee` the SES event recorder's UpdateItem and GetItem on the items of job `jobId`,
   * and of every job passed before for the same grantee, in one statement as grantSlotReads does;
   * and, in a second such statement, the done marks it reads first (grantDoneMarkReads). No Put, no
   * Delete, no other Query, no Scan, and no effect-key secret: the tags carry the key hash.
   */
  grantProviderWords(grantee: iam.IGrantable, jobId: string): iam.Grant {
    this.checkGrantJobId('grantProviderWords', jobId);
    return this.grantPerJob(grantee, CLAIMS_TABLE_PROVIDER_WORD_ACTIONS, jobId).combine(
      this.grantDoneMarkReads(grantee, jobId),
    );
  }

  /**
   * Grants `grantee` a Query of the items of job `jobId` (and of every job passed before for the
   * same grantee, in one statement as grantSlotReads does) that names and returns nothing but the
   * key and the done marks (`dynamodb:Attributes`), and asks for them by name (`dynamodb:Select`):
   * what reading a window's done marks takes, and no effect record's content.
   */
  grantDoneMarkReads(grantee: iam.IGrantable, jobId: string): iam.Grant {
    this.checkGrantJobId('grantDoneMarkReads', jobId);
    return this.grantPerJob(grantee, CLAIMS_TABLE_DONE_MARKS_ACTIONS, jobId, {
      'ForAllValues:StringEquals': { 'dynamodb:Attributes': [...CLAIMS_TABLE_DONE_MARKS_ATTRIBUTES] },
      StringEqualsIfExists: { 'dynamodb:Select': 'SPECIFIC_ATTRIBUTES' },
    });
  }

  /** Grants `fn` the provider's word on job `jobId`'s effect records and tells the runtime the table's name. */
  bindProviderWords(fn: lambda.Function, jobId: string): void {
    this.grantProviderWords(fn, jobId);
    fn.addEnvironment(RuntimeEnv.tableName, this.table.tableName);
  }

  /**
   * Grants `grantee` the watchdog's confirmation of in-doubt effects (GetItem, Query and UpdateItem)
   * on the items of job `jobId`, and of every job passed before for the same grantee, in one
   * statement as grantSlotReads does.
   */
  grantInDoubtConfirmations(grantee: iam.IGrantable, jobId: string): iam.Grant {
    this.checkGrantJobId('grantInDoubtConfirmations', jobId);
    return this.grantPerJob(grantee, CLAIMS_TABLE_IN_DOUBT_CONFIRMER_ACTIONS, jobId);
  }

  /** Grants `fn` the watchdog's confirmation of job `jobId`'s in-doubt effects. */
  bindInDoubtConfirmer(fn: lambda.Function, jobId: string): void {
    this.grantInDoubtConfirmations(fn, jobId);
    fn.addEnvironment(RuntimeEnv.tableName, this.table.tableName);
  }

  /** Grants `fn` reads of job `jobId`'s slot records and tells the runtime the table's name. */
  bindReader(fn: lambda.Function, jobId: string): void {
    this.grantSlotReads(fn, jobId);
    fn.addEnvironment(RuntimeEnv.tableName, this.table.tableName);
  }

  /**
   * One statement per grantee and action list; jobs granted later join its LeadingKeys condition.
   * `conditions` are the statement's others, the same for every job (an action list has one set).
   */
  private grantPerJob(
    grantee: iam.IGrantable,
    actions: readonly string[],
    jobId: string,
    conditions: Record<string, Record<string, unknown>> = {},
  ): iam.Grant {
    let granteeId = this.granteeIds.get(grantee);
    if (granteeId === undefined) {
      granteeId = this.granteeIds.size;
      this.granteeIds.set(grantee, granteeId);
    }
    const key = `${granteeId} ${actions.join(' ')}`;
    const existing = this.jobGrants.get(key);
    if (existing) {
      existing.patterns.push(leadingKeysPattern(jobId));
      return existing.grant;
    }
    const patterns = [leadingKeysPattern(jobId)];
    const grant = iam.Grant.addToPrincipal({
      grantee,
      actions: [...actions],
      resourceArns: [this.table.tableArn],
      // Lazy: jobs bound after this one join the same condition.
      conditions: {
        'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': Lazy.list({ produce: () => [...patterns] }) },
        ...conditions,
      },
    });
    this.jobGrants.set(key, { patterns, grant });
    return grant;
  }

  private checkGrantJobId(method: string, jobId: string): void {
    if (!JOB_ID_PATTERN.test(jobId)) {
      // A pattern such as '*' would widen the condition to every job's items.
      throw new InfraValidationError(
        this,
        'jobId',
        `${method} jobId ${describe(jobId)} does not match ${JOB_ID_PATTERN}; pass the job's id ` +
          '(1-63 lower-case letters, digits or hyphens, a letter first)',
      );
    }
  }
}
