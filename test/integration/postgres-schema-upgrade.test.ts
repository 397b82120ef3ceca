import { escapeIdentifier } from 'pg';
import { describe, expect, it } from 'vitest';
import { migrate, PostgresRateLimitStore, SCHEMA_VERSION } from '../../shared/backends/postgres/index.js';
import { ConfigurationError } from '../../shared/errors.js';
import type { LeaseRequest } from '../../shared/slot/ports.js';
import { type Slot, windowOf } from '../../shared/slot/slot.js';
import { runSummary } from '../contract/backend-contract.js';
import { leaseRequest, slotSequence, usePostgres } from '../helpers/postgres.js';

const postgres = usePostgres();

const WINDOW_MS = Date.parse('2026-11-30T06:00:00Z');
const DEADLINE = WINDOW_MS + 6 * 3_600_000;

/** A slot no other test in this file uses. */
const freshSlot = slotSequence('upgrade-job');

/** A lease request of the windows here: each due 6 hours after the first. */
const lease = (owner: string, overrides: Partial<LeaseRequest> = {}) =>
  leaseRequest(owner, { jobId: 'upgrade-job', window: windowOf(WINDOW_MS) }, overrides);

/*
 * What earlier versions of the migration created, copied from their sql.ts (test-only: production
 * code keeps one migration, which brings any of these up to date). `q` is the quoted schema. A slot
 * row's key columns and its columns after the state are spelled once, as version 1 created them in
 * `slots` and version 4 again in `shard_slots`.
 */
const SLOT_KEY = `job_id          text        NOT NULL CHECK (job_id ~ '^[a-z][a-z0-9-]{0,62}$'),
    slot_window     text        NOT NULL CHECK (slot_window ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$')`;
const LEASE_COLUMNS = `owner           text        NOT NULL,
    epoch           integer     NOT NULL CHECK (epoch >= 1),
    lease_until     timestamptz,
    attempts        integer     NOT NULL,
    failures        integer     NOT NULL DEFAULT 0,
    max_attempts    integer     NOT NULL,
    claimed_at      timestamptz NOT NULL,
    claimer_clock   timestamptz NOT NULL,
    previous_owner  text,
    previous_state  text,
    execution_id    text,
    attempt_number  integer,
    invocation_id   text,
    summary         jsonb,
    last_error      text,
    completed_at    timestamptz,
    expires_at      timestamptz NOT NULL`;

const version1 = (q: string) => [
  `CREATE SCHEMA ${q}`,
  `CREATE TABLE ${q}.slots (
    ${SLOT_KEY},
    state           text        NOT NULL CHECK (state IN ('RUNNING', 'DONE', 'RELEASED', 'FAILED')),
    ${LEASE_COLUMNS},
    PRIMARY KEY (job_id, slot_window)
  )`,
  `CREATE TABLE ${q}.effects (
    job_id       text        NOT NULL,
    slot_window  text        NOT NULL,
    key_hash     text        COLLATE "C" NOT NULL CHECK (length(key_hash) BETWEEN 1 AND 512),
    state        text        NOT NULL CHECK (state IN ('RESERVED', 'DONE')),
    epoch        integer     NOT NULL,
    owner        text        NOT NULL,
    reserved_at  timestamptz NOT NULL,
    done_at      timestamptz,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (job_id, slot_window, key_hash)
  )`,
  `CREATE INDEX slots_expires_at ON ${q}.slots (expires_at)`,
  `CREATE INDEX effects_expires_at ON ${q}.effects (expires_at)`,
  `CREATE TABLE ${q}.schema_version (
    version     integer     PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT now()
  )`,
];

const version2 = (q: string) => [
  ...version1(q),
  `ALTER TABLE ${q}.slots ADD COLUMN backfilled boolean NOT NULL DEFAULT false`,
  `ALTER TABLE ${q}.slots ADD COLUMN operator_action text`,
  `ALTER TABLE ${q}.effects ADD COLUMN operator_action text`,
];

const version3 = (q: string) => [
  ...version2(q),
  `ALTER TABLE ${q}.slots ADD COLUMN deadline timestamptz`,
  `ALTER TABLE ${q}.slots ADD COLUMN checkpoint jsonb`,
  `ALTER TABLE ${q}.slots ADD COLUMN progress jsonb`,
  `ALTER TABLE ${q}.slots ADD COLUMN runs_without_progress integer NOT NULL DEFAULT 0`,
  `ALTER TABLE ${q}.slots ADD COLUMN resume_after timestamptz`,
  `ALTER TABLE ${q}.slots ADD COLUMN key_version text`,
  `ALTER TABLE ${q}.effects ADD COLUMN attempts integer NOT NULL DEFAULT 0`,
  `ALTER TABLE ${q}.effects ADD COLUMN retry_at timestamptz`,
  `ALTER TABLE ${q}.effects ADD COLUMN reason text`,
  `ALTER TABLE ${q}.slots DROP CONSTRAINT slots_state_check`,
  `ALTER TABLE ${q}.slots ADD CONSTRAINT slots_state_check
     CHECK (state IN ('RUNNING', 'DONE', 'PARTIAL', 'RELEASED', 'FAILED', 'STUCK'))`,
  `ALTER TABLE ${q}.effects DROP CONSTRAINT effects_state_check`,
  `ALTER TABLE ${q}.effects ADD CONSTRAINT effects_state_check CHECK (state IN ('RESERVED', 'DONE', 'FAILED'))`,
];

const version4 = (q: string) => [
  ...version3(q),
  `ALTER TABLE ${q}.slots ADD COLUMN shards integer`,
  `ALTER TABLE ${q}.slots ADD COLUMN finished_shards integer[]`,
  `ALTER TABLE ${q}.effects ADD COLUMN shard integer`,
  `ALTER TABLE ${q}.effects ADD COLUMN provider_outcome text CHECK (provider_outcome IN ('accepted', 'rejected'))`,
  `ALTER TABLE ${q}.effects ADD COLUMN provider_event text`,
  `ALTER TABLE ${q}.effects ADD COLUMN provider_at timestamptz`,
  `ALTER TABLE ${q}.effects ADD COLUMN provider_message_id text`,
  `CREATE TABLE ${q}.shard_slots (
    ${SLOT_KEY},
    shard           integer     NOT NULL CHECK (shard >= 0),
    state           text        NOT NULL CHECK (state IN ('RUNNING', 'DONE', 'PARTIAL', 'RELEASED', 'FAILED', 'STUCK')),
    ${LEASE_COLUMNS},
    backfilled      boolean     NOT NULL DEFAULT false,
    deadline        timestamptz,
    checkpoint      jsonb,
    progress        jsonb,
    runs_without_progress integer NOT NULL DEFAULT 0,
    resume_after    timestamptz,
    key_version     text,
    operator_action text,
    PRIMARY KEY (job_id, slot_window, shard)
  )`,
  `CREATE INDEX shard_slots_expires_at ON ${q}.shard_slots (expires_at)`,
  `ALTER TABLE ${q}.slots DROP CONSTRAINT slots_state_check`,
  `ALTER TABLE ${q}.slots ADD CONSTRAINT slots_state_check
     CHECK (state IN ('RUNNING', 'DONE', 'PARTIAL', 'RELEASED', 'FAILED', 'STUCK', 'SHARDED'))`,
  `CREATE TABLE ${q}.send_rates (
    job_id      text        PRIMARY KEY CHECK (job_id ~ '^[a-z][a-z0-9-]{0,62}$'),
    next_at     timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
  )`,
];

const VERSIONS = { 1: version1, 2: version2, 3: version3, 4: version4 } as const;

/**
 * The claim a version-3 build sends, copied from its sql.ts: a replica still running that build
 * during a rolling deploy keeps sending it to a schema already migrated to version 4.
 * $1 job, $2 window, $3 owner, $4 now, $5 lease ms, $6 max attempts, $7 caller's clock,
 * $8 execution id, $9 attempt number, $10 invocation id, $11 expires at (epoch seconds),
 * $12 backfilled, $13 deadline, $14 takeover-before, $15 key version.
 */
const version3Claim = (q: string) => `
  WITH t AS (SELECT COALESCE($4::timestamptz, clock_timestamp()) AS now)
  INSERT INTO ${q}.slots AS s (
    job_id, slot_window, state, owner, epoch, lease_until, attempts, failures, max_attempts,
    claimed_at, claimer_clock, execution_id, attempt_number, invocation_id, backfilled, expires_at,
    deadline, key_version)
  SELECT $1::text, $2::text, 'RUNNING', $3::text, 1, t.now + $5::double precision * interval '1 millisecond',
    1, 0, $6::integer, t.now, $7::timestamptz, $8::text, $9::integer, $10::text, $12::boolean,
    to_timestamp($11::double precision), $13::timestamptz, $15::text
  FROM t
  ON CONFLICT (job_id, slot_window) DO UPDATE SET
    state = 'RUNNING', owner = EXCLUDED.owner, epoch = s.epoch + 1, lease_until = EXCLUDED.lease_until,
    attempts = s.attempts + 1, max_attempts = EXCLUDED.max_attempts, claimed_at = EXCLUDED.claimed_at,
    claimer_clock = EXCLUDED.claimer_clock, previous_owner = s.owner, previous_state = s.state,
    execution_id = EXCLUDED.execution_id, attempt_number = EXCLUDED.attempt_number,
    invocation_id = EXCLUDED.invocation_id, backfilled = EXCLUDED.backfilled,
    expires_at = EXCLUDED.expires_at, deadline = COALESCE(s.deadline, EXCLUDED.deadline),
    key_version = COALESCE(s.key_version, EXCLUDED.key_version), progress = NULL, resume_after = NULL
  WHERE (s.state = 'RUNNING' AND s.lease_until < COALESCE($14::timestamptz, EXCLUDED.claimed_at))
    OR (s.state = 'RELEASED' AND (s.resume_after IS NULL OR s.resume_after <= EXCLUDED.claimer_clock))
  RETURNING s.epoch, s.lease_until, s.previous_owner, s.previous_state, s.deadline, s.checkpoint,
    s.runs_without_progress, s.key_version`;

/** Claims `slot` for `owner` at `at` the way a version-3 build does; returns the epochs granted. */
async function claimAsVersion3(q: string, slot: Slot, owner: string, at: number): Promise<number[]> {
  const granted = await postgres.sql<{ epoch: number }>(version3Claim(q), [
    slot.jobId,
    slot.window,
    owner,
    new Date(at),
    60_000,
    3,
    new Date(at),
    null,
    null,
    owner,
    Math.ceil(WINDOW_MS / 1000) + 35 * 86_400,
    false,
    new Date(DEADLINE),
    new Date(at),
    null,
  ]);
  return granted.map((row) => row.epoch);
}

/** A new schema as an older build's migration left it, at `version`. */
async function schemaAt(version: keyof typeof VERSIONS): Promise<{ schema: string; q: string }> {
  const schema = postgres.uniqueSchemaName(`v${version}`);
  const q = escapeIdentifier(schema);
  for (const statement of VERSIONS[version](q)) await postgres.sql(statement);
  await postgres.sql(`INSERT INTO ${q}.schema_version (version) VALUES ($1)`, [version]);
  return { schema, q };
}

/** Migrates a schema at `version` to this one, and checks that it was upgraded and says so. */
async function migratesFrom(version: keyof typeof VERSIONS, schema: string, q: string): Promise<void> {
  expect(await migrate(postgres.pool({ max: 1 }), { schema })).toEqual({
    schema,
    version: SCHEMA_VERSION,
    applied: true,
  });
  const versions = await postgres.sql<{ version: number }>(
    `SELECT version FROM ${q}.schema_version ORDER BY version`,
  );
  expect(versions.map((v) => v.version)).toEqual([version, SCHEMA_VERSION]);
}

/** Rows of every state an older version could write: DONE, RUNNING, RELEASED, FAILED slots; effects. */
async function olderRows(q: string, slots: Record<'done' | 'running' | 'released' | 'failed', Slot>) {
  for (const [state, slot] of [
    ['DONE', slots.done],
    ['RUNNING', slots.running],
    ['RELEASED', slots.released],
    ['FAILED', slots.failed],
  ] as const) {
    await postgres.sql(
      `INSERT INTO ${q}.slots (job_id, slot_window, state, owner, epoch, lease_until, attempts, max_attempts,
         claimed_at, claimer_clock, summary, expires_at)
       VALUES ($1, $2, $3, 'old-build', 1, now() - interval '1 hour', 1, 3, now(), now(),
         '{"done": 2, "skipped": 0, "inDoubt": 0, "failed": 0, "inDoubtKeys": [], "epoch": 1}', now() + interval '35 days')`,
      [slot.jobId, slot.window, state],
    );
  }
  for (const [key, state] of [
    ['k-done', 'DONE'],
    ['k-reserved', 'RESERVED'],
  ] as const) {
    await postgres.sql(
      `INSERT INTO ${q}.effects (job_id, slot_window, key_hash, state, epoch, owner, reserved_at, expires_at)
       VALUES ($1, $2, $3, $4, 1, 'old-build', now(), now() + interval '35 days')`,
      [slots.released.jobId, slots.released.window, key, state],
    );
  }
}

/** The parts of a schema's catalog a migration decides: columns, constraints and indexes. */
async function catalogOf(schema: string) {
  const columns = await postgres.sql(
    `SELECT table_name, ordinal_position, column_name, data_type, is_nullable, column_default, collation_name
     FROM information_schema.columns WHERE table_schema = $1 ORDER BY table_name, ordinal_position`,
    [schema],
  );
  const constraints = await postgres.sql(
    `SELECT t.relname AS table_name, c.conname, c.convalidated, pg_get_constraintdef(c.oid) AS definition
     FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace
     WHERE n.nspname = $1 ORDER BY t.relname, c.conname`,
    [schema],
  );
  // Index definitions name the schema (unquoted: slotguard's schema names never need quotes).
  const indexes = await postgres.sql(
    `SELECT tablename, indexname, replace(indexdef, $1 || '.', '') AS definition
     FROM pg_indexes WHERE schemaname = $1 ORDER BY tablename, indexname`,
    [schema],
  );
  return { columns, constraints, indexes };
}

/** The state CHECK constraints of a schema, by name, with their oids (a re-created one gets a new oid). */
async function stateChecks(schema: string) {
  return postgres.sql<{ conname: string; oid: number; definition: string }>(
    `SELECT c.conname, c.oid::integer AS oid, pg_get_constraintdef(c.oid) AS definition
     FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace
     WHERE n.nspname = $1 AND c.conname IN ('slots_state_check', 'effects_state_check', 'shard_slots_state_check')
     ORDER BY c.conname`,
    [schema],
  );
}

const toldToMigrate = (error: unknown) =>
  error instanceof ConfigurationError &&
  /older than this version of slotguard.*run the migration/.test(error.message);

describe('Postgres schema upgrades', () => {
  it('brings a version-2 schema to the current version with every row kept, and tells a new build to migrate until then', async () => {
    const { schema, q } = await schemaAt(2);
    const slots = { done: freshSlot(), running: freshSlot(), released: freshSlot(), failed: freshSlot() };
    await olderRows(q, slots);
    const backend = postgres.backend(schema);
    await expect(backend.claims.claim(freshSlot(), lease('new-build'), Date.now())).rejects.toSatisfy(
      toldToMigrate,
    );
    await expect(backend.claims.read(slots.done)).rejects.toSatisfy(toldToMigrate);

    const pool = postgres.pool({ max: 3 });
    // Three replicas deploying at once: one upgrades, the others find it done.
    const results = await Promise.all([1, 2, 3].map(() => migrate(pool, { schema })));
    expect(results.filter((r) => r.applied)).toEqual([{ schema, version: SCHEMA_VERSION, applied: true }]);
    expect(await migrate(pool, { schema })).toEqual({ schema, version: SCHEMA_VERSION, applied: false });
    const versions = await postgres.sql<{ version: number }>(
      `SELECT version FROM ${q}.schema_version ORDER BY version`,
    );
    expect(versions.map((v) => v.version)).toEqual([2, SCHEMA_VERSION]);

    // The older rows, as the new build reads them: no deadline, no checkpoint, no runs without progress.
    const done = await backend.claims.read(slots.done);
    expect(done).toMatchObject({ state: 'DONE', owner: 'old-build', epoch: 1, runsWithoutProgress: 0 });
    expect(done?.deadline).toBeUndefined();
    expect(done?.checkpoint).toBeUndefined();
    expect(await backend.claims.claim(slots.done, lease('new-build'), Date.now())).toMatchObject({
      kind: 'done',
      state: 'DONE',
      summary: { done: 2 },
    });
    expect(await backend.claims.claim(slots.failed, lease('new-build'), Date.now())).toMatchObject({
      kind: 'failed',
    });
    // A window an older build released: the first claim by the new build stores its deadline.
    const resumed = await backend.claims.claim(slots.released, lease('new-build'), Date.now());
    expect(resumed).toMatchObject({
      kind: 'claimed',
      claim: { epoch: 2, via: 'retry', window: { deadline: DEADLINE, runsWithoutProgress: 0 } },
    });
    if (resumed.kind !== 'claimed') throw new Error(resumed.kind);
    expect(await backend.claims.read(slots.released)).toMatchObject({ deadline: DEADLINE });
    const now = Date.now();
    expect(
      await backend.ledger.reserveMany(resumed.claim, ['k-done', 'k-reserved'], { rerunInDoubt: false, now }),
    ).toEqual([{ kind: 'done' }, { kind: 'in-doubt', epoch: 1 }]);
    // The older build's in-doubt effect takes the provider's word and is settled by it.
    const word = { outcome: 'accepted', event: 'Delivery', at: now - 1_000, epoch: 1 } as const;
    expect(await backend.ledger.recordProviderWord(slots.released, 'k-reserved', word)).toBe('recorded');
    const inDoubt = await backend.ledger.read(slots.released, 'k-reserved');
    expect(inDoubt).toMatchObject({ state: 'RESERVED', epoch: 1, provider: word });
    if (!inDoubt) throw new Error('k-reserved is gone');
    expect(await backend.ledger.settleInDoubt(slots.released, inDoubt, 'done', now)).toBe(true);
    expect(await backend.ledger.read(slots.released, 'k-reserved')).toMatchObject({ state: 'DONE' });
    // The new states fit the widened CHECKs: a refused effect, and the window given up as STUCK.
    await backend.ledger.reserve(resumed.claim, 'k-new', { rerunInDoubt: false, now });
    await backend.ledger.recordFailure(resumed.claim, 'k-new', {
      attempts: 1,
      retryAt: now + 60_000,
      reason: 'throttled',
    });
    expect(await backend.ledger.read(slots.released, 'k-new')).toMatchObject({
      state: 'FAILED',
      attempts: 1,
    });
    expect(
      await backend.claims.release(
        resumed.claim,
        { kind: 'stuck', reason: 'no progress', runsWithoutProgress: 3 },
        now,
      ),
    ).toEqual({ kind: 'ok' });
    expect(await backend.claims.read(slots.released)).toMatchObject({
      state: 'STUCK',
      lastError: 'no progress',
    });
  });

  it.each([1, 2, 3, 4] as const)(
    'leaves a version-%i schema, upgraded, identical to a new one: the same columns, constraints and indexes',
    async (version) => {
      const upgraded = await schemaAt(version);
      await migrate(postgres.pool({ max: 1 }), { schema: upgraded.schema });
      const fresh = await postgres.freshSchema(`v${SCHEMA_VERSION}`);
      const [a, b] = [await catalogOf(upgraded.schema), await catalogOf(fresh)];
      // slots 20 + 2 + 6 + 2 + 1 columns (versions 1 to 5), effects 9 + 1 + 3 + 5 + 1 (version 4:
      // the shard, and the provider's word in four; version 5: the sequence number), schema_version
      // 2, shard_slots 29 + 1 (version 4: a slot row's 27 columns less the split, its key's shard;
      // version 5: the done marks), and send_rates 3 (version 4).
      expect(a.columns).toHaveLength(85);
      expect(a.constraints.length).toBeGreaterThanOrEqual(15);
      expect(a.indexes.map((i) => i.indexname)).toEqual(
        expect.arrayContaining(['shard_slots_pkey', 'send_rates_pkey']),
      );
      expect(a).toEqual(b);
      const checks = await stateChecks(fresh);
      expect(checks.map((c) => [c.conname, c.definition])).toEqual([
        [
          'effects_state_check',
          "CHECK ((state = ANY (ARRAY['RESERVED'::text, 'DONE'::text, 'FAILED'::text])))",
        ],
        [
          'shard_slots_state_check',
          "CHECK ((state = ANY (ARRAY['RUNNING'::text, 'DONE'::text, 'PARTIAL'::text, 'RELEASED'::text, 'FAILED'::text, 'STUCK'::text])))",
        ],
        [
          'slots_state_check',
          "CHECK ((state = ANY (ARRAY['RUNNING'::text, 'DONE'::text, 'PARTIAL'::text, 'RELEASED'::text, 'FAILED'::text, 'STUCK'::text, 'SHARDED'::text])))",
        ],
      ]);
    },
  );

  it('keeps the primary keys a version-3 build claims by, so its replicas still claim during a rolling deploy', async () => {
    const { schema, q } = await schemaAt(3);
    const slot = freshSlot();
    await migrate(postgres.pool({ max: 1 }), { schema });
    const now = Date.now();
    const claimByVersion3 = (owner: string, at: number) => claimAsVersion3(q, slot, owner, at);
    // The old build's upsert still names slots' key: it grants, and a live lease still holds it off.
    expect(await claimByVersion3('old-build', now)).toEqual([1]);
    expect(await claimByVersion3('old-build-2', now + 1_000)).toEqual([]);
    const backend = postgres.backend(schema, { leaseClock: 'caller' });
    // The new build reads its row as a window that is not split, and takes it over once it ends.
    expect(await backend.claims.read(slot)).toMatchObject({ owner: 'old-build', epoch: 1 });
    expect((await backend.claims.read(slot))?.shards).toBeUndefined();
    const taken = await backend.claims.claim(slot, lease('new-build', { shards: 4 }), now + 61_000);
    expect(taken).toMatchObject({ kind: 'claimed', claim: { epoch: 2, via: 'takeover' } });
    expect(taken.kind === 'claimed' && taken.claim.window.shards).toBeUndefined();
    expect(await backend.claims.read(slot)).toMatchObject({ epoch: 2, shards: 1 });
  });

  it('does not re-create a state CHECK that already lists every state when migrating again', async () => {
    const { schema } = await schemaAt(2);
    const pool = postgres.pool({ max: 1 });
    await migrate(pool, { schema });
    const before = await stateChecks(schema);
    expect(before).toHaveLength(3);
    expect(await migrate(pool, { schema })).toMatchObject({ applied: false });
    // The same constraints (same oids): an up-to-date schema is neither altered nor scanned again.
    expect(await stateChecks(schema)).toEqual(before);
  });

  it('brings a version-1 schema up to date with its rows kept', async () => {
    const { schema, q } = await schemaAt(1);
    const slot = freshSlot();
    await postgres.sql(
      `INSERT INTO ${q}.slots (job_id, slot_window, state, owner, epoch, lease_until, attempts, max_attempts,
         claimed_at, claimer_clock, expires_at)
       VALUES ($1, $2, 'DONE', 'old-build', 1, NULL, 1, 3, now(), now(), now() + interval '35 days')`,
      [slot.jobId, slot.window],
    );
    const backend = postgres.backend(schema);
    await expect(backend.claims.claim(freshSlot(), lease('new-build'), Date.now())).rejects.toSatisfy(
      toldToMigrate,
    );

    await migratesFrom(1, schema, q);
    const kept = await backend.claims.read(slot);
    expect(kept).toMatchObject({ state: 'DONE', owner: 'old-build', epoch: 1, runsWithoutProgress: 0 });
    expect(kept?.delivery.backfilled).toBeUndefined();
    const next = freshSlot();
    await backend.claims.claim(next, lease('b', { delivery: { backfilled: true } }), Date.now());
    expect(await backend.claims.read(next)).toMatchObject({
      delivery: { backfilled: true },
      deadline: DEADLINE,
    });
  });

  it('brings a version-3 schema up to date with its rows kept, and the shared send rate works after', async () => {
    const { schema, q } = await schemaAt(3);
    const slot = freshSlot();
    const now = Date.now();
    expect(await claimAsVersion3(q, slot, 'old-build', now)).toEqual([1]);
    const backend = postgres.backend(schema);
    const store = new PostgresRateLimitStore({
      pool: postgres.pool({ max: 1 }),
      schema,
      jobId: 'upgrade-job',
    });
    await expect(store.reserve({ now: WINDOW_MS, spanMs: 100, notBeforeMs: 0 })).rejects.toSatisfy(
      (error: unknown) =>
        error instanceof ConfigurationError &&
        /run the migration first: slotguard postgres migrate/.test(error.message),
    );

    await migratesFrom(3, schema, q);
    expect(await backend.claims.read(slot)).toMatchObject({ state: 'RUNNING', owner: 'old-build', epoch: 1 });
    const first = await store.reserve({ now: WINDOW_MS, spanMs: 100, notBeforeMs: 0 });
    const second = await store.reserve({ now: WINDOW_MS, spanMs: 100, notBeforeMs: 0 });
    expect(second.start - first.start).toBeCloseTo(100, 3);
  });

  it("brings a version-4 schema up to date with its rows kept, and no done marks cover an older build's reservation", async () => {
    const { schema, q } = await schemaAt(4);
    const slot = freshSlot();
    const checkpoint = { positions: { customers: 'c000002' }, walked: false };
    // An older build's window, yielded with a checkpoint and one effect left in doubt, and a shard's row.
    await postgres.sql(
      `INSERT INTO ${q}.slots (job_id, slot_window, state, owner, epoch, lease_until, attempts, max_attempts,
         claimed_at, claimer_clock, expires_at, deadline, checkpoint, shards)
       VALUES ($1, $2, 'RELEASED', 'old-build', 1, now(), 1, 3, now(), now(), now() + interval '35 days', $3, $4, 1)`,
      [slot.jobId, slot.window, new Date(DEADLINE), JSON.stringify(checkpoint)],
    );
    await postgres.sql(
      `INSERT INTO ${q}.effects (job_id, slot_window, key_hash, state, epoch, owner, reserved_at, expires_at)
       VALUES ($1, $2, 'k-old', 'RESERVED', 1, 'old-build', now(), now() + interval '35 days')`,
      [slot.jobId, slot.window],
    );
    const sharded = freshSlot();
    await postgres.sql(
      `INSERT INTO ${q}.shard_slots (job_id, slot_window, shard, state, owner, epoch, lease_until, attempts,
         max_attempts, claimed_at, claimer_clock, expires_at)
       VALUES ($1, $2, 0, 'RELEASED', 'old-build', 1, now(), 1, 3, now(), now(), now() + interval '35 days')`,
      [sharded.jobId, sharded.window],
    );
    const backend = postgres.backend(schema);
    await expect(backend.claims.read(slot)).rejects.toSatisfy(toldToMigrate);
    await expect(backend.ledger.read(slot, 'k-old')).rejects.toSatisfy(toldToMigrate);

    await migratesFrom(4, schema, q);
    const kept = await backend.claims.read(slot);
    expect(kept).toMatchObject({ state: 'RELEASED', owner: 'old-build', epoch: 1, checkpoint });
    expect(kept?.doneMarks).toBeUndefined();
    expect(await backend.claims.read({ ...sharded, shard: 0 })).toMatchObject({
      state: 'RELEASED',
      epoch: 1,
    });
    expect(await backend.ledger.read(slot, 'k-old')).toEqual(
      expect.not.objectContaining({ seq: expect.anything() }),
    );

    const resumed = await backend.claims.claim(slot, lease('new-build'), Date.now());
    if (resumed.kind !== 'claimed') throw new Error(resumed.kind);
    expect(resumed.claim).toMatchObject({ epoch: 2, via: 'retry', window: { checkpoint } });
    expect(resumed.claim.window.doneMarks).toBeUndefined();
    const now = Date.now();
    expect(
      await backend.ledger.reserve(resumed.claim, 'k-old', { rerunInDoubt: false, now, seq: 0 }),
    ).toEqual({
      kind: 'in-doubt',
      epoch: 1,
    });
    await backend.ledger.reserve(resumed.claim, 'k-new', { rerunInDoubt: false, now, seq: 1 });
    // Marks that would cover epoch 1's first ten numbers: the older build's reservation has none.
    const marks = { '1': { below: 10, open: [] }, '2': { below: 2, open: [] } };
    const progress = { ...runSummary(2, 1), inDoubt: 1, inDoubtKeys: ['k-old'] };
    expect(await backend.claims.checkpoint(resumed.claim, checkpoint, progress, marks)).toEqual({
      kind: 'ok',
    });
    expect(await backend.ledger.read(slot, 'k-old')).toMatchObject({ state: 'RESERVED', epoch: 1 });
    expect(await backend.ledger.read(slot, 'k-new')).toMatchObject({ state: 'DONE', epoch: 2, seq: 1 });
    expect((await backend.claims.read(slot))?.doneMarks).toEqual(marks);
  });
});
