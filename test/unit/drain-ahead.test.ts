import { describe, expect, it } from 'vitest';
import { drainAhead } from '../../shared/effects/concurrent-drain.js';

/** A promise the test settles by hand: time is never slept. */
function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

const flush = async () => {
  for (let i = 0; i < 20; i++) await Promise.resolve();
};

describe('draining with one item prepared ahead per worker', () => {
  it("prepares a worker's next item while its current one is finished, in the order items are pulled", async () => {
    const events: string[] = [];
    const finishes = new Map<number, ReturnType<typeof deferred>>();
    const done = drainAhead([0, 1, 2, 3], 1, {
      prepare: async (item) => {
        events.push(`prepare ${item}`);
        return item;
      },
      finish: (item) => {
        events.push(`finish ${item}`);
        const gate = deferred();
        finishes.set(item, gate);
        return gate.promise;
      },
    });
    await flush();
    // Item 0 is being finished and item 1 is already prepared; item 2 waits for a free hand.
    expect(events).toEqual(['prepare 0', 'finish 0', 'prepare 1']);
    finishes.get(0)?.resolve();
    await flush();
    expect(events.slice(3)).toEqual(['finish 1', 'prepare 2']);
    for (const item of [1, 2, 3]) {
      finishes.get(item)?.resolve();
      await flush();
    }
    await done;
    expect(events.filter((e) => e.startsWith('finish'))).toEqual([
      'finish 0',
      'finish 1',
      'finish 2',
      'finish 3',
    ]);
  });

  it('pulls nothing once told to stop, but finishes every item it had prepared', async () => {
    let stop = false;
    const prepared: number[] = [];
    const finished: number[] = [];
    await drainAhead(
      Array.from({ length: 100 }, (_, i) => i),
      3,
      {
        prepare: async (item) => {
          prepared.push(item);
          return item;
        },
        finish: async (item) => {
          finished.push(item);
          if (finished.length === 5) stop = true;
        },
      },
      () => stop,
    );
    expect(finished.sort((a, b) => a - b)).toEqual(prepared.sort((a, b) => a - b));
    // Each of the 3 workers holds at most one prepared item when the stop comes.
    expect(prepared.length).toBeLessThanOrEqual(5 + 3);
    expect(prepared.length).toBeGreaterThanOrEqual(5);
  });

  it('rethrows the first failure once every prepared item is finished, and takes no more', async () => {
    const finished: number[] = [];
    const run = drainAhead([0, 1, 2, 3, 4, 5], 2, {
      prepare: async (item) => {
        if (item === 3) throw new Error('the store refused item 3');
        return item;
      },
      finish: async (item) => {
        finished.push(item);
      },
    });
    await expect(run).rejects.toThrow('the store refused item 3');
    expect(finished).not.toContain(3);
    expect(finished).not.toContain(5);
    expect(finished.length).toBeLessThanOrEqual(4);
  });
});
