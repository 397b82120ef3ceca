import { describe, expect, it } from 'vitest';
import { MetricName } from '../../shared/telemetry/metric-names.js';
import { emfMetrics } from '../../shared/telemetry/metrics.js';
import { ManualClock } from '../helpers/manual-clock.js';

const AT = Date.parse('2026-11-30T06:00:07Z');

/** An emfMetrics for the weekly report whose lines land in `lines`, on a clock at AT. */
function recorded(namespace?: string) {
  const lines: string[] = [];
  const metrics = emfMetrics({
    jobId: 'weekly-report',
    write: (line) => lines.push(line),
    clock: new ManualClock(AT),
    ...(namespace ? { namespace } : {}),
  });
  return { lines, metrics };
}

describe('emfMetrics', () => {
  it('writes one record per flush that CloudWatch files under Slotguard with the JobId dimension alone, so the alarms see it', async () => {
    const { lines, metrics } = recorded();
    metrics.count(MetricName.ClaimAcquired);
    metrics.count(MetricName.EffectDone, 3);
    metrics.count(MetricName.EffectDone, 2);

    await metrics.flush();

    expect(lines).toHaveLength(1);
    // The record Powertools Metrics wrote before, key for key: a `service` dimension, or any second
    // dimension set, would be another metric that no alarm watches.
    expect(JSON.parse(lines[0]!)).toEqual({
      _aws: {
        Timestamp: AT,
        CloudWatchMetrics: [
          {
            Namespace: 'Slotguard',
            Dimensions: [['JobId']],
            Metrics: [
              { Name: 'ClaimAcquired', Unit: 'Count' },
              { Name: 'EffectDone', Unit: 'Count' },
            ],
          },
        ],
      },
      JobId: 'weekly-report',
      ClaimAcquired: 1,
      EffectDone: 5,
    });
  });

  it('does not count a flushed metric again in the next record, and writes no empty record', async () => {
    const { lines, metrics } = recorded();
    metrics.count(MetricName.DuplicateClaim);
    await metrics.flush();
    await metrics.flush();
    metrics.count(MetricName.RunYielded);
    await metrics.flush();

    expect(lines).toHaveLength(2);
    const second = JSON.parse(lines[1]!);
    expect(second.RunYielded).toBe(1);
    expect(second.DuplicateClaim).toBeUndefined();
    expect(second._aws.CloudWatchMetrics[0].Metrics).toEqual([{ Name: 'RunYielded', Unit: 'Count' }]);
  });

  it('writes a metric counted zero times as 0, so a zero still reaches CloudWatch', async () => {
    const { lines, metrics } = recorded('Other');
    metrics.count(MetricName.EffectFailed, 0);
    await metrics.flush();

    expect(lines).toHaveLength(1);
    const record = JSON.parse(lines[0]!);
    expect(record.EffectFailed).toBe(0);
    expect(record._aws.CloudWatchMetrics[0].Namespace).toBe('Other');
  });
});
