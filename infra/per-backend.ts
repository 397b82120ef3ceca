import { Stack } from 'aws-cdk-lib';
import type { Construct, IConstruct } from 'constructs';
import type { ClaimsBackend } from './claims-backend.js';

/** Constructs kept one per stack and claims backend, as the watchdog and the SES event recorder are. */
export type PerBackendRegistry<T extends Construct> = WeakMap<Stack, Map<ClaimsBackend, T>>;

/**
 * The construct of `claims` in `scope`'s stack, created by `create` on first use with the id
 * `<backend id><suffix>` (`ClaimsTableWatchdog` for a backend whose construct id is `ClaimsTable`),
 * made unique in the stack.
 */
export function onePerStackAndBackend<T extends Construct>(
  registry: PerBackendRegistry<T>,
  scope: IConstruct,
  claims: ClaimsBackend,
  suffix: string,
  create: (stack: Stack, id: string) => T,
): T {
  const stack = Stack.of(scope);
  const existing = registry.get(stack)?.get(claims);
  if (existing) return existing;
  const base = `${isConstruct(claims) ? claims.node.id : 'Claims'}${suffix}`;
  let id = base;
  for (let n = 2; stack.node.tryFindChild(id); n++) id = `${base}${n}`;
  const created = create(stack, id);
  const ofStack = registry.get(stack) ?? new Map<ClaimsBackend, T>();
  ofStack.set(claims, created);
  registry.set(stack, ofStack);
  return created;
}

function isConstruct(value: object): value is IConstruct {
  return 'node' in value && value.node !== undefined;
}
