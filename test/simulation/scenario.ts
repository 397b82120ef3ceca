import fc from 'fast-check';
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
/** Attempts per request, as the SDK's retry policy makes them (slotguard configures 8; 3 exhausts sooner). */
export const CLIENT_ATTEMPTS = 3;
/** How late a slow request arrives: a whole lease, so a slow write can land after a takeover. */
export const SLOW_MS = LEASE_MS;

/** The run options every actor uses; concurrency and mark batching come from the scenario. */
export function runOptions(scenario: Scenario): RunOptions {
  return {
    leaseMs: LEASE_MS,
    renewEveryMs: LEASE_MS / 3,
    leaseSafetyMarginMs: SAFETY_MARGIN_MS,
    stopMarginMs: 1_500,
    effectConcurrency: scenario.concurrency,
    maxAttempts: scenario.maxAttempts,
    markBatchSize: scenario.markBatchSize,
    markFlushMs: 1_000,
  };
}

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
  /** Refused before acting (EffectNotPerformedError): not delivered, the reservation is released. */
  | 'refused'
  /** Delivered, then the reply times out: in doubt, and delivered. */
  | 'timeout-after-delivery'
  /** Never reached the provider, and the client times out: in doubt, and not delivered. */
  | 'timeout-before-delivery';

/** Where, around one of an actor's awaited operations (a store request or a send), something happens to it. */
export type Phase =
  /** Before the request leaves (for a send: before the provider has it). */
  | 'before'
  /** After it took effect (the write committed, the provider accepted), before the reply is seen. */
  | 'after';

/** One delivery of the window: a replica's fire, a Scheduler retry or a Lambda duplicate. */
export interface ActorPlan {
  /** When the delivery arrives, after the start. */
  readonly startAtMs: number;
  /** How far this actor's clock is off the true time. */
  readonly skewMs: number;
  /** The Lambda request id: async duplicates repeat it. */
  readonly requestId: number;
  /** Scheduler's attempt number: retries carry 2, 3, with a new execution id. */
  readonly attemptNumber: number;
  /** The Lambda's timeout: past it the process is killed. Absent: no deadline. */
  readonly timeoutMs: number | undefined;
  /** The process dies at its n-th awaited operation, counted from 0. */
  readonly crash: { readonly atOp: number; readonly phase: Phase } | undefined;
  /** The process freezes at its n-th awaited operation, for a while, then carries on. */
  readonly pause: { readonly atOp: number; readonly phase: Phase; readonly forMs: number } | undefined;
  /** Fates of its store request attempts, in the order they are made; then all ok. */
  readonly requests: readonly AttemptFate[];
  /** Fates of its sends, in order; then all ok. */
  readonly sends: readonly SendFate[];
}

/** One simulated window: its recipients, the runtime's settings, the network's speed and its actors. */
export interface Scenario {
  /** The recipient list the job iterates, in order. */
  readonly recipients: readonly string[];
  readonly concurrency: number;
  readonly markBatchSize: number;
  /** Failed runs before the slot is marked FAILED. */
  readonly maxAttempts: number;
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
  { weight: 2, arbitrary: fc.constant<SendFate>('refused') },
  { weight: 2, arbitrary: fc.constant<SendFate>('timeout-after-delivery') },
  { weight: 1, arbitrary: fc.constant<SendFate>('timeout-before-delivery') },
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

const actorPlan: fc.Arbitrary<ActorPlan> = fc.record({
  // Up to 20 s, three leases: Scheduler retries and late duplicates arrive after a holder's lease.
  startAtMs: steps(40, 500),
  // Up to two seconds either way: within the lease's safety margin (1 s) and beyond it.
  skewMs: fc.integer({ min: -8, max: 8 }).map((n) => n * 250),
  requestId: fc.integer({ min: 1, max: 3 }),
  attemptNumber: fc.integer({ min: 1, max: 3 }),
  timeoutMs: sometimes(
    steps(20, 1_000).map((ms) => ms + 4_000),
    25,
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
});

/**
 * Scenarios of one window: 2 to 5 actors fire it with their own faults, and up to 5 distinct
 * recipients. `recipients` can be replaced to try other lists (see broken-variants.test.ts).
 */
export function scenarios(
  recipients: fc.Arbitrary<readonly string[]> = fc
    .integer({ min: 1, max: 5 })
    .map((n) => Array.from({ length: n }, (_, i) => recipientAddress(i))),
): fc.Arbitrary<Scenario> {
  return fc.record({
    recipients,
    concurrency: fc.integer({ min: 1, max: 3 }),
    markBatchSize: fc.integer({ min: 1, max: 3 }),
    maxAttempts: fc.constantFrom(1, 3),
    returnOldOnConflict: fc.boolean(),
    // From time racing every step (a round trip as long as a lease) to many steps a tick (fast).
    tickMs: fc.constantFrom(250, 500, 1_000, 2_000),
    stepsPerTick: fc.constantFrom(0, 1, 2, 4, 8, 16),
    actors: fc.array(actorPlan, { minLength: 2, maxLength: 5 }),
  });
}
