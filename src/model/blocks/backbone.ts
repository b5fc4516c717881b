/**
 * The LFM2 backbone (docs/model.md, Backbone) computed on its carved stage plan: prefill in chunks
 * of at most `chunk` positions and single steps go through the same `forward`, so chunked
 * prefill equals one-shot prefill. Per-conversation state — the KV cache of every attention
 * layer (post-norm, post-RoPE keys) and the last two columns of B⊙x of every short-conv
 * layer — lives in a `BackboneState` carved from the conversation's arena.
 *
 * Layer: h += op(RMSNorm(h)); h += SwiGLU(RMSNorm(h)). Short conv: in_proj → [B | C | x],
 * y = causal conv k3 over B⊙x, out_proj(C⊙y). Attention: GQA, per-head q/k RMSNorm, RoPE
 * rotate-half (θ from the config), causal over the cache. Output: `lfm.embedding_norm`; the text
 * logits use the tied `lfm.embed_tokens`.
 */
import type { Arena, PlannedRegion } from '../../memory/arena.js';
import { appendRows, type BackboneState, backboneDims, KEY_TILE, type Lfm2Dims, lfm2Pass } from './lfm2_state.js';
import { ArgumentError } from '../../errors.js';
import { plan, type Planner } from '../../memory/index.js';
import type { Workspace } from '../../dsp/workspace.js';
import type { ModelConfig } from '../format/config.js';
import { ATTENTION_MASK, native } from '../../native.js';
import type { WeightsImage } from '../format/image.js';
import { f16ToF32, f32ToF16 } from '../format/dtype.js';
import {
  conv1dCausal,
  gemm,
  linearPrefill,
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
  type Weights,
} from './kernels.js';
import '../categories.js';

/** RMSNorm epsilon of every LFM2 norm (docs/model.md). */
export const EPS = 1e-5;
/** Conversations one batched backbone step serves at most (Lfm2Stack.forwardRows, and the heads after it). */
export const STEP_BATCH = 16;

export {
  backboneDims,
  backbonePass,
  backboneStateSizes,
  BackboneState,
  cacheRows,
  detokenizerDims,
  KEY_TILE,
  type KvType,
  type Lfm2Dims,
  lfm2Pass,
  lfm2StateSizes,
} from './lfm2_state.js';

interface StackLayer {
  kind: 'conv' | 'attention';
  opNorm: Float32Array;
  ffnNorm: Float32Array;
  inProj?: Weights;
  convW?: Float32Array; // [hidden][kernel]
  outProj: Weights;
  q?: Weights;
  k?: Weights;
  v?: Weights;
  qNorm?: Float32Array;
  kNorm?: Float32Array;
  w1: Weights;
  w2: Weights;
  w3: Weights;
  /** One row's gate and up projections in one call; an attention layer's q, k and v in another. */
  gateUp: LinearSet;
  qkv?: LinearSet;
}

/**
 * An LFM2 layer stack on its carved plan: the backbone's (full causal attention) or the
 * detokenizer's (sliding window). `tensors` is the tensor-name prefix (`lfm` or
 * `audio_detokenizer.lfm`).
 */
export class Lfm2Stack {
  readonly dims: Lfm2Dims;
  readonly chunk: number;
  readonly region: PlannedRegion;
  readonly #v: Readonly<Record<string, Float32Array>>;
  readonly #layers: StackLayer[];
  readonly #finalNorm: Float32Array;
  readonly #cos: Float32Array;
  readonly #sin: Float32Array;
  readonly #scale: number; // 1/√head dim, made once: a double computed per call would be boxed
  readonly #shiftCos: Float32Array; // one rotation by −d positions, filled when the context is compacted
  readonly #shiftSin: Float32Array;
  readonly #shiftRow: Float32Array; // one f16 cache row widened for the rotation
  /** Per row of a batched step, and per block of `dims.rows` rows: views of the plan's planes, made once. */
  readonly #rowViews: Readonly<Record<'bx' | 'y' | 'q' | 'k' | 'v' | 'ctx', Float32Array>>[];
  readonly #blockViews: Readonly<Record<'bx' | 'y' | 'q' | 'k' | 'v' | 'ctx', Float32Array>>[];
  /** Rows each conversation's sliding window drops in a batched call. */
  readonly #shifts: Int32Array;
  /** The outputs of the q, k, v and of the gate, up sets for a call of several rows: made once. */
  readonly #qkvRows: readonly Float32Array[];
  readonly #gateUpRows: readonly Float32Array[];
  /** True while `forward` runs a prefill chunk: its quantized layers take linearPrefill. */
  #prefill = false;
  /** Whether the plan's row scratch holds linearPrefill's (the backbone's prefill workspace). */
  readonly #prefillPlanned: boolean;

  constructor(
    dims: Lfm2Dims,
    image: WeightsImage,
    arena: Arena,
    derived: Workspace,
    o: {
      chunk: number;
      context: number;
      tensors: string;
      name: string;
      category: 'workspace.prefill' | 'workspace.detokenizer';
      planner?: Planner | undefined;
    },
  ) {
    if (!Number.isSafeInteger(o.chunk) || o.chunk < 1) throw new ArgumentError(`${o.name}: chunk must be a positive integer, got ${o.chunk}`);
    this.dims = dims;
    this.chunk = o.chunk;
    this.#prefillPlanned = o.category === 'workspace.prefill';
    this.region = arena.carvePlan(o.name, o.category, (o.planner ?? plan)(lfm2Pass(dims, o.chunk, this.#prefillPlanned).build()));
    this.#v = this.region.views as Record<string, Float32Array>;
    this.#qkvRows = [this.#v['att.q']!, this.#v['att.k']!, this.#v['att.v']!];
    this.#gateUpRows = [this.#v['ffn.gate']!, this.#v['ffn.up']!];
    const size = (name: string): number => image.get(name).shape.reduce((a, c) => a * c, 1);
    const f32 = (name: string): Float32Array => image.toF32(name, derived(`${o.name}:${name}`, Float32Array, size(name)));
    this.#layers = dims.layers.map((kind, l) => {
      const p = `${o.tensors}.layers.${l}`;
      const v = this.#v;
      const first = (name: string, n: number): Float32Array => (v[name] as Float32Array).subarray(0, n);
      const w1 = image.weights(`${p}.feed_forward.w1.weight`);
      const w3 = image.weights(`${p}.feed_forward.w3.weight`);
      const common = {
        opNorm: f32(`${p}.operator_norm.weight`),
        ffnNorm: f32(`${p}.ffn_norm.weight`),
        w1,
        w2: image.weights(`${p}.feed_forward.w2.weight`),
        w3,
        gateUp: linearSet([w1, w3], [first('ffn.gate', dims.ffn), first('ffn.up', dims.ffn)]),
      };
      if (kind === 'conv') {
        return {
          kind,
          ...common,
          inProj: image.weights(`${p}.conv.in_proj.weight`),
          convW: f32(`${p}.conv.conv.weight`),
          outProj: image.weights(`${p}.conv.out_proj.weight`),
        };
      }
      const q = image.weights(`${p}.self_attn.q_proj.weight`);
      const k = image.weights(`${p}.self_attn.k_proj.weight`);
      const vw = image.weights(`${p}.self_attn.v_proj.weight`);
      const kd = dims.kvHeads * dims.headDim;
      return {
        kind,
        ...common,
        q,
        k,
        v: vw,
        qkv: linearSet([q, k, vw], [first('att.q', dims.heads * dims.headDim), first('att.k', kd), first('att.v', kd)]),
        outProj: image.weights(`${p}.self_attn.out_proj.weight`),
        qNorm: f32(`${p}.self_attn.q_layernorm.weight`),
        kNorm: f32(`${p}.self_attn.k_layernorm.weight`),
      };
    });
    this.#finalNorm = f32(`${o.tensors}.embedding_norm.weight`);
    this.#scale = 1 / Math.sqrt(dims.headDim);
    const half = dims.headDim / 2;
    this.#cos = derived(`${o.name}:rope.cos`, Float32Array, o.context * half);
    this.#sin = derived(`${o.name}:rope.sin`, Float32Array, o.context * half);
    ropeTables(o.context, dims.headDim, dims.ropeTheta, this.#cos, this.#sin);
    this.#shiftCos = derived(`${o.name}:rope.shift.cos`, Float32Array, half);
    this.#shiftSin = derived(`${o.name}:rope.shift.sin`, Float32Array, half);
    this.#shiftRow = derived(`${o.name}:rope.shift.row`, Float32Array, dims.kvHeads * dims.headDim);
    const v = this.#v;
    const D = dims.hidden;
    const qd = dims.heads * dims.headDim;
    const kd = dims.kvHeads * dims.headDim;
    const row = (plane: string, r: number, width: number): Float32Array => (v[plane] as Float32Array).subarray(r * width, (r + 1) * width);
    const views = (r: number, n: number) => ({
      bx: row('conv.bx', r, n * D),
      y: row('conv.y', r, n * D),
      q: row('att.q', r, n * qd),
      k: row('att.k', r, n * kd),
      v: row('att.v', r, n * kd),
      ctx: row('att.ctx', r, n * qd),
    });
    this.#rowViews = Array.from({ length: Math.min(STEP_BATCH, o.chunk) }, (_, r) => views(r, 1));
    const blocks = dims.rows > 1 ? Math.min(STEP_BATCH, Math.floor(o.chunk / dims.rows)) : 0;
    this.#blockViews = Array.from({ length: blocks }, (_, r) => views(r, dims.rows));
    this.#shifts = new Int32Array(Math.max(this.#rowViews.length, blocks));
  }

  /** K's rows from `from` on, a view kept per state and layer (compaction keeps the same prefix every time). */
  #tail(state: BackboneState, layer: number, K: Float32Array, from: number): Float32Array {
    const cached = state.tails[layer];
    if (cached !== undefined && cached.byteOffset === K.byteOffset + 4 * from) return cached;
    const view = K.subarray(from);
    state.tails[layer] = view;
    return view;
  }

  /**
   * The context policy of a full-attention stack: forgets `drop` positions after the first
   * `keep` (the system prompt), moves the later cache rows down and rotates their keys by −drop
   * positions. RoPE is a rotation, R(p − d) = R(−d)·R(p), so the kept keys are exactly those of
   * their new positions; relative distances among kept rows are unchanged. Short-conv states hold
   * the last inputs, which are kept, so they stay. Allocation-free.
   */
  dropPositions(state: BackboneState, keep: number, drop: number): void {
    const b = this.dims;
    if (b.window !== 0 || state.base !== 0) throw new ArgumentError('LFM2: positions are dropped only from a full-attention cache');
    if (!Number.isSafeInteger(keep) || !Number.isSafeInteger(drop) || keep < 0 || drop < 1 || keep + drop > state.position) {
      throw new ArgumentError(`LFM2: cannot drop ${drop} positions after ${keep} of ${state.position}`);
    }
    const half = b.headDim / 2;
    for (let i = 0; i < half; i++) {
      this.#shiftCos[i] = this.#cos[drop * half + i]!;
      this.#shiftSin[i] = -this.#sin[drop * half + i]!;
    }
    const kd = b.kvHeads * b.headDim;
    const moved = state.position - keep - drop;
    const row = this.#shiftRow;
    for (let l = 0; l < b.layers.length; l++) {
      const K = state.k[l];
      const V = state.v[l];
      if (K === null || V === null || K === undefined || V === undefined) continue;
      K.copyWithin(keep * kd, (keep + drop) * kd, state.position * kd);
      V.copyWithin(keep * kd, (keep + drop) * kd, state.position * kd);
      if (moved === 0) continue;
      if (K instanceof Float32Array) {
        rope(this.#tail(state, l, K, keep * kd), this.#shiftCos, this.#shiftSin, 1, moved * b.kvHeads, b.headDim, 0, false);
        continue;
      }
      // f16 rows: widen, rotate, narrow, one row at a time.
      for (let r = keep; r < keep + moved; r++) {
        for (let i = 0; i < kd; i++) row[i] = f16ToF32(K[r * kd + i]!);
        rope(row, this.#shiftCos, this.#shiftSin, 1, b.kvHeads, b.headDim, 0, false);
        for (let i = 0; i < kd; i++) K[r * kd + i] = f32ToF16(row[i]!);
      }
    }
    state.position -= drop;
  }

  /**
   * out[n][N] = x[n][K]·Wᵀ. Quantized weights: int8 activations (integer dot products beat
   * decoding the weights into a GEMM's f32 panels); a prefill chunk through linearPrefill,
   * anything else row by row, so every position gets the same bits whatever the chunking, and
   * steps (single or batched) the same bits as each other. Float weights: row by
   * row (GEMV) for at most `dims.rows` positions, else GEMM; the two sum in different orders,
   * so a step equals a one-row GEMM chunk only to rounding, while calls on the same side of
   * `rows` are bit-identical per row.
   */
  #linear(x: Float32Array, w: Weights, out: Float32Array, n: number, N: number, K: number, rowwise = false): void {
    const scratch = this.#v['gemv.scratch'] as Float32Array;
    if (this.#prefill && (w.kind === 'q8' || w.kind === 'q4')) linearPrefill(w, x, out, n, scratch);
    else if (n === 1) linear1(w, x, out, scratch);
    else if (rowwise || n <= this.dims.rows || w.kind === 'q8' || w.kind === 'q4') linearRows(w, x, out, n, scratch);
    else gemm(x, w, null, out, n, N, K, this.#v['gemm.pack'] as Float32Array);
  }

  /** A short-conv layer's input projection and gate on `n` rows: B·x into `conv.bx`. */
  #convIn(L: StackLayer, n: number, rowwise: boolean): void {
    const v = this.#v;
    const D = this.dims.hidden;
    const ln = v['op.ln'] as Float32Array;
    rmsNorm(v.h as Float32Array, L.opNorm, ln, n, D, EPS);
    const proj = v['conv.proj'] as Float32Array;
    this.#linear(ln, L.inProj!, proj, n, 3 * D, D, rowwise);
    const bx = v['conv.bx'] as Float32Array;
    for (let t = 0; t < n; t++) for (let c = 0; c < D; c++) bx[t * D + c] = proj[t * 3 * D + c]! * proj[t * 3 * D + 2 * D + c]!;
  }

  /** A short-conv layer's output gate C·y, projection and residual on `n` rows. */
  #convOut(L: StackLayer, n: number, rowwise: boolean): void {
    const v = this.#v;
    const D = this.dims.hidden;
    const h = v.h as Float32Array;
    const proj = v['conv.proj'] as Float32Array;
    const y = v['conv.y'] as Float32Array;
    const cy = v['conv.cy'] as Float32Array;
    for (let t = 0; t < n; t++) for (let c = 0; c < D; c++) cy[t * D + c] = proj[t * 3 * D + D + c]! * y[t * D + c]!;
    const o = v['conv.o'] as Float32Array;
    this.#linear(cy, L.outProj, o, n, D, D, rowwise);
    for (let i = 0; i < n * D; i++) h[i] = h[i]! + o[i]!;
  }

  /** An attention layer's q, k and v of `n` rows, each head RMS-normed. */
  #qkv(L: StackLayer, n: number, rowwise: boolean): void {
    const v = this.#v;
    const b = this.dims;
    const D = b.hidden;
    const ln = v['att.ln'] as Float32Array;
    rmsNorm(v.h as Float32Array, L.opNorm, ln, n, D, EPS);
    const q = v['att.q'] as Float32Array;
    const k = v['att.k'] as Float32Array;
    if (n === 1 && !this.#prefill) linearMany(L.qkv!, ln, v['gemv.scratch'] as Float32Array);
    else if (!this.#prefill && L.qkv!.fused) linearRowsMany(L.qkv!, ln, this.#qkvRows, n, v['gemv.scratch'] as Float32Array);
    else {
      this.#linear(ln, L.q!, q, n, b.heads * b.headDim, D, rowwise);
      this.#linear(ln, L.k!, k, n, b.kvHeads * b.headDim, D, rowwise);
      this.#linear(ln, L.v!, v['att.v'] as Float32Array, n, b.kvHeads * b.headDim, D, rowwise);
    }
    rmsNorm(q, L.qNorm!, q, n * b.heads, b.headDim, EPS);
    rmsNorm(k, L.kNorm!, k, n * b.kvHeads, b.headDim, EPS);
  }

  /** The SwiGLU feed-forward of layer `L` on `n` rows of `h`, added back (row by row when `rowwise`). */
  #feedForward(L: StackLayer, n: number, rowwise: boolean): void {
    const v = this.#v;
    const b = this.dims;
    const D = b.hidden;
    const h = v.h as Float32Array;
    const fl = v['ffn.ln'] as Float32Array;
    rmsNorm(h, L.ffnNorm, fl, n, D, EPS);
    const gate = v['ffn.gate'] as Float32Array;
    const up = v['ffn.up'] as Float32Array;
    if (n === 1 && !this.#prefill) linearMany(L.gateUp, fl, v['gemv.scratch'] as Float32Array);
    else if (!this.#prefill && L.gateUp.fused) linearRowsMany(L.gateUp, fl, this.#gateUpRows, n, v['gemv.scratch'] as Float32Array);
    else {
      this.#linear(fl, L.w1, gate, n, b.ffn, D, rowwise);
      this.#linear(fl, L.w3, up, n, b.ffn, D, rowwise);
    }
    const act = v['ffn.act'] as Float32Array;
    swiglu(gate, up, act, n * b.ffn);
    const o = v['ffn.o'] as Float32Array;
    this.#linear(act, L.w2, o, n, D, b.ffn, rowwise);
    for (let i = 0; i < n * D; i++) h[i] = h[i]! + o[i]!;
  }

  /** Attention of `n` query rows at `pos` over cache rows [0, rows) starting at absolute position `base`. */
  #attend(
    q: Float32Array,
    K: Float32Array | Uint16Array,
    V: Float32Array | Uint16Array,
    ctx: Float32Array,
    n: number,
    rows: number,
    pos: number,
    base: number,
  ): void {
    const b = this.dims;
    // Positional native call: the step path builds no option objects.
    native.attention(
      q,
      K,
      V,
      ctx,
      null,
      null,
      null,
      this.#v['att.scratch'] as Float32Array,
      n,
      rows,
      b.heads,
      b.kvHeads,
      b.headDim,
      pos,
      base,
      b.window,
      b.window > 0 ? ATTENTION_MASK.sliding : ATTENTION_MASK.causal,
      this.#scale,
      this.chunk,
      KEY_TILE,
    );
  }

  /** The plan's input rows [chunk][hidden]: fill them, then call forward. */
  get input(): Float32Array {
    return this.#v.h as Float32Array;
  }

  /**
   * Runs `n` ≤ chunk positions whose input rows are in `input` (the plan's own `h` when
   * omitted) at the state's position; appends them to its caches and returns the final-normed
   * hidden states [n][hidden] (a view of the plan). A `prefill` chunk (a prompt's positions,
   * on a stack planned for it) runs its quantized layers through linearPrefill, whatever n:
   * its rows' bits do not depend on the chunking, but differ from a step's by rounding (which
   * can move a later layer's int8 activation by one step).
   */
  forward(state: BackboneState, n: number, input: Float32Array | null = null, prefill = false): Float32Array {
    const b = this.dims;
    const D = b.hidden;
    if (n < 1 || n > this.chunk) throw new ArgumentError(`LFM2: ${n} positions per call, the chunk is ${this.chunk}`);
    if (state.position + n > state.context) throw new ArgumentError(`LFM2: position ${state.position + n} exceeds the context of ${state.context}`);
    if (prefill && !this.#prefillPlanned) throw new ArgumentError('LFM2: this stack is not planned for prefill');
    this.#prefill = prefill;
    const v = this.#v;
    const h = v.h as Float32Array;
    if (input !== null && input !== h) for (let i = 0; i < n * D; i++) h[i] = input[i]!;
    const pos = state.position;
    const hd = b.headDim;
    const qd = b.heads * hd;
    const kd = b.kvHeads * hd;
    // A sliding window drops cache rows no query can see any more.
    let shift = 0;
    if (pos - state.base + n > state.rows) {
      shift = pos - state.base + n - state.rows;
      if (b.window === 0 || pos - (state.base + shift) < b.window - 1) throw new ArgumentError('LFM2: the KV cache is too small for this chunk');
    }
    for (let l = 0; l < this.#layers.length; l++) {
      const L = this.#layers[l]!;
      if (L.kind === 'conv') {
        this.#convIn(L, n, false);
        conv1dCausal(v['conv.bx'] as Float32Array, L.convW!, state.conv[l]!, v['conv.y'] as Float32Array, n, D, b.convKernel);
        this.#convOut(L, n, false);
      } else {
        this.#qkv(L, n, false);
        const q = v['att.q'] as Float32Array;
        const k = v['att.k'] as Float32Array;
        const vv = v['att.v'] as Float32Array;
        rope(q, this.#cos, this.#sin, n, b.heads, hd, pos, false);
        rope(k, this.#cos, this.#sin, n, b.kvHeads, hd, pos, false);
        const K = state.k[l]!;
        const V = state.v[l]!;
        if (shift > 0) {
          K.copyWithin(0, shift * kd, (pos - state.base) * kd);
          V.copyWithin(0, shift * kd, (pos - state.base) * kd);
        }
        const row = pos - state.base - shift;
        appendRows(K, V, row * kd, k, vv, n * kd);
        const ctx = v['att.ctx'] as Float32Array;
        this.#attend(q, K, V, ctx, n, row + n, pos, state.base + shift);
        const o = v['att.o'] as Float32Array;
        this.#linear(ctx, L.outProj, o, n, D, qd);
        for (let i = 0; i < n * D; i++) h[i] = h[i]! + o[i]!;
      }
      this.#feedForward(L, n, false);
    }
    const hidden = v.hidden as Float32Array;
    rmsNorm(h, this.#finalNorm, hidden, n, D, EPS);
    state.base += shift;
    state.position += n;
    return hidden;
  }

  /** One position of each of `m` ≤ STEP_BATCH conversations at once (forwardBlocks of 1). */
  forwardRows(states: readonly BackboneState[], m: number): Float32Array {
    return this.forwardBlocks(states, m, 1);
  }

  /**
   * `n` positions of each of `m` conversations at once (n is 1, or the dims' `rows`): rows
   * [r·n, (r+1)·n) of the plan's `h` are the next positions of `states[r]`. Every linear layer
   * runs row by row over the m·n rows (`linearRows`: each weight block is read once for all of
   * them, and each row gets the bits `forward` gives it alone or in its own n); norms, short
   * convolutions, RoPE, caches (a sliding window drops rows as `forward` does) and attention run
   * per conversation on its own state. Returns the final-normed hidden rows [m·n][hidden].
   */
  forwardBlocks(states: readonly BackboneState[], m: number, n: number): Float32Array {
    const b = this.dims;
    const D = b.hidden;
    const views = n === 1 ? this.#rowViews : n === b.rows ? this.#blockViews : null;
    if (views === null) throw new ArgumentError(`LFM2: blocks of ${n} positions; 1 or ${b.rows}`);
    if (m < 1 || m > views.length || m > states.length) throw new ArgumentError(`LFM2: ${m} conversations in a batched call of ${n}, at most ${views.length}`);
    this.#prefill = false;
    const shift = this.#shifts;
    for (let r = 0; r < m; r++) {
      const st = states[r]!;
      if (st.position + n > st.context) throw new ArgumentError(`LFM2: position ${st.position + n} exceeds the context of ${st.context}`);
      shift[r] = Math.max(0, st.position - st.base + n - st.rows);
      if (shift[r]! > 0 && (b.window === 0 || st.position - (st.base + shift[r]!) < b.window - 1)) {
        throw new ArgumentError(n === 1 ? 'LFM2: a batched step needs a free cache row (make room first)' : 'LFM2: the KV cache is too small for this chunk');
      }
    }
    const v = this.#v;
    const h = v.h as Float32Array;
    const hd = b.headDim;
    const qd = b.heads * hd;
    const kd = b.kvHeads * hd;
    const rows = m * n;
    for (let l = 0; l < this.#layers.length; l++) {
      const L = this.#layers[l]!;
      if (L.kind === 'conv') {
        this.#convIn(L, rows, true);
        for (let r = 0; r < m; r++) conv1dCausal(views[r]!.bx, L.convW!, states[r]!.conv[l]!, views[r]!.y, n, D, b.convKernel);
        this.#convOut(L, rows, true);
      } else {
        this.#qkv(L, rows, true);
        // Every row's keys and values go to its cache before any attention runs: the plan may
        // give the attention's output and scratch the bytes of k and v (dead after the cache op).
        for (let r = 0; r < m; r++) {
          const st = states[r]!;
          const rv = views[r]!;
          const pos = st.position;
          rope(rv.q, this.#cos, this.#sin, n, b.heads, hd, pos, false);
          rope(rv.k, this.#cos, this.#sin, n, b.kvHeads, hd, pos, false);
          const K = st.k[l]!;
          const V = st.v[l]!;
          const s = shift[r]!;
          if (s > 0) {
            K.copyWithin(0, s * kd, (pos - st.base) * kd);
            V.copyWithin(0, s * kd, (pos - st.base) * kd);
          }
          appendRows(K, V, (pos - st.base - s) * kd, rv.k, rv.v, n * kd);
        }
        for (let r = 0; r < m; r++) {
          const st = states[r]!;
          const pos = st.position;
          const row = pos - st.base - shift[r]!;
          this.#attend(views[r]!.q, st.k[l]!, st.v[l]!, views[r]!.ctx, n, row + n, pos, st.base + shift[r]!);
        }
        const o = v['att.o'] as Float32Array;
        this.#linear(v['att.ctx'] as Float32Array, L.outProj, o, rows, D, qd, true);
        for (let i = 0; i < rows * D; i++) h[i] = h[i]! + o[i]!;
      }
      this.#feedForward(L, rows, true);
    }
    const hidden = v.hidden as Float32Array;
    rmsNorm(h, this.#finalNorm, hidden, rows, D, EPS);
    for (let r = 0; r < m; r++) {
      states[r]!.base += shift[r]!;
      states[r]!.position += n;
    }
    return hidden;
  }

  /** The plan's final-normed hidden rows [chunk][hidden] (what forward returns). */
  get hiddenRows(): Float32Array {
    return this.#v.hidden as Float32Array;
  }
}

/** The backbone: the LFM2 stack with the text and audio embeddings and the tied text head. */
export class Backbone {
  readonly config: ModelConfig;
  readonly chunk: number;
  readonly maxContext: number;
  readonly stack: Lfm2Stack;
  readonly #embed: Weights;
  readonly #audio: Weights;

  constructor(config: ModelConfig, image: WeightsImage, arena: Arena, derived: Workspace, options: { chunk: number; context: number; planner?: Planner }) {
    const b = config.backbone;
    if (!Number.isSafeInteger(options.context) || options.context < 1 || options.context > b.maxContext) {
      throw new ArgumentError(`backbone context must be an integer from 1 to ${b.maxContext}, got ${options.context}`);
    }
    this.config = config;
    this.chunk = options.chunk;
    this.maxContext = options.context;
    this.stack = new Lfm2Stack(backboneDims(config), image, arena, derived, {
      chunk: options.chunk,
      context: options.context,
      tensors: 'lfm',
      name: 'backbone',
      category: 'workspace.prefill',
      planner: options.planner,
    });
    this.#embed = image.weights('lfm.embed_tokens.weight');
    this.#audio = image.weights('audio_embedding.embedding.weight');
  }

  get region(): PlannedRegion {
    return this.stack.region;
  }

  /** Input row for a text token. */
  embedText(token: number, out: Float32Array, row = 0): void {
    if (!Number.isInteger(token) || token < 0 || token >= this.config.backbone.vocab) throw new ArgumentError(`token ${token} is outside the vocabulary`);
    rowInto(this.#embed, token, out, row * this.config.backbone.hidden);
  }

  /** Input row for an audio frame: the sum over codebooks of row i·2049 + code. */
  embedAudio(codes: ArrayLike<number>, out: Float32Array, row = 0): void {
    const { codebooks, codes: per } = this.config.audio;
    const at = row * this.config.backbone.hidden;
    for (let i = 0; i < codebooks; i++) rowInto(this.#audio, i * per + (codes[i] as number), out, at, 1, i > 0);
  }

  /** Prefills n ≤ chunk input rows [n][hidden] (see Lfm2Stack.forward). */
  forward(state: BackboneState, input: Float32Array, n: number): Float32Array {
    return this.stack.forward(state, n, input, true);
  }

  /** Text logits (vocab) for one hidden row, through the tied embedding. */
  logits(hidden: Float32Array, out: Float32Array, scratch: Float32Array): void {
    linear1(this.#embed, hidden, out, scratch);
  }

  /**
   * Text logits [n][vocab] for n hidden rows [n][hidden], the head's weights read once for all
   * (each row's bits are what `logits` gives it). `scratch` holds n rows of `logits`'s scratch.
   */
  logitsRows(hidden: Float32Array, out: Float32Array, n: number, scratch: Float32Array): void {
    linearRows(this.#embed, hidden, out, n, scratch);
  }
}
