import type { MemoryDomain } from './domain.js';
import type { FootprintPolicy } from './footprint.js';
import { ArgumentError } from '../errors.js';
import { categoryIndex, categoryNames, type Category, OWNER_KINDS, type OwnerKind } from './layout.js';
import { ownerName } from './ledger.js';
import { toManifest, type MemoryManifest, type PlanSummary } from './manifest.js';
import { MEMORY_SCHEMA, type MemorySnapshot, type OwnerSnapshot } from './snapshot.js';
import type { Arena } from './arena.js';

export interface RegionBlueprint {
  name: string;
  category: Category;
  bytes: number;
}

/** One arena an owner will hold: its regions in carve order. */
export interface ArenaBlueprint {
  owner: { kind: OwnerKind; index: number };
  name: string;
  regions: RegionBlueprint[];
  pinned?: boolean;
}

export interface Blueprint {
  arenas: ArenaBlueprint[];
  /** Owners that use another owner's storage without being charged (name → borrower names). */
  borrowers?: Record<string, string[]>;
  /** Pass slots per owner name. */
  passSlots?: Record<string, number>;
  plans?: Record<string, PlanSummary>;
}

function check(bp: Blueprint): void {
  if (bp === null || typeof bp !== 'object' || !Array.isArray(bp.arenas)) throw new ArgumentError('blueprint needs an arenas array');
  for (const a of bp.arenas) {
    if (!OWNER_KINDS.includes(a.owner.kind)) throw new ArgumentError(`blueprint arena '${a.name}': unknown owner kind '${a.owner.kind}'`);
    for (const r of a.regions) {
      if (categoryIndex(r.category) < 0 || r.category === 'slack') {
        throw new ArgumentError(`blueprint arena '${a.name}' region '${r.name}': bad category '${r.category}'`);
      }
    }
  }
}

/**
 * The manifest a blueprint would produce once realised, computed from the sizing policy
 * alone — no memory is allocated, so it works for configurations far larger than the machine.
 * It follows the same arithmetic as a live domain (region footprints, page-rounded slabs,
 * uncarved bytes as slack); a test realises small blueprints and compares the two.
 */
export function blueprintManifest(bp: Blueprint, policy: FootprintPolicy, limit: number): MemoryManifest {
  check(bp);
  const owners = new Map<string, OwnerSnapshot>();
  const order: string[] = [];
  const get = (kind: OwnerKind, index: number): OwnerSnapshot => {
    const name = ownerName(kind, index);
    let o = owners.get(name);
    if (o === undefined) {
      o = { name, kind, index, sealed: true, held: 0, peak: 0, passSlots: bp.passSlots?.[name] ?? 0, borrowers: [], categories: {} };
      owners.set(name, o);
      order.push(name);
    }
    return o;
  };
  let slab = 0;
  let pinned = 0;
  let allocations = 0;
  for (const a of bp.arenas) {
    const o = get(a.owner.kind, a.owner.index);
    const capacity = policy.arenaBytes(
      a.regions.map((r) => r.bytes),
      `arena '${a.name}'`,
    );
    const bytes = policy.slabFootprint(Math.max(capacity, 1), `arena '${a.name}'`);
    if (a.pinned === true) pinned += bytes;
    else slab += bytes;
    allocations += 1 + a.regions.length;
    o.held += bytes;
    o.peak = o.held;
    let carved = policy.guardBytes;
    for (const r of a.regions) {
      const f = policy.regionFootprint(r.bytes);
      carved += f;
      const c = o.categories[r.category] ?? { requested: 0, footprint: 0, regions: 0 };
      o.categories[r.category] = c;
      c.requested += r.bytes;
      c.footprint += f;
      c.regions += 1;
    }
    const s = o.categories.slack ?? { requested: 0, footprint: 0, regions: 0 };
    o.categories.slack = s;
    s.footprint += bytes - carved;
  }
  for (const [owner, list] of Object.entries(bp.borrowers ?? {})) {
    const o = owners.get(owner);
    if (o !== undefined) o.borrowers = [...list];
  }
  // Categories in catalogue order, as a live snapshot lists them.
  for (const o of owners.values()) {
    const sorted: OwnerSnapshot['categories'] = {};
    for (const c of categoryNames()) {
      const u = o.categories[c];
      if (u !== undefined && (u.footprint !== 0 || u.requested !== 0 || u.regions !== 0)) sorted[c] = u;
    }
    o.categories = sorted;
  }
  const total = slab + pinned;
  const snapshot: MemorySnapshot = {
    schema: MEMORY_SCHEMA,
    sequence: 0,
    limit,
    held: { slab, pinned, native: 0, total },
    reserved: 0,
    peak: total,
    virtualAlias: 0,
    liveSlabs: bp.arenas.length,
    allocations: { beforeReadiness: allocations, afterReadiness: { attempts: 0, bytes: 0 }, refusals: 0, allocatorFailures: 0 },
    owners: order.map((n) => owners.get(n) as OwnerSnapshot),
  };
  const extra: Parameters<typeof toManifest>[1] = { footprint: policy.settings(), resident: null };
  if (bp.plans !== undefined) extra.plans = bp.plans;
  return toManifest(snapshot, extra);
}

/** Allocates and carves a blueprint in a live domain (regions as byte views), then seals it. */
export function realizeBlueprint(domain: MemoryDomain, bp: Blueprint): Arena[] {
  check(bp);
  const arenas: Arena[] = [];
  for (const a of bp.arenas) {
    const owner = domain.owner(a.owner.kind, a.owner.index);
    const options: { bytes: number; pinned?: boolean } = { bytes: domain.policy.arenaBytes(a.regions.map((r) => r.bytes)) };
    if (a.pinned !== undefined) options.pinned = a.pinned;
    const arena = domain.createArena(owner, a.name, options);
    for (const r of a.regions) arena.carve(r.name, r.category, Uint8Array, r.bytes);
    arena.seal();
    arenas.push(arena);
  }
  for (const [name, list] of Object.entries(bp.borrowers ?? {})) {
    const [kind, index] = name.split('/') as [OwnerKind, string];
    const owner = domain.owner(kind, Number(index));
    for (const b of list) {
      const [bk, bi] = b.split('/') as [OwnerKind, string];
      domain.ledger.borrow(owner, domain.owner(bk, Number(bi)));
    }
  }
  for (const [name, n] of Object.entries(bp.passSlots ?? {})) {
    const [kind, index] = name.split('/') as [OwnerKind, string];
    domain.ledger.setPassSlots(domain.owner(kind, Number(index)), n);
  }
  for (const a of bp.arenas) domain.ledger.seal(domain.owner(a.owner.kind, a.owner.index));
  return arenas;
}
