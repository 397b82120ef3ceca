import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import { type RunResult, type RunSlotArgs, runSlot } from '../../shared/job/run-slot.js';
import type { Log } from '../../shared/telemetry/log.js';
import type { JobMetrics } from '../../shared/telemetry/metrics.js';
import { TEST_SECRET } from './harness.js';

/** What the one-window run tests share: one window, a second into it, and quiet logs and metrics. */
export const WINDOW = '2026-11-30T06:00:00Z';
export const START = Date.parse(WINDOW) + 1_000;
export const hashKey = hmacEffectKeys(TEST_SECRET);
export const silentLog: Log = { info() {}, warn() {}, error() {} };
export const noMetrics: JobMetrics = { count() {}, flush: async () => {} };

/** One delivery of a slot, by invocation `invocationId`, with quiet logs and (unless given) metrics. */
export function deliver(
  args: Omit<RunSlotArgs, 'log' | 'metrics' | 'delivery'> & {
    readonly invocationId: string;
    readonly metrics?: JobMetrics;
  },
): Promise<RunResult> {
  const { invocationId, metrics, ...run } = args;
  return runSlot({ ...run, metrics: metrics ?? noMetrics, log: silentLog, delivery: { invocationId } });
}
