import { randomUUID } from 'node:crypto';
import { InvokeCommand, LambdaClient, LambdaServiceException } from '@aws-sdk/client-lambda';
import type { SchedulerEvent } from '../shared/job/scheduler-event.js';
import type { SlotState } from '../shared/slot/ports.js';
import { windowOf } from '../shared/slot/slot.js';
import type { CliBackend } from './cli-backend.js';
import { CliError, ExitCode, usageError } from './cli-support.js';
import type { CommandContext } from './command.js';

/** What a window run in this process came to, counted from the store (and the SMTP server). */
export interface InProcessReport {
  /** The slot's state after the run (MISSED when nothing claimed it). */
  readonly state: SlotState | 'MISSED';
  readonly epoch: number;
  readonly done: number;
  readonly inDoubt: number;
  /** Emails the SMTP server accepted for the window, when the run's server counts them. */
  readonly delivered: number | undefined;
}

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
  report?: InProcessReport;
  /**
   * Queued (AWS), or finished DONE (in process).
   * @default unset until the window is delivered
   */
  ok?: boolean;
}

/**
 * Refuses, before anything is read or written, to run a job in this process where it cannot: against
 * a table in AWS, where the deployed function must do it (`--function`), and anywhere when the CLI
 * has no job code to run (an installed package: no LocalRuns).
 */
export function assertDeliverable(ctx: CommandContext, command: string, alternative?: string): void {
  if (ctx.text('function')) return;
  if (!ctx.io.localRuns) {
    throw usageError(
      `${command} delivers each window by invoking the job's deployed function: pass --function NAME (the ` +
        "function ScheduledJob deployed for the job; `slotguard schedules list` shows each schedule's target)" +
        `${alternative ? `, or ${alternative}` : ''}. This CLI runs no job code itself. Nothing was read or written.`,
    );
  }
  if (ctx.inAws()) {
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
 * scheduled time and `backfilled: true`); otherwise in this process (LocalRuns; assertDeliverable
 * has refused already where there are none). `purpose` prefixes the execution id the slot records.
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
  else if (ctx.io.localRuns) await ctx.io.localRuns.deliver(ctx, jobId, backend, rows);
  else throw new Error('deliverWindows without --function or LocalRuns: assertDeliverable was not called');
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
