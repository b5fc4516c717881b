/**
 * Seeded PRNG (mulberry32): uniform values in [0, 1), the same sequence for the same seed on
 * every machine. Used wherever a result must be reproducible: the planner's improvement pass,
 * synthetic weights, seeded tests and benchmarks.
 */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
