import type { Log } from '../telemetry/log.js';

/** One line a RecordingLog kept. */
export interface RecordedLogLine {
  readonly level: 'info' | 'warn' | 'error';
  readonly message: string;
  readonly fields: Record<string, unknown>;
}

/**
 * A Log that keeps its lines, so a test can assert what an operator would read (and that no raw
 * address is in it).
 * @example
 * const log = new RecordingLog();
 * expect(log.text()).not.toContain('@');
 */
export class RecordingLog implements Log {
  /** Every line, in order. */
  readonly lines: RecordedLogLine[] = [];
  info(message: string, fields: Record<string, unknown> = {}) {
    this.lines.push({ level: 'info', message, fields });
  }
  warn(message: string, fields: Record<string, unknown> = {}) {
    this.lines.push({ level: 'warn', message, fields });
  }
  error(message: string, fields: Record<string, unknown> = {}) {
    this.lines.push({ level: 'error', message, fields });
  }
  /** Every line as `level message {fields}`, one per line. */
  text(): string {
    return this.lines.map((l) => `${l.level} ${l.message} ${JSON.stringify(l.fields)}`).join('\n');
  }
}

/**
 * Collects the Embedded Metric Format lines a handler writes (pass `write` to emfMetrics), parsed,
 * and sums each metric across them.
 * @example
 * const emf = new EmfRecorder();
 * const metrics = () => emfMetrics({ jobId: job.id, write: emf.write });
 */
export class EmfRecorder {
  /** Every EMF record written, parsed. */
  readonly records: Record<string, unknown>[] = [];
  /** Takes one EMF line; pass it as emfMetrics' `write`. */
  readonly write = (line: string) => {
    this.records.push(JSON.parse(line) as Record<string, unknown>);
  };
  /** The sum of `metric` over every record (0 if none carries it). */
  sum(metric: string): number {
    return this.records.reduce(
      (total, r) => total + (typeof r[metric] === 'number' ? (r[metric] as number) : 0),
      0,
    );
  }
  /** Records that carry `metric`. */
  withMetric(metric: string): Record<string, unknown>[] {
    return this.records.filter((r) => metric in r);
  }
}
