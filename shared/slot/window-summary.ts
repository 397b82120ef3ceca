import type { WindowSummary } from './ports.js';

/**
 * A finished window's stored summary once an effect it counted in doubt is recorded done after the
 * window finished (an operator, `effects resolve --auto`, or the watchdog on the provider's word):
 * one more done, one fewer in doubt, its hash off the in-doubt list. Undefined when the summary does
 * not count that effect in doubt: neither listed nor among the unlisted ones (the list keeps 50).
 * A listed effect is taken off once, however often this is applied; the callers apply it only after
 * their own write settled the effect, which succeeds once per reservation.
 */
export function summaryWithEffectDone(summary: WindowSummary, keyHash: string): WindowSummary | undefined {
  const listed = summary.inDoubtKeys.includes(keyHash);
  const unlisted = summary.inDoubt - summary.inDoubtKeys.length;
  if (!listed && unlisted <= 0) return undefined;
  return {
    ...summary,
    done: summary.done + 1,
    inDoubt: summary.inDoubt - 1,
    inDoubtKeys: listed ? summary.inDoubtKeys.filter((key) => key !== keyHash) : summary.inDoubtKeys,
  };
}
