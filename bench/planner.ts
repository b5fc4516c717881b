/**
 * `voxslab bench planner`: planned high-water against the lower bound over a seeded random
 * suite, beside plain greedy-by-size (no improvement pass) on the same inputs, and plan time
 * for 10 … 10,000 buffers.
 */
import { type BufferSpec, plan } from '../src/memory/index.js';
import { prng } from '../src/memory/prng.js';
import { median, round } from './util.js';

/** A random pass: n buffers, sizes 1 B–64 MiB (skewed small), lifetimes of 1–24 ops. */
export function randomPass(seed: number, n: number): BufferSpec[] {
  const r = prng(seed);
  return Array.from({ length: n }, (_, i) => {
    const first = Math.floor(r() * n);
    return { name: `b${i}`, bytes: 1 + Math.floor(r() ** 3 * (64 * 1024 * 1024 - 1)), firstUse: first, lastUse: first + Math.floor(r() * 24) };
  });
}

interface Stats {
  mean: number;
  p95: number;
  max: number;
}

function stats(xs: number[]): Stats {
  const s = [...xs].sort((a, b) => a - b);
  return {
    mean: round(s.reduce((a, b) => a + b, 0) / s.length, 4),
    p95: round(s[Math.min(s.length - 1, Math.floor(0.95 * s.length))] as number, 4),
    max: round(s[s.length - 1] as number, 4),
  };
}

export interface PlannerBenchResult {
  bench: 'planner';
  suite: { sets: number; buffersPerSet: string; alignments: number[]; planned: Stats; greedyOnly: Stats; atLowerBound: number };
  planTime: { buffers: number; ms: number; ratio: number }[];
  targets: { meanRatio: number; maxRatio: number; ms1000: number };
}

export async function run(options: { quick?: boolean } = {}): Promise<PlannerBenchResult> {
  const sets = options.quick === true ? 300 : 3000;
  const alignments = [1, 64, 4096];
  const planned: number[] = [];
  const greedy: number[] = [];
  let atLowerBound = 0;
  for (let s = 0; s < sets; s++) {
    const p = plan(randomPass(s, 2 + (s % 199)), { alignment: alignments[s % alignments.length] as number });
    planned.push(p.ratio);
    greedy.push(p.greedyHighWater / p.lowerBound);
    if (p.highWater === p.lowerBound) atLowerBound++;
  }
  const planTime: PlannerBenchResult['planTime'] = [];
  for (const n of [10, 100, 1000, 10000]) {
    const repeats = n >= 10000 ? 3 : options.quick === true ? 3 : 9;
    const ms: number[] = [];
    let ratio = 1;
    for (let k = 0; k < repeats; k++) {
      const specs = randomPass(1_000_000 + n, n);
      const t0 = performance.now();
      const p = plan(specs);
      ms.push(performance.now() - t0);
      ratio = p.ratio;
    }
    planTime.push({ buffers: n, ms: round(median(ms), 2), ratio: round(ratio, 4) });
  }
  return {
    bench: 'planner',
    suite: { sets, buffersPerSet: '2-200', alignments, planned: stats(planned), greedyOnly: stats(greedy), atLowerBound },
    planTime,
    targets: { meanRatio: 1.03, maxRatio: 1.1, ms1000: 50 },
  };
}

export function format(r: PlannerBenchResult): string {
  const s = r.suite;
  const lines = [
    `planner: ${s.sets} seeded random passes (${s.buffersPerSet} buffers, sizes 1 B-64 MiB, alignment ${s.alignments.join('/')})`,
    '  high-water / lower bound      mean     p95      max',
    `  planned (with improvement)  ${s.planned.mean.toFixed(4)}  ${s.planned.p95.toFixed(4)}  ${s.planned.max.toFixed(4)}   (${s.atLowerBound} of ` +
      `${s.sets} at the bound)`,
    `  greedy by size only         ${s.greedyOnly.mean.toFixed(4)}  ${s.greedyOnly.p95.toFixed(4)}  ${s.greedyOnly.max.toFixed(4)}`,
    '  plan time:',
  ];
  for (const p of r.planTime) lines.push(`    ${String(p.buffers).padStart(6)} buffers  ${String(p.ms).padStart(9)} ms   ratio ${p.ratio}`);
  lines.push(`  targets: mean ≤ ${r.targets.meanRatio}, max ≤ ${r.targets.maxRatio}, 1,000 buffers < ${r.targets.ms1000} ms`);
  return lines.join('\n');
}
