import { Annotations, Arn, ArnFormat, Stack, Token, Tokenization } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as rds from 'aws-cdk-lib/aws-rds';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { Construct, type IConstruct } from 'constructs';
// Not the backend's index: that loads `pg`, which a CDK app need not have installed.
import {
  assertSchemaName,
  DEFAULT_SCHEMA,
  DEFAULT_TIMEOUTS,
  shortestLeaseMs,
} from '../shared/backends/postgres/postgres-settings.js';
import { ConfigurationError } from '../shared/errors.js';
import type { JobSpec } from '../shared/job/job-spec.js';
import { BACKEND_ENV, BackendKind, PostgresRuntimeEnv } from '../shared/job/runtime-env.js';
import { describe } from '../shared/slot/slot.js';
import type { ClaimsBackend, ClaimsBackendFunctionOptions } from './claims-backend.js';
import { InfraValidationError } from './infra-validation-error.js';
import { runtimeModulePath } from './package-source.js';

/**
 * The runtime half of the Postgres backend, injected into the bundle of every function that uses
 * PostgresClaims (see shared/job/lambda-environment-postgres.ts for why it is not imported).
 */
export const POSTGRES_RUNTIME_MODULE = runtimeModulePath('shared/job/lambda-environment-postgres');

/**
 * The Amazon CA bundle of the Lambda Node.js runtimes (20 and later), which no longer load it by
 * default. RDS and Aurora endpoints present certificates from the RDS CAs, which are in it and not in
 * Node's own store; RDS Proxy presents an ACM certificate, which Node trusts already.
 */
export const LAMBDA_RUNTIME_CA_BUNDLE = '/var/runtime/ca-cert.pem';

/** The port RDS Proxy listens on for PostgreSQL, whatever its targets' port. */
const PROXY_POSTGRES_PORT = 5432;

/** Database user names slotguard grants `rds-db:connect` for: no `*` or `?` can widen the grant. */
export const DATABASE_USER_PATTERN = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/** Options of `PostgresEndpoint.fromHost`. */
export interface PostgresHostOptions {
  /** The endpoint's DNS name. */
  readonly hostname: string;
  /**
   * The port the endpoint listens on.
   * @default 5432
   */
  readonly port?: number;
  /**
   * The security groups of what listens at the endpoint; the function is allowed in on `port`.
   * @default none: no ingress is added (synth warns), allow the functions in yourself
   */
  readonly securityGroups?: ec2.ISecurityGroup[];
  /**
   * The resource id IAM authentication names: `prx-…` (a proxy), `cluster-…` (an Aurora cluster) or
   * `db-…` (an instance). Required with `iamAuthUser`.
   * @default none: IAM authentication cannot be granted
   */
  readonly iamResourceId?: string;
  /**
   * Whether the endpoint presents an RDS CA certificate (an instance or cluster), so the function
   * loads the Lambda runtime's Amazon CA bundle to verify it.
   * @default true
   */
  readonly rdsCertificate?: boolean;
}

/**
 * Where PostgresClaims' functions connect: RDS Proxy (recommended for Lambda: it pools connections
 * across invocations), an Aurora cluster's writer endpoint, an RDS instance, or a host and port.
 */
export abstract class PostgresEndpoint {
  /**
   * An RDS Proxy in front of the database. For IAM authentication, create it with `iamAuth: true`;
   * for a secret, list that secret in its `secrets`. A proxy imported with `fromDatabaseProxyAttributes`
   * carries no connections: pass its security groups.
   */
  static fromProxy(proxy: rds.IDatabaseProxy, securityGroups?: ec2.ISecurityGroup[]): PostgresEndpoint {
    const connections = isConnectable(proxy)
      ? proxy.connections
      : securityGroups && new ec2.Connections({ securityGroups });
    return new (class extends PostgresEndpoint {
      readonly description = 'the RDS Proxy';
      readonly hostname = proxy.endpoint;
      readonly port = PROXY_POSTGRES_PORT;
      readonly connections = connections;
      readonly rdsCertificate = false;
      iamProblem() {
        return undefined;
      }
      grantConnect(grantee: iam.IGrantable & IConstruct, user: string) {
        return proxy.grantConnect(grantee, user);
      }
    })();
  }

  /** An Aurora PostgreSQL cluster's writer endpoint (claims are writes). */
  static fromCluster(cluster: rds.IDatabaseCluster): PostgresEndpoint {
    return new (class extends PostgresEndpoint {
      readonly description = 'the cluster';
      readonly hostname = cluster.clusterEndpoint.hostname;
      readonly port = cluster.clusterEndpoint.port;
      readonly connections = cluster.connections;
      readonly rdsCertificate = true;
      iamProblem() {
        try {
          void cluster.clusterResourceIdentifier;
          return undefined;
        } catch {
          return 'the imported cluster has no clusterResourceIdentifier; import it with one';
        }
      }
      grantConnect(grantee: iam.IGrantable & IConstruct, user: string) {
        return cluster.grantConnect(grantee, user);
      }
    })();
  }

  /** An RDS for PostgreSQL instance. */
  static fromInstance(instance: rds.IDatabaseInstance): PostgresEndpoint {
    return new (class extends PostgresEndpoint {
      readonly description = 'the instance';
      readonly hostname = instance.instanceEndpoint.hostname;
      readonly port = instance.instanceEndpoint.port;
      readonly connections = instance.connections;
      readonly rdsCertificate = true;
      iamProblem() {
        return instance.instanceResourceId
          ? undefined
          : 'the imported instance has no instanceResourceId; import it with one';
      }
      grantConnect(grantee: iam.IGrantable & IConstruct, user: string) {
        return instance.grantConnect(grantee, user);
      }
    })();
  }

  /** Any endpoint by name: a database in another account or app, or behind a DNS alias. */
  static fromHost(options: PostgresHostOptions): PostgresEndpoint {
    const resourceId = options.iamResourceId;
    return new (class extends PostgresEndpoint {
      readonly description = `host ${options.hostname}`;
      readonly hostname = options.hostname;
      readonly port = options.port ?? 5432;
      readonly connections =
        options.securityGroups && new ec2.Connections({ securityGroups: options.securityGroups });
      readonly rdsCertificate = options.rdsCertificate ?? true;
      iamProblem() {
        return resourceId ? undefined : 'fromHost was given no iamResourceId (the prx-, cluster- or db- id)';
      }
      grantConnect(grantee: iam.IGrantable & IConstruct, user: string) {
        return iam.Grant.addToPrincipal({
          grantee,
          actions: ['rds-db:connect'],
          resourceArns: [
            Arn.format(
              {
                service: 'rds-db',
                resource: 'dbuser',
                resourceName: `${resourceId}/${user}`,
                arnFormat: ArnFormat.COLON_RESOURCE_NAME,
              },
              Stack.of(grantee),
            ),
          ],
        });
      }
    })();
  }

  /** What the endpoint is, for messages. */
  abstract readonly description: string;
  /** The DNS name the functions connect to. */
  abstract readonly hostname: string;
  /** The port, possibly a token (a cluster's). */
  abstract readonly port: number;
  /** The security groups the functions must be allowed into, if known. */
  abstract readonly connections: ec2.Connections | undefined;
  /** Whether the endpoint's certificate comes from the RDS CAs (not in Node's own store). */
  abstract readonly rdsCertificate: boolean;
  /** Why IAM authentication cannot be granted here, or undefined when it can. */
  abstract iamProblem(): string | undefined;
  /** `rds-db:connect` as `user` on this endpoint's resource. */
  abstract grantConnect(grantee: iam.IGrantable & IConstruct, user: string): iam.Grant;
}

/** Props of `PostgresClaims`. */
export interface PostgresClaimsProps {
  /** Where the functions connect, e.g. `PostgresEndpoint.fromProxy(proxy)`. */
  readonly endpoint: PostgresEndpoint;
  /** The database that holds the schema. */
  readonly databaseName: string;
  /**
   * The schema `migrate` created (see docs/postgres.md: the migration is an operator step, the
   * functions never create tables).
   * @default 'slotguard'
   */
  readonly schema?: string;
  /**
   * Password authentication with an RDS database secret (`username`, `password`); the functions may
   * read it and re-read it every five minutes, so rotation reaches new connections.
   * @default none: set this or `iamAuthUser`
   */
  readonly secret?: secretsmanager.ISecret;
  /**
   * IAM database authentication as this database user (granted `rds_iam` in the database): the
   * functions get `rds-db:connect` for it on the endpoint's resource and sign a token per connection.
   * @default none: set this or `secret`
   */
  readonly iamAuthUser?: string;
  /** The VPC the database is reachable in. The functions run in it. */
  readonly vpc: ec2.IVpc;
  /**
   * The functions' subnets. They need a route to Secrets Manager, SES and CloudWatch (a NAT gateway,
   * or VPC endpoints for each).
   * @default Lambda's default selection: the VPC's private subnets
   */
  readonly vpcSubnets?: ec2.SubnetSelection;
  /**
   * The functions' security groups; the endpoint's security groups let them in on its port.
   * @default a new security group per function, all outbound traffic allowed
   */
  readonly securityGroups?: ec2.ISecurityGroup[];
  /**
   * TLS to the endpoint, verifying its certificate. IAM authentication requires it.
   * @default true
   */
  readonly ssl?: boolean;
}

/**
 * The Postgres claims backend for ScheduledJob: each job's function runs in the database's VPC, is
 * let in to the endpoint's security groups on its port, may read the secret or connect as the IAM
 * user, and gets the SLOTGUARD_PG_* variables; its bundle gets the Postgres runtime (and `pg`),
 * which DynamoDB-backed functions never carry. One PostgresClaims serves any number of jobs.
 *
 * Postgres cannot confine a function to its own job's rows the way ClaimsTable's IAM condition
 * does: every job using one PostgresClaims shares the database user's privileges on the schema.
 *
 * @example
 * const claims = new PostgresClaims(stack, 'Claims', {
 *   endpoint: PostgresEndpoint.fromProxy(proxy),
 *   databaseName: 'app',
 *   iamAuthUser: 'slotguard',
 *   vpc,
 * });
 * new ScheduledJob(stack, 'weekly-report', { job: weeklyReport, claims });
 */
export class PostgresClaims extends Construct implements ClaimsBackend {
  /** Where the functions connect. */
  readonly endpoint: PostgresEndpoint;
  /** The schema the functions use. */
  readonly schema: string;
  private readonly props: PostgresClaimsProps;
  private readonly ssl: boolean;
  /**
   * Functions already connected by `bindReader` or `bindProviderWords`, which run once per job a
   * function watches or records for.
   */
  private readonly sharedFunctions = new WeakSet<lambda.Function>();

  constructor(scope: Construct, id: string, props: PostgresClaimsProps) {
    super(scope, id);
    this.props = props;
    this.endpoint = props.endpoint;
    this.ssl = props.ssl ?? true;
    this.schema = this.validateSchema(props.schema ?? DEFAULT_SCHEMA);
    this.validateDatabaseName(props.databaseName);
    this.validateAuthentication(props);
    if (!props.endpoint.connections) {
      Annotations.of(this).addWarningV2(
        'slotguard:postgresIngressNotManaged',
        `PostgresClaims does not know the security groups of ${props.endpoint.description}, so it adds no ingress ` +
          `rule for the functions; pass securityGroups to PostgresEndpoint.fromHost/fromProxy, or allow the functions' ` +
          `security groups in on port ${Tokenization.stringifyNumber(props.endpoint.port)} yourself`,
      );
    }
  }

  /**
   * Puts the function in the VPC and injects the Postgres runtime into its bundle. For a job's
   * function (`spec` given), also checks the job's lease against the backend's timeouts: a claim
   * refuses a lease whose safety margin (a sixth of it) is shorter than the client-side deadline, or
   * which is shorter than three times the longest session timeout (shortestLeaseMs).
   */
  functionOptions(scope: IConstruct, spec?: Required<JobSpec>): ClaimsBackendFunctionOptions {
    if (spec) this.checkLease(scope, spec);
    return {
      vpc: this.props.vpc,
      ...(this.props.vpcSubnets ? { vpcSubnets: this.props.vpcSubnets } : {}),
      ...(this.props.securityGroups ? { securityGroups: this.props.securityGroups } : {}),
      inject: [POSTGRES_RUNTIME_MODULE],
    };
  }

  /**
   * Lets `fn` in to the endpoint on its port, grants it the secret or `rds-db:connect`, and sets
   * the variables the runtime reads. `jobId` names the ingress rule; the grants are the same for
   * every job (see the class comment).
   */
  bind(fn: lambda.Function, jobId: string): void {
    this.connect(fn, `slotguard job ${jobId} to Postgres`);
  }

  /**
   * Connects `fn` as `bind` does, once however many jobs it reads. The database user is the jobs'
   * own, so the reader is read-only by what its code runs, not by a grant: Postgres privileges are
   * per user, and PostgresClaims has one (see the class comment).
   */
  bindReader(fn: lambda.Function, _jobId: string): void {
    this.connectOnce(fn, 'watchdog');
  }

  /**
   * Connects `fn` as `bind` does, once however many jobs it records for: the SES event recorder
   * writes the provider's word with the jobs' own database user (see the class comment).
   */
  bindProviderWords(fn: lambda.Function, _jobId: string): void {
    this.connectOnce(fn, 'SES event recorder');
  }

  private connectOnce(fn: lambda.Function, role: string): void {
    if (this.sharedFunctions.has(fn)) return;
    this.sharedFunctions.add(fn);
    this.connect(fn, `slotguard ${role} ${fn.node.path} to Postgres`.slice(0, 255));
  }

  private connect(fn: lambda.Function, ingressDescription: string): void {
    const { endpoint, secret, iamAuthUser } = this.props;
    endpoint.connections?.allowFrom(fn, ec2.Port.tcp(endpoint.port), ingressDescription);
    fn.addEnvironment(BACKEND_ENV, BackendKind.Postgres);
    fn.addEnvironment(PostgresRuntimeEnv.host, endpoint.hostname);
    fn.addEnvironment(PostgresRuntimeEnv.port, Tokenization.stringifyNumber(endpoint.port));
    fn.addEnvironment(PostgresRuntimeEnv.database, this.props.databaseName);
    fn.addEnvironment(PostgresRuntimeEnv.schema, this.schema);
    fn.addEnvironment(PostgresRuntimeEnv.ssl, String(this.ssl));
    if (this.ssl && endpoint.rdsCertificate)
      fn.addEnvironment('NODE_EXTRA_CA_CERTS', LAMBDA_RUNTIME_CA_BUNDLE);
    if (iamAuthUser !== undefined) {
      endpoint.grantConnect(fn, iamAuthUser);
      fn.addEnvironment(PostgresRuntimeEnv.iamAuth, 'true');
      fn.addEnvironment(PostgresRuntimeEnv.user, iamAuthUser);
    } else if (secret) {
      secret.grantRead(fn);
      fn.addEnvironment(PostgresRuntimeEnv.secretArn, secret.secretArn);
    }
  }

  private checkLease(job: IConstruct, spec: Required<JobSpec>): void {
    const minimumSeconds = Math.ceil(shortestLeaseMs(DEFAULT_TIMEOUTS) / 1000);
    if (spec.leaseSeconds < minimumSeconds) {
      throw new InfraValidationError(
        job,
        'job.leaseSeconds',
        `job.leaseSeconds is ${spec.leaseSeconds}, shorter than the Postgres backend's minimum of ${minimumSeconds} ` +
          `(its client-side deadline, ${DEFAULT_TIMEOUTS.deadlineMs} ms, must fit in the run's safety margin, a sixth ` +
          'of the lease, and the lease must be three times its longest session timeout): every claim would be ' +
          `refused; set job.leaseSeconds to ${minimumSeconds} or more`,
      );
    }
  }

  private validateSchema(schema: string): string {
    try {
      assertSchemaName(schema);
    } catch (cause) {
      if (!(cause instanceof ConfigurationError)) throw cause;
      throw new InfraValidationError(this, 'schema', cause.message, { cause });
    }
    return schema;
  }

  private validateDatabaseName(databaseName: string): void {
    if (Token.isUnresolved(databaseName)) return;
    if (databaseName.length < 1 || databaseName.length > 63 || databaseName.includes('\0')) {
      throw new InfraValidationError(
        this,
        'databaseName',
        `databaseName ${describe(databaseName)} is not a PostgreSQL database name; give the database's name, ` +
          '1-63 characters (for example "app")',
      );
    }
  }

  private validateAuthentication(props: PostgresClaimsProps): void {
    const { secret, iamAuthUser } = props;
    if (secret && iamAuthUser !== undefined) {
      throw new InfraValidationError(
        this,
        'iamAuthUser',
        `both secret and iamAuthUser ${describe(iamAuthUser)} are set; set one: secret for password ` +
          'authentication, or iamAuthUser for IAM database authentication',
      );
    }
    if (!secret && iamAuthUser === undefined) {
      throw new InfraValidationError(
        this,
        'secret',
        'neither secret nor iamAuthUser is set; set secret (an RDS database secret with username and password) ' +
          'or iamAuthUser (the database user the functions connect as with IAM database authentication)',
      );
    }
    if (iamAuthUser === undefined) return;
    if (!DATABASE_USER_PATTERN.test(iamAuthUser)) {
      throw new InfraValidationError(
        this,
        'iamAuthUser',
        `iamAuthUser ${describe(iamAuthUser)} is not a database user name slotguard grants rds-db:connect for: ` +
          `it must match ${DATABASE_USER_PATTERN} (a wildcard would let the functions connect as any user); ` +
          'give the one user, e.g. "slotguard"',
      );
    }
    if (!this.ssl) {
      throw new InfraValidationError(
        this,
        'ssl',
        `ssl is false with iamAuthUser ${describe(iamAuthUser)}; RDS accepts IAM authentication tokens over TLS only: ` +
          'leave ssl unset (true)',
      );
    }
    const problem = props.endpoint.iamProblem();
    if (problem) {
      throw new InfraValidationError(
        this,
        'endpoint',
        `iamAuthUser ${describe(iamAuthUser)} needs the resource id of ${props.endpoint.description}, but ${problem}; ` +
          'or use secret instead',
      );
    }
  }
}

function isConnectable(value: object): value is ec2.IConnectable {
  return 'connections' in value && value.connections instanceof ec2.Connections;
}
