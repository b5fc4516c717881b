/**
 * `voxslab bench kernels`: the machine's own limits, measured in the same run — peak
 * single-core f32 FMA throughput (a register-only native loop), the integer GEMM's multiply
 * instruction at its peak (the same kind of loop) and streaming read bandwidth on one and on two
 * threads —
 * and every kernel as a ratio to them: GEMM on the Conformer's shapes against peak FLOP/s,
 * GEMV on the backbone's shape (f32 / q8 / q4) against the read bandwidth of as many threads, both with one matrix
 * repeated (it stays in the last-level cache) and streamed through copies at least 4× that
 * cache, as a model step reads its weights; a prefill chunk's quantized layer through the prefill
 * kernel against the row-by-row GEMV pass on the same streamed set and the integer peak. numpy's GEMM on the
 * same shapes is reported beside it when python3 with numpy is available.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import {
  attention,
  attentionScratchFloats,
  GEMM_PACK_FLOATS,
  gemm,
  gemv,
  gemvScratchFloats,
  kernelIsa,
  linear1,
  linearPrefill,
  linearRows,
  prefillScratchFloats,
  setComputeThreads,
  type Weights,
} from '../src/model/blocks/kernels.js';
import { KEY_TILE } from '../src/model/blocks/backbone.js';
import { quantize } from '../src/model/format/quant.js';
import { native } from '../src/native.js';
import { fastestSeconds as best, hugePageCopy, median, readBandwidth, round } from './util.js';

export interface KernelsBenchResult {
  bench: 'kernels';
  isa: string;
  peakGflops: number;
  readGBps: number;
  /** The read probe split between two threads: what the two-thread GEMV rows are compared with. */
  readTwoThreadsGBps: number;
  gemm: { T: number; K: number; N: number; gflops: number; ofPeak: number; numpyGflops: number | null }[];
  /**
   * GEMV rows. A streamed row alternates its pass with the read probe at its thread count, and
   * `ofBandwidth` is the median of each pass over the probe read just before it (`probeGBps`,
   * their median): this machine's bandwidth moves by tens of percent over a run, so a ratio
   * against the run's opening probe measures the moment as much as the kernel. The other rows
   * are against the opening probe.
   */
  gemv: { kind: string; rows: number; cols: number; bytes: number; GBps: number; ofBandwidth: number; probeGBps?: number }[];
  /** The last-level cache (from the OS) and the working set the streamed GEMV cycles through. */
  lastLevelCacheBytes: number;
  streamedBytes: number;
  /**
   * Decode attention at the backbone's shape and key tile; KV bytes read per second against the
   * read probe at as many threads. `streamed`: the cache is at least 4× the last-level cache, so
   * the ratio is one of DRAM bandwidth (otherwise part of the cache stays in the LLC).
   */
  attention: { context: number; threads: number; tokensPerSecond: number; gflops: number; kvGBps: number; ofBandwidth: number; streamed: boolean }[];
  /**
   * A prefill chunk's quantized layer: 64 positions through streamed copies of the 2048×8192
   * matrix, the prefill kernel (linearPrefill) against the row-by-row GEMV pass (linearRows),
   * alternating, in multiply-adds a second. `ofInt8Peak`: the prefill kernel's rate over the
   * integer multiply's measured peak (`int8PeakGmacs`) times the threads; null where there is no
   * integer probe.
   */
  prefill: { kind: string; threads: number; positions: number; gemmGmacs: number; rowsGmacs: number; ratio: number; ofInt8Peak: number | null }[];
  /**
   * The integer GEMM's multiply instruction (vpmaddubsw on AVX2, vpdpbusd with VNNI) at its
   * peak on one core, multiply-adds a second; null where there is no probe.
   */
  int8PeakGmacs: number | null;
  targets: { gemmOfPeak: number; gemvOfBandwidth: number };
}

function numpyGemm(shapes: [number, number, number][]): (number | null)[] {
  const script = `
import json, sys, time
import numpy as np
out = []
for T, K, N in json.loads(sys.argv[1]):
    a = np.random.rand(T, K).astype(np.float32); w = np.random.rand(N, K).astype(np.float32)
    a @ w.T
    best = 1e9
    for _ in range(7):
        t0 = time.perf_counter(); a @ w.T; best = min(best, time.perf_counter() - t0)
    out.append(2 * T * K * N / best / 1e9)
print(json.dumps(out))`;
  const r = spawnSync('python3', ['-c', script, JSON.stringify(shapes)], {
    encoding: 'utf8',
    env: { ...process.env, OMP_NUM_THREADS: '1', OPENBLAS_NUM_THREADS: '1' },
  });
  if (r.status !== 0) return shapes.map(() => null);
  try {
    return JSON.parse(r.stdout.trim()) as number[];
  } catch {
    return shapes.map(() => null);
  }
}

/** The largest CPU cache the OS reports (bytes); 32 MiB when it reports none. */
function lastLevelCache(): number {
  let most = 0;
  for (let i = 0; i < 8; i++) {
    let text: string;
    try {
      text = readFileSync(`/sys/devices/system/cpu/cpu0/cache/index${i}/size`, 'utf8').trim();
    } catch {
      continue;
    }
    const m = /^(\d+)([KMG]?)$/.exec(text);
    if (m !== null) most = Math.max(most, Number(m[1]) * (m[2] === 'K' ? 1024 : m[2] === 'M' ? 2 ** 20 : m[2] === 'G' ? 2 ** 30 : 1));
  }
  return most > 0 ? most : 32 * 2 ** 20;
}

export async function run(options: { quick?: boolean } = {}): Promise<KernelsBenchResult> {
  const repeats = options.quick === true ? 3 : 7;
  const iterations = 20_000_000;
  native.fmaProbe(1_000_000);
  const peak = (iterations * 12 * native.fmaLanes() * 2) / best(repeats, () => native.fmaProbe(iterations)) / 1e9;
  native.int8Probe(1_000_000);
  const int8Peak = native.int8Macs() > 0 ? (iterations * 12 * native.int8Macs()) / best(repeats, () => native.int8Probe(iterations)) / 1e9 : null;

  // Two threads (this one and one helper) reading halves: the bound of the two-thread rows.
  const [read, read2] = readBandwidth([1, 2], repeats).map((b) => b / 1e9) as [number, number];

  const pack = new Float32Array(GEMM_PACK_FLOATS);
  const shapes: [number, number, number][] = (options.quick === true ? [64, 256] : [64, 128, 256, 512, 1024]).map((T) => [T, 512, 2048]);
  const peers = numpyGemm(shapes);
  const gemmRows = shapes.map(([T, K, N], i) => {
    const A = Float32Array.from({ length: T * K }, (_, j) => ((j * 7) % 13) / 13 - 0.5);
    const W = Float32Array.from({ length: N * K }, (_, j) => ((j * 5) % 11) / 11 - 0.5);
    const C = new Float32Array(T * N);
    const s = best(repeats, () => gemm(A, W, null, C, T, N, K, pack));
    const gflops = (2 * T * K * N) / s / 1e9;
    return {
      T,
      K,
      N,
      gflops: round(gflops, 1),
      ofPeak: round(gflops / peak, 3),
      numpyGflops: peers[i] === null || peers[i] === undefined ? null : round(peers[i] as number, 1),
    };
  });

  const rows = 2048;
  const cols = 8192;
  // Every matrix in hugePageCopy, as the model's weights are held (aligned, on huge pages).
  const w = hugePageCopy(Float32Array.from({ length: rows * cols }, (_, j) => ((j * 7) % 17) / 17 - 0.5));
  const x = Float32Array.from({ length: cols }, (_, j) => ((j * 3) % 7) / 7);
  const y = new Float32Array(rows);
  const gemvRows: KernelsBenchResult['gemv'] = [];
  const held = (q: ReturnType<typeof quantize>) => ({ data: hugePageCopy(q.data), scales: hugePageCopy(q.scales), biases: hugePageCopy(q.biases) });
  const q8 = held(quantize(w, rows, cols, 8, 64));
  const q4 = held(quantize(w, rows, cols, 4, 64));
  const xsum = new Float32Array(cols / 64);
  for (const [kind, weights, bytes] of [
    ['f32', { kind: 'f32' as const, data: w, rows, cols }, w.byteLength],
    [
      'q8 (group 64)',
      { kind: 'q8' as const, data: q8.data, scales: q8.scales, biases: q8.biases, group: 64, rows, cols },
      q8.data.byteLength + q8.scales.byteLength + q8.biases.byteLength,
    ],
    [
      'q4 (group 64)',
      { kind: 'q4' as const, data: q4.data, scales: q4.scales, biases: q4.biases, group: 64, rows, cols },
      q4.data.byteLength + q4.scales.byteLength + q4.biases.byteLength,
    ],
  ] as const) {
    gemv(weights, x, y, xsum);
    const s = best(repeats * 3, () => gemv(weights, x, y, xsum));
    const GBps = bytes / s / 1e9;
    gemvRows.push({ kind, rows, cols, bytes, GBps: round(GBps, 2), ofBandwidth: round(GBps / read, 3) });
  }
  // The model's path for quantized weights: int8 activations (linear1), on one and two threads.
  const scratchInt = new Float32Array(gemvScratchFloats(cols));
  const llc = lastLevelCache();
  const streamedSets = (
    [
      ['q8', q8],
      ['q4', q4],
    ] as const
  ).map(([name, q]) => {
    const one = q.data.byteLength + q.scales.byteLength + q.biases.byteLength;
    const copies = Math.max(2, Math.ceil((4 * llc) / one));
    const set: Weights[] = Array.from({ length: copies }, () => ({
      kind: name,
      data: hugePageCopy(q.data),
      scales: hugePageCopy(q.scales),
      biases: hugePageCopy(q.biases),
      group: 64,
      rows,
      cols,
    }));
    return { name, set, copies, one };
  });
  let streamed = 0;
  try {
    for (const threads of [1, 2]) {
      setComputeThreads(threads);
      for (const [kind, weights, bytes] of [
        [
          `q8 (int8 activations, ${threads} thread${threads > 1 ? 's' : ''})`,
          { kind: 'q8' as const, data: q8.data, scales: q8.scales, biases: q8.biases, group: 64, rows, cols },
          q8.data.byteLength + q8.scales.byteLength + q8.biases.byteLength,
        ],
        [
          `q4 (int8 activations, ${threads} thread${threads > 1 ? 's' : ''})`,
          { kind: 'q4' as const, data: q4.data, scales: q4.scales, biases: q4.biases, group: 64, rows, cols },
          q4.data.byteLength + q4.scales.byteLength + q4.biases.byteLength,
        ],
      ] as const) {
        linear1(weights, x, y, scratchInt);
        const s = best(repeats * 3, () => linear1(weights, x, y, scratchInt));
        const GBps = bytes / s / 1e9;
        gemvRows.push({ kind, rows, cols, bytes, GBps: round(GBps, 2), ofBandwidth: round(GBps / (threads > 1 ? read2 : read), 3) });
      }
    }
    // Streamed as a model step reads: distinct copies of the matrix, at least 4× the last-level
    // cache in all, each read once per pass (the cached rows above re-read one matrix from L3).
    for (const threads of [1, 2]) {
      setComputeThreads(threads);
      for (const { name, set, copies, one } of streamedSets) {
        const pass = (): void => {
          for (const m of set) linear1(m, x, y, scratchInt);
        };
        pass();
        const passes: number[] = [];
        const probes: number[] = [];
        for (let r = 0; r < repeats; r++) {
          probes.push(readBandwidth([threads], 2)[0]! / 1e9);
          setComputeThreads(threads);
          passes.push((copies * one) / best(2, pass) / 1e9);
        }
        streamed = Math.max(streamed, copies * one);
        gemvRows.push({
          kind: `${name} streamed, ${copies} × ${(one / 2 ** 20).toFixed(1)} MiB (${threads} thread${threads > 1 ? 's' : ''})`,
          rows,
          cols,
          bytes: copies * one,
          GBps: round(Math.max(...passes), 2),
          ofBandwidth: round(median(passes.map((g, i) => g / probes[i]!)), 3),
          probeGBps: round(median(probes), 2),
        });
      }
    }
  } finally {
    setComputeThreads(1);
  }
  // Prefill: 64 positions through the same streamed copies, the two integer paths alternating.
  const prefillRows: KernelsBenchResult['prefill'] = [];
  const positions = 64;
  const X = Float32Array.from({ length: positions * cols }, (_, j) => Math.sin(j * 0.37));
  const Y = new Float32Array(positions * rows);
  const scratchRows = new Float32Array(prefillScratchFloats(positions, cols));
  try {
    for (const threads of [1, 2]) {
      setComputeThreads(threads);
      for (const { name, set, copies } of streamedSets) {
        const gemmPass = (): void => {
          for (const m of set) linearPrefill(m, X, Y, positions, scratchRows);
        };
        const rowsPass = (): void => {
          for (const m of set) linearRows(m, X, Y, positions, scratchRows);
        };
        let gemmS = Number.POSITIVE_INFINITY;
        let rowsS = Number.POSITIVE_INFINITY;
        for (let round = 0; round < (options.quick === true ? 1 : 3); round++) {
          gemmS = Math.min(gemmS, best(1, gemmPass));
          rowsS = Math.min(rowsS, best(1, rowsPass));
        }
        const macs = copies * rows * cols * positions;
        prefillRows.push({
          kind: name,
          threads,
          positions,
          gemmGmacs: round(macs / gemmS / 1e9, 1),
          rowsGmacs: round(macs / rowsS / 1e9, 1),
          ratio: round(rowsS / gemmS, 2),
          ofInt8Peak: int8Peak === null ? null : round(macs / gemmS / 1e9 / (int8Peak * threads), 3),
        });
      }
    }
  } finally {
    setComputeThreads(1);
  }
  // Attention decode at the backbone's shape: one query (32 heads) over a cache of 8 KV heads × 64.
  const attentionRows: KernelsBenchResult['attention'] = [];
  const scratch = new Float32Array(attentionScratchFloats(1, KEY_TILE, 64, 32, 8));
  try {
    for (const ctx of options.quick === true ? [1024, 8192] : [1024, 8192, 32768]) {
      const q = Float32Array.from({ length: 32 * 64 }, (_, j) => ((j * 7) % 13) / 13 - 0.5);
      const k = Float32Array.from({ length: ctx * 8 * 64 }, (_, j) => ((j * 5) % 11) / 11 - 0.5);
      const v = Float32Array.from(k, (x) => -x);
      const out = new Float32Array(32 * 64);
      const shape = { Tq: 1, Tk: ctx, Hq: 32, Hkv: 8, hd: 64, mode: 'causal' as const, qpos0: ctx - 1, tq: 1, tk: KEY_TILE };
      for (const threads of [1, 2]) {
        setComputeThreads(threads);
        attention(shape, q, k, v, out, scratch);
        const s = best(repeats, () => attention(shape, q, k, v, out, scratch));
        const kvGBps = (k.byteLength + v.byteLength) / s / 1e9;
        attentionRows.push({
          context: ctx,
          threads,
          tokensPerSecond: round(1 / s, 1),
          gflops: round((4 * 32 * 64 * ctx) / s / 1e9, 2),
          kvGBps: round(kvGBps, 2),
          ofBandwidth: round(kvGBps / (threads === 1 ? read : read2), 3),
          streamed: k.byteLength + v.byteLength >= 4 * llc,
        });
      }
    }
  } finally {
    setComputeThreads(1);
  }
  return {
    bench: 'kernels',
    isa: kernelIsa(),
    peakGflops: round(peak, 1),
    int8PeakGmacs: int8Peak === null ? null : round(int8Peak, 1),
    readGBps: round(read, 2),
    readTwoThreadsGBps: round(read2, 2),
    gemm: gemmRows,
    gemv: gemvRows,
    lastLevelCacheBytes: llc,
    streamedBytes: streamed,
    attention: attentionRows,
    prefill: prefillRows,
    targets: { gemmOfPeak: 0.6, gemvOfBandwidth: 0.7 },
  };
}

export function format(r: KernelsBenchResult): string {
  const lines = [
    `kernels (${r.isa}); this machine, measured now: peak f32 FMA ${r.peakGflops} GFLOP/s on one core, streaming read ${r.readGBps} GB/s ` +
      `(${r.readTwoThreadsGBps} GB/s on two threads: the bound of the two-thread rows)`,
    `GEMM [T×512]·[512×2048] (target ≥ ${r.targets.gemmOfPeak * 100}% of peak):`,
  ];
  for (const g of r.gemm)
    lines.push(
      `  T=${String(g.T).padStart(5)}  ${String(g.gflops).padStart(7)} GFLOP/s  ${(g.ofPeak * 100).toFixed(1).padStart(5)}% of peak   numpy (1 ` +
        `thread) ${g.numpyGflops ?? '-'}`,
    );
  lines.push(
    `GEMV 2048×8192 (target ≥ ${r.targets.gemvOfBandwidth * 100}% of read bandwidth); one matrix repeated stays in the ` +
      `${(r.lastLevelCacheBytes / 2 ** 20).toFixed(0)} MiB last-level cache, "streamed" cycles through ${(r.streamedBytes / 2 ** 20).toFixed(0)} MiB:`,
  );
  for (const g of r.gemv)
    lines.push(
      `  ${g.kind.padEnd(40)} ${String(g.GBps).padStart(7)} GB/s  ${(g.ofBandwidth * 100).toFixed(1).padStart(5)}% of bandwidth` +
        (g.probeGBps === undefined ? '' : ` (median pass over the probe just before it; probes ${g.probeGBps} GB/s)`),
    );
  lines.push(
    'prefill chunk, 64 positions through streamed copies of the 2048×8192 matrix (multiply-adds a second' +
      (r.int8PeakGmacs === null ? '):' : `; the integer multiply's peak is ${r.int8PeakGmacs} GMAC/s on one core):`),
  );
  for (const p of r.prefill)
    lines.push(
      `  ${p.kind} ${p.threads} thread${p.threads > 1 ? 's' : ' '}  linearPrefill ${String(p.gemmGmacs).padStart(6)} GMAC/s  ` +
        `linearRows ${String(p.rowsGmacs).padStart(6)} GMAC/s  ×${p.ratio}` +
        (p.ofInt8Peak === null ? '' : `  ${(p.ofInt8Peak * 100).toFixed(1)}% of the integer peak`),
    );
  lines.push("tiled attention, one decode step (32 query heads, 8 KV heads × 64, f32 cache, the backbone's key tile); the cache read per second:");
  for (const a of r.attention)
    lines.push(
      `  context ${String(a.context).padStart(6)}, ${a.threads} thread${a.threads === 1 ? ' ' : 's'}  ${String(a.tokensPerSecond).padStart(9)} tokens/s  ` +
        `${String(a.gflops).padStart(6)} GFLOP/s  ${String(a.kvGBps).padStart(6)} GB/s  ${(a.ofBandwidth * 100).toFixed(1).padStart(5)}% of bandwidth${a.streamed ? ' (streamed)' : ' (partly in the LLC)'}`,
    );
  return lines.join('\n');
}
