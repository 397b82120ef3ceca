import type { CliBackend } from './cli-backend.js';
import type { CommandContext, OptionSpec } from './command.js';
import type { WindowDelivery } from './window-delivery.js';

/**
 * What the operator CLI can do only next to slotguard's local runner, in slotguard's own
 * repository: open the state `npm start -- serve` keeps when no option names a backend, and run a
 * window's job in this process (the example app's job code, mail to a local SMTP server).
 *
 * The package ships none of it: the local runner, the example jobs and their development servers
 * are the repository's, and an installed CLI has no job code to run. The bin injects it in a
 * checkout (cli/repository-local-runs.ts, which tsconfig.build.json never reaches), and so do the
 * tests; without it the CLI works on the backend its options name and delivers windows through
 * `--function`.
 */
export interface LocalRuns {
  /** Options of every command that reads slots, for where the local state is (`--state-dir`). */
  readonly backendOptions: Readonly<Record<string, OptionSpec>>;
  /** Options of the commands that deliver windows, for an in-process run (`--smtp`, …). */
  readonly deliveryOptions: Readonly<Record<string, OptionSpec>>;
  /** What the help of the commands that deliver windows says about a delivery in this process. */
  readonly deliveryHelp: string;
  /** What `--help` says about the backend used when no option names one. */
  readonly defaultBackendHelp: readonly string[];
  /** The backend when no option names one: the running serve's, else the tables it keeps. */
  openDefaultBackend(ctx: CommandContext): Promise<CliBackend>;
  /** Runs each window's job in this process, oldest first, filling in each row's result. */
  deliver(ctx: CommandContext, jobId: string, backend: CliBackend, rows: WindowDelivery[]): Promise<void>;
}
