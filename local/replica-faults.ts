import type { WorkQueue } from '../shared/continuation/work-queue.js';
import type { EmailSender } from '../shared/effects/email-sender.js';
import { ConfigurationError, SlotguardError } from '../shared/errors.js';
import type { SlotBackend } from '../shared/job/run-slot.js';
import type { ClaimStore, EffectLedger } from '../shared/slot/ports.js';
import type { Slot } from '../shared/slot/slot.js';

/**
 * The faults of production the local runner can inject on the slotguard side, each applied to
 * every window it fires. Each fire is a message on the job's work queue, so recovery is the queue's:
 * - `duplicate`: the first delivery of each replica's message is handed out twice (SQS's
 *   at-least-once delivery: the same message, two receipt handles, two invocations at once).
 * - `retry`: once the window's first deliveries are over, the schedule sends it again with a new
 *   execution id and attempt number 2 (Scheduler retrying a fire it believed failed).
 * - `crash`: the invocation holding the slot dies at a random effect, before or after sending it;
 *   from that instant none of its requests, emails or visibility changes go out, and Lambda never
 *   gets its answer. Its message comes back when the last heartbeat's visibility (two leases) ends,
 *   or another replica's message comes back first, and the delivery takes the slot over.
 * - `pause`: the holder freezes at a random effect; its heartbeats stop, so past its lease another
 *   delivery takes over, and the frozen holder wakes once that run is over, as a zombie whose
 *   writes are fenced by epoch.
 */
export const FaultKind = { Duplicate: 'duplicate', Retry: 'retry', Crash: 'crash', Pause: 'pause' } as const;
export type FaultKind = (typeof FaultKind)[keyof typeof FaultKind];

const FAULT_KINDS: readonly string[] = Object.values(FaultKind);

/** Reads `duplicate,retry,crash,pause` (any subset, any order); the error names the unknown one. */
export function parseFaults(text: string | undefined): FaultKind[] {
  if (text === undefined || text.trim() === '' || text === 'none') return [];
  const faults: FaultKind[] = [];
  for (const name of text.split(',').map((part) => part.trim().toLowerCase())) {
    if (!FAULT_KINDS.includes(name)) {
      throw new ConfigurationError(
        'faults',
        `--faults has ${JSON.stringify(name)}; use a comma-separated list of ${FAULT_KINDS.join(', ')}`,
      );
    }
    if (!faults.includes(name as FaultKind)) faults.push(name as FaultKind);
  }
  return faults;
}

/** Every request and email of an invocation that crashed fails with this, from the crash on. */
export class ReplicaCrashedError extends SlotguardError {}

/**
 * One invocation's process as the faults see it: running, crashed (every call fails from then on,
 * as if the process were gone) or frozen (every call waits, as under SIGSTOP or a long GC pause).
 */
export class InvocationGate {
  readonly name: string;
  #crashed = false;
  #frozen: { promise: Promise<void>; resume: () => void } | undefined;

  constructor(name: string) {
    this.name = name;
  }

  get crashed(): boolean {
    return this.#crashed;
  }

  get frozen(): boolean {
    return this.#frozen !== undefined;
  }

  crash(): void {
    this.#crashed = true;
    this.thaw();
  }

  freeze(): void {
    if (this.#frozen || this.#crashed) return;
    let resume = () => {};
    const promise = new Promise<void>((resolve) => {
      resume = resolve;
    });
    this.#frozen = { promise, resume };
  }

  thaw(): void {
    const frozen = this.#frozen;
    this.#frozen = undefined;
    frozen?.resume();
  }

  /** Runs `call` as this invocation: it waits while frozen and fails once crashed, even in flight. */
  async pass<T>(call: () => Promise<T>): Promise<T> {
    while (this.#frozen) await this.#frozen.promise;
    this.#assertAlive();
    const result = await call();
    // A reply that arrives after the crash reaches nobody.
    this.#assertAlive();
    return result;
  }

  #assertAlive(): void {
    if (this.#crashed)
      throw new ReplicaCrashedError(
        `${this.name} crashed; nothing it does reaches the store or the mail server`,
      );
  }
}

/**
 * The backend as one invocation reaches it: every call goes through its gate. `onClaimed` is told
 * the slot of each claim granted (the window, or one of its shards).
 */
export function gatedBackend(
  backend: SlotBackend,
  gate: InvocationGate,
  observe: { onClaimed?: (slot: Slot) => void } = {},
): SlotBackend {
  const claims: ClaimStore = {
    claim: async (slot, lease, now) => {
      const outcome = await gate.pass(() => backend.claims.claim(slot, lease, now));
      if (outcome.kind === 'claimed') observe.onClaimed?.(slot);
      return outcome;
    },
    renew: (claim, leaseMs, now) => gate.pass(() => backend.claims.renew(claim, leaseMs, now)),
    checkpoint: (claim, checkpoint, progress, doneMarks) =>
      gate.pass(() => backend.claims.checkpoint(claim, checkpoint, progress, doneMarks)),
    complete: (claim, summary, now) => gate.pass(() => backend.claims.complete(claim, summary, now)),
    release: (claim, reason, now) => gate.pass(() => backend.claims.release(claim, reason, now)),
    read: (slot) => gate.pass(() => backend.claims.read(slot)),
    shardFinished: (window, shard) => gate.pass(() => backend.claims.shardFinished(window, shard)),
    finishSharded: (window, finish, now) =>
      gate.pass(() => backend.claims.finishSharded(window, finish, now)),
  };
  const ledger: EffectLedger = {
    reserve: (claim, keyHash, options) => gate.pass(() => backend.ledger.reserve(claim, keyHash, options)),
    markDone: (claim, keyHashes) => gate.pass(() => backend.ledger.markDone(claim, keyHashes)),
    recordFailure: (claim, keyHash, failure) =>
      gate.pass(() => backend.ledger.recordFailure(claim, keyHash, failure)),
    unreserve: (claim, keyHash) => gate.pass(() => backend.ledger.unreserve(claim, keyHash)),
    read: (slot, keyHash) => gate.pass(() => backend.ledger.read(slot, keyHash)),
    list: (slot) => backend.ledger.list(slot),
    recordProviderWord: (slot, keyHash, word) =>
      gate.pass(() => backend.ledger.recordProviderWord(slot, keyHash, word)),
    settleInDoubt: (slot, stale, to, now) =>
      gate.pass(() => backend.ledger.settleInDoubt(slot, stale, to, now)),
  };
  return { claims, ledger, hashKey: backend.hashKey };
}

/**
 * The work queue as one invocation reaches it: a crashed invocation's heartbeat or retry delay
 * never arrives, and a frozen one's waits, so its message comes back on the queue's own terms.
 */
export function gatedWorkQueue(queue: WorkQueue, gate: InvocationGate): WorkQueue {
  return {
    send: (body, delayMs) => gate.pass(() => queue.send(body, delayMs)),
    sendBatch: (bodies, delayMs) => gate.pass(() => queue.sendBatch(bodies, delayMs)),
    changeVisibility: (handle, visibleInMs) => gate.pass(() => queue.changeVisibility(handle, visibleInMs)),
  };
}

/** Where in an effect a crash strikes. */
export type CrashPoint = 'before-send' | 'after-send';

/** What a window's script does to the invocation that reaches a given effect. */
export type EffectFault =
  | { readonly kind: 'crash'; readonly point: CrashPoint; readonly atEffect: number }
  | { readonly kind: 'pause'; readonly atEffect: number };

/**
 * The crash and pause planned for one window, each struck once: by the invocation that makes the
 * window's send with its effect number, counted over every run of the window (only the slot's
 * holder performs effects, so it is always the holder, whichever run of a continued window that
 * is). A pause planned with a crash strikes a run after the crashed one.
 */
export class WindowFaultScript {
  readonly #pending: EffectFault[];
  #sends = 0;
  readonly struck: { fault: EffectFault; invocation: string }[] = [];

  constructor(faults: readonly FaultKind[], effectsPerWindow: number, random: () => number) {
    const pick = (within: number) => 1 + Math.floor(random() * Math.max(1, within));
    this.#pending = [];
    let pauseFrom = 0;
    let pauseWithin = effectsPerWindow;
    if (faults.includes(FaultKind.Crash)) {
      const atEffect = pick(effectsPerWindow);
      this.#pending.push({ kind: 'crash', point: random() < 0.5 ? 'before-send' : 'after-send', atEffect });
      // Within the first half of what is left after the crash, so the window still has work then.
      pauseFrom = atEffect;
      pauseWithin = Math.floor((effectsPerWindow - atEffect) / 2);
    }
    if (faults.includes(FaultKind.Pause)) {
      this.#pending.push({ kind: 'pause', atEffect: pauseFrom + pick(pauseWithin) });
    }
  }

  /** The fault an invocation meets at the window's next send, if it is the one due; consumed. */
  take(invocation: string): EffectFault | undefined {
    const effect = ++this.#sends;
    const next = this.#pending[0];
    if (!next || effect < next.atEffect) return undefined;
    // One fault per invocation: the one a crash is about to take down must not also freeze.
    if (this.struck.some((strike) => strike.invocation === invocation)) return undefined;
    this.#pending.shift();
    this.struck.push({ fault: next, invocation });
    return next;
  }
}

/**
 * The sender as one invocation reaches it: through its gate, and playing the window's script at
 * each send. `onStrike` is told when a crash or a pause happens (the runner reports it, and wakes a
 * frozen holder once a takeover is over).
 */
export function gatedSender(
  sender: EmailSender,
  gate: InvocationGate,
  script: WindowFaultScript | undefined,
  onStrike: (fault: EffectFault) => void,
): EmailSender {
  return {
    async send(message, options) {
      // A crashed or frozen invocation is not the one a fault is waiting for: sends still in flight
      // there must not use up the window's next fault.
      const fault = gate.crashed || gate.frozen ? undefined : script?.take(gate.name);
      if (fault?.kind === 'crash' && fault.point === 'before-send') {
        gate.crash();
        onStrike(fault);
      } else if (fault?.kind === 'pause') {
        gate.freeze();
        onStrike(fault);
      }
      await gate.pass(() => sender.send(message, options));
      if (fault?.kind === 'crash' && fault.point === 'after-send') {
        gate.crash();
        onStrike(fault);
        throw new ReplicaCrashedError(`${gate.name} crashed after sending, before recording it`);
      }
    },
  };
}

/** A small seeded PRNG (mulberry32), so a fault plan replays from its seed. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
