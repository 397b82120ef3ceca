import { fileURLToPath, pathToFileURL } from 'node:url';
import { App, Stack, Validations } from 'aws-cdk-lib';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as sns from 'aws-cdk-lib/aws-sns';
import { AwsSolutionsChecks } from 'cdk-nag';
import { ClaimsTable, ScheduledJob, SlotguardDashboard } from 'slotguard/cdk';
import { jobCatalog } from '../functions/catalog.js';

/** The repository root: job entries in the catalog are relative to it. */
const REPOSITORY_ROOT = fileURLToPath(new URL('..', import.meta.url));

/**
 * Context keys the example app reads (`cdk synth -c slotguard:sesIdentity=example.org`). Defaults
 * let it synthesise with no configuration at all.
 */
export const AppContext = {
  /** The verified SES identity the jobs send as. Default `example.com`. */
  sesIdentity: 'slotguard:sesIdentity',
  /** The From address. Default `reports@<sesIdentity>`. */
  sesFromAddress: 'slotguard:sesFromAddress',
  /** Emails per second per job. Default 1. */
  sendRatePerSecond: 'slotguard:sendRatePerSecond',
  /**
   * An SNS topic ARN the alarms that page notify (your pager; which page is ALARM_PAGING in
   * infra/paging.ts). Default: no alarm actions.
   */
  alarmTopicArn: 'slotguard:alarmTopicArn',
  /**
   * When the jobs were first deployed (ISO 8601), so the watchdog does not report the windows before
   * they existed (ScheduledJobProps.watchedSince). Default: none.
   */
  watchedSince: 'slotguard:watchedSince',
} as const;

/** Options of `buildApp`. */
export interface BuildAppOptions {
  /**
   * The directory the catalog's handler entries are relative to.
   * @default the repository root
   */
  readonly projectRoot?: string;
}

/** What `buildApp` built, for tests and for apps that add to it. */
export interface SlotguardApp {
  readonly app: App;
  readonly stack: Stack;
  readonly claims: ClaimsTable;
  readonly jobs: readonly ScheduledJob[];
  readonly dashboard: SlotguardDashboard;
}

/**
 * The example app: one ScheduledJob per jobCatalog entry, all sharing one ClaimsTable (and so one
 * watchdog), one dashboard, and cdk-nag's AwsSolutions checks over everything.
 * @example const { app } = buildApp(); app.synth();
 */
export function buildApp(app: App = new App(), options: BuildAppOptions = {}): SlotguardApp {
  const stack = new Stack(app, 'Slotguard', { description: 'slotguard: exactly-once scheduled jobs' });
  const claims = new ClaimsTable(stack, 'ClaimsTable');

  const sesIdentity = contextString(app, AppContext.sesIdentity) ?? 'example.com';
  const sesFromAddress = contextString(app, AppContext.sesFromAddress) ?? `reports@${sesIdentity}`;
  const sendRate = Number(contextString(app, AppContext.sendRatePerSecond) ?? 1);
  const topicArn = contextString(app, AppContext.alarmTopicArn);
  const alarmActions = topicArn
    ? [new actions.SnsAction(sns.Topic.fromTopicArn(stack, 'AlarmTopic', topicArn))]
    : [];
  const watchedSince = contextString(app, AppContext.watchedSince);

  const jobs = jobCatalog.map(
    (job) =>
      new ScheduledJob(stack, job.id, {
        job,
        claims,
        ses: { identity: sesIdentity, fromAddress: sesFromAddress, maxSendRatePerSecond: sendRate },
        alarmActions,
        ...(watchedSince ? { watchedSince: new Date(watchedSince) } : {}),
        projectRoot: options.projectRoot ?? REPOSITORY_ROOT,
      }),
  );
  const dashboard = new SlotguardDashboard(stack, 'Dashboard', { jobs });

  Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
  return { app, stack, claims, jobs, dashboard };
}

function contextString(app: App, key: string): string | undefined {
  const value: unknown = app.node.tryGetContext(key);
  return value === undefined || value === null || value === '' ? undefined : String(value);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  buildApp().app.synth();
}
