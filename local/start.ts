/**
 * `npm start`: replays the incident locally on embedded defaults (dynalite, a loopback SMTP server);
 * `npm start -- serve` runs the catalog's jobs on their schedules until stopped. `--help` lists
 * the flags (local/start-command.ts).
 */

// Lambda runs Node 22; on this Node 20 machine the SDK's upgrade notice is noise in the demo. Set
// before the SDK is imported, hence the dynamic import.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
const { runStart } = await import('./start-command.js');

const code = await runStart(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
  untilStopped: () =>
    new Promise<void>((resolve) => {
      process.once('SIGINT', resolve);
      process.once('SIGTERM', resolve);
    }),
});
process.exit(code);
