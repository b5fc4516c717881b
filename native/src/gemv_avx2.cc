// The AVX2 + FMA + F16C GEMV: float rows, the integer rows (q8/q4 × int8 activations, one or
// several activation rows per pass over the weights), and activation quantization.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "gemv_isa.h"

#ifdef VOXSLAB_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "gemv_blocks.h"

namespace voxslab::gemv {

// GCC 12 reports the intrinsics' own undefined pass-through operands as uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// SplitEvensOdds with byte shuffles: each 16-byte lane to its evens then odds, then the lanes'
// halves gathered.
void SplitEvensOddsAvx2(int8_t* xq, int64_t K) {
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

// The same for 8×8 on AVX2.
inline __attribute__((always_inline)) void Transpose8(__m256 (&v)[8]) {
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

// The same on AVX2 for groups of a multiple of 32: eight groups' sums at once (one per lane, 8×8 blocks),
// then 32 values of a group at a time, packed to bytes in order.
void QuantizeAvx2(const float* x, int64_t K, int group, int8_t* xq, float* xs, float* xsum) {
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

// 8 quantized weights starting at element `at` (q8 bytes, or q4 nibbles low first), as f32.
inline __m256 QuantInts(bool q8, const uint8_t* w, int64_t at) {
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
inline void Q4Ints16(const uint8_t* w, int64_t at, __m256& lo8, __m256& hi8) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + (at >> 1)));
  const __m128i mask = _mm_set1_epi8(15);
  const __m128i lo = _mm_and_si128(b, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
  const __m128i ordered = _mm_unpacklo_epi8(lo, hi);  // b0.lo, b0.hi, b1.lo, b1.hi, …
  lo8 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(ordered));
  hi8 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(ordered, 8)));
}

// 8 quantized weights starting at element `at` (q8 bytes, or q4 nibbles low first) times x.
inline __m256 QuantChunk(bool q8, const uint8_t* w, int64_t at, const float* x) {
  return _mm256_mul_ps(QuantInts(q8, w, at), _mm256_loadu_ps(x));
}

void GemvAvx2(WeightType type, const void* w, const uint16_t* scales,
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
  static inline void Ahead(const uint8_t* p) {
    for (int64_t o = 0; o < kBlocks8 * 32; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + kStreamAhead + o), _MM_HINT_T0);
  }

  // Lanes of block j within its eight groups.
  static inline __m256i Index(int64_t j) {
    if constexpr (kTwo) {
      const int e = static_cast<int>(2 * j);
      return _mm256_setr_epi32(e, e, e, e, e + 1, e + 1, e + 1, e + 1);
    } else {
      return _mm256_set1_epi32(static_cast<int>(j / kBlocksPerGroup));
    }
  }

  // The lane scales of groups g0 to g0 + 7 of R rows rowStride scales apart.
  template <int R>
  static inline void Fill(float (*s8)[8], const uint16_t* sc, int64_t rowStride, const float* xs, int64_t g0) {
    const __m256 x8 = _mm256_loadu_ps(xs + g0);
    for (int r = 0; r < R; ++r)
      _mm256_store_ps(s8[r], _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + r * rowStride + g0))), x8));
  }

  // R weight rows `stride` rows apart (the rows' scales as far apart), each row's lanes into acc.
  template <int R>
  static inline void Rows(const uint8_t* w, int64_t rowBytes, const uint16_t* sc, int64_t groups,
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
  static inline __m256 Dot(__m256i wa, __m256i wb, __m256i xa, __m256i xh, const __m256i* terms, int64_t b) {
    if constexpr (Q4) return Avx2Dot(true, wa, wb, xa, xh);
    else return Avx2DotQ8(wa, wb, xa, terms != nullptr ? _mm256_load_si256(terms + b) : Avx2Q8Term(xa));
  }

  // One weight row against NA activation rows: each weight block is loaded and unpacked once for
  // all of them; per activation the same operations, in the same order, as Rows<1>.
  template <int NA>
  static void Multi(const uint8_t* w, const uint16_t* sc, int64_t groups, int64_t rowBytes,
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
  static void Many(const uint8_t* w, const uint16_t* sc, const uint16_t* bi, const int8_t* const* xq,
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
  static void RunMany(const uint8_t* w, const uint16_t* sc, const uint16_t* bi, const int8_t* const* xq,
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

  static void Run(const uint8_t* w, const uint16_t* sc, const uint16_t* bi, const int8_t* xq,
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
  static void One(const uint8_t* w, const uint16_t* sc, const uint16_t* bi, const int8_t* xq,
                                                           const float* xs, const float* xsum, float* y, int64_t m, int64_t groups,
                                                           int64_t rowBytes) {
    __m256 acc;
    Rows<1>(w + m * rowBytes, rowBytes, sc + m * groups, groups, xq, xs, &acc, 1);
    y[m] = Hsum(acc) + BiasDot(bi + m * groups, xsum, groups);
  }
};

// na activation rows (at most kAvx2Many for q4, 4 for q8) against the same weight rows
// (GemvRows on AVX2): row m of activation a has the bits GemvIntAvx2 gives it.
void GemvIntAvx2Many(bool q4, const uint8_t* w, const uint16_t* scales, const uint16_t* biases,
                                                         int group, const int8_t* const* xq, const float* const* xs,
                                                         const float* const* xsum, float* const* y, int na, int64_t M, int64_t K) {
  if (q4) (group == 32 ? IntRowsAvx2<true, 32>::RunMany : IntRowsAvx2<true, 64>::RunMany)(w, scales, biases, xq, xs, xsum, y, na, M, K);
  else (group == 32 ? IntRowsAvx2<false, 32>::RunMany : IntRowsAvx2<false, 64>::RunMany)(w, scales, biases, xq, xs, xsum, y, na, M, K);
}

// Integer GEMV on AVX2 without VNNI, in 256-bit lanes (a machine without VNNI has one integer
// path, so its rows agree across calls as the VNNI path's do).
void GemvIntAvx2(bool q4, const uint8_t* w, const uint16_t* scales, const uint16_t* biases,
                                                     int group, const int8_t* xq, const float* xs, const float* xsum,
                                                     float* y, int64_t M, int64_t K) {
  if (q4) (group == 32 ? IntRowsAvx2<true, 32>::Run : IntRowsAvx2<true, 64>::Run)(w, scales, biases, xq, xs, xsum, y, M, K);
  else (group == 32 ? IntRowsAvx2<false, 32>::Run : IntRowsAvx2<false, 64>::Run)(w, scales, biases, xq, xs, xsum, y, M, K);
}

// GemvAvx2's f32 rows for na ≤ kF32Many activation rows per pass over the weights: the same
// four-row passes, each (weight row, activation) keeping its own accumulator and its own
// fixed-order sum, so every y equals GemvAvx2's bits; the weights are loaded once for all.
void GemvF32Avx2Many(const float* w, const float* const* x, float* const* y, int na, int64_t M, int64_t K) {
  const int64_t K8 = K & ~int64_t{7};
  int64_t m0 = 0;
  if (na == kF32Many) {
    for (; m0 + 4 <= M; m0 += 4) {
      const float* r0 = w + m0 * K;
      __m256 acc[4][kF32Many];
      for (int r = 0; r < 4; ++r)
        for (int a = 0; a < kF32Many; ++a) acc[r][a] = _mm256_setzero_ps();
      for (int64_t k = 0; k < K8; k += 8) {
        __m256 xv[kF32Many];
        for (int a = 0; a < kF32Many; ++a) xv[a] = _mm256_loadu_ps(x[a] + k);
        for (int r = 0; r < 4; ++r) {
          const __m256 wv = _mm256_loadu_ps(r0 + r * K + k);
          for (int a = 0; a < kF32Many; ++a) acc[r][a] = _mm256_fmadd_ps(wv, xv[a], acc[r][a]);
        }
      }
      for (int a = 0; a < kF32Many; ++a) {
        float t[4] = {0, 0, 0, 0};
        for (int64_t k = K8; k < K; ++k)
          for (int r = 0; r < 4; ++r) t[r] += r0[r * K + k] * x[a][k];
        for (int r = 0; r < 4; ++r) y[a][m0 + r] = Hsum(acc[r][a]) + t[r];
      }
    }
  }
  // Fewer activations, and the rows past the last four: GemvAvx2 itself.
  for (int a = 0; a < na; ++a)
    if (m0 < M) GemvAvx2(WeightType::kF32, w + m0 * K, nullptr, nullptr, 0, x[a], y[a] + m0, M - m0, K, nullptr);
}

#pragma GCC diagnostic pop

}  // namespace voxslab::gemv

#pragma GCC pop_options
#endif
