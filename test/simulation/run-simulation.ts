import fc from 'fast-check';
import { judge, type Verdict } from './invariants.js';
import { type Scenario, scenarios } from './scenario.js';
import { simulate, type Trace, type WorldVariant } from './simulation.js';

/** How to run the simulation once: which cases, against which world, for how long. */
export interface SimulationCheck {
  /** @default scenarios() */
  readonly scenarios?: fc.Arbitrary<Scenario>;
  /** @default the world as it is */
  readonly variant?: WorldVariant;
  /** Cases to run (shrinking aside). */
  readonly numRuns: number;
  /** Starts no new case after this many milliseconds of real time. @default no limit */
  readonly timeLimitMs?: number;
  /** Replays a run: fast-check's seed, and with `path` the one failing case it printed. */
  readonly seed?: number;
  readonly path?: string;
  /** Stops at the first failing case without shrinking it. @default false, or true with `path` */
  readonly endOnFailure?: boolean;
  /** Where to gather what the cases came to, to add them to an earlier run's. @default new statistics */
  readonly stats?: SimulationStats;
}

/** What one run of the simulation came to. */
export interface SimulationReport {
  readonly details: fc.RunDetails<[Scenario, fc.Scheduler]>;
  readonly stats: SimulationStats;
  readonly elapsedMs: number;
  /**
   * fast-check's report of the failing case: seed and path to replay it, the shrunk scenario and
   * the scheduler's step log, then the violations and the simulation's trace. Undefined on success.
   */
  readonly failure: string | undefined;
}

/** An invariant the simulated window broke; the message carries the trace of what led there. */
export class InvariantViolation extends Error {
  override readonly name = 'InvariantViolation';
  readonly violations: readonly string[];

  constructor(violations: readonly string[], trace: Trace) {
    super(
      `${violations.map((v) => `- ${v}`).join('\n')}\n\nsimulation trace (simulated time, actor, event):\n${trace.tail()}`,
    );
    this.violations = violations;
  }
}

/** Runs the simulation property with fast-check and gathers what the cases came to. */
export async function checkSimulation(check: SimulationCheck): Promise<SimulationReport> {
  const stats = check.stats ?? new SimulationStats();
  const property = fc.asyncProperty(
    check.scenarios ?? scenarios(),
    fc.scheduler(),
    async (scenario, scheduler) => {
      const result = await simulate(scenario, scheduler, check.variant);
      const verdict = judge(result);
      stats.add(verdict);
      if (verdict.violations.length > 0) throw new InvariantViolation(verdict.violations, result.trace);
    },
  );
  const started = performance.now();
  const parameters: fc.Parameters<[Scenario, fc.Scheduler]> = {
    numRuns: check.numRuns,
    includeErrorInReport: true,
    endOnFailure: check.endOnFailure ?? check.path !== undefined,
    ...(check.seed !== undefined ? { seed: check.seed } : {}),
    ...(check.path !== undefined ? { path: check.path } : {}),
    ...(check.timeLimitMs !== undefined ? { plugins: [fc.interruptAfterTimeLimit(check.timeLimitMs)] } : {}),
  };
  const details = await fc.check(property, parameters);
  const elapsedMs = performance.now() - started;
  const failure = details.failed ? fc.defaultReportMessage(details) : undefined;
  return { details, stats, elapsedMs, failure };
}

/**
 * Settings from the environment: SIM_SEED with SIM_PATH replays the one failing case fast-check
 * printed (`{ seed: …, path: "…" }`); SIM_SEED alone reruns a whole run; SIM_RUNS changes how many
 * cases run, and SIM_SECONDS how long new cases may start (a longer search).
 */
export function simulationEnvironment(
  env: Readonly<Record<string, string | undefined>> = process.env,
): Pick<SimulationCheck, 'seed' | 'path'> & { readonly numRuns?: number; readonly seconds?: number } {
  const seed = env.SIM_SEED === undefined ? undefined : Number(env.SIM_SEED);
  const numRuns = env.SIM_RUNS === undefined ? undefined : Number(env.SIM_RUNS);
  const seconds = env.SIM_SECONDS === undefined ? undefined : Number(env.SIM_SECONDS);
  if (seed !== undefined && !Number.isInteger(seed)) {
    throw new Error(`SIM_SEED is ${JSON.stringify(env.SIM_SEED)}; use the integer seed fast-check printed`);
  }
  if (numRuns !== undefined && !(Number.isInteger(numRuns) && numRuns > 0)) {
    throw new Error(`SIM_RUNS is ${JSON.stringify(env.SIM_RUNS)}; use a whole number of cases above 0`);
  }
  if (seconds !== undefined && !(seconds > 0 && Number.isFinite(seconds))) {
    throw new Error(`SIM_SECONDS is ${JSON.stringify(env.SIM_SECONDS)}; use a number of seconds above 0`);
  }
  if (env.SIM_PATH !== undefined && seed === undefined) {
    throw new Error('SIM_PATH replays a case only together with the SIM_SEED it was printed with');
  }
  return {
    ...(seed !== undefined ? { seed } : {}),
    ...(env.SIM_PATH !== undefined ? { path: env.SIM_PATH } : {}),
    ...(numRuns !== undefined ? { numRuns } : {}),
    ...(seconds !== undefined ? { seconds } : {}),
  };
}

/** What the cases of one run came to, so a run shows it reached the states that matter. */
export class SimulationStats {
  cases = 0;
  readonly endings = new Map<string, number>();
  readonly #casesWith = new Map<string, number>();

  add(verdict: Verdict): void {
    this.cases++;
    this.endings.set(verdict.ending, (this.endings.get(verdict.ending) ?? 0) + 1);
    for (const [fact, count] of Object.entries(verdict.facts)) {
      if (count > 0) this.#casesWith.set(fact, (this.#casesWith.get(fact) ?? 0) + 1);
      else if (!this.#casesWith.has(fact)) this.#casesWith.set(fact, 0);
    }
  }

  /** Cases in which `fact` happened at least once. */
  casesWith(fact: string): number {
    return this.#casesWith.get(fact) ?? 0;
  }

  toString(): string {
    const endings = [...this.endings].map(([ending, n]) => `${n} ${ending}`).join(', ');
    const facts = [...this.#casesWith]
      .map(([fact, n]) => `  ${String(n).padStart(7)}  with ${fact}`)
      .join('\n');
    return `${this.cases} cases; windows ${endings}\n${facts}`;
  }
}
