import { alignUp } from './footprint.js';
import { ArgumentError, InternalError } from '../errors.js';
import { prng } from './prng.js';

/** One buffer of a pass: live from op `firstUse` through op `lastUse` (inclusive). */
export interface BufferSpec {
  name: string;
  bytes: number;
  firstUse: number;
  lastUse: number;
  /** Lives for the whole pass (persistent state, stage outputs): first to last op of the plan. */
  wholePass?: boolean;
  /** A stage output: never given away in place. */
  output?: boolean;
  /** Ops that read this buffer. Default 1. */
  consumers?: number;
  /** Element layout tag (dtype and shape order); in-place needs equal layouts. Default ''. */
  layout?: string;
  /** In-place candidate: take this producer input's bytes if the rules allow. */
  inPlaceOf?: string;
}

export interface PlanOptions {
  /** Alignment of every offset (power of two). Default 64. */
  alignment?: number;
  /** Run the improvement pass after greedy placement. Default true. */
  improve?: boolean;
  /** Seed of the improvement pass (the plan is deterministic for a given input and seed). */
  seed?: number;
  /** Improvement iterations; default scales down with the buffer count. */
  iterations?: number;
}

export interface PlacedBuffer {
  readonly name: string;
  readonly bytes: number;
  readonly firstUse: number;
  readonly lastUse: number;
  readonly offset: number;
  /** The buffer whose bytes this one took in place, if any. */
  readonly inPlaceOf: string | null;
}

export interface RefusedInPlace {
  readonly name: string;
  readonly of: string;
  readonly reason: string;
}

/** A frozen, checked plan. */
export interface Plan {
  readonly buffers: readonly PlacedBuffer[];
  readonly alignment: number;
  /** Arena bytes the plan needs: the aligned end of the highest buffer. */
  readonly highWater: number;
  /** Most (aligned) bytes live at any one op: no placement can do better. */
  readonly lowerBound: number;
  readonly ratio: number;
  /** High-water of plain greedy-by-size placement, before the improvement pass. */
  readonly greedyHighWater: number;
  readonly refusedInPlace: readonly RefusedInPlace[];
  readonly planMs: number;
}

const isPow2 = (n: number): boolean => Number.isSafeInteger(n) && n > 0 && (n & (n - 1)) === 0 && n <= 2 ** 30;

/** Validates specs; returns them with wholePass intervals widened to the pass. */
function normalise(specs: readonly BufferSpec[]): BufferSpec[] {
  if (!Array.isArray(specs)) throw new ArgumentError('plan: buffers must be an array');
  const names = new Set<string>();
  let first = Number.POSITIVE_INFINITY;
  let last = Number.NEGATIVE_INFINITY;
  specs.forEach((b, i) => {
    if (b === null || typeof b !== 'object') throw new ArgumentError(`plan: buffer ${i} must be an object`);
    const label = typeof b.name === 'string' && b.name.length > 0 ? `buffer '${b.name}'` : `buffer ${i}`;
    if (typeof b.name !== 'string' || b.name.length === 0) throw new ArgumentError(`plan: ${label} needs a non-empty name`);
    if (names.has(b.name)) throw new ArgumentError(`plan: duplicate buffer name '${b.name}'`);
    names.add(b.name);
    if (typeof b.bytes !== 'number' || !Number.isSafeInteger(b.bytes) || b.bytes < 0) {
      throw new ArgumentError(`plan: ${label} has bytes ${String(b.bytes)}; it must be a non-negative integer`);
    }
    for (const k of ['firstUse', 'lastUse'] as const) {
      const v = b[k];
      if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) {
        throw new ArgumentError(`plan: ${label} has ${k} ${String(v)}; it must be a non-negative integer op index`);
      }
    }
    if (b.lastUse < b.firstUse) {
      throw new ArgumentError(`plan: ${label} has lastUse ${b.lastUse} < firstUse ${b.firstUse}`);
    }
    if (b.consumers !== undefined && (!Number.isSafeInteger(b.consumers) || b.consumers < 0)) {
      throw new ArgumentError(`plan: ${label} has consumers ${String(b.consumers)}; it must be a non-negative integer`);
    }
    first = Math.min(first, b.firstUse);
    last = Math.max(last, b.lastUse);
  });
  return specs.map((b) => (b.wholePass === true ? { ...b, firstUse: first, lastUse: last } : { ...b }));
}

/** ggml's in-place rules; returns the reason a candidate is refused, or null. */
function inPlaceRefusal(b: BufferSpec, a: BufferSpec | undefined, taken: Set<string>, chained: Set<string>): string | null {
  if (a === undefined) return `no buffer named '${b.inPlaceOf}'`;
  if (a.name === b.name) return 'a buffer cannot be in place of itself';
  if ((a.consumers ?? 1) !== 1) return `'${a.name}' has ${a.consumers} consumers (in place needs exactly one)`;
  if (a.bytes !== b.bytes) return `size differs (${a.bytes} vs ${b.bytes} bytes)`;
  if ((a.layout ?? '') !== (b.layout ?? '')) return `layout differs ('${a.layout ?? ''}' vs '${b.layout ?? ''}')`;
  if (a.output === true) return `'${a.name}' is an output`;
  if (a.wholePass === true) return `'${a.name}' lives for the whole pass`;
  if (a.lastUse !== b.firstUse) return `'${a.name}' is last used at op ${a.lastUse}, not at op ${b.firstUse} that produces '${b.name}'`;
  if (taken.has(a.name)) return `'${a.name}' was already taken in place by another buffer`;
  if (chained.has(a.name) && a.firstUse === a.lastUse) {
    return `'${a.name}' is itself in place and lives for one op only, so three buffers would share op ${a.firstUse}`;
  }
  return null;
}

interface Group {
  /** Members in order: the root first, then each buffer that took the previous one in place. */
  members: number[];
  bytes: number; // aligned
  first: number;
  last: number;
}

/**
 * Improvement budget: generous for the small passes stage plans are made of, shrinking with
 * the square of the group count so large inputs stay fast. Fixed, so plans are deterministic.
 */
export function defaultIterations(groups: number): number {
  if (groups <= 256) return 1500;
  return Math.max(0, Math.floor(2e7 / (groups * groups)));
}

/** Rank of each group in `order` (its position), for placeOrder. */
function rankOf(order: ArrayLike<number>, rank: Int32Array): Int32Array {
  for (let i = 0; i < order.length; i++) rank[order[i] as number] = i;
  return rank;
}

/**
 * Places groups in `order` from position `from` on (earlier ones keep their offsets), each at
 * the best-fitting aligned gap among its already-placed time neighbours. Returns the aligned
 * high-water. `rank[g]` must be g's position in `order`.
 */
function placeOrder(
  groups: Group[],
  order: ArrayLike<number>,
  rank: Int32Array,
  conflicts: number[][],
  alignment: number,
  offsets: Float64Array,
  from: number,
  scratch: number[],
): number {
  let top = 0;
  for (let i = 0; i < from; i++) {
    const g = order[i] as number;
    top = Math.max(top, (offsets[g] as number) + (groups[g] as Group).bytes);
  }
  for (let i = from; i < order.length; i++) {
    const g = order[i] as number;
    const size = (groups[g] as Group).bytes;
    // Placed neighbours in time, by offset.
    scratch.length = 0;
    for (const h of conflicts[g] as number[]) if ((rank[h] as number) < i) scratch.push(h);
    scratch.sort((x, y) => (offsets[x] as number) - (offsets[y] as number));
    let best = -1;
    let bestGap = Number.POSITIVE_INFINITY;
    let cursor = 0;
    for (const h of scratch) {
      const start = alignUp(cursor, alignment);
      const hOff = offsets[h] as number;
      if (hOff >= start + size) {
        const gap = hOff - start;
        if (gap < bestGap) {
          bestGap = gap;
          best = start;
        }
      }
      cursor = Math.max(cursor, hOff + (groups[h] as Group).bytes);
    }
    const offset = best >= 0 ? best : alignUp(cursor, alignment);
    offsets[g] = offset;
    top = Math.max(top, offset + size);
  }
  return alignUp(top, alignment);
}

/**
 * Assigns an offset to every buffer so that no two buffers live at the same op share a byte,
 * keeping the arena (high-water) small: greedy by size (largest first, best-fitting gap among
 * lifetime-overlapping buffers, alignment inside the gap search), then a seeded hill climb
 * over the placement order that stops at the lower bound. The result is verified by an
 * independent overlap checker and frozen; a plan that fails the check is never returned.
 *
 * Thread contract: pure; any thread; allocates (setup-time only).
 */
export function plan(specs: readonly BufferSpec[], options: PlanOptions = {}): Plan {
  const t0 = performance.now();
  const alignment = options.alignment ?? 64;
  if (!isPow2(alignment)) throw new ArgumentError(`plan: alignment must be a power of two, got ${String(alignment)}`);
  const buffers = normalise(specs);
  const byName = new Map(buffers.map((b, i) => [b.name, i]));

  // In-place: merge accepted candidates into groups sharing one offset.
  const refused: RefusedInPlace[] = [];
  const taken = new Set<string>();
  const chained = new Set<string>();
  const parent = buffers.map((_, i) => i);
  const find = (i: number): number => {
    if (parent[i] === i) return i;
    const root = find(parent[i] as number);
    parent[i] = root;
    return root;
  };
  const tookFrom = new Map<number, number>();
  for (const [i, b] of buffers.entries()) {
    if (b.inPlaceOf === undefined) continue;
    const ai = byName.get(b.inPlaceOf);
    const reason = inPlaceRefusal(b, ai === undefined ? undefined : buffers[ai], taken, chained);
    if (reason !== null) {
      refused.push(Object.freeze({ name: b.name, of: b.inPlaceOf, reason }));
      continue;
    }
    taken.add(b.inPlaceOf);
    chained.add(b.name);
    parent[i] = find(ai as number);
    tookFrom.set(i, ai as number);
  }
  const groupOf = new Map<number, Group>();
  for (const [i, b] of buffers.entries()) {
    const root = find(i);
    let g = groupOf.get(root);
    if (g === undefined) {
      g = { members: [], bytes: alignUp(b.bytes, alignment), first: b.firstUse, last: b.lastUse };
      groupOf.set(root, g);
    }
    g.members.push(i);
    g.first = Math.min(g.first, b.firstUse);
    g.last = Math.max(g.last, b.lastUse);
  }
  const groups = [...groupOf.values()];

  // Time conflicts between groups (sweep by start).
  const conflicts: number[][] = groups.map(() => []);
  const byStart = groups.map((_, i) => i).sort((x, y) => (groups[x] as Group).first - (groups[y] as Group).first);
  for (let a = 0; a < byStart.length; a++) {
    const ga = groups[byStart[a] as number] as Group;
    for (let b = a + 1; b < byStart.length; b++) {
      const gb = groups[byStart[b] as number] as Group;
      if (gb.first > ga.last) break;
      (conflicts[byStart[a] as number] as number[]).push(byStart[b] as number);
      (conflicts[byStart[b] as number] as number[]).push(byStart[a] as number);
    }
  }

  // Lower bound: most aligned bytes live at any op (events at starts and ends).
  const events: [number, number][] = [];
  for (const g of groups) {
    events.push([g.first, g.bytes]);
    events.push([g.last + 1, -g.bytes]);
  }
  events.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  let live = 0;
  let lowerBound = 0;
  let count = 0;
  let width = 0;
  for (const [, d] of events) {
    live += d;
    count += d > 0 ? 1 : d < 0 ? -1 : 0;
    lowerBound = Math.max(lowerBound, live);
    width = Math.max(width, count);
  }

  // Greedy by size: largest first; ties by earlier start, then by name for determinism.
  const key = (g: Group): string => buffers[g.members[0] as number]!.name;
  const order = groups
    .map((_, i) => i)
    .sort((x, y) => {
      const gx = groups[x] as Group;
      const gy = groups[y] as Group;
      return gy.bytes - gx.bytes || gx.first - gy.first || (key(gx) < key(gy) ? -1 : key(gx) > key(gy) ? 1 : 0);
    });
  const offsets = new Float64Array(groups.length);
  const scratch: number[] = [];
  let high = placeOrder(groups, order, rankOf(order, new Int32Array(groups.length)), conflicts, alignment, offsets, 0, scratch);
  const greedyHighWater = high;

  if (options.improve !== false && high > lowerBound) {
    // Second start (greedy by breadth): ops by most live bytes first, each op's groups
    // largest first. Keep whichever start is lower.
    const ops = [...new Set(groups.map((g) => g.first))].sort((x, y) => x - y);
    const profile: { op: number; members: number[]; bytes: number }[] = [];
    let active: number[] = [];
    let k = 0;
    for (const op of ops) {
      active = active.filter((i) => (groups[i] as Group).last >= op);
      while (k < byStart.length && (groups[byStart[k] as number] as Group).first === op) active.push(byStart[k++] as number);
      profile.push({ op, members: active.slice(), bytes: active.reduce((a, i) => a + (groups[i] as Group).bytes, 0) });
    }
    profile.sort((x, y) => y.bytes - x.bytes || x.op - y.op);
    const seen = new Uint8Array(groups.length);
    const breadth: number[] = [];
    for (const p of profile) {
      for (const i of p.members.sort((x, y) => (groups[y] as Group).bytes - (groups[x] as Group).bytes || x - y)) {
        if (seen[i] === 0) {
          seen[i] = 1;
          breadth.push(i);
        }
      }
    }
    const alt = new Float64Array(groups.length);
    const hb = placeOrder(groups, breadth, rankOf(breadth, new Int32Array(groups.length)), conflicts, alignment, alt, 0, scratch);
    if (hb < high) {
      high = hb;
      offsets.set(alt);
      order.splice(0, order.length, ...breadth);
    }
  }

  if (options.improve !== false && high > lowerBound) {
    // More starts: largest area (bytes × lifetime) first, longest lifetime first, earliest
    // first. Greedy placement is sensitive to order; keep whichever start is lowest.
    const life = (g: Group): number => g.last - g.first + 1;
    const starts: ((x: Group, y: Group) => number)[] = [
      (x, y) => y.bytes * life(y) - x.bytes * life(x) || y.bytes - x.bytes,
      (x, y) => life(y) - life(x) || y.bytes - x.bytes,
      (x, y) => x.first - y.first || y.bytes - x.bytes,
    ];
    const alt = new Float64Array(groups.length);
    const rank = new Int32Array(groups.length);
    for (const cmp of starts) {
      const candidate = groups.map((_, i) => i).sort((a, b) => cmp(groups[a] as Group, groups[b] as Group) || a - b);
      const h = placeOrder(groups, candidate, rankOf(candidate, rank), conflicts, alignment, alt, 0, scratch);
      if (h < high) {
        high = h;
        offsets.set(alt);
        order.splice(0, order.length, ...candidate);
      }
    }
  }

  if (options.improve !== false && high > lowerBound && width <= 2) {
    // At most two buffers live at any op: the conflict graph is a forest. Two-colour it, put
    // one colour at offset 0 and each other buffer just above its largest neighbour; every
    // end is then the size of a pair live together, so the plan meets the lower bound.
    const colour = new Int8Array(groups.length).fill(-1);
    for (let root = 0; root < groups.length; root++) {
      if (colour[root] !== -1) continue;
      colour[root] = 0;
      const stack = [root];
      while (stack.length > 0) {
        const g = stack.pop() as number;
        for (const h of conflicts[g] as number[]) {
          if (colour[h] === -1) {
            colour[h] = 1 - (colour[g] as number);
            stack.push(h);
          }
        }
      }
    }
    const alt = new Float64Array(groups.length);
    let top = 0;
    for (let g = 0; g < groups.length; g++) {
      let at = 0;
      if (colour[g] === 1) for (const h of conflicts[g] as number[]) at = Math.max(at, (groups[h] as Group).bytes);
      alt[g] = at;
      top = Math.max(top, at + (groups[g] as Group).bytes);
    }
    if (alignUp(top, alignment) < high) {
      high = alignUp(top, alignment);
      offsets.set(alt);
    }
  }

  if (options.improve !== false && high > lowerBound && groups.length > 1) {
    // Hill climb (after TVM's allocator): move a group that sets the high-water earlier in
    // the order; keep the move when the high-water does not grow.
    const n = groups.length;
    const iterations = options.iterations ?? defaultIterations(n);
    const rand = prng(options.seed ?? 0x5eed);
    const bestOffsets = Float64Array.from(offsets);
    const best = Int32Array.from(order);
    const trial = Int32Array.from(order);
    const rank = rankOf(trial, new Int32Array(n));
    const tops: number[] = [];
    // Small passes still more than 3 % above the bound get a longer (still fixed) budget.
    const extended = options.iterations === undefined && n <= 256 ? 8000 : iterations;
    for (let it = 0; (it < iterations || (it < extended && high > lowerBound * 1.03)) && high > lowerBound; it++) {
      tops.length = 0;
      for (let i = 0; i < n; i++) if (alignUp((offsets[i] as number) + (groups[i] as Group).bytes, alignment) === high) tops.push(i);
      const g = tops[Math.floor(rand() * tops.length)] as number;
      const c = conflicts[g] as number[];
      const u = rand();
      let moved: number;
      let to: number;
      if (u < 0.4 || c.length === 0) {
        // A group at the high-water goes just ahead of its earliest-placed time neighbour,
        // so it picks its place before that neighbour does.
        moved = g;
        to = rank[g] as number;
        for (const h of c) to = Math.min(to, rank[h] as number);
      } else if (u < 0.7) {
        // One of its neighbours goes behind it.
        moved = c[Math.floor(rand() * c.length)] as number;
        to = n - 1;
      } else {
        // Any group anywhere: escapes plateaus the targeted moves cannot leave.
        moved = Math.floor(rand() * n);
        to = Math.floor(rand() * n);
      }
      const from = rank[moved] as number;
      if (from === to) continue;
      if (from < to) trial.copyWithin(from, from + 1, to + 1);
      else trial.copyWithin(to + 1, to, from);
      trial[to] = moved;
      const lo = Math.min(from, to);
      const hi = Math.max(from, to);
      for (let i = lo; i <= hi; i++) rank[trial[i] as number] = i;
      const h2 = placeOrder(groups, trial, rank, conflicts, alignment, offsets, lo, scratch);
      if (h2 <= high) {
        high = h2;
        bestOffsets.set(offsets);
        best.set(trial.subarray(lo, hi + 1), lo);
      } else {
        trial.set(best.subarray(lo, hi + 1), lo);
        for (let i = lo; i <= hi; i++) rank[trial[i] as number] = i;
        offsets.set(bestOffsets);
      }
    }
    offsets.set(bestOffsets);
  }

  const placed: PlacedBuffer[] = buffers.map((b, i) => {
    const g = groups.indexOf(groupOf.get(find(i)) as Group);
    const from = tookFrom.get(i);
    return Object.freeze({
      name: b.name,
      bytes: b.bytes,
      firstUse: b.firstUse,
      lastUse: b.lastUse,
      offset: offsets[g] as number,
      inPlaceOf: from === undefined ? null : (buffers[from] as BufferSpec).name,
    });
  });
  const fault = checkNoOverlap(placed, alignment);
  if (fault !== null) throw new InternalError(`planner produced an unsafe plan (internal fault): ${fault}`);
  let end = 0;
  for (const p of placed) end = Math.max(end, p.offset + p.bytes);
  if (alignUp(end, alignment) !== high) throw new InternalError(`planner high-water ${high} disagrees with placed end ${end}`);
  return Object.freeze({
    buffers: Object.freeze(placed),
    alignment,
    highWater: high,
    lowerBound,
    ratio: lowerBound === 0 ? 1 : high / lowerBound,
    greedyHighWater,
    refusedInPlace: Object.freeze(refused),
    planMs: performance.now() - t0,
  });
}

/** A function from a pass's buffers to a plan: `plan`, or `separatePlan` for comparisons. */
export type Planner = (specs: readonly BufferSpec[]) => Plan;

/**
 * The naive layout: every buffer in bytes of its own (no sharing, no in-place), one after
 * another. Runs computed on it are the reference that planned runs must equal bit for bit.
 */
export function separatePlan(specs: readonly BufferSpec[], options: { alignment?: number } = {}): Plan {
  const t0 = performance.now();
  const alignment = options.alignment ?? 64;
  if (!isPow2(alignment)) throw new ArgumentError(`plan: alignment must be a power of two, got ${String(alignment)}`);
  const buffers = normalise(specs);
  const reference = plan(buffers, { alignment, improve: false });
  let at = 0;
  const placed: PlacedBuffer[] = buffers.map((b) => {
    const p = Object.freeze({ name: b.name, bytes: b.bytes, firstUse: b.firstUse, lastUse: b.lastUse, offset: at, inPlaceOf: null });
    at += alignUp(b.bytes, alignment);
    return p;
  });
  return Object.freeze({
    buffers: Object.freeze(placed),
    alignment,
    highWater: at,
    lowerBound: reference.lowerBound,
    ratio: reference.lowerBound === 0 ? 1 : at / reference.lowerBound,
    greedyHighWater: at,
    refusedInPlace: Object.freeze([]),
    planMs: performance.now() - t0,
  });
}

/**
 * Independent alias-safety proof: sweeps the ops itself and checks that no two buffers live at
 * the same op share a byte. The only sharing allowed is an in-place pair at the one op where
 * the consumer of the first produces the second, at the same offset. Also checks alignment.
 * Returns a description of the first fault, or null. Uses none of the planner's structures.
 */
export function checkNoOverlap(buffers: readonly PlacedBuffer[], alignment: number): string | null {
  for (const b of buffers) {
    if (!Number.isSafeInteger(b.offset) || b.offset < 0) return `'${b.name}' has offset ${b.offset}`;
    if (b.offset % alignment !== 0) return `'${b.name}' offset ${b.offset} is not ${alignment}-aligned`;
  }
  const inPlace = new Set<string>();
  for (const b of buffers) if (b.inPlaceOf !== null) inPlace.add(`${b.inPlaceOf}\u0000${b.name}`);
  // Sweep ops in order; keep the buffers live at the current op.
  const starts = [...buffers].sort((x, y) => x.firstUse - y.firstUse);
  let next = 0;
  let live: PlacedBuffer[] = [];
  const ops = [...new Set(buffers.map((b) => b.firstUse))].sort((x, y) => x - y);
  for (const op of ops) {
    live = live.filter((b) => b.lastUse >= op);
    const arriving: PlacedBuffer[] = [];
    while (next < starts.length && (starts[next] as PlacedBuffer).firstUse === op) arriving.push(starts[next++] as PlacedBuffer);
    for (const a of arriving) {
      for (const b of live.concat(arriving)) {
        if (a === b) continue;
        const disjoint = a.offset + a.bytes <= b.offset || b.offset + b.bytes <= a.offset || a.bytes === 0 || b.bytes === 0;
        if (disjoint) continue;
        const pair = inPlace.has(`${b.name}\u0000${a.name}`) || inPlace.has(`${a.name}\u0000${b.name}`);
        const handover = pair && a.offset === b.offset && (a.firstUse === b.lastUse || b.firstUse === a.lastUse);
        if (!handover) {
          return (
            `'${a.name}' [${a.offset}, ${a.offset + a.bytes}) ops ${a.firstUse}..${a.lastUse} overlaps '${b.name}' [${b.offset}, ` +
            `${b.offset + b.bytes}) ops ${b.firstUse}..${b.lastUse}`
          );
        }
      }
    }
    live.push(...arriving);
  }
  return null;
}
