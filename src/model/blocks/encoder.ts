/**
 * The FastConformer encoder and the audio adapter (docs/model.md, Encoder), computed on the views of
 * the stage plan carved from an arena: the planes are exactly those `encoderPass` describes, so
 * the plan and the compute cannot disagree. One call encodes one completed user segment
 * (normalised mel rows [T][128]) into [T'][D] adapter outputs, T' = ceil(T / 8).
 *
 * Per layer: FF1 (×0.5) → relative-position MHSA → conv module (GLU, depthwise 'same' conv with
 * batch-norm folded at load, SiLU) → FF2 (×0.5) → norm_out; all LayerNorms pre-norm, ε 1e-5.
 * Row-wise blocks run in row tiles, attention in query × key tiles, subsampling in time tiles.
 *
 * Thread contract: one encoder per pass slot; `encode` allocates no ArrayBuffer (one view of the
 * position table per call) and is deterministic.
 */
import type { Arena, PlannedRegion } from '../../memory/arena.js';
import { ArgumentError } from '../../errors.js';
import { plan, type Planner } from '../../memory/planner.js';
import type { Workspace } from '../../dsp/workspace.js';
import type { ModelConfig } from '../format/config.js';
import type { WeightsImage } from '../format/image.js';
import { attention, gelu, gemm, glu, layerNorm, silu, conv1dSame, type Weights } from './kernels.js';
import { DEFAULT_ENCODER_TILES, encoderFrames, encoderPass, melRows, segmentSamples, type EncoderTiles } from '../plan/plans.js';
import { Subsampler } from './subsampling.js';
import { normaliseRows } from '../../dsp/mel.js';
import '../categories.js';

const EPS = 1e-5;

interface Layer {
  ff: { nw: Float32Array; nb: Float32Array; w1: Weights; b1: Float32Array; w2: Weights; b2: Float32Array }[];
  att: {
    nw: Float32Array;
    nb: Float32Array;
    q: Weights;
    bq: Float32Array;
    k: Weights;
    bk: Float32Array;
    v: Weights;
    bv: Float32Array;
    o: Weights;
    bo: Float32Array;
    pos: Weights;
    u: Float32Array;
    vb: Float32Array;
  };
  conv: { nw: Float32Array; nb: Float32Array; pw1: Weights; b1: Float32Array; dw: Float32Array; dwb: Float32Array; pw2: Weights; b2: Float32Array };
  out: { nw: Float32Array; nb: Float32Array };
}

/** Relative-position sinusoids for positions T−1 … −(T−1): even columns sin, odd cos. */
export function relativePositionTable(T: number, d: number, out: Float32Array): void {
  for (let r = 0; r < 2 * T - 1; r++) {
    const pos = T - 1 - r;
    for (let i = 0; i < d / 2; i++) {
      const f = Math.exp((-2 * i * Math.log(10000)) / d);
      out[r * d + 2 * i] = Math.sin(pos * f);
      out[r * d + 2 * i + 1] = Math.cos(pos * f);
    }
  }
}

export class ConformerEncoder {
  readonly config: ModelConfig;
  readonly maxFrames: number;
  readonly region: PlannedRegion;
  readonly #tiles: EncoderTiles;
  readonly #layers: Layer[];
  readonly #adapter: { nw: Float32Array; nb: Float32Array; w1: Weights; b1: Float32Array; w2: Weights; b2: Float32Array };
  readonly #sub: Subsampler;
  readonly #pos: Float32Array; // [2·maxFrames − 1][d]
  readonly #v: Readonly<Record<string, Float32Array>>;
  readonly #xTiles: Float32Array[]; // row-tile views of x
  readonly #encTiles: Float32Array[]; // row-tile views of the output
  readonly #gluTiles: Float32Array[];

  /**
   * `arena` receives the stage plan (category workspace.conformer); `derived` provides the
   * f32 copies of small tensors and the position table (charged to the model as derived).
   */
  constructor(
    config: ModelConfig,
    image: WeightsImage,
    arena: Arena,
    derived: Workspace,
    options: { segmentSeconds: number; tiles?: EncoderTiles; planner?: Planner },
  ) {
    const e = config.encoder;
    const tiles = options.tiles ?? DEFAULT_ENCODER_TILES;
    if (tiles.rows < 1 || tiles.queries < 1 || tiles.keys < 1 || tiles.subsampling < 1)
      throw new ArgumentError('the encoder runs tiled: every tile size must be positive');
    this.config = config;
    this.#tiles = tiles;
    this.maxFrames = encoderFrames(config, melRows(config, segmentSamples(config, options.segmentSeconds)));
    const pass = encoderPass(config, { segmentSeconds: options.segmentSeconds, tiles });
    const types = { 'sub.lo': Int32Array, 'sub.hi': Int32Array, 'sub.totals': Int32Array, 'mel.stats': Float64Array } as const;
    this.region = arena.carvePlan('conformer', 'workspace.conformer', (options.planner ?? plan)(pass.build()), types);
    this.#v = this.region.views as Record<string, Float32Array>;
    const f32 = (name: string): Float32Array => {
      const t = image.get(name);
      const n = t.shape.reduce((a, b) => a * b, 1);
      return image.toF32(name, derived(`enc:${name}`, Float32Array, n));
    };
    const W = (name: string): Weights => image.weights(name);
    this.#layers = [];
    for (let n = 0; n < e.layers; n++) {
      const p = `conformer.layers.${n}`;
      const ff = (k: string, norm: string) => ({
        nw: f32(`${p}.${norm}.weight`),
        nb: f32(`${p}.${norm}.bias`),
        w1: W(`${p}.${k}.linear1.weight`),
        b1: f32(`${p}.${k}.linear1.bias`),
        w2: W(`${p}.${k}.linear2.weight`),
        b2: f32(`${p}.${k}.linear2.bias`),
      });
      const pw = (name: string): Weights => {
        const t = image.get(name); // [out, in, 1] stored as a matrix [out][in]
        const f = f32(name);
        return { kind: 'f32', data: f, rows: t.shape[0] as number, cols: t.shape[1] as number };
      };
      const dwt = image.bytes(`${p}.conv.depthwise_conv.folded_weight`);
      const dwb = image.bytes(`${p}.conv.depthwise_conv.folded_bias`);
      this.#layers.push({
        ff: [ff('feed_forward1', 'norm_feed_forward1'), ff('feed_forward2', 'norm_feed_forward2')],
        att: {
          nw: f32(`${p}.norm_self_att.weight`),
          nb: f32(`${p}.norm_self_att.bias`),
          q: W(`${p}.self_attn.linear_q.weight`),
          bq: f32(`${p}.self_attn.linear_q.bias`),
          k: W(`${p}.self_attn.linear_k.weight`),
          bk: f32(`${p}.self_attn.linear_k.bias`),
          v: W(`${p}.self_attn.linear_v.weight`),
          bv: f32(`${p}.self_attn.linear_v.bias`),
          o: W(`${p}.self_attn.linear_out.weight`),
          bo: f32(`${p}.self_attn.linear_out.bias`),
          pos: W(`${p}.self_attn.linear_pos.weight`),
          u: f32(`${p}.self_attn.pos_bias_u`),
          vb: f32(`${p}.self_attn.pos_bias_v`),
        },
        conv: {
          nw: f32(`${p}.norm_conv.weight`),
          nb: f32(`${p}.norm_conv.bias`),
          pw1: pw(`${p}.conv.pointwise_conv1.weight`),
          b1: f32(`${p}.conv.pointwise_conv1.bias`),
          dw: new Float32Array(dwt.buffer, dwt.byteOffset, dwt.byteLength / 4),
          dwb: new Float32Array(dwb.buffer, dwb.byteOffset, dwb.byteLength / 4),
          pw2: pw(`${p}.conv.pointwise_conv2.weight`),
          b2: f32(`${p}.conv.pointwise_conv2.bias`),
        },
        out: { nw: f32(`${p}.norm_out.weight`), nb: f32(`${p}.norm_out.bias`) },
      });
    }
    this.#adapter = {
      nw: f32('audio_adapter.model.0.weight'),
      nb: f32('audio_adapter.model.0.bias'),
      w1: W('audio_adapter.model.1.weight'),
      b1: f32('audio_adapter.model.1.bias'),
      w2: W('audio_adapter.model.3.weight'),
      b2: f32('audio_adapter.model.3.bias'),
    };
    const sw = {
      conv0: { w: f32('conformer.pre_encode.conv.0.weight'), b: f32('conformer.pre_encode.conv.0.bias') },
      dw: Array.from({ length: e.stages - 1 }, (_, j) => ({
        w: f32(`conformer.pre_encode.conv.${2 + 3 * j}.weight`),
        b: f32(`conformer.pre_encode.conv.${2 + 3 * j}.bias`),
      })),
      pw: Array.from({ length: e.stages - 1 }, (_, j) => ({
        w: f32(`conformer.pre_encode.conv.${3 + 3 * j}.weight`),
        b: f32(`conformer.pre_encode.conv.${3 + 3 * j}.bias`),
      })),
      out: { w: f32('conformer.pre_encode.out.weight'), b: f32('conformer.pre_encode.out.bias') },
    };
    // The subsampler works in the plan's own planes, by name.
    const views = this.#v;
    const fromPlan: Workspace = ((name: string, type: { BYTES_PER_ELEMENT: number }, length: number) => {
      const v = views[name];
      // A sizing (unbacked) arena's large views are empty: the subsampler's planes are then too.
      if (v !== undefined && v.byteLength === 0 && !arena.backed) return new (type as unknown as new (n: number) => never)(0);
      if (v === undefined || v.byteLength < length * type.BYTES_PER_ELEMENT)
        throw new ArgumentError(`encoder plan has no buffer '${name}' of ${length} elements`);
      return new (type as unknown as new (b: ArrayBufferLike, o: number, n: number) => never)(v.buffer, v.byteOffset, length);
    }) as Workspace;
    this.#sub = new Subsampler(config, sw, Math.min(tiles.subsampling, this.maxFrames), fromPlan);
    this.#pos = derived('enc:rel_pos_table', Float32Array, (2 * this.maxFrames - 1) * e.d);
    relativePositionTable(this.maxFrames, e.d, this.#pos);
    const R = Math.min(tiles.rows, this.maxFrames);
    const tileViews = (buf: Float32Array, width: number): Float32Array[] =>
      Array.from({ length: Math.ceil(this.maxFrames / R) }, (_, i) => buf.subarray(i * R * width, Math.min(this.maxFrames, (i + 1) * R) * width));
    this.#xTiles = tileViews(views.x as Float32Array, e.d);
    this.#encTiles = tileViews(views.encoded as Float32Array, config.adapter.out);
    this.#gluTiles = tileViews(views['conv.glu'] as Float32Array, e.d);
  }

  /** The last segment's Conformer output before the adapter, [frames][d] (a view of the plan). */
  get encoderOutput(): Float32Array {
    return this.#v.x as Float32Array;
  }

  /** Frames a segment of T mel rows gives. */
  frames(T: number): number {
    return encoderFrames(this.config, T);
  }

  /**
   * Encodes a completed segment: raw log-mel rows [T][128] (T = 1 + L // 160 for L samples),
   * normalised here in place per feature as NeMo does, into the plan's output plane — returned
   * as a view of its first frames(T) rows × D.
   */
  encode(mel: Float32Array, T: number): Float32Array {
    const e = this.config.encoder;
    const d = e.d;
    const Tp = this.frames(T);
    if (T < 1 || Tp > this.maxFrames) throw new ArgumentError(`encoder: ${T} mel rows exceed the configured segment (${this.maxFrames} frames)`);
    const v = this.#v;
    const x = v.x as Float32Array;
    const pack = v['gemm.pack'] as Float32Array;
    normaliseRows(mel, T, e.featIn, T - 1, this.region.views['mel.stats'] as unknown as Float64Array);
    this.#sub.run(mel, T, x);
    const R = Math.min(this.#tiles.rows, this.maxFrames);
    const tilesN = Math.ceil(Tp / R);
    for (const L of this.#layers) {
      this.#ffn(L.ff[0]!, Tp, R, tilesN, 'ff1', pack);
      this.#attention(L, Tp, pack);
      // Convolution module: row tiles fill the GLU plane, then the depthwise conv reads it.
      const c = L.conv;
      const cln = v['conv.ln'] as Float32Array;
      const pw1 = v['conv.pw1'] as Float32Array;
      for (let i = 0; i < tilesN; i++) {
        const n = Math.min(R, Tp - i * R);
        layerNorm(this.#xTiles[i]!, c.nw, c.nb, cln, n, d, EPS);
        gemm(cln, c.pw1, c.b1, pw1, n, 2 * d, d, pack);
        glu(pw1, this.#gluTiles[i]!, n, d);
      }
      const dw = v['conv.dw'] as Float32Array;
      const pw2 = v['conv.pw2'] as Float32Array;
      for (let i = 0; i < tilesN; i++) {
        const t0 = i * R;
        const n = Math.min(R, Tp - t0);
        conv1dSame(v['conv.glu'] as Float32Array, c.dw, c.dwb, dw, Tp, d, e.convKernel, t0, t0 + n);
        silu(dw, dw, n * d);
        gemm(dw, c.pw2, c.b2, pw2, n, d, d, pack);
        const xt = this.#xTiles[i]!;
        for (let j = 0; j < n * d; j++) xt[j] = xt[j]! + pw2[j]!;
      }
      this.#ffn(L.ff[1]!, Tp, R, tilesN, 'ff2', pack);
      for (let i = 0; i < tilesN; i++) {
        const n = Math.min(R, Tp - i * R);
        layerNorm(this.#xTiles[i]!, L.out.nw, L.out.nb, this.#xTiles[i]!, n, d, EPS);
      }
    }
    // Adapter: LayerNorm → Linear → exact GELU → Linear, rows straight into the output plane.
    const A = this.#adapter;
    const D = this.config.adapter.out;
    const aln = v['adapter.ln'] as Float32Array;
    const ah = v['adapter.h'] as Float32Array;
    for (let i = 0; i < tilesN; i++) {
      const n = Math.min(R, Tp - i * R);
      layerNorm(this.#xTiles[i]!, A.nw, A.nb, aln, n, d, EPS);
      gemm(aln, A.w1, A.b1, ah, n, this.config.adapter.hidden, d, pack);
      gelu(ah, ah, n * this.config.adapter.hidden);
      gemm(ah, A.w2, A.b2, this.#encTiles[i]!, n, D, this.config.adapter.hidden, pack);
    }
    return (v.encoded as Float32Array).subarray(0, Tp * D);
  }

  #ffn(f: Layer['ff'][number], Tp: number, R: number, tilesN: number, tag: string, pack: Float32Array): void {
    const e = this.config.encoder;
    const d = e.d;
    const v = this.#v;
    const ln = v[`${tag}.ln`] as Float32Array;
    const h = v[`${tag}.h`] as Float32Array;
    const o = v[`${tag}.o`] as Float32Array;
    for (let i = 0; i < tilesN; i++) {
      const n = Math.min(R, Tp - i * R);
      const xt = this.#xTiles[i]!;
      layerNorm(xt, f.nw, f.nb, ln, n, d, EPS);
      gemm(ln, f.w1, f.b1, h, n, e.ffn, d, pack);
      silu(h, h, n * e.ffn);
      gemm(h, f.w2, f.b2, o, n, d, e.ffn, pack);
      for (let j = 0; j < n * d; j++) xt[j] = xt[j]! + 0.5 * o[j]!;
    }
  }

  #attention(L: Layer, Tp: number, pack: Float32Array): void {
    const e = this.config.encoder;
    const d = e.d;
    const v = this.#v;
    const a = L.att;
    const x = v.x as Float32Array;
    const ln = v['att.ln'] as Float32Array;
    layerNorm(x, a.nw, a.nb, ln, Tp, d, EPS);
    gemm(ln, a.q, a.bq, v['att.q'] as Float32Array, Tp, d, d, pack);
    gemm(ln, a.k, a.bk, v['att.k'] as Float32Array, Tp, d, d, pack);
    gemm(ln, a.v, a.bv, v['att.v'] as Float32Array, Tp, d, d, pack);
    // Positions Tp−1 … −(Tp−1): the middle rows of the table made for the longest segment.
    const off = (this.maxFrames - Tp) * d;
    const pos = this.#pos.subarray(off, off + (2 * Tp - 1) * d);
    gemm(pos, a.pos, null, v['att.p'] as Float32Array, 2 * Tp - 1, d, d, pack);
    attention(
      {
        Tq: Tp,
        Tk: Tp,
        Hq: e.heads,
        Hkv: e.heads,
        hd: e.headDim,
        mode: 'full',
        tq: Math.min(this.#tiles.queries, this.maxFrames),
        tk: Math.min(this.#tiles.keys, this.maxFrames),
      },
      v['att.q'] as Float32Array,
      v['att.k'] as Float32Array,
      v['att.v'] as Float32Array,
      v['att.ctx'] as Float32Array,
      v['att.scratch'] as Float32Array,
      { p: v['att.p'] as Float32Array, u: a.u, v: a.vb },
    );
    gemm(v['att.ctx'] as Float32Array, a.o, a.bo, v['att.o'] as Float32Array, Tp, d, d, pack);
    const o = v['att.o'] as Float32Array;
    for (let j = 0; j < Tp * d; j++) x[j] = x[j]! + o[j]!;
  }
}
