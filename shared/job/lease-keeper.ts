import { setMaxListeners } from 'node:events';
import type { Clock } from '../clock.js';
import { SlotguardError } from '../errors.js';
import type { Claim, ClaimStore } from '../slot/ports.js';

/**
 * How a lease was lost:
 * - `fenced`: the store said another holder has the slot (a renewal, a reservation or a checkpoint
 *   was rejected by epoch); nothing of it is ours any more.
 * - `expired`: no renewal succeeded before the lease's end by the local clock (a slow or unreachable
 *   store). The slot may still be RUNNING at our epoch: the holder gives it back, fenced, so the
 *   next run need not wait for the lease to run out.
 */
export type LeaseLoss = 'fenced' | 'expired';

/** Why a holder stopped trusting its lease. */
export class LeaseLostError extends SlotguardError {
  readonly claim: Claim;
  readonly loss: LeaseLoss;
  constructor(claim: Claim, loss: LeaseLoss, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.claim = claim;
    this.loss = loss;
  }
}

export interface LeaseKeeperOptions {
  readonly store: ClaimStore;
  readonly clock: Clock;
  readonly claim: Claim;
  /** When the claim request was sent: the lease is counted from then, not from the reply. */
  readonly claimSentAt: number;
  readonly leaseMs: number;
  /** Renew this often (by default a third of the lease, so two renewals can fail before it ends). */
  readonly renewEveryMs: number;
  /** Stop reserving this long before the lease ends by the local clock. */
  readonly safetyMarginMs: number;
  readonly onLost?: (reason: LeaseLostError) => void;
  /** Called after each successful renewal with the new lease end (by the local clock). */
  readonly onRenewed?: (leaseEndsAt: number) => void;
}

/**
 * Keeps a claim's lease alive in the background and tells the job's work, through an AbortSignal,
 * the moment it can no longer trust it: a renewal found the slot taken over, or the lease ran out
 * by the local clock before a renewal succeeded. It never assumes the lease holds past the end it
 * last wrote; every renewal is a write conditioned on owner and epoch.
 */
export class LeaseKeeper {
  readonly #options: LeaseKeeperOptions;
  readonly #controller = withListenerRoom(new AbortController());
  #leaseEndsAt: number;
  #cancelRenew: () => void = () => {};
  #cancelExpiry: () => void = () => {};
  #stopped = false;

  constructor(options: LeaseKeeperOptions) {
    this.#options = options;
    this.#leaseEndsAt = options.claimSentAt + options.leaseMs;
    // Counted from when the claim was sent, like the lease: a slow claim reply must not push the
    // first renewal past the lease's end.
    this.#scheduleRenew(options.claimSentAt);
    this.#scheduleExpiry();
  }

  /** Aborted when the lease is lost; the job passes it to every effect. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** The lease end by the local clock, counted from when the last successful write was sent. */
  get leaseEndsAt(): number {
    return this.#leaseEndsAt;
  }

  /** How the lease was lost, once it has been. */
  get loss(): LeaseLoss | undefined {
    const reason: unknown = this.#controller.signal.reason;
    return reason instanceof LeaseLostError ? reason.loss : undefined;
  }

  /** True while a new effect may be reserved: not lost, and the lease has more than the margin left. */
  canReserve(): boolean {
    if (this.#controller.signal.aborted) return false;
    if (this.#options.clock.now() < this.#leaseEndsAt - this.#options.safetyMarginMs) return true;
    this.#lose(
      'expired',
      `lease ended at ${iso(this.#leaseEndsAt)} by the local clock before a renewal succeeded ` +
        `(new effects stop ${this.#options.safetyMarginMs} ms before the end)`,
    );
    return false;
  }

  /** Marks the lease lost from outside: a reservation or a checkpoint found a later epoch. */
  fence(message: string): void {
    this.#lose('fenced', message);
  }

  stop(): void {
    this.#stopped = true;
    this.#cancelRenew();
    this.#cancelExpiry();
  }

  /** The next renewal, `renewEveryMs` after the previous write of the lease was sent. */
  #scheduleRenew(lastSentAt: number): void {
    const { clock, renewEveryMs } = this.#options;
    const wait = Math.max(0, lastSentAt + renewEveryMs - clock.now());
    this.#cancelRenew = clock.schedule(wait, () => void this.#renew());
  }

  #scheduleExpiry(): void {
    this.#cancelExpiry();
    const { clock, safetyMarginMs } = this.#options;
    const wait = Math.max(0, this.#leaseEndsAt - safetyMarginMs - clock.now());
    this.#cancelExpiry = clock.schedule(wait, () => void this.canReserve());
  }

  async #renew(): Promise<void> {
    if (this.#stopped || this.#controller.signal.aborted) return;
    const { store, clock, claim, leaseMs } = this.#options;
    const sentAt = clock.now();
    try {
      const outcome = await store.renew(claim, leaseMs, sentAt);
      if (this.#stopped) return;
      if (outcome.kind === 'lost') {
        const by = outcome.holder ? ` by ${outcome.holder} (epoch ${outcome.epoch}, ${outcome.state})` : '';
        this.#lose(
          'fenced',
          `slot ${claim.slot.jobId} ${claim.slot.window} was taken over${by}; epoch ${claim.epoch} is fenced`,
        );
        return;
      }
      this.#leaseEndsAt = sentAt + leaseMs;
      this.#scheduleExpiry();
      this.#options.onRenewed?.(this.#leaseEndsAt);
    } catch {
      // A failed renewal (throttled, unreachable) is not a lost lease: try again at the next tick. If
      // none succeeds before the lease ends, the expiry timer stops the work.
    }
    // Due an interval after this attempt was sent, not after its reply: a slow reply must not push
    // the next renewal towards the lease's end.
    if (!this.#stopped && !this.#controller.signal.aborted) this.#scheduleRenew(sentAt);
  }

  #lose(loss: LeaseLoss, message: string): void {
    if (this.#controller.signal.aborted) return;
    const error = new LeaseLostError(this.#options.claim, loss, message);
    this.#controller.abort(error);
    this.stop();
    this.#options.onLost?.(error);
  }
}

const iso = (millis: number) => new Date(millis).toISOString();

/**
 * The lease's signal is handed to every effect under way, and each waits on it (a sender's wait for
 * its send rate, an HTTP request): more than Node's default of 10 listeners is the normal case, not
 * a leak, and the warning it prints would bury the run's log.
 */
function withListenerRoom(controller: AbortController): AbortController {
  setMaxListeners(0, controller.signal);
  return controller;
}
