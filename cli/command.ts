import { describeCatchUpPolicy, resolveCatchUpPolicy } from '../shared/schedule/catch-up.js';
import { JobSchedule, ScheduleError } from '../shared/schedule/fire-times.js';
import type { OperatorStore } from '../shared/slot/operator-ports.js';
import type { SlotRecord } from '../shared/slot/ports.js';
import { MAX_SHARDS, type Slot, windowOf } from '../shared/slot/slot.js';
import { jobDeadlineMs } from '../shared/watchdog/window-deadline.js';
import { type BackendOptions, type CliBackend, openCliBackend, probeBackend } from './cli-backend.js';
import {
  CliError,
  type CliIo,
  ExitCode,
  parseDurationOption,
  parseTimeOption,
  usageError,
} from './cli-support.js';
import { type CatalogJob, catalogJob, findCatalog, loadCatalog } from './job-catalog.js';
import { deployedJob } from './schedule-commands.js';
import { windowNote } from './slot-view.js';

/** One option of a command, as parsed and as `--help` lists it. */
export interface OptionSpec {
  readonly type: 'string' | 'boolean';
  readonly help: string;
  /** The value's placeholder in `--help` (`--job ID`). @default none: a flag */
  readonly value?: string;
  /** May be given more than once (`--key A --key B`). @default false */
  readonly multiple?: boolean;
}

/** What an operator write acts on; see CommandContext.repairTarget. */
export interface RepairTarget {
  readonly spec: CatalogJob;
  readonly slot: Slot;
  readonly backend: CliBackend;
  readonly operator: OperatorStore;
  /** The slot's record as just read; undefined when the window has none. */
  readonly record: SlotRecord | undefined;
}

/** Option values as parsed (node:util parseArgs); a list for an option given more than once. */
export type OptionValues = Readonly<Record<string, string | boolean | readonly string[] | undefined>>;

/** What a command gets: its options, the time, the backend on demand, and output in the chosen mode. */
export class CommandContext {
  readonly io: CliIo;
  readonly values: OptionValues;
  readonly now: number;
  readonly json: boolean;
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly #opened: CliBackend[] = [];

  constructor(io: CliIo, values: OptionValues, now: number) {
    this.io = io;
    this.values = values;
    this.now = now;
    this.json = values.json === true;
    this.env = io.env ?? process.env;
  }

  /** The value of a string option (the last one, if it may be given more than once). */
  text(name: string): string | undefined {
    const value = this.values[name];
    if (Array.isArray(value)) return value.at(-1);
    return typeof value === 'string' ? value : undefined;
  }

  flag(name: string): boolean {
    return this.values[name] === true;
  }

  /** Every value of an option that may be given more than once (`--key A --key B`). */
  list(name: string): readonly string[] {
    const value = this.values[name];
    return Array.isArray(value) ? value : typeof value === 'string' ? [value] : [];
  }

  /** A duration option (`15m`, `48h`, `7d`; see parseDurationOption), or `fallback` when not given. */
  duration(name: string, fallback: number): number {
    const value = this.text(name);
    return value === undefined ? fallback : parseDurationOption(name, value);
  }

  /**
   * How long a window of `spec` has to finish: `--deadline` when given, else the job's deadline
   * (jobDeadlineMs: its own, or the earlier of the gap to its next window and 6 hours).
   */
  deadlineMs(spec: CatalogJob): number {
    return this.duration('deadline', jobDeadlineMs(spec, this.now));
  }

  /** A required time option (see parseTimeOption). */
  time(name: string): number {
    return parseTimeOption(name, this.text(name), this.now);
  }

  /** `--window`, as the canonical window instant (whole seconds). */
  window(): number {
    const value = this.text('window');
    if (value === undefined)
      throw usageError('--window is missing; give the window, e.g. --window 2026-11-30T06:00:00Z');
    const millis = parseTimeOption('window', value, this.now);
    return Date.parse(windowOf(millis));
  }

  /** `--shard`, a shard's index (its range is the window's to say); undefined when not given. */
  shard(): number | undefined {
    const value = this.text('shard');
    if (value === undefined) return undefined;
    const shard = Number(value);
    if (!/^\d+$/.test(value) || shard >= MAX_SHARDS) {
      throw usageError(
        `--shard is ${JSON.stringify(value)}; give a shard's index, a whole number from 0 to ${MAX_SHARDS - 1} ` +
          "(slotguard slots show lists a split window's shards)",
      );
    }
    return shard;
  }

  /**
   * `--job`, from the team's catalog (see findCatalog: `--catalog`, SLOTGUARD_CATALOG, the project's
   * slotguard.config.json or package.json), and its schedule (`--rate-start` anchors a rate()). With
   * no catalog named, against a claims table in AWS (`--table` alone), the job as its deployed
   * schedules define it (deployedJob).
   */
  async job(): Promise<{ spec: CatalogJob; schedule: JobSchedule }> {
    const jobId = this.text('job');
    const reference = findCatalog(this.text('catalog'), this.env, this.io.cwd ?? process.cwd());
    let spec: CatalogJob;
    let source: string;
    let deployedRateStart: number | undefined;
    if (reference) {
      const catalog = await loadCatalog(reference);
      spec = catalogJob(catalog, jobId);
      source = catalog.source;
    } else if (this.inAws()) {
      const deployed = await deployedJob(this, jobId);
      ({ job: spec, source, rateStart: deployedRateStart } = deployed);
      const deadline = spec.deadlineMinutes === undefined ? '' : `, deadline ${spec.deadlineMinutes} min`;
      this.warn(
        `note: no catalog named; job ${spec.id} is read from ${source}: ${spec.schedule.expression} ` +
          `${spec.schedule.timeZone ?? 'UTC'}${deadline}. Its catch-up policy is not deployed: backfill uses ` +
          `${describeCatchUpPolicy(resolveCatchUpPolicy(undefined, spec.id))} unless --catch-up and --max-lateness ` +
          'say otherwise, or --catalog names your catalog.',
      );
    } else {
      throw usageError(
        `the CLI reads ${jobId ? `job ${JSON.stringify(jobId)}` : 'the job'} from your job catalog, and none is ` +
          'named: give --catalog ./path/to/catalog.js (the module exporting the JobSpec[] your CDK app builds ' +
          'ScheduledJobs from), set SLOTGUARD_CATALOG, or add { "catalog": "…" } to slotguard.config.json or as ' +
          'the "slotguard" field of package.json in your project. Against a table in AWS (--table alone) the ' +
          "CLI reads it from the job's deployed schedule instead.",
      );
    }
    const given = this.text('rate-start');
    const rateStart = given !== undefined ? this.time('rate-start') : deployedRateStart;
    try {
      const schedule = new JobSchedule(spec.schedule, rateStart !== undefined ? { rateStart } : {});
      return { spec, schedule };
    } catch (error) {
      if (!(error instanceof ScheduleError)) throw error;
      throw new CliError(
        ExitCode.Usage,
        `job ${spec.id} in ${source} has a schedule the CLI cannot read (${spec.schedule.expression}): ${error.message}`,
        { cause: error },
      );
    }
  }

  /** The options name a claims table in AWS: `--table` with no endpoint, on DynamoDB. */
  inAws(): boolean {
    return (
      this.text('table') !== undefined &&
      !this.text('endpoint') &&
      !this.env.DYNAMODB_ENDPOINT &&
      (this.text('backend') ?? 'dynamodb') === 'dynamodb'
    );
  }

  /** Opens the backend chosen by the options and checks that it answers (else exit code 3). */
  async backend(jobId: string): Promise<CliBackend> {
    const options: BackendOptions = {
      ...opt('endpoint', this.text('endpoint')),
      ...opt('table', this.text('table')),
      ...opt('region', this.text('region')),
      ...opt('backend', this.text('backend')),
      ...opt('schema', this.text('schema')),
    };
    const localRuns = this.io.localRuns;
    const backend = await openCliBackend(
      options,
      this.env,
      localRuns ? () => localRuns.openDefaultBackend(this) : undefined,
    );
    this.#opened.push(backend);
    await probeBackend(backend, jobId);
    return backend;
  }

  /** The backend's operator port, or a refusal naming what is missing. */
  operator(backend: CliBackend): OperatorStore {
    if (backend.operator) return backend.operator;
    throw new CliError(
      ExitCode.Problem,
      `${backend.description} has no operator store: not available yet for Postgres (the contract a Postgres ` +
        'implementation must pass is test/contract/operator-contract.ts). Nothing was written.',
    );
  }

  /**
   * The slot an operator write acts on (`--job`, `--window`, and `--shard` for one shard of a split
   * window; a note on stderr when the window is not a fire time of the schedule), its backend and
   * operator store, and its record as read now: the write is fenced on that record's epoch. Call it
   * after the command's own options are checked, so a usage error never costs a connection.
   */
  async repairTarget(): Promise<RepairTarget> {
    const { spec, schedule } = await this.job();
    const window = this.window();
    const shard = this.shard();
    const note = windowNote(spec, window, schedule);
    if (note) this.warn(note);
    const backend = await this.backend(spec.id);
    const operator = this.operator(backend);
    const slot: Slot = {
      jobId: spec.id,
      window: windowOf(window),
      ...(shard !== undefined ? { shard } : {}),
    };
    return { spec, slot, backend, operator, record: await backend.slots.claims.read(slot) };
  }

  /** Reports that the slot's record vanished between the read and the write (exit code 1). */
  refuseGone(slot: Slot): number {
    return this.refuse(
      { outcome: 'absent' },
      `${slot.jobId} ${slot.window} has no slot record any more; nothing was written`,
    );
  }

  print(text: string): void {
    this.io.stdout.write(`${text}\n`);
  }

  warn(text: string): void {
    this.io.stderr.write(`${text}\n`);
  }

  /** Reports success: the JSON document, or the sentence. */
  done(json: object, text: string): number {
    this.print(this.json ? JSON.stringify(json, null, 2) : text);
    return ExitCode.Ok;
  }

  /** Reports a refusal or a problem (exit code 1): JSON on stdout, or the sentence on stderr. */
  refuse(json: object, text: string): number {
    if (this.json) this.print(JSON.stringify({ ...json, message: text }, null, 2));
    else this.warn(text);
    return ExitCode.Problem;
  }

  async close(): Promise<void> {
    await Promise.all(this.#opened.map((backend) => backend.close()));
  }
}

function opt<K extends string>(key: K, value: string | undefined): Partial<Record<K, string>> {
  return value === undefined ? {} : ({ [key]: value } as Record<K, string>);
}
