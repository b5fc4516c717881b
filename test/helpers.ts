import { Worker } from 'node:worker_threads';

export { prng } from '../src/memory/prng.js';

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
