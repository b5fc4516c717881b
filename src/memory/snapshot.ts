import {
  categoryNames,
  type Category,
  categorySlot,
  kAfterReadinessAttempts,
  kAfterReadinessBytes,
  kAllocationsBeforeReadiness,
  kAllocatorFailures,
  kFootprint,
  kLimit,
  kLiveSlabs,
  kOwnerLender,
  kOwnerCount,
  kOwnerHeld,
  kOwnerIndex,
  kOwnerKind,
  kOwnerPassSlots,
  kOwnerPeak,
  kOwnerSealed,
  kPeak,
  kPinnedHeld,
  kNativeHeld,
  kRefusals,
  kRegions,
  kRequested,
  kReserved,
  kSlabHeld,
  kVirtualAlias,
  OWNER_KINDS,
  type OwnerKind,
  ownerBase,
} from './layout.js';

export const MEMORY_SCHEMA = 'voxslab.memory/v1';

export interface CategoryUsage {
  requested: number;
  footprint: number;
  regions: number;
}

export interface OwnerSnapshot {
  name: string;
  kind: OwnerKind;
  index: number;
  sealed: boolean;
  /** Bytes charged to this owner, slabs and native engines (the sum of its categories' footprints). */
  held: number;
  peak: number;
  passSlots: number;
  /** Owners that use this owner's storage without being charged for it. */
  borrowers: string[];
  /** Only categories with a non-zero count are listed. */
  categories: Record<Category, CategoryUsage>;
}

/** One consistent reading of all shared accounting counters. */
export interface MemorySnapshot {
  schema: typeof MEMORY_SCHEMA;
  /** Seqlock sequence number the reading belongs to. */
  sequence: number;
  limit: number;
  /** Held bytes: SharedArrayBuffer slabs, page-locked slabs, and native engines' host heap. */
  held: { slab: number; pinned: number; native: number; total: number };
  reserved: number;
  peak: number;
  virtualAlias: number;
  liveSlabs: number;
  allocations: {
    beforeReadiness: number;
    afterReadiness: { attempts: number; bytes: number };
    refusals: number;
    allocatorFailures: number;
  };
  owners: OwnerSnapshot[];
}

const at = (raw: Float64Array, i: number): number => raw[i] ?? 0;

/** Builds a snapshot object from a raw counter copy made by Ledger.readRaw. */
export function decodeSnapshot(raw: Float64Array, sequence: number): MemorySnapshot {
  const n = at(raw, kOwnerCount);
  const names: string[] = [];
  for (let s = 0; s < n; s++) {
    const b = ownerBase(s);
    names.push(`${OWNER_KINDS[at(raw, b + kOwnerKind) - 1] ?? 'unknown'}/${at(raw, b + kOwnerIndex)}`);
  }
  // Each owner records whom it borrows from; the lender lists its borrowers in slot order.
  const borrowers: string[][] = names.map(() => []);
  for (let s = 0; s < n; s++) {
    const lender = at(raw, ownerBase(s) + kOwnerLender) - 1;
    if (lender >= 0) borrowers[lender]?.push(names[s]!);
  }
  const owners: OwnerSnapshot[] = [];
  for (let s = 0; s < n; s++) {
    const b = ownerBase(s);
    const categories: Record<Category, CategoryUsage> = {};
    const categoryList = categoryNames();
    for (let c = 0; c < categoryList.length; c++) {
      const requested = at(raw, categorySlot(s, c, kRequested));
      const footprint = at(raw, categorySlot(s, c, kFootprint));
      const regions = at(raw, categorySlot(s, c, kRegions));
      if (requested !== 0 || footprint !== 0 || regions !== 0) {
        categories[categoryList[c] as Category] = { requested, footprint, regions };
      }
    }
    owners.push({
      name: names[s] as string,
      kind: OWNER_KINDS[at(raw, b + kOwnerKind) - 1] as OwnerKind,
      index: at(raw, b + kOwnerIndex),
      sealed: at(raw, b + kOwnerSealed) === 1,
      held: at(raw, b + kOwnerHeld),
      peak: at(raw, b + kOwnerPeak),
      passSlots: at(raw, b + kOwnerPassSlots),
      borrowers: borrowers[s]!,
      categories,
    });
  }
  const slab = at(raw, kSlabHeld);
  const pinned = at(raw, kPinnedHeld);
  const native = at(raw, kNativeHeld);
  return {
    schema: MEMORY_SCHEMA,
    sequence,
    limit: at(raw, kLimit),
    held: { slab, pinned, native, total: slab + pinned + native },
    reserved: at(raw, kReserved),
    peak: at(raw, kPeak),
    virtualAlias: at(raw, kVirtualAlias),
    liveSlabs: at(raw, kLiveSlabs),
    allocations: {
      beforeReadiness: at(raw, kAllocationsBeforeReadiness),
      afterReadiness: { attempts: at(raw, kAfterReadinessAttempts), bytes: at(raw, kAfterReadinessBytes) },
      refusals: at(raw, kRefusals),
      allocatorFailures: at(raw, kAllocatorFailures),
    },
    owners,
  };
}

/**
 * The apportioned view: each owner's held bytes divided evenly among the owner and its
 * borrowers (remainders stay with the owner), so it still sums to the process total.
 * Derived from a snapshot; the ledger itself charges shared storage once, to its creator.
 */
export function apportion(snapshot: MemorySnapshot): Record<string, number> {
  const out: Record<string, number> = {};
  for (const o of snapshot.owners) out[o.name] = 0;
  for (const o of snapshot.owners) {
    const share = Math.floor(o.held / (o.borrowers.length + 1));
    out[o.name] = (out[o.name] ?? 0) + o.held - share * o.borrowers.length;
    for (const b of o.borrowers) out[b] = (out[b] ?? 0) + share;
  }
  return out;
}
