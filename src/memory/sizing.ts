/**
 * Arenas sized exactly by a dry run: `build` runs once over unbacked arenas in a private
 * uncapped domain (no slab is allocated: see MemoryDomain.createUnbackedArena) to learn what it
 * carves, then once more over arenas of exactly that size in `domain`. When that fails, the
 * arenas made so far are released before the error is passed on.
 */
import type { Arena } from './arena.js';
import { MemoryDomain } from './domain.js';
import { InternalError } from '../errors.js';
import type { Owner } from './ledger.js';

/** The bytes `build` carves in each arena, learnt over unbacked arenas (nothing is allocated). */
function dryRun(domain: MemoryDomain, arenas: { owner: Owner; name: string }[], bound: number, build: (arenas: Arena[]) => unknown): number[] {
  const scratch = MemoryDomain.create({ limit: Number.MAX_SAFE_INTEGER, policy: domain.policy });
  const dry = arenas.map((a) => scratch.createUnbackedArena(scratch.owner(a.owner.kind, a.owner.index), a.name, bound));
  build(dry);
  return dry.map((a) => a.used);
}

/** What `sizedArenas` would charge to the cap (slab footprints), without allocating anything. */
export function plannedFootprint(domain: MemoryDomain, arenas: { owner: Owner; name: string }[], bound: number, build: (arenas: Arena[]) => unknown): number {
  return dryRun(domain, arenas, bound, build).reduce((s, used, i) => s + domain.policy.slabFootprint(Math.max(used, 1), `arena '${arenas[i]!.name}'`), 0);
}

export function sizedArenas<T>(
  domain: MemoryDomain,
  arenas: { owner: Owner; name: string }[],
  bound: number,
  build: (arenas: Arena[]) => T,
): { value: T; arenas: Arena[] } {
  const used = dryRun(domain, arenas, bound, build);
  const real: Arena[] = [];
  try {
    for (const [i, a] of arenas.entries()) real.push(domain.createArena(a.owner, a.name, { bytes: used[i] as number }));
    const value = build(real);
    real.forEach((a, i) => {
      if (a.used !== used[i]) throw new InternalError(`arena '${a.name}': carved ${a.used} bytes, the dry run carved ${used[i]}`);
    });
    return { value, arenas: real };
  } catch (error) {
    // A refusal or a failed build leaves nothing held.
    for (const a of real) domain.releaseSlab(a.slab);
    throw error;
  }
}
