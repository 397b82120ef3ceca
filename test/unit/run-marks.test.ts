import { describe, expect, it } from 'vitest';
import { RunMarks } from '../../shared/effects/run-marks.js';
import { coveredByMarks } from '../../shared/slot/done-marks.js';
import { MAX_OPEN_MARKS } from '../../shared/slot/ports.js';

const reservation = (seq: number) =>
  ({ keyHash: `k${seq}`, state: 'RESERVED', epoch: 3, owner: 'o', attempts: 0, seq }) as const;

describe("a run's done marks", () => {
  it('covers what was performed, leaves open what is in flight or in doubt, and passes what was closed', () => {
    const marks = new RunMarks();
    const seqs = Array.from({ length: 6 }, () => marks.take());
    marks.performed(0, 'k0');
    marks.closed(1); // refused, recorded FAILED on its own
    marks.inDoubt(2); // the send threw: it may have happened
    marks.performed(4, 'k4');
    // 3 and 5 are still in flight.
    const { marks: written, newlyDone, covered } = marks.snapshot();
    expect(seqs).toEqual([0, 1, 2, 3, 4, 5]);
    expect(written).toEqual({ below: 6, open: [2, 3, 5] });
    expect(newlyDone).toEqual(['k0', 'k4']);
    expect(covered).toBe(2);
    const done = seqs.filter((seq) => coveredByMarks(reservation(seq), { '3': written }));
    expect(done).toEqual([0, 1, 4]);
  });

  it('hands each performed effect to one snapshot only, and keeps an in-doubt number open for good', () => {
    const marks = new RunMarks();
    marks.take();
    marks.take();
    marks.performed(0, 'k0');
    marks.inDoubt(1);
    expect(marks.snapshot().newlyDone).toEqual(['k0']);
    marks.performed(marks.take(), 'k2');
    const second = marks.snapshot();
    expect(second).toEqual({ marks: { below: 3, open: [1] }, newlyDone: ['k2'], covered: 2 });
    expect(marks.uncovered).toBe(0);
  });

  it(`lists at most ${MAX_OPEN_MARKS} open numbers: past them the marks stop short, and cover nothing unsure`, () => {
    const marks = new RunMarks();
    const total = 2 * MAX_OPEN_MARKS + 10;
    for (let i = 0; i < total; i++) marks.take();
    // Every even number is in doubt; every odd one performed.
    for (let seq = 0; seq < total; seq++) {
      if (seq % 2 === 0) marks.inDoubt(seq);
      else marks.performed(seq, `k${seq}`);
    }
    const { marks: written, newlyDone } = marks.snapshot();
    expect(written.open).toHaveLength(MAX_OPEN_MARKS);
    expect(written.below).toBe(2 * MAX_OPEN_MARKS);
    expect(newlyDone).toHaveLength(MAX_OPEN_MARKS);
    for (let seq = 0; seq < total; seq++) {
      expect(coveredByMarks(reservation(seq), { '3': written }), `seq ${seq}`).toBe(
        seq % 2 === 1 && seq < 2 * MAX_OPEN_MARKS,
      );
    }
    // The performed ones past the stop wait for a later snapshot.
    expect(marks.uncovered).toBe(5);
  });

  it('covers nothing of another epoch, of a record without a number, or of a record not RESERVED', () => {
    const written = { '3': { below: 10, open: [] } };
    expect(coveredByMarks({ ...reservation(1), epoch: 4 }, written)).toBe(false);
    const { seq: _seq, ...unnumbered } = reservation(1);
    expect(coveredByMarks(unnumbered, written)).toBe(false);
    expect(coveredByMarks({ ...reservation(1), state: 'FAILED' }, written)).toBe(false);
    expect(coveredByMarks(reservation(1), undefined)).toBe(false);
    expect(coveredByMarks(reservation(10), written)).toBe(false);
  });
});
