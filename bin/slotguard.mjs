#!/usr/bin/env node
// The operator CLI's entry point (`npx slotguard`). An installed package runs the compiled CLI in
// dist/ on plain Node, on the backend its options name and the team's own job catalog. A checkout
// of slotguard's repository runs its TypeScript sources instead, through tsx (a development
// dependency), with `slotguard` resolving to the sources as everywhere in the repository
// (docs/packaging.md), and adds the local runner's side (cli/repository-local-runs.ts: the state
// `npm start -- serve` keeps, windows run in this process); the package ships no .ts files and
// none of that, so it never takes this path.
import { existsSync } from 'node:fs';
import { register } from 'node:module';

// Lambda runs Node 22; on a Node 20 operator machine the SDK's upgrade notice would bury the output.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

const io = { stdout: process.stdout, stderr: process.stderr };
const source = new URL('../cli/slotguard.ts', import.meta.url);
let cli;
if (existsSync(source)) {
  const tsx = await import('tsx/esm/api');
  tsx.register();
  // Registered after tsx, so it runs first: adds the source condition to every resolution.
  register(
    'data:text/javascript,export function resolve(specifier, context, next) {' +
      ' return next(specifier, { ...context, conditions: [...context.conditions, "slotguard-source"] }); }',
  );
  cli = await import(source.href);
  const { repositoryLocalRuns } = await import(
    new URL('../cli/repository-local-runs.ts', import.meta.url).href
  );
  io.localRuns = repositoryLocalRuns;
} else {
  cli = await import('../dist/cli/slotguard.js');
}
process.exitCode = await cli.main(process.argv.slice(2), io);
