/**
 * The Depthformer (docs/model.md): per 80 ms frame, eight sequential codebook steps. Step i reads
 * slice i of depth_linear(h) plus the previous codebook's embedding (nothing for i = 0), runs
 * the small transformer at position i (fused qkv, per-head q/k RMSNorm, RoPE on adjacent pairs,
 * GQA over the frame's cache, SwiGLU), then logits_i = to_logits_i(RMSNorm_i(x)) over 2049
 * codes, and samples code i. Codebooks 1–7 never emit 2048 (end of audio). The frame's KV cache
 * is empty at the start of every frame.
 */
import type { Arena, PlannedRegion } from '../../memory/arena.js';
import { PassBuilder, plan, type Planner } from '../../memory/index.js';
import type { Workspace } from '../../dsp/workspace.js';
import type { ModelConfig } from '../format/config.js';
import type { WeightsImage } from '../format/image.js';
import {
  attentionScratchFloats,
  gemvScratchFloats,
  addRmsNorm,
  linear1,
  linearMany,
  linearRowsMany,
  linearSet,
  type LinearSet,
  linearRows,
  rmsNorm,
  rope,
  ropeTables,
  rowInto,
  swiglu,
  weightRows,
  type Weights,
} from './kernels.js';
import type { Sampler, SamplingOptions } from './sampler.js';
import { STEP_BATCH } from './backbone.js';
import { ArgumentError } from '../../errors.js';
import { ATTENTION_MASK, native } from '../../native.js';
import '../categories.js';

const EPS = 1e-5;
const F32 = 4;
export const END_OF_AUDIO = 2048;

/**
 * Workspace of one codebook step (all small; every buffer lives for the step), for `rows`
 * conversations at once (`frameRows`).
 */
export function depthformerPass(config: ModelConfig, rows = 1): PassBuilder {
  const f = config.depthformer;
  const cb = config.audio.codebooks;
  const kd = f.kvHeads * f.headDim;
  const widest = Math.max(config.backbone.hidden, f.dim, f.ffn);
  const p = new PassBuilder().external('hidden', 'depth_kv');
  const s = (name: string, floats: number) => p.state(name, floats * F32 * (name === 'scratch' ? 1 : rows));
  s('slices', cb * f.dim);
  s('x', f.dim);
  s('ln', f.dim);
  s('q', f.dim);
  s('k', kd);
  s('v', kd);
  s('ctx', f.dim);
  s('o', f.dim);
  s('gate', f.ffn);
  s('up', f.ffn);
  s('act', f.ffn);
  s('logits', config.audio.codes);
  s('scratch', attentionScratchFloats(1, cb, f.headDim, f.heads, f.kvHeads));
  s('gemv.scratch', gemvScratchFloats(widest));
  p.op('step', ['hidden', 'depth_kv']);
  return p;
}

/** Floats of one frame cache (keys and values of every layer over the frame's codebooks); a Depthformer of `rows` keeps one per row. */
export function depthformerStateFloats(config: ModelConfig): number {
  const f = config.depthformer;
  return f.layers * 2 * config.audio.codebooks * f.kvHeads * f.headDim;
}

interface DepthLayer {
  opNorm: Float32Array;
  ffnNorm: Float32Array;
  q: Weights;
  k: Weights;
  v: Weights;
  qNorm: Float32Array;
  kNorm: Float32Array;
  out: Weights;
  w1: Weights;
  w2: Weights;
  w3: Weights;
  /** q, k and v of one row in one call, and the gate and up projections in another. */
  qkv: LinearSet;
  gateUp: LinearSet;
}

/** Per row of a several-row frame: views of the plan's planes, made once. */
type RowViews = Readonly<Record<'q' | 'k' | 'v' | 'ctx' | 'logits', Float32Array>>;

export class Depthformer {
  readonly config: ModelConfig;
  readonly region: PlannedRegion;
  /** Conversations one call can serve (`frameRows`), from 1 to STEP_BATCH. */
  readonly rows: number;
  readonly #rowViews: RowViews[];
  readonly #v: Readonly<Record<string, Float32Array>>;
  readonly #linear: Weights;
  readonly #linearBias: Float32Array;
  readonly #layers: DepthLayer[];
  readonly #embed: Weights[];
  readonly #norm: Float32Array[];
  readonly #logits: Weights[];
  readonly #cos: Float32Array;
  readonly #sin: Float32Array;
  readonly #kvViews: Float32Array[][]; // per row, [layers][k|v] views of its frame cache, [codebooks][kv heads × head dim] each, made once
  readonly #qkvRows: readonly Float32Array[]; // the q, k, v and the gate, up outputs of every row (frameRows), made once
  readonly #gateUpRows: readonly Float32Array[];
  readonly #scale: number; // 1/√head dim, made once: a double computed per call would be boxed

  constructor(config: ModelConfig, image: WeightsImage, arena: Arena, derived: Workspace, state: Float32Array, planner: Planner = plan, rows = 1) {
    const f = config.depthformer;
    const cb = config.audio.codebooks;
    if (!Number.isInteger(rows) || rows < 1 || rows > STEP_BATCH) throw new ArgumentError(`depthformer rows must be from 1 to ${STEP_BATCH}, got ${rows}`);
    this.config = config;
    this.rows = rows;
    this.region = arena.carvePlan('depthformer', 'workspace.depthformer', planner(depthformerPass(config, rows).build()));
    this.#v = this.region.views as Record<string, Float32Array>;
    const kd = f.kvHeads * f.headDim;
    const row = (name: string, r: number, n: number): Float32Array => (this.#v[name] as Float32Array).subarray(r * n, (r + 1) * n);
    this.#qkvRows = [this.#v.q!, this.#v.k!, this.#v.v!];
    this.#gateUpRows = [this.#v.gate!, this.#v.up!];
    this.#rowViews = Array.from({ length: rows }, (_, r) => ({
      q: row('q', r, f.dim),
      k: row('k', r, kd),
      v: row('v', r, kd),
      ctx: row('ctx', r, f.dim),
      logits: row('logits', r, config.audio.codes),
    }));
    const f32 = (name: string): Float32Array =>
      image.toF32(
        name,
        derived(
          `depth:${name}`,
          Float32Array,
          image.get(name).shape.reduce((a, c) => a * c, 1),
        ),
      );
    this.#linear = image.weights('depth_linear.weight');
    this.#linearBias = f32('depth_linear.bias');
    this.#layers = Array.from({ length: f.layers }, (_, l) => {
      const p = `depthformer.layers.${l}`;
      const qkv = image.weights(`${p}.operator.qkv_proj.weight`);
      const q = weightRows(qkv, 0, f.dim);
      const k = weightRows(qkv, f.dim, f.dim + kd);
      const v = weightRows(qkv, f.dim + kd, f.dim + 2 * kd);
      const w1 = image.weights(`${p}.feed_forward.w1.weight`);
      const w3 = image.weights(`${p}.feed_forward.w3.weight`);
      const one = this.#rowViews[0] as RowViews;
      return {
        opNorm: f32(`${p}.operator_norm.weight`),
        ffnNorm: f32(`${p}.ffn_norm.weight`),
        q,
        k,
        v,
        qNorm: f32(`${p}.operator.bounded_attention.q_layernorm.weight`),
        kNorm: f32(`${p}.operator.bounded_attention.k_layernorm.weight`),
        out: image.weights(`${p}.operator.out_proj.weight`),
        w1,
        w2: image.weights(`${p}.feed_forward.w2.weight`),
        w3,
        qkv: linearSet([q, k, v], [one.q, one.k, one.v]),
        gateUp: linearSet([w1, w3], [(this.#v.gate as Float32Array).subarray(0, f.ffn), (this.#v.up as Float32Array).subarray(0, f.ffn)]),
      };
    });
    this.#embed = Array.from({ length: cb }, (_, i) => image.weights(`depth_embeddings.${i}.embedding.weight`));
    this.#norm = Array.from({ length: cb }, (_, i) => f32(`depth_embeddings.${i}.embedding_norm.weight`));
    this.#logits = Array.from({ length: cb }, (_, i) => image.weights(`depth_embeddings.${i}.to_logits.weight`));
    const half = f.headDim / 2;
    this.#cos = derived('depth:rope.cos', Float32Array, cb * half);
    this.#sin = derived('depth:rope.sin', Float32Array, cb * half);
    ropeTables(cb, f.headDim, config.backbone.ropeTheta, this.#cos, this.#sin);
    const per = depthformerStateFloats(config);
    // A sizing (unbacked) arena's large views are empty.
    if (state.length < rows * per && arena.backed) throw new ArgumentError('depthformer state is too small');
    const span = cb * kd;
    this.#kvViews = Array.from({ length: rows }, (_, r) =>
      Array.from({ length: 2 * f.layers }, (_, j) => state.subarray(r * per + j * span, r * per + (j + 1) * span)),
    );
    this.#scale = 1 / Math.sqrt(f.headDim);
  }

  /** One codebook step's attention for a query row `q` over row `r`'s frame cache (position i). */
  #attend(r: number, l: number, i: number, q: Float32Array, ctx: Float32Array): void {
    const f = this.config.depthformer;
    const cb = this.config.audio.codebooks;
    const kv = this.#kvViews[r]!;
    native.attention(
      q,
      kv[2 * l]!,
      kv[2 * l + 1]!,
      ctx,
      null,
      null,
      null,
      this.#v.scratch as Float32Array,
      1,
      i + 1,
      f.heads,
      f.kvHeads,
      f.headDim,
      i,
      0,
      0,
      ATTENTION_MASK.causal,
      this.#scale,
      1,
      cb,
    );
  }

  /** Keys and values of codebook step i, layer l, into row `r`'s frame cache. */
  #cache(r: number, l: number, i: number, k: Float32Array, v: Float32Array): void {
    const kd = this.config.depthformer.kvHeads * this.config.depthformer.headDim;
    const K = this.#kvViews[r]![2 * l]!;
    const V = this.#kvViews[r]![2 * l + 1]!;
    for (let j = 0; j < kd; j++) {
      K[i * kd + j] = k[j]!;
      V[i * kd + j] = v[j]!;
    }
  }

  /**
   * One frame of each of `m` ≤ `rows` conversations at once: row r of `hidden` ([m][hidden])
   * is conversation r's, sampled with `samplers[r]` and `options[r]` into `codes[r]`. Every
   * linear layer runs over the m rows (`linearRows`: each weight block is read once for all
   * of them, and each row gets the bits `frame` gives it); RoPE, row r's own frame cache,
   * attention and sampling run per row. Every bit equals m calls of `frame`.
   */
  frameRows(hidden: Float32Array, m: number, samplers: readonly Sampler[], options: readonly SamplingOptions[], codes: readonly Int32Array[]): void {
    if (m < 1 || m > this.rows) throw new ArgumentError(`depthformer: ${m} rows in a frame, at most ${this.rows}`);
    const f = this.config.depthformer;
    const cb = this.config.audio.codebooks;
    const n = this.config.audio.codes;
    const v = this.#v;
    const hd = f.headDim;
    const scratch = v['gemv.scratch'] as Float32Array;
    const slices = v.slices as Float32Array;
    const x = v.x as Float32Array;
    const ln = v.ln as Float32Array;
    const o = v.o as Float32Array;
    const rows = this.#rowViews;
    linearRows(this.#linear, hidden, slices, m, scratch);
    const width = cb * f.dim;
    for (let r = 0; r < m; r++) for (let j = 0; j < width; j++) slices[r * width + j] = slices[r * width + j]! + this.#linearBias[j]!;
    for (let i = 0; i < cb; i++) {
      for (let r = 0; r < m; r++) {
        for (let j = 0; j < f.dim; j++) x[r * f.dim + j] = slices[r * width + i * f.dim + j]!;
        if (i > 0) rowInto(this.#embed[i - 1]!, codes[r]![i - 1]!, x, r * f.dim, 1, true);
      }
      for (let l = 0; l < this.#layers.length; l++) {
        const L = this.#layers[l]!;
        if (l === 0) rmsNorm(x, L.opNorm, ln, m, f.dim, EPS);
        else addRmsNorm(x, o, L.opNorm, ln, m, f.dim, EPS);
        linearRowsMany(L.qkv, ln, this.#qkvRows, m, scratch);
        rmsNorm(v.q as Float32Array, L.qNorm, v.q as Float32Array, m * f.heads, hd, EPS);
        rmsNorm(v.k as Float32Array, L.kNorm, v.k as Float32Array, m * f.kvHeads, hd, EPS);
        for (let r = 0; r < m; r++) {
          const rv = rows[r]!;
          rope(rv.q, this.#cos, this.#sin, 1, f.heads, hd, i, true);
          rope(rv.k, this.#cos, this.#sin, 1, f.kvHeads, hd, i, true);
          this.#cache(r, l, i, rv.k, rv.v);
          this.#attend(r, l, i, rv.q, rv.ctx);
        }
        linearRows(L.out, v.ctx as Float32Array, o, m, scratch);
        addRmsNorm(x, o, L.ffnNorm, ln, m, f.dim, EPS);
        linearRowsMany(L.gateUp, ln, this.#gateUpRows, m, scratch);
        swiglu(v.gate as Float32Array, v.up as Float32Array, v.act as Float32Array, m * f.ffn);
        linearRows(L.w2, v.act as Float32Array, o, m, scratch);
      }
      addRmsNorm(x, o, this.#norm[i]!, ln, m, f.dim, EPS);
      linearRows(this.#logits[i]!, ln, v.logits as Float32Array, m, scratch);
      for (let r = 0; r < m; r++) codes[r]![i] = samplers[r]!.sample(rows[r]!.logits, n, options[r]!, i > 0 ? END_OF_AUDIO : -1);
    }
  }

  /**
   * One frame: writes the 8 codes to `codes`. `logitsOut`, when given, receives each
   * codebook's logits ([codebooks][2049]) for inspection and tests. `forced`, when given,
   * feeds those codes back instead of the sampled ones (teacher forcing).
   */
  frame(
    hidden: Float32Array,
    sampler: Sampler,
    options: SamplingOptions,
    codes: Int32Array,
    logitsOut: Float32Array | null = null,
    forced: ArrayLike<number> | null = null,
  ): void {
    const f = this.config.depthformer;
    const cb = this.config.audio.codebooks;
    const v = this.#v;
    const hd = f.headDim;
    const scratch = v['gemv.scratch'] as Float32Array;
    const slices = v.slices as Float32Array;
    linear1(this.#linear, hidden, slices, scratch);
    for (let j = 0; j < cb * f.dim; j++) slices[j] = slices[j]! + this.#linearBias[j]!;
    const x = v.x as Float32Array;
    const ln = v.ln as Float32Array;
    const q = v.q as Float32Array;
    const k = v.k as Float32Array;
    const vv = v.v as Float32Array;
    const ctx = v.ctx as Float32Array;
    const o = v.o as Float32Array;
    const logits = v.logits as Float32Array;
    for (let i = 0; i < cb; i++) {
      for (let j = 0; j < f.dim; j++) x[j] = slices[i * f.dim + j]!;
      if (i > 0) rowInto(this.#embed[i - 1]!, forced ? (forced[i - 1] as number) : codes[i - 1]!, x, 0, 1, true);
      for (let l = 0; l < this.#layers.length; l++) {
        const L = this.#layers[l]!;
        // The previous layer's FFN output added to x with this norm.
        if (l === 0) rmsNorm(x, L.opNorm, ln, 1, f.dim, EPS);
        else addRmsNorm(x, o, L.opNorm, ln, 1, f.dim, EPS);
        linearMany(L.qkv, ln, scratch);
        rmsNorm(q, L.qNorm, q, f.heads, hd, EPS);
        rmsNorm(k, L.kNorm, k, f.kvHeads, hd, EPS);
        rope(q, this.#cos, this.#sin, 1, f.heads, hd, i, true);
        rope(k, this.#cos, this.#sin, 1, f.kvHeads, hd, i, true);
        this.#cache(0, l, i, k, vv);
        this.#attend(0, l, i, q, ctx);
        linear1(L.out, ctx, o, scratch);
        addRmsNorm(x, o, L.ffnNorm, ln, 1, f.dim, EPS);
        linearMany(L.gateUp, ln, scratch);
        swiglu(v.gate as Float32Array, v.up as Float32Array, v.act as Float32Array, f.ffn);
        linear1(L.w2, v.act as Float32Array, o, scratch);
      }
      addRmsNorm(x, o, this.#norm[i]!, ln, 1, f.dim, EPS);
      linear1(this.#logits[i]!, ln, logits, scratch);
      if (logitsOut !== null) for (let j = 0; j < this.config.audio.codes; j++) logitsOut[i * this.config.audio.codes + j] = logits[j]!;
      codes[i] = sampler.sample(logits, this.config.audio.codes, options, i > 0 ? END_OF_AUDIO : -1);
    }
  }
}
