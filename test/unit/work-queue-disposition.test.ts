import { describe, expect, it } from 'vitest';
import { type Disposition, dispositionOf, type RunOutcome } from '../../shared/continuation/work-queue.js';
import type { RunSummary, WindowSummary } from '../../shared/slot/ports.js';

const NOW = Date.parse('2026-11-30T07:00:00Z');
const LEASE = 60_000;
const summary: RunSummary = {
  done: 1,
  skipped: 0,
  inDoubt: 0,
  failed: 0,
  retrying: 0,
  inDoubtKeys: [],
  failedKeys: [],
  epoch: 1,
};
const window: WindowSummary = { done: 1, inDoubt: 0, failed: 0, inDoubtKeys: [], failedKeys: [], runs: 1 };

const done: Disposition = { kind: 'done' };
const retry = (afterMs: number): Disposition => ({ kind: 'retry', afterMs });

/** [what the run came to, receive count, what becomes of its message] */
const table: [string, RunOutcome, number, Disposition][] = [
  ['completed DONE', { status: 'completed', state: 'DONE', epoch: 1, summary, window }, 1, done],
  [
    'completed PARTIAL',
    { status: 'completed', state: 'PARTIAL', epoch: 1, summary, window: { ...window, failed: 1 } },
    1,
    done,
  ],
  ['stuck', { status: 'stuck', epoch: 3, summary, reason: 'no progress in 3 runs' }, 9, done],
  ['rejected (invalid event)', { status: 'rejected' }, 1, done],
  [
    'duplicate done',
    { status: 'duplicate', outcome: { kind: 'done', state: 'DONE', completedAt: NOW, summary: window } },
    4,
    done,
  ],
  [
    'duplicate failed',
    { status: 'duplicate', outcome: { kind: 'failed', attempts: 3, lastError: 'x' } },
    2,
    done,
  ],
  [
    'duplicate stuck',
    { status: 'duplicate', outcome: { kind: 'stuck', epoch: 5, reason: 'deadline' } },
    2,
    done,
  ],
  [
    'failed, slot FAILED',
    { status: 'failed', epoch: 3, summary, error: new Error('x'), slotState: 'FAILED' },
    3,
    done,
  ],
  ['yielded for time: 1 s', { status: 'yielded', epoch: 1, summary, reason: 'time' }, 1, retry(1_000)],
  [
    'yielded for a retry 16 min away',
    { status: 'yielded', epoch: 1, summary, reason: 'retry-wait', resumeAfter: NOW + 16 * 60_000 },
    2,
    retry(16 * 60_000),
  ],
  [
    'yielded with resumeAfter already past: 1 s',
    { status: 'yielded', epoch: 1, summary, reason: 'provider-failing', resumeAfter: NOW - 5_000 },
    2,
    retry(1_000),
  ],
  [
    'held with 40 s of lease left: 45 s',
    { status: 'duplicate', outcome: { kind: 'held', holder: 'a', epoch: 1, leaseEndsAt: NOW + 40_000 } },
    1,
    retry(45_000),
  ],
  [
    'held with 5 s of lease left: 30 s at least',
    { status: 'duplicate', outcome: { kind: 'held', holder: 'a', epoch: 1, leaseEndsAt: NOW + 5_000 } },
    1,
    retry(30_000),
  ],
  [
    'held under a lease that ended: 30 s',
    { status: 'duplicate', outcome: { kind: 'held', holder: 'a', epoch: 1, leaseEndsAt: NOW - 90_000 } },
    1,
    retry(30_000),
  ],
  [
    'waiting 4 min',
    { status: 'duplicate', outcome: { kind: 'waiting', until: NOW + 240_000 } },
    2,
    retry(240_000),
  ],
  [
    'waiting until now: 1 s',
    { status: 'duplicate', outcome: { kind: 'waiting', until: NOW } },
    2,
    retry(1_000),
  ],
  ['lease-lost, released', { status: 'lease-lost', epoch: 2, summary, released: true }, 1, retry(LEASE)],
  ['lease-lost, not released', { status: 'lease-lost', epoch: 2, summary, released: false }, 1, retry(LEASE)],
  ['fenced', { status: 'fenced', epoch: 2, summary }, 1, retry(LEASE)],
  [
    'failed, slot fenced',
    { status: 'failed', epoch: 2, summary, error: new Error('x'), slotState: 'fenced' },
    1,
    retry(LEASE),
  ],
  [
    'failed, slot RELEASED, first delivery: 60 s',
    { status: 'failed', epoch: 1, summary, error: new Error('x'), slotState: 'RELEASED' },
    1,
    retry(60_000),
  ],
  [
    'failed, slot RELEASED, third delivery: 3 min',
    { status: 'failed', epoch: 3, summary, error: new Error('x'), slotState: 'RELEASED' },
    3,
    retry(180_000),
  ],
  [
    'failed, slot RELEASED, 40th delivery: capped at 15 min',
    { status: 'failed', epoch: 40, summary, error: new Error('x'), slotState: 'RELEASED' },
    40,
    retry(900_000),
  ],
  ['threw, second delivery: 2 min', { status: 'threw' }, 2, retry(120_000)],
  ['threw, 99th delivery: 15 min', { status: 'threw' }, 99, retry(900_000)],
];

describe('what becomes of the message that delivered a window', () => {
  it.each(table)('%s', (_name, outcome, receiveCount, expected) => {
    expect(dispositionOf(outcome, { now: NOW, leaseMs: LEASE, receiveCount })).toEqual(expected);
  });

  it('deletes a message only for an outcome that finishes the window or can never run', () => {
    const deleted = table.filter(([, , , d]) => d.kind === 'done').map(([, o]) => statusOf(o));
    const kept = table.filter(([, , , d]) => d.kind === 'retry').map(([, o]) => statusOf(o));
    expect(new Set(deleted)).toEqual(
      new Set([
        'completed',
        'stuck',
        'rejected',
        'duplicate:done',
        'duplicate:failed',
        'duplicate:stuck',
        'failed:FAILED',
      ]),
    );
    // Never both: no outcome is deleted in one case and kept in another.
    expect(kept.filter((s) => deleted.includes(s))).toEqual([]);
  });

  it('never asks for a redelivery sooner than a second', () => {
    for (const [name, outcome, receiveCount] of table) {
      const d = dispositionOf(outcome, { now: NOW, leaseMs: LEASE, receiveCount });
      if (d.kind === 'retry') expect(d.afterMs, name).toBeGreaterThanOrEqual(1_000);
    }
  });
});

function statusOf(outcome: RunOutcome): string {
  if (outcome.status === 'duplicate') return `duplicate:${outcome.outcome.kind}`;
  if (outcome.status === 'failed') return `failed:${outcome.slotState}`;
  return outcome.status;
}
