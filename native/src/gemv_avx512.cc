// The AVX-512 GEMV: float rows and activation quantization on AVX-512F (one region), the
// integer rows on AVX-512 VNNI (another: VL, BW and VNNI besides), each region's target set once.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "gemv_isa.h"

#ifdef VOXSLAB_X86
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
#include "gemv_blocks.h"

namespace voxslab::gemv {

// GCC 12 reports the intrinsics' own undefined pass-through operands as uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// v[j] lane r becomes v[r] lane j (a 16×16 block of floats transposed in registers).
inline __attribute__((always_inline)) void Transpose16(__m512 (&v)[16]) {
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

// The same values as QuantizeScalar, bit for bit: each group's sum still adds its elements one
// after another from 0, but sixteen groups go at once, one per lane (their rows transposed in
// blocks of 16); the maximum and the rounding are exact in any order. min/max take their operands in
// the order std::min/std::max do, so a NaN input gives 127 as there.
void QuantizeAvx512(const float* x, int64_t K, int group, int8_t* xq, float* xs, float* xsum) {
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

// 16 float weights (f32, f16 or bf16) from element i, as f32.
inline __m512 Load16(WeightType type, const void* w, int64_t i) {
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
void GemvAvx512(WeightType type, const void* w, const uint16_t* scales,
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

}  // namespace voxslab::gemv

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")

namespace voxslab::gemv {

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
  static inline __attribute__((always_inline)) __m512 Lanes(const float* p) {
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
  static inline __attribute__((always_inline)) __m512 Lanes(const uint16_t* p) {
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
  static inline __attribute__((always_inline)) __m512i LaneGroups() {
    return _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                             __builtin_ctz(static_cast<unsigned>(kLanesPerGroup)));
  }

  // Lane l of the result is v[l / kLanesPerGroup].
  static inline __attribute__((always_inline)) __m512 Spread(__m128 v) {
    return _mm512_permutexvar_ps(LaneGroups(), _mm512_castps128_ps512(v));
  }

  template <int R, int NA, bool Half>
  static inline __attribute__((always_inline)) void Step(__m512 (&acc)[R][NA], const uint8_t* r0, int64_t rowBytes,
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
  static void Pass(const uint8_t* r0, const uint16_t* s0, const uint16_t* biases, const int8_t* const* xq, const float* const* xs,
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
  static inline __attribute__((always_inline)) __m256 Halves(__m512 v) {
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
  static void Laid(const uint8_t* w, const uint16_t* scales, const uint16_t* biases, const int8_t* const* xq,
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
  static void Rows(const uint8_t* w, const uint16_t* scales, const uint16_t* biases, const int8_t* const* xq, const float* const* xs,
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
void GemvIntVnniMulti(bool q4, const uint8_t* w, const uint16_t* scales, const uint16_t* biases, int group,
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
void GemvIntVnni(bool q4, const uint8_t* w, const uint16_t* scales, const uint16_t* biases, int group,
                              const int8_t* xq, const float* xs, const float* xsum, float* y, int64_t M, int64_t K) {
  GemvIntVnniMulti(q4, w, scales, biases, group, &xq, &xs, &xsum, &y, 1, M, K);
}

#pragma GCC diagnostic pop

}  // namespace voxslab::gemv

#pragma GCC pop_options
#endif
