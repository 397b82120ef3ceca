import type { Clock } from '../shared/clock.js';
import { SlotguardError } from '../shared/errors.js';
import type { LocalRuns } from './local-runs.js';

/**
 * The operator CLI's exit codes. Scripts branch on them; the README and `--help` list them.
 */
export const ExitCode = {
  /** Done, and nothing wrong found. */
  Ok: 0,
  /** The operation was refused (a live lease, a stale epoch), or the command found problems (a missed window, effects in doubt). */
  Problem: 1,
  /** Bad usage: a missing or malformed option, an unknown job or command. Nothing was read or written. */
  Usage: 2,
  /** The backend or AWS could not be reached or refused the credentials; nothing was written. */
  Unreachable: 3,
  /** An unexpected error: a bug. The message and stack go to stderr. */
  Unexpected: 4,
} as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

/** What the CLI reads and writes, and what it may use; tests inject their own, the bin passes the process's. */
export interface CliIo {
  readonly stdout: { write(text: string): unknown };
  readonly stderr: { write(text: string): unknown };
  /** @default process.env */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** @default the system clock */
  readonly clock?: Clock;
  /** Where relative paths (`--catalog`) start, and where the project's slotguard.config.json is looked for. @default process.cwd() */
  readonly cwd?: string;
  /**
   * The local runner's state and in-process runs: given in slotguard's own repository (by the bin
   * and the tests), never by an installed package (see LocalRuns).
   * @default none: the backend comes from the options, and windows are delivered with --function
   */
  readonly localRuns?: LocalRuns;
}

/** An error the CLI reports as it is: the message says what was wrong and what to do. */
export class CliError extends SlotguardError {
  readonly exitCode: ExitCode;
  constructor(exitCode: ExitCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.exitCode = exitCode;
  }
}

/** A bad-usage error (exit code 2): say what was wrong and what to write. */
export const usageError = (message: string) => new CliError(ExitCode.Usage, message);

const RELATIVE = /^now(?:([+-])(\d+)([mhd]))?$/;
const DATE_ONLY = /^\d{4}-\d{2}-\d{2}$/;
const WITH_ZONE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$/;
const UNIT_MS = { m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/**
 * Reads a time option: an instant with its zone (`2026-11-30T06:00:00Z`, `2026-11-30T09:00+03:00`),
 * a UTC date (`2026-11-30`), or `now`, `now-2h`, `now-7d`, `now+15m`. A time without a zone is
 * refused: windows are instants, and 09:00 means a different one in every zone.
 */
export function parseTimeOption(name: string, value: string | undefined, now: number): number {
  if (value === undefined)
    throw usageError(`--${name} is missing; give a time such as 2026-11-30T06:00:00Z or now-1d`);
  const relative = RELATIVE.exec(value);
  if (relative) {
    const [, sign, amount, unit] = relative;
    if (!sign) return now;
    return now + (sign === '-' ? -1 : 1) * Number(amount) * UNIT_MS[unit as keyof typeof UNIT_MS];
  }
  if (DATE_ONLY.test(value)) {
    const millis = Date.parse(`${value}T00:00:00Z`);
    if (!Number.isNaN(millis)) return millis;
  }
  if (WITH_ZONE.test(value)) {
    const millis = Date.parse(value);
    if (!Number.isNaN(millis)) return millis;
  }
  if (/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?$/.test(value)) {
    throw usageError(
      `--${name} ${JSON.stringify(value)} has no time zone; append Z for UTC (${value}Z) or an offset such as +03:00`,
    );
  }
  throw usageError(
    `--${name} is ${JSON.stringify(value)}; give an instant such as 2026-11-30T06:00:00Z, a UTC date such as ` +
      '2026-11-30, or now, now-2h, now-7d',
  );
}

const DURATION = /^(\d+)(s|m|h|d)$/;
const DURATION_MS = { s: 1_000, ...UNIT_MS } as const;

/**
 * Reads a duration option: a whole number and a unit, `90s`, `15m`, `48h` or `7d`. The error names
 * the value received and shows the form.
 */
export function parseDurationOption(name: string, value: string): number {
  const match = DURATION.exec(value);
  if (!match) {
    throw usageError(
      `--${name} is ${JSON.stringify(value)}; give a whole number and a unit: 90s, 15m, 48h or 7d`,
    );
  }
  return Number(match[1]) * DURATION_MS[match[2] as keyof typeof DURATION_MS];
}

/** A plain-text table: a header, then rows, columns padded; numbers right-aligned. */
export function renderTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((title, i) =>
    Math.max(title.length, ...rows.map((row) => (row[i] ?? '').length)),
  );
  const numeric = header.map(
    (_, i) =>
      rows.some((row) => /\d/.test(row[i] ?? '')) &&
      rows.every((row) => /^-?[\d,.]+$|^-$/.test(row[i] ?? '')),
  );
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, i) => (numeric[i] ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)].join('\n');
}

/** `12,400` */
export const count = (value: number) => value.toLocaleString('en-US');

/** `2026-11-30T06:00:00Z` */
export const iso = (millis: number) => `${new Date(millis).toISOString().slice(0, 19)}Z`;
