import { MetricsLogger, Unit } from 'aws-embedded-metrics';
import type { IEnvironment } from 'aws-embedded-metrics/lib/environment/IEnvironment.js';
import type { MetricsContext } from 'aws-embedded-metrics/lib/logger/MetricsContext.js';
import { LogSerializer } from 'aws-embedded-metrics/lib/serializers/LogSerializer.js';
import { JOB_ID_DIMENSION, METRICS_NAMESPACE, type MetricName } from './metric-names.js';

/** Counters of one invocation, flushed once at its end. */
export interface JobMetrics {
  count(name: MetricName, value?: number): void;
  /** Emits what was counted since the last flush and resets the counters. */
  flush(): Promise<void>;
}

export interface EmfMetricsOptions {
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
 * CloudWatch metrics in Embedded Metric Format, serialised by AWS's aws-embedded-metrics library,
 * with exactly one dimension set: { JobId }. Counts are summed in memory and flushed once per
 * invocation, so a 12,400-recipient run writes one record, not 12,400.
 */
export function emfMetrics(options: EmfMetricsOptions): JobMetrics {
  const write = options.write ?? ((line: string) => process.stdout.write(`${line}\n`));
  const environment = lineEnvironment(write);
  const counts = new Map<MetricName, number>();
  return {
    count(name, value = 1) {
      counts.set(name, (counts.get(name) ?? 0) + value);
    },
    async flush() {
      if (counts.size === 0) return;
      const logger = new MetricsLogger(async () => environment);
      logger.setNamespace(options.namespace ?? METRICS_NAMESPACE);
      logger.setDimensions({ [JOB_ID_DIMENSION]: options.jobId });
      for (const [name, value] of counts) logger.putMetric(name, value, Unit.Count);
      counts.clear();
      await logger.flush();
    },
  };
}

/**
 * An aws-embedded-metrics environment whose sink hands each serialised line to `write`. The
 * library's own environments write with console.log and probe EC2 metadata when not in Lambda;
 * this one does neither, so the same code runs in Lambda, locally and in tests.
 */
function lineEnvironment(write: (line: string) => void): IEnvironment {
  const serializer = new LogSerializer();
  const sink = {
    name: 'LineSink',
    async accept(context: MetricsContext) {
      for (const line of serializer.serialize(context)) write(line);
    },
  };
  return {
    probe: async () => true,
    getName: () => 'slotguard',
    getType: () => 'slotguard',
    getLogGroupName: () => '',
    configureContext: () => {},
    getSink: () => sink,
  };
}
