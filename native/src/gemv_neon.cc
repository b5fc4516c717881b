// The AArch64 GEMV: float rows and activation quantization on Advanced SIMD, and the integer rows
// (q8/q4 × int8 activations, one or several activation rows per pass over the weights) at three
// levels that differ only in how a block's integer lanes are formed: widening multiplies (NEON),
// SDOT (dotprod), USDOT for q8 (i8mm). The lanes hold exact integers, so every level gives the
// same bits, and they are the AVX2 integer GEMV's: eight lanes per 32-byte weight block (two
// registers here), each the sum of four consecutive products, scaled and accumulated per lane
// in block order, then added as Hsum adds them, with the bias sums of BiasDot.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu.h"
#include "gemv_isa.h"

#ifdef VOXSLAB_ARM
namespace voxslab::gemv {

// SplitEvensOdds: each 64-byte block deinterleaved by two structure loads.
void SplitEvensOddsNeon(int8_t* xq, int64_t K) {
  for (int64_t b = 0; b + 64 <= K; b += 64) {
    const int8x16x2_t lo = vld2q_s8(xq + b);
    const int8x16x2_t hi = vld2q_s8(xq + b + 32);
    vst1q_s8(xq + b, lo.val[0]);
    vst1q_s8(xq + b + 16, hi.val[0]);
    vst1q_s8(xq + b + 32, lo.val[1]);
    vst1q_s8(xq + b + 48, hi.val[1]);
  }
}

namespace {

// Rows r[0..3] (4 floats each) as columns: out[c] lane j is r[j][c].
inline void Transpose4(float32x4_t (&r)[4]) {
  const float32x4x2_t a = vtrnq_f32(r[0], r[1]);
  const float32x4x2_t b = vtrnq_f32(r[2], r[3]);
  r[0] = vcombine_f32(vget_low_f32(a.val[0]), vget_low_f32(b.val[0]));
  r[1] = vcombine_f32(vget_low_f32(a.val[1]), vget_low_f32(b.val[1]));
  r[2] = vcombine_f32(vget_high_f32(a.val[0]), vget_high_f32(b.val[0]));
  r[3] = vcombine_f32(vget_high_f32(a.val[1]), vget_high_f32(b.val[1]));
}

// std::min(hi, v) then std::max(lo, ·) as the scalar path writes them: a NaN gives hi.
inline float32x4_t Clamp127(float32x4_t v) {
  const float32x4_t hi = vdupq_n_f32(127.0f), lo = vdupq_n_f32(-127.0f);
  const float32x4_t m = vbslq_f32(vcltq_f32(v, hi), v, hi);
  return vbslq_f32(vcltq_f32(lo, m), m, lo);
}

}  // namespace

// QuantizeScalar's bits: four groups' sums at once (one per lane, 4×4 blocks transposed, each
// lane adding its group's values in order), the maximum magnitude ignoring NaN as std::max does,
// then x·(1/d) rounded to nearest even and clamped as the scalar loop clamps.
void QuantizeNeon(const float* x, int64_t K, int group, int8_t* xq, float* xs, float* xsum) {
  const int64_t groups = K / group;
  for (int64_t g0 = 0; g0 < groups; g0 += 4) {
    const int live = static_cast<int>(std::min<int64_t>(4, groups - g0));
    float32x4_t sum = vdupq_n_f32(0.0f);
    const float* base = x + g0 * group;
    for (int i = 0; i < group; i += 4) {
      float32x4_t v[4];
      for (int r = 0; r < 4; ++r) v[r] = r < live ? vld1q_f32(base + r * group + i) : vdupq_n_f32(0.0f);
      Transpose4(v);
      for (int j = 0; j < 4; ++j) sum = vaddq_f32(sum, v[j]);
    }
    float s[4];
    vst1q_f32(s, sum);
    for (int r = 0; r < live; ++r) xsum[g0 + r] = s[r];
  }
  for (int64_t g = 0; g < groups; ++g) {
    const float* xg = x + g * group;
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int i = 0; i < group; i += 4) m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(xg + i)));
    const float d = vmaxnmvq_f32(m) / 127.0f;
    xs[g] = d;
    const float32x4_t inv = vdupq_n_f32(d > 0 ? 1.0f / d : 0.0f);
    for (int i = 0; i < group; i += 16) {
      int16x8_t h[2];
      for (int j = 0; j < 2; ++j) {
        const int32x4_t a = vcvtq_s32_f32(Clamp127(vrndnq_f32(vmulq_f32(vld1q_f32(xg + i + 8 * j), inv))));
        const int32x4_t b = vcvtq_s32_f32(Clamp127(vrndnq_f32(vmulq_f32(vld1q_f32(xg + i + 8 * j + 4), inv))));
        h[j] = vcombine_s16(vmovn_s32(a), vmovn_s32(b));
      }
      vst1q_s8(xq + g * group + i, vcombine_s8(vmovn_s16(h[0]), vmovn_s16(h[1])));
    }
  }
}

namespace {

// Eight quantized weights from element `at` (q8 bytes, or q4 nibbles low first), as f32.
inline void QuantInts8(bool q8, const uint8_t* w, int64_t at, float32x4_t& lo, float32x4_t& hi) {
  uint16x8_t v;
  if (q8) {
    v = vmovl_u8(vld1_u8(w + at));
  } else {
    uint32_t packed;
    std::memcpy(&packed, w + (at >> 1), 4);
    const uint8x8_t b = vreinterpret_u8_u32(vdup_n_u32(packed));
    v = vmovl_u8(vzip1_u8(vand_u8(b, vdup_n_u8(15)), vshr_n_u8(b, 4)));  // b0.lo, b0.hi, b1.lo, …
  }
  lo = vcvtq_f32_u32(vmovl_u16(vget_low_u16(v)));
  hi = vcvtq_f32_u32(vmovl_u16(vget_high_u16(v)));
}

// Four weights of a float encoding from element k, as f32.
inline float32x4_t FloatInts4(WeightType type, const void* w, int64_t k) {
  if (type == WeightType::kF32) return vld1q_f32(static_cast<const float*>(w) + k);
  const uint16_t* h = static_cast<const uint16_t*>(w) + k;
  if (type == WeightType::kF16) return Half4(h);
  return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(h), 16));
}

}  // namespace

// Each row: four lanes in two chains per eight inputs, then a scalar tail (float encodings); per
// group Σ q·x in lanes, scaled per group, the bias term from the group sums (quantized).
void GemvNeon(WeightType type, const void* w, const uint16_t* scales, const uint16_t* biases, int group, const float* x, float* y,
              int64_t M, int64_t K, float* xsum) {
  if (Quantized(type)) {
    GroupSums(x, K, group, xsum);
    const bool q8 = type == WeightType::kQ8;
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    const int64_t groups = K / group;
    for (int64_t m = 0; m < M; ++m) {
      float32x4_t acc = vdupq_n_f32(0.0f);
      float tail = 0;
      for (int64_t g = 0; g < groups; ++g) {
        float32x4_t q0 = vdupq_n_f32(0.0f), q1 = q0;
        const float* xg = x + g * group;
        int i = 0;
        for (; i + 8 <= group; i += 8) {
          float32x4_t a, b;
          QuantInts8(q8, wb, m * K + g * group + i, a, b);
          q0 = vfmaq_f32(q0, a, vld1q_f32(xg + i));
          q1 = vfmaq_f32(q1, b, vld1q_f32(xg + i + 4));
        }
        float rest = 0;
        for (; i < group; ++i) {
          const int64_t at = m * K + g * group + i;
          rest += static_cast<float>(q8 ? wb[at] : (wb[at >> 1] >> ((at & 1) * 4)) & 15) * xg[i];
        }
        const float s = Half(scales[m * groups + g]);
        acc = vfmaq_f32(acc, vdupq_n_f32(s), vaddq_f32(q0, q1));
        tail += s * rest + Half(biases[m * groups + g]) * xsum[g];
      }
      y[m] = HsumNeon(acc) + tail;
    }
    return;
  }
  for (int64_t m = 0; m < M; ++m) {
    const int64_t at = m * K;
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0;
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
      a0 = vfmaq_f32(a0, FloatInts4(type, w, at + k), vld1q_f32(x + k));
      a1 = vfmaq_f32(a1, FloatInts4(type, w, at + k + 4), vld1q_f32(x + k + 4));
    }
    float tail = 0;
    for (; k < K; ++k) tail += FloatAt(type, w, at + k) * x[k];
    y[m] = HsumNeon(vaddq_f32(a0, a1)) + tail;
  }
}

// Σ_g b_g·xsum_g of one row with BiasDot's bits: eight lanes, then a tail in order.
inline float BiasDotNeon(const uint16_t* bi, const float* xsum, int64_t groups) {
  float32x4_t lo = vdupq_n_f32(0.0f), hi = lo;
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8) {
    lo = vfmaq_f32(lo, Half4(bi + g), vld1q_f32(xsum + g));
    hi = vfmaq_f32(hi, Half4(bi + g + 4), vld1q_f32(xsum + g + 4));
  }
  float t = 0;
  for (; g < groups; ++g) t += Half(bi[g]) * xsum[g];
  return Hsum8(lo, hi) + t;
}

}  // namespace voxslab::gemv

// ---- the integer rows, once per level (each region compiled for its own instructions) ----

#define VOXSLAB_NEON_LEVEL NeonLevel
#define VOXSLAB_NEON_LANES_NEON 1
#include "gemv_neon_int.h"
#undef VOXSLAB_NEON_LANES_NEON
#undef VOXSLAB_NEON_LEVEL

#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
#define VOXSLAB_NEON_LEVEL DotprodLevel
#define VOXSLAB_NEON_LANES_DOTPROD 1
#include "gemv_neon_int.h"
#undef VOXSLAB_NEON_LANES_DOTPROD
#undef VOXSLAB_NEON_LEVEL
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod+i8mm")
#define VOXSLAB_NEON_LEVEL I8mmLevel
#define VOXSLAB_NEON_LANES_I8MM 1
#include "gemv_neon_int.h"
#undef VOXSLAB_NEON_LANES_I8MM
#undef VOXSLAB_NEON_LEVEL
#pragma GCC pop_options

namespace voxslab::gemv {

namespace {

using ManyFn = void (*)(bool, const uint8_t*, const uint16_t*, const uint16_t*, int, const int8_t* const*, const float* const*,
                        const float* const*, float* const*, int, int64_t, int64_t);
using GemmFn = void (*)(bool, int, const uint8_t*, const uint16_t*, const uint16_t*, int64_t, int64_t, int64_t, int64_t, const uint8_t*,
                        int64_t, int64_t, float*);

// The chosen level's kernels, once per process.
struct Level {
  ManyFn many;
  GemmFn gemm;
};

Level ChooseLevel() {
  switch (ChosenIsa()) {
    case Isa::kI8mm: return {I8mmLevel::Many, I8mmLevel::GemmRows};
    case Isa::kDotprod: return {DotprodLevel::Many, DotprodLevel::GemmRows};
    default: return {NeonLevel::Many, NeonLevel::GemmRows};
  }
}

const Level kLevel = ChooseLevel();

}  // namespace

void GemvIntNeonMany(bool q4, const uint8_t* w, const uint16_t* scales, const uint16_t* biases, int group, const int8_t* const* xq,
                     const float* const* xs, const float* const* xsum, float* const* y, int na, int64_t M, int64_t K) {
  kLevel.many(q4, w, scales, biases, group, xq, xs, xsum, y, na, M, K);
}

void GemvIntNeon(bool q4, const uint8_t* w, const uint16_t* scales, const uint16_t* biases, int group, const int8_t* xq,
                 const float* xs, const float* xsum, float* y, int64_t M, int64_t K) {
  kLevel.many(q4, w, scales, biases, group, &xq, &xs, &xsum, &y, 1, M, K);
}

void GemmIntNeonRows(bool q4, int group, const uint8_t* w, const uint16_t* scales, const uint16_t* biases, int64_t K, int64_t M,
                     int64_t m0, int64_t m1, const uint8_t* scratch, int64_t per, int64_t n, float* Y) {
  kLevel.gemm(q4, group, w, scales, biases, K, M, m0, m1, scratch, per, n, Y);
}

}  // namespace voxslab::gemv
#endif
