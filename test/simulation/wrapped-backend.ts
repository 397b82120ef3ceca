import type { SlotBackend } from '../../shared/job/run-slot.js';
import type { ClaimStore, EffectLedger } from '../../shared/slot/ports.js';

/** A claim store passing every call through to `claims`, except the ones `override` replaces. */
function claimsWith(claims: ClaimStore, override: Partial<ClaimStore>): ClaimStore {
  return {
    claim: (...args) => claims.claim(...args),
    renew: (...args) => claims.renew(...args),
    checkpoint: (...args) => claims.checkpoint(...args),
    complete: (...args) => claims.complete(...args),
    release: (...args) => claims.release(...args),
    read: (...args) => claims.read(...args),
    shardFinished: (...args) => claims.shardFinished(...args),
    finishSharded: (...args) => claims.finishSharded(...args),
    ...override,
  };
}

/** An effect ledger passing every call through to `ledger`, except the ones `override` replaces. */
function ledgerWith(ledger: EffectLedger, override: Partial<EffectLedger>): EffectLedger {
  return {
    reserve: (...args) => ledger.reserve(...args),
    markDone: (...args) => ledger.markDone(...args),
    recordFailure: (...args) => ledger.recordFailure(...args),
    unreserve: (...args) => ledger.unreserve(...args),
    read: (...args) => ledger.read(...args),
    list: (...args) => ledger.list(...args),
    recordProviderWord: (...args) => ledger.recordProviderWord(...args),
    settleInDoubt: (...args) => ledger.settleInDoubt(...args),
    ...override,
  };
}

/**
 * `backend` with some of its port methods replaced: how a test breaks one piece of the protocol
 * (broken-variants.test.ts) or injects one fault (findings.test.ts) without touching the runtime.
 */
export function backendWith(
  backend: SlotBackend,
  parts: { readonly claims?: Partial<ClaimStore>; readonly ledger?: Partial<EffectLedger> },
): SlotBackend {
  return {
    claims: claimsWith(backend.claims, parts.claims ?? {}),
    ledger: ledgerWith(backend.ledger, parts.ledger ?? {}),
    hashKey: backend.hashKey,
  };
}
