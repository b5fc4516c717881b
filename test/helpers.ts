import { Worker } from 'node:worker_threads';

/** Seeded PRNG (mulberry32): the same seed gives the same sequence on every machine. */
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

/** Integer in [lo, hi] from a PRNG. */
export function randInt(r: () => number, lo: number, hi: number): number {
  return lo + Math.floor(r() * (hi - lo + 1));
}

/** Starts a compiled worker script next to the caller and resolves with its one result message. */
export function runWorker<T>(url: URL, workerData: unknown): Promise<T> {
  return new Promise((resolve, reject) => {
    const w = new Worker(url, { workerData });
    let result: T | undefined;
    let got = false;
    w.once('message', (m: T) => {
      result = m;
      got = true;
    });
    w.once('error', reject);
    w.once('exit', (code) => {
      if (got) resolve(result as T);
      else reject(new Error(`worker ${url.pathname} exited with code ${code} before reporting`));
    });
  });
}
