import { fileURLToPath } from 'node:url';

/**
 * Where slotguard's own modules come from when a construct bundles a function: the TypeScript
 * sources in slotguard's repository, or the compiled JavaScript of the package a user installed.
 * docs/packaging.md says why the repository resolves its own package name to its sources.
 */

/**
 * The export condition under which package.json maps each of slotguard's entry points to its
 * TypeScript source instead of the compiled JavaScript. The repository sets it for tsc, vitest, tsx
 * and esbuild; an installed package never needs it.
 */
export const SOURCE_CONDITION = 'slotguard-source';

/**
 * True when this module was loaded from its `.ts` source (slotguard's repository, under tsx or
 * vitest), false when it runs compiled from the installed package.
 */
export const RUNS_FROM_SOURCE = import.meta.url.endsWith('.ts');

/**
 * The esbuild conditions a handler importing `slotguard` is bundled with, so the bundle takes the
 * same form of slotguard as the construct that bundles it: the sources in the repository (where
 * no compiled output need exist), the compiled package anywhere else (where no sources ship).
 */
export const BUNDLING_CONDITIONS: readonly string[] = RUNS_FROM_SOURCE ? [SOURCE_CONDITION] : [];

/**
 * The absolute path of one of slotguard's runtime modules, given from the package's source root
 * without extension (`shared/job/lambda-environment-postgres`): its `.ts` source in the repository,
 * its compiled `.js` in an installed package. For modules a construct hands to esbuild by path.
 */
export function runtimeModulePath(pathFromRoot: string): string {
  const extension = RUNS_FROM_SOURCE ? '.ts' : '.js';
  return fileURLToPath(new URL(`../${pathFromRoot}${extension}`, import.meta.url));
}
