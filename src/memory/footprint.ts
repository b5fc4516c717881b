import { constants as bufferConstants } from 'node:buffer';
import { ArgumentError } from '../errors.js';
import { native } from '../native.js';

export interface FootprintOptions {
  /** Alignment of every carved region, bytes (power of two). Default 64 (a cache line). */
  alignment?: number;
  /** Page size that slabs are rounded up to. Default: the operating system's page size. */
  pageSize?: number;
  /** Guard bytes after each region and at the arena start, filled with a canary. Default 0. */
  redZone?: number;
  /** Largest slab the policy accepts. Default: the largest typed-array view Node can make. */
  maxSlabBytes?: number;
}

/** The options as captured: every field filled, frozen. */
export type FootprintSettings = Readonly<Required<FootprintOptions>>;

const isPowerOfTwo = (n: number): boolean => Number.isSafeInteger(n) && n > 0 && (n & (n - 1)) === 0 && n <= 2 ** 30;

/** Rounds `n` up to a multiple of the power-of-two `to`; `n` must be a safe integer. */
export function alignUp(n: number, to: number): number {
  const r = n % to;
  return r === 0 ? n : n + (to - r);
}

/**
 * The immutable sizing policy. It is captured once: the options object is copied and the
 * policy frozen, so a later change to the options cannot change a bound already handed out.
 *
 * `regionFootprint(n)` is a checked upper bound on the bytes a carve of `n` payload bytes
 * advances an arena by (alignment padding plus its trailing red zone); `slabFootprint(n)` is
 * the bytes a slab of `n` payload bytes really occupies (page rounding). Both are computed
 * before anything is allocated and reject negative, fractional, NaN and overflowing sizes.
 *
 * Thread contract: pure; any thread may call it; allocates only the error it throws.
 */
export class FootprintPolicy {
  readonly alignment: number;
  readonly pageSize: number;
  readonly redZone: number;
  readonly maxSlabBytes: number;

  constructor(options: FootprintOptions = {}) {
    if (options === null || typeof options !== 'object') {
      throw new ArgumentError(`footprint options must be an object, got ${options === null ? 'null' : typeof options}`);
    }
    const alignment = options.alignment ?? 64;
    const pageSize = options.pageSize ?? native.pageSize();
    const redZone = options.redZone ?? 0;
    const maxSlabBytes = options.maxSlabBytes ?? bufferConstants.MAX_LENGTH;
    if (!isPowerOfTwo(alignment)) {
      throw new ArgumentError(`footprint option 'alignment' must be a power of two between 1 and 2^30, got ${String(alignment)}`);
    }
    if (!isPowerOfTwo(pageSize)) {
      throw new ArgumentError(`footprint option 'pageSize' must be a power of two between 1 and 2^30, got ${String(pageSize)}`);
    }
    if (pageSize < alignment) {
      throw new ArgumentError(`footprint option 'pageSize' (${pageSize}) must be at least 'alignment' (${alignment})`);
    }
    if (!Number.isSafeInteger(redZone) || redZone < 0 || redZone > 2 ** 20) {
      throw new ArgumentError(`footprint option 'redZone' must be an integer from 0 to 1048576 bytes, got ${String(redZone)}`);
    }
    if (!Number.isSafeInteger(maxSlabBytes) || maxSlabBytes < pageSize) {
      throw new ArgumentError(`footprint option 'maxSlabBytes' must be an integer of at least one page, got ${String(maxSlabBytes)}`);
    }
    this.alignment = alignment;
    this.pageSize = pageSize;
    this.redZone = redZone;
    this.maxSlabBytes = maxSlabBytes;
    Object.freeze(this);
  }

  /** The captured settings, as a plain frozen object (for manifests and for workers). */
  settings(): FootprintSettings {
    return Object.freeze({
      alignment: this.alignment,
      pageSize: this.pageSize,
      redZone: this.redZone,
      maxSlabBytes: this.maxSlabBytes,
    });
  }

  /** Bytes of the guard band after each region (and at an arena's start): the red zone, aligned. */
  get guardBytes(): number {
    return alignUp(this.redZone, this.alignment);
  }

  /**
   * Bytes an arena may skip at its start so that its regions are `alignment`-aligned in memory,
   * not only within their slab: a SharedArrayBuffer's own bytes start wherever the allocator put
   * them (glibc: 16 bytes past a page). Arena sizes count them whatever the buffer's address.
   */
  get leadBytes(): number {
    return this.alignment - 1;
  }

  /** Upper bound on the arena bytes one carve of `requested` payload bytes consumes. */
  regionFootprint(requested: number, what = 'region'): number {
    checkSize(requested, what);
    const bound = requested + (this.alignment - 1) + this.guardBytes;
    if (!Number.isSafeInteger(bound)) {
      throw new ArgumentError(`${what}: ${requested} bytes overflow when rounded to the footprint policy`);
    }
    const out = alignUp(requested, this.alignment) + this.guardBytes;
    if (out > this.maxSlabBytes) {
      throw new ArgumentError(`${what}: footprint ${out} bytes exceeds the largest slab (${this.maxSlabBytes} bytes)`);
    }
    return out;
  }

  /** Arena payload bytes that hold regions of the given sizes, in order, with guards and the lead. */
  arenaBytes(sizes: readonly number[], what = 'arena'): number {
    let total = this.leadBytes + this.guardBytes;
    for (let i = 0; i < sizes.length; i++) {
      total += this.regionFootprint(sizes[i] as number, `${what} region ${i}`);
      if (!Number.isSafeInteger(total)) throw new ArgumentError(`${what}: total size overflows`);
    }
    return total;
  }

  /** Real backing of a slab of `requested` bytes: rounded up to whole pages. */
  slabFootprint(requested: number, what = 'slab'): number {
    checkSize(requested, what);
    if (requested === 0) throw new ArgumentError(`${what}: a slab must have at least one byte`);
    if (!Number.isSafeInteger(requested + this.pageSize - 1)) {
      throw new ArgumentError(`${what}: ${requested} bytes overflow when rounded to whole pages`);
    }
    const out = alignUp(requested, this.pageSize);
    if (out > this.maxSlabBytes) {
      throw new ArgumentError(`${what}: ${requested} bytes (${out} after page rounding) exceeds the largest slab (${this.maxSlabBytes} bytes)`);
    }
    return out;
  }
}

/** Bytes from the start of `view` to its first byte at an address that is a multiple of the power-of-two `alignment` (at most 2^30). */
export function alignmentLead(view: Uint8Array, alignment: number): number {
  return (alignment - (native.addressLow(view) % alignment)) % alignment;
}

/** Rejects anything but a non-negative safe integer byte count. */
export function checkSize(n: unknown, what: string): asserts n is number {
  if (typeof n !== 'number') throw new ArgumentError(`${what}: size must be a number, got ${typeof n}`);
  if (Number.isNaN(n)) throw new ArgumentError(`${what}: size is NaN`);
  if (!Number.isFinite(n)) throw new ArgumentError(`${what}: size must be finite, got ${n}`);
  if (!Number.isInteger(n)) throw new ArgumentError(`${what}: size must be a whole number of bytes, got ${n}`);
  if (n < 0) throw new ArgumentError(`${what}: size must not be negative, got ${n}`);
  if (!Number.isSafeInteger(n)) throw new ArgumentError(`${what}: size ${n} exceeds Number.MAX_SAFE_INTEGER`);
}
