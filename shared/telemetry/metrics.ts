import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
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
}

/**
 * CloudWatch metrics in Embedded Metric Format, serialised by Powertools for AWS Lambda's Metrics
 * (the same family as the logger), with exactly one dimension set: { JobId }. Counts are summed in
 * memory and flushed once per invocation, so a 12,400-recipient run writes one record, not 12,400.
 * @example
 * const metrics = emfMetrics({ jobId: 'weekly-report' });
 * metrics.count(MetricName.DuplicateClaim);
 * await metrics.flush(); // one JSON line on stdout
 */
export function emfMetrics(options: EmfMetricsOptions): JobMetrics {
  const write = options.write ?? ((line: string) => process.stdout.write(`${line}\n`));
  const counts = new Map<MetricName, number>();
  return {
    count(name, value = 1) {
      counts.set(name, (counts.get(name) ?? 0) + value);
    },
    async flush() {
      if (counts.size === 0) return;
      const metrics = new Metrics({ namespace: options.namespace ?? METRICS_NAMESPACE });
      // Powertools adds a `service` dimension by default; the alarms watch the metric with { JobId }
      // alone, and CloudWatch treats another dimension set as another metric.
      metrics.clearDefaultDimensions();
      metrics.addDimension(JOB_ID_DIMENSION, options.jobId);
      for (const [name, value] of counts) metrics.addMetric(name, MetricUnit.Count, value);
      counts.clear();
      // Serialised here rather than published: publishStoredMetrics writes with its own console,
      // and is switched off by POWERTOOLS_DEV; the line goes where `write` says, in every mode.
      write(JSON.stringify(metrics.serializeMetrics()));
    },
  };
}
