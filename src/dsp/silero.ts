/**
 * Silero VAD (v5, 16 kHz) on the project's own arithmetic: the weights are read from the model's
 * ONNX file, and each 512-sample window runs the network the file describes —
 *
 *   the window after the previous window's last 64 samples, reflect-padded by 64 on the right
 *   (640 samples) → an STFT as a strided convolution with the file's basis (258 × 256, hop 128:
 *   4 frames) → magnitudes of its 129 bins → four convolutions (kernel 3, padding 1, strides
 *   1, 2, 2, 1; 129 → 128 → 64 → 64 → 128 channels) each with ReLU → one LSTM cell (128, gates
 *   i f g o as PyTorch stores them) → ReLU → a 1 × 1 convolution → sigmoid: the probability that
 *   the window is speech.
 *
 * `SileroModel` holds the weights (carved once, shared by every stream); `SileroVad` is one
 * stream's state and scratch and gives the same per-10 ms decisions as `VoiceDetector`: a frame
 * takes the decision of the window its centre falls in, made with Silero's own hysteresis
 * (speech from `threshold`, until the probability falls under `threshold − 0.15`). Frames are
 * decided when their window completes, so decisions trail the audio by up to one window (32 ms).
 *
 * Thread contract: a model is read-only after construction; a detector is used by one thread;
 * nothing allocates after construction.
 */
import { ArgumentError, BadInputError } from '../errors.js';
import { native, WEIGHT_TYPE } from '../native.js';
import { onnxInitializers } from './onnx.js';
import type { FrameDecider } from './vad.js';
import { heapWorkspace, type Workspace } from './workspace.js';

export const SILERO_RATE = 16000;
export const SILERO_WINDOW = 512;
const CONTEXT = 64;
const PADDED = CONTEXT + SILERO_WINDOW + 64;
const FFT = 256;
const HOP = 128;
const STEPS = (PADDED - FFT) / HOP + 1;
const BINS = FFT / 2 + 1;
const HIDDEN = 128;
const FRAME = 160;

/** The encoder's convolutions: input and output channels, stride. */
const ENCODER = [
  [BINS, 128, 1],
  [128, 64, 2],
  [64, 64, 2],
  [64, 128, 1],
] as const;

/** Every tensor the network needs, with its shape. */
export const SILERO_TENSORS: Readonly<Record<string, readonly number[]>> = {
  'model.stft.forward_basis_buffer': [2 * BINS, 1, FFT],
  ...Object.fromEntries(
    ENCODER.flatMap(([cin, cout], i) => [
      [`model.encoder.${i}.reparam_conv.weight`, [cout, cin, 3]],
      [`model.encoder.${i}.reparam_conv.bias`, [cout]],
    ]),
  ),
  'model.decoder.rnn.weight_ih': [4 * HIDDEN, HIDDEN],
  'model.decoder.rnn.weight_hh': [4 * HIDDEN, HIDDEN],
  'model.decoder.rnn.bias_ih': [4 * HIDDEN],
  'model.decoder.rnn.bias_hh': [4 * HIDDEN],
  'model.decoder.decoder.2.weight': [1, HIDDEN, 1],
  'model.decoder.decoder.2.bias': [1],
};

/** Reads and checks the network's tensors from the bytes of a Silero VAD v5 16 kHz ONNX file. */
export function readSileroWeights(bytes: Uint8Array, file: string): Map<string, Float32Array> {
  const found = onnxInitializers(bytes, file);
  const out = new Map<string, Float32Array>();
  for (const [name, shape] of Object.entries(SILERO_TENSORS)) {
    const t = found.get(name);
    if (t === undefined) throw new BadInputError({ file, field: `initializer '${name}'` }, 'missing: not a Silero VAD v5 16 kHz model');
    if (t.dims.length !== shape.length || t.dims.some((d, i) => d !== shape[i]) || t.data.length === 0) {
      throw new BadInputError({ file, field: `initializer '${name}'` }, `is [${t.dims.join(', ')}] but [${shape.join(', ')}] f32 is needed`);
    }
    for (let i = 0; i < t.data.length; i++) {
      if (!Number.isFinite(t.data[i])) throw new BadInputError({ file, field: `initializer '${name}'` }, `value ${i} is not finite`);
    }
    out.set(name, t.data);
  }
  return out;
}

/** The weights, copied once into buffers of `ws` (accounted where the workspace is an arena). */
export class SileroModel {
  readonly #w = new Map<string, Float32Array>();
  /** The encoder's convolution weights [oc][ic·3 + k] and biases, by layer. */
  readonly encoderWeights: readonly Float32Array[];
  readonly encoderBiases: readonly Float32Array[];

  /** `weights` null: carve only (a sizing dry run). */
  constructor(weights: ReadonlyMap<string, Float32Array> | null, ws: Workspace = heapWorkspace) {
    for (const [name, shape] of Object.entries(SILERO_TENSORS)) {
      const src = weights?.get(name);
      const n = shape.reduce((a, b) => a * b, 1);
      if (weights !== null && (src === undefined || src.length !== n)) throw new ArgumentError(`Silero weights: '${name}' needs ${n} values`);
      const dst = ws(`silero.${name}`, Float32Array, n);
      if (src !== undefined) dst.set(src);
      this.#w.set(name, dst);
    }
    this.encoderWeights = ENCODER.map((_, i) => this.get(`model.encoder.${i}.reparam_conv.weight`));
    this.encoderBiases = ENCODER.map((_, i) => this.get(`model.encoder.${i}.reparam_conv.bias`));
  }

  get(name: string): Float32Array {
    return this.#w.get(name) as Float32Array;
  }
}

const F32 = WEIGHT_TYPE.f32;

export class SileroVad implements FrameDecider {
  readonly threshold: number;
  /** Its decisions follow a probability, not a fixed hangover. */
  readonly hangover = 0;
  readonly #m: SileroModel;
  readonly #input: Float32Array; // [PADDED]: context, window, reflection
  readonly #frames: Float32Array[]; // [STEPS] views of #input, one STFT frame each
  readonly #stft: Float32Array; // [STEPS][2·BINS]
  readonly #stftRows: Float32Array[]; // [STEPS] views of #stft
  readonly #act: Float32Array[]; // per layer input, time-major [steps][channels]: spectrum, then each convolution's output
  readonly #cols: Float32Array; // im2col rows [steps][channels·3]
  readonly #gates: Float32Array; // [4·HIDDEN]
  readonly #gatesH: Float32Array; // [4·HIDDEN]
  readonly #h: Float32Array; // [HIDDEN]
  readonly #c: Float32Array; // [HIDDEN]
  readonly #p: Float64Array; // [1] the last window's probability
  #fill = 0;
  #windows = 0;
  #decided = 0;
  #speech = false;

  constructor(model: SileroModel, ws: Workspace = heapWorkspace, threshold = 0.5) {
    if (!(threshold > 0.15 && threshold < 1)) throw new ArgumentError(`Silero threshold must be between 0.15 and 1, got ${threshold}`);
    this.threshold = threshold;
    this.#m = model;
    this.#input = ws('silero.input', Float32Array, PADDED);
    this.#frames = Array.from({ length: STEPS }, (_, t) => this.#input.subarray(t * HOP, t * HOP + FFT));
    this.#stft = ws('silero.stft', Float32Array, STEPS * 2 * BINS);
    this.#stftRows = Array.from({ length: STEPS }, (_, t) => this.#stft.subarray(t * 2 * BINS, (t + 1) * 2 * BINS));
    this.#act = [ws('silero.spectrum', Float32Array, STEPS * BINS)];
    let len = STEPS;
    for (let i = 0; i < ENCODER.length; i++) {
      const layer = ENCODER[i] as readonly [number, number, number];
      len = Math.floor((len - 1) / layer[2]) + 1;
      this.#act.push(ws(`silero.act${i}`, Float32Array, len * layer[1]));
    }
    this.#cols = ws('silero.cols', Float32Array, STEPS * BINS * 3);
    this.#gates = ws('silero.gates', Float32Array, 4 * HIDDEN);
    this.#gatesH = ws('silero.gatesH', Float32Array, 4 * HIDDEN);
    this.#h = ws('silero.h', Float32Array, HIDDEN);
    this.#c = ws('silero.c', Float32Array, HIDDEN);
    this.#p = ws('silero.p', Float64Array, 1);
  }

  /** The last window's probability of speech. */
  get probability(): number {
    return this.#p[0] as number;
  }

  /** Forgets the stream: state, context and frame count. */
  reset(): void {
    this.#input.fill(0);
    this.#h.fill(0);
    this.#c.fill(0);
    this.#p[0] = 0;
    this.#fill = 0;
    this.#windows = 0;
    this.#decided = 0;
    this.#speech = false;
  }

  /**
   * Takes `pcm[at, at + n)` (16 kHz); writes one decision (1 speech, 0 not) per 10 ms frame
   * decided to `decisions` from `dAt`, and returns how many were written.
   */
  push(pcm: Float32Array, at: number, n: number, decisions: Uint8Array, dAt: number): number {
    let written = 0;
    const input = this.#input;
    for (let i = 0; i < n; ) {
      const k = Math.min(SILERO_WINDOW - this.#fill, n - i);
      for (let j = 0; j < k; j++) input[CONTEXT + this.#fill + j] = pcm[at + i + j] as number;
      this.#fill += k;
      i += k;
      if (this.#fill < SILERO_WINDOW) break;
      this.#fill = 0;
      this.#window();
      const p = this.#p[0] as number;
      this.#speech = this.#speech ? p >= this.threshold - 0.15 : p >= this.threshold;
      const end = ++this.#windows * SILERO_WINDOW;
      while (this.#decided * FRAME + FRAME / 2 < end) {
        decisions[dAt + written++] = this.#speech ? 1 : 0;
        this.#decided++;
      }
    }
    return written;
  }

  /** Frames (10 ms) at most one push of `n` samples decides. */
  static maxFrames(n: number): number {
    return Math.ceil((n + SILERO_WINDOW) / FRAME) + 1;
  }

  close(): void {}

  /** Runs the network on the filled window; keeps its last 64 samples as the next context. */
  #window(): void {
    const m = this.#m;
    const x = this.#input;
    // Reflect padding on the right: x[L + j] = x[L − 2 − j].
    const L = CONTEXT + SILERO_WINDOW;
    for (let j = 0; j < PADDED - L; j++) x[L + j] = x[L - 2 - j] as number;
    // STFT: each frame against the basis' real and imaginary rows, then magnitudes.
    const basis = m.get('model.stft.forward_basis_buffer');
    const spectrum = this.#act[0] as Float32Array;
    for (let t = 0; t < STEPS; t++) {
      const row = this.#stftRows[t] as Float32Array;
      native.gemv(F32, basis, null, null, 0, this.#frames[t] as Float32Array, row, 2 * BINS, FFT, null);
      for (let f = 0; f < BINS; f++) {
        const re = row[f] as number;
        const im = row[BINS + f] as number;
        spectrum[t * BINS + f] = Math.sqrt(Math.fround(Math.fround(re * re) + Math.fround(im * im)));
      }
    }
    // Encoder: each convolution as im2col rows [t][ic·3 + k] times the weight [oc][ic·3 + k].
    let len = STEPS;
    for (let i = 0; i < ENCODER.length; i++) {
      const layer = ENCODER[i] as readonly [number, number, number];
      const cin = layer[0];
      const cout = layer[1];
      const stride = layer[2];
      const src = this.#act[i] as Float32Array;
      const dst = this.#act[i + 1] as Float32Array;
      const out = Math.floor((len - 1) / stride) + 1;
      const cols = this.#cols;
      for (let t = 0; t < out; t++) {
        for (let k = 0; k < 3; k++) {
          const p = t * stride + k - 1;
          const inside = p >= 0 && p < len;
          for (let ic = 0; ic < cin; ic++) cols[t * cin * 3 + ic * 3 + k] = inside ? (src[p * cin + ic] as number) : 0;
        }
      }
      native.gemvRows(F32, m.encoderWeights[i] as Float32Array, null, null, 0, cols, dst, out, cout, cin * 3, null);
      const bias = m.encoderBiases[i] as Float32Array;
      for (let t = 0; t < out; t++) {
        for (let oc = 0; oc < cout; oc++) {
          const v = (dst[t * cout + oc] as number) + (bias[oc] as number);
          dst[t * cout + oc] = Math.max(v, 0);
        }
      }
      len = out;
    }
    // LSTM cell on the encoder's one output step.
    const enc = this.#act[ENCODER.length] as Float32Array;
    const g = this.#gates;
    const gh = this.#gatesH;
    const h = this.#h;
    const c = this.#c;
    native.gemv(F32, m.get('model.decoder.rnn.weight_ih'), null, null, 0, enc, g, 4 * HIDDEN, HIDDEN, null);
    native.gemv(F32, m.get('model.decoder.rnn.weight_hh'), null, null, 0, h, gh, 4 * HIDDEN, HIDDEN, null);
    const bih = m.get('model.decoder.rnn.bias_ih');
    const bhh = m.get('model.decoder.rnn.bias_hh');
    for (let r = 0; r < 4 * HIDDEN; r++) g[r] = (g[r] as number) + (gh[r] as number) + (bih[r] as number) + (bhh[r] as number);
    for (let k = 0; k < HIDDEN; k++) {
      // Sigmoids written out: a double passed to or returned from a call V8 does not inline is
      // boxed, one allocation each.
      const ig = 1 / (1 + Math.exp(-(g[k] as number)));
      const fg = 1 / (1 + Math.exp(-(g[HIDDEN + k] as number)));
      const gg = Math.tanh(g[2 * HIDDEN + k] as number);
      const og = 1 / (1 + Math.exp(-(g[3 * HIDDEN + k] as number)));
      c[k] = fg * (c[k] as number) + ig * gg;
      h[k] = og * Math.tanh(c[k] as number);
    }
    const ow = m.get('model.decoder.decoder.2.weight');
    let s = m.get('model.decoder.decoder.2.bias')[0] as number;
    for (let k = 0; k < HIDDEN; k++) {
      const v = h[k] as number;
      if (v > 0) s += (ow[k] as number) * v;
    }
    // The window's last 64 samples are the next window's context.
    x.copyWithin(0, SILERO_WINDOW, SILERO_WINDOW + CONTEXT);
    this.#p[0] = 1 / (1 + Math.exp(-s));
  }
}
