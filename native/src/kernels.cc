#include "kernels.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define VOXSLAB_X86 1
#endif

namespace voxslab {

namespace {

inline float Bf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float F16(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exp = 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      u = sign | ((exp + 112) << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Element (n, k) of a weight matrix [N][K] of any type, as f32.
inline float WeightAt(const WeightRef& w, int64_t n, int64_t k, int64_t K) {
  const int64_t i = n * K + k;
  switch (w.type) {
    case WeightType::kF32: return static_cast<const float*>(w.data)[i];
    case WeightType::kF16: return F16(static_cast<const uint16_t*>(w.data)[i]);
    case WeightType::kBF16: return Bf16(static_cast<const uint16_t*>(w.data)[i]);
    default: {
      const uint8_t* b = static_cast<const uint8_t*>(w.data);
      const float q = w.type == WeightType::kQ8 ? b[i] : ((b[i >> 1] >> ((i & 1) * 4)) & 15);
      const int64_t g = n * (K / w.group) + k / w.group;
      return w.scales[g] * q + w.biases[g];
    }
  }
}

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

void GemvScalar(WeightType type, const void* w, const float* scales, const float* biases, int group, const float* x, float* y,
                int64_t M, int64_t K, float* xsum) {
  if (type == WeightType::kQ8 || type == WeightType::kQ4) GroupSums(x, K, group, xsum);
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
          acc += scales[m * groups + g] * q + biases[m * groups + g] * xsum[g];
        }
        y[m] = acc;
        break;
      }
    }
  }
}

// ---- integer dot products with int8 activations (q8/q4 weights) ---------------------------

// Per group g: xs[g] = max|x|/127, xq = x/xs rounded to nearest (ties to even) as int8,
// xsum[g] = Σ x in f32. For q4 each 64-element block of xq is stored evens first, then odds:
// the order of the low and high nibbles of its 32 packed bytes.
void QuantizeActivations(const float* x, int64_t K, int group, bool q4, int8_t* xq, float* xs, float* xsum) {
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
  if (q4) {
    int8_t tmp[64];
    for (int64_t b = 0; b + 64 <= K; b += 64) {
      for (int i = 0; i < 32; ++i) {
        tmp[i] = xq[b + 2 * i];
        tmp[32 + i] = xq[b + 2 * i + 1];
      }
      std::memcpy(xq + b, tmp, 64);
    }
  }
}

// y[m] = Σ_g s_g·xs_g·(Σ q·xq) + Σ_g b_g·xsum_g, the integer sums exact.
void GemvIntScalar(bool q4, const uint8_t* w, const float* scales, const float* biases, int group, const int8_t* xq,
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
      acc += scales[m * groups + g] * xs[g] * static_cast<float>(dot);
      bacc += biases[m * groups + g] * xsum[g];
    }
    y[m] = acc + bacc;
  }
}

#ifdef VOXSLAB_X86
__attribute__((target("avx2,fma"))) inline float Hsum(__m256 v) {
  alignas(32) float l[8];
  _mm256_store_ps(l, v);
  return (((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])));
}

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
  __m256i iv;
  if (q8) {
    iv = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + at)));
  } else {
    uint32_t packed;
    std::memcpy(&packed, w + (at >> 1), 4);
    iv = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(packed)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                          _mm256_set1_epi32(15));
  }
  return _mm256_mul_ps(_mm256_cvtepi32_ps(iv), _mm256_loadu_ps(x));
}

__attribute__((target("avx2,fma,f16c"))) void GemvAvx2(WeightType type, const void* w, const float* scales,
                                                        const float* biases, int group, const float* x, float* y,
                                                        int64_t M, int64_t K, float* xsum) {
  if (type == WeightType::kQ8 || type == WeightType::kQ4) {
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
  if (type == WeightType::kQ8 || type == WeightType::kQ4) {
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
        acc[0] = _mm256_fmadd_ps(_mm256_set1_ps(scales[m0 * groups + g]), q0, acc[0]);
        acc[1] = _mm256_fmadd_ps(_mm256_set1_ps(scales[(m0 + 1) * groups + g]), q1, acc[1]);
        acc[2] = _mm256_fmadd_ps(_mm256_set1_ps(scales[(m0 + 2) * groups + g]), q2, acc[2]);
        acc[3] = _mm256_fmadd_ps(_mm256_set1_ps(scales[(m0 + 3) * groups + g]), q3, acc[3]);
      }
      for (int r = 0; r < 4; ++r) {
        const float* bi = biases + (m0 + r) * groups;
        __m256 bacc = _mm256_setzero_ps();
        int64_t g = 0;
        for (; g + 8 <= groups; g += 8) bacc = _mm256_fmadd_ps(_mm256_loadu_ps(bi + g), _mm256_loadu_ps(xsum + g), bacc);
        float btail = 0;
        for (; g < groups; ++g) btail += bi[g] * xsum[g];
        y[m0 + r] = Hsum(acc[r]) + (Hsum(bacc) + btail);
      }
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
        const float* sc = scales + m * groups;
        const float* bi = biases + m * groups;
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
          acc = _mm256_fmadd_ps(_mm256_set1_ps(sc[g]), _mm256_add_ps(q0, q1), acc);
        }
        __m256 bacc = _mm256_setzero_ps();
        int64_t g = 0;
        for (; g + 8 <= groups; g += 8) bacc = _mm256_fmadd_ps(_mm256_loadu_ps(bi + g), _mm256_loadu_ps(xsum + g), bacc);
        float btail = 0;
        for (; g < groups; ++g) btail += bi[g] * xsum[g];
        const float acc_sum = Hsum(acc) + (Hsum(bacc) + btail);
        y[m] = acc_sum;
        break;
      }
    }
  }
}

#define VOXSLAB_VNNI __attribute__((target("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma")))

// Lane scales s_g·xs_g of one 32-byte block: group g, or (q4, group 32) groups g and g + 1,
// four lanes each.
__attribute__((target("avx2,fma"))) inline __m256 VnniScale(const float* sc, const float* xs, int64_t g, bool two) {
  if (!two) return _mm256_set1_ps(sc[g] * xs[g]);
  return _mm256_setr_m128(_mm_set1_ps(sc[g] * xs[g]), _mm_set1_ps(sc[g + 1] * xs[g + 1]));
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

// Integer dot products of one 32-byte weight block with the block's activations, per int32 lane.
VOXSLAB_VNNI inline __m256 VnniDot(bool q4, const uint8_t* p, __m256i xa, __m256i xb) {
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  __m256i d;
  if (q4) {
    const __m256i nib = _mm256_set1_epi8(15);
    const __m256i lo = _mm256_and_si256(wv, nib);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(wv, 4), nib);
    d = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), lo, xa), hi, xb);
  } else {
    d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wv, xa);
  }
  return _mm256_cvtepi32_ps(d);
}

// Σ_g b_g·xsum_g of one row.
__attribute__((target("avx2,fma"))) inline float VnniBias(const float* bi, const float* xsum, int64_t groups) {
  __m256 bacc = _mm256_setzero_ps();
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8) bacc = _mm256_fmadd_ps(_mm256_loadu_ps(bi + g), _mm256_loadu_ps(xsum + g), bacc);
  float t = 0;
  for (; g < groups; ++g) t += bi[g] * xsum[g];
  return Hsum(bacc) + t;
}

// Integer GEMV with AVX-512 VNNI on 256-bit vectors: per 32-byte block of a row, vpdpbusd
// multiplies unsigned weight bytes (q8, or the low/high nibbles of q4) by the int8 activations
// and sums four products per int32 lane; the lanes are scaled by s_g·xs_g in f32. Four rows
// per pass share each activation load. Needs K a multiple of 64.
VOXSLAB_VNNI void GemvIntVnni(bool q4, const uint8_t* w, const float* scales, const float* biases, int group,
                              const int8_t* xq, const float* xs, const float* xsum, float* y, int64_t M, int64_t K) {
  const int64_t groups = K / group;
  const int64_t rowBytes = q4 ? K / 2 : K;
  const int64_t blocks = rowBytes / 32;
  const int64_t per = q4 ? 64 : 32;  // elements per block
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const uint8_t* r0 = w + m * rowBytes;
    const float* s0 = scales + m * groups;
    BlockGroups bg(group, per);
    for (int64_t b = 0; b < blocks; ++b, bg.next()) {
      // The next four rows, one pass ahead: the stream outruns the hardware prefetcher otherwise.
      if ((b & 1) == 0) {
        const char* ahead = reinterpret_cast<const char*>(r0 + 4 * rowBytes + b * 32);
        _mm_prefetch(ahead, _MM_HINT_T0);
        _mm_prefetch(ahead + rowBytes, _MM_HINT_T0);
        _mm_prefetch(ahead + 2 * rowBytes, _MM_HINT_T0);
        _mm_prefetch(ahead + 3 * rowBytes, _MM_HINT_T0);
      }
      const int8_t* xb = xq + b * per;
      const __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb));
      const __m256i xh = q4 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 32)) : xa;
      a0 = _mm256_fmadd_ps(VnniDot(q4, r0 + b * 32, xa, xh), VnniScale(s0, xs, bg.g, bg.two), a0);
      a1 = _mm256_fmadd_ps(VnniDot(q4, r0 + rowBytes + b * 32, xa, xh), VnniScale(s0 + groups, xs, bg.g, bg.two), a1);
      a2 = _mm256_fmadd_ps(VnniDot(q4, r0 + 2 * rowBytes + b * 32, xa, xh), VnniScale(s0 + 2 * groups, xs, bg.g, bg.two), a2);
      a3 = _mm256_fmadd_ps(VnniDot(q4, r0 + 3 * rowBytes + b * 32, xa, xh), VnniScale(s0 + 3 * groups, xs, bg.g, bg.two), a3);
    }
    y[m] = Hsum(a0) + VnniBias(biases + m * groups, xsum, groups);
    y[m + 1] = Hsum(a1) + VnniBias(biases + (m + 1) * groups, xsum, groups);
    y[m + 2] = Hsum(a2) + VnniBias(biases + (m + 2) * groups, xsum, groups);
    y[m + 3] = Hsum(a3) + VnniBias(biases + (m + 3) * groups, xsum, groups);
  }
  for (; m < M; ++m) {
    __m256 a = _mm256_setzero_ps();
    const uint8_t* r = w + m * rowBytes;
    BlockGroups bg(group, per);
    for (int64_t b = 0; b < blocks; ++b, bg.next()) {
      const int8_t* xb = xq + b * per;
      const __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb));
      const __m256i xh = q4 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 32)) : xa;
      a = _mm256_fmadd_ps(VnniDot(q4, r + b * 32, xa, xh), VnniScale(scales + m * groups, xs, bg.g, bg.two), a);
    }
    y[m] = Hsum(a) + VnniBias(biases + m * groups, xsum, groups);
  }
}

// The same integer lanes without VNNI: vpmaddubsw pairs bytes into 16 bits and vpmaddwd pairs
// those into 32, so each int32 lane holds the same four products as vpdpbusd. q4 nibbles (≤ 15)
// cannot saturate 16 bits; q8 bytes are recentred to q − 128 (|q − 128| · 127 · 2 < 2^15) and
// 128·Σxq is added back.
__attribute__((target("avx2,fma"))) inline __m256 Avx2IntDot(bool q4, const uint8_t* p, __m256i xa, __m256i xb) {
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i ones16 = _mm256_set1_epi16(1);
  if (q4) {
    const __m256i nib = _mm256_set1_epi8(15);
    const __m256i lo = _mm256_and_si256(wv, nib);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(wv, 4), nib);
    const __m256i d = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo, xa), ones16), _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xb), ones16));
    return _mm256_cvtepi32_ps(d);
  }
  const __m256i centred = _mm256_xor_si256(wv, _mm256_set1_epi8(static_cast<char>(0x80)));  // q − 128 as int8
  const __m256i mag = _mm256_sign_epi8(centred, centred);                                      // |q − 128|
  const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(mag, _mm256_sign_epi8(xa, centred)), ones16);
  const __m256i xsum4 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), xa), ones16);
  return _mm256_cvtepi32_ps(_mm256_add_epi32(dot, _mm256_slli_epi32(xsum4, 7)));
}

// Integer GEMV on AVX2 without VNNI, row by row; each row's arithmetic is GemvIntVnni's.
__attribute__((target("avx2,fma"))) void GemvIntAvx2(bool q4, const uint8_t* w, const float* scales, const float* biases,
                                                     int group, const int8_t* xq, const float* xs, const float* xsum,
                                                     float* y, int64_t M, int64_t K) {
  const int64_t groups = K / group;
  const int64_t rowBytes = q4 ? K / 2 : K;
  const int64_t per = q4 ? 64 : 32;
  for (int64_t m = 0; m < M; ++m) {
    __m256 a = _mm256_setzero_ps();
    const uint8_t* r = w + m * rowBytes;
    BlockGroups bg(group, per);
    for (int64_t b = 0; b < rowBytes / 32; ++b, bg.next()) {
      const int8_t* xb = xq + b * per;
      const __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb));
      const __m256i xh = q4 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 32)) : xa;
      a = _mm256_fmadd_ps(Avx2IntDot(q4, r + b * 32, xa, xh), VnniScale(scales + m * groups, xs, bg.g, bg.two), a);
    }
    y[m] = Hsum(a) + VnniBias(biases + m * groups, xsum, groups);
  }
}

// Up to four activation rows against `mb` weight rows: each weight block is loaded and unpacked
// once for all of them (two weight rows × na activations per pass). Per (weight row,
// activation) the arithmetic is GemvIntVnni's, so the results are bit-identical to it.
VOXSLAB_VNNI void GemvIntVnniMulti(bool q4, const uint8_t* w, const float* scales, const float* biases, int group,
                                   const int8_t* const* xq, const float* const* xs, const float* const* xsum,
                                   float* const* y, int na, int64_t mb, int64_t K) {
  const int64_t groups = K / group;
  const int64_t rowBytes = q4 ? K / 2 : K;
  const int64_t blocks = rowBytes / 32;
  const int64_t per = q4 ? 64 : 32;
  const __m256i nib = _mm256_set1_epi8(15);
  int64_t m = 0;
  for (; m + 2 <= mb; m += 2) {
    __m256 acc[2][4];
    for (int r = 0; r < 2; ++r)
      for (int a = 0; a < 4; ++a) acc[r][a] = _mm256_setzero_ps();
    const uint8_t* r0 = w + m * rowBytes;
    const float* s0 = scales + m * groups;
    BlockGroups bg(group, per);
    for (int64_t b = 0; b < blocks; ++b, bg.next()) {
      __m256i lo[2], hi[2];
      for (int r = 0; r < 2; ++r) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + r * rowBytes + b * 32));
        lo[r] = q4 ? _mm256_and_si256(wv, nib) : wv;
        hi[r] = q4 ? _mm256_and_si256(_mm256_srli_epi16(wv, 4), nib) : wv;
      }
      for (int a = 0; a < na; ++a) {
        const int8_t* xb = xq[a] + b * per;
        const __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb));
        const __m256i xh = q4 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 32)) : xa;
        for (int r = 0; r < 2; ++r) {
          __m256i d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), lo[r], xa);
          if (q4) d = _mm256_dpbusd_epi32(d, hi[r], xh);
          acc[r][a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), VnniScale(s0 + r * groups, xs[a], bg.g, bg.two), acc[r][a]);
        }
      }
    }
    for (int r = 0; r < 2; ++r)
      for (int a = 0; a < na; ++a) y[a][m + r] = Hsum(acc[r][a]) + VnniBias(biases + (m + r) * groups, xsum[a], groups);
  }
  for (; m < mb; ++m)
    for (int a = 0; a < na; ++a)
      GemvIntVnni(q4, w + m * rowBytes, scales + m * groups, biases + m * groups, group, xq[a], xs[a], xsum[a], y[a] + m, 1, K);
}

// Writes a micro-kernel's accumulators (mr rows of `width`, first nr columns) into C: the
// first k panel stores them (plus the bias), later panels add to what is there.
inline void WriteTile(const float* tmp, int width, int mr, float* C, int64_t ldc, int64_t nr, bool first, const float* bias) {
  for (int i = 0; i < mr; ++i) {
    float* row = C + i * ldc;
    const float* t = tmp + i * width;
    for (int64_t j = 0; j < nr; ++j) row[j] = first ? t[j] + (bias != nullptr ? bias[j] : 0.0f) : row[j] + t[j];
  }
}

// 6×16 micro-kernel: C[MR][16] (+)= A rows (stride lda) × packed W panel [kc][16]. The 12
// accumulators are named variables so they stay in registers for the whole k loop.
template <int MR>
__attribute__((target("avx2,fma"))) void Micro(const float* A, int64_t lda, const float* P, int64_t kc, float* C,
                                               int64_t ldc, int64_t nr, bool first, const float* bias) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  const float* a0 = A;
  const float* a1 = A + lda;
  const float* a2 = A + 2 * lda;
  const float* a3 = A + 3 * lda;
  const float* a4 = A + 4 * lda;
  const float* a5 = A + 5 * lda;
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(P + k * 16);
    const __m256 b1 = _mm256_loadu_ps(P + k * 16 + 8);
    __m256 a = _mm256_broadcast_ss(a0 + k);
    c00 = _mm256_fmadd_ps(a, b0, c00);
    c01 = _mm256_fmadd_ps(a, b1, c01);
    if constexpr (MR > 1) {
      a = _mm256_broadcast_ss(a1 + k);
      c10 = _mm256_fmadd_ps(a, b0, c10);
      c11 = _mm256_fmadd_ps(a, b1, c11);
    }
    if constexpr (MR > 2) {
      a = _mm256_broadcast_ss(a2 + k);
      c20 = _mm256_fmadd_ps(a, b0, c20);
      c21 = _mm256_fmadd_ps(a, b1, c21);
    }
    if constexpr (MR > 3) {
      a = _mm256_broadcast_ss(a3 + k);
      c30 = _mm256_fmadd_ps(a, b0, c30);
      c31 = _mm256_fmadd_ps(a, b1, c31);
    }
    if constexpr (MR > 4) {
      a = _mm256_broadcast_ss(a4 + k);
      c40 = _mm256_fmadd_ps(a, b0, c40);
      c41 = _mm256_fmadd_ps(a, b1, c41);
    }
    if constexpr (MR > 5) {
      a = _mm256_broadcast_ss(a5 + k);
      c50 = _mm256_fmadd_ps(a, b0, c50);
      c51 = _mm256_fmadd_ps(a, b1, c51);
    }
  }
  alignas(32) float tmp[6][16];
  _mm256_store_ps(tmp[0], c00);
  _mm256_store_ps(tmp[0] + 8, c01);
  _mm256_store_ps(tmp[1], c10);
  _mm256_store_ps(tmp[1] + 8, c11);
  _mm256_store_ps(tmp[2], c20);
  _mm256_store_ps(tmp[2] + 8, c21);
  _mm256_store_ps(tmp[3], c30);
  _mm256_store_ps(tmp[3] + 8, c31);
  _mm256_store_ps(tmp[4], c40);
  _mm256_store_ps(tmp[4] + 8, c41);
  _mm256_store_ps(tmp[5], c50);
  _mm256_store_ps(tmp[5] + 8, c51);
  WriteTile(tmp[0], 16, MR, C, ldc, nr, first, bias);
}

// Packs W[n0:n0+nc][k0:k0+kc], decoded to f32, into panels of NR outputs:
// pack[panel][k][NR], zero-padded.
template <int NR>
void PackPanels(const WeightRef& W, int64_t n0, int64_t nc, int64_t k0, int64_t kc, int64_t K, float* pack) {
  for (int64_t p = 0; p < nc; p += NR) {
    float* dst = pack + p * kc;
    for (int64_t j = 0; j < NR; ++j) {
      if (p + j >= nc) {
        for (int64_t k = 0; k < kc; ++k) dst[k * NR + j] = 0.0f;
      } else if (W.type == WeightType::kF32) {
        const float* row = static_cast<const float*>(W.data) + (n0 + p + j) * K + k0;
        for (int64_t k = 0; k < kc; ++k) dst[k * NR + j] = row[k];
      } else {
        for (int64_t k = 0; k < kc; ++k) dst[k * NR + j] = WeightAt(W, n0 + p + j, k0 + k, K);
      }
    }
  }
}

// Blocked GEMM driver over a micro-kernel family Micro<MR> of panel width NR (MR ≤ 6).
template <int NR, template <int> class M>
void GemmBlocked(const float* A, const WeightRef& W, const float* bias, float* C, int64_t T, int64_t N, int64_t K, float* pack) {
  for (int64_t n0 = 0; n0 < N; n0 += kGemmNc) {
    const int64_t nc = std::min(kGemmNc, N - n0);
    for (int64_t k0 = 0; k0 < K; k0 += kGemmKc) {
      const int64_t kc = std::min(kGemmKc, K - k0);
      PackPanels<NR>(W, n0, nc, k0, kc, K, pack);
      const bool first = k0 == 0;
      for (int64_t t = 0; t < T; t += 6) {
        const int64_t mr = std::min<int64_t>(6, T - t);
        for (int64_t p = 0; p < nc; p += NR) {
          const int64_t nr = std::min<int64_t>(NR, nc - p);
          const float* a = A + t * K + k0;
          const float* panel = pack + p * kc;
          float* c = C + t * N + n0 + p;
          const float* bb = bias != nullptr ? bias + n0 + p : nullptr;
          switch (mr) {
            case 6: M<6>::Run(a, K, panel, kc, c, N, nr, first, bb); break;
            case 5: M<5>::Run(a, K, panel, kc, c, N, nr, first, bb); break;
            case 4: M<4>::Run(a, K, panel, kc, c, N, nr, first, bb); break;
            case 3: M<3>::Run(a, K, panel, kc, c, N, nr, first, bb); break;
            case 2: M<2>::Run(a, K, panel, kc, c, N, nr, first, bb); break;
            default: M<1>::Run(a, K, panel, kc, c, N, nr, first, bb); break;
          }
        }
      }
    }
  }
}

template <int MR>
struct MicroAvx2 {
  static void Run(const float* A, int64_t lda, const float* P, int64_t kc, float* C, int64_t ldc, int64_t nr, bool first, const float* bias) {
    Micro<MR>(A, lda, P, kc, C, ldc, nr, first, bias);
  }
};

void GemmAvx2(const float* A, const WeightRef& W, const float* bias, float* C, int64_t T, int64_t N, int64_t K, float* pack) {
  GemmBlocked<16, MicroAvx2>(A, W, bias, C, T, N, K, pack);
}

// AVX-512: 6×32 tiles, the same blocking with 16-lane registers.
template <int MR>
struct MicroAvx512 {
  __attribute__((target("avx512f"))) static void Run(const float* A, int64_t lda, const float* P, int64_t kc, float* C,
                                                      int64_t ldc, int64_t nr, bool first, const float* bias) {
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t k = 0; k < kc; ++k) {
      const __m512 b0 = _mm512_loadu_ps(P + k * 32);
      const __m512 b1 = _mm512_loadu_ps(P + k * 32 + 16);
      __m512 a = _mm512_set1_ps(A[k]);
      c00 = _mm512_fmadd_ps(a, b0, c00);
      c01 = _mm512_fmadd_ps(a, b1, c01);
      if constexpr (MR > 1) {
        a = _mm512_set1_ps(A[lda + k]);
        c10 = _mm512_fmadd_ps(a, b0, c10);
        c11 = _mm512_fmadd_ps(a, b1, c11);
      }
      if constexpr (MR > 2) {
        a = _mm512_set1_ps(A[2 * lda + k]);
        c20 = _mm512_fmadd_ps(a, b0, c20);
        c21 = _mm512_fmadd_ps(a, b1, c21);
      }
      if constexpr (MR > 3) {
        a = _mm512_set1_ps(A[3 * lda + k]);
        c30 = _mm512_fmadd_ps(a, b0, c30);
        c31 = _mm512_fmadd_ps(a, b1, c31);
      }
      if constexpr (MR > 4) {
        a = _mm512_set1_ps(A[4 * lda + k]);
        c40 = _mm512_fmadd_ps(a, b0, c40);
        c41 = _mm512_fmadd_ps(a, b1, c41);
      }
      if constexpr (MR > 5) {
        a = _mm512_set1_ps(A[5 * lda + k]);
        c50 = _mm512_fmadd_ps(a, b0, c50);
        c51 = _mm512_fmadd_ps(a, b1, c51);
      }
    }
    alignas(64) float tmp[6][32];
    _mm512_store_ps(tmp[0], c00);
    _mm512_store_ps(tmp[0] + 16, c01);
    _mm512_store_ps(tmp[1], c10);
    _mm512_store_ps(tmp[1] + 16, c11);
    _mm512_store_ps(tmp[2], c20);
    _mm512_store_ps(tmp[2] + 16, c21);
    _mm512_store_ps(tmp[3], c30);
    _mm512_store_ps(tmp[3] + 16, c31);
    _mm512_store_ps(tmp[4], c40);
    _mm512_store_ps(tmp[4] + 16, c41);
    _mm512_store_ps(tmp[5], c50);
    _mm512_store_ps(tmp[5] + 16, c51);
    WriteTile(tmp[0], 32, MR, C, ldc, nr, first, bias);
  }
};

void GemmAvx512(const float* A, const WeightRef& W, const float* bias, float* C, int64_t T, int64_t N, int64_t K, float* pack) {
  GemmBlocked<32, MicroAvx512>(A, W, bias, C, T, N, K, pack);
}

__attribute__((target("avx512f"))) float Hsum512(__m512 v) {
  alignas(64) float l[16];
  _mm512_store_ps(l, v);
  float s[8];
  for (int i = 0; i < 8; ++i) s[i] = l[i] + l[i + 8];
  return (((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])));
}

// 16 float weights (f32, f16 or bf16) from element i, as f32.
__attribute__((target("avx512f,avx2,f16c"))) inline __m512 Load16(WeightType type, const void* w, int64_t i) {
  if (type == WeightType::kF32) return _mm512_loadu_ps(static_cast<const float*>(w) + i);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i));
  if (type == WeightType::kF16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

inline float FloatAt(WeightType type, const void* w, int64_t i) {
  if (type == WeightType::kF32) return static_cast<const float*>(w)[i];
  const uint16_t h = static_cast<const uint16_t*>(w)[i];
  return type == WeightType::kF16 ? F16(h) : Bf16(h);
}

// AVX-512 GEMV for float weights (four rows per pass); quantized weights use the AVX2 path.
__attribute__((target("avx512f,avx2,fma,f16c"))) void GemvAvx512(WeightType type, const void* w, const float* scales,
                                                                  const float* biases, int group, const float* x, float* y,
                                                                  int64_t M, int64_t K, float* xsum) {
  if (type == WeightType::kQ8 || type == WeightType::kQ4) {
    GemvAvx2(type, w, scales, biases, group, x, y, M, K, xsum);
    return;
  }
  const int64_t K16 = K & ~int64_t{15};
  int64_t m = 0;
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
  for (; m < M; ++m) {
    __m512 a = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k < K16; k += 16) a = _mm512_fmadd_ps(Load16(type, w, m * K + k), _mm512_loadu_ps(x + k), a);
    float t = 0;
    for (; k < K; ++k) t += FloatAt(type, w, m * K + k) * x[k];
    y[m] = Hsum512(a) + t;
  }
}

__attribute__((target("avx512f"))) float FmaProbeAvx512(int64_t iterations) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 m = _mm512_set1_ps(0.999999f);
  const __m512 c = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  return Hsum512(s);
}

__attribute__((target("avx2,fma"))) float FmaProbeAvx2(int64_t iterations) {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(0.001f * static_cast<float>(i));
  const __m256 m = _mm256_set1_ps(0.999999f);
  const __m256 c = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
  __m256 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
  return Hsum(s);
}

// Reads n floats as four concurrent streams (one per quarter), the access pattern that
// gives the memory system the most parallelism a single core can use.
__attribute__((target("avx2"))) float ReadProbeAvx2(const float* x, int64_t n) {
  const int64_t q = (n / 4) & ~int64_t{15};
  const float* p0 = x;
  const float* p1 = x + q;
  const float* p2 = x + 2 * q;
  const float* p3 = x + 3 * q;
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i < q; i += 16) {
    s0 = _mm256_add_ps(s0, _mm256_add_ps(_mm256_loadu_ps(p0 + i), _mm256_loadu_ps(p0 + i + 8)));
    s1 = _mm256_add_ps(s1, _mm256_add_ps(_mm256_loadu_ps(p1 + i), _mm256_loadu_ps(p1 + i + 8)));
    s2 = _mm256_add_ps(s2, _mm256_add_ps(_mm256_loadu_ps(p2 + i), _mm256_loadu_ps(p2 + i + 8)));
    s3 = _mm256_add_ps(s3, _mm256_add_ps(_mm256_loadu_ps(p3 + i), _mm256_loadu_ps(p3 + i + 8)));
  }
  float t = 0;
  for (int64_t i = 4 * q; i < n; ++i) t += x[i];
  return Hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3))) + t;
}
#endif

void GemmScalar(const float* A, const WeightRef& W, const float* bias, float* C, int64_t T, int64_t N, int64_t K, float*) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      float s = bias != nullptr ? bias[n] : 0.0f;
      for (int64_t k = 0; k < K; ++k) s += A[t * K + k] * WeightAt(W, n, k, K);
      C[t * N + n] = s;
    }
}

float FmaProbeScalar(int64_t iterations) {
  float a[12];
  for (int i = 0; i < 12; ++i) a[i] = 0.001f * static_cast<float>(i);
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < 12; ++i) a[i] = std::fma(a[i], 0.999999f, 1e-7f);
  float s = 0;
  for (float v : a) s += v;
  return s;
}

float ReadProbeScalar(const float* x, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

struct Dispatch {
  const char* isa;
  decltype(&GemvScalar) gemv;
  decltype(&GemvIntScalar) gemvInt;
  decltype(&GemmScalar) gemm;
  decltype(&FmaProbeScalar) fma;
  decltype(&ReadProbeScalar) read;
  int fmaLanes;  // f32 lanes per FMA in the peak probe
};

// The best path the CPU supports, or the one VOXSLAB_KERNELS names (scalar, avx2, avx512)
// when the CPU supports it: tests use it to check every path on one machine.
Dispatch Choose() {
  const char* want = std::getenv("VOXSLAB_KERNELS");
  const std::string w = want != nullptr ? want : "";
#ifdef VOXSLAB_X86
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
  const bool vnni = avx512 && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vnni");
  if (w != "scalar" && w != "avx2" && avx512) {
    return {vnni ? "avx512f+vnni" : "avx512f", GemvAvx512, vnni ? GemvIntVnni : GemvIntAvx2, GemmAvx512, FmaProbeAvx512, ReadProbeAvx2, 16};
  }
  if (w != "scalar" && avx2) return {"avx2+fma", GemvAvx2, GemvIntAvx2, GemmAvx2, FmaProbeAvx2, ReadProbeAvx2, 8};
#endif
  return {"scalar", GemvScalar, GemvIntScalar, GemmScalar, FmaProbeScalar, ReadProbeScalar, 1};
}

const Dispatch kDispatch = Choose();

inline void CpuRelax() {
#ifdef VOXSLAB_X86
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Helper threads that split a kernel's output rows with the calling thread. Each row is
// computed exactly as on one thread, so results do not depend on the thread count. Every JS
// thread has its own pool (a pipeline stage's helpers are its own: two stages computing at once
// never share or resize one); a reentrant call that finds the pool busy runs alone.
class RowPool {
 public:
  using Fn = void (*)(const void* ctx, int64_t r0, int64_t r1);
  static constexpr int kMaxThreads = 8;

  ~RowPool() { Resize(1); }

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // Only the owning thread resizes; holding `busy_` meanwhile keeps a Run from starting on a
  // pool whose helpers are being replaced (such a Run computes alone).
  void Resize(int n) {
    while (busy_.exchange(true, std::memory_order_acquire)) CpuRelax();
    ResizeHeld(n);
    busy_.store(false, std::memory_order_release);
  }

 private:
  void ResizeHeld(int n) {
    if (!helpers_.empty()) {
      stop_.store(true, std::memory_order_release);
      {
        std::lock_guard<std::mutex> lock(mu_);
      }
      cv_.notify_all();
      for (auto& t : helpers_) t.join();
      helpers_.clear();
      stop_.store(false, std::memory_order_release);
    }
    // Helpers start from the current generation: a call made before a helper first runs is
    // still seen as new.
    const uint32_t g0 = gen_.load(std::memory_order_acquire);
    for (int i = 1; i < n; ++i) helpers_.emplace_back([this, i, g0] { Loop(i, g0); });
  }

 public:
  // fn(ctx, r0, r1) over [0, rows), in contiguous parts aligned to `align` rows.
  void Run(Fn fn, const void* ctx, int64_t rows, int64_t align, int64_t work) {
    const int n = threads();
    if (n == 1 || work < kMinWork || rows < 2 * align || busy_.exchange(true, std::memory_order_acquire)) {
      fn(ctx, 0, rows);
      return;
    }
    const int64_t units = (rows + align - 1) / align;
    for (int i = 0; i <= n; ++i) parts_[i] = std::min(rows, (units * i / n) * align);
    fn_ = fn;
    ctx_ = ctx;
    pending_.store(n - 1, std::memory_order_relaxed);
    gen_.fetch_add(1, std::memory_order_release);
    if (sleepers_.load(std::memory_order_acquire) > 0) {
      { std::lock_guard<std::mutex> lock(mu_); }
      cv_.notify_all();
    }
    fn(ctx, parts_[0], parts_[1]);
    while (pending_.load(std::memory_order_acquire) != 0) CpuRelax();
    busy_.store(false, std::memory_order_release);
  }

 private:
  static constexpr int64_t kMinWork = 1 << 16;  // multiply-adds below which a split costs more than it saves

  void Loop(int index, uint32_t seen) {
    for (;;) {
      int spins = 0;
      while (gen_.load(std::memory_order_acquire) == seen) {
        if (stop_.load(std::memory_order_acquire)) return;
        if (++spins < 1 << 14) {
          CpuRelax();
          continue;
        }
        sleepers_.fetch_add(1, std::memory_order_acq_rel);
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait_for(lock, std::chrono::milliseconds(1),
                       [&] { return gen_.load(std::memory_order_acquire) != seen || stop_.load(std::memory_order_acquire); });
        }
        sleepers_.fetch_sub(1, std::memory_order_acq_rel);
        spins = 0;
      }
      seen = gen_.load(std::memory_order_acquire);
      fn_(ctx_, parts_[index], parts_[index + 1]);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  std::vector<std::thread> helpers_;
  std::atomic<uint32_t> gen_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> busy_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  Fn fn_ = nullptr;
  const void* ctx_ = nullptr;
  int64_t parts_[kMaxThreads + 1] = {};
};

RowPool& Pool() {
  static thread_local RowPool pool;
  return pool;
}

// The vector kernels need whole 64-element blocks, each within one group (or, for q4, exactly
// two groups of 32).
bool VectorIntShape(bool q4, int group, int64_t K) {
  return K % 64 == 0 && (q4 ? (group == 32 || group % 64 == 0) : group % 32 == 0);
}

struct IntTask {
  bool q4;
  const uint8_t* w;
  const float* scales;
  const float* biases;
  int group;
  const int8_t* xq;
  const float* xs;
  const float* xsum;
  float* y;
  int64_t K;
};

void RunIntRows(const void* c, int64_t r0, int64_t r1) {
  const IntTask& t = *static_cast<const IntTask*>(c);
  const int64_t groups = t.K / t.group;
  const int64_t rowBytes = t.q4 ? t.K / 2 : t.K;
  const auto fn = VectorIntShape(t.q4, t.group, t.K) ? kDispatch.gemvInt : GemvIntScalar;
  fn(t.q4, t.w + r0 * rowBytes, t.scales + r0 * groups, t.biases + r0 * groups, t.group, t.xq, t.xs, t.xsum, t.y + r0, r1 - r0, t.K);
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
  kDispatch.gemv(t.type, t.w + r0 * t.K * t.elemBytes, nullptr, nullptr, 0, t.x, t.y + r0, r1 - r0, t.K, nullptr);
}

}  // namespace

void SetComputeThreads(int n) { Pool().Resize(std::max(1, std::min(n, RowPool::kMaxThreads))); }
int ComputeThreads() { return Pool().threads(); }

const char* KernelIsa() { return kDispatch.isa; }

void Gemv(WeightType type, const void* w, const float* scales, const float* biases, int group, const float* x, float* y,
          int64_t M, int64_t K, float* xsum) {
  kDispatch.gemv(type, w, scales, biases, group, x, y, M, K, xsum);
}

void Gemm(const float* A, const WeightRef& W, const float* bias, float* C, int64_t T, int64_t N, int64_t K, float* pack) {
  kDispatch.gemm(A, W, bias, C, T, N, K, pack);
}

int64_t GemvIntScratchBytes(int64_t K, int group) { return (K + 2 * 4 * (K / group) + 64 + 63) & ~int64_t{63}; }

int64_t GemvRowsScratchBytes(int64_t n, int64_t K, int group) { return group > 0 ? n * GemvIntScratchBytes(K, group) : 0; }

namespace {

struct RowsTask {
  WeightType type;
  const uint8_t* w;
  const float* scales;
  const float* biases;
  int group;
  const float* X;
  float* Y;
  const uint8_t* scratch;  // per activation row: xsum, xs, xq
  int64_t per, n, M, K, elemBytes;
};

// Rows [r0, r1) of every Y[t], in blocks of weight rows that stay in cache across the n rows.
void RunRowsBlocks(const void* c, int64_t r0, int64_t r1) {
  const RowsTask& t = *static_cast<const RowsTask*>(c);
  const bool quant = t.type == WeightType::kQ8 || t.type == WeightType::kQ4;
  const bool q4 = t.type == WeightType::kQ4;
  const int64_t groups = quant ? t.K / t.group : 0;
  constexpr int64_t kBlock = 32;
  for (int64_t m0 = r0; m0 < r1; m0 += kBlock) {
    const int64_t mb = std::min(kBlock, r1 - m0);
    const uint8_t* wsub = t.w + (q4 ? m0 * t.K / 2 : m0 * t.K * t.elemBytes);
#ifdef VOXSLAB_X86
    if (quant && VectorIntShape(q4, t.group, t.K) && kDispatch.gemvInt == GemvIntVnni) {
      for (int64_t i0 = 0; i0 < t.n; i0 += 4) {
        const int na = static_cast<int>(std::min<int64_t>(4, t.n - i0));
        const int8_t* xq[4] = {};
        const float* xs[4] = {};
        const float* xsum[4] = {};
        float* y[4] = {};
        for (int a = 0; a < na; ++a) {
          xsum[a] = reinterpret_cast<const float*>(t.scratch + (i0 + a) * t.per);
          xs[a] = xsum[a] + groups;
          xq[a] = reinterpret_cast<const int8_t*>(xs[a] + groups);
          y[a] = t.Y + (i0 + a) * t.M + m0;
        }
        GemvIntVnniMulti(q4, wsub, t.scales + m0 * groups, t.biases + m0 * groups, t.group, xq, xs, xsum, y, na, mb, t.K);
      }
      continue;
    }
#endif
    for (int64_t i = 0; i < t.n; ++i) {
      if (quant) {
        const float* xsum = reinterpret_cast<const float*>(t.scratch + i * t.per);
        const float* xs = xsum + groups;
        const int8_t* xq = reinterpret_cast<const int8_t*>(xs + groups);
        const auto fn = VectorIntShape(q4, t.group, t.K) ? kDispatch.gemvInt : GemvIntScalar;
        fn(q4, wsub, t.scales + m0 * groups, t.biases + m0 * groups, t.group, xq, xs, xsum, t.Y + i * t.M + m0, mb, t.K);
      } else {
        kDispatch.gemv(t.type, wsub, nullptr, nullptr, 0, t.X + i * t.K, t.Y + i * t.M + m0, mb, t.K, nullptr);
      }
    }
  }
}

int64_t ElemBytes(WeightType type) {
  return type == WeightType::kF32 ? 4 : (type == WeightType::kF16 || type == WeightType::kBF16) ? 2 : 1;
}

}  // namespace

void GemvRows(WeightType type, const void* w, const float* scales, const float* biases, int group, const float* X, float* Y,
              int64_t n, int64_t M, int64_t K, void* scratch) {
  const bool quant = type == WeightType::kQ8 || type == WeightType::kQ4;
  const int64_t per = quant ? GemvIntScratchBytes(K, group) : 0;
  if (quant) {
    const int64_t groups = K / group;
    for (int64_t t = 0; t < n; ++t) {
      float* xsum = reinterpret_cast<float*>(static_cast<uint8_t*>(scratch) + t * per);
      float* xs = xsum + groups;
      QuantizeActivations(X + t * K, K, group, type == WeightType::kQ4, reinterpret_cast<int8_t*>(xs + groups), xs, xsum);
    }
  }
  const RowsTask task{type, static_cast<const uint8_t*>(w), scales, biases, group, X, Y, static_cast<const uint8_t*>(scratch), per, n, M, K, ElemBytes(type)};
  Pool().Run(RunRowsBlocks, &task, M, 32, n * M * K);
}

void GemvSplit(WeightType type, const void* w, const float* x, float* y, int64_t M, int64_t K) {
  const FloatTask task{type, static_cast<const uint8_t*>(w), ElemBytes(type), x, y, K};
  Pool().Run(RunFloatRows, &task, M, 4, M * K);
}

void GemvInt(WeightType type, const void* w, const float* scales, const float* biases, int group, const float* x, float* y,
             int64_t M, int64_t K, void* scratch) {
  const bool q4 = type == WeightType::kQ4;
  // Scratch: the group sums and activation scales (f32), then the int8 activations.
  float* xsum = static_cast<float*>(scratch);
  float* xs = xsum + K / group;
  int8_t* xq = reinterpret_cast<int8_t*>(xs + K / group);
  QuantizeActivations(x, K, group, q4, xq, xs, xsum);
  const IntTask task{q4, static_cast<const uint8_t*>(w), scales, biases, group, xq, xs, xsum, y, K};
  Pool().Run(RunIntRows, &task, M, 4, M * K);
}

float FmaProbe(int64_t iterations) { return kDispatch.fma(iterations); }
int FmaLanes() { return kDispatch.fmaLanes; }
float ReadProbe(const float* x, int64_t n) { return kDispatch.read(x, n); }

void RmsNorm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = xr[i] * inv * w[i];
  }
}

void LayerNorm(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    double s = 0;
    for (int64_t i = 0; i < dim; ++i) s += xr[i];
    const double mean = s / static_cast<double>(dim);
    double v = 0;
    for (int64_t i = 0; i < dim; ++i) v += (xr[i] - mean) * (xr[i] - mean);
    const double inv = 1.0 / std::sqrt(v / static_cast<double>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = static_cast<float>((xr[i] - mean) * inv) * w[i] + b[i];
  }
}

void GeluExact(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(0.5 * x[i] * (1.0 + std::erf(x[i] / std::sqrt(2.0))));
}

void Silu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] / (1.0 + std::exp(-static_cast<double>(x[i]))));
}

void SwiGlu(const float* gate, const float* up, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(gate[i] / (1.0 + std::exp(-static_cast<double>(gate[i])))) * up[i];
}

void Glu(const float* x, float* y, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < dim; ++i) {
      const double g = x[r * 2 * dim + dim + i];
      y[r * dim + i] = static_cast<float>(x[r * 2 * dim + i] / (1.0 + std::exp(-g)));
    }
}

void Rope(float* x, const float* cs, const float* sn, int64_t rows, int64_t heads, int64_t hd, int64_t pos0, bool adjacent) {
  const int64_t half = hd / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float* c = cs + (pos0 + r) * half;
    const float* s = sn + (pos0 + r) * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (r * heads + h) * hd;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t a = adjacent ? 2 * i : i;
        const int64_t b = adjacent ? 2 * i + 1 : i + half;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c[i] - x1 * s[i];
        v[b] = x1 * c[i] + x0 * s[i];
      }
    }
  }
}

namespace {

float DotF(const float* a, const float* b, int64_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

#ifdef VOXSLAB_X86
__attribute__((target("avx2,fma"))) float DotAvx(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float t = 0;
  for (; i < n; ++i) t += a[i] * b[i];
  return Hsum(_mm256_add_ps(s0, s1)) + t;
}
#endif

// y += a·x over n floats.
void AxpyF(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

#ifdef VOXSLAB_X86
__attribute__((target("avx2,fma"))) void AxpyAvx(float a, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}
#endif

void HalfRowScalar(const uint16_t* h, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = F16(h[i]);
}

#ifdef VOXSLAB_X86
__attribute__((target("avx2,f16c"))) void HalfRowF16c(const uint16_t* h, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  for (; i < n; ++i) out[i] = F16(h[i]);
}
#endif

// Whether the AVX2 helpers may run: the CPU has AVX2 with FMA (or F16C), and VOXSLAB_KERNELS
// does not force the scalar path.
bool VectorHelpers(bool f16c) {
  const char* want = std::getenv("VOXSLAB_KERNELS");
  if (want != nullptr && std::string(want) == "scalar") return false;
#ifdef VOXSLAB_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && (f16c ? __builtin_cpu_supports("f16c") : __builtin_cpu_supports("fma"));
#else
  (void)f16c;
  return false;
#endif
}

#ifdef VOXSLAB_X86
const auto kAxpy = VectorHelpers(false) ? AxpyAvx : AxpyF;
const auto kDotF = VectorHelpers(false) ? DotAvx : DotF;
const auto kHalfRow = VectorHelpers(true) ? HalfRowF16c : HalfRowScalar;
#else
const auto kAxpy = AxpyF;
const auto kDotF = DotF;
const auto kHalfRow = HalfRowScalar;
#endif

}  // namespace

int64_t AttentionScratchFloats(int64_t tq, int64_t tk, int64_t hd, int64_t group) {
  // scores [tq][tk]; per query head of a KV group: max and sum [tq], acc, q+u and q+v [tq][hd];
  // one widened key row and one value row [hd] (f16 caches).
  return tq * tk + group * (2 * tq + 3 * tq * hd) + 2 * hd;
}

void Attention(const AttentionParams& a, const float* q, const void* kraw, const void* vraw, float* out, const float* p,
               const float* u, const float* vb, float* scratch) {
  const int64_t hd = a.hd;
  const int64_t group = a.Hq / a.Hkv;
  const int64_t tq = a.tq;
  float* sc = scratch;
  float* mx = sc + tq * a.tk;       // [group][tq]
  float* sm = mx + group * tq;      // [group][tq]
  float* acc = sm + group * tq;     // [group][tq][hd]
  float* qu = acc + group * tq * hd;
  float* qv = qu + group * tq * hd;
  float* krow = qv + group * tq * hd;
  float* vrow = krow + hd;
  const bool rel = p != nullptr;
  const float* kf = static_cast<const float*>(kraw);
  const float* vf = static_cast<const float*>(vraw);
  const uint16_t* kh16 = static_cast<const uint16_t*>(kraw);
  const uint16_t* vh16 = static_cast<const uint16_t*>(vraw);
  auto keyRow = [&](int64_t at) -> const float* {
    if (!a.kvF16) return kf + at;
    kHalfRow(kh16 + at, krow, hd);
    return krow;
  };
  auto valueRow = [&](int64_t at) -> const float* {
    if (!a.kvF16) return vf + at;
    kHalfRow(vh16 + at, vrow, hd);
    return vrow;
  };
  // KV head outermost: each key tile serves every query head of its group while it is cached.
  for (int64_t kh = 0; kh < a.Hkv; ++kh) {
    for (int64_t i0 = 0; i0 < a.Tq; i0 += tq) {
      const int64_t nq = std::min(tq, a.Tq - i0);
      for (int64_t gh = 0; gh < group; ++gh) {
        const int64_t h = kh * group + gh;
        for (int64_t i = 0; i < nq; ++i) {
          const int64_t s = gh * tq + i;
          mx[s] = -INFINITY;
          sm[s] = 0.0f;
          const float* qi = q + ((i0 + i) * a.Hq + h) * hd;
          for (int64_t d = 0; d < hd; ++d) {
            acc[s * hd + d] = 0.0f;
            qu[s * hd + d] = rel ? qi[d] + u[h * hd + d] : qi[d];
            qv[s * hd + d] = rel ? qi[d] + vb[h * hd + d] : 0.0f;
          }
        }
      }
      // Key range any query of the tile can see.
      const int64_t qlo = a.qpos0 + i0, qhi = a.qpos0 + i0 + nq - 1;
      int64_t jlo = 0, jhi = a.Tk - 1;
      if (a.mode >= 1) jhi = std::min(jhi, qhi - a.kpos0);
      if (a.mode == 2) jlo = std::max<int64_t>(0, qlo - a.window + 1 - a.kpos0);
      for (int64_t j0 = jlo; j0 <= jhi; j0 += a.tk) {
        const int64_t nk = std::min(a.tk, jhi - j0 + 1);
        for (int64_t gh = 0; gh < group; ++gh) {
          const int64_t h = kh * group + gh;
          for (int64_t i = 0; i < nq; ++i) {
            const int64_t st = gh * tq + i;
            const int64_t qp = a.qpos0 + i0 + i;
            float tileMax = -INFINITY;
            for (int64_t jj = 0; jj < nk; ++jj) {
              const int64_t j = j0 + jj;
              const int64_t kp = a.kpos0 + j;
              const bool visible = a.mode == 0 || (kp <= qp && (a.mode == 1 || kp > qp - a.window));
              float s = -INFINITY;
              if (visible) {
                s = kDotF(qu + st * hd, keyRow((j * a.Hkv + kh) * hd), hd);
                if (rel) s += kDotF(qv + st * hd, p + ((a.Tk - 1 - ((i0 + i) - j)) * a.Hq + h) * hd, hd);
                s *= a.scale;
              }
              sc[i * a.tk + jj] = s;
              tileMax = std::max(tileMax, s);
            }
            if (tileMax == -INFINITY) continue;
            const float m = std::max(mx[st], tileMax);
            const float alpha = mx[st] == -INFINITY ? 0.0f : std::exp(mx[st] - m);
            float* ai = acc + st * hd;
            if (alpha != 1.0f)
              for (int64_t d = 0; d < hd; ++d) ai[d] *= alpha;
            float l = sm[st] * alpha;
            for (int64_t jj = 0; jj < nk; ++jj) {
              const float s = sc[i * a.tk + jj];
              if (s == -INFINITY) continue;
              const float w = std::exp(s - m);
              l += w;
              kAxpy(w, valueRow(((j0 + jj) * a.Hkv + kh) * hd), ai, hd);
            }
            mx[st] = m;
            sm[st] = l;
          }
        }
      }
      for (int64_t gh = 0; gh < group; ++gh) {
        const int64_t h = kh * group + gh;
        for (int64_t i = 0; i < nq; ++i) {
          const int64_t st = gh * tq + i;
          float* o = out + ((i0 + i) * a.Hq + h) * hd;
          const float inv = sm[st] > 0 ? 1.0f / sm[st] : 0.0f;
          for (int64_t d = 0; d < hd; ++d) o[d] = acc[st * hd + d] * inv;
        }
      }
    }
  }
}

void Conv1dCausal(const float* x, const float* w, float* state, float* y, int64_t T, int64_t C, int64_t k) {
  const int64_t keep = k - 1;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      float s = 0;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t src = t - keep + j;  // < 0: from the carried state
        const float v = src >= 0 ? x[src * C + c] : state[(keep + src) * C + c];
        s += w[c * k + j] * v;
      }
      y[t * C + c] = s;
    }
  }
  // New state: the last k−1 input rows (from x, or older rows from the state when T < k−1).
  for (int64_t r = 0; r < keep; ++r) {
    const int64_t src = T - keep + r;
    for (int64_t c = 0; c < C; ++c) {
      if (src >= 0) state[r * C + c] = x[src * C + c];
      else state[r * C + c] = state[(r + T) * C + c];
    }
  }
}

void Conv1dSame(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t C, int64_t k, int64_t t0,
                int64_t t1) {
  const int64_t pad = (k - 1) / 2;
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      float s = bias != nullptr ? bias[c] : 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t src = t + j - pad;
        if (src >= 0 && src < T) s += w[c * k + j] * x[src * C + c];
      }
      y[(t - t0) * C + c] = s;
    }
  }
}

void Conv2dS2(const float* in, int64_t Cin, int64_t inRow0, int64_t inRows, int64_t inTotal, int64_t inCols, const float* w,
              const float* bias, bool depthwise, float* out, int64_t Cout, int64_t outRow0, int64_t outRows, int64_t outCols,
              bool relu) {
  for (int64_t co = 0; co < Cout; ++co) {
    for (int64_t r = 0; r < outRows; ++r) {
      const int64_t orow = outRow0 + r;
      for (int64_t col = 0; col < outCols; ++col) {
        float s = bias != nullptr ? bias[co] : 0.0f;
        const int64_t ciLo = depthwise ? co : 0;
        const int64_t ciHi = depthwise ? co + 1 : Cin;
        for (int64_t ci = ciLo; ci < ciHi; ++ci) {
          const float* wk = w + (depthwise ? co * 9 : (co * Cin + ci) * 9);
          for (int64_t di = 0; di < 3; ++di) {
            const int64_t irow = 2 * orow - 1 + di;  // absolute input row
            if (irow < 0 || irow >= inTotal) continue;
            const float* row = in + (ci * inRows + (irow - inRow0)) * inCols;
            for (int64_t dj = 0; dj < 3; ++dj) {
              const int64_t icol = 2 * col - 1 + dj;
              if (icol < 0 || icol >= inCols) continue;
              s += wk[di * 3 + dj] * row[icol];
            }
          }
        }
        out[(co * outRows + r) * outCols + col] = relu && s < 0 ? 0.0f : s;
      }
    }
  }
}

void Pointwise(const float* in, const float* w, const float* bias, float* out, int64_t Cin, int64_t Cout, int64_t P, bool relu) {
  for (int64_t c = 0; c < Cout; ++c) {
    float* o = out + c * P;
    const float b = bias != nullptr ? bias[c] : 0.0f;
    for (int64_t p = 0; p < P; ++p) o[p] = b;
    for (int64_t ci = 0; ci < Cin; ++ci) {
      const float wc = w[c * Cin + ci];
      const float* x = in + ci * P;
      for (int64_t p = 0; p < P; ++p) o[p] += wc * x[p];
    }
    if (relu)
      for (int64_t p = 0; p < P; ++p) o[p] = o[p] < 0 ? 0.0f : o[p];
  }
}

}  // namespace voxslab
