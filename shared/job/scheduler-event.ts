import { InvalidEventError } from '../errors.js';
import type { Delivery } from '../slot/ports.js';
import {
  assertJobId,
  assertShard,
  describe,
  MAX_SHARDS,
  parseScheduledTime,
  type Slot,
} from '../slot/slot.js';
import type { ShardAssignment } from './run-slot.js';

/**
 * The target input every slotguard schedule sends (the ScheduledJob construct writes it):
 * ```json
 * { "jobId": "weekly-report",
 *   "scheduledTime": "<aws.scheduler.scheduled-time>",
 *   "executionId": "<aws.scheduler.execution-id>",
 *   "attemptNumber": "<aws.scheduler.attempt-number>",
 *   "payload": { } }
 * ```
 */
export interface SchedulerEvent {
  readonly jobId: string;
  readonly scheduledTime: string;
  readonly executionId?: string;
  readonly attemptNumber?: string | number;
  readonly payload?: unknown;
  /** Set by the operator CLI's backfill: the run is for a missed window, fired late on purpose. */
  readonly backfilled?: boolean;
  /** Set on a continuation: the window is resumed after a run that stopped with work left. */
  readonly continuation?: boolean;
  /**
   * Set on a shard's message by the window's coordinator: which shard, of how many, and the window's
   * deadline (epoch ms) and effect-key version, which every shard is held to.
   */
  readonly shard?: number;
  readonly shards?: number;
  readonly deadline?: number;
  readonly keyVersion?: string;
}

/** The largest event accepted, serialised. Scheduler allows 256 KB; a job's input should be small. */
export const MAX_EVENT_BYTES = 16 * 1024;

export interface ParsedEvent {
  readonly slot: Slot;
  readonly delivery: Delivery;
  readonly payload: unknown;
  readonly backfilled: boolean;
  /** The shard this event runs, for a shard's message. */
  readonly shard?: ShardAssignment;
}

/**
 * Validates an event for the job `expectedJobId`. Every failure is an InvalidEventError: permanent,
 * never retried.
 */
export function parseSchedulerEvent(
  event: unknown,
  expectedJobId: string,
  invocationId: string,
): ParsedEvent {
  if (typeof event !== 'object' || event === null || Array.isArray(event)) {
    throw new InvalidEventError(
      'event',
      `the event is ${describe(event)}; a slotguard schedule sends an object with jobId and scheduledTime`,
    );
  }
  const size = Buffer.byteLength(safeStringify(event));
  if (size > MAX_EVENT_BYTES) {
    throw new InvalidEventError(
      'event',
      `the event is ${size} bytes, over the ${MAX_EVENT_BYTES}-byte limit; pass a reference (an S3 key, an id) in payload instead of the data`,
    );
  }
  const fields = event as Record<string, unknown>;
  assertJobId(fields.jobId);
  if (fields.jobId !== expectedJobId) {
    throw new InvalidEventError(
      'jobId',
      `jobId ${describe(fields.jobId)} is not the job this function runs (${JSON.stringify(expectedJobId)}); ` +
        "point the schedule's target input at the matching function",
    );
  }
  const window = parseScheduledTime(fields.scheduledTime);
  const executionId = optionalString(fields.executionId, 'executionId');
  const attemptNumber = parseAttemptNumber(fields.attemptNumber);
  for (const flag of ['backfilled', 'continuation'] as const) {
    if (fields[flag] !== undefined && typeof fields[flag] !== 'boolean') {
      throw new InvalidEventError(
        flag,
        `${flag} is ${describe(fields[flag])}; use true, false or leave it out`,
      );
    }
  }
  const shard = parseShard(fields);
  return {
    ...(shard ? { shard } : {}),
    slot: { jobId: expectedJobId, window },
    delivery: {
      ...(executionId !== undefined ? { executionId } : {}),
      ...(attemptNumber !== undefined ? { attemptNumber } : {}),
      invocationId,
      ...(fields.backfilled === true ? { backfilled: true } : {}),
      ...(fields.continuation === true ? { continuation: true } : {}),
    },
    payload: fields.payload,
    backfilled: fields.backfilled === true,
  };
}

/** A shard's message names its shard and what the window pinned; anything half-given is refused. */
function parseShard(fields: Record<string, unknown>): ShardAssignment | undefined {
  if (fields.shard === undefined && fields.shards === undefined) return undefined;
  const count = fields.shards;
  if (typeof count !== 'number' || !Number.isInteger(count) || count < 2 || count > MAX_SHARDS) {
    throw new InvalidEventError(
      'shards',
      `shards is ${describe(count)}; a shard's message carries its window's shard count, 2 to ${MAX_SHARDS}`,
    );
  }
  assertShard(fields.shard, count);
  if (
    fields.deadline !== undefined &&
    (typeof fields.deadline !== 'number' || !Number.isFinite(fields.deadline))
  ) {
    throw new InvalidEventError(
      'deadline',
      `deadline is ${describe(fields.deadline)}; expected epoch milliseconds`,
    );
  }
  if (
    fields.keyVersion !== undefined &&
    (typeof fields.keyVersion !== 'string' || fields.keyVersion.length > 256)
  ) {
    throw new InvalidEventError(
      'keyVersion',
      `keyVersion is ${describe(fields.keyVersion)}; expected a version id`,
    );
  }
  return {
    index: fields.shard as number,
    count,
    ...(typeof fields.deadline === 'number' ? { deadline: fields.deadline } : {}),
    ...(typeof fields.keyVersion === 'string' ? { keyVersion: fields.keyVersion } : {}),
  };
}

function optionalString(value: unknown, field: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || value.length > 128) {
    throw new InvalidEventError(
      field,
      `${field} is ${describe(value)}; expected the "<aws.scheduler.${kebab(field)}>" string`,
    );
  }
  return value;
}

function parseAttemptNumber(value: unknown): number | undefined {
  if (value === undefined) return undefined;
  const parsed = typeof value === 'string' && /^\d{1,4}$/.test(value) ? Number(value) : value;
  if (typeof parsed !== 'number' || !Number.isInteger(parsed) || parsed < 1 || parsed > 1000) {
    throw new InvalidEventError(
      'attemptNumber',
      `attemptNumber is ${describe(value)}; expected "<aws.scheduler.attempt-number>", a whole number from 1`,
    );
  }
  return parsed;
}

function safeStringify(value: unknown): string {
  try {
    return JSON.stringify(value) ?? '';
  } catch (cause) {
    throw new InvalidEventError(
      'event',
      `the event cannot be serialised (${String(cause)}); send plain JSON`,
    );
  }
}

const kebab = (name: string) => name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
