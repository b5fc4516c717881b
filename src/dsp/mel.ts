/**
 * Log-mel frontend as NeMo's AudioToMelSpectrogramPreprocessor computes it at inference
 * (docs/model.md, Frontend): pre-emphasis 0.97 keeping x[0]; symmetric Hann of 400 centred in a
 * 512-point frame; zero centre padding of n_fft/2; hop 160; power spectrum; 128 Slaney-scale
 * filters with Slaney area normalisation; log(x + 2^-24); 1 + L//hop frames.
 *
 * Raw rows stream: pushed chunk by chunk they equal the rows of one whole pass, bit for bit.
 * Per-feature normalisation (`normaliseRows`) runs once a segment is complete.
 *
 * Thread contract: one frontend per conversation, used by one thread; push/finish allocate
 * nothing and never throw.
 */
import { ArgumentError } from '../errors.js';
import { RealFFT } from './fft.js';
import { heapWorkspace, type Workspace } from './workspace.js';

export interface MelOptions {
  sampleRate?: number;
  nFft?: number;
  winLength?: number;
  hop?: number;
  nMels?: number;
  preemphasis?: number;
  fmin?: number;
  fmax?: number;
}

export const LOG_GUARD = 2 ** -24;
export const NORM_EPS = 1e-5;

/** Slaney mel scale (librosa htk=False). */
export function hzToMel(f: number): number {
  const fsp = 200 / 3;
  const minLogHz = 1000;
  const minLogMel = minLogHz / fsp;
  const logstep = Math.log(6.4) / 27;
  return f >= minLogHz ? minLogMel + Math.log(f / minLogHz) / logstep : f / fsp;
}

export function melToHz(m: number): number {
  const fsp = 200 / 3;
  const minLogHz = 1000;
  const minLogMel = minLogHz / fsp;
  const logstep = Math.log(6.4) / 27;
  return m >= minLogMel ? minLogHz * Math.exp(logstep * (m - minLogMel)) : fsp * m;
}

/** Slaney-normalised triangular filters, [nMels][bins] (librosa.filters.mel, norm='slaney'). */
export function melFilterbank(sampleRate: number, nFft: number, nMels: number, fmin: number, fmax: number, out: Float64Array): void {
  const bins = nFft / 2 + 1;
  const lo = hzToMel(fmin);
  const hi = hzToMel(fmax);
  const hz: number[] = [];
  for (let i = 0; i < nMels + 2; i++) hz.push(melToHz(lo + ((hi - lo) * i) / (nMels + 1)));
  for (let m = 0; m < nMels; m++) {
    const f0 = hz[m] as number;
    const f1 = hz[m + 1] as number;
    const f2 = hz[m + 2] as number;
    const enorm = 2 / (f2 - f0);
    for (let k = 0; k < bins; k++) {
      const f = (k * sampleRate) / nFft;
      const lower = (f - f0) / (f1 - f0);
      const upper = (f2 - f) / (f2 - f1);
      out[m * bins + k] = Math.max(0, Math.min(lower, upper)) * enorm;
    }
  }
}

export class MelFrontend {
  readonly sampleRate: number;
  readonly nFft: number;
  readonly winLength: number;
  readonly hop: number;
  readonly nMels: number;
  readonly bins: number;
  readonly #pre: number;
  readonly #fft: RealFFT;
  readonly #window: Float64Array; // [nFft], zero outside the centred Hann
  readonly #fb: Float64Array; // [nMels][bins]
  readonly #fbRange: Int32Array; // [nMels][first, end) non-zero bins
  readonly #ring: Float64Array; // pre-emphasised samples, by absolute index & mask
  readonly #mask: number;
  readonly #frame: Float64Array;
  readonly #spectrum: Float64Array;
  readonly #power: Float64Array;
  #received = 0; // samples pushed
  #last = 0; // last raw sample, for pre-emphasis
  #rows = 0; // rows emitted
  #base = 0; // row written at out[0] in the current call
  #finished = false;

  constructor(o: MelOptions = {}, ws: Workspace = heapWorkspace) {
    this.sampleRate = o.sampleRate ?? 16000;
    this.nFft = o.nFft ?? 512;
    this.winLength = o.winLength ?? 400;
    this.hop = o.hop ?? 160;
    this.nMels = o.nMels ?? 128;
    this.#pre = o.preemphasis ?? 0.97;
    const fmin = o.fmin ?? 0;
    const fmax = o.fmax ?? this.sampleRate / 2;
    if (!(this.winLength <= this.nFft && this.hop > 0 && this.nFft % 2 === 0 && fmax > fmin)) {
      throw new ArgumentError(`mel options are inconsistent: ${JSON.stringify(o)}`);
    }
    this.bins = this.nFft / 2 + 1;
    this.#fft = new RealFFT(this.nFft, ws);
    this.#window = ws('mel.window', Float64Array, this.nFft);
    const off = Math.floor((this.nFft - this.winLength) / 2);
    for (let i = 0; i < this.winLength; i++) this.#window[off + i] = 0.5 - 0.5 * Math.cos((2 * Math.PI * i) / (this.winLength - 1));
    this.#fb = ws('mel.filterbank', Float64Array, this.nMels * this.bins);
    melFilterbank(this.sampleRate, this.nFft, this.nMels, fmin, fmax, this.#fb);
    this.#fbRange = ws('mel.filter_ranges', Int32Array, 2 * this.nMels);
    for (let m = 0; m < this.nMels; m++) {
      let a = 0;
      while (a < this.bins && this.#fb[m * this.bins + a] === 0) a++;
      let b = this.bins;
      while (b > a && this.#fb[m * this.bins + b - 1] === 0) b--;
      this.#fbRange[2 * m] = a;
      this.#fbRange[2 * m + 1] = b;
    }
    let ring = 1;
    while (ring < 2 * this.nFft) ring *= 2;
    this.#ring = ws('mel.history', Float64Array, ring);
    this.#mask = ring - 1;
    this.#frame = ws('mel.frame', Float64Array, this.nFft);
    this.#spectrum = ws('mel.spectrum', Float64Array, 2 * this.bins);
    this.#power = ws('mel.power', Float64Array, this.bins);
  }

  /** Rows a segment of `samples` samples yields: 1 + L // hop. */
  rowsFor(samples: number): number {
    return 1 + Math.floor(samples / this.hop);
  }

  /** Rows emitted so far in this segment. */
  get rows(): number {
    return this.#rows;
  }

  get samples(): number {
    return this.#received;
  }

  /** Starts a new segment. */
  reset(): void {
    this.#received = 0;
    this.#last = 0;
    this.#rows = 0;
    this.#finished = false;
  }

  /**
   * Feeds the first `count` samples of `pcm`; writes every row that is now complete into
   * `out` (row-major, nMels wide), row t at row t − `rowBase`, up to row `maxRows` (default:
   * what `out` holds). Returns rows written. Rows past the cap are not computed (the caller
   * closes the segment at its maximum length). A streaming caller passes `rowBase` = `rows`
   * and an `out` with room for the rows `count` samples can complete (count / hop + 3).
   */
  push(pcm: ArrayLike<number>, out: Float32Array, count = pcm.length, rowBase = 0, maxRows = rowBase + Math.floor(out.length / this.nMels)): number {
    if (this.#finished) return 0;
    const cap = maxRows;
    this.#base = rowBase;
    const before = this.#rows;
    const half = this.nFft / 2;
    // Frame t needs pre-emphasised samples up to t·hop − half + (last non-zero window tap).
    const reach = half - Math.floor((this.nFft - this.winLength) / 2);
    const n = Math.min(count, pcm.length);
    for (let i = 0; i < n; i++) {
      const x = pcm[i] as number;
      const y = this.#received === 0 ? x : x - this.#pre * this.#last;
      this.#last = x;
      this.#ring[this.#received & this.#mask] = y;
      this.#received += 1;
      while (this.#rows < cap && this.#rows * this.hop + reach <= this.#received) {
        this.#row(this.#rows, this.#received, out);
        this.#rows += 1;
      }
    }
    return this.#rows - before;
  }

  /** Ends the segment: the remaining rows, with zeros past its end. Returns rows written. */
  finish(out: Float32Array, rowBase = 0, maxRows = rowBase + Math.floor(out.length / this.nMels)): number {
    if (this.#finished) return 0;
    this.#finished = true;
    const cap = maxRows;
    this.#base = rowBase;
    const total = Math.min(cap, this.rowsFor(this.#received));
    const before = this.#rows;
    while (this.#rows < total) {
      this.#row(this.#rows, this.#received, out);
      this.#rows += 1;
    }
    return this.#rows - before;
  }

  #row(t: number, known: number, out: Float32Array): void {
    const n = this.nFft;
    const start = t * this.hop - n / 2;
    const w = this.#window;
    const f = this.#frame;
    for (let k = 0; k < n; k++) {
      const idx = start + k;
      const wk = w[k] as number;
      f[k] = wk === 0 || idx < 0 || idx >= known ? 0 : wk * (this.#ring[idx & this.#mask] as number);
    }
    this.#fft.forward(f, this.#spectrum);
    const s = this.#spectrum;
    const p = this.#power;
    for (let k = 0; k < this.bins; k++) {
      const re = s[2 * k] as number;
      const im = s[2 * k + 1] as number;
      p[k] = re * re + im * im;
    }
    const o = (t - this.#base) * this.nMels;
    for (let m = 0; m < this.nMels; m++) {
      const a = this.#fbRange[2 * m] as number;
      const b = this.#fbRange[2 * m + 1] as number;
      const base = m * this.bins;
      let acc = 0;
      for (let k = a; k < b; k++) acc += (this.#fb[base + k] as number) * (p[k] as number);
      out[o + m] = Math.log(acc + LOG_GUARD);
    }
  }
}

/**
 * NeMo's per-feature normalisation of one segment, in place: over the `valid` = L // hop
 * frames, x ← (x − mean) / (std + 1e-5) with the unbiased std; rows ≥ valid are set to 0.
 * With fewer than two valid frames the std is taken as 0. `stats` holds 2 × nMels f64.
 */
export function normaliseRows(rows: Float32Array, nRows: number, nMels: number, valid: number, stats: Float64Array): void {
  const v = Math.min(valid, nRows);
  for (let m = 0; m < nMels; m++) {
    let sum = 0;
    for (let t = 0; t < v; t++) sum += rows[t * nMels + m] as number;
    const mean = v > 0 ? sum / v : 0;
    let sq = 0;
    for (let t = 0; t < v; t++) {
      const d = (rows[t * nMels + m] as number) - mean;
      sq += d * d;
    }
    stats[m] = mean;
    stats[nMels + m] = (v > 1 ? Math.sqrt(sq / (v - 1)) : 0) + NORM_EPS;
  }
  for (let t = 0; t < nRows; t++) {
    for (let m = 0; m < nMels; m++) {
      rows[t * nMels + m] = t < v ? ((rows[t * nMels + m] as number) - (stats[m] as number)) / (stats[nMels + m] as number) : 0;
    }
  }
}
