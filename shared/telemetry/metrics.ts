import { type Clock, systemClock } from '../clock.js';
import { JOB_ID_DIMENSION, METRICS_NAMESPACE, type MetricName } from './metric-names.js';

/** Counters of one invocation, flushed once at its end. */
export interface JobMetrics {
  count(name: MetricName, value?: number): void;
  /** Emits what was counted since the last flush and resets the counters. */
  flush(): Promise<void>;
}

/** Options of `emfMetrics`. */
export interface EmfMetricsOptions {
  /** The job the counts belong to: the value of the one dimension, `JobId`. */
  readonly jobId: string;
  /** @default 'Slotguard' */
  readonly namespace?: string;
  /**
   * Where each EMF JSON line goes. In Lambda, stdout is read by CloudWatch Logs, which extracts the
   * metrics. @default a line on process.stdout
   */
  readonly write?: (line: string) => void;
  /**
   * The record's timestamp, which CloudWatch files the counts under.
   * @default the system clock
   */
  readonly clock?: Clock;
}

/**
 * CloudWatch metrics in Embedded Metric Format, with exactly one dimension set: { JobId }. Counts
 * are summed in memory and flushed once per invocation, so a 12,400-recipient run writes one
 * record, not 12,400.
 *
 * The record is written here rather than by a metrics library: it is one JSON object of a fixed
 * shape (CloudWatch's EMF specification), every name is a MetricName constant and there are fewer
 * than EMF's 100 metrics per record, so a library's validation and publishing buy nothing, and
 * Powertools Metrics was a third of the job handler's bundle (docs/benchmarks.md).
 * @example
 * const metrics = emfMetrics({ jobId: 'weekly-report' });
 * metrics.count(MetricName.DuplicateClaim);
 * await metrics.flush(); // one JSON line on stdout
 */
export function emfMetrics(options: EmfMetricsOptions): JobMetrics {
  const write = options.write ?? ((line: string) => process.stdout.write(`${line}\n`));
  const clock = options.clock ?? systemClock;
  const namespace = options.namespace ?? METRICS_NAMESPACE;
  const counts = new Map<MetricName, number>();
  return {
    count(name, value = 1) {
      counts.set(name, (counts.get(name) ?? 0) + value);
    },
    async flush() {
      if (counts.size === 0) return;
      const values = Object.fromEntries(counts);
      counts.clear();
      write(
        JSON.stringify({
          _aws: {
            Timestamp: clock.now(),
            CloudWatchMetrics: [
              {
                Namespace: namespace,
                // The one dimension set the alarms watch: CloudWatch treats another set (a `service`
                // dimension, say) as another metric, which no alarm would see.
                Dimensions: [[JOB_ID_DIMENSION]],
                Metrics: Object.keys(values).map((name) => ({ Name: name, Unit: 'Count' })),
              },
            ],
          },
          [JOB_ID_DIMENSION]: options.jobId,
          ...values,
        }),
      );
    },
  };
}
