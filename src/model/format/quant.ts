/**
 * Affine group quantization: each group of `group` consecutive inputs of a weight row is stored
 * as unsigned integers q with one f16 scale s and bias b, w ≈ s·q + b (b is the group's
 * minimum, s its range over 2^bits − 1, both rounded to f16 before q is chosen, so q fits the
 * stored values). int4 packs two values per byte, low nibble first: at group 64 that is 4.5
 * bits per weight, q8 8.5.
 * The matrix–vector product computes Σ_g s_g·Σ q_i x_i + b_g·Σ x_i; the Σ x_i of the bias term
 * is accumulated in f32 from f32 operands (summing narrow operands first loses precision).
 */
import { ArgumentError } from '../../errors.js';
import { bf16ToF32, f16ToF32, f32ToF16 } from './dtype.js';

export type Bits = 4 | 8;

export interface Quantized {
  bits: Bits;
  group: number;
  rows: number;
  cols: number;
  /** q8: rows × cols bytes; q4: rows × cols / 2 bytes. */
  data: Uint8Array;
  /** f16 bits [rows][cols / group]. */
  scales: Uint16Array;
  /** f16 bits [rows][cols / group]. */
  biases: Uint16Array;
}

export function checkQuantShape(rows: number, cols: number, bits: number, group: number, what = 'matrix'): void {
  if (bits !== 4 && bits !== 8) throw new ArgumentError(`${what}: bits must be 4 or 8, got ${bits}`);
  if (group !== 32 && group !== 64) throw new ArgumentError(`${what}: group must be 32 or 64, got ${group}`);
  if (!Number.isSafeInteger(rows) || !Number.isSafeInteger(cols) || rows < 1 || cols < 1 || cols % group !== 0) {
    throw new ArgumentError(`${what}: [${rows}, ${cols}] cannot be split into groups of ${group} inputs`);
  }
}

/** Quantizes w [rows][cols] (row-major f32) into `out` (buffers sized by quantizedSizes). */
export function quantizeInto(w: ArrayLike<number>, rows: number, cols: number, bits: Bits, group: number, out: Quantized): Quantized {
  checkQuantShape(rows, cols, bits, group);
  const levels = bits === 8 ? 255 : 15;
  const groups = cols / group;
  out.data.fill(0);
  for (let r = 0; r < rows; r++) {
    for (let g = 0; g < groups; g++) {
      let lo = Number.POSITIVE_INFINITY;
      let hi = Number.NEGATIVE_INFINITY;
      const base = r * cols + g * group;
      for (let i = 0; i < group; i++) {
        const v = w[base + i] as number;
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
      const b16 = f32ToF16(lo);
      const bias = f16ToF32(b16);
      const s16 = f32ToF16(hi > bias ? (hi - bias) / levels : 0);
      const scale = f16ToF32(s16);
      if (!Number.isFinite(bias) || !Number.isFinite(scale)) {
        throw new ArgumentError(`row ${r}, group ${g}: values from ${lo} to ${hi} are outside the f16 range of the scales and biases`);
      }
      out.scales[r * groups + g] = s16;
      out.biases[r * groups + g] = b16;
      for (let i = 0; i < group; i++) {
        const q = scale > 0 ? Math.max(0, Math.min(levels, Math.round(((w[base + i] as number) - bias) / scale))) : 0;
        const k = base + i;
        if (bits === 8) out.data[k] = q;
        else out.data[k >> 1] = (out.data[k >> 1] as number) | (k & 1 ? q << 4 : q);
      }
    }
  }
  return out;
}

export function quantizedSizes(rows: number, cols: number, bits: Bits, group: number): { data: number; groups: number } {
  return { data: bits === 8 ? rows * cols : (rows * cols) / 2, groups: (rows * cols) / group };
}

/** Quantizes into new buffers (setup, tools and tests). */
export function quantize(w: ArrayLike<number>, rows: number, cols: number, bits: Bits, group: number): Quantized {
  checkQuantShape(rows, cols, bits, group);
  const s = quantizedSizes(rows, cols, bits, group);
  return quantizeInto(w, rows, cols, bits, group, {
    bits,
    group,
    rows,
    cols,
    data: new Uint8Array(s.data),
    scales: new Uint16Array(s.groups),
    biases: new Uint16Array(s.groups),
  });
}

/** Dequantized value of element (r, k). */
export function dequantizedAt(q: Quantized, r: number, k: number): number {
  const groups = q.cols / q.group;
  const i = r * q.cols + k;
  const v = q.bits === 8 ? (q.data[i] as number) : ((q.data[i >> 1] as number) >> (i & 1 ? 4 : 0)) & 15;
  const g = r * groups + Math.floor(k / q.group);
  return f16ToF32(q.scales[g] as number) * v + f16ToF32(q.biases[g] as number);
}

/** Float 2-D tensors whose inputs split into whole groups are quantized; the rest are kept. */
export function isQuantizable(dtype: string, shape: readonly number[], group: number): boolean {
  return (dtype === 'F32' || dtype === 'F16' || dtype === 'BF16') && shape.length === 2 && (shape[0] as number) >= 1 && (shape[1] as number) % group === 0;
}

/** safetensors metadata key carrying {"bits", "group"} of a quantized file. */
export const QUANT_METADATA_KEY = 'voxslab.quantization';

/** A piscina task of `voxslab quantize`: one tensor, its stored bytes and dtype. */
export interface QuantTask {
  bytes: Uint8Array;
  dtype: 'F32' | 'F16' | 'BF16';
  rows: number;
  cols: number;
  bits: Bits;
  group: number;
}

export interface QuantResult {
  data: Uint8Array;
  scales: Uint16Array;
  biases: Uint16Array;
}

/** Quantizes one stored tensor (its raw bytes in their dtype). */
export function quantizeStored(t: QuantTask): QuantResult {
  const n = t.rows * t.cols;
  const v = new DataView(t.bytes.buffer, t.bytes.byteOffset, t.bytes.byteLength);
  const w = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    w[i] = t.dtype === 'F32' ? v.getFloat32(4 * i, true) : t.dtype === 'BF16' ? bf16ToF32(v.getUint16(2 * i, true)) : f16ToF32(v.getUint16(2 * i, true));
  }
  const q = quantize(w, t.rows, t.cols, t.bits, t.group);
  return { data: q.data, scales: q.scales, biases: q.biases };
}
