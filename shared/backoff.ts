/**
 * The delay before retry number `retry` (0 for the first): exponential from `baseMs`, capped at
 * `maxMs`, with "equal jitter": half of the ceiling is fixed and half is random.
 *
 * Why not full jitter (anywhere from 0 to the ceiling): its delays can all come up short together.
 * With 8 attempts from 50 ms, about 1 request in 3,000 spent every attempt within 500 ms, so a
 * run of 16 concurrent writes through a half-second burst of 500s stopped now and then. Half fixed,
 * those attempts span at least 3,175 ms, every time, while the random half still keeps clients
 * failed by one burst from retrying in lockstep.
 * @example await sleep(equalJitterDelayMs(attempt, 50, 1_000));
 */
export function equalJitterDelayMs(
  retry: number,
  baseMs: number,
  maxMs: number,
  random = Math.random,
): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** retry);
  return ceiling / 2 + random() * (ceiling / 2);
}
