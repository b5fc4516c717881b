/**
 * Deterministic synthetic weights: each tensor's values come from a PRNG seeded by the
 * checkpoint seed and the tensor's name, so the same seed gives the same bytes whatever the
 * order or chunking of generation. Weights are random (speech out is babble); shapes, names,
 * dtypes and sizes are exactly those of the real layout. Tied tensors equal their targets and
 * `istft.window` is the periodic Hann window, as docs/checkpoints.md says.
 */
import type { Dtype, TensorSpec } from './layout.js';
import { f32ToBf16, f32ToF16 } from './dtype.js';
import { prng } from '../../memory/prng.js';

/** Changes whenever the same seed would give other values: caches of generated checkpoints key on it. */
export const SYNTH_VERSION = 2;

/** FNV-1a of the name mixed with the seed. */
function tensorSeed(seed: number, name: string): number {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < name.length; i++) {
    h ^= name.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/** Streams one tensor's values: `next(out, n)` fills the next n elements (f64 values). */
export class TensorStream {
  readonly spec: TensorSpec;
  readonly #random: () => number;
  #spare = Number.NaN;
  #index = 0;
  readonly #scale: number;

  constructor(spec: TensorSpec, seed: number) {
    this.spec = spec;
    // A tied tensor repeats its target's values (docs/checkpoints.md: to_logits equals the embedding).
    this.#random = prng(tensorSeed(seed, spec.tiedTo ?? spec.name));
    const fanIn = spec.shape.slice(1).reduce((a, b) => a * b, 1);
    this.#scale = spec.init === 'weight' ? 1 / Math.sqrt(Math.max(1, fanIn)) : spec.init === 'embedding' ? 1 / Math.sqrt(Math.max(1, spec.shape[1] ?? 1)) : 1;
  }

  /** Uniform in (0, 1): never 0, so the logarithm below is finite. */
  #uniform(): number {
    return this.#random() + 2 ** -33;
  }

  #normal(): number {
    if (!Number.isNaN(this.#spare)) {
      const s = this.#spare;
      this.#spare = Number.NaN;
      return s;
    }
    const r = Math.sqrt(-2 * Math.log(this.#uniform()));
    const a = 2 * Math.PI * this.#uniform();
    this.#spare = r * Math.sin(a);
    return r * Math.cos(a);
  }

  next(out: Float64Array, n: number): void {
    const s = this.spec;
    for (let i = 0; i < n; i++) {
      const k = this.#index++;
      switch (s.init) {
        case 'weight':
        case 'embedding':
          out[i] = this.#normal() * this.#scale;
          break;
        case 'norm':
          out[i] = 1 + 0.02 * this.#normal();
          break;
        case 'bias':
          out[i] = 0.02 * this.#normal();
          break;
        case 'variance':
          out[i] = 1 + 0.2 * Math.abs(this.#normal());
          break;
        case 'window': // torch.hann_window(N), periodic
          out[i] = 0.5 - 0.5 * Math.cos((2 * Math.PI * k) / (s.shape[0] as number));
          break;
        default: // index: codebook offsets i·2049, counters 0
          out[i] = s.name === 'codebook_offsets' ? k * 2049 : 0;
      }
    }
  }
}

/** Encodes n f64 values as `dtype` into bytes (little-endian). */
export function encodeValues(values: Float64Array, n: number, dtype: Dtype, out: Uint8Array): number {
  const v = new DataView(out.buffer, out.byteOffset, out.byteLength);
  switch (dtype) {
    case 'F32':
      for (let i = 0; i < n; i++) v.setFloat32(4 * i, values[i] as number, true);
      return 4 * n;
    case 'BF16':
      for (let i = 0; i < n; i++) v.setUint16(2 * i, f32ToBf16(values[i] as number), true);
      return 2 * n;
    case 'F16':
      for (let i = 0; i < n; i++) v.setUint16(2 * i, f32ToF16(values[i] as number), true);
      return 2 * n;
    case 'I64':
      for (let i = 0; i < n; i++) v.setBigInt64(8 * i, BigInt(Math.round(values[i] as number)), true);
      return 8 * n;
    case 'I32':
      for (let i = 0; i < n; i++) v.setInt32(4 * i, Math.round(values[i] as number), true);
      return 4 * n;
    default:
      for (let i = 0; i < n; i++) v.setUint8(i, Math.round(values[i] as number) & 0xff);
      return n;
  }
}
