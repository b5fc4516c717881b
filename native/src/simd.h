// Helpers the kernel files share: weight-element decoding, horizontal sums, the fixed-order
// dot product. Internal to the addon; include after the standard headers it needs.
#pragma once

#include <cstdint>
#include <cstring>
#include <thread>

#include "kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define VOXSLAB_X86 1
#endif

#if defined(__aarch64__) && defined(__GNUC__)
#include <arm_neon.h>
#define VOXSLAB_ARM 1
#endif

namespace voxslab {

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

inline bool Quantized(WeightType type) { return type == WeightType::kQ8 || type == WeightType::kQ4; }

// Bytes per stored element of a float encoding (q8 one, q4 half of one).
inline int64_t ElemBytes(WeightType type) {
  return type == WeightType::kF32 ? 4 : (type == WeightType::kF16 || type == WeightType::kBF16) ? 2 : 1;
}

// Element i of a float-encoded (f32, f16, bf16) weight array, as f32.
inline float FloatAt(WeightType type, const void* w, int64_t i) {
  if (type == WeightType::kF32) return static_cast<const float*>(w)[i];
  const uint16_t h = static_cast<const uint16_t*>(w)[i];
  return type == WeightType::kF16 ? F16(h) : Bf16(h);
}

// Element (n, k) of a weight matrix [N][K] of any type, as f32.
inline float WeightAt(const WeightRef& w, int64_t n, int64_t k, int64_t K) {
  const int64_t i = n * K + k;
  if (!Quantized(w.type)) return FloatAt(w.type, w.data, i);
  const uint8_t* b = static_cast<const uint8_t*>(w.data);
  const float q = w.type == WeightType::kQ8 ? b[i] : ((b[i >> 1] >> ((i & 1) * 4)) & 15);
  const int64_t g = n * (K / w.group) + k / w.group;
  return F16(w.scales[g]) * q + F16(w.biases[g]);
}

// Σ a[i]·b[i] in four accumulators combined in a fixed order, so every call rounds the same way.
template <typename T>
T DotFixed4(const T* a, const T* b, int64_t n) {
  T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
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

inline void CpuRelax() {
#if defined(VOXSLAB_X86)
  _mm_pause();
#elif defined(VOXSLAB_ARM)
  __asm__ __volatile__("yield");
#else
  std::this_thread::yield();
#endif
}

#ifdef VOXSLAB_X86
// Eight f16 values from p, as f32.
__attribute__((target("avx2,fma,f16c"))) inline __m256 Half8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

__attribute__((target("avx2,fma"))) inline float Hsum(__m256 v) {
  alignas(32) float l[8];
  _mm256_store_ps(l, v);
  return (((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])));
}

// Hsum of four vectors at once, lane a of the result Hsum(v[a]) to the bit: each horizontal add
// pairs the lanes Hsum pairs, in its order.
__attribute__((target("avx2,fma"))) inline __m128 Hsum4(__m256 v0, __m256 v1, __m256 v2, __m256 v3) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(v0, v1), _mm256_hadd_ps(v2, v3));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

__attribute__((target("avx512f"))) inline float Hsum512(__m512 v) {
  alignas(64) float l[16];
  _mm512_store_ps(l, v);
  float s[8];
  for (int i = 0; i < 8; ++i) s[i] = l[i] + l[i + 8];
  return (((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])));
}
#endif

#ifdef VOXSLAB_ARM
// The lanes of v added in one fixed order: (l0 + l1) + (l2 + l3).
inline float HsumNeon(float32x4_t v) {
  const float32x2_t p = vpadd_f32(vget_low_f32(v), vget_high_f32(v));
  return vget_lane_f32(p, 0) + vget_lane_f32(p, 1);
}

// Eight lanes as two halves, added as Hsum adds an AVX2 register's: ((l0 + l1) + (l2 + l3)) +
// ((l4 + l5) + (l6 + l7)).
inline float Hsum8(float32x4_t lo, float32x4_t hi) { return HsumNeon(lo) + HsumNeon(hi); }

// An f16 value as f32, converted by the hardware (F16's value).
inline float Half(uint16_t h) {
  __fp16 f;
  std::memcpy(&f, &h, 2);
  return f;
}

// Four f16 values from p, as f32.
inline float32x4_t Half4(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
#endif

}  // namespace voxslab
