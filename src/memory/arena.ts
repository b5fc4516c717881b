import { AllocationError, ArgumentError, CorruptionError, InternalError, ReadinessError } from '../errors.js';
import { alignmentLead, alignUp, checkSize, type FootprintPolicy } from './footprint.js';
import { categoryIndex, type Category } from './layout.js';
import type { Ledger } from './ledger.js';
import type { Plan } from './planner.js';
import type { Slab } from './slab.js';

export type TypedArray =
  | Int8Array
  | Uint8Array
  | Int16Array
  | Uint16Array
  | Int32Array
  | Uint32Array
  | Float32Array
  | Float64Array
  | BigInt64Array
  | BigUint64Array;

export interface TypedArrayConstructor<T extends TypedArray> {
  new (buffer: SharedArrayBuffer, byteOffset: number, length: number): T;
  new (length: number): T;
  readonly BYTES_PER_ELEMENT: number;
  readonly name: string;
}

/** Where a carved region lies in its arena. */
export interface Region {
  readonly name: string;
  readonly category: Category;
  /** From the arena's base (Arena.base): the same in a dry run and in memory. */
  readonly offset: number;
  /** Payload bytes asked for. */
  readonly bytes: number;
  /** Bytes the carve advanced the arena by (alignment and trailing red zone included). */
  readonly footprint: number;
}

/** A plan carved into an arena: one region, one view per planned buffer. */
export interface PlannedRegion {
  readonly name: string;
  readonly plan: Plan;
  readonly region: Region;
  readonly views: Readonly<Record<string, TypedArray>>;
  /** For the manifest: carved always equals highWater. */
  readonly summary: { readonly highWater: number; readonly lowerBound: number; readonly carved: number };
}

/** The first damaged guard band: the regions on either side of it and the byte that changed. */
export interface RedZoneFault {
  before: string;
  after: string;
  offset: number;
  expected: number;
  found: number;
}

const ARENA_START = '(arena start)';
const ARENA_END = '(end of carved space)';

/** Canary byte for absolute slab offset `i`: position-dependent so a repeated byte is caught. */
export function canaryByte(i: number): number {
  return (0xa5 ^ Math.imul(i, 0x9e) ^ (i >>> 8)) & 0xff;
}

/** Regions of an unbacked arena up to this size get heap views (constructors fill their tables); larger ones, empty views. */
export const UNBACKED_VIEW_LIMIT = 1 << 20;

function unbackedView<T extends TypedArray>(type: TypedArrayConstructor<T>, length: number): T {
  return new type(length * type.BYTES_PER_ELEMENT <= UNBACKED_VIEW_LIMIT ? length : 0);
}

/** The offset of a carved plan region (its last region), backed or not. */
function region0(arena: Arena, bytes: Uint8Array): number {
  return arena.backed ? bytes.byteOffset : (arena.regions[arena.regions.length - 1] as Region).offset;
}

/**
 * Regions carved in order from one slab, each exposed as a typed view made once at carve time.
 * With a red zone in the policy, a guard band filled with a canary pattern sits at the arena
 * start and after every region; `checkRedZones()` names the first damaged boundary.
 *
 * `seal()` is readiness: any later carve is refused with ReadinessError and counted as a
 * post-readiness attempt in the ledger.
 *
 * An unbacked arena (MemoryDomain.createUnbackedArena) sizes without memory: offsets, footprints
 * and charges are computed exactly as for a real one, but its views are heap arrays (empty
 * above UNBACKED_VIEW_LIMIT) that no one keeps.
 *
 * Thread contract: carve/seal from the creating thread during setup (they allocate the view
 * objects). The views may be used from any thread holding the slab's buffer.
 */
export class Arena {
  readonly name: string;
  readonly slab: Slab;
  readonly policy: FootprintPolicy;
  readonly #ledger: Ledger;
  readonly #regions: Region[] = [];
  readonly #names = new Set<string>();
  readonly #bytes: Uint8Array;
  readonly #backed: boolean;
  // Where the carved space starts: the first byte at an address aligned to the policy (0 unbacked).
  readonly #base: number;
  #cursor: number;
  #sealed = false;

  /** @internal */
  constructor(name: string, slab: Slab, policy: FootprintPolicy, ledger: Ledger) {
    this.name = name;
    this.slab = slab;
    this.policy = policy;
    this.#ledger = ledger;
    this.#backed = slab.buffer.byteLength >= slab.bytes;
    this.#bytes = this.#backed ? new Uint8Array(slab.buffer, 0, slab.bytes) : new Uint8Array(0);
    this.#base = this.#backed ? alignmentLead(this.#bytes, policy.alignment) : 0;
    this.#cursor = this.#base;
    const guard = policy.guardBytes;
    if (guard > 0) {
      if (this.#base + guard > slab.bytes) throw new ArgumentError(`arena '${name}': slab too small for its leading red zone`);
      this.#fillGuard(this.#base, this.#base + guard);
      this.#cursor += guard;
    }
  }

  get sealed(): boolean {
    return this.#sealed;
  }

  /**
   * Bytes carved so far, guards and the policy's whole lead included (the bytes an arena of the
   * same carves needs, whatever its buffer's address: a dry run's figure is a real arena's).
   */
  get used(): number {
    return this.#cursor - this.#base + this.policy.leadBytes;
  }

  get capacity(): number {
    return this.slab.bytes;
  }

  /** The slab offset where the carved space starts: its first byte at an address aligned to the policy (0 unbacked). */
  get base(): number {
    return this.#base;
  }

  get regions(): readonly Region[] {
    return this.#regions;
  }

  /**
   * Carves `length` elements of `type` for `category` and returns the view. The view starts at
   * a policy-aligned offset; the arena advances by at most `policy.regionFootprint(bytes)`.
   */
  carve<T extends TypedArray>(name: string, category: Category, type: TypedArrayConstructor<T>, length: number): T {
    if (typeof name !== 'string' || name.length === 0) throw new ArgumentError(`arena '${this.name}': region name must be a non-empty string`);
    if (typeof type !== 'function' || !Number.isInteger(type.BYTES_PER_ELEMENT)) {
      throw new ArgumentError(`arena '${this.name}': region '${name}' needs a TypedArray constructor`);
    }
    checkSize(length, `arena '${this.name}' region '${name}' length`);
    const bytes = length * type.BYTES_PER_ELEMENT;
    const footprint = this.policy.regionFootprint(bytes, `arena '${this.name}' region '${name}'`);
    // Sealing the owner seals its arenas too, those made before the seal included.
    if (this.#sealed || this.#ledger.isSealed(this.slab.owner)) {
      this.#ledger.countAfterReadiness(footprint);
      throw new ReadinessError(`arena '${this.name}' is sealed (ready); carving region '${name}' (${bytes} bytes) after readiness is refused`);
    }
    if (categoryIndex(category) < 0 || category === 'slack') {
      throw new ArgumentError(`arena '${this.name}' region '${name}': '${String(category)}' is not a region category`);
    }
    if (this.#names.has(name)) throw new ArgumentError(`arena '${this.name}': region '${name}' is carved already`);
    const start = this.#cursor;
    const alignedEnd = start + alignUp(bytes, this.policy.alignment);
    const next = alignedEnd + this.policy.guardBytes;
    if (next > this.slab.bytes) {
      throw new AllocationError(`arena '${this.name}': region '${name}' needs ${next - start} bytes but ${this.slab.bytes - start} are left`);
    }
    const view = this.#backed ? new type(this.slab.buffer, start, length) : unbackedView(type, length);
    if (this.policy.guardBytes > 0) {
      // Alignment padding belongs to the guard band so an overrun into it is caught too.
      this.#fillGuard(start + bytes, next);
    }
    this.slab.charge(category, bytes, next - start);
    this.#cursor = next;
    this.#names.add(name);
    this.#regions.push(Object.freeze({ name, category, offset: start - this.#base, bytes, footprint: next - start }));
    return view;
  }

  /**
   * Carves one region of exactly `plan.highWater` bytes and exposes every planned buffer as a
   * typed view at its planned offset inside it (`types` picks each view's element type,
   * Float32Array by default). Buffers whose lifetimes do not overlap share bytes, as the plan
   * proved safe. The carved bytes equal the plan's high-water; anything else is an error.
   */
  carvePlan(name: string, category: Category, plan: Plan, types: Readonly<Record<string, TypedArrayConstructor<TypedArray>>> = {}): PlannedRegion {
    if (plan === null || typeof plan !== 'object' || !Array.isArray(plan.buffers)) {
      throw new ArgumentError(`arena '${this.name}': carvePlan needs a plan from plan()`);
    }
    if (plan.alignment > this.policy.alignment) {
      throw new ArgumentError(`arena '${this.name}': plan '${name}' is aligned to ${plan.alignment} bytes, more than the arena's ${this.policy.alignment}`);
    }
    for (const key of Object.keys(types)) {
      if (!plan.buffers.some((b) => b.name === key)) throw new ArgumentError(`arena '${this.name}': plan '${name}' has no buffer '${key}'`);
    }
    const bytes = this.carve(name, category, Uint8Array, plan.highWater);
    const views: Record<string, TypedArray> = {};
    for (const b of plan.buffers) {
      const type = types[b.name] ?? Float32Array;
      if (b.bytes % type.BYTES_PER_ELEMENT !== 0 || (region0(this, bytes) + b.offset) % type.BYTES_PER_ELEMENT !== 0) {
        throw new ArgumentError(`arena '${this.name}': buffer '${b.name}' (${b.bytes} bytes at ${b.offset}) cannot be a ${type.name}`);
      }
      views[b.name] = this.#backed
        ? new type(this.slab.buffer, bytes.byteOffset + b.offset, b.bytes / type.BYTES_PER_ELEMENT)
        : unbackedView(type, b.bytes / type.BYTES_PER_ELEMENT);
    }
    const region = this.#regions[this.#regions.length - 1] as Region;
    if (region.bytes !== plan.highWater) {
      throw new InternalError(`arena '${this.name}': carved ${region.bytes} bytes for plan '${name}', high-water ${plan.highWater}`);
    }
    return Object.freeze({
      name,
      plan,
      region,
      views: Object.freeze(views),
      summary: Object.freeze({ highWater: plan.highWater, lowerBound: plan.lowerBound, carved: region.bytes }),
    });
  }

  /** Readiness: later carves are refused and counted. */
  seal(): void {
    this.#sealed = true;
  }

  /** The first damaged guard band, or null when every canary is intact. */
  checkRedZones(): RedZoneFault | null {
    if (this.policy.guardBytes === 0 || !this.#backed) return null;
    let from = this.#base;
    let before = ARENA_START;
    for (let r = 0; r <= this.#regions.length; r++) {
      const region = this.#regions[r];
      const to = region === undefined ? this.#cursor : this.#base + region.offset;
      for (let i = from; i < to; i++) {
        const expected = canaryByte(i);
        const found = this.#bytes[i] as number;
        if (found !== expected) {
          return { before, after: region === undefined ? ARENA_END : region.name, offset: i, expected, found };
        }
      }
      if (region !== undefined) {
        from = this.#base + region.offset + region.bytes;
        before = region.name;
      }
    }
    return null;
  }

  /** Throws CorruptionError naming the boundary when a red zone was overwritten. */
  assertRedZones(): void {
    const f = this.checkRedZones();
    if (f !== null) {
      throw new CorruptionError(
        `arena '${this.name}': red zone between '${f.before}' and '${f.after}' overwritten at offset ${f.offset} ` +
          `(expected 0x${f.expected.toString(16)}, found 0x${f.found.toString(16)})`,
      );
    }
  }

  /** Releases the arena's slab (all its regions' charges). The views must not be used after. */
  release(): void {
    this.#sealed = true;
    this.slab.release();
  }

  /** False for an unbacked (sizing) arena: offsets and charges are real, views are not. */
  get backed(): boolean {
    return this.#backed;
  }

  #fillGuard(from: number, to: number): void {
    if (!this.#backed) return;
    for (let i = from; i < to; i++) this.#bytes[i] = canaryByte(i);
  }
}
