/**
 * Mixed-radix complex FFT (radix 4, radix 2 and a generic butterfly), decimation in time, out
 * of place, on interleaved (re, im) Float64Arrays. Any length; the runtime uses 512 (frontend)
 * and 1280 = 2^8·5 (detokenizer ISTFT). The plan and twiddles are made once, here; the
 * transform runs in the native addon over those buffers (allocating nothing). `forwardTs` /
 * `inverseTs` run the same algorithm in TypeScript: the reference the native kernel is tested
 * against. f64 throughout so streamed and batch frames agree to the bit.
 *
 * Written here rather than taken from fft.js, which handles powers of two only.
 */
import { ArgumentError } from '../errors.js';
import { heapWorkspace, type Workspace } from './workspace.js';
import { native } from '../native.js';

function factorize(n: number): number[] {
  const out: number[] = [];
  let p = 4;
  let rest = n;
  const limit = Math.floor(Math.sqrt(n));
  do {
    while (rest % p !== 0) {
      p = p === 4 ? 2 : p === 2 ? 3 : p + 2;
      if (p > limit) p = rest;
    }
    rest /= p;
    out.push(p, rest);
  } while (rest > 1);
  return out;
}

export class ComplexFFT {
  readonly n: number;
  readonly #factors: Int32Array; // [p0, m0, p1, m1, ...]
  readonly #twf: Float64Array; // exp(-2πik/n), interleaved
  readonly #twi: Float64Array; // exp(+2πik/n)
  readonly #scratch: Float64Array; // generic butterfly, 2 × largest radix

  /** @internal The plan buffers, for RealFFT's native call. */
  get plan(): { factors: Int32Array; forward: Float64Array; inverse: Float64Array; scratch: Float64Array } {
    return { factors: this.#factors, forward: this.#twf, inverse: this.#twi, scratch: this.#scratch };
  }
  #tw: Float64Array;
  #inverse = false;

  constructor(n: number, ws: Workspace = heapWorkspace) {
    if (!Number.isSafeInteger(n) || n < 1 || n > 1 << 24) throw new ArgumentError(`FFT size must be an integer from 1 to 2^24, got ${n}`);
    this.n = n;
    const f = factorize(n);
    this.#factors = ws('fft.factors', Int32Array, f.length);
    this.#factors.set(f);
    this.#twf = ws('fft.twiddles', Float64Array, 2 * n);
    this.#twi = ws('fft.twiddles_inverse', Float64Array, 2 * n);
    for (let k = 0; k < n; k++) {
      const a = (-2 * Math.PI * k) / n;
      this.#twf[2 * k] = Math.cos(a);
      this.#twf[2 * k + 1] = Math.sin(a);
      this.#twi[2 * k] = Math.cos(a);
      this.#twi[2 * k + 1] = -Math.sin(a);
    }
    let maxP = 2;
    for (let i = 0; i < f.length; i += 2) maxP = Math.max(maxP, f[i] as number);
    this.#scratch = ws('fft.scratch', Float64Array, 2 * maxP);
    this.#tw = this.#twf;
  }

  /** X = Σ x[j]·e^{-2πijk/n}. `input` and `output` must not overlap. */
  forward(input: Float64Array, output: Float64Array): void {
    native.fft(this.#factors, this.#twf, this.#scratch, input, output, this.n, false);
  }

  /** x = Σ X[k]·e^{+2πijk/n}, unscaled (divide by n for the inverse). */
  inverse(input: Float64Array, output: Float64Array): void {
    native.fft(this.#factors, this.#twi, this.#scratch, input, output, this.n, true);
  }

  /** TypeScript reference of `forward`. */
  forwardTs(input: Float64Array, output: Float64Array): void {
    this.#tw = this.#twf;
    this.#inverse = false;
    this.#work(output, 0, input, 0, 1, 0);
  }

  /** TypeScript reference of `inverse`. */
  inverseTs(input: Float64Array, output: Float64Array): void {
    this.#tw = this.#twi;
    this.#inverse = true;
    this.#work(output, 0, input, 0, 1, 0);
  }

  #work(out: Float64Array, o: number, inp: Float64Array, i: number, fstride: number, fi: number): void {
    const p = this.#factors[fi] as number;
    const m = this.#factors[fi + 1] as number;
    if (m === 1) {
      for (let q = 0; q < p; q++) {
        out[2 * (o + q)] = inp[2 * i] as number;
        out[2 * (o + q) + 1] = inp[2 * i + 1] as number;
        i += fstride;
      }
    } else {
      for (let q = 0; q < p; q++) {
        this.#work(out, o + q * m, inp, i, fstride * p, fi + 2);
        i += fstride;
      }
    }
    if (p === 2) this.#bfly2(out, o, fstride, m);
    else if (p === 4) this.#bfly4(out, o, fstride, m);
    else this.#bflyGeneric(out, o, fstride, m, p);
  }

  #bfly2(f: Float64Array, o: number, fstride: number, m: number): void {
    const tw = this.#tw;
    for (let k = 0; k < m; k++) {
      const a = 2 * (o + k);
      const b = 2 * (o + k + m);
      const wr = tw[2 * k * fstride] as number;
      const wi = tw[2 * k * fstride + 1] as number;
      const br = f[b] as number;
      const bi = f[b + 1] as number;
      const tr = br * wr - bi * wi;
      const ti = br * wi + bi * wr;
      const ar = f[a] as number;
      const ai = f[a + 1] as number;
      f[b] = ar - tr;
      f[b + 1] = ai - ti;
      f[a] = ar + tr;
      f[a + 1] = ai + ti;
    }
  }

  #bfly4(f: Float64Array, o: number, fstride: number, m: number): void {
    const tw = this.#tw;
    const inv = this.#inverse;
    for (let k = 0; k < m; k++) {
      const i0 = 2 * (o + k);
      const i1 = 2 * (o + k + m);
      const i2 = 2 * (o + k + 2 * m);
      const i3 = 2 * (o + k + 3 * m);
      const w1r = tw[2 * k * fstride] as number;
      const w1i = tw[2 * k * fstride + 1] as number;
      const w2r = tw[4 * k * fstride] as number;
      const w2i = tw[4 * k * fstride + 1] as number;
      const w3r = tw[6 * k * fstride] as number;
      const w3i = tw[6 * k * fstride + 1] as number;
      const s0r = (f[i1] as number) * w1r - (f[i1 + 1] as number) * w1i;
      const s0i = (f[i1] as number) * w1i + (f[i1 + 1] as number) * w1r;
      const s1r = (f[i2] as number) * w2r - (f[i2 + 1] as number) * w2i;
      const s1i = (f[i2] as number) * w2i + (f[i2 + 1] as number) * w2r;
      const s2r = (f[i3] as number) * w3r - (f[i3 + 1] as number) * w3i;
      const s2i = (f[i3] as number) * w3i + (f[i3 + 1] as number) * w3r;
      const ar = f[i0] as number;
      const ai = f[i0 + 1] as number;
      const s5r = ar - s1r;
      const s5i = ai - s1i;
      const pr = ar + s1r;
      const pi = ai + s1i;
      const s3r = s0r + s2r;
      const s3i = s0i + s2i;
      const s4r = s0r - s2r;
      const s4i = s0i - s2i;
      f[i2] = pr - s3r;
      f[i2 + 1] = pi - s3i;
      f[i0] = pr + s3r;
      f[i0 + 1] = pi + s3i;
      if (inv) {
        f[i1] = s5r - s4i;
        f[i1 + 1] = s5i + s4r;
        f[i3] = s5r + s4i;
        f[i3 + 1] = s5i - s4r;
      } else {
        f[i1] = s5r + s4i;
        f[i1 + 1] = s5i - s4r;
        f[i3] = s5r - s4i;
        f[i3 + 1] = s5i + s4r;
      }
    }
  }

  #bflyGeneric(f: Float64Array, o: number, fstride: number, m: number, p: number): void {
    const tw = this.#tw;
    const s = this.#scratch;
    const n = this.n;
    for (let u = 0; u < m; u++) {
      for (let q = 0, k = u; q < p; q++, k += m) {
        s[2 * q] = f[2 * (o + k)] as number;
        s[2 * q + 1] = f[2 * (o + k) + 1] as number;
      }
      for (let q1 = 0, k = u; q1 < p; q1++, k += m) {
        let twidx = 0;
        let re = s[0] as number;
        let im = s[1] as number;
        for (let q = 1; q < p; q++) {
          twidx += fstride * k;
          if (twidx >= n) twidx -= n;
          const wr = tw[2 * twidx] as number;
          const wi = tw[2 * twidx + 1] as number;
          const xr = s[2 * q] as number;
          const xi = s[2 * q + 1] as number;
          re += xr * wr - xi * wi;
          im += xr * wi + xi * wr;
        }
        f[2 * (o + k)] = re;
        f[2 * (o + k) + 1] = im;
      }
    }
  }
}

/**
 * Real-input transform of even length n through a complex transform of n/2 (even samples as
 * real parts, odd as imaginary, then the standard split), in one native call each way:
 * forward gives the n/2 + 1 non-negative-frequency bins; inverse takes them (imaginary parts of
 * DC and Nyquist ignored, the rest taken as Hermitian) and returns n real samples scaled by 1/n.
 */
export class RealFFT {
  readonly n: number;
  readonly bins: number;
  readonly #half: ComplexFFT;
  readonly #plan: { factors: Int32Array; forward: Float64Array; inverse: Float64Array; scratch: Float64Array };
  readonly #split: Float64Array; // exp(-2πik/n), k = 0…n/2
  readonly #work: Float64Array;

  constructor(n: number, ws: Workspace = heapWorkspace) {
    if (!Number.isSafeInteger(n) || n < 2 || n % 2 !== 0) throw new ArgumentError(`real FFT size must be an even integer ≥ 2, got ${n}`);
    this.n = n;
    this.bins = n / 2 + 1;
    this.#half = new ComplexFFT(n / 2, ws);
    this.#plan = this.#half.plan;
    this.#split = ws('rfft.split', Float64Array, 2 * this.bins);
    for (let k = 0; k < this.bins; k++) {
      this.#split[2 * k] = Math.cos((-2 * Math.PI * k) / n);
      this.#split[2 * k + 1] = Math.sin((-2 * Math.PI * k) / n);
    }
    this.#work = ws('rfft.work', Float64Array, 2 * n);
  }

  /** `x` holds n samples; `spectrum` receives bins × (re, im). */
  forward(x: Float64Array, spectrum: Float64Array): void {
    const p = this.#plan;
    native.rfft(p.factors, p.forward, p.scratch, this.#split, this.#work, x, spectrum, this.n, false);
  }

  /** `spectrum` holds bins × (re, im); `x` receives n samples. */
  inverse(spectrum: Float64Array, x: Float64Array): void {
    const p = this.#plan;
    native.rfft(p.factors, p.inverse, p.scratch, this.#split, this.#work, spectrum, x, this.n, true);
  }
}
