// The GEMV kernels of each instruction set, one file each (gemv_scalar.cc, gemv_avx2.cc,
// gemv_avx512.cc), and what gemv.cc's dispatch and threading need of them. Each x86 file sets
// its target once for a region of code (#pragma GCC target), so no function there carries its
// own, and what the headers define before that region is compiled for the baseline: a
// function shared by two files can never be linked in one file's wider instructions. Internal
// to the addon.
#pragma once

#include <cstdint>

#include "kernels.h"
#include "simd.h"

namespace voxslab::gemv {

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

// ---- scalar (gemv_scalar.cc): the reference every other path equals where the tests demand bits ----
void SplitEvensOdds(int8_t* xq, int64_t K);
void QuantizeScalar(const float* x, int64_t K, int group, int8_t* xq, float* xs, float* xsum);
// Each of the n rows of X quantized as QuantizeActivations quantizes it, into its `per` bytes of
// scratch (GemvIntScratchBytes): xsum, xs, then xq (gemv.cc).
void QuantizeRows(const float* X, int64_t n, int64_t K, int group, bool q4, void* scratch, int64_t per);
// xsum[g] = Σ x over group g, added in order in f32.
void GroupSums(const float* x, int64_t K, int group, float* xsum);
void GemvScalar(WeightType type, const void* w, const uint16_t* scales, const uint16_t* biases, int group,
                const float* x, float* y, int64_t M, int64_t K, float* xsum);
void GemvIntScalar(bool q4, const uint8_t* w, const uint16_t* scales, const uint16_t* biases, int group,
                   const int8_t* xq, const float* xs, const float* xsum, float* y, int64_t M, int64_t K);

#ifdef VOXSLAB_X86
// ---- AVX2 + FMA + F16C (gemv_avx2.cc) ----
void SplitEvensOddsAvx2(int8_t* xq, int64_t K);
void QuantizeAvx2(const float* x, int64_t K, int group, int8_t* xq, float* xs, float* xsum);
void GemvAvx2(WeightType type, const void* w, const uint16_t* scales, const uint16_t* biases, int group,
              const float* x, float* y, int64_t M, int64_t K, float* xsum);
// Activation rows the AVX2 f32 GEMV takes against one pass over the weights (GemvRows).
constexpr int kF32Many = 3;
void GemvF32Avx2Many(const float* w, const float* const* x, float* const* y, int na, int64_t M, int64_t K);
void GemvIntAvx2Many(bool q4, const uint8_t* w, const uint16_t* scales, const uint16_t* biases, int group,
                     const int8_t* const* xq, const float* const* xs, const float* const* xsum, float* const* y,
                     int na, int64_t M, int64_t K);
void GemvIntAvx2(bool q4, const uint8_t* w, const uint16_t* scales, const uint16_t* biases, int group,
                 const int8_t* xq, const float* xs, const float* xsum, float* y, int64_t M, int64_t K);

// ---- AVX-512 (gemv_avx512.cc): float GEMV and activation quantization on AVX-512F; the integer GEMV on VNNI ----
void QuantizeAvx512(const float* x, int64_t K, int group, int8_t* xq, float* xs, float* xsum);
void GemvAvx512(WeightType type, const void* w, const uint16_t* scales, const uint16_t* biases, int group,
                const float* x, float* y, int64_t M, int64_t K, float* xsum);
void GemvIntVnniMulti(bool q4, const uint8_t* w, const uint16_t* scales, const uint16_t* biases, int group,
                      const int8_t* const* xq, const float* const* xs, const float* const* xsum, float* const* y,
                      int na, int64_t mb, int64_t K);
void GemvIntVnni(bool q4, const uint8_t* w, const uint16_t* scales, const uint16_t* biases, int group,
                 const int8_t* xq, const float* xs, const float* xsum, float* y, int64_t M, int64_t K);
#endif

#ifdef VOXSLAB_ARM
// ---- AArch64 (gemv_neon.cc): float GEMV and quantization on NEON; the integer GEMV at the
// chosen level (neon, dotprod or i8mm), all levels with the AVX2 integer GEMV's bits ----
// Activation rows the integer GEMV takes against one pass over the weight rows (GemvRows).
constexpr int kNeonMany = 6;
void SplitEvensOddsNeon(int8_t* xq, int64_t K);
void QuantizeNeon(const float* x, int64_t K, int group, int8_t* xq, float* xs, float* xsum);
void GemvNeon(WeightType type, const void* w, const uint16_t* scales, const uint16_t* biases, int group,
              const float* x, float* y, int64_t M, int64_t K, float* xsum);
void GemvIntNeonMany(bool q4, const uint8_t* w, const uint16_t* scales, const uint16_t* biases, int group,
                     const int8_t* const* xq, const float* const* xs, const float* const* xsum, float* const* y,
                     int na, int64_t M, int64_t K);
void GemvIntNeon(bool q4, const uint8_t* w, const uint16_t* scales, const uint16_t* biases, int group,
                 const int8_t* xq, const float* xs, const float* xsum, float* y, int64_t M, int64_t K);
// Weight rows [m0, m1) of the integer GEMM (gemm_int.cc) against n activation rows quantized as
// GemvRows quantizes them (`per` bytes each in scratch), into Y [n][M].
void GemmIntNeonRows(bool q4, int group, const uint8_t* w, const uint16_t* scales, const uint16_t* biases, int64_t K, int64_t M,
                     int64_t m0, int64_t m1, const uint8_t* scratch, int64_t per, int64_t n, float* Y);
#endif

}  // namespace voxslab::gemv
