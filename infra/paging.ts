import { MetricName } from '../shared/telemetry/metric-names.js';

/**
 * What pages and what only shows on the dashboard: the one place slotguard decides it. ScheduledJob
 * and SlotguardWatchdog give an alarm their alarm actions when, and only when, its entry here says
 * `pages`; docs/cdk.md's alarm table says the same in prose, and a test holds the template to it.
 *
 * The rule: page when a window or a recipient is at risk and nothing in slotguard will fix it by
 * itself, or when the machinery that would notice has stopped. Everything slotguard absorbs by
 * design (a duplicate delivery, a yield, a retried refusal, a takeover) only shows on the dashboard.
 */
export const ALARM_PAGING = {
  windowStuck: {
    pages: true,
    why: 'continuation gave up on a window (no progress in 3 runs, or past its deadline): no run will finish it',
  },
  windowMissing: {
    pages: true,
    why: 'a window the schedule should have had has no record past its grace: nothing ran it',
  },
  windowIncomplete: {
    pages: true,
    why: 'a window is unfinished past its deadline, or STUCK or FAILED: recipients are still waiting',
  },
  effectsFailed: {
    pages: true,
    why: 'a recipient failed for good (the window ends PARTIAL): somebody did not get their email',
  },
  effectsInDoubt: {
    pages: true,
    why:
      'a send may or may not have happened, and neither the provider nor the grace period settled it by the ' +
      "window's finish: only a person can check before anyone re-sends",
  },
  providerFailing: {
    pages: true,
    why: 'a run stopped because the provider refused or failed every send: the job is not sending at all',
  },
  deadLetters: {
    pages: true,
    why: 'a window message or a fire arrived in the dead-letter queue: nothing retries it any more',
  },
  functionErrors: {
    pages: true,
    why: 'the handler threw or timed out, which a healthy run never does (it yields instead)',
  },
  targetErrors: {
    pages: true,
    why: "Scheduler could not send a fire to the work queue (the queue or Scheduler's role broke)",
  },
  droppedInvocations: {
    pages: true,
    why: 'Scheduler gave up on a fire: that window will not run unless someone backfills it',
  },
  workQueueAge: {
    pages: false,
    why:
      'a window message waiting longer than its deadline allows; the watchdog already pages for that window ' +
      '(WindowMissing or WindowIncomplete), and this alarm shows the on-call it waits in the queue',
  },
  providerEventsLost: {
    pages: true,
    why:
      "an SES event could not be recorded (it reached the recorder's dead-letter queue): the effect it was about " +
      "stays in doubt, or with afterGrace 'resend' may be sent twice",
  },
  watchdogStopped: {
    pages: true,
    why: 'the watchdog stopped reporting: WindowMissing and WindowIncomplete cannot page until it runs again',
  },
} as const satisfies Record<string, { readonly pages: boolean; readonly why: string }>;

/** An alarm slotguard creates, by its key in ALARM_PAGING. */
export type AlarmKey = keyof typeof ALARM_PAGING;

/**
 * Signals with no alarm, shown on the dashboard only, and why none pages: each is slotguard doing
 * its job. A steady stream of one is worth a look in daylight (docs/operations.md says what each
 * stream means), never a page.
 */
export const DASHBOARD_ONLY = {
  [MetricName.DuplicateClaim]:
    'a second delivery of a window was absorbed (SQS and Scheduler deliver at least once); a steady stream means a second trigger',
  [MetricName.RunYielded]:
    'a run stopped with work left and its window continues; many per window means runs are too short for the work',
  [MetricName.EffectRetried]: 'the provider refused a send before performing it; a later run retries it',
  [MetricName.LeaseTakeover]: "a run took over a window whose holder's lease ran out (it crashed or froze)",
  [MetricName.LeaseLost]: 'a holder learned its window was taken over and stopped sending',
  [MetricName.InvalidEvent]: 'an event that can never run was rejected (malformed, or for another job)',
  [MetricName.EffectInDoubtFound]:
    "a run found an effect in doubt; the provider's word or the grace period settles it before the window " +
    'finishes, and only what is left pages (EffectInDoubt)',
  [MetricName.InDoubtConfirmed]: 'SES had accepted an in-doubt effect: recorded done, not sent again',
  [MetricName.InDoubtRejected]:
    'SES had not sent an in-doubt effect (Reject, Rendering Failure): the window sent it',
  [MetricName.InDoubtResent]:
    "an in-doubt effect SES said nothing of within the grace period was sent again (afterGrace 'resend')",
  [MetricName.ProviderWordRecorded]: "the recorder wrote SES's word onto an effect not yet done",
  [MetricName.ProviderWordIgnored]:
    'an SES event wrote nothing: mostly the effect was done already (the run was quicker than SES); the rest are logged',
  workQueueDepth: 'window messages waiting or in flight: how much work the engine holds',
} as const;
