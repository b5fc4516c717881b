/** Sample blocks at the library's edge: refused when not finite, converted from and to 16-bit. */
import { ArgumentError, BadInputError } from '../errors.js';
import { native, WEIGHT_TYPE } from '../native.js';

/**
 * Refuses a block of samples holding NaN or ±Infinity before any of it is queued: a stage would
 * take them for silence, and the turn's reply would be lost without a word.
 */
export function checkFinite(f: Float32Array, field: string): void {
  const bad = native.firstNonFinite(new Uint8Array(f.buffer, f.byteOffset, f.byteLength), WEIGHT_TYPE.f32);
  if (bad >= 0)
    throw new BadInputError({ field, offset: bad }, `sample ${bad} of the block is ${f[bad]}; samples must be finite (nothing of this block was queued)`);
}

export function toS16(x: Float32Array, n: number): Int16Array {
  const out = new Int16Array(n);
  for (let i = 0; i < n; i++) {
    const v = Math.round((x[i] as number) * 32768);
    out[i] = Math.min(32767, Math.max(-32768, v));
  }
  return out;
}

/** A copy of `samples` as floats: a Float32Array checked finite, or 16-bit integers scaled. */
export function fromSamples(samples: Float32Array | Int16Array): Float32Array {
  if (samples instanceof Float32Array) {
    checkFinite(samples, 'samples');
    return samples.slice();
  }
  if (!(samples instanceof Int16Array)) throw new ArgumentError('write takes a Float32Array or an Int16Array of samples');
  const f = new Float32Array(samples.length);
  for (let i = 0; i < samples.length; i++) f[i] = (samples[i] as number) / 32768;
  return f;
}

/** Little-endian bytes of whole samples in `format`, decoded straight into one float block. */
export function fromBytes(bytes: Uint8Array, format: 'f32' | 's16'): Float32Array {
  const per = format === 'f32' ? 4 : 2;
  if (bytes.length % per !== 0) throw new ArgumentError(`${bytes.length} bytes is not whole ${format} samples`);
  const n = bytes.length / per;
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const f = new Float32Array(n);
  if (per === 4) {
    for (let i = 0; i < n; i++) f[i] = v.getFloat32(4 * i, true);
    checkFinite(f, 'samples');
  } else for (let i = 0; i < n; i++) f[i] = v.getInt16(2 * i, true) / 32768;
  return f;
}
