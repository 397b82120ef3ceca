import {
  GetScheduleCommand,
  type GetScheduleCommandOutput,
  ListSchedulesCommand,
  ResourceNotFoundException,
  SchedulerClient,
  SchedulerServiceException,
  type ScheduleState,
  UpdateScheduleCommand,
} from '@aws-sdk/client-scheduler';
import { InvalidEventError } from '../shared/errors.js';
import { JobSchedule } from '../shared/schedule/fire-times.js';
import { windowOf } from '../shared/slot/slot.js';
import { parseWatchdogEvent, type WatchdogRequest } from '../shared/watchdog/watchdog-event.js';
import { CliError, ExitCode, renderTable, usageError } from './cli-support.js';
import type { CommandContext } from './command.js';
import type { CatalogJob } from './job-catalog.js';

/** A deployed schedule as the CLI shows it. */
interface DeployedSchedule {
  /** The slotguard job its target input names, if it is one of ours. */
  readonly jobId: string | undefined;
  /**
   * `job`: the schedule that fires the job's windows. `watchdog`: the one that audits them every 15
   * minutes (its input carries the job's schedule and deadline). Undefined: not slotguard's.
   */
  readonly role: 'job' | 'watchdog' | undefined;
  /** A watchdog schedule's input, checked. @default absent: not a watchdog schedule, or an input that does not parse */
  readonly audit?: WatchdogRequest;
  readonly name: string;
  readonly group: string;
  readonly state: string;
  readonly expression: string;
  readonly timeZone: string;
  readonly nextFire: string | undefined;
  /** The function it invokes. */
  readonly target: string;
  readonly raw: GetScheduleCommandOutput;
}

/** `schedules list`: the deployed schedules (slotguard's, by the job id in their input), with their next fire. */
export async function schedulesList(ctx: CommandContext): Promise<number> {
  const schedules = await withScheduler(ctx, (client) => findSchedules(ctx, client));
  const jobId = ctx.text('job');
  const shown = schedules.filter((s) => (jobId ? s.jobId === jobId : true));
  if (ctx.json) {
    ctx.print(
      JSON.stringify(
        shown.map(({ raw: _raw, audit: _audit, ...rest }) => rest),
        null,
        2,
      ),
    );
  } else if (shown.length === 0) {
    ctx.print(jobId ? `No deployed schedule runs job ${jobId}.` : 'No schedules.');
  } else {
    ctx.print(
      renderTable(
        ['job', 'state', 'expression', 'time zone', 'next fire (UTC)', 'schedule', 'group', 'target'],
        shown.map((s) => [
          s.role === 'watchdog' ? `${s.jobId} (watchdog)` : (s.jobId ?? '-'),
          s.state,
          s.expression,
          s.timeZone,
          s.nextFire ?? '-',
          s.name,
          s.group,
          s.target,
        ]),
      ),
    );
  }
  return jobId && !shown.some((s) => s.role === 'job') ? ExitCode.Problem : ExitCode.Ok;
}

/** `schedules pause` / `schedules resume`: UpdateSchedule with the schedule as it is and the new state. */
export async function schedulesSetState(ctx: CommandContext, state: ScheduleState): Promise<number> {
  const verb = state === 'DISABLED' ? 'paused' : 'resumed';
  return withScheduler(ctx, async (client) => {
    const target = await oneSchedule(ctx, client);
    const current = target.raw;
    if (current.State === state) {
      return ctx.done(
        { outcome: 'unchanged', name: target.name, group: target.group, state },
        `${describe(target)} is already ${state}; nothing was changed.`,
      );
    }
    // UpdateSchedule replaces the whole definition: send everything back as it was, but the state.
    await client.send(
      new UpdateScheduleCommand({
        Name: current.Name,
        GroupName: current.GroupName,
        ScheduleExpression: current.ScheduleExpression,
        ScheduleExpressionTimezone: current.ScheduleExpressionTimezone,
        StartDate: current.StartDate,
        EndDate: current.EndDate,
        Description: current.Description,
        KmsKeyArn: current.KmsKeyArn,
        Target: current.Target,
        FlexibleTimeWindow: current.FlexibleTimeWindow,
        ActionAfterCompletion: current.ActionAfterCompletion,
        State: state,
      }),
    );
    const advice =
      state === 'DISABLED'
        ? 'Windows due while it is paused are not fired, and its watchdog pages them as missing (WindowMissing); ' +
          'after resuming, list them (slotguard slots list) and backfill the ones you want.'
        : `Windows missed while it was paused stay missed: slotguard backfill --job ${target.jobId ?? '<job>'} --from <paused at> --to now --function <the job's function>`;
    return ctx.done(
      { outcome: verb, name: target.name, group: target.group, before: current.State, after: state },
      `${verb} ${describe(target)}: ${current.State} → ${state}. ${advice}`,
    );
  });
}

function describe(s: DeployedSchedule): string {
  const whose = s.jobId
    ? `job ${s.jobId}'s ${s.role === 'watchdog' ? 'watchdog ' : ''}schedule `
    : 'schedule ';
  return `${whose}${s.name} (group ${s.group})`;
}

/** A job as its deployed schedules define it, for a command run with no catalog (see CommandContext.job). */
export interface DeployedJob {
  readonly job: CatalogJob;
  /** Where a rate() schedule counts from: its StartDate, else its creation. @default absent: not a rate() */
  readonly rateStart?: number;
  /** `its deployed schedule Name (group Group)`, for messages. */
  readonly source: string;
}

/**
 * Job `jobId` as deployed: the expression and time zone of the schedule ScheduledJob created for it,
 * and the deadline its watchdog schedule audits it by (a one-time job that has fired has only the
 * latter). Its catch-up policy is not deployed anywhere: backfill then uses the default, or the
 * options. Lists every schedule of the account and region (ListSchedules, then GetSchedule each),
 * as `schedules list` does.
 */
export async function deployedJob(ctx: CommandContext, jobId: string | undefined): Promise<DeployedJob> {
  const schedules = await withScheduler(ctx, (client) => findSchedules(ctx, client));
  const ours = schedules.filter((s) => s.role !== undefined);
  const region = ctx.text('region') ?? ctx.env.AWS_REGION ?? 'the default region';
  const jobs = [...new Set(ours.map((s) => s.jobId))].join(', ') || 'none';
  if (!jobId) throw usageError(`--job is missing; the jobs deployed in ${region} are ${jobs}`);
  const fires = ours.find((s) => s.jobId === jobId && s.role === 'job');
  const audit = ours.find((s) => s.jobId === jobId && s.role === 'watchdog')?.audit;
  if (!fires && !audit) {
    throw usageError(
      `no catalog is named, and no deployed schedule in ${region} runs job ${JSON.stringify(jobId)} (the jobs ` +
        `deployed there are ${jobs}); check --job and --region, or give --catalog ./path/to/catalog.js`,
    );
  }
  const schedule = fires
    ? { expression: fires.expression, timeZone: fires.timeZone }
    : (audit!.schedule as CatalogJob['schedule']);
  const start = fires?.raw.StartDate ?? fires?.raw.CreationDate;
  const rateStart = audit?.rateStart ?? (start ? start.getTime() : undefined);
  return {
    job: {
      id: jobId,
      schedule,
      ...(audit ? { deadlineMinutes: audit.deadlineMs / 60_000 } : {}),
    },
    ...(rateStart !== undefined && schedule.expression.startsWith('rate(') ? { rateStart } : {}),
    source: fires
      ? `its deployed schedule ${fires.name} (group ${fires.group})`
      : 'its deployed watchdog schedule',
  };
}

/** The one schedule `--name` (and `--group`) or `--job` points at. */
async function oneSchedule(ctx: CommandContext, client: SchedulerClient): Promise<DeployedSchedule> {
  const name = ctx.text('name');
  const jobId = ctx.text('job');
  if (!name && !jobId) throw usageError('give --job ID, or --name NAME (and --group GROUP) of the schedule');
  if (name) {
    const group = ctx.text('group') ?? 'default';
    return describeSchedule(
      await client.send(new GetScheduleCommand({ Name: name, GroupName: group })),
      ctx.now,
    );
  }
  const matches = (await findSchedules(ctx, client)).filter((s) => s.jobId === jobId && s.role === 'job');
  if (matches.length === 0) {
    throw new CliError(
      ExitCode.Problem,
      `no deployed schedule runs job ${jobId}${ctx.text('group') ? ` in group ${ctx.text('group')}` : ''}; list them: slotguard schedules list`,
    );
  }
  if (matches.length > 1) {
    throw new CliError(
      ExitCode.Problem,
      `${matches.length} schedules run job ${jobId} (${matches.map((m) => `${m.group}/${m.name}`).join(', ')}): ` +
        'two triggers for one job is what DuplicateClaim alarms on; pick one with --name and --group',
    );
  }
  return matches[0]!;
}

async function findSchedules(ctx: CommandContext, client: SchedulerClient): Promise<DeployedSchedule[]> {
  const group = ctx.text('group');
  const found: DeployedSchedule[] = [];
  let nextToken: string | undefined;
  do {
    const page = await client.send(
      new ListSchedulesCommand({
        ...(group ? { GroupName: group } : {}),
        ...(nextToken ? { NextToken: nextToken } : {}),
      }),
    );
    for (const summary of page.Schedules ?? []) {
      // The summary lacks the target input (where the job id is) and the expression: read each.
      found.push(
        describeSchedule(
          await client.send(new GetScheduleCommand({ Name: summary.Name, GroupName: summary.GroupName })),
          ctx.now,
        ),
      );
    }
    nextToken = page.NextToken;
  } while (nextToken);
  return found.sort((a, b) => (a.jobId ?? '~').localeCompare(b.jobId ?? '~') || a.name.localeCompare(b.name));
}

function describeSchedule(raw: GetScheduleCommandOutput, now: number): DeployedSchedule {
  const expression = raw.ScheduleExpression ?? '';
  const timeZone = raw.ScheduleExpressionTimezone ?? 'UTC';
  let nextFire: string | undefined;
  try {
    const start = raw.StartDate ?? raw.CreationDate;
    const next = new JobSchedule({ expression, timeZone }, start ? { rateStart: start } : {}).nextFireAfter(
      now,
    );
    nextFire = raw.State === 'DISABLED' ? 'paused' : next ? windowOf(next) : 'never';
  } catch {
    nextFire = undefined;
  }
  return {
    ...slotguardRole(raw.Target?.Input),
    name: raw.Name ?? '',
    group: raw.GroupName ?? 'default',
    state: raw.State ?? 'ENABLED',
    expression,
    timeZone,
    nextFire,
    target: raw.Target?.Arn?.split(':').slice(6).join(':') || (raw.Target?.Arn ?? '-'),
    raw,
  };
}

/**
 * Whose schedule it is, by its target input: ScheduledJob writes the job id into the input of the
 * job's schedule, and `kind: 'watchdog'` with the job id, schedule and deadline into its watchdog's.
 */
function slotguardRole(input: string | undefined): Pick<DeployedSchedule, 'jobId' | 'role' | 'audit'> {
  let parsed: { jobId?: unknown; kind?: unknown };
  try {
    parsed = input ? (JSON.parse(input) as typeof parsed) : {};
  } catch {
    return { jobId: undefined, role: undefined };
  }
  if (typeof parsed.jobId !== 'string') return { jobId: undefined, role: undefined };
  if (parsed.kind !== 'watchdog') return { jobId: parsed.jobId, role: 'job' };
  try {
    return { jobId: parsed.jobId, role: 'watchdog', audit: parseWatchdogEvent(parsed) };
  } catch (error) {
    if (!(error instanceof InvalidEventError)) throw error;
    return { jobId: parsed.jobId, role: 'watchdog' };
  }
}

async function withScheduler<T>(
  ctx: CommandContext,
  work: (client: SchedulerClient) => Promise<T>,
): Promise<T> {
  const region = ctx.text('region');
  const client = new SchedulerClient({ ...(region ? { region } : {}), maxAttempts: 3 });
  try {
    return await work(client);
  } catch (error) {
    if (error instanceof SchedulerServiceException) {
      const notFound = error instanceof ResourceNotFoundException;
      throw new CliError(
        notFound ? ExitCode.Problem : ExitCode.Unreachable,
        notFound
          ? `EventBridge Scheduler has no such schedule (${error.message}); list them: slotguard schedules list`
          : `EventBridge Scheduler refused the request (${error.name}: ${error.message}); check the credentials, ` +
              '--region, and scheduler:ListSchedules, GetSchedule and UpdateSchedule (with iam:PassRole on the target role)',
        { cause: error },
      );
    }
    throw error;
  } finally {
    client.destroy();
  }
}
