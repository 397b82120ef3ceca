import { fileURLToPath } from 'node:url';
import { App, Duration, RemovalPolicy, Stack, Validations } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as rds from 'aws-cdk-lib/aws-rds';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { AwsSolutionsChecks } from 'cdk-nag';
import { PostgresClaims, PostgresEndpoint, ScheduledJob } from 'slotguard/cdk';
import { jobCatalog } from '../../functions/catalog.js';

const REPOSITORY_ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Options of `buildPostgresExample`. */
export interface PostgresExampleOptions {
  /**
   * How the functions authenticate: IAM database authentication to the proxy as `slotguard`, or
   * the `slotguard` user's secret.
   * @default 'iam'
   */
  readonly auth?: 'iam' | 'secret';
  /**
   * Where they connect: the RDS Proxy, or the cluster's writer endpoint directly.
   * @default 'proxy'
   */
  readonly via?: 'proxy' | 'cluster';
  /**
   * The directory the catalog's handler entries are relative to.
   * @default the repository root
   */
  readonly projectRoot?: string;
}

/** What `buildPostgresExample` built. */
export interface PostgresExample {
  readonly app: App;
  readonly stack: Stack;
  readonly vpc: ec2.Vpc;
  readonly cluster: rds.DatabaseCluster;
  readonly proxy: rds.DatabaseProxy;
  /** The `slotguard` user's secret: the proxy logs in with it, and so may the functions. */
  readonly userSecret: rds.DatabaseSecret;
  readonly claims: PostgresClaims;
  readonly jobs: readonly ScheduledJob[];
}

/**
 * The catalog's jobs on Postgres, for tests of PostgresClaims and as a model: a VPC (public subnets
 * for the NAT gateway, private ones with egress for the functions, the proxy and the rotation
 * functions, isolated ones for the database), Aurora Serverless v2 PostgreSQL with IAM
 * authentication, an RDS Proxy requiring TLS, and a `slotguard` database user whose secret the proxy
 * holds. The admin user runs the migration (docs/postgres.md); the functions connect as `slotguard`.
 * cdk-nag's AwsSolutions checks run over all of it.
 * @example const { app } = buildPostgresExample(new App(), { auth: 'iam' }); app.synth();
 */
export function buildPostgresExample(
  app: App = new App(),
  options: PostgresExampleOptions = {},
): PostgresExample {
  const stack = new Stack(app, 'SlotguardPostgres', {
    description: 'slotguard: exactly-once scheduled jobs with Postgres claims',
  });
  const vpc = new ec2.Vpc(stack, 'Vpc', {
    maxAzs: 2,
    natGateways: 1,
    subnetConfiguration: [
      { name: 'Public', subnetType: ec2.SubnetType.PUBLIC },
      { name: 'Private', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      { name: 'Database', subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
    ],
    flowLogs: { All: { trafficType: ec2.FlowLogTrafficType.ALL } },
  });
  const privateSubnets = { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS };

  const cluster = new rds.DatabaseCluster(stack, 'Database', {
    engine: rds.DatabaseClusterEngine.auroraPostgres({ version: rds.AuroraPostgresEngineVersion.VER_17_7 }),
    writer: rds.ClusterInstance.serverlessV2('Writer'),
    serverlessV2MinCapacity: 0.5,
    serverlessV2MaxCapacity: 4,
    vpc,
    vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
    credentials: rds.Credentials.fromGeneratedSecret('slotguard_admin'),
    defaultDatabaseName: 'app',
    // Not 5432: cdk-nag's RDS11. The functions reach it through the proxy, which listens on 5432.
    port: 5433,
    storageEncrypted: true,
    iamAuthentication: true,
    deletionProtection: true,
    removalPolicy: RemovalPolicy.SNAPSHOT,
    cloudwatchLogsExports: ['postgresql'],
  });
  cluster.addRotationSingleUser({ vpcSubnets: privateSubnets, automaticallyAfter: Duration.days(30) });

  // The runtime user, created by the operator with this secret's password (docs/postgres.md).
  // Single-user rotation: the user name must stay put, since the proxy matches IAM users to secrets
  // by name and the runtime reads the name once per cold start.
  const userSecret = new rds.DatabaseSecret(stack, 'SlotguardUserSecret', { username: 'slotguard' });
  const attachedUserSecret = userSecret.attach(cluster);
  new secretsmanager.SecretRotation(stack, 'SlotguardUserRotation', {
    application: secretsmanager.SecretRotationApplication.POSTGRES_ROTATION_SINGLE_USER,
    secret: attachedUserSecret,
    target: cluster,
    vpc,
    vpcSubnets: privateSubnets,
    automaticallyAfter: Duration.days(30),
  });
  const auth = options.auth ?? 'iam';

  const proxy = new rds.DatabaseProxy(stack, 'Proxy', {
    proxyTarget: rds.ProxyTarget.fromCluster(cluster),
    secrets: [attachedUserSecret],
    vpc,
    vpcSubnets: privateSubnets,
    // IAM authentication REQUIRED refuses password logins, so only with auth 'iam'.
    iamAuth: auth === 'iam',
    requireTLS: true,
    // slotguard's SET LOCAL runs inside the transaction it applies to: no reason to pin.
    sessionPinningFilters: [rds.SessionPinningFilter.EXCLUDE_VARIABLE_SETS],
  });
  cluster.connections.allowDefaultPortFrom(proxy, 'RDS Proxy to the cluster');

  const claims = new PostgresClaims(stack, 'Claims', {
    endpoint:
      (options.via ?? 'proxy') === 'proxy'
        ? PostgresEndpoint.fromProxy(proxy)
        : PostgresEndpoint.fromCluster(cluster),
    databaseName: 'app',
    schema: 'slotguard',
    ...(auth === 'iam' ? { iamAuthUser: 'slotguard' } : { secret: attachedUserSecret }),
    vpc,
    vpcSubnets: privateSubnets,
  });

  const jobs = jobCatalog.map(
    (job) =>
      new ScheduledJob(stack, job.id, {
        job,
        claims,
        ses: { identity: 'example.com', fromAddress: 'reports@example.com' },
        projectRoot: options.projectRoot ?? REPOSITORY_ROOT,
      }),
  );

  Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
  return { app, stack, vpc, cluster, proxy, userSecret, claims, jobs };
}
