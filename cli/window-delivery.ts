import { randomUUID } from 'node:crypto';
import { InvokeCommand, LambdaClient, LambdaServiceException } from '@aws-sdk/client-lambda';
import { findLocalJob, LOCAL_JOB_DEFAULTS } from '../functions/local-jobs.js';
import { LocalRunner, type WindowReport } from '../local/local-runner.js';
import { type SmtpSink, startSmtpSink } from '../local/smtp-sink.js';
import { systemClock } from '../shared/clock.js';
import { smtpSender } from '../shared/effects/smtp-email-sender.js';
import type { SlotBackend } from '../shared/job/run-slot.js';
import type { SchedulerEvent } from '../shared/job/scheduler-event.js';
import { SlotState } from '../shared/slot/ports.js';
import { windowOf } from '../shared/slot/slot.js';
import type { CliBackend } from './cli-backend.js';
import { CliError, count, ExitCode, usageError } from './cli-support.js';
import type { CommandContext } from './command.js';

/** One window to deliver, and what became of its delivery (filled in by deliverWindows). */
export interface WindowDelivery {
  readonly window: Date;
  /**
   * One line for the table: `queued (202)`, `DONE epoch 2; effects 3 done, 0 in doubt`.
   * @default unset until the window is delivered
   */
  result?: string;
  /**
   * In-process deliveries: the window's report, counted from the store and the SMTP server.
   * @default unset (and never set by an invoke)
   */
  report?: WindowReport;
  /**
   * Queued (AWS), or finished DONE (in process).
   * @default unset until the window is delivered
   */
  ok?: boolean;
}

/**
 * Refuses, before anything is read or written, to run a job in this process against a table in
 * AWS: there the deployed function must do it (`--function`).
 */
export function assertDeliverable(ctx: CommandContext, command: string, alternative?: string): void {
  const inAws = ctx.text('table') !== undefined && !ctx.text('endpoint') && !ctx.env.DYNAMODB_ENDPOINT;
  if (inAws && !ctx.text('function')) {
    throw usageError(
      `table ${ctx.text('table')} is in AWS: ${command} there invokes the deployed function; pass --function NAME ` +
        `(the schedule's target, as \`slotguard schedules list\` shows it)${alternative ? `, or ${alternative}` : ''}. ` +
        'Nothing was read or written.',
    );
  }
}

/**
 * Delivers each window again, oldest first, the way the schedule would: with `--function`, an
 * asynchronous invoke of the deployed function per window (its event carries the window's
 * scheduled time and `backfilled: true`); otherwise in this process, through the same handler as
 * deployed (the local runner), with mail to `--smtp`, the running serve's server, or one started
 * for it. `purpose` prefixes the execution id the slot records.
 */
export async function deliverWindows(
  ctx: CommandContext,
  purpose: 'backfill' | 'redrive',
  jobId: string,
  backend: CliBackend,
  rows: WindowDelivery[],
): Promise<void> {
  const functionName = ctx.text('function');
  if (functionName) await invokeDeployed(ctx, purpose, jobId, functionName, rows);
  else await runLocally(ctx, jobId, backend.slots, backend.serveSmtp, rows);
}

/** As Scheduler does: an asynchronous invoke (InvocationType Event) per window, oldest first. */
async function invokeDeployed(
  ctx: CommandContext,
  purpose: 'backfill' | 'redrive',
  jobId: string,
  functionName: string,
  rows: WindowDelivery[],
): Promise<void> {
  const region = ctx.text('region');
  const lambda = new LambdaClient({ ...(region ? { region } : {}), maxAttempts: 3 });
  try {
    for (const row of rows) {
      const event: SchedulerEvent = {
        jobId,
        scheduledTime: windowOf(row.window),
        // The execution id says who delivered it, in the slot record and the function's logs.
        executionId: `${purpose}-${randomUUID()}`,
        attemptNumber: '1',
        backfilled: true,
      };
      try {
        const response = await lambda.send(
          new InvokeCommand({
            FunctionName: functionName,
            InvocationType: 'Event',
            Payload: new TextEncoder().encode(JSON.stringify(event)),
          }),
        );
        row.ok = response.StatusCode === 202;
        row.result = row.ok ? 'queued (202)' : `not queued (status ${response.StatusCode})`;
      } catch (error) {
        if (error instanceof LambdaServiceException && rows.indexOf(row) === 0) {
          throw new CliError(
            ExitCode.Unreachable,
            `invoking ${functionName} failed (${error.name}: ${error.message}); check --function, --region and ` +
              'lambda:InvokeFunction on it. Nothing was invoked.',
            { cause: error },
          );
        }
        row.ok = false;
        row.result = `failed: ${error instanceof Error ? error.message : String(error)}`;
      }
    }
  } finally {
    lambda.destroy();
  }
}

/**
 * In this process, through the same handler as deployed (the local runner, one replica, no faults),
 * one window at a time, oldest first. Mail goes to --smtp, else the running serve's server, else a
 * server started for the backfill, whose counts are shown.
 */
async function runLocally(
  ctx: CommandContext,
  jobId: string,
  slots: SlotBackend,
  serveSmtp: { host: string; port: number } | undefined,
  rows: WindowDelivery[],
): Promise<void> {
  const job = findLocalJob(jobId, {
    customers: positive(ctx.text('recipients'), 'recipients') ?? LOCAL_JOB_DEFAULTS.customers,
    invoicesPerWindow: positive(ctx.text('invoices'), 'invoices') ?? LOCAL_JOB_DEFAULTS.invoicesPerWindow,
  });
  const given = ctx.text('smtp');
  let target = serveSmtp;
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
  try {
    const runner = new LocalRunner({
      jobs: [job],
      backend: slots,
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
