/**
 * llama.cpp as the peer of `bench model --peer`: the backbone exported with `voxslab
 * export-gguf`, prefill of a batch of tokens (llama-bench's pp) and greedy decode one token at
 * a time with the text head (its tg), at a given thread count. The peer always runs in a
 * process of its own: llama.cpp's own `llama-bench` when the user has built one
 * (`--peer-bench PATH`), otherwise node-llama-cpp (a dev dependency, its prebuilt CPU
 * binaries) in a child process, one per sample. The GGUF files are written once into the
 * checkpoint cache.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { exportGguf } from '../src/io/gguf.js';
import type { GgufType } from '../src/model/format/gguf.js';

/** The GGUF encoding of a checkpoint's weights: q4 → Q4_0, q8 → Q8_0, f16 → F16, f32 → F32 (both sides read the same bytes per weight). */
export function peerType(weights: string): GgufType {
  return weights.includes('q4') ? 'q4_0' : weights.includes('q8') ? 'q8_0' : /f16|F16/.test(weights) ? 'f16' : 'f32';
}

/** What a process's memory sits on: its anonymous and file-backed memory mapped in huge pages (MiB), from /proc/<pid>/smaps_rollup. */
export interface Pages {
  anonHugeMiB: number;
  fileHugeMiB: number;
}

export function pagesOf(pid: number | 'self'): Pages | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  } catch {
    return null;
  }
  const kib = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0);
  return { anonHugeMiB: Math.round(kib('AnonHugePages') / 1024), fileHugeMiB: Math.round(kib('FilePmdMapped') / 1024) };
}

/** The peer's engine: its name and version, the CPU build it loaded (llama.cpp's system info line), and its pages. */
export interface PeerInfo {
  engine: string;
  variant: string;
  pages: Pages | null;
}

const CHILD = fileURLToPath(new URL('./workers/peer-child.js', import.meta.url));

/** One sample of node-llama-cpp alone in a child process: prefill of `prefill` tokens, then `decode` steps, at `threads`. */
export function peerChildSample(gguf: string, threads: number, prefill: number, decode: number): PeerSpeed & PeerInfo {
  const r = spawnSync(process.execPath, [CHILD, gguf, String(threads), String(prefill), String(decode)], { encoding: 'utf8', maxBuffer: 1 << 24 });
  if (r.status !== 0) throw new Error(`bench model --peer: the peer process failed: ${r.error?.message ?? r.stderr.trim().split('\n').pop()}`);
  return JSON.parse(r.stdout) as PeerSpeed & PeerInfo;
}

/** CPU time this process spends while `f` runs, over its wall time: how much of voxslab ran beside a peer that `f` waits for. */
export function besideCpu<T>(f: () => T): { result: T; cpuMs: number; wallMs: number } {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const result = f();
  const c = process.cpuUsage(c0);
  return { result, cpuMs: (c.user + c.system) / 1000, wallMs: performance.now() - t0 };
}

/** llama-bench's samples per thread count (tokens/s of each repetition), and what it ran. */
export interface LlamaBenchResult {
  prefill: Map<number, number[]>;
  decode: Map<number, number[]>;
  info: PeerInfo;
}

/** `llama-bench -m gguf -p prefill -n decode -t threads -r reps -o json`, in its own process. */
export function llamaBench(bin: string, gguf: string, prefill: number, decode: number, threads: readonly number[], reps: number): LlamaBenchResult {
  const args = ['-m', gguf, '-p', String(prefill), '-n', String(decode), '-t', threads.join(','), '-r', String(reps), '-o', 'json'];
  const r = spawnSync(bin, args, { encoding: 'utf8', maxBuffer: 1 << 24 });
  if (r.error !== undefined || r.status !== 0)
    throw new Error(
      `bench model --peer-bench: ${bin} on ${gguf} failed (${r.error?.message ?? r.signal ?? `exit ${r.status}`}): ${r.stderr.trim().split('\n').pop() ?? ''}`,
    );
  type Test = {
    n_prompt: number;
    n_gen: number;
    n_threads: number;
    avg_ts: number;
    samples_ts?: number[];
    build_commit?: string;
    cpu_info?: string;
    backends?: string;
  };
  const tests = JSON.parse(r.stdout) as Test[];
  const out: LlamaBenchResult = { prefill: new Map(), decode: new Map(), info: { engine: 'llama-bench', variant: '', pages: null } };
  for (const t of tests) {
    const samples = t.samples_ts ?? [t.avg_ts];
    if (t.n_prompt > 0 && t.n_gen === 0) out.prefill.set(t.n_threads, samples);
    else if (t.n_gen > 0 && t.n_prompt === 0) out.decode.set(t.n_threads, samples);
    out.info = {
      engine: `llama.cpp ${t.build_commit ?? '?'} llama-bench`,
      variant: `${t.backends ?? 'CPU'} on ${t.cpu_info ?? 'this CPU'} (built natively)`,
      pages: null,
    };
  }
  return out;
}

/** The backbone of `dir` as GGUF in `type`, exported once beside the checkpoint. */
export function peerGguf(dir: string, type: GgufType, log: (l: string) => void): string {
  const file = join(dir, `backbone.${type}.gguf`);
  if (!existsSync(file)) {
    log(`exporting the backbone of ${dir} to ${type} GGUF for the peer (first use)`);
    exportGguf({ model: dir, out: file, type });
  }
  return file;
}

export interface PeerSpeed {
  prefillTokensPerSecond: number;
  decodeTokensPerSecond: number;
}

type NodeLlamaCpp = typeof import('node-llama-cpp');
type Token = import('node-llama-cpp').Token;
type Llama = Awaited<ReturnType<NodeLlamaCpp['getLlama']>>;
type LlamaModel = Awaited<ReturnType<Llama['loadModel']>>;

/** One loaded GGUF model in llama.cpp's CPU backend. */
export class LlamaPeer {
  readonly #llama: Llama;
  readonly #model: LlamaModel;
  readonly engine: string;
  /** llama.cpp's system info line: the features of the CPU build it loaded. */
  readonly variant: string;

  private constructor(llama: Llama, model: LlamaModel, engine: string) {
    this.#llama = llama;
    this.#model = model;
    this.engine = engine;
    this.variant = llama.systemInfo.trim();
  }

  static async open(gguf: string): Promise<LlamaPeer> {
    let lib: NodeLlamaCpp;
    try {
      lib = await import('node-llama-cpp');
    } catch (error) {
      throw new Error('bench model --peer needs node-llama-cpp (npm install node-llama-cpp@3.21.1)', { cause: error });
    }
    const llama = await lib.getLlama({ gpu: false, build: 'never', logLevel: lib.LlamaLogLevel.error });
    const model = await llama.loadModel({ modelPath: gguf });
    return new LlamaPeer(llama, model, `llama.cpp ${llama.llamaCppRelease.release} via node-llama-cpp`);
  }

  /** One measurement: prefill of `prefill` tokens in one batch, then `decode` greedy steps. */
  async speed(threads: number, prefill: number, decode: number): Promise<PeerSpeed> {
    const V = vocabOf(this.#model);
    const ids = Array.from({ length: prefill }, (_, i) => (200 + ((i * 7919) % (V - 200))) as Token);
    const ctx = await this.#model.createContext({ contextSize: prefill + decode + 64, batchSize: prefill, threads, sequences: 1 });
    try {
      const seq = ctx.getSequence();
      await seq.evaluateWithoutGeneratingNewTokens(ids.slice(0, 8)); // warm up
      await seq.clearHistory();
      let t0 = process.hrtime.bigint();
      await seq.evaluateWithoutGeneratingNewTokens(ids);
      const prefillS = Number(process.hrtime.bigint() - t0) / 1e9;
      await seq.clearHistory();
      await seq.evaluateWithoutGeneratingNewTokens(ids.slice(0, 16));
      let token = ids[16] as Token;
      t0 = process.hrtime.bigint();
      for (let i = 0; i < decode; i++) {
        const [out] = await seq.controlledEvaluate([[token, { generateNext: { token: true, options: { temperature: 0 } } }]]);
        token = out?.next?.token ?? token;
      }
      const decodeS = Number(process.hrtime.bigint() - t0) / 1e9;
      return { prefillTokensPerSecond: prefill / prefillS, decodeTokensPerSecond: decode / decodeS };
    } finally {
      await ctx.dispose();
    }
  }

  async close(): Promise<void> {
    await this.#model.dispose();
    await this.#llama.dispose();
  }
}

/** The vocabulary size from the file's metadata (prompt ids are drawn from above the specials). */
function vocabOf(model: LlamaModel): number {
  const n = (model.fileInfo.metadata as { lfm2?: { vocab_size?: number } }).lfm2?.vocab_size;
  if (typeof n !== 'number' || n <= 200) throw new Error('the peer GGUF has no lfm2.vocab_size above 200');
  return n;
}
