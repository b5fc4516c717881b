// Tiled attention with an online softmax: the core (attention_core.h) compiled for each
// instruction set, split over KV heads among the calling thread's helpers.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu.h"
#include "kernels.h"
#include "pool.h"
#include "simd.h"

namespace voxslab {

namespace {

// The scalar vocabulary: one lane.
namespace scalar {
using Vec = float;
constexpr int kLanes = 1;
constexpr int kPvVectors = 4;
inline Vec Zero() { return 0.0f; }
inline Vec Load(const float* p) { return *p; }
inline Vec LoadHalf(const uint16_t* p) { return F16(*p); }
inline void StoreU(float* p, Vec v) { *p = v; }
inline Vec Splat(float x) { return x; }
inline Vec Fma(Vec a, Vec b, Vec c) { return a * b + c; }
inline Vec Add(Vec a, Vec b) { return a + b; }
inline Vec Sub(Vec a, Vec b) { return a - b; }
inline Vec Mul(Vec a, Vec b) { return a * b; }
inline Vec Max(Vec a, Vec b) { return std::max(a, b); }
inline float MaxOf(Vec v) { return v; }
inline float Sum(Vec v) { return v; }
inline void Sum4(Vec a, Vec b, Vec c, Vec d, float* out) {
  out[0] = a;
  out[1] = b;
  out[2] = c;
  out[3] = d;
}
inline Vec Exp(Vec x) { return std::exp(x); }
constexpr bool kPairSums = false;
#include "attention_core.h"
}  // namespace scalar

// e^x for x ≤ 0 (a score minus the running maximum): x = n·ln2 + r with |r| ≤ ln2/2 (ln2 in two
// parts), e^r by Cephes' expf polynomial (relative error about 10⁻⁷), 2^n into the exponent
// bits; below −87 (and for NaN) it is 0.
constexpr float kExpLo = -87.0f, kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kExpP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

#ifdef VOXSLAB_X86

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
using Vec = __m256;
constexpr int kLanes = 8;
constexpr int kPvVectors = 2;  // 4 rows × 2 accumulators in 16 registers
inline Vec Zero() { return _mm256_setzero_ps(); }
inline Vec Load(const float* p) { return _mm256_loadu_ps(p); }
inline Vec LoadHalf(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline void StoreU(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec Splat(float x) { return _mm256_set1_ps(x); }
inline Vec Fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec Add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline Vec Sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
inline Vec Mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
inline Vec Max(Vec a, Vec b) { return _mm256_max_ps(a, b); }
inline float MaxOf(Vec v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}
inline float Sum(Vec v) { return Hsum(v); }
// Four horizontal sums at once, each vector's lanes added in the same order in every slot.
inline void Sum4(Vec a, Vec b, Vec c, Vec d, float* out) {
  const auto half = [](Vec v) { return _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); };
  _mm_storeu_ps(out, _mm_hadd_ps(_mm_hadd_ps(half(a), half(b)), _mm_hadd_ps(half(c), half(d))));
}
inline Vec Exp(Vec x) {
  const Vec xc = _mm256_max_ps(x, _mm256_set1_ps(kExpLo));
  const Vec n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const Vec r = _mm256_sub_ps(_mm256_sub_ps(xc, _mm256_mul_ps(n, _mm256_set1_ps(kLn2Hi))), _mm256_mul_ps(n, _mm256_set1_ps(kLn2Lo)));
  Vec y = _mm256_set1_ps(kExpP[0]);
  for (int i = 1; i < 6; ++i) y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kExpP[i]));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), _mm256_cmp_ps(x, _mm256_set1_ps(kExpLo), _CMP_GE_OQ));
}
constexpr bool kPairSums = false;
#include "attention_core.h"
}  // namespace avx2
#pragma GCC pop_options

// GCC 12 reports the intrinsics' own undefined pass-through operands as uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {
using Vec = __m512;
constexpr int kLanes = 16;
constexpr int kPvVectors = 4;  // 4 rows × 4 accumulators in 32 registers
inline Vec Zero() { return _mm512_setzero_ps(); }
inline Vec Load(const float* p) { return _mm512_loadu_ps(p); }
inline Vec LoadHalf(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline void StoreU(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec Splat(float x) { return _mm512_set1_ps(x); }
inline Vec Fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec Add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline Vec Sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
inline Vec Mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
inline Vec Max(Vec a, Vec b) { return _mm512_max_ps(a, b); }
inline float MaxOf(Vec v) { return _mm512_reduce_max_ps(v); }
inline float Sum(Vec v) { return Hsum512(v); }
// Four horizontal sums at once, each vector's lanes added in the same order in every slot.
inline void Sum4(Vec a, Vec b, Vec c, Vec d, float* out) {
  const auto quarter = [](Vec v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  };
  _mm_storeu_ps(out, _mm_hadd_ps(_mm_hadd_ps(quarter(a), quarter(b)), _mm_hadd_ps(quarter(c), quarter(d))));
}
inline Vec Exp(Vec x) {
  const Vec xc = _mm512_max_ps(x, _mm512_set1_ps(kExpLo));
  const Vec n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const Vec r = _mm512_sub_ps(_mm512_sub_ps(xc, _mm512_mul_ps(n, _mm512_set1_ps(kLn2Hi))), _mm512_mul_ps(n, _mm512_set1_ps(kLn2Lo)));
  Vec y = _mm512_set1_ps(kExpP[0]);
  for (int i = 1; i < 6; ++i) y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kExpP[i]));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpLo), _CMP_GE_OQ), _mm512_mul_ps(y, _mm512_castsi512_ps(e)));
}
// [a_i + a_(i+8) | b_i + b_(i+8)]: Sum4's first additions for two vectors.
inline Vec Halves(Vec a, Vec b) { return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE)); }
// 128-bit lane L: the four partials h_i + h_(i+4) of the L-th vector halved into x, then y.
inline Vec Quarters(Vec x, Vec y) { return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD)); }
// Sum4's sums of eight vectors (two keys of up to four rows, acc[key·4 + row]) in one transposing
// tree whose every addition is one Sum4 makes (lanes i + 8, then i + 4, then the pairs of hadd),
// scaled and stored to each row's scores at keys jj and jj + 1.
template <int NB>
inline void StorePairSums(const Vec* acc, float scale, float* const* sc, int64_t jj) {
  const Vec z = Quarters(Halves(acc[0], acc[1]), Halves(acc[2], acc[3]));
  const Vec w = Quarters(Halves(acc[4], acc[5]), Halves(acc[6], acc[7]));
  // Lane L: [t0 + t1, t2 + t3] of acc[L], then of acc[4 + L]; then each pair's sum.
  const Vec u = _mm512_add_ps(_mm512_shuffle_ps(z, w, 0x88), _mm512_shuffle_ps(z, w, 0xDD));
  const Vec s = _mm512_mul_ps(_mm512_add_ps(_mm512_add_ps(u, _mm512_permute_ps(u, 0xB1)), _mm512_setzero_ps()), _mm512_set1_ps(scale));
  // Row r's two scores side by side in 64 bits: elements 4r and 4r + 2.
  const __m512 c = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0), s);
  const __m128 lo = _mm512_castps512_ps128(c);
  const __m128 hi = _mm512_extractf32x4_ps(c, 1);
  _mm_storel_pi(reinterpret_cast<__m64*>(sc[0] + jj), lo);
  if constexpr (NB > 1) _mm_storeh_pi(reinterpret_cast<__m64*>(sc[1] + jj), lo);
  if constexpr (NB > 2) _mm_storel_pi(reinterpret_cast<__m64*>(sc[2] + jj), hi);
  if constexpr (NB > 3) _mm_storeh_pi(reinterpret_cast<__m64*>(sc[3] + jj), hi);
}
constexpr bool kPairSums = true;
#include "attention_core.h"
}  // namespace avx512
#pragma GCC pop_options
#pragma GCC diagnostic pop
#endif

#ifdef VOXSLAB_ARM
// The AVX2 vocabulary's operations on 128-bit registers: Max, Exp's steps and its flush below
// kExpLo are the same per lane.
namespace neon {
using Vec = float32x4_t;
constexpr int kLanes = 4;
constexpr int kPvVectors = 4;  // 4 rows × 4 accumulators in 32 registers
inline Vec Zero() { return vdupq_n_f32(0.0f); }
inline Vec Load(const float* p) { return vld1q_f32(p); }
inline Vec LoadHalf(const uint16_t* p) { return Half4(p); }
inline void StoreU(float* p, Vec v) { vst1q_f32(p, v); }
inline Vec Splat(float x) { return vdupq_n_f32(x); }
inline Vec Fma(Vec a, Vec b, Vec c) { return vfmaq_f32(c, a, b); }
inline Vec Add(Vec a, Vec b) { return vaddq_f32(a, b); }
inline Vec Sub(Vec a, Vec b) { return vsubq_f32(a, b); }
inline Vec Mul(Vec a, Vec b) { return vmulq_f32(a, b); }
// a where a > b, else b (so b where either is NaN), as maxps.
inline Vec Max(Vec a, Vec b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
inline float MaxOf(Vec v) { return vmaxvq_f32(v); }
inline float Sum(Vec v) { return HsumNeon(v); }
// Four horizontal sums at once, each with Sum's order.
inline void Sum4(Vec a, Vec b, Vec c, Vec d, float* out) { vst1q_f32(out, vpaddq_f32(vpaddq_f32(a, b), vpaddq_f32(c, d))); }
inline Vec Exp(Vec x) {
  const Vec xc = Max(x, vdupq_n_f32(kExpLo));
  const Vec n = vrndnq_f32(vmulq_f32(xc, vdupq_n_f32(kLog2e)));
  const Vec r = vsubq_f32(vsubq_f32(xc, vmulq_f32(n, vdupq_n_f32(kLn2Hi))), vmulq_f32(n, vdupq_n_f32(kLn2Lo)));
  Vec y = vdupq_n_f32(kExpP[0]);
  for (int i = 1; i < 6; ++i) y = vfmaq_f32(vdupq_n_f32(kExpP[i]), y, r);
  y = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), y, vmulq_f32(r, r));
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
  const uint32x4_t keep = vcgeq_f32(x, vdupq_n_f32(kExpLo));
  return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(vmulq_f32(y, vreinterpretq_f32_s32(e))), keep));
}
constexpr bool kPairSums = false;
#include "attention_core.h"
}  // namespace neon
#endif

using HeadsFn = void (*)(const AttentionParams&, const float*, const void*, const void*, float*, const float*, const float*,
                         const float*, float*, int64_t, int64_t, int64_t);

HeadsFn ChooseHeads() {
#ifdef VOXSLAB_X86
  if (ChosenIsa() == Isa::kAvx512) return avx512::AttentionHeads;
  if (ChosenIsa() == Isa::kAvx2) return avx2::AttentionHeads;
#elif defined(VOXSLAB_ARM)
  if (ChosenIsa() != Isa::kScalar) return neon::AttentionHeads;
#endif
  return scalar::AttentionHeads;
}
const HeadsFn kHeads = ChooseHeads();

// Floats of one KV head's slot, rounded to whole cache lines so threads never share one.
int64_t SlotFloats(int64_t tq, int64_t tk, int64_t hd, int64_t group) {
  constexpr int64_t line = 16;  // floats per cache line
  return (scalar::kBlock * tk + group * tq * (2 + 3 * hd) + 2 * tk * hd + line - 1) / line * line;
}

struct HeadsTask {
  const AttentionParams* a;
  const float* q;
  const void* k;
  const void* v;
  float* out;
  const float *p, *u, *vb;
  float* scratch;
  int64_t slot;
};

void RunHeads(const void* c, int64_t kh0, int64_t kh1) {
  const HeadsTask& t = *static_cast<const HeadsTask*>(c);
  kHeads(*t.a, t.q, t.k, t.v, t.out, t.p, t.u, t.vb, t.scratch, t.slot, kh0, kh1);
}

}  // namespace

int64_t AttentionScratchFloats(int64_t tq, int64_t tk, int64_t hd, int64_t group, int64_t hkv) {
  // One slot per KV head: a block of four query rows' scores [4][tk]; per query row of the group's tile its max
  // and sum, accumulator, q+u and q+v [hd]; the key tile's widened keys and values [tk][hd].
  return hkv * SlotFloats(tq, tk, hd, group);
}

void Attention(const AttentionParams& a, const float* q, const void* kraw, const void* vraw, float* out, const float* p,
               const float* u, const float* vb, float* scratch) {
  const int64_t group = a.Hq / a.Hkv;
  const HeadsTask task{&a, q, kraw, vraw, out, p, u, vb, scratch, SlotFloats(a.tq, a.tk, a.hd, group)};
  // Multiply-adds of the scores and the weighted values (all keys: an upper bound under a mask).
  const int64_t work = 2 * a.Tq * a.Tk * a.Hq * a.hd * (p != nullptr ? 2 : 1);
  // Parts of Hkv / threads heads: each thread reads its heads' share of every key row in the
  // cache's order, so the threads stream side by side instead of each striding through one head.
  Pool().Run(RunHeads, &task, a.Hkv, std::max<int64_t>(1, a.Hkv / Pool().threads()), work);
}

}  // namespace voxslab
