/**
 * llama.cpp as the peer of `bench model --peer`, through node-llama-cpp (a dev dependency, its
 * prebuilt CPU binaries): the backbone exported with `voxslab export-gguf`, prefill of a batch
 * of tokens (llama-bench's pp) and greedy decode one token at a time with the text head (its
 * tg), at a given thread count. The GGUF files are written once into the checkpoint cache.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { exportGguf } from '../src/io/gguf.js';
import type { GgufType } from '../src/model/format/gguf.js';

/** The GGUF encoding closest to a checkpoint's weights: q4 → Q4_0, q8 → Q8_0, floats → F16. */
export function peerType(weights: string): GgufType {
  return weights.includes('q4') ? 'q4_0' : weights.includes('q8') ? 'q8_0' : 'f16';
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

  private constructor(llama: Llama, model: LlamaModel, engine: string) {
    this.#llama = llama;
    this.#model = model;
    this.engine = engine;
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
