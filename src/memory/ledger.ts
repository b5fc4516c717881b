import { ArgumentError, InternalError, SharedStateError } from '../errors.js';
import { checkSize } from './footprint.js';
import { SharedCounters } from './counters.js';
import {
  categoryNames,
  type Category,
  categoryIndex,
  categorySlot,
  counterCount,
  kAfterReadinessAttempts,
  kAfterReadinessBytes,
  kAllocationsBeforeReadiness,
  kFootprint,
  kGlobalSlots,
  kDefaultOwners,
  kMaxOwners,
  kOwnerLender,
  kOwnerCapacity,
  kOwnerCount,
  kOwnerHeld,
  kOwnerIndex,
  kOwnerKind,
  kOwnerPassSlots,
  kOwnerSealed,
  kOwnerSlots,
  kRegions,
  kRequested,
  kVirtualAlias,
  OWNER_KINDS,
  type OwnerKind,
  ownerBase,
} from './layout.js';
import { decodeSnapshot, type MemorySnapshot } from './snapshot.js';

/** A registered owner. The slot is the same in every thread sharing the ledger. */
export interface Owner {
  readonly slot: number;
  readonly kind: OwnerKind;
  readonly index: number;
  /** `kind/index`, e.g. `conversation/0`. */
  readonly name: string;
}

export function ownerName(kind: OwnerKind, index: number): string {
  return `${kind}/${index}`;
}

/**
 * Owner-scoped accounting shared by every thread: owner × category → requested bytes,
 * footprint bytes and region count, plus each owner's held bytes, peak, pass slots,
 * readiness and borrowers.
 *
 * Charging policy — shared storage is charged once: a slab's bytes are charged to the owner
 * that created it, and every byte of it sits in exactly one category (`slack` until a region
 * is carved from it). Another owner that uses the same storage (a conversation reading the
 * model's weights) is recorded as a borrower and is not charged, so owners always sum to the
 * process total. An apportioned view, dividing each owner's bytes evenly among it and its
 * borrowers, can be derived from a snapshot (`apportion`) and also sums to the total.
 *
 * Thread contract: any thread may call any method. Mutations happen during setup (before
 * readiness) and may allocate small objects; `readRaw` allocates nothing.
 */
export class Ledger {
  readonly counters: SharedCounters;
  readonly ownerCapacity: number;
  #owners = new Map<string, Owner>();
  readonly #raw: Float64Array;

  constructor(counters: SharedCounters) {
    if (!(counters instanceof SharedCounters)) throw new ArgumentError('Ledger needs a SharedCounters block');
    this.counters = counters;
    let capacity = counters.get(kOwnerCapacity);
    if (capacity === 0) {
      capacity = (counters.count - kGlobalSlots) / kOwnerSlots;
      if (!Number.isInteger(capacity) || capacity < 1 || capacity > kMaxOwners) {
        throw new ArgumentError(`a ${counters.count}-counter block is not a ledger`);
      }
      counters.beginWrite();
      try {
        if (counters.get(kOwnerCapacity) === 0) counters.set(kOwnerCapacity, capacity);
      } finally {
        counters.endWrite();
      }
    }
    if (counterCount(capacity) !== counters.count) {
      throw new ArgumentError(`ledger block has ${counters.count} counters, expected ${counterCount(capacity)}`);
    }
    this.ownerCapacity = capacity;
    this.#raw = new Float64Array(counters.count);
  }

  /** A new ledger block for up to `ownerCapacity` owners (1..kMaxOwners). */
  static create(ownerCapacity = kDefaultOwners): Ledger {
    if (!Number.isSafeInteger(ownerCapacity) || ownerCapacity < 1 || ownerCapacity > kMaxOwners) {
      throw new ArgumentError(`ownerCapacity must be an integer from 1 to ${kMaxOwners}, got ${String(ownerCapacity)}`);
    }
    return new Ledger(new SharedCounters(counterCount(ownerCapacity)));
  }

  /** Owner slots no owner holds yet (an owner once registered keeps its slot). */
  freeOwnerSlots(): number {
    return this.ownerCapacity - this.counters.get(kOwnerCount);
  }

  /** Whether `kind/index` has a slot (this thread or another registered it). */
  registered(kind: OwnerKind, index: number): boolean {
    const k = OWNER_KINDS.indexOf(kind) + 1;
    const n = this.counters.get(kOwnerCount);
    for (let s = 0; s < n; s++) if (this.counters.get(ownerBase(s) + kOwnerKind) === k && this.counters.get(ownerBase(s) + kOwnerIndex) === index) return true;
    return false;
  }

  /** Finds or registers the owner `kind/index`; every thread gets the same slot. */
  owner(kind: OwnerKind, index = 0): Owner {
    const k = OWNER_KINDS.indexOf(kind);
    if (k < 0) throw new ArgumentError(`owner kind must be one of ${OWNER_KINDS.join(', ')}, got '${String(kind)}'`);
    if (!Number.isSafeInteger(index) || index < 0 || index >= 2 ** 31) {
      throw new ArgumentError(`owner index must be a non-negative integer, got ${String(index)}`);
    }
    const name = ownerName(kind, index);
    const cached = this.#owners.get(name);
    if (cached !== undefined) return cached;
    const c = this.counters;
    c.beginWrite();
    try {
      const n = c.get(kOwnerCount);
      let slot = -1;
      for (let s = 0; s < n; s++) {
        const b = ownerBase(s);
        if (c.get(b + kOwnerKind) === k + 1 && c.get(b + kOwnerIndex) === index) {
          slot = s;
          break;
        }
      }
      if (slot < 0) {
        if (n >= this.ownerCapacity) {
          throw new SharedStateError(`ledger is full: ${this.ownerCapacity} owners registered, cannot add '${name}'`);
        }
        slot = n;
        c.set(ownerBase(slot) + kOwnerKind, k + 1);
        c.set(ownerBase(slot) + kOwnerIndex, index);
        c.set(kOwnerCount, n + 1);
      }
      const owner = Object.freeze({ slot, kind, index, name });
      this.#owners.set(name, owner);
      return owner;
    } finally {
      c.endWrite();
    }
  }

  #check(owner: Owner): void {
    if (owner === null || typeof owner !== 'object' || !Number.isInteger(owner.slot) || owner.slot < 0 || owner.slot >= this.ownerCapacity) {
      throw new ArgumentError('owner must come from Ledger.owner() or MemoryDomain.owner()');
    }
  }

  static #category(category: Category): number {
    const i = categoryIndex(category);
    if (i < 0) {
      throw new ArgumentError(`category must be one of ${categoryNames().join(', ')}, got '${String(category)}'`);
    }
    return i;
  }

  /**
   * Moves `footprint` bytes of `owner`'s slack into `category` and records the region.
   * Called by arenas when they carve; counts as an allocation before readiness.
   */
  charge(owner: Owner, category: Category, requested: number, footprint: number): void {
    this.#check(owner);
    const cat = Ledger.#category(category);
    checkSize(requested, `charge of '${category}' requested`);
    checkSize(footprint, `charge of '${category}' footprint`);
    if (requested > footprint) {
      throw new ArgumentError(`charge of '${category}': requested ${requested} exceeds footprint ${footprint}`);
    }
    if (cat === 0) throw new ArgumentError("charge: 'slack' is not a region category");
    const c = this.counters;
    c.beginWrite();
    try {
      const slack = categorySlot(owner.slot, 0, kFootprint);
      const free = c.get(slack);
      if (free < footprint) {
        throw new InternalError(`charge of ${footprint} bytes to '${owner.name}/${category}' exceeds its ${free} uncarved slab bytes`);
      }
      c.set(slack, free - footprint);
      c.add(categorySlot(owner.slot, cat, kRequested), requested);
      c.add(categorySlot(owner.slot, cat, kFootprint), footprint);
      c.add(categorySlot(owner.slot, cat, kRegions), 1);
      c.add(kAllocationsBeforeReadiness, 1);
    } finally {
      c.endWrite();
    }
  }

  /** Reverses charges (when the slab holding them is released): bytes go back to slack. */
  uncharge(owner: Owner, category: Category, requested: number, footprint: number, regions: number): void {
    this.#check(owner);
    const cat = Ledger.#category(category);
    const c = this.counters;
    c.beginWrite();
    try {
      c.add(categorySlot(owner.slot, cat, kRequested), -requested);
      c.add(categorySlot(owner.slot, cat, kFootprint), -footprint);
      c.add(categorySlot(owner.slot, cat, kRegions), -regions);
      c.add(categorySlot(owner.slot, 0, kFootprint), footprint);
    } finally {
      c.endWrite();
    }
  }

  /** Records that `borrower` uses storage charged to `owner` (charged once, to `owner`); it borrows from one owner at a time. */
  borrow(owner: Owner, borrower: Owner): void {
    this.#check(owner);
    this.#check(borrower);
    if (owner.slot === borrower.slot) return;
    const at = ownerBase(borrower.slot) + kOwnerLender;
    const c = this.counters;
    c.beginWrite();
    try {
      const lender = c.get(at);
      if (lender !== 0 && lender !== owner.slot + 1)
        throw new ArgumentError(`'${borrower.name}' already borrows from owner slot ${lender - 1}; it cannot also borrow from '${owner.name}'`);
      c.set(at, owner.slot + 1);
    } finally {
      c.endWrite();
    }
  }

  /** Ends `borrower`'s use of `owner`'s storage. */
  unborrow(owner: Owner, borrower: Owner): void {
    this.#check(owner);
    this.#check(borrower);
    const at = ownerBase(borrower.slot) + kOwnerLender;
    const c = this.counters;
    c.beginWrite();
    try {
      if (c.get(at) === owner.slot + 1) c.set(at, 0);
    } finally {
      c.endWrite();
    }
  }

  /** Number of concurrent pass (ticket) slots this owner serves. */
  setPassSlots(owner: Owner, slots: number): void {
    this.#check(owner);
    if (!Number.isSafeInteger(slots) || slots < 0) throw new ArgumentError(`pass slots must be a non-negative integer, got ${slots}`);
    this.#setOwnerWord(owner, kOwnerPassSlots, slots);
  }

  #setOwnerWord(owner: Owner, word: number, value: number): void {
    const c = this.counters;
    c.beginWrite();
    try {
      c.set(ownerBase(owner.slot) + word, value);
    } finally {
      c.endWrite();
    }
  }

  /** Marks the owner ready: from now on slab allocations for it are refused and counted. */
  seal(owner: Owner): void {
    this.#check(owner);
    this.#setOwnerWord(owner, kOwnerSealed, 1);
  }

  /**
   * Ends an owner's readiness once it holds nothing (everything it had was released), so the
   * same owner can be set up again. Refused while it still holds bytes.
   */
  unseal(owner: Owner): void {
    this.#check(owner);
    const c = this.counters;
    c.beginWrite();
    try {
      const held = c.get(ownerBase(owner.slot) + kOwnerHeld);
      if (held !== 0) throw new ArgumentError(`owner '${owner.name}' still holds ${held} bytes; release them before it is set up again`);
      c.set(ownerBase(owner.slot) + kOwnerSealed, 0);
    } finally {
      c.endWrite();
    }
  }

  isSealed(owner: Owner): boolean {
    this.#check(owner);
    return this.counters.get(ownerBase(owner.slot) + kOwnerSealed) === 1;
  }

  /** Counts an allocation or carve refused because it came after readiness. */
  countAfterReadiness(bytes: number): void {
    const c = this.counters;
    c.beginWrite();
    try {
      c.add(kAfterReadinessAttempts, 1);
      c.add(kAfterReadinessBytes, Number.isSafeInteger(bytes) && bytes > 0 ? bytes : 0);
    } finally {
      c.endWrite();
    }
  }

  /** Virtual bytes that alias physical bytes already charged (a double-mapped ring). */
  addVirtualAlias(bytes: number): void {
    if (!Number.isSafeInteger(bytes)) throw new ArgumentError(`virtual alias bytes must be an integer, got ${bytes}`);
    const c = this.counters;
    c.beginWrite();
    try {
      if (c.get(kVirtualAlias) + bytes < 0) throw new ArgumentError('virtual alias bytes would go negative');
      c.add(kVirtualAlias, bytes);
    } finally {
      c.endWrite();
    }
  }

  /**
   * Copies every live counter into `out` as one consistent state (seqlock) and returns its
   * sequence number. No allocation; `out` must hold `counters.count` values.
   */
  readRaw(out: Float64Array): number {
    return this.counters.read(out, kGlobalSlots, (g) => kGlobalSlots + (g[kOwnerCount] ?? 0) * kOwnerSlots);
  }

  /** A coherent snapshot of the limit and every owner. */
  snapshot(): MemorySnapshot {
    const seq = this.readRaw(this.#raw);
    return decodeSnapshot(this.#raw, seq);
  }
}
