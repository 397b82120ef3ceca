import fc from 'fast-check';
import type { AfterGrace } from '../../shared/job/in-doubt-resolution.js';
import type { RunOptions } from '../../shared/job/run-slot.js';

/** The window every actor fires for. */
export const WINDOW = '2026-11-30T06:00:00Z';
/** The simulated job: its id is part of every key, as in production. */
export const JOB_ID = 'sim-report';
/** True time 0 of the simulation, as an instant; every actor's clock is this plus its skew and the time passed. */
export const START = Date.parse(WINDOW) + 5_000;

/** Short leases keep a scenario to a few dozen ticks; the ratios are the runtime's defaults. */
export const LEASE_MS = 6_000;
/** The runtime's default ratio: new effects stop a sixth of the lease before it ends. */
export const SAFETY_MARGIN_MS = LEASE_MS / 6;
/** The largest clock skew an actor has, either way: within the lease's safety margin and beyond it. */
export const MAX_SKEW_MS = 2_000;
/** A run stops taking effects with less than this left before its Lambda timeout. */
export const STOP_MARGIN_MS = 1_500;
/** Attempts per request, as the SDK's retry policy makes them (slotguard configures 8; 3 exhausts sooner). */
export const CLIENT_ATTEMPTS = 3;
/** How late a slow request arrives: a whole lease, so a slow write can land after a takeover. */
export const SLOW_MS = LEASE_MS;
/** Each wait before a refused effect's retry is twice the one before. */
export const EFFECT_RETRY_BACKOFF_RATE = 2;
/** A long deadline leaves room for any continuation; a short one (the least allowed) runs out. */
export const LONG_DEADLINE_MS = 20 * 60_000;
export const SHORT_DEADLINE_MS = 60_000;
/** Runs without progress before a window is STUCK (the runtime's default). */
export const MAX_RUNS_WITHOUT_PROGRESS = 3;

/** The run options every actor uses; the rest comes from the scenario. */
export function runOptions(scenario: Scenario): RunOptions {
  return {
    leaseMs: LEASE_MS,
    renewEveryMs: LEASE_MS / 3,
    leaseSafetyMarginMs: SAFETY_MARGIN_MS,
    stopMarginMs: STOP_MARGIN_MS,
    effectConcurrency: scenario.concurrency,
    maxAttempts: scenario.maxAttempts,
    markBatchSize: scenario.markBatchSize,
    markFlushMs: 1_000,
    deadlineMs: scenario.deadlineMs,
    maxRunsWithoutProgress: MAX_RUNS_WITHOUT_PROGRESS,
    effectRetry: {
      maxAttempts: scenario.effectAttempts,
      firstDelayMs: scenario.effectRetryDelayMs,
      backoffRate: EFFECT_RETRY_BACKOFF_RATE,
    },
    failureStreakLimit: scenario.failureStreakLimit,
    shards: scenario.shards,
    ...(scenario.resolution ? { inDoubtResolution: scenario.resolution } : {}),
  };
}

/** The grace period the scenario's runs wait for the provider's word (the runtime's default: none). */
export const graceOf = (scenario: Pick<Scenario, 'resolution'>) => scenario.resolution?.graceMs ?? 0;

/** What the runs do with an in-doubt effect still without a word after the grace period (the runtime's default: report it). */
export const afterGraceOf = (scenario: Pick<Scenario, 'resolution'>): AfterGrace =>
  scenario.resolution?.afterGrace ?? 'report';

/** The window's deadline, as the first claim stores it: the scheduled time plus the scenario's deadline. */
export const deadlineOf = (scenario: Scenario) => Date.parse(WINDOW) + scenario.deadlineMs;

/** What happens to one attempt of a store request. */
export type AttemptFate =
  /** Arrives, applies, and its reply comes back. */
  | 'ok'
  /** Refused before it applies (throttling, a 5xx): the client retries. */
  | 'throttle'
  /** Applies, and its reply is lost (a timeout): the client retries, and the retry meets its own write. */
  | 'lost-reply'
  /** Arrives a lease later than it was sent, then applies and replies. */
  | 'slow';

/** What the mail provider does with one send. */
export type SendFate =
  | 'ok'
  /** Refused before acting (EffectNotPerformedError, throttled): not delivered, retried by a later run. */
  | 'refused'
  /** Delivered, then the reply times out: in doubt, and delivered. */
  | 'timeout-after-delivery'
  /** Never reached the provider, and the client times out: in doubt, and not delivered. */
  | 'timeout-before-delivery'
  /**
   * Reached the provider, which rejected the message without sending it (SES: Reject, Rendering
   * Failure), and the reply times out: in doubt, not delivered, and the provider's word says so.
   */
  | 'timeout-after-rejection';

/**
 * When one of a message's events reaches the recorder (`EffectLedger.recordProviderWord`): this
 * long after the send, or after the send's grace period ended (`grace`: a word late by the job's
 * own measure).
 */
export interface WordDelivery {
  readonly after: 'send' | 'grace';
  readonly ms: number;
}

/**
 * What becomes of the provider's events about one message the provider took or rejected: each
 * delivery list is empty (the event is lost), one time, or two (delivered twice).
 */
export interface WordPlan {
  /** The message's first event: Send when the provider took it, Reject when it did not. */
  readonly first: readonly WordDelivery[];
  /**
   * A message the provider took and then rejected all the same (SES: a Send, then a Reject for a
   * virus; it never reaches the recipient): that Reject's deliveries. Absent: the provider keeps
   * what it took.
   */
  readonly rejectedAfter: readonly WordDelivery[] | undefined;
}

/** Where, around one of an actor's awaited operations (a store request or a send), something happens to it. */
export type Phase =
  /** Before the request leaves (for a send: before the provider has it). */
  | 'before'
  /** After it took effect (the write committed, the provider accepted), before the reply is seen. */
  | 'after';

/** How one process running one delivery of the window is struck: its clock, its deadline, its faults. */
export interface ProcessPlan {
  /** How far this actor's clock is off the true time. */
  readonly skewMs: number;
  /** The Lambda's timeout: the run stops taking effects 1.5 s before it, and the process is killed at it. Absent: none. */
  readonly timeoutMs: number | undefined;
  /** The process dies at its n-th awaited operation, counted from 0. */
  readonly crash: { readonly atOp: number; readonly phase: Phase } | undefined;
  /** The process freezes at its n-th awaited operation, for a while, then carries on. */
  readonly pause: { readonly atOp: number; readonly phase: Phase; readonly forMs: number } | undefined;
  /** Fates of its store request attempts, in the order they are made; then all ok. */
  readonly requests: readonly AttemptFate[];
  /** Fates of its sends, in order; then all ok. */
  readonly sends: readonly SendFate[];
  /** What becomes of the provider's events about its sends, in order; then each arrives once, promptly. */
  readonly words: readonly WordPlan[];
  /**
   * The job's own code throws (a bug, a dependency down) before its walk or after it: the run
   * fails, counting toward maxAttempts. Absent: it does not.
   */
  readonly jobThrows: 'before' | 'after' | undefined;
}

/** One fire of the window: the schedule's message, a duplicate receive of it, or a Scheduler retry's. */
export interface ActorPlan extends ProcessPlan {
  /** When the delivery arrives, after the start. */
  readonly startAtMs: number;
  /** The Lambda request id: async duplicates repeat it. */
  readonly requestId: number;
  /**
   * Scheduler's attempt number. Each attempt is its own message on the work queue (a retried
   * SendMessage whose first try did land); actors with the same attempt are receives of one message.
   */
  readonly attemptNumber: number;
}

/** A redelivery of a window's message by the work queue while the window is not finished, in the faulty phase. */
export interface ContinuationPlan extends ProcessPlan {
  /** At-least-once: the queue delivers this receive a second time, this long after the first. Absent: once. */
  readonly duplicateAfterMs: number | undefined;
}

/**
 * How the shards of a split window each keep to their own recipients (JobContext.onceEach's
 * `split`): `by-key`, every shard walks the whole list and keeps the keys that hash to it; `source`,
 * each shard reads a range of the list (shardRange), overlapping the next shard's by one recipient,
 * as a source that splits itself imperfectly would: two shards meet that recipient's key.
 */
export type ShardSplit = 'by-key' | 'source';

/** One simulated window: its recipients, the runtime's settings, the network's speed and its actors. */
export interface Scenario {
  /** The recipient list the job iterates, in order. */
  readonly recipients: readonly string[];
  /** The job reads its recipients from a resumable source (continuations resume from the checkpoint) rather than a list. */
  readonly resumable: boolean;
  /** Recipients (by index) the provider refuses on every attempt, healthy or not: a suppressed address. */
  readonly alwaysRefused: readonly number[];
  readonly concurrency: number;
  readonly markBatchSize: number;
  /** Failed runs before the slot is marked FAILED. */
  readonly maxAttempts: number;
  /** Attempts per refused effect before it fails for good. */
  readonly effectAttempts: number;
  /** The wait before a refused effect's first retry (doubled for each later one). */
  readonly effectRetryDelayMs: number;
  /** Consecutive refusals of one kind that stop a run ('provider-failing'). */
  readonly failureStreakLimit: number;
  /** How long after its scheduled time the window must be finished. */
  readonly deadlineMs: number;
  /** DynamoDB returns the conflicting item with a failed condition; dynalite does not. */
  readonly returnOldOnConflict: boolean;
  /** How far time moves in one tick of the simulated clock. */
  readonly tickMs: number;
  /**
   * Steps that happen between two ticks while work is pending: 0 lets time race every request (a
   * network as slow as the lease), more lets requests through faster than leases run out.
   */
  readonly stepsPerTick: number;
  readonly actors: readonly ActorPlan[];
  /** The faults of the work queue's first redeliveries, in order; later ones wait for the final, healthy phase. */
  readonly continuations: readonly ContinuationPlan[];
  /** Shards the window is split into: 1 (not split), or 2 to 4, each run from its own message. */
  readonly shards: number;
  /** How a split window's shards keep to their own recipients. */
  readonly split: ShardSplit;
  /**
   * The faults of the first deliveries of shard messages (whichever shard), in order; later ones
   * wait for the final, healthy phase. Unused when the window is not split.
   */
  readonly shardDeliveries: readonly ContinuationPlan[];
  /**
   * How the runs settle effects in doubt from the provider's word (RunOptions.inDoubtResolution).
   * Absent: the runtime's default (no grace period, report what has no word).
   */
  readonly resolution: { readonly graceMs: number; readonly afterGrace: AfterGrace } | undefined;
}

/** A process nothing strikes: the final phase's deliveries. */
export const HEALTHY: ProcessPlan = {
  skewMs: 0,
  timeoutMs: undefined,
  crash: undefined,
  pause: undefined,
  requests: [],
  sends: [],
  words: [],
  jobThrows: undefined,
};

/** The schedule's first fire at the start, struck by nothing: where a plan written by hand starts. */
export const FIRST_FIRE: ActorPlan = { ...HEALTHY, startAtMs: 0, requestId: 1, attemptNumber: 1 };

/**
 * A window written by hand rather than drawn (a finding's own test, the crash sweep): its
 * recipients, walk and actors, with settings a drawn window often has (3 failed runs and 3 attempts
 * per effect, retries after 3 s, a long deadline, a fast network) and no fault but its actors' own;
 * not split, the runtime's default resolution.
 */
export function writtenWindow(
  window: Pick<Scenario, 'recipients' | 'resumable' | 'concurrency' | 'markBatchSize' | 'actors'>,
): Scenario {
  return {
    alwaysRefused: [],
    maxAttempts: 3,
    effectAttempts: 3,
    effectRetryDelayMs: 3_000,
    failureStreakLimit: 10,
    deadlineMs: LONG_DEADLINE_MS,
    returnOldOnConflict: true,
    tickMs: 250,
    stepsPerTick: 16,
    continuations: [],
    shards: 1,
    split: 'by-key',
    shardDeliveries: [],
    resolution: undefined,
    ...window,
  };
}

/**
 * The recipients (by index, from `from` up to `to`, exclusive) that shard `index` of `count` reads
 * when its source splits itself: an even share, and the first recipient of the next shard's share.
 */
export function shardRange(index: number, count: number, recipients: number): { from: number; to: number } {
  const from = Math.floor((index * recipients) / count);
  return { from, to: Math.min(recipients, Math.floor(((index + 1) * recipients) / count) + 1) };
}

/** The address of recipient `index`. */
export const recipientAddress = (index: number) => `r${index}@example.test`;

/** Fates of a network where `percent` of attempts fail: 2 in 5 throttled, 2 lose their reply, 1 is slow. */
function attemptFates(percent: number, maxLength: number): fc.Arbitrary<AttemptFate[]> {
  const fate = fc.oneof(
    { weight: 5 * (100 - percent), arbitrary: fc.constant<AttemptFate>('ok') },
    { weight: 2 * percent, arbitrary: fc.constant<AttemptFate>('throttle') },
    { weight: 2 * percent, arbitrary: fc.constant<AttemptFate>('lost-reply') },
    { weight: percent, arbitrary: fc.constant<AttemptFate>('slow') },
  );
  return fc.array(fate, { maxLength });
}

const sendFate = fc.oneof(
  { weight: 12, arbitrary: fc.constant<SendFate>('ok') },
  { weight: 3, arbitrary: fc.constant<SendFate>('refused') },
  { weight: 2, arbitrary: fc.constant<SendFate>('timeout-after-delivery') },
  { weight: 1, arbitrary: fc.constant<SendFate>('timeout-before-delivery') },
  { weight: 1, arbitrary: fc.constant<SendFate>('timeout-after-rejection') },
);

const phase = fc.constantFrom<Phase>('before', 'after');

/** `arbitrary` in `percent` of cases, else undefined (which is also what it shrinks to). */
function sometimes<T>(arbitrary: fc.Arbitrary<T>, percent: number): fc.Arbitrary<T | undefined> {
  return fc.oneof(
    { weight: 100 - percent, arbitrary: fc.constant(undefined) },
    { weight: percent, arbitrary },
  );
}
const steps = (max: number, stepMs: number) => fc.integer({ min: 0, max }).map((n) => n * stepMs);

/**
 * When an event reaches the recorder: promptly (before its sender has even marked the effect done,
 * or died), a few leases later (while a later run takes the window over and resolves it), or only
 * after the grace period (late, by the job's own measure).
 */
const wordDelivery = fc.oneof(
  { weight: 4, arbitrary: steps(4, 250).map((ms): WordDelivery => ({ after: 'send', ms })) },
  { weight: 3, arbitrary: steps(36, 500).map((ms): WordDelivery => ({ after: 'send', ms: ms + 2_000 })) },
  { weight: 2, arbitrary: steps(30, 1_000).map((ms): WordDelivery => ({ after: 'grace', ms })) },
);

/** One event's deliveries: lost, once, or twice (at-least-once delivery). */
const wordDeliveries = fc.oneof(
  { weight: 2, arbitrary: fc.constant<WordDelivery[]>([]) },
  { weight: 7, arbitrary: wordDelivery.map((d) => [d]) },
  { weight: 2, arbitrary: fc.tuple(wordDelivery, wordDelivery) },
);

const wordPlan: fc.Arbitrary<WordPlan> = fc.record({
  first: wordDeliveries,
  rejectedAfter: sometimes(wordDeliveries, 4),
});

const processPlan = {
  // Up to two seconds either way: within the lease's safety margin (1 s) and beyond it.
  skewMs: fc.integer({ min: -8, max: 8 }).map((n) => n * (MAX_SKEW_MS / 8)),
  // From 1 s (less than the stop margin: the run yields before its first effect) to 21 s, in half
  // seconds, mostly under 6 s (a run of five recipients takes a few), so the run stops for time at
  // any step: between reservations, during a mark flush or a checkpoint, or killed during its release.
  timeoutMs: sometimes(
    fc.oneof(
      { weight: 3, arbitrary: steps(10, 500).map((ms) => ms + 1_000) },
      { weight: 1, arbitrary: steps(30, 500).map((ms) => ms + 6_000) },
    ),
    35,
  ),
  crash: sometimes(fc.record({ atOp: fc.nat(24), phase }), 40),
  pause: sometimes(fc.record({ atOp: fc.nat(24), phase, forMs: steps(16, 1_000) }), 35),
  // Most actors see a mostly healthy store; some a stormy one, where requests fail every attempt
  // often enough to reach the runtime's store-error paths.
  requests: fc.oneof(
    { weight: 3, arbitrary: attemptFates(25, 16) },
    { weight: 1, arbitrary: attemptFates(60, 40) },
  ),
  sends: fc.array(sendFate, { maxLength: 6 }),
  words: fc.array(wordPlan, { maxLength: 6 }),
  jobThrows: sometimes(fc.constantFrom<'before' | 'after'>('before', 'after'), 6),
};

const actorPlan: fc.Arbitrary<ActorPlan> = fc.record({
  ...processPlan,
  // Up to 20 s, three leases: Scheduler retries and late duplicates arrive after a holder's lease,
  // and race the continuations of a run that yielded.
  startAtMs: steps(40, 500),
  requestId: fc.integer({ min: 1, max: 3 }),
  attemptNumber: fc.integer({ min: 1, max: 3 }),
});

const continuationPlan: fc.Arbitrary<ContinuationPlan> = fc.record({
  ...processPlan,
  // Mostly at once (two receives racing for the claim), sometimes a few seconds apart.
  duplicateAfterMs: sometimes(steps(8, 500), 25),
});

/** Distinct recipient lists of 1 to 5 addresses. */
const distinctRecipients = fc
  .integer({ min: 1, max: 5 })
  .map((n) => Array.from({ length: n }, (_, i) => recipientAddress(i)));

/**
 * Scenarios of one window: 2 to 5 actors fire it with their own faults, up to 3 redeliveries of its
 * message by the work queue carry faults too, and up to 5 distinct recipients. A third of the
 * windows are split into 2 to 4 shards, whose first 6 deliveries carry faults. Each process's plan
 * says when the provider's events about its messages arrive, and three windows in four settle
 * in-doubt effects with a grace period. `recipients` can be replaced to try other lists (see
 * protocol.simulation.test.ts).
 */
export function scenarios(
  recipients: fc.Arbitrary<readonly string[]> = distinctRecipients,
): fc.Arbitrary<Scenario> {
  return fc.record({
    recipients,
    resumable: fc.boolean(),
    // A quarter of the windows have one or two addresses the provider refuses every time.
    alwaysRefused: fc.oneof(
      { weight: 3, arbitrary: fc.constant<number[]>([]) },
      { weight: 1, arbitrary: fc.uniqueArray(fc.nat(4), { minLength: 1, maxLength: 2 }) },
    ),
    concurrency: fc.integer({ min: 1, max: 3 }),
    markBatchSize: fc.integer({ min: 1, max: 3 }),
    maxAttempts: fc.constantFrom(1, 3),
    effectAttempts: fc.constantFrom(2, 3),
    // A few seconds: retries happen within a case. Twenty: runs that yield and come back meanwhile
    // meet refusals that are not due yet.
    effectRetryDelayMs: fc.constantFrom(3_000, 20_000),
    failureStreakLimit: fc.constantFrom(2, 10),
    deadlineMs: fc.oneof(
      { weight: 4, arbitrary: fc.constant(LONG_DEADLINE_MS) },
      { weight: 1, arbitrary: fc.constant(SHORT_DEADLINE_MS) },
    ),
    returnOldOnConflict: fc.boolean(),
    // From time racing every step (a round trip as long as a lease) to many steps a tick (fast).
    tickMs: fc.constantFrom(250, 500, 1_000, 2_000),
    stepsPerTick: fc.constantFrom(0, 1, 2, 4, 8, 16),
    actors: fc.array(actorPlan, { minLength: 2, maxLength: 5 }),
    continuations: fc.array(continuationPlan, { maxLength: 3 }),
    // A third of the windows are split, so the coordinator's fan-out and every shard's messages go
    // through the work queue with its faults.
    shards: fc.oneof(
      { weight: 2, arbitrary: fc.constant(1) },
      { weight: 1, arbitrary: fc.integer({ min: 2, max: 4 }) },
    ),
    split: fc.constantFrom<ShardSplit>('by-key', 'source'),
    shardDeliveries: fc.array(continuationPlan, { maxLength: 6 }),
    // Most windows settle in-doubt effects from the provider's word with a grace period: none, one
    // shorter than a lease, one longer than a takeover, or one that outlasts the deadline; then
    // keep what still has no word in doubt, or send it again. The rest run with the defaults.
    resolution: sometimes(
      fc.record({
        graceMs: fc.constantFrom(0, 4_000, 15_000, 30 * 60_000),
        afterGrace: fc.constantFrom<AfterGrace>('report', 'resend'),
      }),
      75,
    ),
  });
}
