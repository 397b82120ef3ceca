import { randomUUID } from 'node:crypto';
import { SES_DETAIL_TYPES, type SesEventType } from '../../shared/provider-events/ses-events.js';

/** One message as SES saw it: what its events are built from. */
export interface SesMessage {
  readonly messageId: string;
  /** When SES accepted the request (ISO 8601). */
  readonly timestamp: string;
  /** The recipient: SES events repeat it in `destination`, `headers` and `commonHeaders`. */
  readonly to: string;
  /** The message's EmailTags, as SendEmail gave them. */
  readonly tags: readonly { readonly Name: string; readonly Value: string }[];
  /** @default 'slotguard-weekly-report' */
  readonly configurationSet?: string;
}

const FROM = 'reports@example.com';

/**
 * An SES email sending event as EventBridge delivers it from a configuration set's event
 * destination: the envelope (`source: aws.ses`, `detail-type` "Email Sent" and so on) around SES's
 * event record, shaped as the SES Developer Guide's examples (Send, Reject, Rendering Failure,
 * Delivery…): the `mail` object with the addresses in `source`, `destination`, `headers` and
 * `commonHeaders`, SES's own tags beside the message's (each a list of values), and the event's
 * own object. The addresses are there on purpose: the recorder must never log them.
 */
export function sesEvent(eventType: SesEventType, message: SesMessage): Record<string, unknown> {
  const configurationSet = message.configurationSet ?? 'slotguard-weekly-report';
  const tags: Record<string, string[]> = {
    'ses:configuration-set': [configurationSet],
    'ses:source-ip': ['192.0.2.0'],
    'ses:from-domain': ['example.com'],
    'ses:caller-identity': ['slotguard-weekly-report-function'],
    ...Object.fromEntries(message.tags.map((tag) => [tag.Name, [tag.Value]])),
  };
  const mail = {
    timestamp: message.timestamp,
    source: FROM,
    sourceArn: 'arn:aws:ses:eu-west-1:123456789012:identity/example.com',
    sendingAccountId: '123456789012',
    messageId: message.messageId,
    destination: [message.to],
    headersTruncated: false,
    headers: [
      { name: 'From', value: FROM },
      { name: 'To', value: message.to },
      { name: 'Subject', value: 'Your weekly report' },
      { name: 'MIME-Version', value: '1.0' },
    ],
    commonHeaders: {
      from: [FROM],
      to: [message.to],
      messageId: message.messageId,
      subject: 'Your weekly report',
    },
    tags,
  };
  const later = new Date(Date.parse(message.timestamp) + 1_500).toISOString();
  const own: Record<SesEventType, Record<string, unknown>> = {
    Send: { send: {} },
    Reject: { reject: { reason: 'Bad content' } },
    'Rendering Failure': {
      failure: {
        errorMessage: "Attribute 'name' is not present in the rendering data.",
        templateName: 'Report',
      },
    },
    Delivery: {
      delivery: {
        timestamp: later,
        processingTimeMillis: 1_500,
        recipients: [message.to],
        smtpResponse: '250 2.6.0 Message received',
        reportingMTA: 'a1-2.smtp-out.eu-west-1.amazonses.com',
      },
    },
    Bounce: {
      bounce: {
        bounceType: 'Permanent',
        bounceSubType: 'General',
        bouncedRecipients: [{ emailAddress: message.to, action: 'failed', status: '5.1.1' }],
        timestamp: later,
        feedbackId: `${message.messageId}-bounce`,
      },
    },
    Complaint: {
      complaint: { complainedRecipients: [{ emailAddress: message.to }], timestamp: later, feedbackId: 'f' },
    },
    DeliveryDelay: {
      deliveryDelay: { timestamp: later, delayType: 'TransientCommunicationFailure', delayedRecipients: [] },
    },
    Open: { open: { ipAddress: '192.0.2.1', timestamp: later, userAgent: 'Mozilla/5.0' } },
    Click: { click: { ipAddress: '192.0.2.1', timestamp: later, link: 'https://example.com/report' } },
    Subscription: { subscription: { contactList: 'reports', timestamp: later, source: 'UnsubscribeHeader' } },
  };
  return {
    version: '0',
    id: randomUUID(),
    'detail-type': SES_DETAIL_TYPES[eventType],
    source: 'aws.ses',
    account: '123456789012',
    time: later.replace(/\.\d{3}Z$/, 'Z'),
    region: 'eu-west-1',
    resources: [],
    detail: { eventType, mail, ...own[eventType] },
  };
}

/**
 * Whether EventBridge would hand `event` to a rule with `pattern`, for the part of the pattern
 * language slotguard's rules use: a list of values a field must equal one of (any element, for a
 * field that is itself a list), and objects nested field by field. Any other form in the pattern
 * throws, so a rule that starts using one cannot pass here unread.
 */
export function matchesEventPattern(pattern: unknown, event: unknown): boolean {
  if (typeof pattern !== 'object' || pattern === null || Array.isArray(pattern)) {
    throw new Error(`an event pattern must be an object of fields, got ${JSON.stringify(pattern)}`);
  }
  const fields = typeof event === 'object' && event !== null ? (event as Record<string, unknown>) : {};
  return Object.entries(pattern).every(([name, wanted]) => {
    const value = fields[name];
    if (!Array.isArray(wanted)) return matchesEventPattern(wanted, value);
    if (wanted.some((w) => typeof w !== 'string')) {
      throw new Error(`only lists of exact strings are read here, got ${JSON.stringify(wanted)} at ${name}`);
    }
    return [value].flat().some((v) => wanted.includes(v));
  });
}
