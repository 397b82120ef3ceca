import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * The effect being performed, as a sender sees it while it sends: which job, window, effect (by its
 * hash, never the raw key) and epoch. A sender tags its message with it (SES message tags, SMTP
 * headers), so the provider's own record of the message (a Send, Delivery or Reject event) can be
 * matched to the effect later and settle an effect left in doubt.
 */
export interface EffectContext {
  readonly jobId: string;
  readonly window: string;
  readonly keyHash: string;
  readonly epoch: number;
  /** The shard that performs it, in a sharded window. */
  readonly shard?: number;
}

const current = new AsyncLocalStorage<EffectContext>();

/** Runs `perform` with `context` as the current effect (the runtime does this around each effect). */
export function withEffectContext<T>(context: EffectContext, perform: () => Promise<T>): Promise<T> {
  return current.run(context, perform);
}

/** The effect being performed by the caller, if any. */
export function currentEffect(): EffectContext | undefined {
  return current.getStore();
}

/** SES tag names and values take letters, digits, `_` and `-` only. */
const TAG_VALUE = /^[A-Za-z0-9_-]{1,256}$/;

/** The tag names slotguard puts on a message, and reads back from the provider's events. */
export const EffectTag = {
  jobId: 'slotguard-job',
  window: 'slotguard-window',
  keyHash: 'slotguard-effect',
  epoch: 'slotguard-epoch',
  shard: 'slotguard-shard',
} as const;

/**
 * The context as message tags (SES EmailTags; the SMTP sender writes them as `X-` headers). The
 * window `2026-11-30T06:00:00Z` is written `20261130T060000Z`, since tag values cannot hold `:`.
 * Nothing here can hold an address: the key is its hash.
 */
export function effectTags(context: EffectContext): { readonly Name: string; readonly Value: string }[] {
  const tags = [
    { Name: EffectTag.jobId, Value: context.jobId },
    { Name: EffectTag.window, Value: context.window.replace(/[-:]/g, '') },
    { Name: EffectTag.keyHash, Value: context.keyHash },
    { Name: EffectTag.epoch, Value: String(context.epoch) },
    ...(context.shard !== undefined ? [{ Name: EffectTag.shard, Value: String(context.shard) }] : []),
  ];
  return tags.filter((tag) => TAG_VALUE.test(tag.Value));
}

/**
 * Reads an effect's identity back from the tags a provider's event carries (name → value, as SES
 * events give them: each a list of values). Undefined when the message was not a slotguard effect
 * or a tag is malformed.
 */
export function effectFromTags(
  tags: Readonly<Record<string, readonly string[] | string | undefined>>,
): EffectContext | undefined {
  const value = (name: string) => {
    const raw = tags[name];
    return Array.isArray(raw) ? raw[0] : (raw as string | undefined);
  };
  const jobId = value(EffectTag.jobId);
  const compact = value(EffectTag.window);
  const keyHash = value(EffectTag.keyHash);
  const epoch = Number(value(EffectTag.epoch));
  const shardText = value(EffectTag.shard);
  const match = compact ? /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(compact) : null;
  if (!jobId || !match || !keyHash || !Number.isInteger(epoch) || epoch < 1) return undefined;
  const [, y, mo, d, h, mi, s] = match;
  const shard = shardText === undefined ? undefined : Number(shardText);
  if (shard !== undefined && !Number.isInteger(shard)) return undefined;
  return {
    jobId,
    window: `${y}-${mo}-${d}T${h}:${mi}:${s}Z`,
    keyHash,
    epoch,
    ...(shard !== undefined ? { shard } : {}),
  };
}

/** The prefix of the headers an SMTP message carries its effect tags in: `X-Slotguard-Job` and so on. */
const HEADER_PREFIX = 'x-';

/** The effect as SMTP headers (`X-slotguard-job: weekly-report`, …): the tags, for a mail server's log. */
export function effectHeaders(context: EffectContext): Record<string, string> {
  return Object.fromEntries(effectTags(context).map((tag) => [`${HEADER_PREFIX}${tag.Name}`, tag.Value]));
}

/** Reads an effect back from a message's headers (names in any case), or undefined. */
export function effectFromHeaders(
  headers: ReadonlyMap<string, string> | Readonly<Record<string, string>>,
): EffectContext | undefined {
  const entries = headers instanceof Map ? [...headers.entries()] : Object.entries(headers);
  const tags: Record<string, string> = {};
  for (const [name, value] of entries) {
    const lower = name.toLowerCase();
    if (lower.startsWith(HEADER_PREFIX)) tags[lower.slice(HEADER_PREFIX.length)] = String(value).trim();
  }
  return effectFromTags(tags);
}
