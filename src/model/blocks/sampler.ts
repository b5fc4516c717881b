/**
 * Token sampling: greedy, or temperature with top-k, from a seeded PRNG per conversation, so
 * the same seed gives the same tokens. Greedy when temperature ≤ 0 or top-k is 1 (ties go to
 * the lowest index). One index may be masked (the end-of-audio code for codebooks 1–7).
 * Allocation-free after construction.
 */
import { heapWorkspace, type Workspace } from '../../dsp/workspace.js';
import { ArgumentError } from '../../errors.js';

export interface SamplingOptions {
  temperature: number;
  topK: number;
}

export const TEXT_SAMPLING: Readonly<SamplingOptions> = Object.freeze({ temperature: 0, topK: 1 });
export const AUDIO_SAMPLING: Readonly<SamplingOptions> = Object.freeze({ temperature: 1, topK: 4 });
export const MAX_TOP_K = 256;

export class Sampler {
  // mulberry32 state kept inline (the same sequence as memory/prng), and its step written inside
  // `sample`: a call returning a double boxes it on every draw whenever V8 does not inline it.
  readonly #state: Uint32Array;
  readonly #seed: number;
  readonly #idx: Int32Array; // [MAX_TOP_K] the top-k so far
  readonly #val: Float64Array; // [MAX_TOP_K] their logits

  /** `ws` places the state (a conversation's arena; the heap by default). */
  constructor(seed: number, ws: Workspace = heapWorkspace) {
    if (!Number.isSafeInteger(seed) || seed < 0) throw new ArgumentError(`sampler seed must be a non-negative integer, got ${seed}`);
    this.#state = ws('sampler.state', Uint32Array, 1);
    this.#idx = ws('sampler.top_index', Int32Array, MAX_TOP_K);
    this.#val = ws('sampler.top_value', Float64Array, MAX_TOP_K);
    this.#seed = seed;
    this.#state[0] = seed >>> 0;
  }

  /** Restarts the sequence (a new conversation with the same seed). */
  reset(): void {
    this.#state[0] = this.#seed >>> 0;
  }

  /** The generator's whole state (one word), to checkpoint and restore. */
  get state(): number {
    return this.#state[0] as number;
  }

  set state(v: number) {
    this.#state[0] = v >>> 0;
  }

  /** Index sampled from logits[0…n), never `masked` (−1 for none). */
  sample(logits: ArrayLike<number>, n: number, o: SamplingOptions, masked = -1): number {
    const k = Math.max(1, Math.min(o.topK, MAX_TOP_K, n - (masked >= 0 && masked < n ? 1 : 0)));
    // Top-k by insertion into a small sorted list (descending; ties keep the lower index).
    let size = 0;
    for (let i = 0; i < n; i++) {
      if (i === masked) continue;
      const v = logits[i] as number;
      if (size === k && !(v > (this.#val[k - 1] as number))) continue;
      let j = size < k ? size++ : k - 1;
      while (j > 0 && v > (this.#val[j - 1] as number)) {
        this.#val[j] = this.#val[j - 1] as number;
        this.#idx[j] = this.#idx[j - 1] as number;
        j--;
      }
      this.#val[j] = v;
      this.#idx[j] = i;
    }
    if (o.temperature <= 0 || k === 1 || size === 1) return this.#idx[0] as number;
    const top = this.#val[0] as number;
    let z = 0;
    for (let j = 0; j < size; j++) z += Math.exp(((this.#val[j] as number) - top) / o.temperature);
    // The generator step, written here: a double returned from a call that is not inlined is boxed.
    const a = ((this.#state[0] as number) + 0x6d2b79f5) >>> 0;
    this.#state[0] = a;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    let u = (((t ^ (t >>> 14)) >>> 0) / 4294967296) * z;
    for (let j = 0; j < size; j++) {
      u -= Math.exp(((this.#val[j] as number) - top) / o.temperature);
      if (u < 0) return this.#idx[j] as number;
    }
    return this.#idx[size - 1] as number;
  }
}
