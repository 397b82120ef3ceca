import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runIncidentDemo } from '../../local/incident-demo.js';

let outputDir: string;
beforeAll(async () => {
  outputDir = await mkdtemp(join(tmpdir(), 'slotguard-demo-'));
});
afterAll(() => rm(outputDir, { recursive: true, force: true }));

function collector() {
  const chunks: string[] = [];
  return { out: { write: (text: string) => chunks.push(text) !== 0 }, text: () => chunks.join('') };
}

describe('npm start: the incident replay, counted by the SMTP server', () => {
  it('sends each of 300 customers one email through slotguard, and 3 each without it', async () => {
    const { out, text } = collector();
    const result = await runIncidentDemo({ replicas: 3, recipients: 300, concurrency: 16, outputDir, out });

    expect(result.unguarded).toMatchObject({
      fires: 3,
      delivered: 900,
      recipientsReached: 300,
      duplicates: 600,
    });
    expect(result.guarded).toMatchObject({
      fires: 3,
      claims: 1,
      delivered: 300,
      recipientsReached: 300,
      duplicates: 0,
      inDoubt: 0,
    });
    expect(text()).toMatch(/emails delivered\s+900\s+300/);
    expect(text()).toContain('300 customers, 3 replicas: unguarded sent 900, slotguard sent 300.');
  });

  it('prints the window as slots and logs spell it (…:00Z), not as toISOString does (…:00.000Z)', async () => {
    const { out, text } = collector();
    const ownDir = await mkdtemp(join(outputDir, 'window-'));
    await runIncidentDemo({ replicas: 2, recipients: 10, concurrency: 4, outputDir: ownDir, out });

    const printed = /fire the weekly report for window (\S+), /.exec(text())?.[1];
    expect(printed).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:00Z$/);
    expect(text()).not.toContain('.000Z');
    const logged = (await readFile(join(ownDir, 'last-run.log.jsonl'), 'utf8'))
      .split('\n')
      .filter((line) => line.length > 0)
      .map((line) => (JSON.parse(line) as { window?: string }).window);
    // Claimed, stood down, completed: every line names the window, spelled as printed.
    expect(logged.length).toBeGreaterThanOrEqual(3);
    expect(new Set(logged)).toEqual(new Set([printed]));
  });

  it('still delivers exactly one email per customer with duplicates, a retry, a crash and a pause injected', async () => {
    const { out, text } = collector();
    const result = await runIncidentDemo({
      replicas: 3,
      recipients: 300,
      concurrency: 8,
      outputDir,
      out,
      faults: ['duplicate', 'retry', 'crash', 'pause'],
      seed: 42,
      leaseSeconds: 2,
    });

    expect(result.faults).toHaveLength(2);
    expect(result.faults[0]).toMatch(/crashed at effect/);
    expect(result.faults[1]).toMatch(/froze at effect/);
    expect(result.guarded).toMatchObject({ delivered: 300, recipientsReached: 300, duplicates: 0 });
    // The crash and the pause leave effects in doubt; the demo looks each up in the SMTP log.
    const inDoubt = result.guarded.inDoubt ?? 0;
    expect(inDoubt).toBeGreaterThan(0);
    expect(result.resolution).toMatchObject({ inDoubt, unresolved: 0 });
    expect(result.resolution!.confirmed + result.resolution!.cleared).toBe(inDoubt);
    expect(result.unguarded.delivered).toBe(900);
    expect(text()).toMatch(/In doubt after the run: \d+\. Looked up in the SMTP server's log/);
  });

  it('runs the slotguard side on Postgres with --backend postgres', async () => {
    const { out, text } = collector();
    const result = await runIncidentDemo({
      replicas: 3,
      recipients: 100,
      concurrency: 8,
      outputDir,
      out,
      backend: 'postgres',
      ...(process.env.DATABASE_URL ? { databaseUrl: process.env.DATABASE_URL } : {}),
    });
    expect(result.guarded).toMatchObject({ claims: 1, delivered: 100, duplicates: 0, inDoubt: 0 });
    expect(text()).toMatch(/slotguard on (embedded )?PostgreSQL/);
  });
});
