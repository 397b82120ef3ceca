import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { build } from 'esbuild';
import { SOURCE_CONDITION } from '../infra/package-source.js';

/** A handler to bundle and measure. */
export interface BundleEntry {
  /** How the report names it. */
  readonly label: string;
  /** The handler module, relative to the repository root. */
  readonly entry: string;
}

export interface BundleReport extends BundleEntry {
  readonly bytes: number;
  readonly gzipBytes: number;
  /** Median milliseconds to import the bundle in a fresh Node process (module init, cold start's share). */
  readonly initMs: number;
  readonly containsPg: boolean;
  /** Packages in the bundle and the minified bytes each contributes, largest first. */
  readonly packages: readonly { readonly name: string; readonly bytes: number }[];
}

/**
 * Bundles each handler as the ScheduledJob construct does (esbuild, ESM, minified, AWS SDK v3 left
 * to the Lambda runtime, slotguard from its sources) and measures its size and its import time in
 * fresh Node processes. The imports alternate between the handlers, run by run, so a busy moment
 * of the machine slows both alike.
 */
export async function measureBundles(
  entries: readonly BundleEntry[],
  env: Record<string, string>,
  runs = 15,
): Promise<BundleReport[]> {
  mkdirSync('bench/.out', { recursive: true });
  const built = await Promise.all(
    entries.map(async (entry) => {
      const outfile = `bench/.out/${entry.entry.replace(/[/.]/g, '_')}.mjs`;
      const result = await build({
        entryPoints: [entry.entry],
        outfile,
        bundle: true,
        minify: true,
        platform: 'node',
        target: 'node22',
        format: 'esm',
        conditions: [SOURCE_CONDITION],
        external: ['@aws-sdk/*'],
        banner: {
          js: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
        },
        metafile: true,
        logLevel: 'error',
      });
      const bytesByPackage = new Map<string, number>();
      for (const output of Object.values(result.metafile.outputs)) {
        for (const [input, { bytesInOutput }] of Object.entries(output.inputs)) {
          const name = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(input)?.[1] ?? 'slotguard and the job';
          bytesByPackage.set(name, (bytesByPackage.get(name) ?? 0) + bytesInOutput);
        }
      }
      return { entry, outfile, bytesByPackage, times: [] as number[] };
    }),
  );
  for (let i = 0; i < runs; i++) {
    for (const bundle of built) {
      const out = execFileSync(
        process.execPath,
        [
          '--input-type=module',
          '-e',
          `const t = performance.now(); await import(${JSON.stringify(`${process.cwd()}/${bundle.outfile}`)}); process.stdout.write(String(performance.now() - t));`,
        ],
        { env: { ...process.env, ...env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' } },
      );
      bundle.times.push(Number(out.toString()));
    }
  }
  return built.map(({ entry, outfile, bytesByPackage, times }) => {
    const code = readFileSync(outfile);
    times.sort((a, b) => a - b);
    return {
      ...entry,
      bytes: code.length,
      gzipBytes: gzipSync(code).length,
      initMs: times[Math.floor(times.length / 2)] ?? Number.NaN,
      containsPg: /pg-protocol|pg-pool|BackendMessage/.test(code.toString()),
      packages: [...bytesByPackage]
        .map(([name, bytes]) => ({ name, bytes }))
        .sort((a, b) => b.bytes - a.bytes),
    };
  });
}
