import { build, type Metafile } from 'esbuild';
import { SOURCE_CONDITION } from '../../infra/package-source.js';

/** What `bundleHandler` adds to the bundle options ScheduledJob gives NodejsFunction. */
export interface HandlerBundleOptions {
  /**
   * Packages left out of the bundle besides the AWS SDK (which the Lambda runtime provides), for
   * what a Lambda layer would provide.
   * @default none
   */
  readonly external?: readonly string[];
  /**
   * Modules evaluated before the handler module (esbuild's `inject`), as a claims backend adds them
   * (PostgresClaims: the Postgres runtime module).
   * @default none
   */
  readonly inject?: readonly string[];
}

/** One bundled handler: its code and what esbuild says went into it. */
export interface HandlerBundle {
  readonly code: string;
  readonly bytes: number;
  readonly metafile: Metafile;
}

/**
 * Bundles a handler with esbuild's JS API and the options ScheduledJob gives NodejsFunction
 * (infra/slotguard-function.ts): one minified ESM file for the Node.js 24 runtime, AWS SDK v3 left to the runtime, the
 * createRequire banner, `slotguard` from its sources as in this repository.
 * @example const { metafile } = await bundleHandler('functions/weekly-report/handler.ts');
 */
export async function bundleHandler(
  entry: string,
  options: HandlerBundleOptions = {},
): Promise<HandlerBundle> {
  const result = await build({
    entryPoints: [entry],
    bundle: true,
    write: false,
    outfile: 'handler.mjs',
    platform: 'node',
    target: 'node24',
    format: 'esm',
    minify: true,
    mainFields: ['module', 'main'],
    conditions: [SOURCE_CONDITION],
    external: ['@aws-sdk/*', ...(options.external ?? [])],
    banner: {
      js: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
    },
    inject: [...(options.inject ?? [])],
    metafile: true,
    logLevel: 'silent',
  });
  const code = result.outputFiles[0]?.text ?? '';
  return { code, bytes: Buffer.byteLength(code), metafile: result.metafile };
}

/**
 * The modules that put code into the bundle, largest first, by path (`node_modules/<package>/…` for
 * a dependency's). esbuild also lists every module a bundled one imports, even when tree shaking
 * left none of it: those are not here.
 */
export function bundledModules(metafile: Metafile): { readonly path: string; readonly bytes: number }[] {
  return Object.values(metafile.outputs)
    .flatMap((output) => Object.entries(output.inputs))
    .filter(([, input]) => input.bytesInOutput > 0)
    .map(([path, input]) => ({
      path: path.replace(/^.*?(?=node_modules\/)/, ''),
      bytes: input.bytesInOutput,
    }))
    .sort((a, b) => b.bytes - a.bytes);
}

/** The package a bundled module belongs to (`@scope/name` or `name`), or undefined for the repository's own. */
export function packageOf(path: string): string | undefined {
  return /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path)?.[1];
}
