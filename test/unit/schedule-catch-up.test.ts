import { describe, expect, it } from 'vitest';
import { ConfigurationError } from '../../shared/errors.js';
import { planCatchUp, resolveCatchUpPolicy } from '../../shared/schedule/catch-up.js';

const NOW = Date.parse('2026-11-30T08:05:00Z');
/** Seven 15-minute windows missed, 06:30 to 08:00. */
const MISSED = ['06:30', '06:45', '07:00', '07:15', '07:30', '07:45', '08:00'].map(
  (time) => new Date(`2026-11-30T${time}:00Z`),
);
const times = (dates: readonly Date[]) => dates.map((d) => d.toISOString().slice(11, 16));

describe('planCatchUp', () => {
  it('runs nothing under skip and says each window was skipped by the policy', () => {
    const plan = planCatchUp(MISSED, resolveCatchUpPolicy({ mode: 'skip' }, 'job'), NOW);
    expect(plan.run).toEqual([]);
    expect(plan.skipped.map((s) => s.reason)).toEqual(Array(7).fill('policy-skip'));
  });

  it('runs only the latest missed window under once, the others superseded', () => {
    const plan = planCatchUp(MISSED, resolveCatchUpPolicy({ mode: 'once' }, 'job'), NOW);
    expect(times(plan.run)).toEqual(['08:00']);
    expect(plan.skipped.map((s) => s.reason)).toEqual(Array(6).fill('superseded'));
  });

  it('runs every missed window oldest first under all, but none older than the maximum lateness', () => {
    const plan = planCatchUp(
      [...MISSED].reverse(),
      resolveCatchUpPolicy({ mode: 'all', maxLatenessMinutes: 60 }, 'job'),
      NOW,
    );
    expect(times(plan.run)).toEqual(['07:15', '07:30', '07:45', '08:00']);
    expect(plan.skipped.map((s) => [s.window.toISOString().slice(11, 16), s.reason])).toEqual([
      ['06:30', 'too-late'],
      ['06:45', 'too-late'],
      ['07:00', 'too-late'],
    ]);
  });

  it('runs nothing under once when even the latest missed window is past the maximum lateness', () => {
    const plan = planCatchUp(
      MISSED,
      resolveCatchUpPolicy({ mode: 'once', maxLatenessMinutes: 1 }, 'job'),
      NOW,
    );
    expect(plan.run).toEqual([]);
    expect(new Set(plan.skipped.map((s) => s.reason))).toEqual(new Set(['too-late']));
  });

  it('defaults to once within a day', () => {
    expect(resolveCatchUpPolicy(undefined, 'job')).toEqual({ mode: 'once', maxLatenessMinutes: 1440 });
  });

  it('refuses an unknown mode or a lateness that is not a positive number, naming the job and the value', () => {
    expect(() => resolveCatchUpPolicy({ mode: 'sometimes' as 'once' }, 'weekly-report')).toThrow(
      ConfigurationError,
    );
    expect(() => resolveCatchUpPolicy({ mode: 'sometimes' as 'once' }, 'weekly-report')).toThrow(
      /catchUp.mode of job 'weekly-report' is "sometimes"; use 'skip', 'once' or 'all'/,
    );
    expect(() => resolveCatchUpPolicy({ mode: 'all', maxLatenessMinutes: 0 }, 'weekly-report')).toThrow(
      /maxLatenessMinutes of job 'weekly-report' is 0/,
    );
  });
});
