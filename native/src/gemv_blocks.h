// Integer blocks the AVX2 and AVX-512 VNNI GEMVs share: lane scales, the group walk, the AVX2
// unpacking and dot products, the bias sums, the AVX-512 streams' prefetch. Included inside each x86 file's
// target region, and internal to it (an anonymous namespace), so each file compiles its own.
#pragma once

#include "gemv_isa.h"

#ifdef VOXSLAB_X86
namespace voxslab::gemv {
namespace {

// Lane scales s_g·xs_g of one 32-byte block: group g, or (q4, group 32) groups g and g + 1,
// four lanes each.
inline __m256 VnniScale(const uint16_t* sc, const float* xs, int64_t g, bool two) {
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
inline void Avx2Unpack(bool q4, const uint8_t* p, __m256i& a, __m256i& b) {
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
inline __m256i Avx2Q8Term(__m256i xa) {
  return _mm256_slli_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), xa), _mm256_set1_epi16(1)), 7);
}

// q8 lanes Σ(q − 128)·x + `term` (Avx2Q8Term of xa).
inline __m256 Avx2DotQ8(__m256i a, __m256i b, __m256i xa, __m256i term) {
  const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(b, _mm256_sign_epi8(xa, a)), _mm256_set1_epi16(1));
  return _mm256_cvtepi32_ps(_mm256_add_epi32(dot, term));
}

inline __m256 Avx2Dot(bool q4, __m256i a, __m256i b, __m256i xa, __m256i xb) {
  const __m256i ones16 = _mm256_set1_epi16(1);
  if (q4) {
    // Each 16-bit pair sum is at most 2·15·127 in magnitude, so two add without saturating.
    const __m256i d = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(a, xa), _mm256_maddubs_epi16(b, xb)), ones16);
    return _mm256_cvtepi32_ps(d);
  }
  return Avx2DotQ8(a, b, xa, Avx2Q8Term(xa));
}

inline __m256 Avx2IntDot(bool q4, const uint8_t* p, __m256i xa, __m256i xb) {
  __m256i a, b;
  Avx2Unpack(q4, p, a, b);
  return Avx2Dot(q4, a, b, xa, xb);
}

// The AVX-512 one-row streams' requests for the bytes ahead of p: into L1 kNearAhead on, into
// L2 `far` on.
inline __attribute__((always_inline)) void StreamAhead(const void* p, int64_t far) {
  _mm_prefetch(static_cast<const char*>(p) + kNearAhead, _MM_HINT_T0);
  _mm_prefetch(static_cast<const char*>(p) + far, _MM_HINT_T1);
}

// Σ_g b_g·xsum_g of one row: the bias term, in 8 lanes and then a tail, combined in a fixed order.
// BiasDot's groups past the last whole eight, from g.
inline float BiasTail(const uint16_t* bi, const float* xsum, int64_t g, int64_t groups) {
  float t = 0;
  for (; g < groups; ++g) t += _cvtsh_ss(bi[g]) * xsum[g];
  return t;
}

inline float BiasDot(const uint16_t* bi, const float* xsum, int64_t groups) {
  __m256 bacc = _mm256_setzero_ps();
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8) bacc = _mm256_fmadd_ps(Half8(bi + g), _mm256_loadu_ps(xsum + g), bacc);
  return Hsum(bacc) + BiasTail(bi, xsum, g, groups);
}

// Four BiasDots at once, lane i that of bias row bi + i·stride with input sums xsum[i], to its
// bits: one row with four activations' sums (stride 0), or four rows with one activation's.
// Bias rows bi[i] with input sums xsum[i].
inline __m128 BiasDot4(const uint16_t* const* bi, const float* const* xsum, int64_t groups) {
  __m256 b[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8)
    for (int i = 0; i < 4; ++i) b[i] = _mm256_fmadd_ps(Half8(bi[i] + g), _mm256_loadu_ps(xsum[i] + g), b[i]);
  const __m128 t = _mm_setr_ps(BiasTail(bi[0], xsum[0], g, groups), BiasTail(bi[1], xsum[1], g, groups), BiasTail(bi[2], xsum[2], g, groups),
                               BiasTail(bi[3], xsum[3], g, groups));
  return _mm_add_ps(Hsum4(b[0], b[1], b[2], b[3]), t);
}

inline __m128 BiasDot4(const uint16_t* bi, int64_t stride, const float* const* xsum, int64_t groups) {
  const uint16_t* rows[4] = {bi, bi + stride, bi + 2 * stride, bi + 3 * stride};
  return BiasDot4(rows, xsum, groups);
}

}  // namespace
}  // namespace voxslab::gemv
#endif
