import { usePostgres } from '../helpers/postgres.js';
import { describeOutsideReviewCases } from './outside-review-cases.js';

/*
 * The outside review's cases that concern each backend (issue 12), on embedded Postgres with its
 * production settings: the database's lease clock and the default timeouts.
 */
const postgres = usePostgres();

describeOutsideReviewCases('Postgres', async () => postgres.backend(await postgres.freshSchema()));
