/**
 * The fault matrix: each failure slotguard promises to survive, staged on a real server with
 * replicas as real child processes (test/helpers/replica-process.ts) that email a real SMTP server
 * on loopback. Described once here and run against every backend by its own test file.
 *
 * Every count a scenario asserts comes from outside the runtime: what the SMTP sink accepted, what
 * the ledger holds once the dust settles, and the run summaries; each scenario prints one line of
 * them. Nothing waits on a timer: a replica is crashed, frozen or faulted when its own stdout says
 * it reached the point, and a dead holder's lease is ended by the backend's `expireLease`.
 *
 * The sink records its word on each effect (accepted, or rejected when a scenario has it refuse a
 * message), as SES's events do deployed: on time (before it answers, as the local runner has it),
 * late, lost or twice (WordChannel). What a dead replica left in doubt is settled from it, and a
 * survivor's clock is moved to each look.
 */
import { describe, expect, it, onTestFailed, onTestFinished } from 'vitest';
import { weeklyReportJob } from '../../functions/weekly-report/job.js';
import { syntheticCustomers } from '../../functions/weekly-report/recipients.js';
import { localInDoubtResolution } from '../../local/local-runner.js';
import { type SinkWord, type SinkWordListener, type SmtpSink, startSmtpSink } from '../../local/smtp-sink.js';
import { recordSmtpWords } from '../../local/smtp-word-recorder.js';
import { type Clock, systemClock } from '../../shared/clock.js';
import type { WorkQueue } from '../../shared/continuation/work-queue.js';
import type { EffectContext } from '../../shared/effects/effect-context.js';
import { hmacEffectKeys } from '../../shared/effects/effect-key.js';
import { shardOfKeyHash } from '../../shared/effects/resumable-source.js';
import { smtpSender } from '../../shared/effects/smtp-email-sender.js';
import { AfterGrace, type InDoubtResolution } from '../../shared/job/in-doubt-resolution.js';
import { createJobHandler, type HandlerResponse } from '../../shared/job/lambda-handler.js';
import type { SlotBackend } from '../../shared/job/run-slot.js';
import {
  type EffectLedger,
  type EffectRecord,
  EffectState,
  type ProviderWordOutcome,
  type RunSummary,
  SlotState,
} from '../../shared/slot/ports.js';
import type { Slot } from '../../shared/slot/slot.js';
import { EmfRecorder, RecordingLog, schedulerEvent, TEST_SECRET, testHandler } from '../helpers/harness.js';
import { ManualClock } from '../helpers/manual-clock.js';
import {
  CrashPoint,
  type Replica,
  type ReplicaExit,
  type ReplicaOptions,
  type ReplicaStore,
  type RssSample,
  shardWorkerOptions,
  startReplica,
} from '../helpers/replica-process.js';
import { startTcpProxy } from '../helpers/tcp-proxy.js';

const JOB = 'weekly-report';
/** The children's lease: long enough that nothing but a test's `expireLease` ever ends one. */
export const LEASE_MS = 60_000;

/** A host and port on loopback. */
export interface Address {
  readonly host: string;
  readonly port: number;
}

/** One scenario's store: a fresh DynamoDB table or Postgres schema. */
export interface ScenarioStore {
  /** The table or schema, unique to the scenario. */
  readonly name: string;
  /** The server, for a proxy to stand in front of. */
  readonly address: Address;
  /** How a replica process finds this store, through `via` (a proxy) when given. */
  replicaStore(via?: Address): ReplicaStore;
  /** The store as an in-process replica sees it: survivors run on it, the ledger is read through it. */
  readonly backend: SlotBackend;
  /**
   * Ends the lease on `slot` for the next claimer, without waiting for it, and returns the clock
   * that claimer runs on. DynamoDB compares the claimer's clock with the lease end the holder wrote
   * (by a clock `holderSkewMs` off), so the survivor gets a ManualClock past it; Postgres compares
   * the database's clock, so the row's lease end is moved into the past.
   */
  expireLease(slot: Slot, holderSkewMs: number): Promise<Clock>;
  /**
   * Waits until whatever the killed replicas named here had sent the store has landed. Postgres:
   * their server sessions are gone (a statement a dead client sent still commits until its session
   * notices). DynamoDB needs none: a request is applied whole when it arrives.
   */
  untilSettled?(replicaNames: readonly string[]): Promise<void>;
}

/** Faults in the store while a replica runs (scenario 6), as each backend can have them. */
export interface StoreFaults {
  /** Options for the replica (DynamoDB: injected throttling, 5xx and lost replies). */
  readonly replica?: Partial<ReplicaOptions>;
  /** What the parent does to the store while the replica sends `total` emails; returns a description. */
  during?(replica: Replica, store: ScenarioStore, slot: Slot, total: number): Promise<string>;
  /** The seed that replays the injected faults, printed when the scenario fails. */
  readonly seed?: number;
  /** Describes what the replica reported injecting. */
  describe?(exit: ReplicaExit): string;
}

/** What one backend brings to the matrix. */
export interface FaultMatrixBackend {
  readonly name: string;
  /** Whose clock ends a lease: each claimer's (DynamoDB) or the database's (Postgres). */
  readonly leaseClock: 'caller' | 'database';
  freshStore(): Promise<ScenarioStore>;
  readonly storeFaults: StoreFaults;
  /**
   * Hits `clients` separate clients with one burst of retryable faults at the same instant and
   * returns, per client, when each attempt of its request started (ms after the burst).
   */
  burstRetryTimes(clients: number): Promise<number[][]>;
  /** Recipients for the streaming scenario: as many as fit about half a minute on two cores. */
  readonly streamRecipients: number;
}

/**
 * How a survivor settles what a killed replica left in doubt, as the local runner does: words on
 * time make a no-word reservation one that was never accepted, so it is sent again after a lease.
 */
const LOCAL_RESOLUTION = localInDoubtResolution({ leaseMs: LEASE_MS, lambdaTimeoutMs: 900_000, faults: [] });

/** A grace period the survivor's first look falls inside on either backend's clock. */
const LONG_GRACE_MS = 10 * 60_000;

/** What becomes of the sink's word on each message that is an effect. */
export const WordFault = {
  /** Written before the sink answers: a send that returned has its word on record. */
  OnTime: 'on-time',
  /** Kept, the answer sent at once, and written when the test releases them (after a takeover's look). */
  Late: 'late',
  /** Never written. */
  Lost: 'lost',
  /** Written twice, both before the sink answers. */
  Duplicated: 'duplicated',
} as const;
export type WordFault = (typeof WordFault)[keyof typeof WordFault];

/**
 * The sink's channel for its word: its `onWord`, writing each effect's word onto the ledger
 * (`recordSmtpWords`) as `fault` says, and keeping what the ledger answered; and its `refuse`.
 */
class WordChannel {
  fault: WordFault = WordFault.OnTime;
  /** Which messages the sink refuses, by their recipients: none unless a scenario says. */
  refuses: (recipients: readonly string[]) => boolean = () => false;
  /**
   * Runs once the word on a refused message has gone its way, before the sink answers it: a
   * scenario kills the sender here, so it dies between the refusal and hearing it.
   */
  beforeRefusal: () => Promise<void> = async () => {};
  /** What the ledger answered each write, in order. */
  readonly answers: ProviderWordOutcome[] = [];
  /** Words never written. */
  lost = 0;
  readonly #record: (effect: EffectContext, word: SinkWord) => Promise<ProviderWordOutcome>;
  readonly #held: { readonly effect: EffectContext; readonly word: SinkWord }[] = [];

  constructor(ledger: EffectLedger) {
    this.#record = recordSmtpWords(ledger, systemClock);
  }

  readonly refuse = ({ recipients }: { readonly recipients: readonly string[] }) => this.refuses(recipients);

  readonly listener: SinkWordListener = async (effect, word) => {
    await this.#pass(effect, word);
    if (word.outcome === 'rejected') await this.beforeRefusal();
  };

  async #pass(effect: EffectContext, word: SinkWord): Promise<void> {
    switch (this.fault) {
      case WordFault.OnTime:
        this.answers.push(await this.#record(effect, word));
        return;
      case WordFault.Late:
        this.#held.push({ effect, word });
        return;
      case WordFault.Lost:
        this.lost++;
        return;
      case WordFault.Duplicated:
        this.answers.push(await this.#record(effect, word));
        this.answers.push(await this.#record(effect, word));
        return;
      default: {
        const never: never = this.fault;
        throw new Error(`unknown word fault ${String(never)}`);
      }
    }
  }

  /** Writes the words kept back, in the order the sink gave them; returns how many. */
  async release(): Promise<number> {
    const held = this.#held.splice(0);
    for (const { effect, word } of held) this.answers.push(await this.#record(effect, word));
    return held.length;
  }
}

/** The window of "now" by the system clock, as the scheduler would stamp it. */
function currentWindow(): string {
  return new Date(Math.floor(Date.now() / 60_000) * 60_000 - 60_000).toISOString().replace('.000Z', 'Z');
}

/** Every customer's email by its effect-key hash, so ledger records can be matched with the sink. */
async function emailsByKey(total: number): Promise<Map<string, string>> {
  const hash = hmacEffectKeys(TEST_SECRET);
  const emails = new Map<string, string>();
  for await (const customer of syntheticCustomers(total)) emails.set(hash(customer.email), customer.email);
  return emails;
}

/** The ledger of a slot once every replica is done, split by epoch and state. */
class LedgerTally {
  constructor(
    readonly records: readonly EffectRecord[],
    private readonly emails: ReadonlyMap<string, string>,
  ) {}

  static async read(backend: SlotBackend, slot: Slot, emails: ReadonlyMap<string, string>) {
    const records: EffectRecord[] = [];
    for await (const record of backend.ledger.list(slot)) records.push(record);
    return new LedgerTally(records, emails);
  }

  /** Emails of the records in `state`, of `epoch` if given. */
  emailsOf(state: EffectState, epoch?: number): string[] {
    return this.records
      .filter((r) => r.state === state && (epoch === undefined || r.epoch === epoch))
      .map((r) => this.emails.get(r.keyHash) ?? `(unknown key ${r.keyHash})`);
  }

  count(state: EffectState, epoch?: number): number {
    return this.emailsOf(state, epoch).length;
  }
}

/** The sink's view of some recipients: how many got 0, 1 or more emails. */
function receipts(sink: SmtpSink, emails: readonly string[]) {
  let none = 0;
  let once = 0;
  let more = 0;
  for (const email of emails) {
    const n = sink.received.get(email) ?? 0;
    if (n === 0) none++;
    else if (n === 1) once++;
    else more++;
  }
  return { none, once, more };
}

/**
 * The ledger against the sink once the window is over: each done recipient got exactly one email,
 * each in-doubt one at most one, nobody two, the sink holds nothing else, and not done = in doubt +
 * failed (as the run or window `summary` reports them), exactly.
 */
function assertAgainstSink(
  sink: SmtpSink,
  tally: LedgerTally,
  total: number,
  summary: { readonly inDoubt: number; readonly failed: number },
) {
  const done = tally.emailsOf(EffectState.Done);
  const inDoubt = tally.emailsOf(EffectState.Reserved);
  expect(receipts(sink, done)).toEqual({ none: 0, once: done.length, more: 0 });
  const doubtful = receipts(sink, inDoubt);
  expect(doubtful.more).toBe(0);
  expect(sink.duplicates()).toBe(0);
  expect(sink.total()).toBe(done.length + doubtful.once);
  expect(total - done.length).toBe(summary.inDoubt + summary.failed);
  return { done, inDoubt, doubtful };
}

function sinkLine(sink: SmtpSink): string {
  return `sink ${sink.total()} emails to ${sink.received.size} recipients, ${sink.duplicates()} twice`;
}

function summaryLine(s: RunSummary): string {
  return `done ${s.done}, skipped ${s.skipped}, in doubt ${s.inDoubt}, failed ${s.failed}`;
}

/** The summary of a run that must have ended `status` at `epoch`. */
function summaryOf(
  result: HandlerResponse | undefined,
  status: 'completed' | 'fenced',
  epoch: number,
): RunSummary {
  expect(result).toMatchObject({ status, epoch });
  if (result?.status !== status) throw new Error(`expected ${status}, got ${JSON.stringify(result)}`);
  return result.summary;
}

const invocation = (name: string) => ({ awsRequestId: name, getRemainingTimeInMillis: () => 900_000 });

export function describeFaultMatrix(backend: FaultMatrixBackend): void {
  const tag = `[${backend.name}]`;

  /** One scenario's store, sink and slot, torn down when the test ends whatever its outcome. */
  async function setUp(total: number) {
    const store = await backend.freshStore();
    const words = new WordChannel(store.backend.ledger);
    const [sink, emails] = await Promise.all([
      startSmtpSink({ onWord: words.listener, refuse: words.refuse }),
      emailsByKey(total),
    ]);
    const window = currentWindow();
    const slot: Slot = { jobId: JOB, window };
    const replicas: Replica[] = [];
    onTestFinished(async () => {
      // A failed assertion can leave a child running or frozen: end it (SIGKILL ends a stopped one too).
      for (const replica of replicas) replica.process.kill('SIGKILL');
      await Promise.all(replicas.map((replica) => replica.exited));
      await sink.close();
    });
    /** Replicas whose process has ended (killed, or exited). */
    const ended: string[] = [];
    const replica = (name: string, options: Partial<ReplicaOptions> = {}) => {
      const started = startReplica({
        store: store.replicaStore(),
        window,
        total,
        smtpPort: sink.port,
        name,
        concurrency: 8,
        leaseSeconds: LEASE_MS / 1000,
        ...options,
      });
      replicas.push(started);
      void started.exited.then(() => ended.push(name));
      return started;
    };
    /**
     * Runs the weekly report in this process, as the replica that takes over: a Scheduler retry of
     * the window, or `message` (a shard's message delivered again), settling what is in doubt per
     * `resolution` (the runtime's default, none, unless given).
     */
    const survivor = async (
      name: string,
      clock: Clock,
      options: {
        readonly message?: Record<string, unknown>;
        readonly resolution?: InDoubtResolution;
        readonly emf?: EmfRecorder;
      } = {},
    ) => {
      const smtp = smtpSender({ host: sink.host, port: sink.port });
      const emf = options.emf ?? new EmfRecorder();
      const { handler } = testHandler(
        weeklyReportJob({ customers: () => syntheticCustomers(total), sender: smtp }),
        store.backend,
        {
          clock,
          emf,
          ...(options.resolution ? { run: { inDoubtResolution: options.resolution } } : {}),
        },
      );
      try {
        const event = options.message ?? schedulerEvent(JOB, window, 2, `exec-${name}`);
        const result = await handler(event, invocation(name));
        return { result, takeovers: emf.sum('LeaseTakeover') };
      } finally {
        smtp.close();
      }
    };
    /**
     * The survivor, and the window's message each time it comes back, until the window (or shard)
     * is over: a run that yields (waiting for a word, or for the retry of what it sent again) is
     * delivered again at its `resumeAfter`, which `clock` is moved to. `between` runs after each
     * yield, before the clock moves. Every run's metrics go to one recorder.
     */
    const settle = async (
      name: string,
      clock: ManualClock,
      options: {
        readonly resolution: InDoubtResolution;
        readonly message?: Record<string, unknown>;
        readonly between?: (run: number) => Promise<void>;
      },
    ) => {
      const emf = new EmfRecorder();
      const results: HandlerResponse[] = [];
      for (let run = 0; run < 10; run++) {
        const { result } = await survivor(`${name}-${run}`, clock, { ...options, emf });
        results.push(result);
        if (result.status !== 'yielded') break;
        await options.between?.(run);
        await clock.advance(Math.max(0, (result.resumeAfter ?? clock.now()) - clock.now()));
      }
      const resolved = {
        confirmed: emf.sum('InDoubtConfirmed'),
        rejected: emf.sum('InDoubtRejected'),
        resent: emf.sum('InDoubtResent'),
      };
      return { results, emf, resolved, last: results.at(-1) };
    };
    /**
     * What the killed replica (epoch 1) left, read once it is dead and before anyone takes over:
     * its marks, and its reservations in doubt (`inDoubt` of them) split by what the sink did with
     * each: accepted (the sink has the email), refused, and never handed to it.
     */
    const leftByTheDead = async () => {
      // What the dead replica handed over before it died is answered, and its word told, first;
      // what it sent the store has landed.
      await store.untilSettled?.(ended);
      await sink.idle();
      const tally = await ledger();
      const inDoubt = tally.emailsOf(EffectState.Reserved, 1);
      const accepted = (email: string) => (sink.received.get(email) ?? 0) > 0;
      const refused = (email: string) => !accepted(email) && (sink.refused.get(email) ?? 0) > 0;
      return {
        done: tally.count(EffectState.Done, 1),
        inDoubt: inDoubt.length,
        accepted: inDoubt.filter(accepted),
        refused: inDoubt.filter(refused),
        never: inDoubt.filter((email) => !accepted(email) && !refused(email)),
      };
    };
    /** A survivor's clock that the test moves: from the clock the lease was ended for. */
    const takeoverClock = async (at: Slot = slot) => new ManualClock((await store.expireLease(at, 0)).now());
    /**
     * Fires the window in this process at a job split into `shards`: its coordinator's fan-out is
     * kept, one message body per shard, as the work queue would carry them to the shard workers.
     */
    const coordinator = async (shards: number) => {
      const bodies: string[] = [];
      const queue: WorkQueue = {
        send: async (body) => {
          bodies.push(body);
        },
        sendBatch: async (batch) => {
          bodies.push(...batch);
        },
        changeVisibility: async () => 'changed',
      };
      const handler = createJobHandler(
        weeklyReportJob({
          customers: () => syntheticCustomers(total),
          sender: { send: () => Promise.reject(new Error('a coordinator emails nobody')) },
        }),
        {
          backend: store.backend,
          metrics: () => ({ count() {}, flush: async () => {} }),
          log: new RecordingLog(),
          options: { leaseMs: LEASE_MS, shards },
          workQueue: queue,
        },
      );
      const result = await handler(schedulerEvent(JOB, window), invocation('coordinator'));
      return { result, bodies };
    };
    const ledger = () => LedgerTally.read(store.backend, slot, emails);
    return {
      store,
      sink,
      words,
      emails,
      window,
      slot,
      replica,
      survivor,
      settle,
      leftByTheDead,
      takeoverClock,
      coordinator,
      ledger,
    };
  }

  type Scenario = Awaited<ReturnType<typeof setUp>>;
  type LeftByTheDead = Awaited<ReturnType<Scenario['leftByTheDead']>>;
  type Settled = Awaited<ReturnType<Scenario['settle']>>;

  /**
   * Checks a survivor's takeover from a replica that was killed, and the runs after it, against the
   * ledger and the sink: the takeover's walk skipped the dead replica's marks and found its
   * reservations in doubt; each was settled from the sink's word on it (confirmed: the sink had the
   * email; rejected: it refused it; sent again: it never had it); the window ended DONE with nothing
   * in doubt, and every recipient got exactly one email.
   */
  async function assertSettled(
    scenario: Scenario,
    total: number,
    killed: ReplicaExit,
    left: LeftByTheDead,
    settled: Settled,
  ) {
    expect(killed.signal).toBe('SIGKILL');
    const [takeover] = settled.results;
    expect(takeover).toMatchObject({ epoch: 2 });
    expect(settled.emf.sum('LeaseTakeover')).toBe(1);
    const walk = takeover && 'summary' in takeover ? takeover.summary : undefined;
    // The takeover's walk found what the dead replica left: its marks, and its reservations.
    expect({ skipped: walk?.skipped, inDoubt: walk?.inDoubt, failed: walk?.failed }).toEqual({
      skipped: left.done,
      inDoubt: left.inDoubt,
      failed: 0,
    });
    expect(settled.resolved).toEqual({
      confirmed: left.accepted.length,
      rejected: left.refused.length,
      resent: left.never.length,
    });
    expect(settled.last).toMatchObject({
      status: 'completed',
      state: 'DONE',
      window: { done: total, inDoubt: 0, failed: 0 },
    });
    // Nothing left for a person: the alarmed count is 0.
    expect(settled.emf.sum('EffectInDoubt')).toBe(0);
    const tally = await scenario.ledger();
    expect(tally.records).toHaveLength(total);
    expect(tally.count(EffectState.Done)).toBe(total);
    expect(receipts(scenario.sink, [...scenario.emails.values()])).toEqual({ none: 0, once: total, more: 0 });
    expect(scenario.sink.total()).toBe(total);
    return walk;
  }

  /** The settle of what a killed replica left in doubt, in words. */
  function settledLine(left: LeftByTheDead, settled: Settled): string {
    const { confirmed, rejected, resent } = settled.resolved;
    return (
      `left in doubt ${left.inDoubt} (${left.accepted.length} accepted by the sink, ${left.refused.length} refused, ` +
      `${left.never.length} never handed to it): ${confirmed} confirmed, ${rejected} rejected, ${resent} sent again, ` +
      `over ${settled.results.length} runs`
    );
  }

  describe(`fault matrix on ${backend.name}: replicas as real processes, email over real SMTP`, () => {
    it('takes over the slot of a replica killed between its claim and its first effect, and emails everyone once with nothing in doubt', async () => {
      const total = 300;
      const scenario = await setUp(total);
      const dead = scenario.replica('killed-before-first', {
        crash: { point: CrashPoint.BeforeFirstEffect },
      });
      const killed = await dead.exited;
      expect(killed.crash?.point).toBe(CrashPoint.BeforeFirstEffect);
      expect(dead.claims).toEqual([{ kind: 'claimed', epoch: 1, via: 'new' }]);
      expect(scenario.sink.total()).toBe(0);

      const left = await scenario.leftByTheDead();
      expect(left).toEqual({ done: 0, inDoubt: 0, accepted: [], refused: [], never: [] });
      const settled = await scenario.settle('survivor', await scenario.takeoverClock(), {
        resolution: LOCAL_RESOLUTION,
      });
      const walk = await assertSettled(scenario, total, killed, left, settled);
      expect(settled.results).toHaveLength(1);
      expect(walk).toMatchObject({ done: total, skipped: 0, inDoubt: 0, failed: 0 });
      console.info(
        `${tag} 1 crash between claim and first effect: survivor took over at epoch 2: ${summaryLine(walk!)}; ${sinkLine(scenario.sink)}`,
      );
    });

    it("emails once, by the retry, the recipient whose replica was killed between reserving and sending: in doubt with no word on the sink's record, it is sent again", async () => {
      const total = 300;
      const scenario = await setUp(total);
      const dead = scenario.replica('killed-after-reserve', {
        crash: { point: CrashPoint.AfterReserve, at: 120 },
      });
      const killed = await dead.exited;
      const crashed = killed.crash;
      expect(crashed).toMatchObject({ point: CrashPoint.AfterReserve, n: 120 });
      // The recipient it died over is in doubt, and got nothing: no word on the sink's record.
      const left = await scenario.leftByTheDead();
      expect(left.never).toContain(crashed?.email);

      const settled = await scenario.settle('survivor', await scenario.takeoverClock(), {
        resolution: LOCAL_RESOLUTION,
      });
      const walk = await assertSettled(scenario, total, killed, left, settled);
      // Sent again, by the window's retry: it got the one email.
      expect(scenario.sink.received.get(crashed?.email ?? '')).toBe(1);
      console.info(
        `${tag} 2 crash between reservation and send (#${crashed?.n}, ${dead.sent.length} reported sent): ` +
          `survivor ${summaryLine(walk!)}; ${settledLine(left, settled)}; ${sinkLine(scenario.sink)}`,
      );
    });

    it("does not email again a recipient whose replica was killed between sending and marking it done: the sink's record confirms it", async () => {
      const total = 300;
      const scenario = await setUp(total);
      const dead = scenario.replica('killed-after-send', { crash: { point: CrashPoint.AfterSend, at: 120 } });
      const killed = await dead.exited;
      const crashed = killed.crash;
      expect(crashed).toMatchObject({ point: CrashPoint.AfterSend, n: 120 });
      expect(dead.sent).toHaveLength(120);
      // Sent, never marked: in doubt, with its word on the sink's record.
      const left = await scenario.leftByTheDead();
      expect(left.accepted).toContain(crashed?.email);

      const settled = await scenario.settle('survivor', await scenario.takeoverClock(), {
        resolution: LOCAL_RESOLUTION,
      });
      const walk = await assertSettled(scenario, total, killed, left, settled);
      // Confirmed, not sent again: it got exactly the one email.
      expect(scenario.sink.received.get(crashed?.email ?? '')).toBe(1);
      // Everything the dead replica saw accepted reached its recipient once, never twice.
      expect(receipts(scenario.sink, dead.sent)).toEqual({ none: 0, once: dead.sent.length, more: 0 });
      console.info(
        `${tag} 3 crash between send and mark (#${crashed?.n}): survivor ${summaryLine(walk!)}; ` +
          `${settledLine(left, settled)}; ${sinkLine(scenario.sink)}`,
      );
    });

    it('fences a replica frozen past its lease: the survivor completes, and the thawed replica ends fenced having emailed nobody the survivor did', async () => {
      const total = 400;
      const scenario = await setUp(total);
      const frozen = scenario.replica('frozen');
      await frozen.untilSent(100);
      frozen.freeze();
      const sentBeforeFreeze = frozen.sentCount;

      const clock = await scenario.store.expireLease(scenario.slot, 0);
      const survivor = await scenario.survivor('survivor', clock);
      const survived = summaryOf(survivor.result, 'completed', 2);
      expect(survivor.takeovers).toBe(1);

      frozen.thaw();
      const zombie = await frozen.exited;
      const fenced = summaryOf(zombie.result, 'fenced', 1);
      const tally = await scenario.ledger();
      // Its own reservations it finishes and marks; everything else it finds taken and skips.
      expect(tally.records).toHaveLength(total);
      expect(tally.count(EffectState.Reserved)).toBe(0);
      expect(fenced.done).toBe(tally.count(EffectState.Done, 1));
      expect(fenced.done).toBe(frozen.sent.length);
      expect(survived.done).toBe(tally.count(EffectState.Done, 2));
      expect(survived.skipped + survived.inDoubt).toBe(fenced.done);
      expect(survived.done + fenced.done).toBe(total);
      // Nobody the survivor emailed heard from the zombie, and nobody got two.
      const bySurvivor = new Set(tally.emailsOf(EffectState.Done, 2));
      expect(frozen.sent.filter((email) => bySurvivor.has(email))).toEqual([]);
      expect(scenario.sink.duplicates()).toBe(0);
      expect(scenario.sink.received.size).toBe(total);
      expect(scenario.sink.total()).toBe(total);
      console.info(
        `${tag} 4 lease expiry while working: frozen after ${sentBeforeFreeze} sent; survivor epoch 2 ${summaryLine(survived)}; ` +
          `thawed replica ended fenced: ${summaryLine(fenced)}; ${sinkLine(scenario.sink)}`,
      );
    });

    it('completes with the same counts when every store connection is dropped three times mid-run', async () => {
      const total = 600;
      const scenario = await setUp(total);
      const proxy = await startTcpProxy(scenario.store.address);
      onTestFinished(() => proxy.close());
      const replica = scenario.replica('dropped', { store: scenario.store.replicaStore(proxy) });
      const drops: number[] = [];
      for (const at of [total / 4, total / 2, (total * 3) / 4]) {
        await replica.untilSent(at);
        drops.push(proxy.dropAll());
      }
      const exit = await replica.exited;
      const summary = summaryOf(exit.result, 'completed', 1);
      expect(drops.every((n) => n > 0)).toBe(true);
      expect(summary).toMatchObject({ done: total, skipped: 0, inDoubt: 0, failed: 0 });
      expect(scenario.sink.total()).toBe(total);
      expect(scenario.sink.received.size).toBe(total);
      const tally = await scenario.ledger();
      expect(tally.count(EffectState.Done, 1)).toBe(total);
      console.info(
        `${tag} 5 dropped connections: ${drops.length} drops of ${drops.join(', ')} connections; ${summaryLine(summary)}; ${sinkLine(scenario.sink)}`,
      );
    });

    it('completes with the same counts through bursts of store faults', async () => {
      const total = 600;
      const { seed } = backend.storeFaults;
      if (seed !== undefined)
        onTestFailed(() =>
          console.error(`${tag} store faults seed ${seed}: FAULT_SEED=${seed} replays them`),
        );
      const scenario = await setUp(total);
      const replica = scenario.replica('faulted', { concurrency: 32, ...backend.storeFaults.replica });
      const during = await backend.storeFaults.during?.(replica, scenario.store, scenario.slot, total);
      const exit = await replica.exited;
      const summary = summaryOf(exit.result, 'completed', 1);
      expect(summary).toMatchObject({ done: total, skipped: 0, inDoubt: 0, failed: 0 });
      expect(scenario.sink.total()).toBe(total);
      expect(scenario.sink.received.size).toBe(total);
      const tally = await scenario.ledger();
      expect(tally.count(EffectState.Done, 1)).toBe(total);
      const injected = [during, backend.storeFaults.describe?.(exit)].filter(Boolean).join('; ');
      console.info(
        `${tag} 6 store faults (${injected}): ${summaryLine(summary)}; ${sinkLine(scenario.sink)}`,
      );
    });

    it('retries a burst of store faults with jittered backoff: clients hit at the same instant do not retry in lockstep', async () => {
      const times = await backend.burstRetryTimes(3);
      for (const attempts of times) expect(attempts.length).toBeGreaterThanOrEqual(3);
      // Lockstep would put every client's n-th attempt at the same instant.
      const retries = Math.min(...times.map((t) => t.length)) - 1;
      let spread = 0;
      for (let n = 1; n <= retries; n++) {
        const at = times.map((t) => t[n] ?? 0);
        spread += Math.max(...at) - Math.min(...at);
      }
      for (let a = 0; a < times.length; a++) {
        for (let b = a + 1; b < times.length; b++) {
          const apart = Array.from({ length: retries }, (_, i) =>
            Math.abs((times[a]?.[i + 1] ?? 0) - (times[b]?.[i + 1] ?? 0)),
          );
          expect(
            Math.max(...apart),
            `clients ${a} and ${b} retried at ${JSON.stringify(times)}`,
          ).toBeGreaterThan(1);
        }
      }
      expect(spread, JSON.stringify(times)).toBeGreaterThan(20);
      console.info(
        `${tag} 6 jittered backoff: attempts (ms after the burst) ${times.map((t) => `[${t.map((ms) => Math.round(ms)).join(', ')}]`).join(' ')}; ` +
          `retries spread over ${Math.round(spread)} ms in total`,
      );
    });

    it('emails nobody twice when replicas whose clocks are 2 minutes slow and 2 minutes fast fire the same window', async () => {
      const total = 400;
      const skew = 120_000;
      /** Starts the replica with clock `first` skew, then the other one once the first is sending. */
      const race = async (first: number) => {
        const scenario = await setUp(total);
        const early = scenario.replica(first < 0 ? 'slow-clock' : 'fast-clock', {
          clockSkewMs: first,
          waitForGo: true,
        });
        const late = scenario.replica(first < 0 ? 'fast-clock' : 'slow-clock', {
          clockSkewMs: -first,
          waitForGo: true,
        });
        await Promise.all([
          early.until((l) => l === 'ready', 'ready'),
          late.until((l) => l === 'ready', 'ready'),
        ]);
        early.go();
        await early.untilSent(50);
        late.go();
        const [a, b] = await Promise.all([early.exited, late.exited]);
        const takeovers = [...early.claims, ...late.claims].filter((c) => c.via === 'takeover').length;
        const record = await scenario.store.backend.claims.read(scenario.slot);
        expect(record?.epoch).toBe(1 + takeovers);
        // Whoever ran, each recipient got exactly one email.
        expect(scenario.sink.duplicates()).toBe(0);
        expect(scenario.sink.received.size).toBe(total);
        expect(scenario.sink.total()).toBe(total);
        const tally = await scenario.ledger();
        expect(tally.count(EffectState.Done)).toBe(total);
        return { takeovers, a, b, sink: sinkLine(scenario.sink) };
      };
      const [slowFirst, fastFirst] = await Promise.all([race(-skew), race(skew)]);

      // A fast clock never takes over from a slow one's live lease, on either backend.
      expect(fastFirst.takeovers).toBe(0);
      expect(fastFirst.a.result).toMatchObject({ status: 'completed', epoch: 1 });
      expect(fastFirst.b.result).toMatchObject({ status: 'duplicate', outcome: { kind: 'held' } });
      if (backend.leaseClock === 'caller') {
        // The slow holder wrote a lease end 4 minutes behind the fast claimer's clock, which is past
        // its 60 s lease: the fast one takes over a live holder. The ledger keeps it to one email each.
        expect(slowFirst.takeovers).toBe(1);
        const holder = summaryOf(slowFirst.a.result, 'fenced', 1);
        const taker = summaryOf(slowFirst.b.result, 'completed', 2);
        expect(taker.skipped + taker.inDoubt).toBe(holder.done);
        expect(taker.done + holder.done).toBe(total);
      } else {
        // The database's clock decides: the fast replica finds the slot held and stands down.
        expect(slowFirst.takeovers).toBe(0);
        expect(slowFirst.a.result).toMatchObject({ status: 'completed', epoch: 1 });
        expect(slowFirst.b.result).toMatchObject({ status: 'duplicate', outcome: { kind: 'held' } });
      }
      const describeRun = (exit: ReplicaExit) =>
        exit.result && 'summary' in exit.result
          ? `${exit.result.status} (${summaryLine(exit.result.summary)})`
          : (exit.result?.status ?? 'no result');
      console.info(
        `${tag} 7 clock skew ±2 min: slow clock first: ${slowFirst.takeovers} takeover(s), slow ${describeRun(slowFirst.a)}, ` +
          `fast ${describeRun(slowFirst.b)}, ${slowFirst.sink}; fast clock first: ${fastFirst.takeovers} takeover(s), ` +
          `fast ${describeRun(fastFirst.a)}, slow ${describeRun(fastFirst.b)}, ${fastFirst.sink}`,
      );
    });

    it('takes over the shard of one of eight shard workers killed mid-run: the window finishes once, nobody is emailed twice, and not done = in doubt + failed', async () => {
      const total = 800;
      const shards = 8;
      const killed = 5;
      const scenario = await setUp(total);
      const { store, sink, slot } = scenario;
      const coordinated = await scenario.coordinator(shards);
      expect(coordinated.result).toMatchObject({ status: 'sharded', epoch: 1, shards });
      expect(coordinated.bodies).toHaveLength(shards);

      // Eight workers at once, each a process running its shard's message; one dies (SIGKILL)
      // right after its 30th email was accepted, before that email's done mark.
      const workers = coordinated.bodies.map((body, shard) => {
        const worker = shardWorkerOptions(body);
        return scenario.replica(worker.name ?? `shard-${shard}`, {
          ...worker,
          ...(shard === killed ? { crash: { point: CrashPoint.AfterSend, at: 30 } } : {}),
        });
      });
      const exits = await Promise.all(workers.map((worker) => worker.exited));
      const dead = exits[killed];
      expect(dead?.signal).toBe('SIGKILL');
      expect(dead?.crash).toMatchObject({ point: CrashPoint.AfterSend, n: 30 });
      for (const [shard, exit] of exits.entries()) {
        if (shard !== killed)
          expect(exit.result, `shard ${shard}`).toMatchObject({ status: 'completed', epoch: 1 });
      }
      const others = Array.from({ length: shards }, (_, shard) => shard).filter((shard) => shard !== killed);
      // The window waits for the dead worker's shard: seven of eight recorded as finished.
      expect(await store.backend.claims.read(slot)).toMatchObject({
        state: SlotState.Sharded,
        shards,
        finishedShards: others,
      });
      expect(sink.duplicates()).toBe(0);

      // The email the worker died over was sent and never marked: in doubt, on the sink's record.
      const left = await scenario.leftByTheDead();
      expect(left.accepted).toContain(dead?.crash?.email);

      // The dead worker's message comes back after its lease: a takeover of that shard alone,
      // which settles what the worker left in doubt from the sink's record.
      const deadShard: Slot = { ...slot, shard: killed };
      const clock = await scenario.takeoverClock(deadShard);
      const message = JSON.parse(coordinated.bodies[killed] ?? '{}') as Record<string, unknown>;
      const settled = await scenario.settle('survivor', clock, { resolution: LOCAL_RESOLUTION, message });
      const [takeover] = settled.results;
      expect(takeover).toMatchObject({ epoch: 2 });
      expect(settled.emf.sum('LeaseTakeover')).toBe(1);
      const taken = takeover && 'summary' in takeover ? takeover.summary : undefined;
      expect(taken?.inDoubt).toBe(left.inDoubt);
      expect(settled.resolved).toEqual({
        confirmed: left.accepted.length,
        rejected: 0,
        resent: left.never.length,
      });
      expect(settled.last).toMatchObject({ status: 'completed', state: 'DONE' });
      const shardRuns = settled.results.length;

      const window = await store.backend.claims.read(slot);
      expect(window).toMatchObject({
        state: SlotState.Done,
        finishedShards: Array.from({ length: shards }, (_, shard) => shard),
      });
      const shardRecords = await Promise.all(
        Array.from({ length: shards }, (_, shard) => store.backend.claims.read({ ...slot, shard })),
      );
      expect(shardRecords.map((r) => `${r?.state} ${r?.epoch}`)).toEqual(
        shardRecords.map((_, shard) => `DONE ${shard === killed ? 1 + shardRuns : 1}`),
      );
      const summary = window?.summary;
      // One summary for the window: the whole ledger, every shard's runs.
      const tally = await scenario.ledger();
      expect(tally.records).toHaveLength(total);
      expect(tally.records.filter((r) => r.shard !== shardOfKeyHash(r.keyHash, shards))).toEqual([]);
      // Nothing left in doubt: every recipient one email, the one the worker died over too.
      expect(summary).toMatchObject({ done: total, inDoubt: 0, failed: 0, runs: shards + shardRuns });
      expect(tally.count(EffectState.Done)).toBe(total);
      const { done, doubtful } = assertAgainstSink(sink, tally, total, {
        inDoubt: summary?.inDoubt ?? Number.NaN,
        failed: summary?.failed ?? Number.NaN,
      });
      expect(done).toHaveLength(total);
      expect(sink.received.get(dead?.crash?.email ?? '')).toBe(1);

      // Finished once: every shard's message again, and a late Scheduler retry, stand down and
      // leave the window's record as it is.
      const repeats = await Promise.all(
        coordinated.bodies.map((body, shard) =>
          scenario.survivor(`repeat-${shard}`, clock, {
            message: JSON.parse(body) as Record<string, unknown>,
          }),
        ),
      );
      const late = await scenario.survivor('late-retry', clock);
      for (const repeat of [...repeats, late]) {
        expect(repeat.result).toMatchObject({
          status: 'duplicate',
          outcome: { kind: 'done', state: 'DONE' },
        });
      }
      expect(await store.backend.claims.read(slot)).toEqual(window);
      expect(sink.total()).toBe(done.length + doubtful.once);
      console.info(
        `${tag} 9 one of ${shards} shard workers killed after its 30th email: the others ${exits
          .filter((_, shard) => shard !== killed)
          .map((exit) => (exit.result && 'summary' in exit.result ? exit.result.summary.done : '?'))
          .join(
            '/',
          )} done; survivor took shard ${killed} over at epoch 2: ${taken ? summaryLine(taken) : '?'}; ` +
          `${settledLine(left, settled)}; window DONE once (done ${summary?.done}, in doubt ${summary?.inDoubt}, ` +
          `runs ${summary?.runs}); ${sinkLine(sink)}`,
      );
    });

    /**
     * A replica killed right after its 120th email was accepted, with the words on its emails
     * `fault` (the survivor's own on time, or twice for `duplicated`), then a survivor settling what
     * it left per `resolution`; `between` runs after each of the survivor's runs that yields.
     */
    async function killedWithWords(
      fault: WordFault,
      resolution: InDoubtResolution,
      between?: (scenario: Scenario, run: number) => Promise<void>,
    ) {
      const total = 300;
      const scenario = await setUp(total);
      scenario.words.fault = fault;
      const dead = scenario.replica(`killed-words-${fault}`, {
        crash: { point: CrashPoint.AfterSend, at: 120 },
      });
      const killed = await dead.exited;
      expect(killed.crash).toMatchObject({ point: CrashPoint.AfterSend, n: 120 });
      const left = await scenario.leftByTheDead();
      // The email it died over was accepted: at least one in doubt is on the sink's record.
      expect(left.accepted).toContain(killed.crash?.email);
      const acceptedFromTheDead = scenario.sink.total();
      if (fault !== WordFault.Duplicated) scenario.words.fault = WordFault.OnTime;
      const clock = await scenario.takeoverClock();
      const settled = await scenario.settle('survivor', clock, {
        resolution,
        ...(between ? { between: (run: number) => between(scenario, run) } : {}),
      });
      return { scenario, total, killed, left, settled, clock, acceptedFromTheDead };
    }

    it("settles with nothing in doubt and nobody emailed twice when the provider's words arrive after the takeover's first look", async () => {
      let inDoubtAtFirstLook = -1;
      let released: ProviderWordOutcome[] = [];
      const { scenario, total, killed, left, settled, acceptedFromTheDead } = await killedWithWords(
        WordFault.Late,
        { graceMs: LONG_GRACE_MS, afterGrace: AfterGrace.Resend },
        async ({ ledger, words }, run) => {
          if (run !== 0) return;
          // The first look found no word, inside the grace period: it settled nothing and yielded.
          inDoubtAtFirstLook = (await ledger()).count(EffectState.Reserved, 1);
          const written = words.answers.length;
          await words.release();
          released = words.answers.slice(written);
        },
      );
      expect(settled.results[0]).toMatchObject({ status: 'yielded', reason: 'retry-wait' });
      expect(inDoubtAtFirstLook).toBe(left.inDoubt);
      // Every word the dead replica's emails earned arrived late, all at once: those of its marked
      // effects found them done; those in doubt were written, and confirmed at the next look.
      expect(released).toHaveLength(acceptedFromTheDead);
      expect(released.filter((answer) => answer === 'recorded')).toHaveLength(left.accepted.length);
      expect(released.filter((answer) => answer === 'done')).toHaveLength(
        acceptedFromTheDead - left.accepted.length,
      );
      await assertSettled(scenario, total, killed, left, settled);
      console.info(
        `${tag} 10 words late (${released.length} released after the takeover's first look): ${settledLine(left, settled)}; ` +
          `${sinkLine(scenario.sink)}`,
      );
    });

    it('keeps in doubt, for a person, the effects whose words are lost when the job reports after the grace period: none emailed twice, none sent again', async () => {
      const { scenario, total, left, settled, clock, acceptedFromTheDead } = await killedWithWords(
        WordFault.Lost,
        { graceMs: LONG_GRACE_MS, afterGrace: AfterGrace.Report },
      );
      const inDoubt = left.inDoubt;
      expect(scenario.words.lost).toBe(acceptedFromTheDead);
      expect(settled.resolved).toEqual({ confirmed: 0, rejected: 0, resent: 0 });
      // The window waited out the grace period, then finished with them in doubt, and paged once.
      expect(settled.last).toMatchObject({
        status: 'completed',
        state: 'DONE',
        window: { done: total - inDoubt, inDoubt, failed: 0 },
      });
      expect(settled.emf.sum('EffectInDoubt')).toBe(inDoubt);
      const tally = await scenario.ledger();
      const kept = tally.records.filter((r) => r.state === EffectState.Reserved && r.epoch === 1);
      expect(kept).toHaveLength(inDoubt);
      const lastReserved = Math.max(...kept.map((r) => r.reservedAt ?? Number.POSITIVE_INFINITY));
      expect(clock.now()).toBeGreaterThanOrEqual(lastReserved + LONG_GRACE_MS);
      // Nobody got two; the accepted ones got their one email, the others none, and wait for a person.
      expect(receipts(scenario.sink, left.accepted)).toEqual({
        none: 0,
        once: left.accepted.length,
        more: 0,
      });
      expect(receipts(scenario.sink, left.never)).toEqual({ none: left.never.length, once: 0, more: 0 });
      expect(scenario.sink.duplicates()).toBe(0);
      expect(scenario.sink.total()).toBe(total - left.never.length);
      console.info(
        `${tag} 10 words lost, afterGrace report: ${settledLine(left, settled)}; ${inDoubt} kept in doubt ` +
          `(${left.accepted.length} had their email, ${left.never.length} had none); ${sinkLine(scenario.sink)}`,
      );
    });

    it("emails twice exactly the recipients whose email was accepted but whose word was lost, when the job re-sends after the grace period: the documented risk of 'resend'", async () => {
      const { scenario, total, left, settled } = await killedWithWords(WordFault.Lost, {
        graceMs: LONG_GRACE_MS,
        afterGrace: AfterGrace.Resend,
      });
      const inDoubt = left.inDoubt;
      expect(settled.resolved).toEqual({ confirmed: 0, rejected: 0, resent: inDoubt });
      expect(settled.last).toMatchObject({
        status: 'completed',
        state: 'DONE',
        window: { done: total, inDoubt: 0, failed: 0 },
      });
      // Every one sent again: those the sink had get a second email, exactly those.
      expect(receipts(scenario.sink, left.accepted)).toEqual({
        none: 0,
        once: 0,
        more: left.accepted.length,
      });
      expect(receipts(scenario.sink, left.never)).toEqual({ none: 0, once: left.never.length, more: 0 });
      expect(scenario.sink.duplicates()).toBe(left.accepted.length);
      expect(scenario.sink.total()).toBe(total + left.accepted.length);
      expect(scenario.sink.received.size).toBe(total);
      console.info(
        `${tag} 10 words lost, afterGrace resend: ${settledLine(left, settled)}; ` +
          `${left.accepted.length} emailed twice (accepted, word lost); ${sinkLine(scenario.sink)}`,
      );
    });

    it('settles exactly as with one word when every word is recorded twice: nothing in doubt, nobody emailed twice', async () => {
      const { scenario, total, killed, left, settled } = await killedWithWords(
        WordFault.Duplicated,
        LOCAL_RESOLUTION,
      );
      await assertSettled(scenario, total, killed, left, settled);
      // Each accepted email's word written twice, both times on the reservation that sent it.
      expect(scenario.words.answers).toHaveLength(2 * scenario.sink.total());
      expect(scenario.words.answers.every((answer) => answer === 'recorded')).toBe(true);
      console.info(
        `${tag} 10 words duplicated (${scenario.words.answers.length} writes, all 'recorded'): ${settledLine(left, settled)}; ` +
          `${sinkLine(scenario.sink)}`,
      );
    });

    it("emails once, by the retry, the recipient whose email the provider refused when its replica was killed before hearing the refusal: the word 'rejected' settles it", async () => {
      const total = 300;
      const scenario = await setUp(total);
      const refused: string[] = [];
      let handed = 0;
      scenario.words.refuses = (recipients) => {
        if (++handed !== 120) return false;
        refused.push(...recipients);
        return true;
      };
      let dead: Replica | undefined;
      scenario.words.beforeRefusal = async () => {
        // The refusal is on record; its sender dies before it hears it, so never records the failure.
        dead?.process.kill('SIGKILL');
        await dead?.exited;
      };
      dead = scenario.replica('killed-before-refusal');
      const killed = await dead.exited;
      expect(refused).toHaveLength(1);
      const [refusedEmail] = refused;
      const left = await scenario.leftByTheDead();
      expect(left.refused).toEqual(refused);
      expect(scenario.words.answers.filter((answer) => answer !== 'recorded')).toEqual([]);

      const settled = await scenario.settle('survivor', await scenario.takeoverClock(), {
        resolution: LOCAL_RESOLUTION,
      });
      const walk = await assertSettled(scenario, total, killed, left, settled);
      // Refused once, then sent by the window's retry: one email, and its record done.
      expect(scenario.sink.refused.get(refusedEmail ?? '')).toBe(1);
      expect(scenario.sink.received.get(refusedEmail ?? '')).toBe(1);
      const tally = await scenario.ledger();
      expect(tally.emailsOf(EffectState.Done).filter((email) => email === refusedEmail)).toHaveLength(1);
      console.info(
        `${tag} 11 word rejected, replica killed before hearing the refusal: survivor ${summaryLine(walk!)}; ` +
          `${settledLine(left, settled)}; ${sinkLine(scenario.sink)}`,
      );
    });

    it(`streams ${backend.streamRecipients.toLocaleString('en-US')} recipients through one replica with bounded memory`, async () => {
      const total = backend.streamRecipients;
      const every = 1_000;
      const scenario = await setUp(0);
      const started = performance.now();
      const replica = scenario.replica('stream', {
        total,
        concurrency: 64,
        reportEachSend: false,
        rssEvery: every,
        // Each sample after a full collection: what the run holds, not garbage awaiting the GC.
        nodeFlags: ['--expose-gc'],
      });
      const exit = await replica.exited;
      const seconds = (performance.now() - started) / 1000;
      const summary = summaryOf(exit.result, 'completed', 1);
      expect(summary).toMatchObject({ done: total, skipped: 0, inDoubt: 0, failed: 0 });
      expect(scenario.sink.total()).toBe(total);
      expect(scenario.sink.received.size).toBe(total);
      expect(replica.rss).toHaveLength(total / every);
      const memory = memoryGrowth(replica.rss, total);
      expect(memory.rssMb, JSON.stringify(replica.rss)).toBeLessThan(30);
      expect(memory.heapMb, JSON.stringify(replica.rss)).toBeLessThan(5);
      const peakMb = (exit.usage?.maxRssBytes ?? 0) / 1e6;
      console.info(
        `${tag} 8 streaming: ${total} recipients at concurrency 64 in ${seconds.toFixed(1)} s ` +
          `(${Math.round(total / seconds)}/s); replica peak RSS ${peakMb.toFixed(0)} MB; growth from 20% to 100% ` +
          `of the run: RSS ${memory.rssMb.toFixed(1)} MB, heap ${memory.heapMb.toFixed(1)} MB; ${sinkLine(scenario.sink)}`,
      );
    }, 120_000);
  });
}

/**
 * How much a run's memory grew between its first fifth and its end: the highest sample from 20% to
 * 40% of the run against the highest from 80% to 100%, for the resident set and for the V8 heap.
 * Peaks of windows, not single samples, so one sample landing on a lucky moment does not decide it.
 */
export function memoryGrowth(samples: readonly RssSample[], total: number) {
  const peakIn = (from: number, to: number, of: (s: RssSample) => number) =>
    Math.max(...samples.filter((s) => s.sent >= from * total && s.sent <= to * total).map(of));
  const growth = (of: (s: RssSample) => number) => (peakIn(0.8, 1, of) - peakIn(0.2, 0.4, of)) / 1e6;
  return { rssMb: growth((s) => s.bytes), heapMb: growth((s) => s.heapBytes) };
}
