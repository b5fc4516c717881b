import { totalmem } from 'node:os';
import { Arena } from './arena.js';
import { AllocationError, ArgumentError } from '../errors.js';
import { FootprintPolicy, type FootprintOptions, type FootprintSettings } from './footprint.js';
import { SharedCounters } from './counters.js';
import { adoptCategories, categoryNames, kDefaultOwners, kLimit, type Category, type OwnerKind } from './layout.js';
import { Ledger, type Owner } from './ledger.js';
import { AllocationLimit, limitFromEnvironment } from './limit.js';
import { toManifest, type MemoryManifest, type PlanSummary } from './manifest.js';
import { type Allocator, type PageLocker, releaseSlabRecord, Slab, type SlabRecord, sharedArrayBufferAllocator } from './slab.js';
import type { MemorySnapshot } from './snapshot.js';
import { parseByteSize } from './sizes.js';
import { native } from '../native.js';

export interface MemoryDomainOptions {
  /** The cap: bytes or a size string. Default: VOXSLAB_MEMORY_LIMIT, else the machine's RAM. */
  limit?: number | string;
  /** Sizing policy (captured once). */
  policy?: FootprintPolicy | FootprintOptions;
  /** Slab source; tests inject a CountingAllocator. */
  allocator?: Allocator;
  /** Page locking for pinned slabs; default the native addon's mlock. */
  pageLocker?: PageLocker;
  /** Most owners (1..kMaxOwners). Default kDefaultOwners. */
  ownerCapacity?: number;
  /**
   * A planning domain: every slab and arena is charged exactly as a real one, but none is
   * allocated (see createUnbackedArena); native holds charge their bound and make nothing.
   */
  unbacked?: boolean;
}

/** What a worker needs to join a domain; structured-cloneable (postMessage / workerData). */
export interface SharedMemoryDomain {
  readonly counters: SharedArrayBuffer;
  readonly policy: FootprintSettings;
  /** The creator's category order (see memory/layout.ts). */
  readonly categories: readonly string[];
}

export interface SlabOptions {
  /** Lock the slab's pages in RAM; its bytes count as pinned rather than slab bytes. */
  pinned?: boolean;
  /**
   * Ask the OS for transparent huge pages before anything touches the slab (a hint, for large
   * slabs streamed whole, like the weights image): fewer page faults and TLB misses, and where
   * the machine is virtualised, no fault on its first read from user space.
   */
  hugePages?: boolean;
  label?: string;
}

export interface ArenaOptions extends SlabOptions {
  /** Payload capacity; rounded up to whole pages for the slab. */
  bytes: number;
}

const nativeLocker: PageLocker = Object.freeze({
  lock: (view: Uint8Array) => native.lockRange(view),
  unlock: (view: Uint8Array) => native.unlockRange(view),
});

const OPTION_KEYS = new Set(['limit', 'policy', 'allocator', 'pageLocker', 'ownerCapacity', 'unbacked']);

function checkOptionKeys(options: object, allowed: Set<string>, what: string): void {
  for (const k of Object.keys(options)) {
    if (!allowed.has(k)) throw new ArgumentError(`${what}: unknown option '${k}' (known: ${[...allowed].join(', ')})`);
  }
}

function checkAllocator(a: unknown): Allocator {
  if (a === null || typeof a !== 'object' || typeof (a as Allocator).allocate !== 'function') {
    throw new ArgumentError("memory option 'allocator' must be an object with an allocate(bytes) method");
  }
  return a as Allocator;
}

function checkLocker(l: unknown): PageLocker {
  if (l === null || typeof l !== 'object' || typeof (l as PageLocker).lock !== 'function' || typeof (l as PageLocker).unlock !== 'function') {
    throw new ArgumentError("memory option 'pageLocker' must be an object with lock(view) and unlock(view) methods");
  }
  return l as PageLocker;
}

/**
 * The process-wide memory facade: one cap, one ledger, one sizing policy, shared by every
 * thread. The main thread creates it; workers `attach` to `share()`'s result and then reserve
 * against the same counters.
 *
 * Every slab goes reserve → allocate → commit (or refund): a refused reservation never reaches
 * the allocator, and a failed allocation returns exactly what it reserved.
 *
 * Thread contract: one MemoryDomain object per thread; setup-time methods may allocate.
 */
const UNBACKED = new SharedArrayBuffer(0);

/** A native engine's host-heap bytes, held under the cap (MemoryDomain.holdNative). */
export interface NativeHold<T> {
  readonly value: T;
  readonly bytes: number;
  release(): void;
}

export class MemoryDomain {
  readonly policy: FootprintPolicy;
  readonly ledger: Ledger;
  readonly limit: AllocationLimit;
  readonly #allocator: Allocator;
  readonly #locker: PageLocker;
  readonly #slabs = new Set<Slab>();
  /** A planning domain (MemoryDomainOptions.unbacked): charges without memory. */
  readonly unbacked: boolean;

  private constructor(ledger: Ledger, policy: FootprintPolicy, allocator: Allocator, locker: PageLocker, unbacked = false) {
    this.unbacked = unbacked;
    this.ledger = ledger;
    this.limit = new AllocationLimit(ledger);
    this.policy = policy;
    this.#allocator = allocator;
    this.#locker = locker;
  }

  static create(options: MemoryDomainOptions = {}): MemoryDomain {
    if (options === null || typeof options !== 'object') throw new ArgumentError('memory options must be an object');
    checkOptionKeys(options, OPTION_KEYS, 'memory options');
    const policy = options.policy instanceof FootprintPolicy ? options.policy : new FootprintPolicy(options.policy ?? {});
    const allocator = checkAllocator(options.allocator ?? sharedArrayBufferAllocator);
    const locker = checkLocker(options.pageLocker ?? nativeLocker);
    let limit: number;
    if (options.limit === undefined) limit = limitFromEnvironment(totalmem());
    else if (typeof options.limit === 'string') limit = parseByteSize(options.limit, "memory option 'limit'");
    else limit = options.limit;
    if (options.unbacked !== undefined && typeof options.unbacked !== 'boolean') throw new ArgumentError("memory option 'unbacked' must be a boolean");
    const ledger = Ledger.create(options.ownerCapacity ?? kDefaultOwners);
    const domain = new MemoryDomain(ledger, policy, allocator, locker, options.unbacked === true);
    domain.limit.setLimit(limit);
    return domain;
  }

  /** Joins a domain created in another thread. */
  static attach(shared: SharedMemoryDomain, options: { allocator?: Allocator; pageLocker?: PageLocker } = {}): MemoryDomain {
    if (shared === null || typeof shared !== 'object' || !(shared.counters instanceof SharedArrayBuffer)) {
      throw new ArgumentError('attach expects the object returned by MemoryDomain.share()');
    }
    checkOptionKeys(options, new Set(['allocator', 'pageLocker']), 'attach options');
    if (!Array.isArray(shared.categories)) throw new ArgumentError('attach expects the object returned by MemoryDomain.share()');
    adoptCategories(shared.categories);
    const ledger = new Ledger(new SharedCounters(shared.counters));
    if (ledger.counters.get(kLimit) === 0) throw new ArgumentError('attach: the shared block has no limit set');
    return new MemoryDomain(
      ledger,
      new FootprintPolicy(shared.policy),
      checkAllocator(options.allocator ?? sharedArrayBufferAllocator),
      checkLocker(options.pageLocker ?? nativeLocker),
    );
  }

  share(): SharedMemoryDomain {
    if (this.unbacked) throw new ArgumentError('a planning (unbacked) domain cannot be shared with workers');
    return Object.freeze({ counters: this.ledger.counters.buffer, policy: this.policy.settings(), categories: [...categoryNames()] });
  }

  owner(kind: OwnerKind, index = 0): Owner {
    return this.ledger.owner(kind, index);
  }

  /**
   * A slab of at least `bytes` (rounded up to whole pages) charged to `owner`.
   * Throws MemoryLimitError (allocator not called), AllocationError (reservation refunded),
   * or ReadinessError when the owner is sealed (counted as a post-readiness attempt).
   */
  createSlab(owner: Owner, bytes: number, options: SlabOptions = {}): Slab {
    const label = options.label ?? `${owner?.name ?? '?'} slab`;
    if (this.unbacked) return this.#unbackedSlab(owner, bytes, label, options.pinned === true);
    const footprint = this.policy.slabFootprint(bytes, `slab '${label}'`);
    const what = `slab '${label}'`;
    const pinned = options.pinned === true;
    // The seal is checked inside the reservation's and the commit's write sections.
    this.limit.reserve(owner, footprint, what);
    let buffer: SharedArrayBuffer;
    try {
      buffer = this.#allocator.allocate(footprint);
      // Exactly the size asked for: a larger buffer would hold bytes the cap does not count.
      if (!(buffer instanceof SharedArrayBuffer) || buffer.byteLength !== footprint) {
        throw new AllocationError(
          `allocator returned ${buffer instanceof SharedArrayBuffer ? `${buffer.byteLength} bytes` : 'no SharedArrayBuffer'} for ${footprint}`,
        );
      }
    } catch (cause) {
      this.limit.refund(footprint);
      throw new AllocationError(
        `allocating slab '${label}' (${footprint} bytes) for '${owner.name}' failed: ${cause instanceof Error ? cause.message : String(cause)}`,
        { cause },
      );
    }
    if (options.hugePages === true) native.adviseHugePages(new Uint8Array(buffer, 0, footprint));
    if (pinned) {
      let r: { ok: boolean; errno: number; message: string };
      try {
        r = this.#locker.lock(new Uint8Array(buffer, 0, footprint));
      } catch (cause) {
        this.limit.refund(footprint);
        throw new AllocationError(`locking slab '${label}' (${footprint} bytes) in RAM failed: the page locker threw`, { cause });
      }
      if (!r.ok) {
        this.limit.refund(footprint);
        throw new AllocationError(`locking slab '${label}' (${footprint} bytes) in RAM failed: ${r.message} (errno ${r.errno})`);
      }
    }
    try {
      this.limit.commit(owner, pinned ? 'pinned' : 'slab', footprint, what);
    } catch (error) {
      if (pinned) this.#locker.unlock(new Uint8Array(buffer, 0, footprint));
      throw error;
    }
    const slab = new Slab({
      buffer,
      bytes: footprint,
      owner,
      kind: pinned ? 'pinned' : 'slab',
      label,
      ledger: this.ledger,
      limit: this.limit,
      locker: pinned ? this.#locker : undefined,
    });
    this.#slabs.add(slab);
    return slab;
  }

  /** An arena over a new slab with room for `bytes` of carved regions (guards included). */
  createArena(owner: Owner, name: string, options: ArenaOptions): Arena {
    if (typeof name !== 'string' || name.length === 0) throw new ArgumentError('arena name must be a non-empty string');
    if (options === null || typeof options !== 'object') throw new ArgumentError(`arena '${name}': options must be an object`);
    const slabOptions: SlabOptions = { label: options.label ?? name };
    if (options.pinned !== undefined) slabOptions.pinned = options.pinned;
    if (options.hugePages !== undefined) slabOptions.hugePages = options.hugePages;
    const slab = this.createSlab(owner, Math.max(options.bytes, 1), slabOptions);
    return new Arena(name, slab, this.policy, this.ledger);
  }

  #unbackedSlab(owner: Owner, bytes: number, label: string, pinned = false): Slab {
    const footprint = this.policy.slabFootprint(Math.max(bytes, 1), `slab '${label}'`);
    const kind = pinned ? 'pinned' : 'slab';
    this.limit.reserve(owner, footprint, `slab '${label}'`);
    this.limit.commit(owner, kind, footprint, `slab '${label}'`);
    return new Slab({ buffer: UNBACKED, bytes: footprint, owner, kind, label, ledger: this.ledger, limit: this.limit, locker: undefined });
  }

  /**
   * An arena that sizes without memory: up to `bytes` of regions whose offsets, footprints and
   * charges (to this domain's ledger and cap) are exactly a real arena's, but no slab is
   * allocated (see Arena). For dry runs that learn what a constructor carves.
   */
  createUnbackedArena(owner: Owner, name: string, bytes: number): Arena {
    return new Arena(name, this.#unbackedSlab(owner, bytes, name), this.policy, this.ledger);
  }

  /** Releases a slab this thread created. */
  releaseSlab(slab: Slab): void {
    slab.release();
    this.#slabs.delete(slab);
  }

  /**
   * Host-heap memory of a native engine (echo cancellation, a VAD), held like a slab: `bound`
   * bytes are reserved under the cap before `make` runs; what the engine measured it took
   * (`bytesOf`, at most `bound`) is committed to `owner` and charged to `category`, the rest
   * refunded. A refusal or a failed `make` leaves nothing held. `release()` gives it back (call
   * it after freeing the engine).
   */
  holdNative<T>(owner: Owner, category: Category, bound: number, make: () => T, bytesOf: (value: T) => number, what = 'a native engine'): NativeHold<T> {
    if (this.unbacked) {
      make = () => null as T;
      bytesOf = () => bound;
    }
    this.limit.reserve(owner, bound, what);
    let value: T;
    let bytes: number;
    try {
      value = make();
      bytes = bytesOf(value);
      if (!Number.isSafeInteger(bytes) || bytes < 0 || bytes > bound)
        throw new AllocationError(`${what} measured ${bytes} bytes; at most ${bound} were reserved for it`);
    } catch (error) {
      this.limit.refund(bound);
      throw error;
    }
    this.limit.unreserve(bound - bytes);
    this.limit.commit(owner, 'native', bytes, what);
    this.ledger.charge(owner, category, bytes, bytes);
    let held = true;
    return {
      value,
      bytes,
      release: () => {
        if (!held) return;
        held = false;
        this.ledger.uncharge(owner, category, bytes, bytes, 1);
        this.limit.release(owner, 'native', bytes);
      },
    };
  }

  /**
   * Returns to the cap the charges of a slab created by a thread that has exited (its Slab
   * object went with it). Call it once per record, only after that thread is gone.
   */
  releaseOrphan(record: SlabRecord): void {
    releaseSlabRecord(this.ledger, this.limit, record);
  }

  /** Resident bytes (mincore) of the live slabs this thread created. */
  residentBytes(): number {
    let total = 0;
    for (const s of this.#slabs) {
      if (s.released) {
        this.#slabs.delete(s);
        continue;
      }
      total += native.residentBytes(new Uint8Array(s.buffer, 0, s.bytes));
    }
    return total;
  }

  snapshot(): MemorySnapshot {
    return this.ledger.snapshot();
  }

  manifest(options: { plans?: Record<string, PlanSummary>; measureResident?: boolean } = {}): MemoryManifest {
    const extra: Parameters<typeof toManifest>[1] = { footprint: this.policy.settings() };
    if (options.plans !== undefined) extra.plans = options.plans;
    if (options.measureResident !== false) extra.resident = this.residentBytes();
    return toManifest(this.snapshot(), extra);
  }
}
