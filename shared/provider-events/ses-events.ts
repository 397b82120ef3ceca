import { type EffectContext, EffectTag, effectFromTags } from '../effects/effect-context.js';
import { InvalidEventError } from '../errors.js';
import type { ProviderWord } from '../slot/ports.js';
import { describe, JOB_ID_PATTERN } from '../slot/slot.js';
import { redactAddresses } from '../telemetry/safe-error-text.js';

/**
 * SES's email sending events as EventBridge delivers them from a configuration set's event
 * destination (the default bus): an envelope with `source: "aws.ses"` and a `detail-type` such as
 * "Email Sent", whose `detail` is SES's event record: `eventType`, the `mail` object (`timestamp`,
 * `messageId`, `tags` as name → list of values, and the addresses in `destination`, `source`,
 * `headers`, `commonHeaders`) and one object named after the event (`send`, `reject`, `failure`…).
 * Nothing here reads or repeats an address: only the tags, the message id and the timestamp.
 */

/** SES's event types (`detail.eventType`), as SES spells them. */
export const SesEventType = {
  Send: 'Send',
  Delivery: 'Delivery',
  Bounce: 'Bounce',
  Complaint: 'Complaint',
  DeliveryDelay: 'DeliveryDelay',
  Open: 'Open',
  Click: 'Click',
  Reject: 'Reject',
  RenderingFailure: 'Rendering Failure',
  Subscription: 'Subscription',
} as const;
export type SesEventType = (typeof SesEventType)[keyof typeof SesEventType];

/** The EventBridge `detail-type` of each event type. */
export const SES_DETAIL_TYPES: Readonly<Record<SesEventType, string>> = {
  Send: 'Email Sent',
  Delivery: 'Email Delivered',
  Bounce: 'Email Bounced',
  Complaint: 'Email Complaint Received',
  DeliveryDelay: 'Email Delivery Delayed',
  Open: 'Email Opened',
  Click: 'Email Clicked',
  Reject: 'Email Rejected',
  'Rendering Failure': 'Email Rendering Failed',
  Subscription: 'Email Subscribed',
};

/**
 * What each event says of the message. Accepted: SES took it (Send), and every later event
 * presupposes that; a bounce is the recipient's server refusing a message SES sent, so it is not
 * sent again. Rejected: SES did not send it (a virus found, a template that did not render), so
 * sending it again sends it once. A subscription change says nothing about one message: none.
 */
export const SES_EVENT_OUTCOMES: Readonly<Record<SesEventType, ProviderWord['outcome'] | undefined>> = {
  Send: 'accepted',
  Delivery: 'accepted',
  Bounce: 'accepted',
  Complaint: 'accepted',
  DeliveryDelay: 'accepted',
  Open: 'accepted',
  Click: 'accepted',
  Reject: 'rejected',
  'Rendering Failure': 'rejected',
  Subscription: undefined,
};

/**
 * The events a job's configuration set publishes to its recorder: the ones that settle an effect.
 * Every accepted message has a Send event, so Delivery, Bounce and the rest add nothing but
 * invocations; Reject and Rendering Failure are the two ways SES says it did not send.
 */
export const SETTLING_SES_EVENTS: readonly SesEventType[] = [
  SesEventType.Send,
  SesEventType.Reject,
  SesEventType.RenderingFailure,
];

/** The source EventBridge gives SES's events (no PutEvents caller may use an `aws.` source). */
export const SES_EVENT_SOURCE = 'aws.ses';

/** An EventBridge event pattern matching one job's settling SES events, as EventBridge spells it. */
export interface SesEventPattern {
  readonly source: readonly string[];
  readonly 'detail-type': readonly string[];
  readonly detail: { readonly mail: { readonly tags: Readonly<Record<string, readonly string[]>> } };
}

/**
 * The pattern of the rule that hands job `jobId`'s SES events to its recorder: SES's own source,
 * which no PutEvents caller may use; the detail types of SETTLING_SES_EVENTS; and the message's
 * `slotguard-job` tag, which SES's event carries in `mail.tags` as a list of values.
 */
export function sesEventPattern(jobId: string): SesEventPattern {
  return {
    source: [SES_EVENT_SOURCE],
    'detail-type': SETTLING_SES_EVENTS.map((type) => SES_DETAIL_TYPES[type]),
    detail: { mail: { tags: { [EffectTag.jobId]: [jobId] } } },
  };
}

/** Why an SES event settles nothing. */
export const IgnoredBecause = {
  /** The message carries no `slotguard-job` tag: not a slotguard effect. */
  Untagged: 'untagged',
  /** The message is another job's, one this recorder does not record for. */
  OtherJob: 'other-job',
  /** An event type that says nothing about one message (a subscription change). */
  EventType: 'event-type',
} as const;
export type IgnoredBecause = (typeof IgnoredBecause)[keyof typeof IgnoredBecause];

/** What an SES event comes to, read. */
export type SesEventReading =
  /** The provider's word about one effect's message. */
  | { readonly kind: 'word'; readonly effect: EffectContext; readonly word: ProviderWord }
  /** Nothing to record; `jobId` is the job the message names, when it names a valid one. */
  | { readonly kind: 'ignored'; readonly reason: IgnoredBecause; readonly jobId?: string }
  /**
   * Not an SES sending event slotguard can read (the field says where): it can never be recorded,
   * however often it is retried. `jobId` as for `ignored`.
   */
  | { readonly kind: 'malformed'; readonly field: string; readonly message: string; readonly jobId?: string };

/**
 * Reads one SES event from EventBridge. An event that names none of `jobIds` in its `slotguard-job`
 * tag is ignored (the construct's rules send each job's events only, so this is a misrouted event).
 * Anything malformed (not an SES sending event, a missing timestamp, a slotguard tag that does not
 * parse) comes back `malformed`, naming the field. Messages quote the event's own fields, never an
 * address.
 */
export function readSesEvent(event: unknown, jobIds: ReadonlySet<string>): SesEventReading {
  try {
    return read(event, jobIds);
  } catch (error) {
    if (!(error instanceof MalformedEvent)) throw error;
    return { kind: 'malformed', field: error.field, message: error.message, ...jobOf(error.jobId) };
  }
}

function read(event: unknown, jobIds: ReadonlySet<string>): SesEventReading {
  const envelope = objectAt(event, 'event');
  if (envelope.source !== SES_EVENT_SOURCE) {
    throw new MalformedEvent(
      'source',
      `source is ${shown(envelope.source)}; the recorder takes SES email sending events from EventBridge ` +
        `(source "${SES_EVENT_SOURCE}"), as a configuration set's event destination publishes them`,
    );
  }
  const detail = objectAt(envelope.detail, 'detail');
  const mail = objectAt(detail.mail, 'detail.mail');
  const tags = mail.tags === undefined ? {} : objectAt(mail.tags, 'detail.mail.tags');
  const jobTag = firstValue(tags[EffectTag.jobId]);
  if (jobTag === undefined) return { kind: 'ignored', reason: IgnoredBecause.Untagged };
  if (!JOB_ID_PATTERN.test(jobTag)) {
    const field = tagField(EffectTag.jobId);
    throw new MalformedEvent(field, `${field} is ${shown(jobTag)}, not a job id`);
  }
  if (!jobIds.has(jobTag)) return { kind: 'ignored', reason: IgnoredBecause.OtherJob, jobId: jobTag };

  // From here on the event is this recorder's job's: what is wrong with it is counted under the job.
  const eventType = eventTypeOf(detail, envelope['detail-type']);
  if (eventType === undefined) {
    throw new MalformedEvent(
      'detail.eventType',
      `detail.eventType is ${shown(detail.eventType)} (detail-type ${shown(envelope['detail-type'])}); SES's ` +
        `event types are ${Object.values(SesEventType).join(', ')}`,
      jobTag,
    );
  }
  const outcome = SES_EVENT_OUTCOMES[eventType];
  if (outcome === undefined) return { kind: 'ignored', reason: IgnoredBecause.EventType, jobId: jobTag };
  const effect = effectFromTags(tags as Record<string, readonly string[] | string | undefined>);
  if (!effect) {
    const wanted = [EffectTag.window, EffectTag.keyHash, EffectTag.epoch].map(tagField).join(', ');
    throw new MalformedEvent(
      'detail.mail.tags',
      `the slotguard tags of a message of job '${jobTag}' do not name an effect: ${wanted} must hold a window ` +
        `(20261130T060000Z), a key hash and an epoch of 1 or more; got ${shownTags(tags)}`,
      jobTag,
    );
  }
  const at = Date.parse(typeof mail.timestamp === 'string' ? mail.timestamp : '');
  if (Number.isNaN(at)) {
    throw new MalformedEvent(
      'detail.mail.timestamp',
      `detail.mail.timestamp is ${shown(mail.timestamp)}; SES gives when it accepted the request, in ISO 8601`,
      jobTag,
    );
  }
  const messageId = typeof mail.messageId === 'string' ? mail.messageId : undefined;
  return {
    kind: 'word',
    effect,
    word: { outcome, event: eventType, at, epoch: effect.epoch, ...(messageId ? { messageId } : {}) },
  };
}

/** `detail.eventType`, or the one the `detail-type` names when SES left it out; undefined if neither is SES's. */
function eventTypeOf(detail: Record<string, unknown>, detailType: unknown): SesEventType | undefined {
  const types: readonly string[] = Object.values(SesEventType);
  if (typeof detail.eventType === 'string') {
    return types.includes(detail.eventType) ? (detail.eventType as SesEventType) : undefined;
  }
  if (detail.eventType !== undefined) return undefined;
  const named = (Object.entries(SES_DETAIL_TYPES) as [SesEventType, string][]).find(
    ([, name]) => name === detailType,
  );
  return named?.[0];
}

function tagField(name: string): string {
  return `detail.mail.tags.${name}`;
}

function objectAt(value: unknown, field: string): Record<string, unknown> {
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    return value as Record<string, unknown>;
  }
  throw new MalformedEvent(
    field,
    `${field} is ${shown(value)}; an SES event from EventBridge has it as an object`,
  );
}

function firstValue(value: unknown): string | undefined {
  const first = Array.isArray(value) ? value[0] : value;
  return typeof first === 'string' && first !== '' ? first : undefined;
}

/** The slotguard tags only, shown: SES adds its own (`ses:from-domain`…), which are not ours to repeat. */
function shownTags(tags: Record<string, unknown>): string {
  const ours = Object.values(EffectTag).map((name) => `${name}=${shown(firstValue(tags[name]))}`);
  return ours.join(', ');
}

/** A value for a message: short, and with anything shaped like an address taken out. */
function shown(value: unknown): string {
  return redactAddresses(describe(value));
}

function jobOf(jobId: string | undefined): { jobId?: string } {
  return jobId === undefined ? {} : { jobId };
}

/** Unwinds `read` from the field that does not parse; never leaves this module. */
class MalformedEvent extends InvalidEventError {
  readonly jobId: string | undefined;
  constructor(field: string, message: string, jobId?: string) {
    super(field, `SES event rejected: ${message}`);
    this.jobId = jobId;
  }
}
