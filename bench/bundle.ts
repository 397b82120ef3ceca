import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { build } from 'esbuild';

export interface BundleReport {
  readonly entry: string;
  readonly bytes: number;
  readonly gzipBytes: number;
  /** Median milliseconds to import the bundle in a fresh Node process (module init, cold start's share). */
  readonly initMs: number;
  readonly containsPg: boolean;
}

/**
 * Bundles a handler as the ScheduledJob construct does (esbuild, ESM, minified, AWS SDK v3 left to
 * the Lambda runtime) and measures its size and its import time in a fresh Node process.
 */
export async function measureBundle(
  entry: string,
  env: Record<string, string>,
  runs = 7,
): Promise<BundleReport> {
  mkdirSync('bench/.out', { recursive: true });
  const outfile = `bench/.out/${entry.replace(/[/.]/g, '_')}.mjs`;
  await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    minify: true,
    platform: 'node',
    target: 'node22',
    format: 'esm',
    external: ['@aws-sdk/*'],
    banner: {
      js: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
    },
    logLevel: 'error',
  });
  const code = readFileSync(outfile);
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const out = execFileSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const t = performance.now(); await import(${JSON.stringify(`${process.cwd()}/${outfile}`)}); process.stdout.write(String(performance.now() - t));`,
      ],
      { env: { ...process.env, ...env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' } },
    );
    times.push(Number(out.toString()));
  }
  times.sort((a, b) => a - b);
  return {
    entry,
    bytes: code.length,
    gzipBytes: gzipSync(code).length,
    initMs: times[Math.floor(times.length / 2)] ?? Number.NaN,
    containsPg: /pg-protocol|pg-pool|BackendMessage/.test(code.toString()),
  };
}
