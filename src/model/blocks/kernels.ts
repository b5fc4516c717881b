/**
 * The compute kernels, as a typed facade over the native addon. Every kernel reads and writes
 * caller-owned typed arrays (SharedArrayBuffer views with offsets included), allocates nothing
 * and gives the same bits for the same inputs on any thread. Misuse throws TypeError or
 * RangeError at the call; set buffers up once, before readiness.
 */
import { ArgumentError } from '../../errors.js';
import { ACTIVATION, ATTENTION_MASK, CONV_MODE, native, NORM, WEIGHT_TYPE } from '../../native.js';
import { bf16ToF32, f16ToF32 } from '../format/dtype.js';

export type WeightKind = 'f32' | 'f16' | 'bf16' | 'q8' | 'q4';
const TYPE = WEIGHT_TYPE;

/** A weight matrix [rows][cols] (out × in) in one of the supported encodings. */
export type Weights =
  | { kind: 'f32'; data: Float32Array; rows: number; cols: number }
  | { kind: 'f16' | 'bf16'; data: Uint16Array; rows: number; cols: number }
  | { kind: 'q8' | 'q4'; data: Uint8Array; scales: Uint16Array; biases: Uint16Array; group: number; rows: number; cols: number };

/** Floats of GEMM packing scratch a caller provides (the addon's size). */
export const GEMM_PACK_FLOATS = native.gemmPackFloats;

/** y = W·x. For quantized weights `xsum` receives the per-group input sums (cols / group floats). */
export function gemv(w: Weights, x: Float32Array, y: Float32Array, xsum: Float32Array | null = null): void {
  if (w.kind === 'q8' || w.kind === 'q4') native.gemv(TYPE[w.kind], w.data, w.scales, w.biases, w.group, x, y, w.rows, w.cols, xsum);
  else native.gemv(TYPE[w.kind], w.data, null, null, 0, x, y, w.rows, w.cols, null);
}

/** Threads the last setComputeThreads of this thread asked for. */
let asked = 1;

/**
 * Threads (this one plus native helpers) that share the rows of every row-by-row linear layer
 * (`linear1`, `linearRows`, float `gemv`), and long SwiGLU and SiLU inputs, called from the
 * calling JS thread: each thread (a pipeline stage's worker) has its own helpers, 1 by default.
 * Rows are computed as on one thread, so results do not depend on it. Set during setup: it
 * starts or stops threads.
 */
export function setComputeThreads(n: number): number {
  asked = n;
  return native.setComputeThreads(n);
}

/**
 * Set when the last setComputeThreads of this thread started fewer threads than it asked for
 * (the system refused more): the layers run on those that started.
 */
export function computeThreadsShortfall(): string | null {
  const started = native.computeThreads();
  return started < asked ? `${started} of ${asked} compute threads started (the system refused more)` : null;
}

export const computeThreads = (): number => native.computeThreads();

/** The smallest quantization group the int8-activation paths take (the scratch bound assumes it). */
const MIN_INT_GROUP = 32;

/**
 * Floats of scratch `linear1` needs for an input of K values (int8 activations, their scales
 * and sums), for any group of at least 32: the addon's own size, rounded up to floats.
 */
export function gemvScratchFloats(K: number): number {
  return Math.ceil(native.gemvScratchBytes(K, MIN_INT_GROUP) / 4);
}

/**
 * Floats of scratch `linearPrefill` needs for n rows of K values (any group of at least 32),
 * and `linearRows` and `linear1` too: the addon's own size, rounded up to floats.
 */
export function prefillScratchFloats(n: number, K: number): number {
  return Math.max(Math.ceil(native.gemmIntScratchBytes(n, K, MIN_INT_GROUP) / 4), n * gemvScratchFloats(K));
}

/**
 * y = W·x for one position, the model's path: q8/q4 weights multiply int8 activations
 * (quantized per group, xs = max|x|/127; integer sums, AVX-512 VNNI when present; the error
 * against f32 activations is at most Σ|w|·xs/2), the float encodings are exact as `gemv`.
 * `scratch` holds gemvScratchFloats(cols) floats.
 */
export function linear1(w: Weights, x: Float32Array, y: Float32Array, scratch: Float32Array): void {
  if (w.kind === 'q8' || w.kind === 'q4') native.gemvInt(TYPE[w.kind], w.data, w.scales, w.biases, w.group, x, y, w.rows, w.cols, scratch);
  else native.gemv(TYPE[w.kind], w.data, null, null, 0, x, y, w.rows, w.cols, null);
}

/** Two or three matrices that read the same input, with their outputs: made once, at setup. */
export interface LinearSet {
  readonly w: readonly Weights[];
  readonly y: readonly Float32Array[];
  /** One native call serves the set: every matrix q8/q4 of one kind and group, with as many inputs. */
  readonly fused: boolean;
}

export function linearSet(w: readonly Weights[], y: readonly Float32Array[]): LinearSet {
  if (w.length < 2 || w.length > 3 || y.length !== w.length) throw new ArgumentError('a linear set takes two or three matrices and as many outputs');
  const first = w[0] as Weights;
  const fused = w.every(
    (m) => (m.kind === 'q8' || m.kind === 'q4') && m.kind === first.kind && m.cols === first.cols && m.group === (first as { group: number }).group,
  );
  return { w, y, fused };
}

/**
 * y_i = W_i·x for every matrix of the set, each as `linear1` computes it (the same bits): a
 * quantized set quantizes x once and shares one split of all the rows among the compute
 * threads, so small matrices do not each pay a call and a wake-up.
 */
export function linearMany(set: LinearSet, x: Float32Array, scratch: Float32Array): void {
  if (set.fused) fusedRows(set.w, x, set.y, 1, scratch);
  else for (let i = 0; i < set.w.length; i++) linear1(set.w[i]!, x, set.y[i]!, scratch);
}

/**
 * Y_i[t] = W_i·X[t] for t < n and every matrix of the set, into `Y` (one [n][rows] output per
 * matrix, not the set's own), each row as `linearRows` computes it: a quantized set quantizes
 * the n rows once and splits all the matrices' rows among the compute threads in one call.
 * `scratch` holds n·gemvScratchFloats(cols) floats.
 */
export function linearRowsMany(set: LinearSet, X: Float32Array, Y: readonly Float32Array[], n: number, scratch: Float32Array): void {
  if (Y.length !== set.w.length) throw new ArgumentError(`linearRowsMany: ${Y.length} outputs for ${set.w.length} matrices`);
  if (set.fused) fusedRows(set.w, X, Y, n, scratch);
  else for (let i = 0; i < set.w.length; i++) linearRows(set.w[i]!, X, Y[i]!, n, scratch);
}

/** One native call for a fused set (two or three matrices, spelled out: nothing is allocated). */
function fusedRows(w: readonly Weights[], X: Float32Array, Y: readonly Float32Array[], n: number, scratch: Float32Array): void {
  const a = w[0] as Extract<Weights, { kind: 'q8' | 'q4' }>;
  const b = w[1] as Extract<Weights, { kind: 'q8' | 'q4' }>;
  const t = TYPE[a.kind];
  if (w.length === 2) {
    native.gemvIntMany(t, X, n, a.cols, scratch, 2, a.data, a.scales, a.biases, a.group, Y[0]!, a.rows, b.data, b.scales, b.biases, b.group, Y[1]!, b.rows);
    return;
  }
  const c = w[2] as Extract<Weights, { kind: 'q8' | 'q4' }>;
  native.gemvIntMany(
    t,
    X,
    n,
    a.cols,
    scratch,
    3,
    a.data,
    a.scales,
    a.biases,
    a.group,
    Y[0]!,
    a.rows,
    b.data,
    b.scales,
    b.biases,
    b.group,
    Y[1]!,
    b.rows,
    c.data,
    c.scales,
    c.biases,
    c.group,
    Y[2]!,
    c.rows,
  );
}

/**
 * Y[t] = W·X[t] for t < n, each row as `linear1` computes it, with blocks of weight rows kept
 * in cache across the rows: for a few positions, where packing a GEMM costs more than it
 * saves. `scratch` holds n · gemvScratchFloats(cols) floats.
 */
export function linearRows(w: Weights, X: Float32Array, Y: Float32Array, n: number, scratch: Float32Array): void {
  if (w.kind === 'q8' || w.kind === 'q4') native.gemvRows(TYPE[w.kind], w.data, w.scales, w.biases, w.group, X, Y, n, w.rows, w.cols, scratch);
  else native.gemvRows(TYPE[w.kind], w.data, null, null, 0, X, Y, n, w.rows, w.cols, null);
}

/**
 * Y[t] = W·X[t] for t < n positions of a prefill, q8/q4 weights: int8 activations quantized as
 * `linear1` quantizes them, with the activations in the vector lanes (AVX-512 VNNI), so a
 * group's integer sum is converted once. Each row's bits do not depend on n or the other rows,
 * but differ from `linear1`'s (which sums a group's lanes in f32); without VNNI it is
 * `linearRows`. `scratch` holds prefillScratchFloats(n, cols) floats.
 */
export function linearPrefill(w: Weights, X: Float32Array, Y: Float32Array, n: number, scratch: Float32Array): void {
  if (w.kind !== 'q8' && w.kind !== 'q4') throw new ArgumentError(`linearPrefill: q8 or q4 weights, not ${w.kind}`);
  native.gemmInt(TYPE[w.kind], w.data, w.scales, w.biases, w.group, X, Y, n, w.rows, w.cols, scratch);
}

/**
 * C[T][N] = A[T][K] · W[N][K]ᵀ (+ bias). W is a plain f32 matrix or any `Weights` encoding
 * (decoded to f32 as it is packed). `pack` holds GEMM_PACK_FLOATS floats.
 */
export function gemm(
  A: Float32Array,
  W: Float32Array | Weights,
  bias: Float32Array | null,
  C: Float32Array,
  T: number,
  N: number,
  K: number,
  pack: Float32Array,
): void {
  if (W instanceof Float32Array) {
    native.gemm(A, TYPE.f32, W, null, null, 0, bias, C, T, N, K, pack);
  } else if (W.kind === 'q8' || W.kind === 'q4') {
    native.gemm(A, TYPE[W.kind], W.data, W.scales, W.biases, W.group, bias, C, T, N, K, pack);
  } else {
    native.gemm(A, TYPE[W.kind], W.data, null, null, 0, bias, C, T, N, K, pack);
  }
}

export function rmsNorm(x: Float32Array, w: Float32Array, y: Float32Array, rows: number, dim: number, eps = 1e-5): void {
  native.norm(NORM.rms, x, w, null, y, rows, dim, eps);
}

/** x += r (a residual, `rows`×`dim`), then y = RMSNorm(x)·w, as `rmsNorm` gives it: one call where a layer ends and the next begins. */
export function addRmsNorm(x: Float32Array, r: Float32Array, w: Float32Array, y: Float32Array, rows: number, dim: number, eps = 1e-5): void {
  native.addNorm(x, r, w, y, rows, dim, eps);
}

export function layerNorm(x: Float32Array, w: Float32Array, b: Float32Array, y: Float32Array, rows: number, dim: number, eps = 1e-5): void {
  native.norm(NORM.layer, x, w, b, y, rows, dim, eps);
}

export function gelu(x: Float32Array, y: Float32Array, n = x.length): void {
  native.activation(ACTIVATION.gelu, x, y, n, null);
}

export function silu(x: Float32Array, y: Float32Array, n = x.length): void {
  native.activation(ACTIVATION.silu, x, y, n, null);
}

/** y = silu(gate) · up */
export function swiglu(gate: Float32Array, up: Float32Array, y: Float32Array, n = gate.length): void {
  native.activation(ACTIVATION.swiglu, gate, y, n, up);
}

/** GLU over channels: x [rows][2·dim] → y [rows][dim]. */
export function glu(x: Float32Array, y: Float32Array, rows: number, dim: number): void {
  native.activation(ACTIVATION.glu, x, y, rows, dim);
}

/**
 * RoPE in place on x [rows][heads][hd] at positions pos0…; cos/sin tables [positions][hd/2].
 * `adjacent`: pairs (2i, 2i+1) (Depthformer); otherwise rotate-half pairs (i, i + hd/2).
 */
export function rope(x: Float32Array, cos: Float32Array, sin: Float32Array, rows: number, heads: number, hd: number, pos0: number, adjacent: boolean): void {
  native.rope(x, cos, sin, rows, heads, hd, pos0, adjacent);
}

/** cos/sin tables for `positions` × hd/2 frequencies θ^(−2i/hd). */
export function ropeTables(positions: number, hd: number, theta: number, cos: Float32Array, sin: Float32Array): void {
  const half = hd / 2;
  for (let p = 0; p < positions; p++) {
    for (let i = 0; i < half; i++) {
      const a = p * theta ** ((-2 * i) / hd);
      cos[p * half + i] = Math.cos(a);
      sin[p * half + i] = Math.sin(a);
    }
  }
}

export const kernelIsa = (): string => native.kernelIsa();

export type AttentionMode = 'full' | 'causal' | 'sliding';

export interface AttentionShape {
  /** Queries and keys. */
  Tq: number;
  Tk: number;
  /** Query heads and KV heads (GQA: Hkv divides Hq). */
  Hq: number;
  Hkv: number;
  hd: number;
  mode: AttentionMode;
  /** Absolute positions of query 0 and key 0 (for causal and sliding masks). Default 0. */
  qpos0?: number;
  kpos0?: number;
  /** Sliding window including the current position (mode 'sliding'). */
  window?: number;
  /** Default 1/√hd. */
  scale?: number;
  /** Tile sizes. Default 64 × 64. */
  tq?: number;
  tk?: number;
}

const MODES: Record<AttentionMode, number> = ATTENTION_MASK;

/**
 * Scratch floats the tiled attention needs: a function of the tiles, the head size and the
 * head counts only — never of the sequence length. It holds one slot per KV head, so a call's
 * KV heads can run on the compute threads at once.
 */
export function attentionScratchFloats(tq: number, tk: number, hd: number, heads: number, kvHeads: number): number {
  if (!Number.isInteger(heads / kvHeads)) throw new ArgumentError(`attentionScratchFloats: ${kvHeads} KV heads must divide ${heads} heads`);
  return native.attentionScratchFloats(tq, tk, hd, heads / kvHeads, kvHeads);
}

/**
 * Tiled attention with an online softmax (see native/src/kernels.h): q [Tq][Hq][hd],
 * k, v [Tk][Hkv][hd] (f32, or f16 bits in a Uint16Array) → out [Tq][Hq][hd]; its KV heads are
 * split among the compute threads. `rel` gives the Conformer's relative-position terms:
 * p [2T−1][Hq][hd] (linear_pos of positions T−1 … −(T−1)), u and v [Hq][hd].
 */
export function attention(
  s: AttentionShape,
  q: Float32Array,
  k: Float32Array | Uint16Array,
  v: Float32Array | Uint16Array,
  out: Float32Array,
  scratch: Float32Array,
  rel: { p: Float32Array; u: Float32Array; v: Float32Array } | null = null,
): void {
  native.attention(
    q,
    k,
    v,
    out,
    rel?.p ?? null,
    rel?.u ?? null,
    rel?.v ?? null,
    scratch,
    s.Tq,
    s.Tk,
    s.Hq,
    s.Hkv,
    s.hd,
    s.qpos0 ?? 0,
    s.kpos0 ?? 0,
    s.window ?? 0,
    MODES[s.mode],
    s.scale ?? 1 / Math.sqrt(s.hd),
    s.tq ?? 64,
    s.tk ?? 64,
  );
}

/**
 * Depthwise causal conv1d with a carried state (LFM2 short conv): x, y [T][C], w [C][k],
 * state [k−1][C] (previous input rows, oldest first), updated in place.
 */
export function conv1dCausal(x: Float32Array, w: Float32Array, state: Float32Array, y: Float32Array, T: number, C: number, k: number): void {
  native.conv1d(CONV_MODE.causal, x, w, state, y, T, C, k, 0, 0);
}

/** Depthwise 'same' conv1d (odd k, zero padding) on rows [t0, t1) of x [T][C] into y [t1 − t0][C]. */
export function conv1dSame(
  x: Float32Array,
  w: Float32Array,
  bias: Float32Array | null,
  y: Float32Array,
  T: number,
  C: number,
  k: number,
  t0 = 0,
  t1 = T,
): void {
  native.conv1d(CONV_MODE.same, x, w, bias, y, T, C, k, t0, t1);
}

/** Row r of a weight matrix, decoded to f32 into out[at…] (embedding lookup). */
export function rowInto(w: Weights, r: number, out: Float32Array, at = 0, scale = 1, accumulate = false): void {
  const cols = w.cols;
  const base = r * cols;
  if (w.kind === 'f32') {
    for (let k = 0; k < cols; k++) out[at + k] = (accumulate ? out[at + k]! : 0) + scale * w.data[base + k]!;
    return;
  }
  if (w.kind === 'f16' || w.kind === 'bf16') {
    for (let k = 0; k < cols; k++) {
      const h = w.data[base + k]!;
      const v = w.kind === 'bf16' ? bf16ToF32(h) : f16ToF32(h);
      out[at + k] = (accumulate ? out[at + k]! : 0) + scale * v;
    }
    return;
  }
  if (w.kind !== 'q8' && w.kind !== 'q4') return;
  const groups = cols / w.group;
  for (let k0 = 0, g = r * groups; k0 < cols; k0 += w.group, g++) {
    const s = f16ToF32(w.scales[g]!);
    const b = f16ToF32(w.biases[g]!);
    for (let k = k0; k < k0 + w.group; k++) {
      const i = base + k;
      const q = w.kind === 'q8' ? w.data[i]! : (w.data[i >> 1]! >> (i & 1 ? 4 : 0)) & 15;
      out[at + k] = (accumulate ? out[at + k]! : 0) + scale * (s * q + b);
    }
  }
}

/** Rows [r0, r1) of a weight matrix as a matrix of their own (views, made once at setup). */
export function weightRows(w: Weights, r0: number, r1: number): Weights {
  const cols = w.cols;
  if (w.kind === 'f32') return { kind: 'f32', data: w.data.subarray(r0 * cols, r1 * cols), rows: r1 - r0, cols };
  if (w.kind === 'f16' || w.kind === 'bf16') return { kind: w.kind, data: w.data.subarray(r0 * cols, r1 * cols), rows: r1 - r0, cols };
  if (w.kind !== 'q8' && w.kind !== 'q4') throw new ArgumentError(`unknown weight encoding '${String((w as { kind: unknown }).kind)}'`);
  const per = w.kind === 'q8' ? cols : cols / 2;
  const groups = cols / w.group;
  return {
    kind: w.kind,
    data: w.data.subarray(r0 * per, r1 * per),
    scales: w.scales.subarray(r0 * groups, r1 * groups),
    biases: w.biases.subarray(r0 * groups, r1 * groups),
    group: w.group,
    rows: r1 - r0,
    cols,
  };
}
