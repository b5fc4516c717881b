import { AllocationError, ArgumentError, InternalError } from '../errors.js';
import type { Category, OwnerKind } from './layout.js';
import type { Ledger, Owner } from './ledger.js';
import type { AllocationLimit, HoldKind } from './limit.js';

/**
 * Where slabs come from. The real allocator calls `new SharedArrayBuffer`; tests inject one
 * that counts calls and fails on demand. It is called only after a reservation succeeded.
 */
export interface Allocator {
  allocate(bytes: number): SharedArrayBuffer;
}

export const sharedArrayBufferAllocator: Allocator = Object.freeze({
  allocate(bytes: number): SharedArrayBuffer {
    return new SharedArrayBuffer(bytes);
  },
});

/**
 * An allocator that records every call and fails when told to: the observable, fallible
 * allocator for tests and benchmarks. It delegates real allocation to `inner`.
 */
export class CountingAllocator implements Allocator {
  calls = 0;
  bytes = 0;
  failures = 0;
  readonly sizes: number[] = [];
  #failNext = 0;
  #failWhen: ((bytes: number, call: number) => boolean) | undefined;
  readonly #inner: Allocator;

  constructor(inner: Allocator = sharedArrayBufferAllocator) {
    this.#inner = inner;
  }

  /** Makes the next `n` calls fail. */
  failNext(n = 1): this {
    if (!Number.isSafeInteger(n) || n < 0) throw new ArgumentError(`failNext expects a non-negative integer, got ${n}`);
    this.#failNext = n;
    return this;
  }

  /** Makes every call for which `predicate(bytes, callNumber)` is true fail. */
  failWhen(predicate: ((bytes: number, call: number) => boolean) | undefined): this {
    this.#failWhen = predicate;
    return this;
  }

  allocate(bytes: number): SharedArrayBuffer {
    this.calls += 1;
    this.sizes.push(bytes);
    if (this.#failNext > 0 || (this.#failWhen?.(bytes, this.calls) ?? false)) {
      if (this.#failNext > 0) this.#failNext -= 1;
      this.failures += 1;
      throw new AllocationError(`injected allocation failure (call ${this.calls}, ${bytes} bytes)`);
    }
    const sab = this.#inner.allocate(bytes);
    this.bytes += bytes;
    return sab;
  }
}

/** Locks slab pages in RAM; the real one is the native addon's mlock. */
export interface PageLocker {
  lock(view: Uint8Array): { ok: boolean; errno: number; message: string };
  unlock(view: Uint8Array): { ok: boolean; errno: number; message: string };
}

/** What one category of a slab record charges. */
export interface Charge {
  requested: number;
  footprint: number;
  regions: number;
}

/**
 * A slab's charges as plain data, so another thread can return them to the cap if the thread
 * that created the slab dies (MemoryDomain.releaseOrphan).
 */
export interface SlabRecord {
  owner: { kind: OwnerKind; index: number };
  kind: HoldKind;
  bytes: number;
  label: string;
  charges: [Category, Charge][];
}

/** Reverses every charge and returns `bytes` to the cap, in one write section. */
function uncharge(ledger: Ledger, limit: AllocationLimit, owner: Owner, kind: HoldKind, bytes: number, charges: Iterable<[Category, Charge]>): void {
  const counters = ledger.counters;
  counters.beginWrite();
  try {
    for (const [category, c] of charges) ledger.uncharge(owner, category, c.requested, c.footprint, c.regions);
    limit.release(owner, kind, bytes);
  } finally {
    counters.endWrite();
  }
}

/** Releases the charges of a slab whose creating thread is gone (no memory is touched). */
export function releaseSlabRecord(ledger: Ledger, limit: AllocationLimit, r: SlabRecord): void {
  uncharge(ledger, limit, ledger.owner(r.owner.kind, r.owner.index), r.kind, r.bytes, r.charges);
}

/**
 * One SharedArrayBuffer held under the cap and charged to one owner. Regions carved from it
 * move bytes from the owner's slack into a category; `release()` reverses every charge and
 * returns the bytes to the cap in one atomic step. The memory itself is reclaimed by the
 * garbage collector once nothing references the buffer.
 *
 * Thread contract: the creating thread calls charge()/release(); any thread may use the
 * buffer. Created only through MemoryDomain.createSlab.
 */
export class Slab {
  readonly buffer: SharedArrayBuffer;
  readonly bytes: number;
  readonly owner: Owner;
  readonly kind: HoldKind;
  readonly label: string;
  readonly #ledger: Ledger;
  readonly #limit: AllocationLimit;
  readonly #locker: PageLocker | undefined;
  readonly #charges = new Map<Category, Charge>();
  #released = false;

  /** @internal */
  constructor(args: {
    buffer: SharedArrayBuffer;
    bytes: number;
    owner: Owner;
    kind: HoldKind;
    label: string;
    ledger: Ledger;
    limit: AllocationLimit;
    locker: PageLocker | undefined;
  }) {
    this.buffer = args.buffer;
    this.bytes = args.bytes;
    this.owner = args.owner;
    this.kind = args.kind;
    this.label = args.label;
    this.#ledger = args.ledger;
    this.#limit = args.limit;
    this.#locker = args.locker;
  }

  get released(): boolean {
    return this.#released;
  }

  get ownerKind(): OwnerKind {
    return this.owner.kind;
  }

  /** Moves `footprint` bytes of this slab from slack into `category` (one region). */
  charge(category: Category, requested: number, footprint: number): void {
    if (this.#released) throw new InternalError(`slab '${this.label}' was released`);
    this.#ledger.charge(this.owner, category, requested, footprint);
    const c = this.#charges.get(category);
    if (c === undefined) this.#charges.set(category, { requested, footprint, regions: 1 });
    else {
      c.requested += requested;
      c.footprint += footprint;
      c.regions += 1;
    }
  }

  /** Uncharges every region and returns the slab's bytes to the cap. Idempotent. */
  release(): void {
    if (this.#released) return;
    if (this.#locker !== undefined) {
      const r = this.#locker.unlock(new Uint8Array(this.buffer, 0, this.bytes));
      if (!r.ok) throw new AllocationError(`slab '${this.label}': munlock failed: ${r.message}`);
    }
    uncharge(this.#ledger, this.#limit, this.owner, this.kind, this.bytes, this.#charges);
    this.#charges.clear();
    this.#released = true;
  }

  /** Its charges as plain data (see SlabRecord). */
  record(): SlabRecord {
    return {
      owner: { kind: this.owner.kind, index: this.owner.index },
      kind: this.kind,
      bytes: this.bytes,
      label: this.label,
      charges: [...this.#charges].map(([k, c]) => [k, { ...c }]),
    };
  }
}
