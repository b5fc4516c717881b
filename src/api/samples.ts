/** Sample blocks at the library's edge: refused when not finite, converted to 16-bit. */
import { BadInputError } from '../errors.js';
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
