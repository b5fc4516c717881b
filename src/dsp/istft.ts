/**
 * Streaming ISTFT of the detokenizer (docs/model.md, Detokenizer): each frame's 641 log-magnitudes
 * and 641 phases become X = exp(logmag)·e^{i·phase} (the addon's exp and sine, whose bits do
 * not depend on the JS engine or the C library); C2R inverse FFT (1/N, imaginary parts of
 * DC and Nyquist ignored); periodic Hann window; overlap-add at the hop; division by the
 * overlap-added squared window; nFft − hop samples trimmed at the start ("same" length).
 *
 * Samples are emitted as soon as no later frame can change them: with n_fft 1280 and hop 320
 * that is 1440 samples after the first 6-frame code frame and 1920 after each later one;
 * `finish()` flushes the remaining (n_fft − hop)/2 = 480. Streaming equals batch exactly (same
 * arithmetic, same order).
 *
 * Thread contract: one per conversation, one thread; pushFrame/finish allocate nothing.
 */
import { ArgumentError } from '../errors.js';
import { RealFFT } from './fft.js';
import { heapWorkspace, type Workspace } from './workspace.js';
import { native } from '../native.js';

export interface IstftOptions {
  nFft?: number;
  hop?: number;
}

/** Smallest window-sum treated as non-zero (torch.istft's check). */
const ENVELOPE_EPS = 1e-11;

export class StreamingISTFT {
  readonly nFft: number;
  readonly hop: number;
  readonly bins: number;
  /** Samples trimmed at each end: (nFft − hop) / 2 (480 for the detokenizer). */
  readonly trim: number;
  readonly #fft: RealFFT;
  readonly #window: Float64Array;
  readonly #spec: Float64Array;
  readonly #frame: Float64Array;
  readonly #acc: Float64Array; // overlap-add ring, by absolute sample & mask
  readonly #env: Float64Array; // squared-window sum ring
  #frames = 0; // frames added
  #emitted = 0; // absolute (untrimmed) position of the next sample to emit

  constructor(o: IstftOptions = {}, ws: Workspace = heapWorkspace) {
    this.nFft = o.nFft ?? 1280;
    this.hop = o.hop ?? 320;
    if (this.nFft % 2 !== 0 || this.hop <= 0 || this.hop > this.nFft) throw new ArgumentError(`ISTFT options are inconsistent: ${JSON.stringify(o)}`);
    this.bins = this.nFft / 2 + 1;
    this.trim = (this.nFft - this.hop) / 2;
    this.#fft = new RealFFT(this.nFft, ws);
    this.#window = ws('istft.window', Float64Array, this.nFft);
    for (let i = 0; i < this.nFft; i++) this.#window[i] = 0.5 - 0.5 * Math.cos((2 * Math.PI * i) / this.nFft);
    this.#spec = ws('istft.spectrum', Float64Array, 2 * this.bins);
    this.#frame = ws('istft.frame', Float64Array, this.nFft);
    let ring = 1;
    while (ring < 2 * this.nFft) ring *= 2;
    this.#acc = ws('istft.overlap', Float64Array, ring);
    this.#env = ws('istft.envelope', Float64Array, ring);
    this.#emitted = this.trim;
  }

  /** Most samples one pushFrame can emit. */
  get maxSamplesPerFrame(): number {
    return this.hop;
  }

  reset(): void {
    this.#acc.fill(0);
    this.#env.fill(0);
    this.#frames = 0;
    this.#emitted = this.trim;
  }

  /**
   * Adds one frame: `bins[at … at+bins)` log-magnitudes then `bins[at+bins … at+2·bins)`
   * phases (radians). Writes the samples it completes to `out[outAt…]`; returns their count.
   */
  pushFrame(values: Float32Array, at: number, out: Float32Array, outAt: number): number {
    native.polarSpectrum(values, at, this.bins, this.#spec);
    this.#fft.inverse(this.#spec, this.#frame);
    const start = this.#frames * this.hop;
    // Positions before #emitted are trimmed (never emitted, so never cleared): skip them, or
    // their sums would resurface when the ring wraps.
    native.overlapAdd(this.#frame, this.#window, this.#acc, this.#env, start, Math.max(0, this.#emitted - start));
    this.#frames += 1;
    // Samples before the next frame's start are final.
    return this.#emit(this.#frames * this.hop, out, outAt);
  }

  /** Emits what is left (the "same"-length tail). Returns the count. */
  finish(out: Float32Array, outAt: number): number {
    if (this.#frames === 0) return 0;
    const end = (this.#frames - 1) * this.hop + this.nFft - this.trim;
    return this.#emit(Math.max(this.#emitted, end), out, outAt);
  }

  #emit(upTo: number, out: Float32Array, outAt: number): number {
    const n = upTo > this.#emitted ? native.overlapEmit(this.#acc, this.#env, this.#emitted, upTo, ENVELOPE_EPS, out, outAt) : 0;
    this.#emitted = Math.max(this.#emitted, upTo);
    return n;
  }
}
