/** Conversions between f32 and the stored float formats. */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** bfloat16 bits of x, rounded to nearest even (NaN stays NaN). */
export function f32ToBf16(x: number): number {
  f32[0] = x;
  const b = u32[0] as number;
  if ((b & 0x7f800000) === 0x7f800000 && (b & 0x7fffff) !== 0) return (b >>> 16) | 0x40;
  return ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
}

export function bf16ToF32(h: number): number {
  u32[0] = (h & 0xffff) << 16;
  return f32[0] as number;
}

/** IEEE half bits of x, rounded to nearest even, with subnormals and overflow to infinity. */
export function f32ToF16(x: number): number {
  f32[0] = x;
  const b = u32[0] as number;
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  let mant = b & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    const rest = mant & ((1 << shift) - 1);
    let m = mant >>> shift;
    if (rest > half || (rest === half && (m & 1) === 1)) m += 1;
    return sign | m;
  }
  const rest = mant & 0x1fff;
  let m = mant >>> 13;
  if (rest > 0x1000 || (rest === 0x1000 && (m & 1) === 1)) {
    m += 1;
    if (m === 0x400) {
      m = 0;
      e += 1;
      if (e >= 0x1f) return sign | 0x7c00;
    }
  }
  return sign | (e << 10) | m;
}

export function f16ToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant !== 0 ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}
