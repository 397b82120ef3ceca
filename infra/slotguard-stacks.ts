import { createHash } from 'node:crypto';
import { CfnResource, Stack, type StackProps, Validations } from 'aws-cdk-lib';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import type { Construct } from 'constructs';
import { describe } from '../shared/slot/slot.js';
import { ClaimsTable, type ClaimsTableProps } from './claims-table.js';
import { CLOUDFORMATION_STACK_LIMITS } from './cloudformation-limits.js';
import {
  checkEffectKeySecretReference,
  effectKeySecretReference,
  namedEffectKeySecret,
} from './effect-key-secret.js';
import { InfraValidationError } from './infra-validation-error.js';
import { ScheduledJob, type ScheduledJobProps } from './scheduled-job.js';
import { SlotguardDashboard } from './slotguard-dashboard.js';

/** Props of `SlotguardStacks`. */
export interface SlotguardStacksProps {
  /**
   * How many job stacks the jobs are spread over, each job by its id (`jobStackNumber`). Raising it
   * moves only the jobs whose id now picks one of the new stacks; nothing else moves. Plan one job
   * stack per 10 jobs: a stack holds 18 jobs (16 in a VPC; 16 and 14 of jobs that record SES's
   * events), and hashing fills stacks unevenly (100 jobs over 10 stacks put 18 in the fullest of
   * them in the tests).
   * @default 1
   */
  readonly jobStacks?: number;
  /**
   * Props of every stack, the base stack and the job stacks: `env`, `tags`, `synthesizer`,
   * `terminationProtection`, … Not `stackName`: the base stack's name comes from the id, and each
   * job stack's from the base stack's.
   * @default none: environment-agnostic stacks with the default synthesizer
   */
  readonly stackProps?: Omit<StackProps, 'stackName'>;
  /**
   * Props of the ClaimsTable the base stack holds.
   * @default ClaimsTable's defaults (retained, deletion protection, AWS managed key)
   */
  readonly claimsTable?: ClaimsTableProps;
  /**
   * The name of the effect-key secret the base stack creates, which every job reads by name.
   * @default `slotguard/<base stack name>/effect-key`
   */
  readonly effectKeySecretName?: string;
  /**
   * An effect-key secret that exists already, by name or complete ARN, for the jobs to read instead
   * of a new one: the secret your jobs hashed with before they came here (a single stack's
   * generated `SlotguardEffectKeySecret…`), so their stored effect hashes stay valid. The base stack
   * then creates none.
   * @default none: the base stack creates `effectKeySecretName`
   */
  readonly existingEffectKeySecret?: string;
  /**
   * One SlotguardDashboard per job stack, over that stack's jobs. (One dashboard for the whole app
   * cannot live in the base stack, which the job stacks depend on; in a stack of its own it would
   * import 14 values per job, past CloudFormation's 200 outputs for a job stack of 15 jobs.)
   * @default true
   */
  readonly dashboards?: boolean;
}

/** A job of a `SlotguardStacks`: a ScheduledJob's props but its claims and secret, which are the app's. */
export interface SlotguardJobProps extends Omit<ScheduledJobProps, 'claims' | 'effectKeySecret'> {
  /**
   * The job stack to put the job in (the stack `<id>-<stack>`), instead of the one its id hashes to:
   * a stack of its own for a team's jobs, or room in another stack when one is full. Naming a
   * hashed stack (`jobs-2`) is allowed.
   * @default `jobs-<jobStackNumber(job.id, jobStacks)>`
   */
  readonly stack?: string;
}

/** One job stack and what the helper keeps about it. */
interface JobStack {
  readonly key: string;
  readonly stack: Stack;
  readonly jobs: ScheduledJob[];
  readonly pinned: Set<string>;
  dashboard?: SlotguardDashboard;
}

/** What the key of a job stack may look like: it follows `<id>-` in a CloudFormation stack name. */
const STACK_KEY_PATTERN = /^[A-Za-z0-9][A-Za-z0-9-]*$/;

/** CloudFormation's limit on a stack name. */
const MAX_STACK_NAME_LENGTH = 128;

/**
 * Which of `jobStacks` job stacks, numbered from 1, job `jobId` goes in: the stack with the highest
 * hash of the pair (rendezvous hashing). A pure function of the id and the count, so adding,
 * removing or reordering other jobs never moves a job, and raising the count from N to N+1 moves
 * only the jobs that pick stack N+1, about one in N+1.
 */
export function jobStackNumber(jobId: string, jobStacks: number): number {
  let chosen = 1;
  let highest = -1;
  for (let n = 1; n <= jobStacks; n++) {
    // 48 bits: exact in a JavaScript number.
    const weight = createHash('sha256').update(`${n}/${jobId}`).digest().readUIntBE(0, 6);
    if (weight > highest) {
      chosen = n;
      highest = weight;
    }
  }
  return chosen;
}

/**
 * An app of many jobs spread over stacks, within CloudFormation's 500 resources per stack: a base
 * stack with the ClaimsTable and the app's one effect-key secret, and job stacks, each with the
 * ScheduledJobs it holds, their watchdog and a dashboard.
 *
 * - **A job's stack is a function of its id** (`jobStackNumber`), or of the `stack` it is pinned
 *   to, never of its place in a list: inserting a job in the middle of the catalog moves no other.
 *   Moving a job between stacks deletes and recreates its resources (docs/cdk.md, "Many jobs in
 *   one app").
 * - **One effect-key secret per app, found by name.** The base stack creates it (retained); every
 *   job stack references it by name, so a job hashes with the same key in any stack.
 * - **A full stack fails synth** with the jobs in it and the fixes, before the CDK's own
 *   "is greater than allowed maximum of 500".
 *
 * Job stacks `jobs-1` to `jobs-<jobStacks>` are always synthesised, empty or not: a stack whose last
 * job left must reach `cdk deploy`, which deletes a stack with no resources. A stack that leaves the
 * app (a lower `jobStacks`, a pin removed) is not deleted by the CDK: delete it yourself.
 *
 * @example
 * const slotguard = new SlotguardStacks(app, 'Reports', { jobStacks: 4 });
 * for (const job of jobCatalog) {
 *   slotguard.addJob({ job, ses, alarmActions: [new SnsAction(pagerTopic)] });
 * }
 */
export class SlotguardStacks {
  /** The base stack: the ClaimsTable and the effect-key secret. No job lives here. */
  readonly base: Stack;
  /** The claims table every job's claims and effects live in. */
  readonly claims: ClaimsTable;
  /**
   * The effect-key secret, as the base stack sees it: the one it created, or a reference to the
   * existing one.
   */
  readonly effectKeySecret: secretsmanager.ISecret;
  /** How the job stacks find the effect-key secret: its name, or its complete ARN. */
  readonly effectKeySecretReference: string;
  /** How many hashed job stacks there are (`jobs-1` …). */
  readonly jobStackCount: number;
  private readonly stackProps: Omit<StackProps, 'stackName'>;
  private readonly dashboards: boolean;
  private readonly stacksByKey = new Map<string, JobStack>();
  private readonly allJobs: ScheduledJob[] = [];

  constructor(
    private readonly scope: Construct,
    private readonly id: string,
    props: SlotguardStacksProps = {},
  ) {
    this.stackProps = props.stackProps ?? {};
    this.dashboards = props.dashboards ?? true;
    this.base = new Stack(scope, id, {
      description: `slotguard: the claims table and effect-key secret of ${id}'s jobs`,
      ...this.stackProps,
    });
    this.jobStackCount = this.validateJobStacks(props.jobStacks ?? 1);
    this.claims = new ClaimsTable(this.base, 'ClaimsTable', props.claimsTable);
    if (props.existingEffectKeySecret !== undefined) {
      if (props.effectKeySecretName !== undefined) {
        throw new InfraValidationError(
          this.base,
          'effectKeySecretName',
          `effectKeySecretName ${describe(props.effectKeySecretName)} and existingEffectKeySecret ` +
            `${describe(props.existingEffectKeySecret)} are both set; give existingEffectKeySecret alone to ` +
            'keep a secret that exists, or effectKeySecretName alone to create a new one',
        );
      }
      checkEffectKeySecretReference(this.base, 'existingEffectKeySecret', props.existingEffectKeySecret);
      this.effectKeySecretReference = props.existingEffectKeySecret;
      this.effectKeySecret = effectKeySecretReference(this.base, this.effectKeySecretReference);
    } else {
      this.effectKeySecretReference =
        props.effectKeySecretName ?? `slotguard/${this.base.stackName}/effect-key`;
      this.effectKeySecret = namedEffectKeySecret(
        this.base,
        'EffectKeySecret',
        this.effectKeySecretReference,
      );
    }
    for (let n = 1; n <= this.jobStackCount; n++) this.jobStack(`jobs-${n}`);
  }

  /** The job stacks, `jobs-1` … first, then the pinned ones in the order they were first named. */
  get jobStacks(): readonly Stack[] {
    return [...this.stacksByKey.values()].map((entry) => entry.stack);
  }

  /** Every job added, in the order added. */
  get jobs(): readonly ScheduledJob[] {
    return [...this.allJobs];
  }

  /** The key of the hashed job stack job `jobId` goes in unless pinned: `jobs-<n>`. */
  jobStackKeyOf(jobId: string): string {
    return `jobs-${jobStackNumber(jobId, this.jobStackCount)}`;
  }

  /** The job stack with key `key` (`jobs-2`, or a pinned name), if the app has it. */
  jobStackOf(key: string): Stack | undefined {
    return this.stacksByKey.get(key)?.stack;
  }

  /**
   * Adds a ScheduledJob, with construct id `job.id`, to the job stack its id hashes to or the one
   * `stack` names, on the app's claims table and effect-key secret, and to that stack's dashboard.
   */
  addJob(props: SlotguardJobProps): ScheduledJob {
    const { stack: pinnedKey, ...jobProps } = props;
    const entry = this.jobStack(pinnedKey ?? this.jobStackKeyOf(props.job.id));
    const job = new ScheduledJob(entry.stack, props.job.id, {
      ...jobProps,
      claims: this.claims,
      effectKeySecret: effectKeySecretReference(entry.stack, this.effectKeySecretReference),
    });
    entry.jobs.push(job);
    if (pinnedKey !== undefined) entry.pinned.add(job.jobId);
    this.allJobs.push(job);
    if (this.dashboards) {
      entry.dashboard ??= new SlotguardDashboard(entry.stack, 'Dashboard');
      entry.dashboard.addJob(job);
    }
    return job;
  }

  private jobStack(key: string): JobStack {
    const existing = this.stacksByKey.get(key);
    if (existing) return existing;
    const stackName = `${this.base.stackName}-${key}`;
    if (!STACK_KEY_PATTERN.test(key) || stackName.length > MAX_STACK_NAME_LENGTH) {
      throw new InfraValidationError(
        this.base,
        'stack',
        `stack ${describe(key)} cannot name a job stack: '${stackName}' must be a CloudFormation stack name ` +
          `(letters, digits and hyphens, at most ${MAX_STACK_NAME_LENGTH} characters); use e.g. 'billing'`,
      );
    }
    const stack = new Stack(this.scope, `${this.id}-${key}`, {
      description: `slotguard: ${this.id}'s jobs in ${key}`,
      ...this.stackProps,
    });
    // The jobs read the secret by name, which no token ties to the base stack.
    stack.addStackDependency(this.base, "its jobs use the base stack's claims table and effect-key secret");
    Validations.of(stack).acknowledge({
      id: 'CloudFormation-Validate::F0001',
      reason:
        'A job stack with no job is synthesised on purpose: cdk deploy deletes it once its last job has left.',
    });
    const entry: JobStack = { key, stack, jobs: [], pinned: new Set() };
    stack.node.addValidation({ validate: () => this.validateSize(entry) });
    this.stacksByKey.set(key, entry);
    return entry;
  }

  /**
   * A job stack over CloudFormation's resource limit, with its jobs and the fixes: the jobs that a
   * higher `jobStacks` would move, and the stacks with room for a pinned job.
   */
  private validateSize(entry: JobStack): string[] {
    const limit = CLOUDFORMATION_STACK_LIMITS.resources;
    const resources = entry.stack.node
      .findAll()
      .filter(
        (construct) => CfnResource.isCfnResource(construct) && Stack.of(construct) === entry.stack,
      ).length;
    if (resources <= limit) return [];
    const next = this.jobStackCount + 1;
    const moving = this.allJobs
      .filter((job) => !this.isPinned(job.jobId) && jobStackNumber(job.jobId, next) === next)
      .map((job) => job.jobId);
    const roomy = [...this.stacksByKey.values()]
      .filter((other) => other !== entry)
      .sort((a, b) => a.jobs.length - b.jobs.length)
      .slice(0, 3)
      .map((other) => `'${other.key}' (${other.jobs.length} job${other.jobs.length === 1 ? '' : 's'})`);
    const jobIds = entry.jobs.map((job) => job.jobId);
    return [
      `job stack '${entry.stack.stackName}' holds ${resources} CloudFormation resources, over the ${limit} a stack ` +
        `may hold, with its ${jobIds.length} jobs: ${jobIds.join(', ')}. Pin the job you added (or any of these) ` +
        `to ${roomy.length ? `a stack with room, ${roomy.join(', ')},` : 'a stack of its own'} with addJob's ` +
        `\`stack\`, which moves that job alone; or raise jobStacks from ${this.jobStackCount} to ${next}, which ` +
        `moves ${moving.length ? moving.join(', ') : 'no job'} into '${this.base.stackName}-jobs-${next}'. ` +
        'A job that moves is deleted and recreated in its new stack (docs/cdk.md, "Many jobs in one app").',
    ];
  }

  private isPinned(jobId: string): boolean {
    return [...this.stacksByKey.values()].some((entry) => entry.pinned.has(jobId));
  }

  private validateJobStacks(jobStacks: number): number {
    if (!Number.isInteger(jobStacks) || jobStacks < 1) {
      throw new InfraValidationError(
        this.base,
        'jobStacks',
        `jobStacks is ${describe(jobStacks)}; set a whole number of 1 or more, about one per 10 jobs`,
      );
    }
    return jobStacks;
  }
}
