import { ArgumentError, BadInputError, InternalError, MemoryLimitError, ReadinessError } from '../errors.js';
import { checkSize } from './footprint.js';
import {
  categorySlot,
  kAfterReadinessAttempts,
  kAfterReadinessBytes,
  kAllocationsBeforeReadiness,
  kAllocatorFailures,
  kFootprint,
  kLimit,
  kLiveSlabs,
  kOwnerHeld,
  kOwnerPeak,
  kOwnerSealed,
  kPeak,
  kPinnedHeld,
  kNativeHeld,
  kRefusals,
  kReserved,
  kSlabHeld,
  ownerBase,
} from './layout.js';
import type { Ledger, Owner } from './ledger.js';
import { parseByteSize } from './sizes.js';

/** Where held bytes live: a SharedArrayBuffer slab, or the same locked in RAM (pinned). */
export type HoldKind = 'slab' | 'pinned' | 'native';

/** The global counter of held bytes of a kind. */
function heldSlot(kind: HoldKind): number {
  return kind === 'pinned' ? kPinnedHeld : kind === 'native' ? kNativeHeld : kSlabHeld;
}

export const MEMORY_LIMIT_ENV = 'VOXSLAB_MEMORY_LIMIT';

/**
 * Reads the cap from `VOXSLAB_MEMORY_LIMIT` (`512MiB`, `2GiB`, plain bytes), or returns
 * `fallback` when the variable is unset or empty. A malformed value is a BadInputError.
 */
export function limitFromEnvironment(fallback: number, env: NodeJS.ProcessEnv = process.env): number {
  const text = env[MEMORY_LIMIT_ENV];
  if (text === undefined || text.trim() === '') return fallback;
  const bytes = parseByteSize(text, MEMORY_LIMIT_ENV);
  if (bytes <= 0) throw new BadInputError({ field: MEMORY_LIMIT_ENV }, 'the memory limit must be positive');
  return bytes;
}

/**
 * The process-wide cap on bytes held: slab bytes plus pinned bytes, kept as separate counters
 * whose sum (plus outstanding reservations) never exceeds the limit. The counters live in the
 * ledger's shared block, so every thread reserves against the same numbers and a snapshot sees
 * the limit and the owners in one consistent state.
 *
 * Protocol: `reserve` before calling the allocator (a refusal throws MemoryLimitError and the
 * allocator is never reached) → `commit` on success, or `refund` on failure, which returns
 * exactly the reserved bytes; `release` when the storage is given up. A refusal or a refund
 * leaves held bytes and the peak unchanged.
 *
 * Thread contract: any thread; each call is one atomic write section. Setup-time only.
 */
export class AllocationLimit {
  readonly #ledger: Ledger;

  constructor(ledger: Ledger) {
    this.#ledger = ledger;
  }

  get limit(): number {
    return this.#ledger.counters.get(kLimit);
  }

  /** Sets the cap. Lowering it below what is held refuses new reservations; nothing is freed. */
  setLimit(bytes: number): void {
    checkSize(bytes, 'memory limit');
    if (bytes === 0) throw new ArgumentError('memory limit must be positive');
    const c = this.#ledger.counters;
    c.beginWrite();
    try {
      c.set(kLimit, bytes);
    } finally {
      c.endWrite();
    }
  }

  /**
   * Reserves `bytes` for `owner`, or throws without changing anything held: MemoryLimitError
   * past the cap, ReadinessError (counted as an attempt after readiness) when the owner is
   * sealed. The seal is read in the same write section as the reservation.
   */
  reserve(owner: Owner, bytes: number, what = 'a slab'): void {
    checkSize(bytes, `reservation for '${owner.name}'`);
    const c = this.#ledger.counters;
    let refused: MemoryLimitError | ReadinessError | undefined;
    c.beginWrite();
    try {
      const limit = c.get(kLimit);
      const inUse = c.get(kSlabHeld) + c.get(kPinnedHeld) + c.get(kNativeHeld) + c.get(kReserved);
      if (this.#sealedIn(owner, bytes)) {
        refused = new ReadinessError(`owner '${owner.name}' is ready (sealed); allocating ${what} is refused`);
      } else if (inUse + bytes > limit) {
        c.add(kRefusals, 1);
        refused = new MemoryLimitError(bytes, inUse, limit, owner.name, what);
      } else {
        c.add(kReserved, bytes);
      }
    } finally {
      c.endWrite();
    }
    if (refused !== undefined) throw refused;
  }

  /** Inside a write section: whether `owner` is sealed, counting the refused attempt if so. */
  #sealedIn(owner: Owner, bytes: number): boolean {
    const c = this.#ledger.counters;
    if (c.get(ownerBase(owner.slot) + kOwnerSealed) !== 1) return false;
    c.add(kAfterReadinessAttempts, 1);
    c.add(kAfterReadinessBytes, bytes);
    return true;
  }

  /**
   * Turns a reservation into held bytes charged to `owner` (all as its slack). When the owner
   * was sealed since the reservation, the reservation is returned instead, the attempt counted,
   * and ReadinessError thrown.
   */
  commit(owner: Owner, kind: HoldKind, bytes: number, what = 'a slab'): void {
    const c = this.#ledger.counters;
    let sealed = false;
    c.beginWrite();
    try {
      this.#takeReservation(bytes);
      sealed = this.#sealedIn(owner, bytes);
      if (!sealed) {
        c.add(heldSlot(kind), bytes);
        const total = c.get(kSlabHeld) + c.get(kPinnedHeld) + c.get(kNativeHeld);
        if (total > c.get(kPeak)) c.set(kPeak, total);
        const b = ownerBase(owner.slot);
        const ownerHeld = c.add(b + kOwnerHeld, bytes);
        if (ownerHeld > c.get(b + kOwnerPeak)) c.set(b + kOwnerPeak, ownerHeld);
        c.add(categorySlot(owner.slot, 0, kFootprint), bytes);
        c.add(kLiveSlabs, 1);
        c.add(kAllocationsBeforeReadiness, 1);
      }
    } finally {
      c.endWrite();
    }
    if (sealed) throw new ReadinessError(`owner '${owner.name}' was sealed (ready) while ${what} was being allocated; it is refused`);
  }

  /** Returns the unused part of a reservation (an allocation smaller than its bound). */
  unreserve(bytes: number): void {
    const c = this.#ledger.counters;
    c.beginWrite();
    try {
      this.#takeReservation(bytes);
    } finally {
      c.endWrite();
    }
  }

  /** Returns a reservation whose allocation failed. Held bytes and the peak do not change. */
  refund(bytes: number): void {
    const c = this.#ledger.counters;
    c.beginWrite();
    try {
      this.#takeReservation(bytes);
      c.add(kAllocatorFailures, 1);
    } finally {
      c.endWrite();
    }
  }

  /** Gives up held bytes; they must be back in the owner's slack (regions uncharged). */
  release(owner: Owner, kind: HoldKind, bytes: number): void {
    const c = this.#ledger.counters;
    c.beginWrite();
    try {
      const slot = heldSlot(kind);
      const slack = categorySlot(owner.slot, 0, kFootprint);
      if (c.get(slot) < bytes || c.get(slack) < bytes) {
        throw new InternalError(`release of ${bytes} ${kind} bytes by '${owner.name}' exceeds what it holds`);
      }
      c.add(slot, -bytes);
      c.add(slack, -bytes);
      c.add(ownerBase(owner.slot) + kOwnerHeld, -bytes);
      c.add(kLiveSlabs, -1);
    } finally {
      c.endWrite();
    }
  }

  #takeReservation(bytes: number): void {
    const c = this.#ledger.counters;
    const reserved = c.get(kReserved);
    if (reserved < bytes) throw new InternalError(`no reservation of ${bytes} bytes outstanding (${reserved} reserved)`);
    c.set(kReserved, reserved - bytes);
  }
}
