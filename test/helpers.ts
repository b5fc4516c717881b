import { spawnSync } from 'node:child_process';
import v8 from 'node:v8';
import { Worker, type WorkerOptions } from 'node:worker_threads';

import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export { prng } from '../src/memory/prng.js';

/** The markdown files users read: README.md and docs/*.md (paths from the repository root). */
export function docFiles(): string[] {
  const docs = readdirSync(new URL('../../docs/', import.meta.url)).filter((f) => f.endsWith('.md'));
  return ['README.md', ...docs.map((f) => `docs/${f}`)];
}

/** The fenced block after `<!-- example:NAME -->` in README.md or docs/: what users copy, run as written. */
export function readmeExample(name: string): string {
  for (const file of docFiles()) {
    const text = readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8');
    const at = text.indexOf(`<!-- example:${name} -->`);
    if (at < 0) continue;
    const m = /```[a-z]*\n([\s\S]*?)```/.exec(text.slice(at));
    if (m === null) throw new Error(`${file} example '${name}' has no fenced block`);
    return m[1]!;
  }
  throw new Error(`no example '${name}' in README.md or docs/`);
}

export { readMonoWav as readWavSamples } from '../src/io/files.js';
import { readMonoWav } from '../src/io/files.js';
import { makeCheckpoint } from '../src/io/checkpoint.js';
import type { Conversation } from '../src/api/conversation.js';
import { setTimeout as delay } from 'node:timers/promises';

/** Integer in [lo, hi] from a PRNG. */
export function randInt(r: () => number, lo: number, hi: number): number {
  return lo + Math.floor(r() * (hi - lo + 1));
}

/** Starts a compiled worker script next to the caller and resolves with its one result message once it has exited. */
export function runWorker<T>(url: URL, workerData: unknown, options: Omit<WorkerOptions, 'workerData'> = {}): Promise<T> {
  return new Promise((resolve, reject) => {
    const w = new Worker(url, { ...options, workerData });
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

/**
 * Runs a compiled script in a node process of its own with `flags` (V8's, e.g. inlining off)
 * and returns the JSON it prints; a non-zero exit throws with its stderr.
 */
export function runScript<T>(url: URL, flags: readonly string[], timeoutMs = 300_000): T {
  const r = spawnSync(process.execPath, [...flags, fileURLToPath(url)], { encoding: 'utf8', timeout: timeoutMs });
  if (r.status !== 0) throw new Error(`${url.pathname} exited with ${r.status ?? r.signal}: ${r.stderr}`);
  return JSON.parse(r.stdout) as T;
}

/** How long an allocation probe waits, at most, for quiet windows. */
export const PROBE_BUDGET_MS = 20_000;

/**
 * Heap and ArrayBuffer growth over `n` calls in steady state (optimised code): the smallest
 * window after a warm-up, measuring up to 50 windows and stopping at the first under `quiet`
 * bytes. Unoptimised tiers box doubles, and under load the background compiler can take a
 * while; one-off JIT work lands in some windows only, while an allocation per call shows in
 * every window. A window with a garbage collection in it (negative delta) is ignored.
 * Windows go on past the 50th until `budgetMs` has passed, so a compiler slowed by a loaded
 * machine still gets to install its code; a body that allocates reads loud throughout.
 */
export function allocationProbe(
  n: number,
  body: () => void,
  quiet = 1024,
  budgetMs = PROBE_BUDGET_MS,
): { heap: number; arrayBuffers: number; windows: number } {
  for (let i = 0; i < 10 * n; i++) body();
  let best = { heap: Number.POSITIVE_INFINITY, arrayBuffers: Number.POSITIVE_INFINITY, windows: 0 };
  const until = performance.now() + budgetMs;
  for (let window = 1; window <= 50 || performance.now() < until; window++) {
    const ab = process.memoryUsage().arrayBuffers;
    const h = v8.getHeapStatistics().used_heap_size;
    for (let i = 0; i < n; i++) body();
    const heap = v8.getHeapStatistics().used_heap_size - h;
    const arrayBuffers = process.memoryUsage().arrayBuffers - ab;
    if (heap >= 0 && heap < best.heap) best = { heap, arrayBuffers, windows: window };
    if (best.heap < quiet) break;
  }
  return best;
}

const scratch: string[] = [];
/** A new temporary folder, removed with everything in it when the test process exits. */
export function scratchDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  if (scratch.length === 0)
    process.once('exit', () => {
      for (const d of scratch) rmSync(d, { recursive: true, force: true });
    });
  scratch.push(dir);
  return dir;
}

/**
 * The VAD tests' scene: a tiny checkpoint (seed 3) in a scratch folder, the spoken fixture, and
 * silence at its rate.
 */
export function speechScene(prefix: string): {
  model: string;
  speech: { samples: Float32Array; rate: number };
  rate: number;
  silence: (seconds: number) => Float32Array;
  interrupt: (conv: Conversation) => Promise<void>;
} {
  const model = join(scratchDir(prefix), 'tiny');
  makeCheckpoint({ config: 'tiny', seed: 3, out: model, dtype: 'f32' });
  const speech = readMonoWav(fileURLToPath(new URL('../../test/fixtures/hello.wav', import.meta.url)));
  const rate = speech.rate;
  const silence = (s: number): Float32Array => new Float32Array(Math.round(s * rate));
  /**
   * A question, then the same words over its reply 0.3 s after the reply's first audio, while the
   * reply's stream goes unread (delivery stops at its high-water mark, generation at the
   * look-ahead beyond it); resolves at the barge-in (at most 20 s on), the stream then read.
   */
  const interrupt = async (conv: Conversation): Promise<void> => {
    const stream = conv.stream();
    const firstAudio = new Promise<void>((resolve) => conv.once('audio', () => resolve()));
    for (const part of [silence(0.6), speech.samples, silence(1.2)]) conv.write(part);
    await firstAudio;
    await delay(300);
    const bargeIn = new Promise<void>((resolve) => conv.once('barge_in', () => resolve()));
    for (const part of [speech.samples, silence(1.5)]) conv.write(part);
    await Promise.race([bargeIn, delay(20_000, undefined, { ref: false })]);
    stream.on('data', () => undefined);
  };
  return { model, speech, rate, silence, interrupt };
}
