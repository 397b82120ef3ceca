import { describe, expect, it } from 'vitest';
import { RunMarks } from '../../shared/effects/run-marks.js';
import { StoreError } from '../../shared/errors.js';
import { Checkpointer } from '../../shared/job/checkpointer.js';
import type { Claim, ClaimStore, DoneMarks, FinishOutcome } from '../../shared/slot/ports.js';
import { runSummary } from '../contract/backend-contract.js';
import { ManualClock } from '../helpers/manual-clock.js';

const claim: Claim = {
  slot: { jobId: 'job', window: '2026-11-30T06:00:00Z' },
  owner: 'me',
  epoch: 2,
  leaseEndsAt: 0,
  via: 'new',
  window: { deadline: 0, runsWithoutProgress: 0, doneMarks: { '1': { below: 7, open: [3] } } },
};
const progress = () => runSummary(2, 0);

/** A claim store whose checkpoint answers, in turn, what `answers` say; every other call is unused. */
function checkpointStore(answers: (FinishOutcome | 'store-error')[]) {
  const written: (DoneMarks | undefined)[] = [];
  const store = {
    checkpoint: async (_claim: Claim, _checkpoint: unknown, _progress: unknown, doneMarks?: DoneMarks) => {
      const answer = answers.shift() ?? { kind: 'ok' };
      if (answer === 'store-error') throw new StoreError('checkpoint', 'the table did not answer');
      written.push(doneMarks);
      return answer;
    },
  } as unknown as ClaimStore;
  return { store, written };
}

function checkpointer(store: ClaimStore, marks: RunMarks) {
  const markedEach: string[][] = [];
  const fenced: string[] = [];
  const failures: number[] = [];
  const keeper = new Checkpointer({
    store,
    claim,
    clock: new ManualClock(0),
    marks,
    progress,
    onFenced: (message) => fenced.push(message),
    markEach: async (keyHashes) => {
      markedEach.push([...keyHashes]);
    },
    onWriteFailed: (_error, unrecorded) => failures.push(unrecorded),
    everyPerformed: 2,
  });
  return { keeper, markedEach, fenced, failures };
}

describe('the checkpointer writes done marks', () => {
  it("writes every earlier epoch's marks with its own, every 2 performed effects and when stopped", async () => {
    const { store, written } = checkpointStore([]);
    const marks = new RunMarks();
    const { keeper } = checkpointer(store, marks);
    for (let i = 0; i < 3; i++) {
      marks.performed(marks.take(), `k${i}`);
      keeper.performed();
    }
    await keeper.stop();
    expect(written).toEqual([
      { '1': { below: 7, open: [3] }, '2': { below: 2, open: [] } },
      { '1': { below: 7, open: [3] }, '2': { below: 3, open: [] } },
    ]);
  });

  it('marks one by one, once fenced, every performed effect no write put on record: those of a failed write too', async () => {
    const { store } = checkpointStore(['store-error', { kind: 'fenced', epoch: 3 }]);
    const marks = new RunMarks();
    const { keeper, markedEach, fenced, failures } = checkpointer(store, marks);
    marks.performed(marks.take(), 'k0');
    marks.performed(marks.take(), 'k1');
    keeper.performed();
    keeper.performed(); // the first write: the store fails it
    marks.performed(marks.take(), 'k2');
    keeper.performed();
    await keeper.stop(); // the second write: fenced by epoch 3
    // When the failure is heard, all three performed effects are off the record.
    expect(failures).toEqual([3]);
    expect(fenced).toHaveLength(1);
    expect(markedEach).toEqual([['k0', 'k1', 'k2']]);
  });
});
