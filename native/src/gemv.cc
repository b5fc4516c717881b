// GEMV: one weight matrix times one or a few activation rows, for every weight encoding, with
// scalar, AVX2, AVX-512 and AVX-512 VNNI paths (cpu.h chooses) and rows split among the calling
// thread's helpers (pool.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu.h"
#include "kernels.h"
#include "pool.h"
#include "simd.h"

namespace voxslab {

namespace {

// For q4 each 64-element block of xq is stored evens first, then odds.
void SplitEvensOdds(int8_t* xq, int64_t K) {
  int8_t tmp[64];
  for (int64_t b = 0; b + 64 <= K; b += 64) {
    for (int i = 0; i < 32; ++i) {
      tmp[i] = xq[b + 2 * i];
      tmp[32 + i] = xq[b + 2 * i + 1];
    }
    std::memcpy(xq + b, tmp, 64);
  }
}

void QuantizeScalar(const float* x, int64_t K, int group, int8_t* xq, float* xs, float* xsum) {
  for (int64_t g = 0; g < K / group; ++g) {
    const float* xg = x + g * group;
    float amax = 0, sum = 0;
    for (int i = 0; i < group; ++i) {
      amax = std::max(amax, std::fabs(xg[i]));
      sum += xg[i];
    }
    xsum[g] = sum;
    const float d = amax / 127.0f;
    xs[g] = d;
    const float inv = d > 0 ? 1.0f / d : 0.0f;
    for (int i = 0; i < group; ++i) {
      const float v = std::nearbyint(xg[i] * inv);
      xq[g * group + i] = static_cast<int8_t>(std::max(-127.0f, std::min(127.0f, v)));
    }
  }
}

#ifdef VOXSLAB_X86
// GCC 12 reports the intrinsics' own undefined pass-through operands as uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// SplitEvensOdds with byte shuffles: each 16-byte lane to its evens then odds, then the lanes'
// halves gathered.
__attribute__((target("avx2"))) void SplitEvensOddsAvx2(int8_t* xq, int64_t K) {
  const __m256i lane = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (int64_t b = 0; b + 64 <= K; b += 64) {
    __m256i* p = reinterpret_cast<__m256i*>(xq + b);
    // Each half as its 16 evens, then its 16 odds.
    const __m256i a = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(_mm256_loadu_si256(p), lane), 0xD8);
    const __m256i c = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(_mm256_loadu_si256(p + 1), lane), 0xD8);
    _mm256_storeu_si256(p, _mm256_permute2x128_si256(a, c, 0x20));
    _mm256_storeu_si256(p + 1, _mm256_permute2x128_si256(a, c, 0x31));
  }
}

// v[j] lane r becomes v[r] lane j (a 16×16 block of floats transposed in registers).
__attribute__((target("avx512f"))) inline __attribute__((always_inline)) void Transpose16(__m512 (&v)[16]) {
  __m512 t[16];
  for (int r = 0; r < 16; r += 2) {
    t[r] = _mm512_unpacklo_ps(v[r], v[r + 1]);
    t[r + 1] = _mm512_unpackhi_ps(v[r], v[r + 1]);
  }
  // u[4q + c]: in each 128-bit lane k, rows 4q…4q+3 of column 4k + c.
  __m512 u[16];
  for (int q = 0; q < 4; ++q) {
    u[4 * q] = _mm512_shuffle_ps(t[4 * q], t[4 * q + 2], 0x44);
    u[4 * q + 1] = _mm512_shuffle_ps(t[4 * q], t[4 * q + 2], 0xEE);
    u[4 * q + 2] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
    u[4 * q + 3] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 a0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), a1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    const __m512 b0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88), b1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    v[c] = _mm512_shuffle_f32x4(a0, b0, 0x88);
    v[4 + c] = _mm512_shuffle_f32x4(a1, b1, 0x88);
    v[8 + c] = _mm512_shuffle_f32x4(a0, b0, 0xDD);
    v[12 + c] = _mm512_shuffle_f32x4(a1, b1, 0xDD);
  }
}

// The same for 8×8 on AVX2.
__attribute__((target("avx2"))) inline __attribute__((always_inline)) void Transpose8(__m256 (&v)[8]) {
  __m256 t[8];
  for (int r = 0; r < 8; r += 2) {
    t[r] = _mm256_unpacklo_ps(v[r], v[r + 1]);
    t[r + 1] = _mm256_unpackhi_ps(v[r], v[r + 1]);
  }
  // u[4q + c]: in each 128-bit lane k, rows 4q…4q+3 of column 4k + c.
  __m256 u[8];
  for (int q = 0; q < 2; ++q) {
    u[4 * q] = _mm256_shuffle_ps(t[4 * q], t[4 * q + 2], 0x44);
    u[4 * q + 1] = _mm256_shuffle_ps(t[4 * q], t[4 * q + 2], 0xEE);
    u[4 * q + 2] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
    u[4 * q + 3] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    v[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    v[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

// The same values as QuantizeScalar, bit for bit: each group's sum still adds its elements one
// after another from 0, but sixteen groups go at once, one per lane (their rows transposed in
// blocks of 16); the maximum and the rounding are exact in any order. min/max take their operands in
// the order std::min/std::max do, so a NaN input gives 127 as there.
__attribute__((target("avx512f,avx2,fma"))) void QuantizeAvx512(const float* x, int64_t K, int group, int8_t* xq, float* xs, float* xsum) {
  const int64_t groups = K / group;
  for (int64_t g0 = 0; g0 < groups; g0 += 16) {
    const int live = static_cast<int>(std::min<int64_t>(16, groups - g0));
    __m512 sum = _mm512_setzero_ps();
    const float* base = x + g0 * group;
    for (int i = 0; i < group; i += 16) {
      __m512 v[16];
      for (int r = 0; r < 16; ++r) v[r] = r < live ? _mm512_loadu_ps(base + r * group + i) : _mm512_setzero_ps();
      Transpose16(v);
      for (int j = 0; j < 16; ++j) sum = _mm512_add_ps(sum, v[j]);
    }
    _mm512_mask_storeu_ps(xsum + g0, static_cast<__mmask16>((1u << live) - 1), sum);
  }
  const __m512 hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
  for (int64_t g = 0; g < groups; ++g) {
    const float* xg = x + g * group;
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < group; i += 16) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xg + i)), m);
    const float amax = _mm512_reduce_max_ps(m);
    const float d = amax / 127.0f;
    xs[g] = d;
    const __m512 inv = _mm512_set1_ps(d > 0 ? 1.0f / d : 0.0f);
    for (int i = 0; i < group; i += 16) {
      __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(xg + i), inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      v = _mm512_max_ps(_mm512_min_ps(v, hi), lo);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(xq + g * group + i), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(v)));
    }
  }
}

// The same on AVX2 for groups of a multiple of 32: eight groups' sums at once (one per lane, 8×8 blocks),
// then 32 values of a group at a time, packed to bytes in order.
__attribute__((target("avx2,fma"))) void QuantizeAvx2(const float* x, int64_t K, int group, int8_t* xq, float* xs, float* xsum) {
  const int64_t groups = K / group;
  for (int64_t g0 = 0; g0 < groups; g0 += 8) {
    const int live = static_cast<int>(std::min<int64_t>(8, groups - g0));
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(live), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 sum = _mm256_setzero_ps();
    const float* base = x + g0 * group;
    for (int i = 0; i < group; i += 8) {
      __m256 v[8];
      for (int r = 0; r < 8; ++r) v[r] = r < live ? _mm256_loadu_ps(base + r * group + i) : _mm256_setzero_ps();
      Transpose8(v);
      for (int j = 0; j < 8; ++j) sum = _mm256_add_ps(sum, v[j]);
    }
    _mm256_maskstore_ps(xsum + g0, mask, sum);
  }
  const __m256 hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t g = 0; g < groups; ++g) {
    const float* xg = x + g * group;
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < group; i += 8) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xg + i), magnitude), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float d = _mm_cvtss_f32(h) / 127.0f;
    xs[g] = d;
    const __m256 inv = _mm256_set1_ps(d > 0 ? 1.0f / d : 0.0f);
    for (int i = 0; i < group; i += 32) {
      __m256i q[4];
      for (int j = 0; j < 4; ++j) {
        __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xg + i + 8 * j), inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm256_max_ps(_mm256_min_ps(v, hi), lo);
        q[j] = _mm256_cvttps_epi32(v);
      }
      const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xq + g * group + i), _mm256_permutevar8x32_epi32(bytes, order));
    }
  }
}
#pragma GCC diagnostic pop
#endif

}  // namespace

void QuantizeActivations(const float* x, int64_t K, int group, bool q4, int8_t* xq, float* xs, float* xsum) {
#ifdef VOXSLAB_X86
  // The vector paths take groups of whole vectors (16 floats; 32 on AVX2); others (and scalar kernels) the loop.
  if (ChosenIsa() == Isa::kAvx512 && group % 16 == 0) QuantizeAvx512(x, K, group, xq, xs, xsum);
  else if (ChosenIsa() >= Isa::kAvx2 && group % 32 == 0) QuantizeAvx2(x, K, group, xq, xs, xsum);
  else QuantizeScalar(x, K, group, xq, xs, xsum);
#else
  QuantizeScalar(x, K, group, xq, xs, xsum);
#endif
  if (!q4) return;
#ifdef VOXSLAB_X86
  if (ChosenIsa() >= Isa::kAvx2) return SplitEvensOddsAvx2(xq, K);
#endif
  SplitEvensOdds(xq, K);
}

namespace {

// ---- scalar paths (fixed order: 8 partial sums, combined pairwise) -------------------------

template <typename Load>
float DotScalar(Load load, const float* x, int64_t K) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= K; k += 8)
    for (int l = 0; l < 8; ++l) s[l] += load(k + l) * x[k + l];
  float tail = 0;
  for (; k < K; ++k) tail += load(k) * x[k];
  return (((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))) + tail;
}

void GroupSums(const float* x, int64_t K, int group, float* xsum) {
  for (int64_t g = 0; g < K / group; ++g) {
    float s = 0;
    for (int i = 0; i < group; ++i) s += x[g * group + i];
    xsum[g] = s;
  }
}

void GemvScalar(WeightType type, const void* w, const uint16_t* scales, const uint16_t* biases, int group, const float* x, float* y,
                int64_t M, int64_t K, float* xsum) {
  if (Quantized(type)) GroupSums(x, K, group, xsum);
  for (int64_t m = 0; m < M; ++m) {
    switch (type) {
      case WeightType::kF32: {
        const float* r = static_cast<const float*>(w) + m * K;
        y[m] = DotScalar([r](int64_t k) { return r[k]; }, x, K);
        break;
      }
      case WeightType::kF16: {
        const uint16_t* r = static_cast<const uint16_t*>(w) + m * K;
        y[m] = DotScalar([r](int64_t k) { return F16(r[k]); }, x, K);
        break;
      }
      case WeightType::kBF16: {
        const uint16_t* r = static_cast<const uint16_t*>(w) + m * K;
        y[m] = DotScalar([r](int64_t k) { return Bf16(r[k]); }, x, K);
        break;
      }
      case WeightType::kQ8:
      case WeightType::kQ4: {
        const int64_t groups = K / group;
        float acc = 0;
        for (int64_t g = 0; g < groups; ++g) {
          float q = 0;
          for (int i = 0; i < group; ++i) {
            const int64_t k = g * group + i;
            float v;
            if (type == WeightType::kQ8) {
              v = static_cast<const uint8_t*>(w)[m * K + k];
            } else {
              const uint8_t b = static_cast<const uint8_t*>(w)[(m * K + k) >> 1];
              v = (k & 1) ? (b >> 4) : (b & 15);
            }
            q += v * x[k];
          }
          acc += F16(scales[m * groups + g]) * q + F16(biases[m * groups + g]) * xsum[g];
        }
        y[m] = acc;
        break;
      }
    }
  }
}

// ---- integer dot products with int8 activations (q8/q4 weights) ---------------------------


// y[m] = Σ_g s_g·xs_g·(Σ q·xq) + Σ_g b_g·xsum_g, the integer sums exact.
void GemvIntScalar(bool q4, const uint8_t* w, const uint16_t* scales, const uint16_t* biases, int group, const int8_t* xq,
                   const float* xs, const float* xsum, float* y, int64_t M, int64_t K) {
  const int64_t groups = K / group;
  const int64_t rowBytes = q4 ? K / 2 : K;
  for (int64_t m = 0; m < M; ++m) {
    const uint8_t* r = w + m * rowBytes;
    float acc = 0, bacc = 0;
    for (int64_t g = 0; g < groups; ++g) {
      int32_t dot = 0;
      if (q4) {
        // Two elements per byte; inside whole 64-element blocks xq is stored evens then odds.
        for (int64_t k = g * group; k < (g + 1) * group; k += 2) {
          const int lo = r[k >> 1] & 15, hi = r[k >> 1] >> 4;
          const int64_t b = k & ~int64_t{63};
          if (b + 64 <= K) dot += lo * xq[b + ((k - b) >> 1)] + hi * xq[b + 32 + ((k - b) >> 1)];
          else dot += lo * xq[k] + hi * xq[k + 1];
        }
      } else {
        for (int64_t k = g * group; k < (g + 1) * group; ++k) dot += r[k] * xq[k];
      }
      acc += F16(scales[m * groups + g]) * xs[g] * static_cast<float>(dot);
      bacc += F16(biases[m * groups + g]) * xsum[g];
    }
    y[m] = acc + bacc;
  }
}


#ifdef VOXSLAB_X86

// 8 quantized weights starting at element `at` (q8 bytes, or q4 nibbles low first), as f32.
__attribute__((target("avx2,fma"))) inline __m256 QuantInts(bool q8, const uint8_t* w, int64_t at) {
  __m256i iv;
  if (q8) {
    iv = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + at)));
  } else {
    uint32_t packed;
    std::memcpy(&packed, w + (at >> 1), 4);
    iv = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(packed)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                          _mm256_set1_epi32(15));
  }
  return _mm256_cvtepi32_ps(iv);
}

// 16 q4 weights from element `at` (even): 8 bytes → nibbles in element order → two × 8 f32.
__attribute__((target("avx2,fma"))) inline void Q4Ints16(const uint8_t* w, int64_t at, __m256& lo8, __m256& hi8) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + (at >> 1)));
  const __m128i mask = _mm_set1_epi8(15);
  const __m128i lo = _mm_and_si128(b, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
  const __m128i ordered = _mm_unpacklo_epi8(lo, hi);  // b0.lo, b0.hi, b1.lo, b1.hi, …
  lo8 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(ordered));
  hi8 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(ordered, 8)));
}

// 8 quantized weights starting at element `at` (q8 bytes, or q4 nibbles low first) times x.
__attribute__((target("avx2,fma"))) inline __m256 QuantChunk(bool q8, const uint8_t* w, int64_t at, const float* x) {
  return _mm256_mul_ps(QuantInts(q8, w, at), _mm256_loadu_ps(x));
}

// Σ_g b_g·xsum_g of one row: the bias term, in 8 lanes and then a tail, combined in a fixed order.
// BiasDot's groups past the last whole eight, from g.
__attribute__((target("avx2,fma,f16c"))) inline float BiasTail(const uint16_t* bi, const float* xsum, int64_t g, int64_t groups) {
  float t = 0;
  for (; g < groups; ++g) t += _cvtsh_ss(bi[g]) * xsum[g];
  return t;
}

__attribute__((target("avx2,fma,f16c"))) inline float BiasDot(const uint16_t* bi, const float* xsum, int64_t groups) {
  __m256 bacc = _mm256_setzero_ps();
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8) bacc = _mm256_fmadd_ps(Half8(bi + g), _mm256_loadu_ps(xsum + g), bacc);
  return Hsum(bacc) + BiasTail(bi, xsum, g, groups);
}

// Four BiasDots at once, lane i that of bias row bi + i·stride with input sums xsum[i], to its
// bits: one row with four activations' sums (stride 0), or four rows with one activation's.
// Bias rows bi[i] with input sums xsum[i].
__attribute__((target("avx2,fma,f16c"))) inline __m128 BiasDot4(const uint16_t* const* bi, const float* const* xsum, int64_t groups) {
  __m256 b[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8)
    for (int i = 0; i < 4; ++i) b[i] = _mm256_fmadd_ps(Half8(bi[i] + g), _mm256_loadu_ps(xsum[i] + g), b[i]);
  const __m128 t = _mm_setr_ps(BiasTail(bi[0], xsum[0], g, groups), BiasTail(bi[1], xsum[1], g, groups), BiasTail(bi[2], xsum[2], g, groups),
                               BiasTail(bi[3], xsum[3], g, groups));
  return _mm_add_ps(Hsum4(b[0], b[1], b[2], b[3]), t);
}

__attribute__((target("avx2,fma,f16c"))) inline __m128 BiasDot4(const uint16_t* bi, int64_t stride, const float* const* xsum, int64_t groups) {
  const uint16_t* rows[4] = {bi, bi + stride, bi + 2 * stride, bi + 3 * stride};
  return BiasDot4(rows, xsum, groups);
}

__attribute__((target("avx2,fma,f16c"))) void GemvAvx2(WeightType type, const void* w, const uint16_t* scales,
                                                        const uint16_t* biases, int group, const float* x, float* y,
                                                        int64_t M, int64_t K, float* xsum) {
  if (Quantized(type)) {
    // Per-group input sums in f32 (8 lanes, then the lanes in a fixed order).
    for (int64_t g = 0; g < K / group; ++g) {
      __m256 s = _mm256_setzero_ps();
      int i = 0;
      for (; i + 8 <= group; i += 8) s = _mm256_add_ps(s, _mm256_loadu_ps(x + g * group + i));
      float t = Hsum(s);
      for (; i < group; ++i) t += x[g * group + i];
      xsum[g] = t;
    }
  }
  const int64_t K8 = K & ~int64_t{7};
  int64_t m0 = 0;
  if (Quantized(type)) {
    // Four rows per pass: each chunk of x is loaded once for four rows; per row, Σ_g s_g·(Σ q·x)
    // in 8 lanes, and the bias term as one dot product with the f32 group sums.
    const bool q8 = type == WeightType::kQ8;
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    const int64_t groups = K / group;
    for (; m0 + 4 <= M; m0 += 4) {
      __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int64_t g = 0; g < groups; ++g) {
        __m256 q0 = _mm256_setzero_ps(), q1 = q0, q2 = q0, q3 = q0;
        const float* xg = x + g * group;
        if (!q8 && group % 16 == 0) {
          for (int i = 0; i < group; i += 16) {
            const __m256 xa = _mm256_loadu_ps(xg + i);
            const __m256 xb = _mm256_loadu_ps(xg + i + 8);
            const int64_t at = m0 * K + g * group + i;
            __m256 a, b;
            Q4Ints16(wb, at, a, b);
            q0 = _mm256_fmadd_ps(b, xb, _mm256_fmadd_ps(a, xa, q0));
            Q4Ints16(wb, at + K, a, b);
            q1 = _mm256_fmadd_ps(b, xb, _mm256_fmadd_ps(a, xa, q1));
            Q4Ints16(wb, at + 2 * K, a, b);
            q2 = _mm256_fmadd_ps(b, xb, _mm256_fmadd_ps(a, xa, q2));
            Q4Ints16(wb, at + 3 * K, a, b);
            q3 = _mm256_fmadd_ps(b, xb, _mm256_fmadd_ps(a, xa, q3));
          }
        } else {
          for (int i = 0; i < group; i += 8) {
            const __m256 xv = _mm256_loadu_ps(xg + i);
            const int64_t at = m0 * K + g * group + i;
            q0 = _mm256_fmadd_ps(QuantInts(q8, wb, at), xv, q0);
            q1 = _mm256_fmadd_ps(QuantInts(q8, wb, at + K), xv, q1);
            q2 = _mm256_fmadd_ps(QuantInts(q8, wb, at + 2 * K), xv, q2);
            q3 = _mm256_fmadd_ps(QuantInts(q8, wb, at + 3 * K), xv, q3);
          }
        }
        acc[0] = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(scales[m0 * groups + g])), q0, acc[0]);
        acc[1] = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(scales[(m0 + 1) * groups + g])), q1, acc[1]);
        acc[2] = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(scales[(m0 + 2) * groups + g])), q2, acc[2]);
        acc[3] = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(scales[(m0 + 3) * groups + g])), q3, acc[3]);
      }
      for (int r = 0; r < 4; ++r) y[m0 + r] = Hsum(acc[r]) + BiasDot(biases + (m0 + r) * groups, xsum, groups);
    }
  }
  if (type == WeightType::kF32) {
    // Four rows per pass share each load of x; each row keeps its own fixed-order sum.
    const float* base = static_cast<const float*>(w);
    for (; m0 + 4 <= M; m0 += 4) {
      const float* r0 = base + m0 * K;
      const float* r1 = r0 + K;
      const float* r2 = r1 + K;
      const float* r3 = r2 + K;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      int64_t k = 0;
      for (; k < K8; k += 8) {
        const __m256 xv = _mm256_loadu_ps(x + k);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + k), xv, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(r1 + k), xv, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(r2 + k), xv, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(r3 + k), xv, a3);
      }
      float t0 = 0, t1 = 0, t2 = 0, t3 = 0;
      for (; k < K; ++k) {
        t0 += r0[k] * x[k];
        t1 += r1[k] * x[k];
        t2 += r2[k] * x[k];
        t3 += r3[k] * x[k];
      }
      y[m0] = Hsum(a0) + t0;
      y[m0 + 1] = Hsum(a1) + t1;
      y[m0 + 2] = Hsum(a2) + t2;
      y[m0 + 3] = Hsum(a3) + t3;
    }
  }
  for (int64_t m = m0; m < M; ++m) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    float tail = 0;
    switch (type) {
      case WeightType::kF32: {
        const float* r = static_cast<const float*>(w) + m * K;
        int64_t k = 0;
        for (; k + 16 <= K; k += 16) {
          a0 = _mm256_fmadd_ps(_mm256_loadu_ps(r + k), _mm256_loadu_ps(x + k), a0);
          a1 = _mm256_fmadd_ps(_mm256_loadu_ps(r + k + 8), _mm256_loadu_ps(x + k + 8), a1);
        }
        for (; k < K8; k += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(r + k), _mm256_loadu_ps(x + k), a0);
        for (; k < K; ++k) tail += r[k] * x[k];
        y[m] = Hsum(_mm256_add_ps(a0, a1)) + tail;
        break;
      }
      case WeightType::kF16:
      case WeightType::kBF16: {
        const uint16_t* r = static_cast<const uint16_t*>(w) + m * K;
        int64_t k = 0;
        for (; k < K8; k += 8) {
          const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + k));
          const __m256 v = type == WeightType::kF16
                               ? _mm256_cvtph_ps(h)
                               : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
          a0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(x + k), a0);
        }
        for (; k < K; ++k) tail += (type == WeightType::kF16 ? F16(r[k]) : Bf16(r[k])) * x[k];
        y[m] = Hsum(a0) + tail;
        break;
      }
      case WeightType::kQ8:
      case WeightType::kQ4: {
        // Σ_g s_g·(Σ q·x) kept in 8 lanes across groups; the bias term Σ_g b_g·Σx_g as one
        // dot product with the f32 group sums.
        const int64_t groups = K / group;
        const uint16_t* sc = scales + m * groups;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t g = 0; g < groups; ++g) {
          // Two independent chains (even and odd chunks of 8), so FMA latency is hidden.
          __m256 q0 = _mm256_setzero_ps(), q1 = _mm256_setzero_ps();
          const int64_t base = m * K + g * group;
          const uint8_t* wb = static_cast<const uint8_t*>(w);
          const bool q8 = type == WeightType::kQ8;
          const float* xg = x + g * group;
          int i = 0;
          for (; i + 16 <= group; i += 16) {
            q0 = _mm256_add_ps(q0, QuantChunk(q8, wb, base + i, xg + i));
            q1 = _mm256_add_ps(q1, QuantChunk(q8, wb, base + i + 8, xg + i + 8));
          }
          if (i < group) q0 = _mm256_add_ps(q0, QuantChunk(q8, wb, base + i, xg + i));
          acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(sc[g])), _mm256_add_ps(q0, q1), acc);
        }
        y[m] = Hsum(acc) + BiasDot(biases + m * groups, xsum, groups);
        break;
      }
    }
  }
}

#define VOXSLAB_VNNI __attribute__((target("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")))

// Lane scales s_g·xs_g of one 32-byte block: group g, or (q4, group 32) groups g and g + 1,
// four lanes each.
__attribute__((target("avx2,fma,f16c"))) inline __m256 VnniScale(const uint16_t* sc, const float* xs, int64_t g, bool two) {
  if (!two) return _mm256_set1_ps(_cvtsh_ss(sc[g]) * xs[g]);
  return _mm256_setr_m128(_mm_set1_ps(_cvtsh_ss(sc[g]) * xs[g]), _mm_set1_ps(_cvtsh_ss(sc[g + 1]) * xs[g + 1]));
}

// Walks the groups of consecutive 32-byte blocks without dividing: `g` is the first group of
// block b. Blocks hold `per` elements; groups are 32 elements (two per q4 block) or a multiple
// of `per`.
struct BlockGroups {
  int64_t g = 0, k = 0, perGroup;
  bool two;
  BlockGroups(int group, int64_t per) : perGroup(group >= per ? group / per : 1), two(group < per) {}
  void next() {
    if (two) g += 2;
    else if (++k == perGroup) k = 0, ++g;
  }
};

// The same integer lanes without VNNI: vpmaddubsw pairs bytes into 16 bits and vpmaddwd pairs
// those into 32, so each int32 lane holds the same four products as vpdpbusd. q4 nibbles (≤ 15)
// cannot saturate 16 bits; q8 bytes are recentred to q − 128 (|q − 128| · 127 · 2 < 2^15) and
// 128·Σxq is added back.
// A 32-byte weight block made ready for Avx2Dot: q4, its low and high nibbles; q8, q − 128 as
// int8 and its magnitude.
__attribute__((target("avx2,fma"))) inline void Avx2Unpack(bool q4, const uint8_t* p, __m256i& a, __m256i& b) {
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if (q4) {
    const __m256i nib = _mm256_set1_epi8(15);
    a = _mm256_and_si256(wv, nib);
    b = _mm256_and_si256(_mm256_srli_epi16(wv, 4), nib);
  } else {
    a = _mm256_xor_si256(wv, _mm256_set1_epi8(static_cast<char>(0x80)));  // q − 128 as int8
    b = _mm256_sign_epi8(a, a);                                             // |q − 128|
  }
}

// q8: 128 times each lane's sum of its four activations, what the recentring took away.
__attribute__((target("avx2,fma"))) inline __m256i Avx2Q8Term(__m256i xa) {
  return _mm256_slli_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), xa), _mm256_set1_epi16(1)), 7);
}

// q8 lanes Σ(q − 128)·x + `term` (Avx2Q8Term of xa).
__attribute__((target("avx2,fma"))) inline __m256 Avx2DotQ8(__m256i a, __m256i b, __m256i xa, __m256i term) {
  const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(b, _mm256_sign_epi8(xa, a)), _mm256_set1_epi16(1));
  return _mm256_cvtepi32_ps(_mm256_add_epi32(dot, term));
}

__attribute__((target("avx2,fma"))) inline __m256 Avx2Dot(bool q4, __m256i a, __m256i b, __m256i xa, __m256i xb) {
  const __m256i ones16 = _mm256_set1_epi16(1);
  if (q4) {
    // Each 16-bit pair sum is at most 2·15·127 in magnitude, so two add without saturating.
    const __m256i d = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(a, xa), _mm256_maddubs_epi16(b, xb)), ones16);
    return _mm256_cvtepi32_ps(d);
  }
  return Avx2DotQ8(a, b, xa, Avx2Q8Term(xa));
}

__attribute__((target("avx2,fma"))) inline __m256 Avx2IntDot(bool q4, const uint8_t* p, __m256i xa, __m256i xb) {
  __m256i a, b;
  Avx2Unpack(q4, p, a, b);
  return Avx2Dot(q4, a, b, xa, xb);
}

// A weight stream is one the hardware prefetcher alone lets fall behind while the core computes,
// so the GEMVs ask for the bytes ahead (past a row's end, the next row's): the AVX2 integer GEMV
// kStreamAhead on into L1, for each of its streams; the AVX-512 ones kNearAhead on
// into L1 and kFarAhead on into L2, where the L1 requests then find them. q8, which goes through
// its bytes faster than q4, asks for them into L2 kFarAheadQ8 on.
constexpr int64_t kStreamAhead = 2048;
constexpr int64_t kNearAhead = 2048;
constexpr int64_t kFarAhead = 8192;
constexpr int64_t kFarAheadQ8 = 24576;
// q8 rows of at least this many bytes against one activation ask for nothing ahead (Int512::Laid).
constexpr int64_t kLongRowQ8 = 8192;

// The AVX-512 one-row streams' requests for the bytes ahead of p: into L1 kNearAhead on, into
// L2 `far` on.
inline __attribute__((always_inline)) void StreamAhead(const void* p, int64_t far) {
  _mm_prefetch(static_cast<const char*>(p) + kNearAhead, _MM_HINT_T0);
  _mm_prefetch(static_cast<const char*>(p) + far, _MM_HINT_T1);
}

// Activation rows the AVX2 integer GEMV takes against one pass over q4 weight rows (GemvRows): a
// detokenizer frame's six positions unpack each weight block once. q8, with a stored term per
// activation, takes four.
constexpr int kAvx2Many = 6;

// Activation rows the AVX-512 VNNI integer GEMV takes against one pass over weight rows when they
// fit VnniLaid: a detokenizer frame's six positions in one pass.
constexpr int kVnniMany = 6;
// The bytes of q4 activations the VNNI GEMV lays out on the stack per call (Int512::Laid).
constexpr int64_t kLaidBytes = 49152;

// Whether Int512::Laid takes na activation rows of K values: q8 reads them where they are.
constexpr bool VnniLaid(bool q4, int na, int64_t K) { return na <= kVnniMany && (!q4 || na * K <= kLaidBytes); }

// R weight rows of the AVX2 integer GEMV at once, for q4/q8 with groups of G (32 or 64): the
// activation blocks are loaded once for the R rows, whose weights stream side by side. The lane
// scales s_g·xs_g are made eight groups at a time (one f16 conversion and one multiply per row),
// one pass of eight ahead of their use (a store read back at once holds up the broadcasts that
// load it); a block of whole groups broadcasts its own from memory, a q4 block of two groups
// permutes its pair; groups past the last eight take the same values one by one (the same
// products). Each row sums its blocks in order in one accumulator, so a row's bits do not
// depend on R.
template <bool Q4, int G>
struct IntRowsAvx2 {
  static constexpr int64_t kPer = Q4 ? 64 : 32;                        // elements per 32-byte block
  static constexpr bool kTwo = G < kPer;                               // q4, group 32: two groups per block
  static constexpr int64_t kBlocksPerGroup = kTwo ? 1 : G / kPer;       // otherwise
  static constexpr int64_t kBlocks8 = kTwo ? 4 : 8 * kBlocksPerGroup;  // blocks of eight groups
  __attribute__((target("avx2,fma,f16c"))) static inline void Ahead(const uint8_t* p) {
    for (int64_t o = 0; o < kBlocks8 * 32; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + kStreamAhead + o), _MM_HINT_T0);
  }

  // Lanes of block j within its eight groups.
  __attribute__((target("avx2,fma,f16c"))) static inline __m256i Index(int64_t j) {
    if constexpr (kTwo) {
      const int e = static_cast<int>(2 * j);
      return _mm256_setr_epi32(e, e, e, e, e + 1, e + 1, e + 1, e + 1);
    } else {
      return _mm256_set1_epi32(static_cast<int>(j / kBlocksPerGroup));
    }
  }

  // The lane scales of groups g0 to g0 + 7 of R rows rowStride scales apart.
  template <int R>
  __attribute__((target("avx2,fma,f16c"))) static inline void Fill(float (*s8)[8], const uint16_t* sc, int64_t rowStride, const float* xs, int64_t g0) {
    const __m256 x8 = _mm256_loadu_ps(xs + g0);
    for (int r = 0; r < R; ++r)
      _mm256_store_ps(s8[r], _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + r * rowStride + g0))), x8));
  }

  // R weight rows `stride` rows apart (the rows' scales as far apart), each row's lanes into acc.
  template <int R>
  __attribute__((target("avx2,fma,f16c"))) static inline void Rows(const uint8_t* w, int64_t rowBytes, const uint16_t* sc, int64_t groups,
                                                                   const int8_t* xq, const float* xs, __m256* acc, int64_t stride) {
    const int64_t blocks = rowBytes / 32;
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    int64_t b = 0;
    alignas(32) float s8all[2][R][8];
    if (groups >= 8) Fill<R>(s8all[0], sc, stride * groups, xs, 0);
    int cur = 0;
    for (int64_t g0 = 0; g0 + 8 <= groups; g0 += 8, cur ^= 1) {
      if (g0 + 16 <= groups) Fill<R>(s8all[cur ^ 1], sc, stride * groups, xs, g0 + 8);
      for (int r = 0; r < R; ++r) Ahead(w + r * stride * rowBytes + b * 32);
      float (*s8)[8] = s8all[cur];
#pragma GCC unroll 4
      for (int64_t j = 0; j < kBlocks8; ++j, ++b) {
        const int8_t* xb = xq + b * kPer;
        const __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb));
        const __m256i xh = Q4 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 32)) : xa;
        for (int r = 0; r < R; ++r) {
          const __m256 lanes = kTwo ? _mm256_permutevar8x32_ps(_mm256_load_ps(s8[r]), Index(j)) : _mm256_broadcast_ss(&s8[r][j / kBlocksPerGroup]);
          acc[r] = _mm256_fmadd_ps(Avx2IntDot(Q4, w + r * stride * rowBytes + b * 32, xa, xh), lanes, acc[r]);
        }
      }
    }
    for (; b < blocks; ++b) {
      const int8_t* xb = xq + b * kPer;
      const __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb));
      const __m256i xh = Q4 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 32)) : xa;
      const int64_t g = kTwo ? 2 * b : b / kBlocksPerGroup;
      for (int r = 0; r < R; ++r) {
        acc[r] = _mm256_fmadd_ps(Avx2IntDot(Q4, w + r * stride * rowBytes + b * 32, xa, xh), VnniScale(sc + r * stride * groups, xs, g, kTwo), acc[r]);
      }
    }
  }

  // q8 activation blocks whose Avx2Q8Term RunMany makes once for all its rows (64 KiB of stack for four positions).
  static constexpr int64_t kTermBlocks = 512;

  // The dot of one weight block with activation block b of position a: q8 takes the term made
  // in advance where there is one.
  __attribute__((target("avx2,fma"))) static inline __m256 Dot(__m256i wa, __m256i wb, __m256i xa, __m256i xh, const __m256i* terms, int64_t b) {
    if constexpr (Q4) return Avx2Dot(true, wa, wb, xa, xh);
    else return Avx2DotQ8(wa, wb, xa, terms != nullptr ? _mm256_load_si256(terms + b) : Avx2Q8Term(xa));
  }

  // One weight row against NA activation rows: each weight block is loaded and unpacked once for
  // all of them; per activation the same operations, in the same order, as Rows<1>.
  template <int NA>
  __attribute__((target("avx2,fma,f16c"))) static void Multi(const uint8_t* w, const uint16_t* sc, int64_t groups, int64_t rowBytes,
                                                             const int8_t* const* xq, const float* const* xs, const __m256i* const* terms,
                                                             float* out) {
    const int64_t blocks = rowBytes / 32;
    __m256 acc[NA];
    for (int a = 0; a < NA; ++a) acc[a] = _mm256_setzero_ps();
    alignas(32) float s8[NA][8];
    int64_t b = 0;
    for (int64_t g0 = 0; g0 + 8 <= groups; g0 += 8) {
      Ahead(w + b * 32);
      const __m256 ws = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + g0)));
      for (int a = 0; a < NA; ++a) _mm256_store_ps(s8[a], _mm256_mul_ps(ws, _mm256_loadu_ps(xs[a] + g0)));
#pragma GCC unroll 4
      for (int64_t j = 0; j < kBlocks8; ++j, ++b) {
        __m256i wa, wb;
        Avx2Unpack(Q4, w + b * 32, wa, wb);
        for (int a = 0; a < NA; ++a) {
          const int8_t* xb = xq[a] + b * kPer;
          const __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb));
          const __m256i xh = Q4 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 32)) : xa;
          const __m256 lanes = kTwo ? _mm256_permutevar8x32_ps(_mm256_load_ps(s8[a]), Index(j)) : _mm256_broadcast_ss(&s8[a][j / kBlocksPerGroup]);
          acc[a] = _mm256_fmadd_ps(Dot(wa, wb, xa, xh, terms[a], b), lanes, acc[a]);
        }
      }
    }
    for (; b < blocks; ++b) {
      __m256i wa, wb;
      Avx2Unpack(Q4, w + b * 32, wa, wb);
      const int64_t g = kTwo ? 2 * b : b / kBlocksPerGroup;
      for (int a = 0; a < NA; ++a) {
        const int8_t* xb = xq[a] + b * kPer;
        const __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb));
        const __m256i xh = Q4 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 32)) : xa;
        acc[a] = _mm256_fmadd_ps(Dot(wa, wb, xa, xh, terms[a], b), VnniScale(sc, xs[a], g, kTwo), acc[a]);
      }
    }
    // The first four sums at once where there are four (fewer, padded, measured slower than Hsum).
    int a = 0;
    if constexpr (NA >= 4) _mm_storeu_ps(out, Hsum4(acc[0], acc[1], acc[2], acc[3])), a = 4;
    for (; a < NA; ++a) out[a] = Hsum(acc[a]);
  }

  // Weight rows [0, M) against NA activation rows: y[a][m], bias sums added as Run adds them.
  template <int NA>
  __attribute__((target("avx2,fma,f16c"))) static void Many(const uint8_t* w, const uint16_t* sc, const uint16_t* bi, const int8_t* const* xq,
                                                            const float* const* xs, const float* const* xsum, float* const* y, int64_t M,
                                                            int64_t K) {
    const int64_t groups = K / G;
    const int64_t rowBytes = Q4 ? K / 2 : K;
    const int64_t blocks = rowBytes / 32;
    alignas(32) __m256i store[Q4 ? 1 : NA][Q4 ? 1 : kTermBlocks];
    const __m256i* terms[NA] = {};
    if (!Q4 && blocks <= kTermBlocks) {
      for (int a = 0; a < NA; ++a) {
        for (int64_t b = 0; b < blocks; ++b) store[a][b] = Avx2Q8Term(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[a] + b * 32)));
        terms[a] = store[a];
      }
    }
    float out[NA];
    for (int64_t m = 0; m < M; ++m) {
      Multi<NA>(w + m * rowBytes, sc + m * groups, groups, rowBytes, xq, xs, terms, out);
      for (int a = 0; a < NA; ++a) y[a][m] = out[a];
    }
    // Bias sums: the first four activations at once, the rest one by one.
    constexpr int kFour = NA >= 4 ? 4 : 0;
    if constexpr (kFour != 0) {
      for (int64_t m = 0; m < M; ++m) {
        alignas(16) float d[4];
        _mm_store_ps(d, BiasDot4(bi + m * groups, 0, xsum, groups));
        for (int a = 0; a < 4; ++a) y[a][m] += d[a];
      }
    }
    for (int a = kFour; a < NA; ++a)
      for (int64_t m = 0; m < M; ++m) y[a][m] += BiasDot(bi + m * groups, xsum[a], groups);
  }

  // Weight rows [0, M) against na activation rows, na ≤ kAvx2Many (q4) or 4 (q8), the count
  // dispatched once for all the rows.
  __attribute__((target("avx2,fma,f16c"))) static void RunMany(const uint8_t* w, const uint16_t* sc, const uint16_t* bi, const int8_t* const* xq,
                                                               const float* const* xs, const float* const* xsum, float* const* y, int na,
                                                               int64_t M, int64_t K) {
    switch (na) {
      case 1: Many<1>(w, sc, bi, xq, xs, xsum, y, M, K); break;
      case 2: Many<2>(w, sc, bi, xq, xs, xsum, y, M, K); break;
      case 3: Many<3>(w, sc, bi, xq, xs, xsum, y, M, K); break;
      case 4: Many<4>(w, sc, bi, xq, xs, xsum, y, M, K); break;
      case 5: if constexpr (Q4) Many<5>(w, sc, bi, xq, xs, xsum, y, M, K); break;
      default: if constexpr (Q4) Many<6>(w, sc, bi, xq, xs, xsum, y, M, K); break;
    }
  }

  __attribute__((target("avx2,fma,f16c"))) static void Run(const uint8_t* w, const uint16_t* sc, const uint16_t* bi, const int8_t* xq,
                                                           const float* xs, const float* xsum, float* y, int64_t M, int64_t K) {
    const int64_t groups = K / G;
    const int64_t rowBytes = Q4 ? K / 2 : K;
    // Two streams, each kept ahead of by Ahead: row i of the first half beside row i of the
    // second. One core reads two distant streams from memory faster than one, where two adjacent
    // rows (or four) read slower than a row at a time. Two steps of the pair end together:
    // their four sums and bias terms at once, each with the bits of Hsum and BiasDot alone.
    const int64_t h = M / 2;
    const float* const xsum4[4] = {xsum, xsum, xsum, xsum};
    int64_t i = 0;
    for (; i + 2 <= h; i += 2) {
      __m256 acc[4];
      Rows<2>(w + i * rowBytes, rowBytes, sc + i * groups, groups, xq, xs, acc, h);
      Rows<2>(w + (i + 1) * rowBytes, rowBytes, sc + (i + 1) * groups, groups, xq, xs, acc + 2, h);
      const int64_t m[4] = {i, i + h, i + 1, i + 1 + h};
      const uint16_t* const b4[4] = {bi + m[0] * groups, bi + m[1] * groups, bi + m[2] * groups, bi + m[3] * groups};
      alignas(16) float s[4];
      _mm_store_ps(s, _mm_add_ps(Hsum4(acc[0], acc[1], acc[2], acc[3]), BiasDot4(b4, xsum4, groups)));
      for (int r = 0; r < 4; ++r) y[m[r]] = s[r];
    }
    for (; i < h; ++i) One(w, sc, bi, xq, xs, xsum, y, i, groups, rowBytes), One(w, sc, bi, xq, xs, xsum, y, i + h, groups, rowBytes);
    if (M % 2 != 0) One(w, sc, bi, xq, xs, xsum, y, M - 1, groups, rowBytes);
  }

  // Row m alone.
  __attribute__((target("avx2,fma,f16c"))) static void One(const uint8_t* w, const uint16_t* sc, const uint16_t* bi, const int8_t* xq,
                                                           const float* xs, const float* xsum, float* y, int64_t m, int64_t groups,
                                                           int64_t rowBytes) {
    __m256 acc;
    Rows<1>(w + m * rowBytes, rowBytes, sc + m * groups, groups, xq, xs, &acc, 1);
    y[m] = Hsum(acc) + BiasDot(bi + m * groups, xsum, groups);
  }
};

// na activation rows (at most kAvx2Many for q4, 4 for q8) against the same weight rows
// (GemvRows on AVX2): row m of activation a has the bits GemvIntAvx2 gives it.
__attribute__((target("avx2,fma,f16c"))) void GemvIntAvx2Many(bool q4, const uint8_t* w, const uint16_t* scales, const uint16_t* biases,
                                                         int group, const int8_t* const* xq, const float* const* xs,
                                                         const float* const* xsum, float* const* y, int na, int64_t M, int64_t K) {
  if (q4) (group == 32 ? IntRowsAvx2<true, 32>::RunMany : IntRowsAvx2<true, 64>::RunMany)(w, scales, biases, xq, xs, xsum, y, na, M, K);
  else (group == 32 ? IntRowsAvx2<false, 32>::RunMany : IntRowsAvx2<false, 64>::RunMany)(w, scales, biases, xq, xs, xsum, y, na, M, K);
}

// Integer GEMV on AVX2 without VNNI, in 256-bit lanes (a machine without VNNI has one integer
// path, so its rows agree across calls as the VNNI path's do).
__attribute__((target("avx2,fma,f16c"))) void GemvIntAvx2(bool q4, const uint8_t* w, const uint16_t* scales, const uint16_t* biases,
                                                     int group, const int8_t* xq, const float* xs, const float* xsum,
                                                     float* y, int64_t M, int64_t K) {
  if (q4) (group == 32 ? IntRowsAvx2<true, 32>::Run : IntRowsAvx2<true, 64>::Run)(w, scales, biases, xq, xs, xsum, y, M, K);
  else (group == 32 ? IntRowsAvx2<false, 32>::Run : IntRowsAvx2<false, 64>::Run)(w, scales, biases, xq, xs, xsum, y, M, K);
}

// GCC 12 reports the intrinsics' own undefined pass-through operands as uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// R weight rows × NA ≤ 4 activation rows from weight row m, on 512-bit vectors: each step
// takes 64 bytes of every row (two 32-byte blocks; q4: 128 elements, q8: 64), loaded and
// unpacked once for all the activations. vpdpbusd multiplies the unsigned weight bytes (q8, or
// the low/high nibbles of q4) by the int8 activations, four products per int32 lane; each lane
// is scaled by s_g·xs_g of its group (a lane holds 8 q4 or 4 q8 elements: a group of G is
// G/8 or G/4 lanes) and summed in f32 across steps; a q4 row of an odd number of blocks ends
// with one block in the low half. Per (weight row, activation) the operations do not depend on
// R or NA, so every grouping of rows and activations gives the same bits.
template <bool Q4, int G>
struct Int512 {
  static constexpr int kLanesPerGroup = G / (Q4 ? 8 : 4);
  static constexpr int kGroupsPerStep = 16 / kLanesPerGroup;
  // How far on a one-row stream asks for its bytes into L2 (StreamAhead).
  static constexpr int64_t kFar = Q4 ? kFarAhead : kFarAheadQ8;

  // The step's (or half step's) group values, one per lane; reads exactly the groups it uses.
  template <bool Half>
  VOXSLAB_VNNI static inline __attribute__((always_inline)) __m512 Lanes(const float* p) {
    constexpr int n = Half ? kGroupsPerStep / 2 : kGroupsPerStep;
    if constexpr (n == 1) {
      return _mm512_set1_ps(*p);
    } else {
      // Two floats through an unaligned 64-bit load (a double load would need 8-byte alignment).
      const __m128 v = n == 2 ? _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))) : _mm_loadu_ps(p);
      return Spread(v);
    }
  }

  // The same for f16 values (the weights' scales).
  template <bool Half>
  VOXSLAB_VNNI static inline __attribute__((always_inline)) __m512 Lanes(const uint16_t* p) {
    constexpr int n = Half ? kGroupsPerStep / 2 : kGroupsPerStep;
    if constexpr (n == 1) {
      return _mm512_set1_ps(_cvtsh_ss(*p));
    } else {
      uint64_t bits = 0;
      std::memcpy(&bits, p, n * 2);
      return Spread(_mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(bits))));
    }
  }

  // Lane l's group within a step: l / kLanesPerGroup.
  VOXSLAB_VNNI static inline __attribute__((always_inline)) __m512i LaneGroups() {
    return _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                             __builtin_ctz(static_cast<unsigned>(kLanesPerGroup)));
  }

  // Lane l of the result is v[l / kLanesPerGroup].
  VOXSLAB_VNNI static inline __attribute__((always_inline)) __m512 Spread(__m128 v) {
    return _mm512_permutexvar_ps(LaneGroups(), _mm512_castps128_ps512(v));
  }

  template <int R, int NA, bool Half>
  VOXSLAB_VNNI static inline __attribute__((always_inline)) void Step(__m512 (&acc)[R][NA], const uint8_t* r0, int64_t rowBytes,
                                                                      const uint16_t* s0, int64_t groups, const int8_t* const* xq,
                                                                      const float* const* xs, int64_t z) {
    const int64_t g0 = z * kGroupsPerStep;
    const __m512i nib = _mm512_set1_epi8(15);
    __m512i lo[R], hi[R];
    __m512 sv[R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = r0 + r * rowBytes + z * 64;
      const __m512i wv = Half ? _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))) : _mm512_loadu_si512(p);
      lo[r] = Q4 ? _mm512_and_si512(wv, nib) : wv;
      hi[r] = Q4 ? _mm512_and_si512(_mm512_srli_epi16(wv, 4), nib) : wv;
      sv[r] = Lanes<Half>(s0 + r * groups + g0);
    }
    for (int a = 0; a < NA; ++a) {
      __m512i xa, xh;
      if (Q4) {
        // Activations are stored per 64-element block as 32 evens, then 32 odds.
        const int8_t* xb = xq[a] + z * 128;
        const __m256i e0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb));
        const __m256i o0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 32));
        if (Half) {
          xa = _mm512_zextsi256_si512(e0);
          xh = _mm512_zextsi256_si512(o0);
        } else {
          xa = _mm512_inserti64x4(_mm512_castsi256_si512(e0), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 64)), 1);
          xh = _mm512_inserti64x4(_mm512_castsi256_si512(o0), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 96)), 1);
        }
      } else {
        xa = xh = _mm512_loadu_si512(xq[a] + z * 64);
      }
      const __m512 xsv = Lanes<Half>(xs[a] + g0);
      for (int r = 0; r < R; ++r) {
        __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[r], xa);
        if (Q4) d = _mm512_dpbusd_epi32(d, hi[r], xh);
        acc[r][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(sv[r], xsv), acc[r][a]);
      }
    }
  }

  template <int R, int NA>
  VOXSLAB_VNNI static void Pass(const uint8_t* r0, const uint16_t* s0, const uint16_t* biases, const int8_t* const* xq, const float* const* xs,
                                const float* const* xsum, float* const* y, int64_t m, int64_t K) {
    const int64_t groups = K / G;
    const int64_t rowBytes = Q4 ? K / 2 : K;
    const int64_t steps = rowBytes / 64;
    __m512 acc[R][NA];
    for (int r = 0; r < R; ++r)
      for (int a = 0; a < NA; ++a) acc[r][a] = _mm512_setzero_ps();
    for (int64_t z = 0; z < steps; ++z) {
      // The stream outruns the hardware prefetcher otherwise. One row: ahead in the same stream
      // (StreamAhead). R rows: the next R, one pass ahead (past the last row of a block of rows
      // this reads on into the next).
      if constexpr (R == 1) {
        StreamAhead(r0 + z * 64, kFar);
      } else {
        const char* ahead = reinterpret_cast<const char*>(r0 + R * rowBytes + z * 64);
        for (int r = 0; r < R; ++r) _mm_prefetch(ahead + r * rowBytes, _MM_HINT_T0);
      }
      Step<R, NA, false>(acc, r0, rowBytes, s0, groups, xq, xs, z);
    }
    if (rowBytes % 64 != 0) Step<R, NA, true>(acc, r0, rowBytes, s0, groups, xq, xs, steps);
    for (int r = 0; r < R; ++r)
      for (int a = 0; a < NA; ++a) y[a][m + r] = Hsum512(acc[r][a]) + BiasDot(biases + (m + r) * groups, xsum[a], groups);
  }

  // v's two 256-bit halves added.
  VOXSLAB_VNNI static inline __attribute__((always_inline)) __m256 Halves(__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  }

  // Rows of at most this many steps (q4 K ≤ 1024, q8 K ≤ 512) against one activation go through
  // Laid with Fours: four rows' totals at once; longer rows measured slower so.
  static constexpr int64_t kShortSteps = 8;

  // Steps whose groups one 16-lane vector of scales holds.
  static constexpr int kChunk = 16 / kGroupsPerStep;

  // NA ≤ kVnniMany activation rows against mb weight rows, one weight row at a time, each weight
  // vector unpacked once for all NA. q4's activations are laid out once per call for all the
  // rows, each step's 64 for the low nibbles then its 64 for the high ones, so a step loads them
  // whole instead of joining halves. The scales' products s_g·xs_g are formed for 16 groups
  // at once and spread to each step's lanes by a permute. The same products fused into the same
  // sums as Pass forms them: the bits are Pass's for any NA.
  template <int NA, bool Fours = false>
  VOXSLAB_VNNI static void Laid(const uint8_t* w, const uint16_t* scales, const uint16_t* biases, const int8_t* const* xq,
                                const float* const* xs, const float* const* xsum, float* const* y, int64_t mb, int64_t K) {
    const int64_t groups = K / G;
    const int64_t rowBytes = Q4 ? K / 2 : K;
    const int64_t steps = rowBytes / 64;
    if constexpr (NA == 1 && !Fours)
      if (steps <= kShortSteps) return Laid<1, true>(w, scales, biases, xq, xs, xsum, y, mb, K);
    // One activation on long q8 rows goes through its bytes fast enough that the hardware
    // prefetcher alone keeps ahead (on huge pages, as the weights are); requests of our own slow it.
    const bool ahead = Q4 || NA > 1 || rowBytes < kLongRowQ8;
    // Per activation and step: (q4) the laid-out 128 bytes, (q8) its own 64.
    constexpr int64_t kPer = Q4 ? 128 : 64;
    alignas(64) int8_t laid[Q4 ? kLaidBytes : 64];
    const int8_t* xv[NA];
    for (int a = 0; a < NA; ++a) {
      if constexpr (Q4) {
        int8_t* o = laid + a * steps * kPer;
        for (int64_t z = 0; z < steps; ++z) {
          const int8_t* xb = xq[a] + z * 128;
          std::memcpy(o + z * kPer, xb, 32);
          std::memcpy(o + z * kPer + 32, xb + 64, 32);
          std::memcpy(o + z * kPer + 64, xb + 32, 32);
          std::memcpy(o + z * kPer + 96, xb + 96, 32);
        }
        xv[a] = o;
      } else {
        xv[a] = xq[a];
      }
    }
    const __m512i nib = _mm512_set1_epi8(15);
    const __m512i first = LaneGroups();
    const __m512i next = _mm512_set1_epi32(kGroupsPerStep);
    // Rows of one chunk of groups with up to four activations hold the activations' group values
    // in registers for every row (for more, they would push the sums out).
    const bool held = NA <= 4 && steps <= kChunk;
    __m512 xs1[NA];
    if (held) {
      const __mmask16 k = static_cast<__mmask16>((1u << (steps * kGroupsPerStep)) - 1);
      #pragma GCC unroll 8
      for (int a = 0; a < NA; ++a) xs1[a] = _mm512_maskz_loadu_ps(k, xs[a]);
    }
    [[maybe_unused]] __m256 pend[Fours ? 4 : 1];  // Fours: the halves of up to four rows' sums
    for (int64_t m = 0; m < mb; ++m) {
      const uint8_t* r0 = w + m * rowBytes;
      const uint16_t* s0 = scales + m * groups;
      // Every loop over the activations unrolled, and the half step given a copy: sums indexed at
      // run time or by address are kept in memory by GCC, loaded and stored at every step.
      __m512 acc[1][NA];
      #pragma GCC unroll 8
      for (int a = 0; a < NA; ++a) acc[0][a] = _mm512_setzero_ps();
      for (int64_t z0 = 0; z0 < steps; z0 += kChunk) {
        const int64_t g0 = z0 * kGroupsPerStep;
        const __mmask16 k = static_cast<__mmask16>((1u << std::min<int64_t>(16, (steps - z0) * kGroupsPerStep)) - 1);
        const __m512 sv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, s0 + g0));
        __m512 prod[NA];
        #pragma GCC unroll 8
        for (int a = 0; a < NA; ++a) prod[a] = _mm512_mul_ps(sv, held ? xs1[a] : _mm512_maskz_loadu_ps(k, xs[a] + g0));
        __m512i idx = first;
        const int64_t z1 = std::min(steps, z0 + kChunk);
        for (int64_t z = z0; z < z1; ++z, idx = _mm512_add_epi32(idx, next)) {
          if (ahead) StreamAhead(r0 + z * 64, kFar);
          const __m512i wv = _mm512_loadu_si512(r0 + z * 64);
          const __m512i lo = Q4 ? _mm512_and_si512(wv, nib) : wv;
          const __m512i hi = Q4 ? _mm512_and_si512(_mm512_srli_epi16(wv, 4), nib) : wv;
          #pragma GCC unroll 8
          for (int a = 0; a < NA; ++a) {
            __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xv[a] + z * kPer));
            if (Q4) d = _mm512_dpbusd_epi32(d, hi, _mm512_loadu_si512(xv[a] + z * kPer + 64));
            acc[0][a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_permutexvar_ps(idx, prod[a]), acc[0][a]);
          }
        }
      }
      if (rowBytes % 64 != 0) {
        __m512 half[1][NA];
        #pragma GCC unroll 8
        for (int a = 0; a < NA; ++a) half[0][a] = acc[0][a];
        Step<1, NA, true>(half, r0, rowBytes, s0, groups, xq, xs, steps);
        #pragma GCC unroll 8
        for (int a = 0; a < NA; ++a) acc[0][a] = half[0][a];
      }
      // Hsum512(v) is Hsum of v's two halves added, so Hsum4 with BiasDot4 gives four outputs'
      // bits at once (four activations of a row, or with Fours four rows of one activation): the
      // per-output sums cost as much as a short row's multiply-adds.
      if constexpr (Fours) {
        pend[m % 4] = Halves(acc[0][0]);
        if (m % 4 == 3) {
          alignas(16) float out[4];
          const float* xs4[4] = {xsum[0], xsum[0], xsum[0], xsum[0]};
          _mm_store_ps(out, _mm_add_ps(Hsum4(pend[0], pend[1], pend[2], pend[3]), BiasDot4(biases + (m - 3) * groups, groups, xs4, groups)));
          for (int r = 0; r < 4; ++r) y[0][m - 3 + r] = out[r];
        }
      } else if constexpr (NA == 1) {
        y[0][m] = Hsum512(acc[0][0]) + BiasDot(biases + m * groups, xsum[0], groups);
      } else {
        #pragma GCC unroll 8
        for (int a0 = 0; a0 < NA; a0 += 4) {
          // A last set of fewer than four repeats its last activation in the spare lanes.
          const int b1 = std::min(a0 + 1, NA - 1), b2 = std::min(a0 + 2, NA - 1), b3 = std::min(a0 + 3, NA - 1);
          const float* xs4[4] = {xsum[a0], xsum[b1], xsum[b2], xsum[b3]};
          alignas(16) float out[4];
          _mm_store_ps(out, _mm_add_ps(Hsum4(Halves(acc[0][a0]), Halves(acc[0][b1]), Halves(acc[0][b2]), Halves(acc[0][b3])),
                                       BiasDot4(biases + m * groups, 0, xs4, groups)));
          for (int a = a0; a < std::min(a0 + 4, NA); ++a) y[a][m] = out[a - a0];
        }
      }
    }
    if constexpr (Fours)
      for (int64_t m = mb - mb % 4; m < mb; ++m) y[0][m] = Hsum(pend[m % 4]) + BiasDot(biases + m * groups, xsum[0], groups);
  }

  // Every weight row of a block against NA activations, where Laid does not take them: one
  // activation one weight row at a time (a single stream kept ahead of), more four rows per pass
  // (the R × NA accumulators, R weight vectors and the activation vectors must stay in the 32
  // registers).
  template <int NA>
  VOXSLAB_VNNI static void Rows(const uint8_t* w, const uint16_t* scales, const uint16_t* biases, const int8_t* const* xq, const float* const* xs,
                                const float* const* xsum, float* const* y, int64_t mb, int64_t K) {
    const int64_t groups = K / G;
    const int64_t rowBytes = Q4 ? K / 2 : K;
    constexpr int R = NA == 1 ? 1 : 4;
    int64_t m = 0;
    for (; m + R <= mb; m += R) Pass<R, NA>(w + m * rowBytes, scales + m * groups, biases, xq, xs, xsum, y, m, K);
    for (; m < mb; ++m) Pass<1, NA>(w + m * rowBytes, scales + m * groups, biases, xq, xs, xsum, y, m, K);
  }
};

// Up to kVnniMany activation rows against `mb` weight rows (group 32 or 64): Int512::Laid where
// they fit (VnniLaid), otherwise up to four through Int512::Rows.
VOXSLAB_VNNI void GemvIntVnniMulti(bool q4, const uint8_t* w, const uint16_t* scales, const uint16_t* biases, int group,
                                   const int8_t* const* xq, const float* const* xs, const float* const* xsum,
                                   float* const* y, int na, int64_t mb, int64_t K) {
#define VOXSLAB_LAID(Q, G)                                                                \
  switch (na) {                                                                           \
    case 1: Int512<Q, G>::Laid<1>(w, scales, biases, xq, xs, xsum, y, mb, K); break;      \
    case 2: Int512<Q, G>::Laid<2>(w, scales, biases, xq, xs, xsum, y, mb, K); break;      \
    case 3: Int512<Q, G>::Laid<3>(w, scales, biases, xq, xs, xsum, y, mb, K); break;      \
    case 4: Int512<Q, G>::Laid<4>(w, scales, biases, xq, xs, xsum, y, mb, K); break;      \
    case 5: Int512<Q, G>::Laid<5>(w, scales, biases, xq, xs, xsum, y, mb, K); break;      \
    default: Int512<Q, G>::Laid<6>(w, scales, biases, xq, xs, xsum, y, mb, K); break;     \
  }
#define VOXSLAB_ROWS(Q, G)                                          \
  switch (na) {                                                     \
    case 1: Int512<Q, G>::Rows<1>(w, scales, biases, xq, xs, xsum, y, mb, K); break; \
    case 2: Int512<Q, G>::Rows<2>(w, scales, biases, xq, xs, xsum, y, mb, K); break; \
    case 3: Int512<Q, G>::Rows<3>(w, scales, biases, xq, xs, xsum, y, mb, K); break; \
    default: Int512<Q, G>::Rows<4>(w, scales, biases, xq, xs, xsum, y, mb, K); break; \
  }
  if (VnniLaid(q4, na, K)) {
    if (q4) {
      if (group == 32) VOXSLAB_LAID(true, 32) else VOXSLAB_LAID(true, 64)
    } else {
      if (group == 32) VOXSLAB_LAID(false, 32) else VOXSLAB_LAID(false, 64)
    }
  } else if (q4) {
    if (group == 32) VOXSLAB_ROWS(true, 32) else VOXSLAB_ROWS(true, 64)
  } else {
    if (group == 32) VOXSLAB_ROWS(false, 32) else VOXSLAB_ROWS(false, 64)
  }
#undef VOXSLAB_ROWS
#undef VOXSLAB_LAID
}

// Integer GEMV with AVX-512 VNNI on 512-bit vectors (Int512), one activation row.
VOXSLAB_VNNI void GemvIntVnni(bool q4, const uint8_t* w, const uint16_t* scales, const uint16_t* biases, int group,
                              const int8_t* xq, const float* xs, const float* xsum, float* y, int64_t M, int64_t K) {
  GemvIntVnniMulti(q4, w, scales, biases, group, &xq, &xs, &xsum, &y, 1, M, K);
}

// 16 float weights (f32, f16 or bf16) from element i, as f32.
__attribute__((target("avx512f,avx2,f16c"))) inline __m512 Load16(WeightType type, const void* w, int64_t i) {
  if (type == WeightType::kF32) return _mm512_loadu_ps(static_cast<const float*>(w) + i);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i));
  if (type == WeightType::kF16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// Float rows of at most this many bytes stream faster one at a time, kept ahead of by prefetch;
// longer ones four at a time, where one row's single accumulator would bound the pace.
constexpr int64_t kShortFloatRow = 8192;

// AVX-512 GEMV for float weights; quantized weights use the AVX2 path. A row's sum does not
// depend on how many rows a pass takes.
__attribute__((target("avx512f,avx2,fma,f16c"))) void GemvAvx512(WeightType type, const void* w, const uint16_t* scales,
                                                                  const uint16_t* biases, int group, const float* x, float* y,
                                                                  int64_t M, int64_t K, float* xsum) {
  if (Quantized(type)) {
    GemvAvx2(type, w, scales, biases, group, x, y, M, K, xsum);
    return;
  }
  const int64_t K16 = K & ~int64_t{15};
  const int64_t bytes = type == WeightType::kF32 ? 4 : 2;
  const char* wb = static_cast<const char*>(w);
  int64_t m = 0;
  if (K * bytes > kShortFloatRow) {
    for (; m + 4 <= M; m += 4) {
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      int64_t k = 0;
      for (; k < K16; k += 16) {
        const __m512 xv = _mm512_loadu_ps(x + k);
        a0 = _mm512_fmadd_ps(Load16(type, w, m * K + k), xv, a0);
        a1 = _mm512_fmadd_ps(Load16(type, w, (m + 1) * K + k), xv, a1);
        a2 = _mm512_fmadd_ps(Load16(type, w, (m + 2) * K + k), xv, a2);
        a3 = _mm512_fmadd_ps(Load16(type, w, (m + 3) * K + k), xv, a3);
      }
      float t[4] = {0, 0, 0, 0};
      for (; k < K; ++k)
        for (int r = 0; r < 4; ++r) t[r] += FloatAt(type, w, (m + r) * K + k) * x[k];
      y[m] = Hsum512(a0) + t[0];
      y[m + 1] = Hsum512(a1) + t[1];
      y[m + 2] = Hsum512(a2) + t[2];
      y[m + 3] = Hsum512(a3) + t[3];
    }
  }
  for (; m < M; ++m) {
    __m512 a = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k < K16; k += 16) {
      StreamAhead(wb + (m * K + k) * bytes, kFarAhead);
      a = _mm512_fmadd_ps(Load16(type, w, m * K + k), _mm512_loadu_ps(x + k), a);
    }
    float t = 0;
    for (; k < K; ++k) t += FloatAt(type, w, m * K + k) * x[k];
    y[m] = Hsum512(a) + t;
  }
}

#pragma GCC diagnostic pop
#endif

using GemvFn = void (*)(WeightType, const void*, const uint16_t*, const uint16_t*, int, const float*, float*, int64_t, int64_t, float*);
using GemvIntFn = void (*)(bool, const uint8_t*, const uint16_t*, const uint16_t*, int, const int8_t*, const float*, const float*, float*,
                           int64_t, int64_t);

GemvFn ChooseGemv() {
#ifdef VOXSLAB_X86
  switch (ChosenIsa()) {
    case Isa::kAvx512: return GemvAvx512;
    case Isa::kAvx2: return GemvAvx2;
    case Isa::kScalar: break;
  }
#endif
  return GemvScalar;
}

// The integer path for shapes the vector kernels take (VectorIntShape); others run GemvIntScalar.
GemvIntFn ChooseGemvInt() {
#ifdef VOXSLAB_X86
  if (ChosenVnni()) return GemvIntVnni;
  if (ChosenIsa() != Isa::kScalar) return GemvIntAvx2;
#endif
  return GemvIntScalar;
}

const GemvFn kGemv = ChooseGemv();
const GemvIntFn kGemvIntVector = ChooseGemvInt();

// The vector kernels take whole 64-element blocks and the groups the format makes (32 or 64).
bool VectorIntShape(int group, int64_t K) {
  return K % 64 == 0 && (group == 32 || group == 64);
}

// Rows [m0, m0 + rows) of y = W·x for q8/q4 weights and int8 activations (xq, their scales xs
// and group sums xsum): the vector path where the shape allows, else the scalar one.
void IntRows(const WeightRef& w, int64_t m0, int64_t rows, int64_t K, const int8_t* xq, const float* xs, const float* xsum,
             float* y) {
  const bool q4 = w.type == WeightType::kQ4;
  const int64_t groups = K / w.group;
  const auto* base = static_cast<const uint8_t*>(w.data) + (q4 ? m0 * K / 2 : m0 * K);
  const auto fn = VectorIntShape(w.group, K) ? kGemvIntVector : GemvIntScalar;
  fn(q4, base, w.scales + m0 * groups, w.biases + m0 * groups, w.group, xq, xs, xsum, y, rows, K);
}

struct FloatTask {
  WeightType type;
  const uint8_t* w;
  int64_t elemBytes;
  const float* x;
  float* y;
  int64_t K;
};

void RunFloatRows(const void* c, int64_t r0, int64_t r1) {
  const FloatTask& t = *static_cast<const FloatTask*>(c);
  kGemv(t.type, t.w + r0 * t.K * t.elemBytes, nullptr, nullptr, 0, t.x, t.y + r0, r1 - r0, t.K, nullptr);
}

}  // namespace

void Gemv(WeightType type, const void* w, const uint16_t* scales, const uint16_t* biases, int group, const float* x, float* y,
          int64_t M, int64_t K, float* xsum) {
  kGemv(type, w, scales, biases, group, x, y, M, K, xsum);
}

int64_t GemvIntScratchBytes(int64_t K, int group) { return (K + 2 * 4 * (K / group) + 64 + 63) & ~int64_t{63}; }

int64_t GemvRowsScratchBytes(int64_t n, int64_t K, int group) { return group > 0 ? n * GemvIntScratchBytes(K, group) : 0; }

namespace {

struct RowsTask {
  WeightRef w;
  const float* X;
  float* Y;
  const uint8_t* scratch;  // per activation row: xsum, xs, xq
  int64_t per, n, M, K, elemBytes;
};

// Rows [r0, r1) of every Y[t], in blocks of weight rows that stay in cache across the n rows.
void RunRowsBlocks(const void* c, int64_t r0, int64_t r1) {
  const RowsTask& t = *static_cast<const RowsTask*>(c);
  const bool quant = Quantized(t.w.type);
  const bool q4 = t.w.type == WeightType::kQ4;
  const int64_t groups = quant ? t.K / t.w.group : 0;
  constexpr int64_t kBlock = 32;
  for (int64_t m0 = r0; m0 < r1; m0 += kBlock) {
    const int64_t mb = std::min(kBlock, r1 - m0);
#ifdef VOXSLAB_X86
    // Several positions per pass over the block (VNNI where Laid takes them, and AVX2 q4: six; else
    // four), each weight block unpacked once for them.
    if (quant && VectorIntShape(t.w.group, t.K) && (kGemvIntVector == GemvIntVnni || kGemvIntVector == GemvIntAvx2)) {
      const uint8_t* wsub = static_cast<const uint8_t*>(t.w.data) + (q4 ? m0 * t.K / 2 : m0 * t.K);
      constexpr int kMany = std::max(kAvx2Many, kVnniMany);
      const int64_t step = kGemvIntVector == GemvIntAvx2 ? (q4 ? kAvx2Many : 4) : VnniLaid(q4, kVnniMany, t.K) ? kVnniMany : 4;
      for (int64_t i0 = 0; i0 < t.n; i0 += step) {
        const auto many = kGemvIntVector == GemvIntVnni ? GemvIntVnniMulti : GemvIntAvx2Many;
        const int na = static_cast<int>(std::min<int64_t>(step, t.n - i0));
        const int8_t* xq[kMany] = {};
        const float* xs[kMany] = {};
        const float* xsum[kMany] = {};
        float* y[kMany] = {};
        for (int a = 0; a < na; ++a) {
          xsum[a] = reinterpret_cast<const float*>(t.scratch + (i0 + a) * t.per);
          xs[a] = xsum[a] + groups;
          xq[a] = reinterpret_cast<const int8_t*>(xs[a] + groups);
          y[a] = t.Y + (i0 + a) * t.M + m0;
        }
        many(q4, wsub, t.w.scales + m0 * groups, t.w.biases + m0 * groups, t.w.group, xq, xs, xsum, y, na, mb, t.K);
      }
      continue;
    }
#endif
    for (int64_t i = 0; i < t.n; ++i) {
      if (quant) {
        const float* xsum = reinterpret_cast<const float*>(t.scratch + i * t.per);
        const float* xs = xsum + groups;
        const int8_t* xq = reinterpret_cast<const int8_t*>(xs + groups);
        IntRows(t.w, m0, mb, t.K, xq, xs, xsum, t.Y + i * t.M + m0);
      } else {
        const uint8_t* wsub = static_cast<const uint8_t*>(t.w.data) + m0 * t.K * t.elemBytes;
        kGemv(t.w.type, wsub, nullptr, nullptr, 0, t.X + i * t.K, t.Y + i * t.M + m0, mb, t.K, nullptr);
      }
    }
  }
}

// Each of the n rows of X quantized into its `per` bytes of scratch: xsum, xs, then xq.
void QuantizeRows(const float* X, int64_t n, int64_t K, int group, bool q4, void* scratch, int64_t per) {
  const int64_t groups = K / group;
  for (int64_t t = 0; t < n; ++t) {
    float* xsum = reinterpret_cast<float*>(static_cast<uint8_t*>(scratch) + t * per);
    float* xs = xsum + groups;
    QuantizeActivations(X + t * K, K, group, q4, reinterpret_cast<int8_t*>(xs + groups), xs, xsum);
  }
}

// f(i, a, b) for each of `count` stacked matrices (matrix i's first global row start[i]) that
// global rows [r0, r1) reach, with [a, b) its own rows among them.
template <typename F>
inline void EachMatrixPart(const int64_t* start, int count, int64_t r0, int64_t r1, F&& f) {
  for (int i = 0; i < count; ++i) {
    const int64_t a = std::max(r0, start[i]);
    const int64_t b = std::min(r1, start[i + 1]);
    if (a < b) f(i, a - start[i], b - start[i]);
  }
}

struct ManyRowsTask {
  const RowsTask* tasks;
  const int64_t* start;  // [count + 1] the first global row of each matrix
  int count;
};

// Global rows [r0, r1) of the stacked matrices: each part of each matrix as GemvRows computes it.
void RunManyRowsBlocks(const void* c, int64_t r0, int64_t r1) {
  const ManyRowsTask& t = *static_cast<const ManyRowsTask*>(c);
  EachMatrixPart(t.start, t.count, r0, r1, [&](int i, int64_t a, int64_t b) { RunRowsBlocks(&t.tasks[i], a, b); });
}

}  // namespace

void GemvRows(WeightType type, const void* w, const uint16_t* scales, const uint16_t* biases, int group, const float* X, float* Y,
              int64_t n, int64_t M, int64_t K, void* scratch) {
  const bool quant = Quantized(type);
  const int64_t per = quant ? GemvIntScratchBytes(K, group) : 0;
  if (quant) QuantizeRows(X, n, K, group, type == WeightType::kQ4, scratch, per);
  const RowsTask task{{type, w, scales, biases, group}, X, Y, static_cast<const uint8_t*>(scratch), per, n, M, K, ElemBytes(type)};
  Pool().Run(RunRowsBlocks, &task, M, 32, n * M * K);
}

void GemvRowsMany(const WeightRef* w, float* const* Y, const int64_t* M, int count, const float* X, int64_t n, int64_t K, void* scratch) {
  const int64_t per = GemvIntScratchBytes(K, w[0].group);
  QuantizeRows(X, n, K, w[0].group, w[0].type == WeightType::kQ4, scratch, per);
  RowsTask tasks[kGemvManyMax];
  int64_t start[kGemvManyMax + 1] = {0};
  for (int i = 0; i < count; ++i) {
    tasks[i] = RowsTask{w[i], X, Y[i], static_cast<const uint8_t*>(scratch), per, n, M[i], K, ElemBytes(w[i].type)};
    start[i + 1] = start[i] + M[i];
  }
  const ManyRowsTask task{tasks, start, count};
  Pool().Run(RunManyRowsBlocks, &task, start[count], 32, n * start[count] * K);
}

void GemvSplit(WeightType type, const void* w, const float* x, float* y, int64_t M, int64_t K) {
  const FloatTask task{type, static_cast<const uint8_t*>(w), ElemBytes(type), x, y, K};
  Pool().Run(RunFloatRows, &task, M, 4, M * K);
}

namespace {

struct ManyTask {
  const WeightRef* w;
  float* const* y;
  const int64_t* start;  // [count + 1] the first global row of each matrix
  int count;
  const int8_t* xq;
  const float* xs;
  const float* xsum;
  int64_t K;
};

// Global rows [r0, r1) of the stacked matrices: each part of each matrix as GemvInt computes it.
void RunManyRows(const void* c, int64_t r0, int64_t r1) {
  const ManyTask& t = *static_cast<const ManyTask*>(c);
  EachMatrixPart(t.start, t.count, r0, r1, [&](int i, int64_t a, int64_t b) { IntRows(t.w[i], a, b - a, t.K, t.xq, t.xs, t.xsum, t.y[i] + a); });
}

}  // namespace

void GemvIntMany(const WeightRef* w, float* const* y, const int64_t* M, int count, const float* x, int64_t K, void* scratch) {
  const int group = w[0].group;
  const bool q4 = w[0].type == WeightType::kQ4;
  // Scratch: the group sums and activation scales (f32), then the int8 activations.
  float* xsum = static_cast<float*>(scratch);
  float* xs = xsum + K / group;
  int8_t* xq = reinterpret_cast<int8_t*>(xs + K / group);
  QuantizeActivations(x, K, group, q4, xq, xs, xsum);
  int64_t start[kGemvManyMax + 1] = {0};
  for (int i = 0; i < count; ++i) start[i + 1] = start[i] + M[i];
  const ManyTask task{w, y, start, count, xq, xs, xsum, K};
  Pool().Run(RunManyRows, &task, start[count], 4, start[count] * K);
}

void GemvInt(WeightType type, const void* w, const uint16_t* scales, const uint16_t* biases, int group, const float* x, float* y,
             int64_t M, int64_t K, void* scratch) {
  const WeightRef ref{type, w, scales, biases, group};
  GemvIntMany(&ref, &y, &M, 1, x, K, scratch);
}

}  // namespace voxslab
