/**
 * Band-limited polyphase resampler for any pair of integer rates: a Kaiser-windowed sinc
 * prototype at the common rate L·in (L/M = out/in in lowest terms), split into L phases. The
 * filter is zero-phase: output n sits at input time n·M/L, so nothing is delayed once
 * `finish()` has flushed the tail, and a whole input of N samples gives ceil(N·L/M) outputs.
 *
 * Design: passband edge 0.45 × the lower rate, stopband edge 0.5 × the lower rate, Kaiser β
 * for the requested stopband attenuation (default 110 dB).
 *
 * At equal rates it is the identity (as torchaudio's resample is): samples pass unchanged,
 * with no filter and no delay.
 *
 * Streaming equals batch bit for bit: every output is one dot product over the same taps and
 * the same history, in the same order, whatever the chunking. Samples arrive one at a time
 * into a double-written history ring, so any window is contiguous. The loop runs in the native
 * addon over buffers made here (the phase table, the ring and a state block of named slots);
 * nothing is allocated after construction.
 *
 * Thread contract: one instance per stream, one thread; push/finish never throw.
 */
import { ArgumentError } from '../errors.js';
import { WAV_MAX_HZ, WAV_MIN_HZ } from '../options.js';
import { heapWorkspace, type Workspace } from './workspace.js';
import { native } from '../native.js';

/** Named slots of the state block shared with the native kernel (native/src/dsp.h). */
const { pos: kPos, inputs: kInputs, outputs: kOutputs, up: kUp, down: kDown, taps: kTaps, center: kCenter, slots: kStateSlots } = native.resamplerSlots;

/** The most filter phases (L of L/M) a resampler designs. */
export const MAX_PHASES = 65_536;

export interface ResamplerOptions {
  /** Stopband attenuation in dB. Default 110. */
  attenuation?: number;
  /** Passband edge as a fraction of the lower rate. Default 0.45. */
  passband?: number;
  /** Stopband edge as a fraction of the lower rate. Default 0.5. */
  stopband?: number;
}

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

/** Modified Bessel function of the first kind, order 0 (series). */
export function besselI0(x: number): number {
  let sum = 1;
  let term = 1;
  const q = (x * x) / 4;
  for (let k = 1; k < 200; k++) {
    term *= q / (k * k);
    sum += term;
    if (term < sum * 1e-17) break;
  }
  return sum;
}

export class Resampler {
  readonly inRate: number;
  readonly outRate: number;
  /** Upsampling factor L and downsampling factor M (out/in = L/M). */
  readonly up: number;
  readonly down: number;
  /** Taps per phase (0 at equal rates). */
  readonly taps: number;
  /** Equal rates: samples are copied, not filtered. */
  readonly identity: boolean;
  readonly #h: Float64Array; // [L][taps], each phase reversed: tap T−1−k = prototype[p + k·L]
  readonly #ring: Float64Array; // [2·taps] double-written history
  readonly #state: Float64Array; // [kStateSlots] shared with the native kernel
  #flushed = false;

  constructor(inRate: number, outRate: number, o: ResamplerOptions = {}, ws: Workspace = heapWorkspace) {
    for (const [name, r] of [
      ['input rate', inRate],
      ['output rate', outRate],
    ] as const) {
      if (!Number.isSafeInteger(r) || r < WAV_MIN_HZ || r > WAV_MAX_HZ)
        throw new ArgumentError(`resampler ${name} must be an integer from ${WAV_MIN_HZ} to ${WAV_MAX_HZ} Hz, got ${r}`);
    }
    const att = o.attenuation ?? 110;
    const pass = o.passband ?? 0.45;
    const stop = o.stopband ?? 0.5;
    if (!(att >= 20 && att <= 200 && pass > 0 && stop > pass && stop <= 1)) throw new ArgumentError(`resampler options are inconsistent: ${JSON.stringify(o)}`);
    this.inRate = inRate;
    this.outRate = outRate;
    const g = gcd(inRate, outRate);
    this.up = outRate / g;
    this.down = inRate / g;
    // The phase table grows with L: rates that share almost no factor would take hundreds of MB
    // and seconds to design. Every pair of usual rates needs far fewer phases.
    if (this.up > MAX_PHASES) {
      throw new ArgumentError(
        `resampling ${inRate} Hz to ${outRate} Hz needs ${this.up} filter phases (at most ${MAX_PHASES}): choose rates with a larger common factor`,
      );
    }
    this.identity = inRate === outRate;
    this.#state = ws('resample.state', Float64Array, kStateSlots);
    if (this.identity) {
      this.taps = 0;
      this.#h = new Float64Array(0);
      this.#ring = this.#h;
      return;
    }
    const L = this.up;
    const low = Math.min(inRate, outRate);
    const common = inRate * L; // the prototype's sample rate
    const cutoff = ((pass + stop) / 2) * low; // Hz, middle of the transition band
    const transition = ((stop - pass) * low) / common; // cycles per common-rate sample
    const beta = att > 50 ? 0.1102 * (att - 8.7) : att >= 21 ? 0.5842 * (att - 21) ** 0.4 + 0.07886 * (att - 21) : 0;
    // Kaiser's length estimate, at the common rate, made odd and a whole number of phases.
    let length = Math.ceil((att - 7.95) / (14.36 * transition)) + 1;
    this.taps = Math.ceil(length / L);
    length = this.taps * L;
    if (length % 2 === 0) length -= 1;
    const center = (length - 1) / 2;
    this.#h = ws('resample.phases', Float64Array, L * this.taps);
    const fc = cutoff / common;
    const i0b = besselI0(beta);
    for (let j = 0; j < length; j++) {
      const t = j - center;
      const sinc = t === 0 ? 2 * fc : Math.sin(2 * Math.PI * fc * t) / (Math.PI * t);
      const r = t / center;
      const w = besselI0(beta * Math.sqrt(Math.max(0, 1 - r * r))) / i0b;
      const p = j % L;
      const k = (j - p) / L;
      this.#h[p * this.taps + (this.taps - 1 - k)] = sinc * w * L; // × L restores the gain lost to zero-stuffing
    }
    this.#ring = ws('resample.history', Float64Array, 2 * this.taps);
    this.#state[kUp] = L;
    this.#state[kDown] = this.down;
    this.#state[kTaps] = this.taps;
    this.#state[kCenter] = center;
  }

  /**
   * Gain of the implemented filter at `hz` (1 in the passband), computed from the phase table
   * itself, so reports measure the coefficients in use rather than the design targets.
   */
  gainAt(hz: number): number {
    if (this.identity) return 1;
    const L = this.up;
    const T = this.taps;
    const w = (2 * Math.PI * hz) / (this.inRate * L);
    let re = 0;
    let im = 0;
    for (let p = 0; p < L; p++) {
      for (let k = 0; k < T; k++) {
        const j = p + k * L;
        const c = this.#h[p * T + (T - 1 - k)] as number;
        re += c * Math.cos(w * j);
        im -= c * Math.sin(w * j);
      }
    }
    return Math.hypot(re, im) / L;
  }

  /** Outputs a whole input of `n` samples yields. */
  outputLength(n: number): number {
    return Math.ceil((n * this.up) / this.down);
  }

  /** Most outputs one push of `n` samples can emit. */
  maxOutput(n: number): number {
    return Math.ceil((n * this.up) / this.down) + 1;
  }

  reset(): void {
    this.#ring.fill(0);
    this.#state[kPos] = 0;
    this.#state[kInputs] = 0;
    this.#state[kOutputs] = 0;
    this.#flushed = false;
  }

  /** Feeds `count` samples of `input`; writes the outputs they complete to `out[outAt…]`. Returns the count. */
  push(input: Float32Array, out: Float32Array, outAt = 0, count = input.length): number {
    if (this.#flushed) return 0;
    const n = Math.min(count, input.length);
    if (this.identity) {
      for (let i = 0; i < n; i++) out[outAt + i] = input[i] as number;
      this.#state[kInputs] = (this.#state[kInputs] as number) + n;
      return n;
    }
    return native.resampleRun(this.#h, this.#ring, this.#state, input, n, out, outAt, 0);
  }

  /** Ends the stream: feeds zeros until every output of the input so far is written. */
  finish(out: Float32Array, outAt = 0): number {
    if (this.#flushed) return 0;
    this.#flushed = true;
    if (this.identity) return 0;
    return native.resampleRun(this.#h, this.#ring, this.#state, null, 0, out, outAt, this.outputLength(this.#state[kInputs] as number));
  }
}

/** A whole signal at another rate, in one pass (made for tools and tests; it allocates). */
export function resampleSignal(x: Float32Array, from: number, to: number): Float32Array {
  const r = new Resampler(from, to);
  const out = new Float32Array(r.outputLength(x.length) + 1);
  let n = r.push(x, out, 0, x.length);
  n += r.finish(out, n);
  return out.subarray(0, n);
}
