// One vocabulary over every vector width: namespaces avx2 and avx512 each define Vec, kLanes,
// Zero(), Load(p), Splat(x), Fma(a, b, c), Add(a, b), Store(p, v) (p 64-byte aligned) and
// Sum(v) (a fixed-order horizontal sum), then the kernels written once over that vocabulary
// (vec_kernels.h), each compiled for its own registers; namespace neon the same over AArch64's
// 128-bit registers. Internal to the addon.
#pragma once

#include "simd.h"

#if defined(VOXSLAB_X86) || defined(VOXSLAB_ARM)
namespace voxslab {

// Writes a micro-kernel's accumulators (mr rows of `width`, first nr columns) into C: the
// first k panel stores them (plus the bias), later panels add to what is there.
inline void WriteTile(const float* tmp, int width, int mr, float* C, int64_t ldc, int64_t nr, bool first, const float* bias) {
  for (int i = 0; i < mr; ++i) {
    float* row = C + i * ldc;
    const float* t = tmp + i * width;
    for (int64_t j = 0; j < nr; ++j) row[j] = first ? t[j] + (bias != nullptr ? bias[j] : 0.0f) : row[j] + t[j];
  }
}

}  // namespace voxslab
#endif

#ifdef VOXSLAB_X86
namespace voxslab {

// The vocabulary over one register width; MM is its intrinsics' prefix (_mm256, _mm512).
#define VOXSLAB_VEC_VOCABULARY(VEC, LANES, MM, SUM)                 \
  using Vec = VEC;                                                  \
  constexpr int kLanes = LANES;                                     \
  inline Vec Zero() { return MM##_setzero_ps(); }                   \
  inline Vec Load(const float* p) { return MM##_loadu_ps(p); }      \
  inline Vec Splat(float x) { return MM##_set1_ps(x); }             \
  inline Vec Fma(Vec a, Vec b, Vec c) { return MM##_fmadd_ps(a, b, c); } \
  inline Vec Add(Vec a, Vec b) { return MM##_add_ps(a, b); }        \
  inline void Store(float* p, Vec v) { MM##_store_ps(p, v); }       \
  inline float Sum(Vec v) { return SUM(v); }

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
VOXSLAB_VEC_VOCABULARY(__m256, 8, _mm256, Hsum)
#include "vec_kernels.h"
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {
VOXSLAB_VEC_VOCABULARY(__m512, 16, _mm512, Hsum512)
#include "vec_kernels.h"
}  // namespace avx512
#pragma GCC pop_options

#undef VOXSLAB_VEC_VOCABULARY

}  // namespace voxslab
#endif

#ifdef VOXSLAB_ARM
namespace voxslab::neon {
using Vec = float32x4_t;
constexpr int kLanes = 4;
inline Vec Zero() { return vdupq_n_f32(0.0f); }
inline Vec Load(const float* p) { return vld1q_f32(p); }
inline Vec Splat(float x) { return vdupq_n_f32(x); }
inline Vec Fma(Vec a, Vec b, Vec c) { return vfmaq_f32(c, a, b); }
inline Vec Add(Vec a, Vec b) { return vaddq_f32(a, b); }
inline void Store(float* p, Vec v) { vst1q_f32(p, v); }
inline float Sum(Vec v) { return HsumNeon(v); }
#include "vec_kernels.h"
}  // namespace voxslab::neon
#endif
