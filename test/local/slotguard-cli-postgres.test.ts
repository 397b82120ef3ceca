import { describe, expect, it } from 'vitest';
import { main } from '../../cli/slotguard.js';
import type { PostgresBackend } from '../../shared/backends/postgres/index.js';
import type { LeaseRequest } from '../../shared/slot/ports.js';
import type { Slot } from '../../shared/slot/slot.js';
import { ManualClock } from '../helpers/manual-clock.js';
import { usePostgres } from '../helpers/postgres.js';

// The operator CLI against Postgres on the database clock, as in production: leases are judged by
// the server, so a lease "ends" by ageing its row (postgres.ageLease), never by moving a clock.
const postgres = usePostgres();
const JOB = 'payment-reminder';
const LEASE = 60_000;

function lease(owner: string): LeaseRequest {
  return {
    owner,
    leaseMs: LEASE,
    maxAttempts: 3,
    expiresAtSeconds: Math.ceil(Date.now() / 1000) + 35 * 86_400,
    deadline: Date.now() + 6 * 3_600_000,
    delivery: {},
  };
}

async function claimOrFail(backend: PostgresBackend, slot: Slot, owner: string) {
  const outcome = await backend.claims.claim(slot, lease(owner), Date.now());
  if (outcome.kind !== 'claimed') throw new Error(`expected ${owner} to claim, got ${outcome.kind}`);
  return outcome.claim;
}

/** A migrated schema, the runtime's backend on it, and the CLI pointed at it with --backend postgres. */
async function world() {
  const schema = await postgres.freshSchema('cli');
  const backend = postgres.backend(schema);
  const cli = async (argv: string[]) => {
    let out = '';
    let err = '';
    const code = await main([...argv, '--backend', 'postgres', '--schema', schema], {
      stdout: { write: (text: string) => (out += text) },
      stderr: { write: (text: string) => (err += text) },
      clock: new ManualClock(Date.parse('2026-11-30T07:00:00Z')),
      env: { DATABASE_URL: postgres.connectionString },
    });
    return { code, out, err };
  };
  return { schema, backend, cli };
}

describe('slotguard on Postgres', () => {
  it('releases a live slot only with --force, and the fenced holder can no longer renew', async () => {
    const { backend, cli } = await world();
    const slot = { jobId: JOB, window: '2026-11-30T06:45:00Z' };
    const holder = await claimOrFail(backend, slot, 'replica-9/abc');
    const args = ['slots', 'release', '--job', JOB, '--window', slot.window];

    const refused = await cli(args);
    expect(refused.code).toBe(1);
    expect(refused.err).toContain('its holder replica-9 has a live lease until');
    expect(await backend.claims.read(slot)).toMatchObject({ state: 'RUNNING', epoch: 1 });

    const forced = await cli([...args, '--force']);
    expect(forced.code).toBe(0);
    expect(forced.out).toContain('RUNNING at epoch 1 (holder replica-9) → RELEASED');
    expect(await backend.claims.read(slot)).toMatchObject({ state: 'RELEASED', epoch: 1, failures: 0 });
    expect(await backend.claims.renew(holder, LEASE, Date.now())).toMatchObject({ kind: 'lost' });
    expect(await backend.claims.claim(slot, lease('next'), Date.now())).toMatchObject({
      kind: 'claimed',
      claim: { epoch: 2, via: 'retry' },
    });
  });

  it('marks an effect in doubt done, so no later run sends it, and leaves the slot DONE', async () => {
    const { schema, backend, cli } = await world();
    const slot = { jobId: JOB, window: '2026-11-30T06:15:00Z' };
    const key = backend.hashKey('inv-1');
    const crashed = await claimOrFail(backend, slot, 'crashed/1');
    await backend.ledger.reserve(crashed, key, { rerunInDoubt: false, now: Date.now() });
    await postgres.ageLease(schema, slot, 2 * LEASE);
    const takeover = await claimOrFail(backend, slot, 'takeover/2');
    expect(await backend.ledger.reserve(takeover, key, { rerunInDoubt: false, now: Date.now() })).toEqual({
      kind: 'in-doubt',
      epoch: 1,
    });
    const summary = { done: 0, inDoubt: 1, failed: 0, inDoubtKeys: [key], failedKeys: [], runs: 2 };
    await backend.claims.complete(takeover, summary, Date.now());
    const window = ['--job', JOB, '--window', slot.window, '--key', key];

    const done = await cli(['effects', 'resolve', ...window, '--mark-done', '--json']);
    expect(done.code).toBe(0);
    expect(JSON.parse(done.out)).toMatchObject({
      outcome: 'resolved',
      resolution: 'done',
      reservedAtEpoch: 1,
      slotReopened: false,
    });
    expect(await backend.ledger.read(slot, key)).toMatchObject({ state: 'DONE', epoch: 1 });
    expect(await backend.claims.read(slot)).toMatchObject({ state: 'DONE', epoch: 2 });

    const again = await cli(['effects', 'resolve', ...window, '--rerun']);
    expect(again.code).toBe(1);
    expect(again.err).toContain('is not in doubt: it is DONE');
  });

  it('refuses --rerun while a frozen run holds the slot RUNNING past its lease by the database clock, naming slots release, and clears it once released', async () => {
    const { schema, backend, cli } = await world();
    const slot = { jobId: JOB, window: '2026-11-30T06:30:00Z' };
    const key = backend.hashKey('inv-1');
    const frozen = await claimOrFail(backend, slot, 'replica-9/abc');
    await backend.ledger.reserve(frozen, key, { rerunInDoubt: false, now: Date.now() });
    await postgres.ageLease(schema, slot, 2 * LEASE);
    const rerun = ['effects', 'resolve', '--job', JOB, '--window', slot.window, '--key', key, '--rerun'];

    const refused = await cli([...rerun, '--json']);
    expect(refused.code).toBe(1);
    expect(JSON.parse(refused.out)).toMatchObject({
      outcome: 'refused',
      reason: 'running',
      current: { state: 'RUNNING', epoch: 1 },
      message: expect.stringContaining(
        `Release it first, which fences it out: slotguard slots release --job ${JOB} --window ${slot.window};`,
      ),
    });
    expect(await backend.ledger.read(slot, key)).toMatchObject({ state: 'RESERVED', epoch: 1 });

    expect(await cli(['slots', 'release', '--job', JOB, '--window', slot.window])).toMatchObject({ code: 0 });
    const cleared = await cli(rerun);
    expect(cleared.code).toBe(0);
    expect(await backend.ledger.read(slot, key)).toBeUndefined();
  });
});
