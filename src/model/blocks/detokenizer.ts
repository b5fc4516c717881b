/**
 * The audio detokenizer (docs/model.md, Detokenizer), streaming one code frame at a time: the mean
 * of the 8 codebook embeddings (codes 0…2047) → repeated ×6 (12.5 → 75 Hz) → the LFM2 stack
 * with a sliding window of 30 → `lin` → 641 log-magnitudes and 641 phases per 75 Hz frame →
 * streaming ISTFT at 24 kHz → band-limited resampling straight to the device rate. Only one
 * code frame's worth of 24 kHz audio ever exists; no plane for the whole reply is kept.
 * Positions restart at 0 each assistant turn (`startTurn`) and keep counting across text
 * interruptions within a turn.
 */
import type { Arena, PlannedRegion } from '../../memory/arena.js';
import { ArgumentError } from '../../errors.js';
import type { Workspace } from '../../dsp/workspace.js';
import type { Planner } from '../../memory/planner.js';
import { StreamingISTFT } from '../../dsp/istft.js';
import { Resampler } from '../../dsp/resample.js';
import type { ModelConfig } from '../format/config.js';
import { DETOKENIZER_PREFIX, type WeightsImage } from '../format/image.js';
import { BackboneState, cacheRows, detokenizerDims, Lfm2Stack, lfm2StateSizes, STEP_BATCH } from './backbone.js';
import { gemvScratchFloats, linearRows, rowInto, type Weights } from './kernels.js';
import '../categories.js';

/** Per-conversation detokenizer state: its LFM2 caches, the ISTFT overlap and the resampler. */
export class DetokenizerState {
  readonly lfm: BackboneState;
  readonly istft: StreamingISTFT;
  readonly resampler: Resampler;

  constructor(config: ModelConfig, arena: Arena, ws: Workspace, o: { turnPositions: number; outputRate: number }) {
    const dims = detokenizerDims(config);
    this.lfm = new BackboneState(dims, arena, o.turnPositions, cacheRows(dims, o.turnPositions, config.detokenizer.upsample), 'detok.');
    const streams = DetokenizerState.streams(config, ws, o.outputRate);
    this.istft = streams.istft;
    this.resampler = streams.resampler;
  }

  /** The streaming ISTFT and the resampler to the device rate, with buffers from `ws`. */
  static streams(config: ModelConfig, ws: Workspace, outputRate: number): { istft: StreamingISTFT; resampler: Resampler } {
    const t = config.detokenizer;
    return { istft: new StreamingISTFT({ nFft: t.nFft, hop: t.hop }, ws), resampler: new Resampler(t.sampleRate, outputRate, {}, ws) };
  }

  /** Region sizes this state carves directly (the LFM2 caches), for sizing its arena. */
  static lfmBytes(config: ModelConfig, turnPositions: number): number[] {
    const dims = detokenizerDims(config);
    return lfm2StateSizes(dims, cacheRows(dims, turnPositions, config.detokenizer.upsample)).map((s) => s.bytes);
  }

  /** A new assistant turn: positions from 0, empty caches and overlap. */
  startTurn(): void {
    this.lfm.reset();
    this.istft.reset();
    this.resampler.reset();
  }
}

/** One conversation's code frame in a batched call (Detokenizer.frames): its samples land in `pcm` from 0. */
export interface DetokenizerJob {
  readonly state: DetokenizerState;
  readonly codes: ArrayLike<number>;
  readonly pcm: Float32Array;
  samples: number;
}

export class Detokenizer {
  readonly config: ModelConfig;
  readonly stack: Lfm2Stack;
  readonly work: PlannedRegion;
  /** Conversations one call (`frames`) serves at most. */
  readonly batch: number;
  readonly #emb: Weights;
  readonly #lin: Weights;
  readonly #linBias: Float32Array;
  readonly #bins: Float32Array; // [batch][upsample][1282]
  readonly #pcm: Float32Array; // one code frame of 24 kHz audio
  readonly #scratch: Float32Array; // int8 activations of `lin`, row by row
  readonly #meanScale: number; // 1/codebooks, made once: a double computed per call would be boxed
  readonly #states: BackboneState[];

  constructor(config: ModelConfig, image: WeightsImage, arena: Arena, derived: Workspace, o: { turnPositions: number; planner?: Planner; batch?: number }) {
    const t = config.detokenizer;
    const batch = o.batch ?? 1;
    if (!Number.isSafeInteger(batch) || batch < 1 || batch > STEP_BATCH)
      throw new ArgumentError(`detokenizer: a batch of 1 to ${STEP_BATCH} conversations, not ${batch}`);
    this.config = config;
    this.batch = batch;
    this.stack = new Lfm2Stack(detokenizerDims(config), image, arena, derived, {
      chunk: batch * t.upsample,
      context: o.turnPositions,
      tensors: `${DETOKENIZER_PREFIX}lfm`,
      name: 'detokenizer',
      category: 'workspace.detokenizer',
      planner: o.planner,
    });
    this.work = this.stack.region;
    this.#emb = image.weights(`${DETOKENIZER_PREFIX}emb.emb.weight`);
    this.#lin = image.weights(`${DETOKENIZER_PREFIX}lin.weight`);
    this.#linBias = image.toF32(`${DETOKENIZER_PREFIX}lin.bias`, derived('detok:lin.bias', Float32Array, t.outBins));
    this.#bins = arena.carve('detokenizer.bins', 'workspace.detokenizer', Float32Array, batch * t.upsample * t.outBins);
    this.#pcm = arena.carve('detokenizer.pcm24', 'workspace.detokenizer', Float32Array, t.upsample * t.hop + t.nFft);
    this.#scratch = arena.carve('detokenizer.scratch', 'workspace.detokenizer', Float32Array, batch * t.upsample * gemvScratchFloats(t.hidden));
    this.#meanScale = 1 / config.audio.codebooks;
    this.#states = new Array<BackboneState>(batch);
  }

  /** The last call's 1282-value rows [conversations][upsample][1282] (log-magnitudes then phases). */
  get bins(): Float32Array {
    return this.#bins;
  }

  /** Most device-rate samples one code frame (or finish) can write. */
  maxSamples(state: DetokenizerState): number {
    return state.resampler.maxOutput(this.config.detokenizer.upsample * this.config.detokenizer.hop + this.config.detokenizer.nFft) + 1;
  }

  /**
   * One code frame (8 codes, 0…2047) → device-rate samples written to out[at…]; returns the
   * count (the first frame of a turn yields 20 ms less: the exact streaming delay).
   */
  frame(state: DetokenizerState, codes: ArrayLike<number>, out: Float32Array, at = 0): number {
    this.#check(codes);
    this.#embed(codes, 0);
    this.#states[0] = state.lfm;
    this.#forward(1);
    return this.#synth(state, 0, out, at);
  }

  /**
   * One code frame of each of the first `m` ≤ `batch` jobs in one call: each weight block is
   * read once for all of them, and each job's samples are the bits `frame` gives it alone.
   */
  frames(jobs: readonly DetokenizerJob[], m: number): void {
    if (!Number.isSafeInteger(m) || m < 1 || m > this.batch || m > jobs.length)
      throw new ArgumentError(`detokenizer: ${m} conversations in one call, at most ${this.batch}`);
    for (let r = 0; r < m; r++) this.#check(jobs[r]!.codes);
    for (let r = 0; r < m; r++) {
      this.#embed(jobs[r]!.codes, r);
      this.#states[r] = jobs[r]!.state.lfm;
    }
    this.#forward(m);
    for (let r = 0; r < m; r++) jobs[r]!.samples = this.#synth(jobs[r]!.state, r, jobs[r]!.pcm, 0);
  }

  #check(codes: ArrayLike<number>): void {
    const t = this.config.detokenizer;
    for (let i = 0; i < this.config.audio.codebooks; i++) {
      const c = codes[i] as number;
      if (!Number.isInteger(c) || c < 0 || c >= t.codes) throw new ArgumentError(`detokenizer: code ${c} of codebook ${i} is not 0…${t.codes - 1}`);
    }
  }

  /** Block `r` of the stack's input: the codebooks' mean embedding, repeated `upsample` times. */
  #embed(codes: ArrayLike<number>, r: number): void {
    const t = this.config.detokenizer;
    const D = t.hidden;
    const h = this.stack.input;
    const at = r * t.upsample * D;
    for (let i = 0; i < this.config.audio.codebooks; i++) rowInto(this.#emb, i * t.codes + (codes[i] as number), h, at, this.#meanScale, i > 0);
    for (let k = 1; k < t.upsample; k++) for (let j = 0; j < D; j++) h[at + k * D + j] = h[at + j]!;
  }

  /** The stack and `lin` (+ bias) on `m` blocks: log-magnitudes and phases into `bins`. */
  #forward(m: number): void {
    const t = this.config.detokenizer;
    const rows = m * t.upsample;
    const hidden = this.stack.forwardBlocks(this.#states, m, t.upsample);
    linearRows(this.#lin, hidden, this.#bins, rows, this.#scratch);
    for (let r = 0; r < rows; r++) for (let j = 0; j < t.outBins; j++) this.#bins[r * t.outBins + j] = this.#bins[r * t.outBins + j]! + this.#linBias[j]!;
  }

  /** Block `r`'s bins through the conversation's ISTFT and resampler into out[at…]. */
  #synth(state: DetokenizerState, r: number, out: Float32Array, at: number): number {
    const t = this.config.detokenizer;
    let n24 = 0;
    for (let k = 0; k < t.upsample; k++) n24 += state.istft.pushFrame(this.#bins, (r * t.upsample + k) * t.outBins, this.#pcm, n24);
    return state.resampler.push(this.#pcm, out, at, n24);
  }

  /** End of the turn's audio: the ISTFT tail and the resampler's, at the device rate. */
  finish(state: DetokenizerState, out: Float32Array, at = 0): number {
    const n24 = state.istft.finish(this.#pcm, 0);
    let n = state.resampler.push(this.#pcm, out, at, n24);
    n += state.resampler.finish(out, at + n);
    return n;
  }
}
