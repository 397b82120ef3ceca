import { escapeIdentifier } from 'pg';
import { ConfigurationError } from '../../errors.js';
import { EffectState, SlotState } from '../../slot/ports.js';
import { assertSchemaName } from './postgres-settings.js';

/**
 * Every SQL statement of the Postgres backend, in one place.
 *
 * Rules this file keeps:
 * - Values always travel as bind parameters ($1, $2, …), never inside the text. The only thing
 *   spliced into the text is the schema name, validated by {@link assertSchemaName} and quoted with
 *   pg's escapeIdentifier, and the three timeout integers of {@link beginTransaction}, which are
 *   validated whole numbers (SET accepts no bind parameters).
 * - Statements are unnamed (no `name` in the query config), so nothing is prepared per session:
 *   RDS Proxy and PgBouncer in transaction mode can hand each transaction to another connection.
 * - Time: `$now` is `NULL` on the database clock (the statement reads `clock_timestamp()`) or the
 *   caller's clock reading on the caller clock (see `LeaseClock`). One text serves both. Leases are
 *   judged by that lease clock; the instants the caller itself computed (a window's deadline, a
 *   refused effect's `retry_at`, a yielded window's `resume_after`) are compared with the caller's
 *   clock, in the adapter or as a bind parameter, on either lease clock.
 */

export { assertSchemaName, SCHEMA_NAME_PATTERN } from './postgres-settings.js';

/**
 * The version the migration below brings a schema to.
 * 1: slots, effects, schema_version.
 * 2: `slots.backfilled`, and `operator_action` on slots and effects (the operator store's note).
 * 3: windows that finish across runs: slot states PARTIAL and STUCK, and `deadline`, `checkpoint`,
 *    `progress`, `runs_without_progress`, `resume_after`, `key_version` on slots; effect state FAILED, and
 *    `attempts`, `retry_at`, `reason` on effects.
 * 4: windows split into shards: slot state SHARDED, `shards` and `finished_shards` on slots, the
 *    `shard_slots` table (one row per shard, each a slot of its own), and `shard` on effects;
 *    `send_rates`, each job's send-rate timeline (SharedRateLimiter); and the provider's word on
 *    effects (`provider_outcome`, `provider_event`, `provider_at`, `provider_message_id`), with
 *    `reserved_at` now the reserving run's clock (it was the database's).
 * 5: done marks: `done_marks` on slots and shard_slots (every epoch's, written with a run's
 *    checkpoint), and `seq` on effects (the reserving run's number for it, which the marks cover).
 */
export const SCHEMA_VERSION = 5;

/**
 * The advisory-lock key that serialises concurrent migrations (of any schema): a fixed constant,
 * the same in every version, so replicas of different builds migrating at once still queue.
 */
export const MIGRATION_LOCK_KEY = '7310475300220901377';

/** A clock expression: the caller's reading when one is passed, else the database's own clock. */
const now = (param: string) => `COALESCE(${param}::timestamptz, clock_timestamp())`;

/**
 * The slot columns `read` and every conflict explanation decode (see SlotRow in the claim store):
 * every slot row has them, a window's (`slots`) and a shard's (`shard_slots`). The done marks come
 * as text, for parseDoneMarks to check as every backend does.
 */
const SLOT_COLUMNS = `state, owner, epoch, lease_until, attempts, failures, max_attempts, claimed_at,
  execution_id, attempt_number, invocation_id, backfilled, summary, last_error, completed_at, expires_at,
  deadline, checkpoint, progress, runs_without_progress, resume_after, key_version,
  done_marks::text AS done_marks`;

/** A window's row adds its split: how many shards, and which have reached their end. */
const WINDOW_COLUMNS = `${SLOT_COLUMNS}, shards, finished_shards`;

/** The effect columns every read decodes (see EffectRow in the ledger). */
const EFFECT_COLUMNS = `key_hash, state, epoch, owner, attempts, retry_at, reason, shard, reserved_at,
  provider_outcome, provider_event, provider_at, provider_message_id, seq`;

/**
 * The done marks (jsonb) of the slot row that reserved effect row `e`: the window's own row, or for
 * a shard's reservation that shard's row (done marks are a slot row's own, as epochs are).
 */
const doneMarksOfRow = (schema: string, e: string) => `CASE WHEN ${e}.shard IS NULL
          THEN (SELECT w.done_marks FROM ${schema}.slots AS w
                WHERE w.job_id = ${e}.job_id AND w.slot_window = ${e}.slot_window)
          ELSE (SELECT w.done_marks FROM ${schema}.shard_slots AS w
                WHERE w.job_id = ${e}.job_id AND w.slot_window = ${e}.slot_window AND w.shard = ${e}.shard)
        END`;

/**
 * True when effect row `e` is a reservation the done marks `marks` (a jsonb expression) cover:
 * coveredByMarks (shared/slot/done-marks.ts) spelled in SQL, for a write that must not touch a
 * covered reservation to check it in its own statement. RESERVED, with a sequence number below its
 * epoch's `below` and not among its `open`; a NULL anywhere (no marks, none of its epoch, no number)
 * covers nothing, as there. Exported so a test can hold the two to the same answers.
 */
export const coveredByMarksSql = (marks: string, e: string) => `EXISTS (
          SELECT 1 FROM (SELECT (${marks}) -> ${e}.epoch::text AS mine) AS m
          WHERE ${e}.state = 'RESERVED' AND ${e}.seq < (m.mine ->> 'below')::bigint
            AND NOT (m.mine -> 'open') @> to_jsonb(${e}.seq))`;

/** The condition of a write that leaves alone a reservation its slot row's done marks cover. */
const notCovered = (schema: string, e: string) => `NOT ${coveredByMarksSql(doneMarksOfRow(schema, e), e)}`;

/** The SET list that drops an effect row's provider's word (see recordProviderWord). */
const NO_PROVIDER_WORD =
  'provider_outcome = NULL, provider_event = NULL, provider_at = NULL, provider_message_id = NULL';

/**
 * The SET list of an operator's write that gives a slot back (OperatorStore): RELEASED, the lease
 * ended now, failures and runs without progress 0, no retry wait, the operator's note, and the new
 * deadline when one is given (else the window's stays).
 */
const givenBack = (nowParam: string, actionParam: string, deadlineParam: string) =>
  `state = 'RELEASED', lease_until = ${now(nowParam)}, failures = 0, runs_without_progress = 0,
        resume_after = NULL, operator_action = ${actionParam},
        deadline = COALESCE(${deadlineParam}::timestamptz, deadline)`;

/** What a window given back to be walked again (reopen, re-drive) no longer needs. */
const REWALK = 'checkpoint = NULL, progress = NULL, completed_at = NULL';

/**
 * What a window given back forgets of its split: which shards had finished. Its next delivery's
 * coordinator hands out every shard again, and each shard reports its end again (a shard already
 * at its end does at once), so the set fills afresh and the window finishes from its shards as
 * they are now. The split itself (`shards`) stays.
 */
const SHARDS_HANDED_OUT_AGAIN = 'finished_shards = NULL';

/**
 * A slot row's columns after its key and state, as version 1 created them: `slots` has had them
 * since, and `shard_slots` starts with them too (its later columns are those versions 2 and 3 added
 * to `slots`).
 */
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

/** The CHECKs on a slot row's key, the same in `slots` and `shard_slots`. */
const JOB_ID_CHECK = "CHECK (job_id ~ '^[a-z][a-z0-9-]{0,62}$')";
const WINDOW_CHECK = "CHECK (slot_window ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$')";

/** `state IN ('A', 'B', …)`: the CHECK on a state column, listing every state of this version. */
const stateCheck = (states: readonly string[]) => `state IN (${states.map((v) => `'${v}'`).join(', ')})`;

/**
 * Brings the CHECK constraint Postgres generated for an inline `CHECK (state IN …)` (named
 * `<table>_state_check`) up to `states`, only when it does not already name every one of them: a
 * schema already at this version is left alone (no lock, no scan). Widening it is a DROP and an ADD
 * under the same name, so an upgraded table and a new one end up with identical constraints. The
 * ADD checks every existing row once, under the ALTER's ACCESS EXCLUSIVE lock; every row passes,
 * since the list only grows. The values spliced in are this file's own state constants.
 */
function widenStateCheck(table: string, constraint: string, states: readonly string[]): string {
  const named = states.map((v) => `'%''${v}''%'`).join(', ');
  return `DO $widen$ BEGIN
        IF NOT EXISTS (
          SELECT 1 FROM pg_constraint
          WHERE conrelid = '${table}'::regclass AND conname = '${constraint}'
            AND pg_get_constraintdef(oid) LIKE ALL (ARRAY[${named}])
        ) THEN
          ALTER TABLE ${table} DROP CONSTRAINT IF EXISTS ${constraint};
          ALTER TABLE ${table} ADD CONSTRAINT ${constraint} CHECK (${stateCheck(states)});
        END IF;
      END $widen$`;
}

/** Which kind of slot row a statement addresses: a window's (`slots`) or one shard's (`shard_slots`). */
type SlotRowKind = 'window' | 'shard';

/**
 * The statements a slot's lease goes through, for one of the two tables that hold slot rows:
 * `slots`, one row per (job, window), and `shard_slots`, one row per shard of a sharded window, keyed
 * by (job, window, shard). A shard is a slot of its own, with its own epoch, lease, deadline,
 * checkpoint and key version, granted and fenced exactly as a window is; the two texts of a
 * statement differ only in the row's key, the columns read back and what a first claim stores. A
 * shard's statement takes the shard as one more parameter, after all of the window's, so the
 * parameters both share keep their positions: `$1 job, $2 window, …` below, `$n shard` last.
 */
function slotRowStatements(schema: string, kind: SlotRowKind) {
  const table = kind === 'window' ? `${schema}.slots` : `${schema}.shard_slots`;
  const shard = kind === 'shard';
  /** The row's key: job and window, and for a shard's row the shard, as parameter `$${n}`. */
  const key = (n: number, job = '$1', window = '$2') =>
    `job_id = ${job} AND slot_window = ${window}${shard ? ` AND shard = $${n}::integer` : ''}`;
  const columns = shard ? SLOT_COLUMNS : WINDOW_COLUMNS;

  /*
   * The lease check every effect write starts with, as a CTE: the claim's own slot row (a shard's
   * row for a shard's claim), locked FOR SHARE, only if it is RUNNING under this owner and epoch and
   * (on the database clock) its lease has not ended. FOR SHARE conflicts with the UPDATE a takeover
   * makes, so a takeover cannot commit between this check and the write that follows it in the
   * same statement; a holder's own concurrent batches share the lock and do not wait for each
   * other. The effect rows themselves are the window's whichever row the lease is on: a sharded
   * window keeps one ledger, and its shards' leases fence their own writes to it.
   * $1 job, $2 window, $3 owner, $4 epoch, $5 check the lease end (database clock only), `$${n}` shard.
   */
  const leaseHeld = (n: number) => `lease AS MATERIALIZED (
    SELECT expires_at FROM ${table}
    WHERE ${key(n)} AND state = 'RUNNING' AND owner = $3 AND epoch = $4
      AND ($5::boolean IS FALSE OR lease_until > clock_timestamp())
    FOR SHARE
  )`;

  return {
    /**
     * The claim's first statement: try the slot's transaction-scoped advisory lock and read the row
     * as committed. The lock only orders claimers of one slot (a loser waits for the winner's
     * commit instead of racing it to the row); the row decides. $1 lock key, $2 job, $3 window,
     * $4 takeover-before: a lease that ended before it may be taken over (the caller's clock less
     * the skew allowance, or NULL for the database clock), $5 shard.
     */
    probeSlot: `
      SELECT pg_try_advisory_xact_lock($1::bigint) AS locked, s.*
      FROM (SELECT 1) AS one
      LEFT JOIN (
        SELECT ${columns}, lease_until < ${now('$4')} AS lease_expired
        FROM ${table} WHERE ${key(5, '$2', '$3')}
      ) AS s ON TRUE`,

    /**
     * The row as committed now, with whether its lease has ended. $1 job, $2 window,
     * $3 takeover-before (as in probeSlot), $4 shard.
     */
    readSlotForClaim: `
      SELECT ${columns}, lease_until < ${now('$3')} AS lease_expired
      FROM ${table} WHERE ${key(4)}`,

    /*
     * Timeline of a claim (the only statement that grants a slot):
     *   t0        A: absent → INSERT: RUNNING, epoch 1, lease_until t0+L            → claimed (new)
     *   t1        B: conflict; RUNNING and lease_until > t1: WHERE false, no row     → held
     *   t0+L+ε    B: conflict; RUNNING and lease_until < now: UPDATE epoch 2, owner B → claimed (takeover)
     *   later     A's renew/complete/reserve, conditioned on (A, epoch 1), match no row → lost / fenced
     *   B yields with resume_after r: RELEASED; a claim before r (caller's clock): no row → waiting
     * The epoch is `epoch + 1` inside the same statement, so it grows by exactly one per grant. The
     * row's previous owner and state are kept on it, to name the previous holder and tell a
     * takeover (RUNNING) from a retry (RELEASED). What the claim hands its run (the window's
     * deadline, checkpoint, runs without progress, key version, split and done marks) is returned
     * as the row it replaced had it: the update keeps those (the deadline, key version and split
     * only fill in where an older row has none; the done marks it never writes), so RETURNING them
     * returns the old values. It drops the last holder's `progress` and any `resume_after`. A
     * conflict that does not pass WHERE still leaves the row locked by this transaction, so the
     * read that explains it sees it unchanged.
     * `now` is read once (the first CTE) and is both the lease start and, on the database clock,
     * the expiry test: a statement that waited for a lock judges expiry by an instant no later than
     * the one it acts at, which can only make it see a lease as live for longer.
     * A window's split (`shards`) is stored by its first claim and kept by every later one, so a
     * changed setting never re-splits an open window; a row an older build wrote has none, and is
     * not split (1). A shard's row stores which shard it is instead.
     * $1 job, $2 window, $3 owner, $4 now, $5 lease ms, $6 max attempts, $7 caller's clock,
     * $8 execution id, $9 attempt number, $10 invocation id, $11 expires at (epoch seconds),
     * $12 backfilled (recorded per grant: a retry by the schedule itself is not a backfill),
     * $13 the deadline this claim asks for, $14 takeover-before (as in probeSlot), $15 the
     * effect-key version this claim hashes with (kept from the first claim, like the deadline),
     * $16 the window's split this claim asks for, or for a shard's row the shard.
     */
    claimSlot: `
      WITH t AS (SELECT ${now('$4')} AS now)
      INSERT INTO ${table} AS s (
        job_id, slot_window, state, owner, epoch, lease_until, attempts, failures, max_attempts,
        claimed_at, claimer_clock, execution_id, attempt_number, invocation_id, backfilled, expires_at,
        deadline, key_version, ${shard ? 'shard' : 'shards'})
      SELECT $1::text, $2::text, 'RUNNING', $3::text, 1, t.now + $5::double precision * interval '1 millisecond',
        1, 0, $6::integer, t.now, $7::timestamptz, $8::text, $9::integer, $10::text, $12::boolean,
        to_timestamp($11::double precision), $13::timestamptz, $15::text, $16::integer
      FROM t
      ON CONFLICT (job_id, slot_window${shard ? ', shard' : ''}) DO UPDATE SET
        state = 'RUNNING', owner = EXCLUDED.owner, epoch = s.epoch + 1, lease_until = EXCLUDED.lease_until,
        attempts = s.attempts + 1, max_attempts = EXCLUDED.max_attempts, claimed_at = EXCLUDED.claimed_at,
        claimer_clock = EXCLUDED.claimer_clock, previous_owner = s.owner, previous_state = s.state,
        execution_id = EXCLUDED.execution_id, attempt_number = EXCLUDED.attempt_number,
        invocation_id = EXCLUDED.invocation_id, backfilled = EXCLUDED.backfilled,
        expires_at = EXCLUDED.expires_at, deadline = COALESCE(s.deadline, EXCLUDED.deadline),
        key_version = COALESCE(s.key_version, EXCLUDED.key_version), progress = NULL, resume_after = NULL${
          shard ? '' : ',\n        shards = COALESCE(s.shards, 1)'
        }
      WHERE (s.state = 'RUNNING' AND s.lease_until < COALESCE($14::timestamptz, EXCLUDED.claimed_at))
        OR (s.state = 'RELEASED' AND (s.resume_after IS NULL OR s.resume_after <= EXCLUDED.claimer_clock))
      RETURNING s.epoch, s.lease_until, s.previous_owner, s.previous_state, s.deadline, s.checkpoint,
        s.runs_without_progress, s.key_version, s.done_marks::text AS done_marks${shard ? '' : ', s.shards'}`,

    /*
     * Timeline of a renewal: only the holder of this exact grant extends its lease.
     *   A (epoch 1) renews at t: lease_until = t + L                    → renewed
     *   after B took over (epoch 2): owner/epoch no longer match, no row → lost
     * $1 job, $2 window, $3 owner, $4 epoch, $5 now, $6 lease ms, $7 shard.
     */
    renewLease: `
      UPDATE ${table} SET lease_until = ${now('$5')} + $6::double precision * interval '1 millisecond'
      WHERE ${key(7)} AND owner = $3 AND epoch = $4 AND state = 'RUNNING'
      RETURNING lease_until`,

    /*
     * Timeline of a checkpoint: the holder records where its walk stands, its counts so far and,
     * when it gives them, the slot's done marks (every epoch's: those its claim was handed, and its
     * own).
     *   A (epoch 1, RUNNING) checkpoints with marks {1: below 40, open [7]} → ok; marks replaced
     *   A checkpoints without marks                                         → ok; marks kept
     *   A after a takeover by B: no row, marks untouched; the read shows B  → fenced
     * Only this statement writes done_marks: no claim, release, completion or operator's write
     * clears them, since a reservation they cover reads DONE only through them.
     * $1 job, $2 window, $3 owner, $4 epoch, $5 checkpoint (JSON), $6 progress (JSON),
     * $7 done marks (JSON) or NULL to keep them, $8 shard.
     */
    checkpointSlot: `
      UPDATE ${table} SET checkpoint = $5::jsonb, progress = $6::jsonb,
        done_marks = COALESCE($7::jsonb, done_marks)
      WHERE ${key(8)} AND owner = $3 AND epoch = $4 AND state = 'RUNNING'
      RETURNING epoch`,

    /*
     * Timeline of a completion:
     *   A (epoch 1, RUNNING) completes: DONE (or PARTIAL), summary, lease cleared → ok
     *   A's retry after a lost reply: no row (DONE); the read shows it ours        → ok
     *   A after a takeover by B: no row; the read shows B, epoch 2                 → fenced
     * $1 job, $2 window, $3 owner, $4 epoch, $5 now, $6 summary (JSON), $7 'DONE' or 'PARTIAL', $8 shard.
     */
    completeSlot: `
      UPDATE ${table} SET state = $7::text, summary = $6::jsonb, completed_at = ${now('$5')}, lease_until = NULL
      WHERE ${key(8)} AND owner = $3 AND epoch = $4 AND state = 'RUNNING'
      RETURNING epoch`,

    /*
     * Timeline of a yield or of giving up:
     *   A yields: RELEASED, lease ended now; the next claimer gets epoch + 1 at once (via 'retry')
     *     instead of waiting for the lease to run out, or, with resume_after, once that has passed
     *   A gives up: STUCK, the reason in last_error; later claims stand down (stuck)
     * Either way the checkpoint (kept when none is given) and the runs without progress are left
     * for the next run or the operator.
     * $1 job, $2 window, $3 owner, $4 epoch, $5 now, $6 'RELEASED' or 'STUCK',
     * $7 runs without progress, $8 checkpoint (JSON) or NULL, $9 resume after or NULL,
     * $10 the reason given up (STUCK) or NULL, $11 shard.
     */
    releaseSlot: `
      UPDATE ${table} SET state = $6::text, lease_until = ${now('$5')}, runs_without_progress = $7::integer,
        checkpoint = COALESCE($8::jsonb, checkpoint), resume_after = $9::timestamptz,
        last_error = COALESCE($10::text, last_error)
      WHERE ${key(11)} AND owner = $3 AND epoch = $4 AND state = 'RUNNING'
      RETURNING state`,

    /*
     * Timeline of a failed run's release: failures + 1 in the same statement, and FAILED once that
     * reaches the max_attempts stored by the claim, so further fires stand down.
     *   attempt 1 fails → RELEASED, failures 1; attempt 2 → RELEASED, 2; attempt 3 → FAILED, 3
     * $1 job, $2 window, $3 owner, $4 epoch, $5 now, $6 error text, $7 shard.
     */
    failSlot: `
      UPDATE ${table} SET failures = failures + 1, last_error = $6, lease_until = ${now('$5')},
        state = CASE WHEN failures + 1 >= max_attempts THEN 'FAILED' ELSE 'RELEASED' END
      WHERE ${key(7)} AND owner = $3 AND epoch = $4 AND state = 'RUNNING'
      RETURNING state`,

    /** One slot row. $1 job, $2 window, $3 shard. */
    readSlot: `SELECT ${columns}, claimer_clock FROM ${table} WHERE ${key(3)}`,

    /*
     * Timeline of a batch of reservations (one statement, so one transaction):
     *   1. lock the claim's slot row FOR SHARE if (owner, epoch) still hold it and the lease is live
     *   2. only then insert the keys into the window's ledger, RESERVED and stamped with the epoch
     *      (and the shard, for a shard's claim); a key already present is left alone (ON CONFLICT
     *      DO NOTHING) and explained by a read afterwards
     * A holder fenced out by a takeover (or, on the database clock, past its lease) matches no row
     * in step 1 and inserts nothing. Keys are inserted in the caller's (sorted) order, so two
     * batches that overlap lock their rows in the same order and cannot deadlock. `reserved_at` is
     * the caller's clock, as every instant it later compares with its own clock (an in-doubt
     * effect's grace period runs from it). Each key's sequence number (NULL: none) is stored with
     * it, for the run's done marks to cover.
     * $1 job, $2 window, $3 owner, $4 epoch, $5 check the lease end, $6 key hashes, $7 reserved at,
     * $8 their sequence numbers (one per key, NULL elements for none), $9 shard.
     */
    reserveEffects: `
      WITH ${leaseHeld(9)},
      inserted AS (
        INSERT INTO ${schema}.effects (job_id, slot_window, key_hash, state, epoch, owner, reserved_at, expires_at,
          seq${shard ? ', shard' : ''})
        SELECT $1::text, $2::text, k.key_hash, 'RESERVED', $4::integer, $3::text, $7::timestamptz,
          (SELECT expires_at FROM lease), k.seq${shard ? ', $9::integer' : ''}
        FROM unnest($6::text[], $8::bigint[]) WITH ORDINALITY AS k(key_hash, seq, n)
        WHERE EXISTS (SELECT 1 FROM lease)
        ORDER BY k.n
        ON CONFLICT (job_id, slot_window, key_hash) DO NOTHING
        RETURNING key_hash
      )
      SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, ARRAY(SELECT key_hash FROM inserted) AS inserted`,

    /*
     * Timeline of replacing effect rows that were read, under the same lease check:
     *   a due retry: FAILED (epoch 1, owner a, attempts 2), retry_at passed by the caller's clock
     *     → RESERVED, epoch e, owner o, attempts still 2                   → reserved, attempt 3
     *   the opt-in re-run of an in-doubt effect: RESERVED (epoch 1, owner a)
     *     → RESERVED, epoch e, owner o                                      → reserved, rerun
     *   a row that changed since it was read (another retry won, it was marked done): no match
     * Each row is replaced only as it was read (state, epoch, owner, attempts), so of several
     * concurrent retries of one refusal exactly one wins; the caller reads the rest again. Only rows
     * its own shard wrote reach here (reserveOutcomeOfConflict answers another shard's `elsewhere`),
     * and a row still as read, owner token and all, is still that shard's. The provider's word on
     * the row was about the reservation replaced, so it goes with it, and so does its sequence
     * number: the new one is this run's. A reservation its epoch's done marks cover was performed:
     * the caller decided so from its claim's marks already, and the statement checks it against
     * the stored ones too, so no reading of them re-runs it.
     * $1 job, $2 window, $3 owner, $4 epoch, $5 check the lease end, $6 key hashes, and as read:
     * $7 their states, $8 epochs, $9 owners, $10 attempts; $11 reserved at (the caller's clock);
     * $12 their new sequence numbers (NULL elements for none); $13 shard.
     */
    replaceEffects: `
      WITH ${leaseHeld(13)},
      replaced AS (
        UPDATE ${schema}.effects AS e SET state = 'RESERVED', epoch = $4, owner = $3, reserved_at = $11::timestamptz,
          retry_at = NULL, reason = NULL, ${NO_PROVIDER_WORD}, seq = seen.seq
        FROM unnest($6::text[], $7::text[], $8::integer[], $9::text[], $10::integer[], $12::bigint[])
          AS seen(key_hash, state, epoch, owner, attempts, seq)
        WHERE EXISTS (SELECT 1 FROM lease)
          AND e.job_id = $1 AND e.slot_window = $2 AND e.key_hash = seen.key_hash
          AND e.state = seen.state AND e.epoch = seen.epoch AND e.owner = seen.owner
          AND e.attempts = seen.attempts AND ${notCovered(schema, 'e')}
        RETURNING e.key_hash
      )
      SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, ARRAY(SELECT key_hash FROM replaced) AS replaced`,
  } as const;
}

/** The statements of one kind of slot row (see slotRowStatements). */
export type SlotRowSql = ReturnType<typeof slotRowStatements>;

/** The SQL of one schema. Built once per backend; every statement is schema-qualified. */
export function sqlFor(schema: string) {
  assertSchemaName(schema);
  const s = escapeIdentifier(schema);
  const slots = `${s}.slots`;
  const effects = `${s}.effects`;
  const shardSlots = `${s}.shard_slots`;
  const sendRates = `${s}.send_rates`;
  const slotStates = Object.values(SlotState);
  // A shard is never itself split: SHARDED is a window's state only.
  const shardStates = slotStates.filter((state) => state !== SlotState.Sharded);
  const effectStates = Object.values(EffectState);

  return {
    // The window's own row (`slots`): the statements as every unsharded window has always used them.
    ...slotRowStatements(s, 'window'),
    /** The same statements on a shard's row (`shard_slots`): the shard is each one's last parameter. */
    shard: slotRowStatements(s, 'shard'),

    /** Waits (up to lock_timeout) for the claimer that holds the slot's advisory lock to commit. */
    waitForClaimLock: 'SELECT pg_advisory_xact_lock($1::bigint)',

    /*
     * Timeline of a window handed to its shards (its coordinator's release, after sending one message
     * per shard):
     *   coordinator (epoch e, RUNNING) → SHARDED, the split recorded, lease cleared      → ok
     *   a later claim of the window: no grant (SHARDED is not claimable)                 → sharded
     *   the coordinator after a takeover (epoch e + 1 sent the shards again): no row     → fenced
     * The shards already recorded as finished are kept: a window is SHARDED once per hand-over, and
     * an operator who gives it back clears them (see givenBack).
     * $1 job, $2 window, $3 owner, $4 epoch, $5 shards.
     */
    releaseSharded: `
      UPDATE ${slots} SET state = 'SHARDED', shards = $5::integer, lease_until = NULL,
        finished_shards = COALESCE(finished_shards, '{}')
      WHERE job_id = $1 AND slot_window = $2 AND owner = $3 AND epoch = $4 AND state = 'RUNNING'
      RETURNING state`,

    /*
     * Timeline of a sharded window's end:
     *   shard i ends (DONE, PARTIAL, STUCK, FAILED): add i to finished_shards if SHARDED  (a set:
     *     the same shard added again, by a retried message after a crash, changes nothing)
     *   the add that makes the set whole is followed by one finishSharded (below)
     *   a window no longer SHARDED (finished, or given back by an operator): no row → undefined
     * Adds to the set serialise on the row's lock, so of two shards ending at once the second sees
     * the first's shard in the set it returns.
     * $1 job, $2 window, $3 shard.
     */
    shardFinished: `
      UPDATE ${slots} SET finished_shards = ARRAY(
          SELECT DISTINCT f FROM unnest(array_append(COALESCE(finished_shards, '{}'), $3::integer)) AS f ORDER BY f)
      WHERE job_id = $1 AND slot_window = $2 AND state = 'SHARDED'
      RETURNING shards, finished_shards`,

    /*
     * Timeline of finishing a sharded window, by the shard whose end completed the set:
     *   SHARDED → DONE or PARTIAL (the summary tallied from the window's ledger, completed now), or
     *     STUCK (the reason naming the shard)                                              → ok
     *   every other caller (shards ending at once, a retried message): no longer SHARDED,
     *     no row                                                                           → finished
     * Racing callers queue on the row's lock and re-check SHARDED once it is theirs, so exactly one
     * matches.
     * $1 job, $2 window, $3 'DONE', 'PARTIAL' or 'STUCK', $4 summary (JSON) or NULL, $5 now,
     * $6 the reason (STUCK) or NULL.
     */
    finishSharded: `
      UPDATE ${slots} SET state = $3::text, summary = COALESCE($4::jsonb, summary),
        completed_at = CASE WHEN $4::jsonb IS NULL THEN completed_at ELSE ${now('$5')} END,
        last_error = COALESCE($6::text, last_error)
      WHERE job_id = $1 AND slot_window = $2 AND state = 'SHARDED'
      RETURNING state`,

    /**
     * The done marks of a window's slot rows, as text, by shard: its own row's (shard NULL) and its
     * shards' rows' among `$3` (NULL: every shard's). What reads an effect as it stands applies them
     * (effectiveInWindow). $1 job, $2 window, $3 shards or NULL.
     */
    readDoneMarks: `
      SELECT NULL::integer AS shard, done_marks::text AS done_marks FROM ${slots}
      WHERE job_id = $1 AND slot_window = $2 AND done_marks IS NOT NULL
      UNION ALL
      SELECT shard, done_marks::text FROM ${shardSlots}
      WHERE job_id = $1 AND slot_window = $2 AND done_marks IS NOT NULL
        AND ($3::integer[] IS NULL OR shard = ANY($3::integer[]))`,

    /** The effect rows of some keys. $1 job, $2 window, $3 key hashes. */
    readEffects: `
      SELECT ${EFFECT_COLUMNS} FROM ${effects}
      WHERE job_id = $1 AND slot_window = $2 AND key_hash = ANY($3::text[])`,

    /*
     * Marks are conditioned on the reservation being this claim's own, not on the lease: once the
     * effect has happened DONE is the truth, even from a holder that has since been fenced out.
     *   our reservation (RESERVED, epoch e, owner o)            → DONE
     *   no row: an operator cleared it after a release, while
     *     the holder was frozen mid-send                         → a DONE row of ours, so the
     *                                                              next run does not send it again
     *   any other row (another epoch's, FAILED, DONE)            → left as it is
     * $1 job, $2 window, $3 owner, $4 epoch, $5 key hashes, $6 shard or NULL.
     */
    markEffectsDone: `
      WITH marked AS (
        UPDATE ${effects} SET state = 'DONE', done_at = now()
        WHERE job_id = $1 AND slot_window = $2 AND key_hash = ANY($5::text[])
          AND owner = $3 AND epoch = $4 AND state = 'RESERVED'
      )
      INSERT INTO ${effects} (job_id, slot_window, key_hash, state, epoch, owner, reserved_at, done_at,
        expires_at, shard)
      SELECT $1::text, $2::text, k.key_hash, 'DONE', $4::integer, $3::text, now(), now(), w.expires_at,
        $6::integer
      FROM unnest($5::text[]) AS k(key_hash)
      JOIN ${slots} w ON w.job_id = $1 AND w.slot_window = $2
      WHERE NOT EXISTS (
        SELECT 1 FROM ${effects} e WHERE e.job_id = $1 AND e.slot_window = $2 AND e.key_hash = k.key_hash)
      ORDER BY k.key_hash
      ON CONFLICT (job_id, slot_window, key_hash) DO NOTHING`,

    /*
     * Timeline of a refusal: the effect was refused before it was performed.
     *   our reservation (RESERVED, epoch e, owner o) → FAILED, attempts n, retry_at (or none: for good)
     *   a reservation no longer ours (taken over), or our own write whose reply was lost: no row
     * Conditioned on the reservation, not the lease: a refusal is the truth whoever records it, as DONE is.
     * Only the reservation refused: its number, $9 (NULL: made without one), so a late copy of an
     * earlier refusal never lands on the run's later reservation of the key.
     * $1 job, $2 window, $3 owner, $4 epoch, $5 key, $6 attempts, $7 retry at or NULL, $8 reason, $9 seq or NULL.
     */
    recordEffectFailure: `
      UPDATE ${effects} SET state = 'FAILED', attempts = $6::integer, retry_at = $7::timestamptz, reason = $8::text
      WHERE job_id = $1 AND slot_window = $2 AND key_hash = $5 AND owner = $3 AND epoch = $4 AND state = 'RESERVED'
        AND seq IS NOT DISTINCT FROM $9::bigint`,

    /** Deletes our own reservation of an effect that certainly did not happen. $1 job, $2 window, $3 owner, $4 epoch, $5 key. */
    unreserveEffect: `
      DELETE FROM ${effects}
      WHERE job_id = $1 AND slot_window = $2 AND key_hash = $5 AND owner = $3 AND epoch = $4 AND state = 'RESERVED'`,

    /** One page of a window's effects, in key order after `$3`. $1 job, $2 window, $3 after, $4 limit. */
    listEffects: `
      SELECT ${EFFECT_COLUMNS} FROM ${effects}
      WHERE job_id = $1 AND slot_window = $2 AND key_hash > $3
      ORDER BY key_hash LIMIT $4`,

    /*
     * Timeline of a provider's word (an SES event about a message an effect sent):
     *   the word's epoch's reservation, RESERVED or FAILED, no word yet          → written
     *   a rejection on record, an acceptance arrives (Reject, later Send)        → replaced
     *   an acceptance on record, a rejection arrives                             → no row: kept
     *   the same word again (SES delivers events at least once)                  → no row
     *   DONE, another epoch's reservation (re-run since), or no row at all       → no row
     *   a reservation its epoch's done marks cover (DONE as it stands)           → no row
     * The adapter explains a miss by reading the row as it stands. No lease check: whoever records
     * the word holds no lease, and the word changes nothing a holder decides by (state, epoch,
     * owner, attempts). The marks are checked in the statement: a run's checkpoint that covers the
     * reservation commits before it (and the word is not written) or after (and the word was
     * written on a reservation still in doubt).
     * $1 job, $2 window, $3 key, $4 the word's epoch, $5 outcome, $6 event, $7 at, $8 message id or NULL.
     */
    recordProviderWord: `
      UPDATE ${effects} AS e SET provider_outcome = $5::text, provider_event = $6::text,
        provider_at = $7::timestamptz, provider_message_id = $8::text
      WHERE job_id = $1 AND slot_window = $2 AND key_hash = $3 AND epoch = $4 AND state <> 'DONE'
        AND (provider_outcome IS NULL OR ($5::text = 'accepted' AND provider_outcome = 'rejected'))
        AND ${notCovered(s, 'e')}
      RETURNING key_hash`,

    /*
     * Timeline of an in-doubt effect settled (by a later run of its window, or an operator's resolve):
     *   t0  the settler reads it: RESERVED, epoch 1, owner a (a died between send and mark)
     *   t1  this UPDATE, only if the row is still exactly that reservation → DONE (the provider
     *       accepted the message), or FAILED due at once (it did not: the window's retry pass sends it)
     *   a row re-run, marked or settled by someone else since t0: no row, and the caller is told
     *   a reservation its epoch's done marks cover: it was performed, not in doubt  → no row
     * No lease check: the settler may hold none (an operator), and the row it settles belongs to a
     * dead epoch, whose holder the condition fences as exactly as a lease would. Shard and word stay.
     * $1 job, $2 window, $3 key, $4 reservation epoch, $5 reservation owner.
     */
    settleInDoubtDone: `
      UPDATE ${effects} AS e SET state = 'DONE', done_at = now()
      WHERE job_id = $1 AND slot_window = $2 AND key_hash = $3
        AND state = 'RESERVED' AND epoch = $4 AND owner = $5 AND ${notCovered(s, 'e')}
      RETURNING key_hash`,

    /**
     * As settleInDoubtDone, to FAILED: $6 attempts (the reservation's + 1), $7 retry at (now). Never
     * a covered reservation: the retry would perform it a second time.
     */
    settleInDoubtRetry: `
      UPDATE ${effects} AS e SET state = 'FAILED', attempts = $6::integer, retry_at = $7::timestamptz,
        reason = 'not-accepted'
      WHERE job_id = $1 AND slot_window = $2 AND key_hash = $3
        AND state = 'RESERVED' AND epoch = $4 AND owner = $5 AND ${notCovered(s, 'e')}
      RETURNING key_hash`,

    /*
     * The operator's statements (PostgresOperatorStore). Each write is fenced on the epoch the
     * operator read ($3) and records what was done in operator_action ($5), for whoever reads the
     * row next. `$4` is the clock the lease end is judged by, as in the runtime's statements. Every
     * write that gives a slot back (see `givenBack`) takes the operator's new deadline when one is
     * given ($6 or $7, NULL to keep the window's), resets the failures and the runs without progress
     * and drops any retry wait; the ones that re-walk the window (reopen, re-drive) also drop its
     * checkpoint, its last run's counts and its completion time.
     */

    /*
     * Timeline of a forced release:
     *   t0  operator reads the slot: RUNNING, epoch 3, lease ended at t0 - 5 min (holder crashed)
     *   t1  UPDATE where epoch = 3 AND (FAILED, STUCK, or RUNNING with lease_until < t1)
     *       → RELEASED, given back (the checkpoint kept)
     *   t2  the next delivery claims it (RELEASED): epoch 4, resumes from the checkpoint, skips
     *       every effect done
     * A takeover between t0 and t1 made the epoch 4: no row matches and the live run is left alone.
     * With $6 (evenIfLeaseLive) the lease clause goes; the holder at epoch 3 is then fenced at its
     * next renewal, reservation or completion, all conditioned on its epoch and RUNNING. A STUCK
     * window past its deadline needs the new deadline ($7), or its next claim makes it STUCK again.
     * $1 job, $2 window, $3 expected epoch, $4 now, $5 action, $6 even if the lease is live,
     * $7 new deadline or NULL.
     */
    forceReleaseSlot: `
      UPDATE ${slots} SET ${givenBack('$4', '$5', '$7')}, ${SHARDS_HANDED_OUT_AGAIN}
      WHERE job_id = $1 AND slot_window = $2 AND epoch = $3
        AND (state IN ('FAILED', 'STUCK') OR (state = 'RUNNING' AND ($6::boolean OR lease_until < ${now('$4')})))
      RETURNING ${WINDOW_COLUMNS}, claimer_clock`,

    /*
     * Timeline of a reopen:
     *   t0  operator reads the slot: DONE (or PARTIAL), epoch 2
     *   t1  UPDATE where epoch = 2 AND state is DONE or PARTIAL → RELEASED, given back for a
     *       re-walk (no checkpoint, no completion time; the summary kept)
     *   t2  the next delivery claims it: epoch 3, walks the job from the start, skips every effect
     *       DONE, performs the ones cleared
     * $1 job, $2 window, $3 expected epoch, $4 now, $5 action, $6 new deadline or NULL.
     */
    reopenSlot: `
      UPDATE ${slots} SET ${givenBack('$4', '$5', '$6')}, ${REWALK}, ${SHARDS_HANDED_OUT_AGAIN}
      WHERE job_id = $1 AND slot_window = $2 AND epoch = $3 AND state IN ('DONE', 'PARTIAL')
      RETURNING ${WINDOW_COLUMNS}, claimer_clock`,

    /*
     * Timeline of a re-drive (one transaction, after lockSlotForOperator at t1):
     *   t2  deleteFailedEffects: the window's FAILED effects (or those named), as they are under
     *       the slot's lock, which every reservation and retry waits for
     *   t3  this UPDATE → RELEASED, given back for a re-walk, whatever the state the guard allowed
     *       (any but RUNNING); it always matches inside that transaction
     *   t4  a delivery claims it: epoch + 1, walks the job, skips what is done, leaves what is in
     *       doubt in doubt, performs the cleared effects (refused before they were performed: their
     *       first time)
     * $1 job, $2 window, $3 expected epoch, $4 now, $5 action, $6 new deadline or NULL.
     */
    redriveSlot: `
      UPDATE ${slots} SET ${givenBack('$4', '$5', '$6')}, ${REWALK}, ${SHARDS_HANDED_OUT_AGAIN}
      WHERE job_id = $1 AND slot_window = $2 AND epoch = $3
      RETURNING ${WINDOW_COLUMNS}, claimer_clock`,

    /**
     * Deletes a window's FAILED effects, every one or those of `$3` (NULL: all), returning them as
     * they were. Run under the operator's lock of the slot row. $1 job, $2 window, $3 key hashes or NULL.
     */
    deleteFailedEffects: `
      DELETE FROM ${effects}
      WHERE job_id = $1 AND slot_window = $2 AND state = 'FAILED'
        AND ($3::text[] IS NULL OR key_hash = ANY($3::text[]))
      RETURNING ${EFFECT_COLUMNS}`,

    /*
     * Timeline of the guard that starts resolving an effect or a re-drive (one transaction with the
     * writes below):
     *   t0  operator reads the slot (DONE, epoch 2) and the effect (RESERVED, epoch 1, owner o1)
     *   t1  this SELECT locks the slot row FOR UPDATE only if it is still at epoch 2 and no run holds
     *       it: under a live lease, or with $5 (a write that deletes effect records) RUNNING at all,
     *       since a holder past its lease may be frozen and its late done marks would cover what the
     *       write deletes (HolderRule). A claim (an upsert of this row) or a reservation (FOR SHARE
     *       of it) now waits for the operator's commit, so no run starts on the slot while the
     *       effect changes
     * $1 job, $2 window, $3 expected epoch, $4 now, $5 whether a holder past its lease refuses too.
     */
    lockSlotForOperator: `
      SELECT ${WINDOW_COLUMNS}, claimer_clock FROM ${slots}
      WHERE job_id = $1 AND slot_window = $2 AND epoch = $3
        AND NOT (state = 'RUNNING' AND ($5::boolean OR lease_until >= ${now('$4')}))
      FOR UPDATE`,

    /**
     * The slot row as it is now, with whether a run's lease is live by the clock of `$3`: what an
     * operator write that matched no row is explained with. $1 job, $2 window, $3 now.
     */
    readSlotForOperator: `
      SELECT ${WINDOW_COLUMNS}, claimer_clock,
        (state = 'RUNNING' AND lease_until >= ${now('$3')}) AS lease_live
      FROM ${slots} WHERE job_id = $1 AND slot_window = $2`,

    /*
     * The shards of a sharded window, as an operator's write on the window finds them (one
     * transaction, after lockSlotForOperator): each shard's row locked FOR UPDATE, in shard order,
     * with whether a run's lease on it is live by the clock of `$3`. A shard's claim (an upsert of
     * its row) or reservation (FOR SHARE of it) now waits for the operator's commit, as the window's
     * lock makes the window's own runs wait. $1 job, $2 window, $3 now.
     */
    lockShardsForOperator: `
      SELECT shard, ${SLOT_COLUMNS}, claimer_clock,
        (state = 'RUNNING' AND lease_until >= ${now('$3')}) AS lease_live
      FROM ${shardSlots} WHERE job_id = $1 AND slot_window = $2
      ORDER BY shard
      FOR UPDATE`,

    /*
     * Timeline of a forced release of a sharded window (with forceReleaseSlot, one transaction):
     *   t0  operator reads the window: STUCK, its last shard having found shard 2 STUCK
     *   t1  forceReleaseSlot → the window RELEASED, its finished shards forgotten
     *   t2  this UPDATE: every STUCK or FAILED shard → RELEASED, given back (its checkpoint kept,
     *       the operator's deadline); DONE and PARTIAL shards, and running ones, are left as they are
     *   t3  the window's next delivery: its coordinator sends every shard again; shard 2 resumes
     *       from its checkpoint at its next epoch, the others find themselves at their end and say so
     * $1 job, $2 window, $3 now, $4 action, $5 new deadline or NULL.
     */
    releaseShards: `
      UPDATE ${shardSlots} SET ${givenBack('$3', '$4', '$5')}
      WHERE job_id = $1 AND slot_window = $2 AND state IN ('FAILED', 'STUCK')
      RETURNING shard`,

    /*
     * Timeline of a sharded window given back to be walked again (reopen, re-drive, an effect
     * cleared on a finished window; one transaction, after lockShardsForOperator found no live lease):
     *   t2  this UPDATE: every shard → RELEASED, given back for a re-walk (no checkpoint, the
     *       operator's deadline), as the window's own row is
     *   t3  the window's next delivery: its coordinator sends every shard again; each walks its part
     *       from the start at its next epoch, skipping every effect done
     * A shard under a live lease is left alone: the lock before this found none, and this keeps it so.
     * $1 job, $2 window, $3 now, $4 action, $5 new deadline or NULL.
     */
    rewalkShards: `
      UPDATE ${shardSlots} SET ${givenBack('$3', '$4', '$5')}, ${REWALK}
      WHERE job_id = $1 AND slot_window = $2 AND NOT (state = 'RUNNING' AND lease_until >= ${now('$3')})
      RETURNING shard`,

    /** Some effect rows, locked until the operator's transaction ends. $1 job, $2 window, $3 key hashes. */
    lockEffects: `
      SELECT ${EFFECT_COLUMNS}, operator_action FROM ${effects}
      WHERE job_id = $1 AND slot_window = $2 AND key_hash = ANY($3::text[])
      FOR UPDATE`,

    /*
     * Timeline of the effect write (t2, after lockSlotForOperator): only that exact reservation, as
     * the operator saw it (RESERVED, epoch 1, owner o1), becomes DONE. A fenced holder's own mark
     * landing first makes it DONE already: no row, and the operator is told.
     * $1 job, $2 window, $3 key hash, $4 reservation epoch, $5 reservation owner, $6 action.
     */
    markEffectDoneByOperator: `
      UPDATE ${effects} SET state = 'DONE', done_at = now(), operator_action = $6
      WHERE job_id = $1 AND slot_window = $2 AND key_hash = $3
        AND state = 'RESERVED' AND epoch = $4 AND owner = $5
      RETURNING key_hash`,

    /*
     * Timeline of clearing an effect (t2): the exact reservation is deleted, so the next run's
     * reservation inserts it afresh and performs it; then (t3) a DONE slot is reopened with
     * reopenSlot, fenced on the same epoch, in the same transaction.
     * $1 job, $2 window, $3 key hash, $4 reservation epoch, $5 reservation owner.
     */
    clearEffect: `
      DELETE FROM ${effects}
      WHERE job_id = $1 AND slot_window = $2 AND key_hash = $3
        AND state = 'RESERVED' AND epoch = $4 AND owner = $5
      RETURNING key_hash`,

    /*
     * Timeline of the slot's note after an effect is resolved (t3, when the slot is not reopened):
     * fenced on the epoch the guard locked, so it always matches inside that transaction. An effect
     * marked done on a finished window also moves from in doubt to done in its summary ($5).
     * $1 job, $2 window, $3 expected epoch, $4 action, $5 the summary counted again (JSON) or NULL.
     */
    noteOperatorAction: `
      UPDATE ${slots} SET operator_action = $4, summary = COALESCE($5::jsonb, summary)
      WHERE job_id = $1 AND slot_window = $2 AND epoch = $3
      RETURNING epoch`,

    /*
     * Timeline of a send-rate reservation (PostgresRateLimitStore): one upsert of the job's row,
     * which the row lock serialises against every other worker's.
     *   first ever:  no row → INSERT next_at = now + notBefore + span              → start = now + notBefore
     *   busy:        next_at ≥ now + notBefore → next_at = next_at + span          → start = old next_at
     *   quiet:       next_at < now + notBefore → next_at = now + notBefore + span  → start = now + notBefore
     * `now` is read once: the caller's clock ($2) or, when NULL, the database's, which every worker
     * then shares; it is returned so the caller can map the start onto its own clock.
     * $1 job, $2 caller's clock (epoch ms, fractions kept) or NULL, $3 not-before ms (relative to
     * now), $4 span ms.
     */
    reserveSendRate: `
      WITH t AS (SELECT COALESCE(to_timestamp($2::double precision / 1000), clock_timestamp()) AS now)
      INSERT INTO ${sendRates} AS r (job_id, next_at, updated_at)
      SELECT $1::text, t.now + ($3::double precision + $4::double precision) * interval '1 millisecond', t.now
      FROM t
      ON CONFLICT (job_id) DO UPDATE SET
        next_at = GREATEST(r.next_at, EXCLUDED.updated_at + $3::double precision * interval '1 millisecond')
          + $4::double precision * interval '1 millisecond',
        updated_at = EXCLUDED.updated_at
      RETURNING (extract(epoch FROM r.next_at) * 1000 - $4::double precision)::double precision AS start_ms,
        (extract(epoch FROM r.updated_at) * 1000)::double precision AS now_ms`,

    /** Deletes up to $1 expired slot rows (retention passed); returns how many as `n`. */
    purgeSlots: `
      WITH doomed AS (SELECT ctid FROM ${slots} WHERE expires_at < now() LIMIT $1),
      deleted AS (DELETE FROM ${slots} WHERE ctid IN (SELECT ctid FROM doomed) RETURNING 1)
      SELECT count(*)::integer AS n FROM deleted`,

    /** Deletes up to $1 expired shard rows (their window's retention passed); returns how many as `n`. */
    purgeShardSlots: `
      WITH doomed AS (SELECT ctid FROM ${shardSlots} WHERE expires_at < now() LIMIT $1),
      deleted AS (DELETE FROM ${shardSlots} WHERE ctid IN (SELECT ctid FROM doomed) RETURNING 1)
      SELECT count(*)::integer AS n FROM deleted`,

    /** Deletes up to $1 expired effect rows; returns how many as `n`. */
    purgeEffects: `
      WITH doomed AS (SELECT ctid FROM ${effects} WHERE expires_at < now() LIMIT $1),
      deleted AS (DELETE FROM ${effects} WHERE ctid IN (SELECT ctid FROM doomed) RETURNING 1)
      SELECT count(*)::integer AS n FROM deleted`,

    /**
     * The migration to SCHEMA_VERSION, idempotent: every object is created (or column added) only
     * if missing, so a second run (or a second replica running it at the same moment, serialised by
     * MIGRATION_LOCK_KEY) changes nothing, and a schema of an older version is brought up to date.
     * Run inside one transaction; the last statement returns a row only when the version is new.
     */
    migration: [
      `SELECT pg_advisory_xact_lock(${MIGRATION_LOCK_KEY})`,
      `CREATE SCHEMA IF NOT EXISTS ${s}`,
      `CREATE TABLE IF NOT EXISTS ${slots} (
        job_id          text        NOT NULL ${JOB_ID_CHECK},
        slot_window     text        NOT NULL ${WINDOW_CHECK},
        state           text        NOT NULL CHECK (${stateCheck(slotStates)}),
        ${LEASE_COLUMNS},
        PRIMARY KEY (job_id, slot_window)
      )`,
      `CREATE TABLE IF NOT EXISTS ${effects} (
        job_id       text        NOT NULL,
        slot_window  text        NOT NULL,
        key_hash     text        COLLATE "C" NOT NULL CHECK (length(key_hash) BETWEEN 1 AND 512),
        state        text        NOT NULL CHECK (${stateCheck(effectStates)}),
        epoch        integer     NOT NULL,
        owner        text        NOT NULL,
        reserved_at  timestamptz NOT NULL,
        done_at      timestamptz,
        expires_at   timestamptz NOT NULL,
        PRIMARY KEY (job_id, slot_window, key_hash)
      )`,
      `CREATE INDEX IF NOT EXISTS slots_expires_at ON ${slots} (expires_at)`,
      `CREATE INDEX IF NOT EXISTS effects_expires_at ON ${effects} (expires_at)`,
      // Version 2. Added by ALTER on every schema, new or not, so a version-1 schema brought up to
      // date and a new one end up identical. A column with a constant default is a catalog change
      // (no table rewrite); ALTER still takes a brief ACCESS EXCLUSIVE lock, bounded by lock_timeout.
      `ALTER TABLE ${slots} ADD COLUMN IF NOT EXISTS backfilled boolean NOT NULL DEFAULT false`,
      `ALTER TABLE ${slots} ADD COLUMN IF NOT EXISTS operator_action text`,
      `ALTER TABLE ${effects} ADD COLUMN IF NOT EXISTS operator_action text`,
      // Version 3, the same way: columns by ALTER on every schema (all nullable or with a constant
      // default, so catalog changes); the state CHECKs of version 1 and 2 tables are widened below.
      `ALTER TABLE ${slots} ADD COLUMN IF NOT EXISTS deadline timestamptz`,
      `ALTER TABLE ${slots} ADD COLUMN IF NOT EXISTS checkpoint jsonb`,
      `ALTER TABLE ${slots} ADD COLUMN IF NOT EXISTS progress jsonb`,
      `ALTER TABLE ${slots} ADD COLUMN IF NOT EXISTS runs_without_progress integer NOT NULL DEFAULT 0`,
      `ALTER TABLE ${slots} ADD COLUMN IF NOT EXISTS resume_after timestamptz`,
      `ALTER TABLE ${slots} ADD COLUMN IF NOT EXISTS key_version text`,
      `ALTER TABLE ${effects} ADD COLUMN IF NOT EXISTS attempts integer NOT NULL DEFAULT 0`,
      `ALTER TABLE ${effects} ADD COLUMN IF NOT EXISTS retry_at timestamptz`,
      `ALTER TABLE ${effects} ADD COLUMN IF NOT EXISTS reason text`,
      // Version 4, the same way: a window's split on slots and the shard that wrote an effect (both
      // nullable: catalog changes), and a table of its own for the shards' rows, so that neither
      // existing table's primary key changes: no index rebuilt, no table locked for longer than the
      // ALTERs, and a version-3 build still running during a rolling deploy claims windows exactly as
      // before (its ON CONFLICT (job_id, slot_window) still names slots' key).
      `ALTER TABLE ${slots} ADD COLUMN IF NOT EXISTS shards integer`,
      `ALTER TABLE ${slots} ADD COLUMN IF NOT EXISTS finished_shards integer[]`,
      `ALTER TABLE ${effects} ADD COLUMN IF NOT EXISTS shard integer`,
      // Version 4 too: what the provider said of the message an effect's reservation sent (all
      // nullable: catalog changes). An inline CHECK is added only with its column, so a schema
      // upgraded and a new one carry the same constraint (effects_provider_outcome_check).
      `ALTER TABLE ${effects} ADD COLUMN IF NOT EXISTS provider_outcome text
        CHECK (provider_outcome IN ('accepted', 'rejected'))`,
      `ALTER TABLE ${effects} ADD COLUMN IF NOT EXISTS provider_event text`,
      `ALTER TABLE ${effects} ADD COLUMN IF NOT EXISTS provider_at timestamptz`,
      `ALTER TABLE ${effects} ADD COLUMN IF NOT EXISTS provider_message_id text`,
      `CREATE TABLE IF NOT EXISTS ${shardSlots} (
        job_id          text        NOT NULL ${JOB_ID_CHECK},
        slot_window     text        NOT NULL ${WINDOW_CHECK},
        shard           integer     NOT NULL CHECK (shard >= 0),
        state           text        NOT NULL CHECK (${stateCheck(shardStates)}),
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
      `CREATE INDEX IF NOT EXISTS shard_slots_expires_at ON ${shardSlots} (expires_at)`,
      // Version 5, the same way: done marks on both kinds of slot row, and the sequence number they
      // cover on effects (all nullable: catalog changes, no rewrite). Rows written before read as
      // they did: no marks, and reservations without a number, which no marks cover.
      `ALTER TABLE ${slots} ADD COLUMN IF NOT EXISTS done_marks jsonb`,
      `ALTER TABLE ${shardSlots} ADD COLUMN IF NOT EXISTS done_marks jsonb`,
      `ALTER TABLE ${effects} ADD COLUMN IF NOT EXISTS seq bigint`,
      // The state CHECKs of older tables widened (versions 3 and 4: slots gains SHARDED here).
      widenStateCheck(slots, 'slots_state_check', slotStates),
      widenStateCheck(effects, 'effects_state_check', effectStates),
      // Version 4: one row per job, the instant its next unreserved send is due.
      `CREATE TABLE IF NOT EXISTS ${sendRates} (
        job_id      text        PRIMARY KEY CHECK (job_id ~ '^[a-z][a-z0-9-]{0,62}$'),
        next_at     timestamptz NOT NULL,
        updated_at  timestamptz NOT NULL
      )`,
      `CREATE TABLE IF NOT EXISTS ${s}.schema_version (
        version     integer     PRIMARY KEY,
        applied_at  timestamptz NOT NULL DEFAULT now()
      )`,
      `INSERT INTO ${s}.schema_version (version) VALUES (${SCHEMA_VERSION}) ON CONFLICT DO NOTHING RETURNING version`,
    ],
  } as const;
}

/** The statements of one schema. */
export type SlotguardSql = ReturnType<typeof sqlFor>;

/** Ends a transaction, keeping its writes. */
export const COMMIT = 'COMMIT';
/** Ends a transaction, discarding its writes. */
export const ROLLBACK = 'ROLLBACK';

/** The limits a connection actually runs with, to check a pool whose connections should carry them. */
export const READ_SESSION_TIMEOUTS = `SELECT current_setting('statement_timeout') AS "statementMs",
  current_setting('lock_timeout') AS "lockMs",
  current_setting('idle_in_transaction_session_timeout') AS "idleInTransactionMs"`;

/** Session limits applied with SET LOCAL at the start of a transaction. */
export interface TransactionTimeouts {
  readonly statementMs: number;
  readonly lockMs: number;
  readonly idleInTransactionMs: number;
}

/**
 * `BEGIN`, optionally followed by SET LOCAL of the timeouts, sent as one simple-protocol message
 * (one round trip). SET LOCAL lasts until the transaction ends, so no setting outlives it on a
 * connection that a proxy hands to someone else next. SET takes no bind parameters: the values are
 * whole numbers validated by the backend's constructor, and are checked again here.
 */
export function beginTransaction(timeouts?: TransactionTimeouts): string {
  if (!timeouts) return 'BEGIN';
  const ms = (value: number) => {
    if (!Number.isSafeInteger(value) || value < 0) {
      throw new ConfigurationError('timeouts', `timeout ${value} is not a whole number of milliseconds`);
    }
    return String(value);
  };
  return (
    `BEGIN; SET LOCAL statement_timeout = ${ms(timeouts.statementMs)}; ` +
    `SET LOCAL lock_timeout = ${ms(timeouts.lockMs)}; ` +
    `SET LOCAL idle_in_transaction_session_timeout = ${ms(timeouts.idleInTransactionMs)}`
  );
}
