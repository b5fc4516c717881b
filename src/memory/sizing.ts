/**
 * Arenas sized exactly by a dry run: `build` runs once over scratch arenas in a private
 * uncapped domain to learn what it carves, then once more over arenas of exactly that size.
 * The dry run's slabs are released before the real ones are created.
 */
import type { Arena } from './arena.js';
import { MemoryDomain } from './domain.js';
import { VoxslabError } from './errors.js';
import type { Owner } from './ledger.js';

export function sizedArenas<T>(domain: MemoryDomain, arenas: { owner: Owner; name: string }[], bound: number, build: (arenas: Arena[]) => T): { value: T; arenas: Arena[] } {
  const scratch = MemoryDomain.create({ limit: Number.MAX_SAFE_INTEGER, policy: domain.policy });
  const dry = arenas.map((a) => scratch.createArena(scratch.owner(a.owner.kind, a.owner.index), a.name, { bytes: bound }));
  build(dry);
  const used = dry.map((a) => a.used);
  for (const a of dry) scratch.releaseSlab(a.slab);
  const real = arenas.map((a, i) => domain.createArena(a.owner, a.name, { bytes: used[i] as number }));
  const value = build(real);
  real.forEach((a, i) => {
    if (a.used !== used[i]) throw new VoxslabError(`arena '${a.name}': carved ${a.used} bytes, the dry run carved ${used[i]}`);
  });
  return { value, arenas: real };
}
