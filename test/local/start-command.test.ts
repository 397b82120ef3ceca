import { describe, expect, it } from 'vitest';
import { parseStartArgs, runStart } from '../../local/start-command.js';

function collector() {
  const chunks: string[] = [];
  return { out: { write: (text: string) => chunks.push(text) !== 0 }, text: () => chunks.join('') };
}

async function start(argv: string[]) {
  const stdout = collector();
  const stderr = collector();
  const code = await runStart(argv, { stdout: stdout.out, stderr: stderr.out, env: {} });
  return { code, out: stdout.text(), err: stderr.text() };
}

describe('npm start flags', () => {
  it.each([
    [['--send-rate', '0'], '--send-rate is "0"; give emails per second, a number above 0 such as 500'],
    [['--send-rate', 'fast'], '--send-rate is "fast"; give emails per second'],
    [['--send-rate', ''], '--send-rate is ""; give emails per second'],
    [['--lambda-timeout', '0'], '--lambda-timeout is "0"; give whole seconds from 1 to 900'],
    [['--lambda-timeout', '901'], '--lambda-timeout is "901"; give whole seconds from 1 to 900'],
    [['--lambda-timeout', '2.5'], '--lambda-timeout is "2.5"; give whole seconds from 1 to 900'],
    [['--json=yes'], "Option '--json' does not take an argument"],
    [['serve', '--json'], "--json is the demo's summary line; serve runs until stopped"],
    [['--recipients', '0'], '--recipients is "0"; give a whole number of at least 1 (default 12400)'],
    [['--shards', '0'], '--shards is "0"; give a whole number from 1 to 1000, such as 8'],
    [['--shards', '1001'], '--shards is "1001"; give a whole number from 1 to 1000'],
    [['--shards', '2.5'], '--shards is "2.5"; give a whole number from 1 to 1000'],
  ])(
    'refuses %j before starting anything, naming the flag, the value and the fix (exit 2)',
    async (argv, message) => {
      const { code, out, err } = await start(argv);

      expect(code).toBe(2);
      expect(err).toContain(message);
      expect(err).toContain('npm start -- --help lists the options.');
      expect(out).toBe('');
    },
  );

  it('documents --send-rate, --lambda-timeout, --shards and --json under --help', async () => {
    const { code, out } = await start(['--help']);

    expect(code).toBe(0);
    expect(out).toMatch(/--shards N\s+split each slotguard window into N shards/);
    expect(out).toContain(
      'npm start -- --recipients 20000 --shards 8 --send-rate 2000 --lambda-timeout 10 --json',
    );
    expect(out).toContain('--send-rate R');
    expect(out).toContain('--lambda-timeout S');
    expect(out).toMatch(/--json\s+demo: end with one line of JSON/);
    expect(out).toContain('npm start -- --recipients 20000 --send-rate 500 --lambda-timeout 10 --json');
  });

  it('keeps the embedded defaults when no flag is given: no send rate, each job its own time limit, no JSON', () => {
    expect(parseStartArgs([])).toEqual({
      command: 'demo',
      help: false,
      backend: 'dynamodb',
      faults: [],
      replicas: 3,
      recipients: 12_400,
      invoices: 5,
      concurrency: 16,
      json: false,
      outputDir: '.slotguard',
      stateDir: '.slotguard',
    });
    expect(
      parseStartArgs(['--send-rate', '0.5', '--lambda-timeout', '10', '--json', '--recipients', '20000']),
    ).toMatchObject({ sendRatePerSecond: 0.5, lambdaTimeoutSeconds: 10, json: true, recipients: 20_000 });
    expect(parseStartArgs(['serve', '--shards', '8'])).toMatchObject({ command: 'serve', shards: 8 });
  });
});
