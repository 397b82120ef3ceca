/**
 * The CloudWatch contract between the runtime (which emits these in Embedded Metric Format) and the
 * CDK constructs (which alarm on them). One definition, imported by both, so they cannot drift.
 */
export const METRICS_NAMESPACE = 'Slotguard';

/** The one dimension every slotguard metric carries. */
export const JOB_ID_DIMENSION = 'JobId';

/** The metrics slotguard emits, in namespace `Slotguard` with the one dimension `JobId`. */
export const MetricName = {
  /** A run won its slot (new, takeover, retry or continuation): the dashboard counts runs with it. */
  ClaimAcquired: 'ClaimAcquired',
  /** A fire found its slot already held or done: the incident's signal (3 replicas = 2 of these). */
  DuplicateClaim: 'DuplicateClaim',
  /** A claim took over a RUNNING slot whose lease had expired (the holder died or froze). */
  LeaseTakeover: 'LeaseTakeover',
  /** A holder learned its slot was taken over and stopped reserving effects. */
  LeaseLost: 'LeaseLost',
  /** An effect ran and was recorded done. */
  EffectDone: 'EffectDone',
  /** An effect was found done by an earlier run and skipped. */
  EffectSkipped: 'EffectSkipped',
  /**
   * Effects still in doubt when their window (or shard) finished: reserved, never recorded done,
   * and not settled by the provider's word within the grace period. Counted once, at the finish.
   * Pages: a person must check before anyone re-sends.
   */
  EffectInDoubt: 'EffectInDoubt',
  /**
   * A run met an effect whose outcome it cannot know (an earlier run reserved it and never recorded
   * it, or the send failed in a way that may have happened). Provisional: the provider's word may
   * settle it before the window finishes. Not alarmed.
   */
  EffectInDoubtFound: 'EffectInDoubtFound',
  /** An in-doubt effect the provider's word confirmed it accepted: recorded done, not sent again. */
  InDoubtConfirmed: 'InDoubtConfirmed',
  /**
   * An effect still in doubt when its window finished (counted in EffectInDoubt then) that the
   * provider's word, arriving later, confirmed: recorded done by the watchdog. Many of these mean the
   * grace period is shorter than the provider's events take to arrive. Not alarmed.
   */
  InDoubtConfirmedLate: 'InDoubtConfirmedLate',
  /** An in-doubt effect the provider said it did not accept (SES Reject): due for a retry. */
  InDoubtRejected: 'InDoubtRejected',
  /** An in-doubt effect with no word past the grace period, sent again by the job's opt-in policy. */
  InDoubtResent: 'InDoubtResent',
  /**
   * The SES event recorder wrote the provider's word onto an effect not yet done (one in flight, or
   * one a run left in doubt), or found it there already (a duplicated event).
   */
  ProviderWordRecorded: 'ProviderWordRecorded',
  /**
   * The SES event recorder wrote nothing for an event: the effect was done already (the usual case:
   * the run marked it before SES reported), its record is gone or of another epoch, the event says
   * nothing about one message, it is another job's, or it is malformed (logged).
   */
  ProviderWordIgnored: 'ProviderWordIgnored',
  /**
   * An effect failed for good: refused on its last allowed attempt (or its key was unusable), so it
   * was not performed. Pages: somebody did not get their email.
   */
  EffectFailed: 'EffectFailed',
  /** The provider refused an effect before performing it; a later run retries it after a backoff. */
  EffectRetried: 'EffectRetried',
  /** An event that can never succeed was rejected without a claim, an effect or a retry. */
  InvalidEvent: 'InvalidEvent',
  /** A run stopped with work left (Lambda time or lease margin) and released its slot to be resumed. */
  RunYielded: 'RunYielded',
  /** A run stopped because one kind of provider failure repeated (every send refused or erroring). Pages. */
  ProviderFailing: 'ProviderFailing',
  /** Continuation gave up on a window (no progress in N runs, or past its deadline): STUCK. Pages. */
  WindowStuck: 'WindowStuck',
  /** The watchdog found a window the schedule should have had with no record past its grace. Pages. */
  WindowMissing: 'WindowMissing',
  /** The watchdog found a window not finished (or STUCK, FAILED) past its deadline. Pages. */
  WindowIncomplete: 'WindowIncomplete',
  /** The watchdog ran (its own missing-data alarm watches the watchdog). */
  WatchdogRun: 'WatchdogRun',
} as const;
export type MetricName = (typeof MetricName)[keyof typeof MetricName];
