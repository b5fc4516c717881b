/**
 * Float64 building blocks of the model references, written from docs/model.md for the
 * tests and independent of the runtime's code: every reference in test/reference/ and the
 * block tests compute through these, so each operation is written once.
 */
import type { WeightsImage } from '../../src/model/format/image.js';

type Vec = ArrayLike<number>;

/** A tensor of the weights image, widened to float64 (any stored encoding). */
export function weights64(image: WeightsImage): (name: string) => Float64Array {
  return (name) => Float64Array.from(image.toF32(name, new Float32Array(image.get(name).shape.reduce((a, c) => a * c, 1))));
}

/** y[r][o] = b[o] + Σ_k x[r][k]·w[o][k]: a linear layer over `rows` rows (w [outD][inD]). */
export function linear64(x: Vec, rows: number, inD: number, w: Vec, b: Vec | null, outD: number): Float64Array {
  const y = new Float64Array(rows * outD);
  for (let r = 0; r < rows; r++)
    for (let o = 0; o < outD; o++) {
      let s = b ? b[o]! : 0;
      for (let k = 0; k < inD; k++) s += x[r * inD + k]! * w[o * inD + k]!;
      y[r * outD + o] = s;
    }
  return y;
}

/** RMSNorm of each row of `dim` values, scaled by w. */
export function rmsNorm64(x: Vec, rows: number, dim: number, w: Vec, eps = 1e-5): Float64Array {
  const y = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    let s = 0;
    for (let i = 0; i < dim; i++) s += x[r * dim + i]! ** 2;
    const inv = 1 / Math.sqrt(s / dim + eps);
    for (let i = 0; i < dim; i++) y[r * dim + i] = x[r * dim + i]! * inv * w[i]!;
  }
  return y;
}

/** LayerNorm of each row of `dim` values (biased variance), then w and b. */
export function layerNorm64(x: Vec, rows: number, dim: number, w: Vec, b: Vec, eps = 1e-5): Float64Array {
  const y = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    let m = 0;
    for (let i = 0; i < dim; i++) m += x[r * dim + i]!;
    m /= dim;
    let q = 0;
    for (let i = 0; i < dim; i++) q += (x[r * dim + i]! - m) ** 2;
    const inv = 1 / Math.sqrt(q / dim + eps);
    for (let i = 0; i < dim; i++) y[r * dim + i] = (x[r * dim + i]! - m) * inv * w[i]! + b[i]!;
  }
  return y;
}

export const silu64 = (v: number): number => v / (1 + Math.exp(-v));

/** silu(gate)·up, elementwise. */
export function swiglu64(gate: Vec, up: Vec): Float64Array {
  return Float64Array.from({ length: gate.length }, (_, i) => silu64(gate[i]!) * up[i]!);
}

/** Softmax weights of scores (−∞ entries get weight 0). */
export function softmax64(scores: readonly number[]): Float64Array {
  const m = Math.max(...scores);
  const ex = Float64Array.from(scores, (s) => (s === Number.NEGATIVE_INFINITY ? 0 : Math.exp(s - m)));
  const z = ex.reduce((a, c) => a + c, 0);
  return ex.map((e) => e / z);
}
