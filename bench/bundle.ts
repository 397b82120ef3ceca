import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { bundledModules, bundleHandler, packageOf } from '../test/helpers/handler-bundle.js';

/** A handler to bundle and measure. */
export interface BundleEntry {
  /** How the report names it. */
  readonly label: string;
  /** The handler module, relative to the repository root. */
  readonly entry: string;
  /**
   * Packages left out of the bundle besides the AWS SDK, as a Lambda layer would provide them. The
   * import still loads them (from node_modules), so module init counts them as the layer's would be.
   * @default none
   */
  readonly external?: readonly string[];
}

export interface BundleReport extends BundleEntry {
  readonly bytes: number;
  readonly gzipBytes: number;
  /** Median milliseconds to import the bundle in a fresh Node process (module init, cold start's share). */
  readonly initMs: number;
  readonly containsPg: boolean;
  /** Packages in the bundle and the minified bytes each contributes, largest first. */
  readonly packages: readonly { readonly name: string; readonly bytes: number }[];
  /** slotguard's and the job's own modules and the minified bytes each contributes, largest first. */
  readonly ownModules: readonly { readonly path: string; readonly bytes: number }[];
}

/** How the reports name the repository's own modules (slotguard's and the job's) among the packages. */
export const OWN_CODE = 'own code';

/**
 * Bundles each handler as the ScheduledJob construct does (test/helpers/handler-bundle.ts: esbuild,
 * ESM, minified, AWS SDK v3 left to the Lambda runtime, slotguard from its sources) and measures
 * its size and its import time in fresh Node processes. The imports alternate between the
 * handlers, run by run, so a busy moment of the machine slows all alike.
 */
export async function measureBundles(
  entries: readonly BundleEntry[],
  env: Record<string, string>,
  runs = 15,
): Promise<BundleReport[]> {
  mkdirSync('bench/.out', { recursive: true });
  const built = await Promise.all(
    entries.map(async (entry, i) => {
      const outfile = `bench/.out/${entry.entry.replace(/[/.]/g, '_')}-${i}.mjs`;
      const { code, metafile } = await bundleHandler(entry.entry, { external: entry.external ?? [] });
      writeFileSync(outfile, code);
      const modules = bundledModules(metafile);
      const bytesByPackage = new Map<string, number>();
      for (const { path, bytes } of modules) {
        const name = packageOf(path) ?? OWN_CODE;
        bytesByPackage.set(name, (bytesByPackage.get(name) ?? 0) + bytes);
      }
      const ownModules = modules.filter((m) => packageOf(m.path) === undefined);
      return { entry, outfile, code, bytesByPackage, ownModules, times: [] as number[] };
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
  return built.map(({ entry, code, bytesByPackage, ownModules, times }) => {
    times.sort((a, b) => a - b);
    return {
      ...entry,
      bytes: Buffer.byteLength(code),
      gzipBytes: gzipSync(code).length,
      initMs: times[Math.floor(times.length / 2)] ?? Number.NaN,
      containsPg: /pg-protocol|pg-pool|BackendMessage/.test(code),
      packages: [...bytesByPackage]
        .map(([name, bytes]) => ({ name, bytes }))
        .sort((a, b) => b.bytes - a.bytes),
      ownModules,
    };
  });
}
