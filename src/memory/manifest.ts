import type { FootprintSettings } from './footprint.js';
import type { Category, OwnerKind } from './layout.js';
import { apportion, type CategoryUsage, MEMORY_SCHEMA, type MemorySnapshot } from './snapshot.js';

/** One stage's planned workspace (filled in by the planner). */
export interface PlanSummary {
  highWater: number;
  lowerBound: number;
  carved: number;
}

/** The versioned `voxslab.memory/v1` document. */
export interface MemoryManifest {
  schema: typeof MEMORY_SCHEMA;
  /** What the manifest was made for (a planned configuration), when not a live process. */
  configuration?: Record<string, unknown>;
  /** Parts of the runtime not yet covered by plans, so the totals are read for what they are. */
  pending?: string[];
  policy: {
    /** Shared storage is charged once, to the owner that created it; borrowers are listed. */
    charging: 'once-to-creator';
    footprint: FootprintSettings;
  };
  owners: Record<
    string,
    {
      kind: OwnerKind;
      held: number;
      peak: number;
      sealed: boolean;
      passSlots: number;
      borrowers: string[];
      categories: Record<Category, CategoryUsage>;
    }
  >;
  /** Derived view: each owner's bytes split evenly with its borrowers. Sums to totals.current. */
  apportioned: Record<string, number>;
  plans: Record<string, PlanSummary>;
  totals: {
    current: number;
    peak: number;
    limit: number;
    reserved: number;
    slab: number;
    pinned: number;
    /** Host-heap bytes of native engines (echo cancellation, VAD), measured when made. */
    native: number;
    /** Resident bytes of the slabs this thread holds (mincore), or null when not measured. */
    resident: number | null;
    virtualAlias: number;
  };
  allocations: {
    beforeReadiness: number;
    afterReadiness: { attempts: number; bytes: number };
    refusals: number;
    allocatorFailures: number;
  };
}

export function toManifest(
  snapshot: MemorySnapshot,
  extra: { footprint: FootprintSettings; resident?: number | null; plans?: Record<string, PlanSummary> },
): MemoryManifest {
  const owners: MemoryManifest['owners'] = {};
  for (const o of snapshot.owners) {
    owners[o.name] = {
      kind: o.kind,
      held: o.held,
      peak: o.peak,
      sealed: o.sealed,
      passSlots: o.passSlots,
      borrowers: o.borrowers,
      categories: o.categories,
    };
  }
  return {
    schema: MEMORY_SCHEMA,
    policy: { charging: 'once-to-creator', footprint: extra.footprint },
    owners,
    apportioned: apportion(snapshot),
    plans: extra.plans ?? {},
    totals: {
      current: snapshot.held.total,
      peak: snapshot.peak,
      limit: snapshot.limit,
      reserved: snapshot.reserved,
      slab: snapshot.held.slab,
      pinned: snapshot.held.pinned,
      native: snapshot.held.native,
      resident: extra.resident ?? null,
      virtualAlias: snapshot.virtualAlias,
    },
    allocations: snapshot.allocations,
  };
}
