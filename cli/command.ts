import type { JobSpec } from '../shared/job/job-spec.js';
import { JobSchedule } from '../shared/schedule/fire-times.js';
import type { OperatorStore } from '../shared/slot/operator-ports.js';
import { windowOf } from '../shared/slot/slot.js';
import { type BackendOptions, type CliBackend, openCliBackend, probeBackend } from './cli-backend.js';
import { CliError, type CliIo, ExitCode, parseTimeOption, usageError } from './cli-support.js';
import { catalogJob } from './slot-view.js';

/** Option values as parsed (node:util parseArgs). */
export type OptionValues = Readonly<Record<string, string | boolean | undefined>>;

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

  text(name: string): string | undefined {
    const value = this.values[name];
    return typeof value === 'string' ? value : undefined;
  }

  flag(name: string): boolean {
    return this.values[name] === true;
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

  /** `--job`, from the catalog, and its schedule (`--rate-start` anchors a rate()). */
  job(): { spec: JobSpec; schedule: JobSchedule } {
    const spec = catalogJob(this.text('job'));
    const rateStart = this.text('rate-start');
    const schedule = new JobSchedule(spec.schedule, rateStart ? { rateStart: this.time('rate-start') } : {});
    return { spec, schedule };
  }

  /** Opens the backend chosen by the options and checks that it answers (else exit code 3). */
  async backend(jobId: string): Promise<CliBackend> {
    const options: BackendOptions = {
      ...opt('stateDir', this.text('state-dir')),
      ...opt('endpoint', this.text('endpoint')),
      ...opt('table', this.text('table')),
      ...opt('region', this.text('region')),
      ...opt('backend', this.text('backend')),
      ...opt('schema', this.text('schema')),
    };
    const backend = await openCliBackend(options, this.env);
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
