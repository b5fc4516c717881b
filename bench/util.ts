import { Worker } from 'node:worker_threads';
import { setComputeThreads } from '../src/model/blocks/kernels.js';
import { alignmentLead } from '../src/memory/footprint.js';
import { native } from '../src/native.js';

/** Median of a list of numbers. */
export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
}

/** Nanoseconds per iteration of `body`, the median of `repeats` timed batches of `n`. */
export function nsPerOp(n: number, repeats: number, body: (n: number) => void): number {
  body(Math.min(n, 1000)); // warm up the JIT
  const samples: number[] = [];
  for (let r = 0; r < repeats; r++) {
    const t0 = process.hrtime.bigint();
    body(n);
    samples.push(Number(process.hrtime.bigint() - t0) / n);
  }
  return median(samples);
}

export function runWorker<T>(url: URL, workerData: unknown): { done: Promise<T>; worker: Worker } {
  const worker = new Worker(url, { workerData });
  const done = new Promise<T>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`bench worker exited with code ${code}`)));
  });
  return { done, worker };
}

/** Fastest wall time of `runs` runs of `body`, seconds (the usual convention on a noisy machine). */
export function fastestSeconds(runs: number, body: () => void): number {
  let t = Number.POSITIVE_INFINITY;
  for (let i = 0; i < runs; i++) {
    const t0 = process.hrtime.bigint();
    body();
    t = Math.min(t, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  return t;
}

export const round = (x: number, digits = 1): number => Number(x.toFixed(digits));

/** Samples of one figure: their min, median and max. */
export interface Spread {
  min: number;
  median: number;
  max: number;
}

export function spread(xs: readonly number[], digits = 1): Spread {
  const s = [...xs].sort((a, b) => a - b);
  return { min: round(s[0]!, digits), median: round(median(s), digits), max: round(s[s.length - 1]!, digits) };
}

/** p50 and p99 of `xs` (nearest rank), rounded to `digits`. */
export function quantiles(xs: number[], digits = 1): { p50: number; p99: number } {
  const s = [...xs].sort((a, b) => a - b);
  const at = (q: number): number => round(s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? 0, digits);
  return { p50: at(0.5), p99: at(0.99) };
}

/** Bytes a hugePageBytes view starts on a multiple of: a page (the engine's arenas align to a cache line). */
const VIEW_ALIGNMENT = 4096;

/**
 * `bytes` zeroed bytes from a page-aligned address whose pages are advised as transparent huge
 * pages before they are first touched, as the engine's weight arenas are: a stream read from 4 KiB
 * pages, or through loads split across cache lines, runs slower than the model's weights are read,
 * so the probe and the streamed sets that stand for them are made so.
 */
export function hugePageBytes(bytes: number): Uint8Array {
  const raw = new Uint8Array(bytes + VIEW_ALIGNMENT);
  const skip = alignmentLead(raw, VIEW_ALIGNMENT);
  const b = raw.subarray(skip, skip + bytes);
  native.adviseHugePages(b);
  return b;
}

/** A copy of `from` in hugePageBytes, as the model's weight arenas hold their tensors. */
export function hugePageCopy<T extends Uint8Array | Uint16Array | Float32Array>(from: T): T {
  const to = hugePageBytes(from.byteLength);
  to.set(new Uint8Array(from.buffer, from.byteOffset, from.byteLength));
  return new (from.constructor as new (b: ArrayBufferLike, o: number, n: number) => T)(to.buffer, to.byteOffset, from.length);
}

/** The read probe's 256 MiB array (huge pages), made on first use and kept: a run probes many times. */
let probeArray: Float32Array | null = null;

/**
 * Streaming read bandwidth in bytes/s for each thread count (this thread and its compute
 * helpers, reading parts): the fastest of `repeats` passes over one 256 MiB array, well past the
 * caches.
 */
export function readBandwidth(threads: readonly number[], repeats: number): number[] {
  if (probeArray === null) {
    const b = hugePageBytes(256 * 1024 * 1024);
    probeArray = new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4).fill(1);
  }
  const big = probeArray;
  try {
    return threads.map((n) => {
      setComputeThreads(n);
      native.readProbe(big);
      return big.byteLength / fastestSeconds(repeats, () => native.readProbe(big));
    });
  } finally {
    setComputeThreads(1);
  }
}
