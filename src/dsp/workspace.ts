/**
 * Where DSP objects get their working buffers. Every buffer is requested once, when the object
 * is made; processing afterwards allocates nothing. `measureWorkspace` sizes an object without
 * allocating (to size its arena first); `arenaWorkspace` carves from an arena.
 */
import type { Arena, TypedArray, TypedArrayConstructor } from '../memory/arena.js';
import type { FootprintPolicy } from '../memory/footprint.js';
import type { Category } from '../memory/layout.js';

export type Workspace = <T extends TypedArray>(name: string, type: TypedArrayConstructor<T>, length: number) => T;

/** Plain heap buffers (tests, one-off tools). */
export const heapWorkspace: Workspace = <T extends TypedArray>(_name: string, type: TypedArrayConstructor<T>, length: number): T =>
  new (type as unknown as new (n: number) => T)(length);

/** Buffers carved from `arena`, charged to `category`; names are prefixed to stay unique. */
export function arenaWorkspace(arena: Arena, category: Category, prefix: string): Workspace {
  return <T extends TypedArray>(name: string, type: TypedArrayConstructor<T>, length: number): T => arena.carve(`${prefix}.${name}`, category, type, length);
}

/**
 * A workspace that hands out heap buffers while adding up the arena bytes they would need under
 * `policy`: build the object once with it, create an arena of `bytes()`, build it again there.
 */
export function measureWorkspace(policy: FootprintPolicy): { workspace: Workspace; sizes: number[]; bytes(): number } {
  const sizes: number[] = [];
  return {
    sizes,
    workspace: <T extends TypedArray>(name: string, type: TypedArrayConstructor<T>, length: number): T => {
      sizes.push(length * type.BYTES_PER_ELEMENT);
      return heapWorkspace(name, type, length);
    },
    bytes: () => policy.arenaBytes(sizes),
  };
}
