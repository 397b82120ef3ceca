import { escapeIdentifier } from 'pg';
import { usePostgres } from '../helpers/postgres.js';
import { describeOutsideReviewCases, describeWindowSpellingCase } from './outside-review-cases.js';

/*
 * The outside review's cases that concern each backend (issue 12), on embedded Postgres with its
 * production settings: the database's lease clock and the default timeouts.
 */
const postgres = usePostgres();

describeOutsideReviewCases('Postgres', async () => postgres.backend(await postgres.freshSchema()));

describeWindowSpellingCase('Postgres', async () => {
  const schema = await postgres.freshSchema();
  return {
    backend: postgres.backend(schema),
    async stored() {
      const [row] = await postgres.sql<{ slots: number; effects: number }>(
        `SELECT (SELECT count(*)::integer FROM ${escapeIdentifier(schema)}.slots) AS slots,
                (SELECT count(*)::integer FROM ${escapeIdentifier(schema)}.effects) AS effects`,
      );
      return { slots: row?.slots ?? 0, effects: row?.effects ?? 0 };
    },
  };
});
