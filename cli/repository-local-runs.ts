import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { findLocalJob, LOCAL_JOB_DEFAULTS } from '../functions/local-jobs.js';
import { StateDirectoryLockedError } from '../local/embedded-dynamo.js';
import { LOCAL_EFFECT_KEY_SECRET, LOCAL_TABLE_NAME, openLocalBackend } from '../local/local-backend.js';
import { LocalRunner } from '../local/local-runner.js';
import {
  DYNAMODB_STATE_DIR,
  isAlive,
  readServeState,
  SERVE_STATE_FILE,
  type ServeState,
} from '../local/serve.js';
import { type SmtpSink, startSmtpSink } from '../local/smtp-sink.js';
import { systemClock } from '../shared/clock.js';
import { hmacEffectKeys } from '../shared/effects/effect-key.js';
import { smtpSender } from '../shared/effects/smtp-email-sender.js';
import { RuntimeEnv } from '../shared/job/runtime-env.js';
import { SlotState } from '../shared/slot/ports.js';
import { type CliBackend, openCliBackend } from './cli-backend.js';
import { CliError, count, ExitCode, usageError } from './cli-support.js';
import type { CommandContext } from './command.js';
import type { LocalRuns } from './local-runs.js';
import type { WindowDelivery } from './window-delivery.js';

/**
 * The local runner's side of the operator CLI, in this repository only (see LocalRuns): the state
 * `npm start -- serve` keeps in `.slotguard/` is the default backend, and a window is run in this
 * process with the example app's job code (functions/local-jobs.ts) and mail to a local SMTP
 * server. bin/slotguard.mjs passes it in a checkout; nothing the package builds imports it.
 */
export const repositoryLocalRuns: LocalRuns = {
  backendOptions: {
    'state-dir': {
      type: 'string',
      value: 'DIR',
      help: 'the local state `npm start -- serve` keeps (default .slotguard)',
    },
  },
  deliveryOptions: {
    smtp: { type: 'string', value: 'HOST:PORT', help: 'local: the SMTP server mail goes to' },
    recipients: {
      type: 'string',
      value: 'N',
      help: `local: weekly report customers (default ${LOCAL_JOB_DEFAULTS.customers})`,
    },
    invoices: {
      type: 'string',
      value: 'N',
      help: `local: payment reminders per window (default ${LOCAL_JOB_DEFAULTS.invoicesPerWindow})`,
    },
  },
  deliveryHelp:
    'In this repository, without --function, the job runs in this process, one window at a time, through\n' +
    'the same handler as deployed (the local runner); mail goes to --smtp, else the running serve, else an\n' +
    'SMTP server started for it. Not against a table in AWS: there the deployed function must run it.',
  defaultBackendHelp: [
    '  With none of these: the running `npm start -- serve` (its endpoint is in .slotguard/serve.json), else',
    '  the tables it keeps in .slotguard/dynamodb.',
  ],
  openDefaultBackend: openStateDirectory,
  deliver: runInProcess,
};

/**
 * The state directory (`--state-dir`, default .slotguard): the endpoint of a running
 * `npm start -- serve` (from its serve.json), else the tables it keeps there.
 */
async function openStateDirectory(ctx: CommandContext): Promise<CliBackend> {
  const stateDir = ctx.text('state-dir') ?? '.slotguard';
  const serve = runningServe(stateDir);
  if (serve?.endpoint) {
    const region = ctx.text('region');
    const opened = await openCliBackend(
      {
        endpoint: serve.endpoint,
        table: serve.tableName ?? LOCAL_TABLE_NAME,
        ...(region ? { region } : {}),
      },
      ctx.env,
    );
    return {
      ...opened,
      description: `the running serve's DynamoDB (pid ${serve.pid}) at ${serve.endpoint}`,
      serveSmtp: serve.smtp,
    };
  }
  const path = join(stateDir, DYNAMODB_STATE_DIR);
  if (!existsSync(path)) {
    throw new CliError(
      ExitCode.Unreachable,
      `there is no local state in ${path}: nothing has run here yet. Start the jobs with \`npm start -- serve\`, ` +
        'or point at a DynamoDB with --endpoint URL or --table NAME',
    );
  }
  try {
    // On its own thread: closing it then releases the LevelDB lock for the next process.
    const local = await openLocalBackend({ path, thread: true });
    return {
      description: `the local state in ${path}`,
      slots: local.backend,
      operator: local.operator,
      local: true,
      close: local.close,
    };
  } catch (error) {
    if (error instanceof StateDirectoryLockedError)
      throw new CliError(ExitCode.Unreachable, error.message, { cause: error });
    throw error;
  }
}

/** serve.json, when the serve that wrote it is still running. */
function runningServe(stateDir: string): ServeState | undefined {
  const state = readServeState(join(stateDir, SERVE_STATE_FILE));
  // Stopped, or killed without cleaning up: its tables are on disk, not behind an endpoint.
  return state && !state.stoppedAt && isAlive(state.pid) ? state : undefined;
}

/**
 * In this process, through the same handler as deployed (the local runner, one replica, no faults),
 * one window at a time, oldest first. Effect keys are hashed with the local runs' secret (or
 * SLOTGUARD_EFFECT_KEY_SECRET), as `npm start` and serve hash them. Mail goes to --smtp, else the
 * running serve's server, else a server started for the run, whose counts are shown.
 */
async function runInProcess(
  ctx: CommandContext,
  jobId: string,
  backend: CliBackend,
  rows: WindowDelivery[],
): Promise<void> {
  const job = findLocalJob(jobId, {
    customers: positive(ctx.text('recipients'), 'recipients') ?? LOCAL_JOB_DEFAULTS.customers,
    invoicesPerWindow: positive(ctx.text('invoices'), 'invoices') ?? LOCAL_JOB_DEFAULTS.invoicesPerWindow,
  });
  const given = ctx.text('smtp');
  let target = backend.serveSmtp;
  if (given) {
    const match = /^([^:]+):(\d+)$/.exec(given);
    if (!match) throw usageError(`--smtp is ${JSON.stringify(given)}; give host:port, e.g. 127.0.0.1:2525`);
    target = { host: match[1]!, port: Number(match[2]) };
  }
  let sink: SmtpSink | undefined;
  if (!target) {
    sink = await startSmtpSink();
    target = { host: sink.host, port: sink.port };
    ctx.warn(
      `mail goes to an SMTP server started for this backfill on ${sink.host}:${sink.port}; its counts are shown`,
    );
  }
  const mail = target;
  const secret = ctx.env[RuntimeEnv.effectKeySecret] ?? LOCAL_EFFECT_KEY_SECRET;
  try {
    const runner = new LocalRunner({
      jobs: [job],
      backend: { ...backend.slots, hashKey: hmacEffectKeys(secret) },
      senderFor: (from) => smtpSender({ host: mail.host, port: mail.port, from, maxConnections: 8 }),
      ...(sink ? { sink } : {}),
      replicas: 1,
      clock: ctx.io.clock ?? systemClock,
    });
    // One window at a time: in the order the schedule would have run them.
    for (const row of rows) {
      const report = await runner.fire(job, row.window, { backfilled: true });
      row.report = report;
      row.ok = report.state === SlotState.Done;
      row.result =
        `${report.state} epoch ${report.epoch}; effects ${count(report.done)} done, ${count(report.inDoubt)} in doubt` +
        (report.delivered !== undefined ? `; ${count(report.delivered)} emails delivered` : '');
    }
  } finally {
    await sink?.close();
  }
}

function positive(value: string | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1)
    throw usageError(`--${name} is ${JSON.stringify(value)}; give a whole number of at least 1`);
  return n;
}
