// GEMV: one weight matrix times one or a few activation rows, for every weight encoding. This
// file chooses the instruction set's kernels once (cpu.h; the kernels are in gemv_scalar.cc,
// gemv_avx2.cc, gemv_avx512.cc and gemv_neon.cc) and splits rows among the calling thread's helpers (pool.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu.h"
#include "gemv_isa.h"
#include "kernels.h"
#include "pool.h"

namespace voxslab {

using namespace gemv;

void QuantizeActivations(const float* x, int64_t K, int group, bool q4, int8_t* xq, float* xs, float* xsum) {
#ifdef VOXSLAB_X86
  // The vector paths take groups of whole vectors (16 floats; 32 on AVX2); others (and scalar kernels) the loop.
  if (ChosenIsa() == Isa::kAvx512 && group % 16 == 0) QuantizeAvx512(x, K, group, xq, xs, xsum);
  else if (ChosenIsa() >= Isa::kAvx2 && group % 32 == 0) QuantizeAvx2(x, K, group, xq, xs, xsum);
  else QuantizeScalar(x, K, group, xq, xs, xsum);
#elif defined(VOXSLAB_ARM)
  if (ChosenIsa() != Isa::kScalar && group % 16 == 0) QuantizeNeon(x, K, group, xq, xs, xsum);
  else QuantizeScalar(x, K, group, xq, xs, xsum);
#else
  QuantizeScalar(x, K, group, xq, xs, xsum);
#endif
  if (!q4) return;
#ifdef VOXSLAB_X86
  if (ChosenIsa() >= Isa::kAvx2) return SplitEvensOddsAvx2(xq, K);
#elif defined(VOXSLAB_ARM)
  if (ChosenIsa() != Isa::kScalar) return SplitEvensOddsNeon(xq, K);
#endif
  SplitEvensOdds(xq, K);
}

namespace {

using GemvFn = void (*)(WeightType, const void*, const uint16_t*, const uint16_t*, int, const float*, float*, int64_t, int64_t, float*);
using GemvIntFn = void (*)(bool, const uint8_t*, const uint16_t*, const uint16_t*, int, const int8_t*, const float*, const float*, float*,
                           int64_t, int64_t);

GemvFn ChooseGemv() {
#ifdef VOXSLAB_X86
  switch (ChosenIsa()) {
    case Isa::kAvx512: return GemvAvx512;
    case Isa::kAvx2: return GemvAvx2;
    default: break;
  }
#elif defined(VOXSLAB_ARM)
  if (ChosenIsa() != Isa::kScalar) return GemvNeon;
#endif
  return GemvScalar;
}

// The integer path for shapes the vector kernels take (VectorIntShape); others run GemvIntScalar.
GemvIntFn ChooseGemvInt() {
#ifdef VOXSLAB_X86
  if (ChosenVnni()) return GemvIntVnni;
  if (ChosenIsa() != Isa::kScalar) return GemvIntAvx2;
#elif defined(VOXSLAB_ARM)
  if (ChosenIsa() != Isa::kScalar) return GemvIntNeon;
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

using GemvIntManyFn = void (*)(bool, const uint8_t*, const uint16_t*, const uint16_t*, int, const int8_t* const*, const float* const*,
                               const float* const*, float* const*, int, int64_t, int64_t);

// The integer path that takes several activation rows per pass over the weights, and how many
// at once: VNNI six where Laid takes them (else four), AVX2 six for q4 and four for q8, AArch64
// kNeonMany; none on the scalar path.
struct ManyPath {
  GemvIntManyFn fn;
  int64_t step;
};

#if defined(VOXSLAB_X86)
constexpr int kManyMax = std::max(kAvx2Many, kVnniMany);
#elif defined(VOXSLAB_ARM)
constexpr int kManyMax = kNeonMany;
#else
constexpr int kManyMax = 1;
#endif

ManyPath ManyPathFor(bool q4, int64_t K) {
#if defined(VOXSLAB_X86)
  if (kGemvIntVector == GemvIntVnni) return {GemvIntVnniMulti, VnniLaid(q4, kVnniMany, K) ? kVnniMany : 4};
  if (kGemvIntVector == GemvIntAvx2) return {GemvIntAvx2Many, q4 ? kAvx2Many : 4};
#elif defined(VOXSLAB_ARM)
  if (kGemvIntVector == GemvIntNeon) return {GemvIntNeonMany, kNeonMany};
#endif
  (void)q4, (void)K;
  return {nullptr, 0};
}

// Rows [r0, r1) of every Y[t], in blocks of weight rows that stay in cache across the n rows.
void RunRowsBlocks(const void* c, int64_t r0, int64_t r1) {
  const RowsTask& t = *static_cast<const RowsTask*>(c);
  const bool quant = Quantized(t.w.type);
  const bool q4 = t.w.type == WeightType::kQ4;
  const int64_t groups = quant ? t.K / t.w.group : 0;
  constexpr int64_t kBlock = 32;
  // Several positions per pass over a block, each weight block unpacked once for them.
  const ManyPath path = quant && VectorIntShape(t.w.group, t.K) ? ManyPathFor(q4, t.K) : ManyPath{nullptr, 0};
  for (int64_t m0 = r0; m0 < r1; m0 += kBlock) {
    const int64_t mb = std::min(kBlock, r1 - m0);
    if (path.fn != nullptr) {
      const uint8_t* wsub = static_cast<const uint8_t*>(t.w.data) + (q4 ? m0 * t.K / 2 : m0 * t.K);
      for (int64_t i0 = 0; i0 < t.n; i0 += path.step) {
        const int na = static_cast<int>(std::min<int64_t>(path.step, t.n - i0));
        const int8_t* xq[kManyMax] = {};
        const float* xs[kManyMax] = {};
        const float* xsum[kManyMax] = {};
        float* y[kManyMax] = {};
        for (int a = 0; a < na; ++a) {
          xsum[a] = reinterpret_cast<const float*>(t.scratch + (i0 + a) * t.per);
          xs[a] = xsum[a] + groups;
          xq[a] = reinterpret_cast<const int8_t*>(xs[a] + groups);
          y[a] = t.Y + (i0 + a) * t.M + m0;
        }
        path.fn(q4, wsub, t.w.scales + m0 * groups, t.w.biases + m0 * groups, t.w.group, xq, xs, xsum, y, na, mb, t.K);
      }
      continue;
    }
#if defined(VOXSLAB_X86)
    if (t.w.type == WeightType::kF32 && kGemv == GemvAvx2) {
      const float* wsub = static_cast<const float*>(t.w.data) + m0 * t.K;
      for (int64_t i0 = 0; i0 < t.n; i0 += kF32Many) {
        const int na = static_cast<int>(std::min<int64_t>(kF32Many, t.n - i0));
        const float* x[kF32Many] = {};
        float* y[kF32Many] = {};
        for (int a = 0; a < na; ++a) {
          x[a] = t.X + (i0 + a) * t.K;
          y[a] = t.Y + (i0 + a) * t.M + m0;
        }
        GemvF32Avx2Many(wsub, x, y, na, mb, t.K);
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

void gemv::QuantizeRows(const float* X, int64_t n, int64_t K, int group, bool q4, void* scratch, int64_t per) {
  const int64_t groups = K / group;
  for (int64_t t = 0; t < n; ++t) {
    float* xsum = reinterpret_cast<float*>(static_cast<uint8_t*>(scratch) + t * per);
    float* xs = xsum + groups;
    QuantizeActivations(X + t * K, K, group, q4, reinterpret_cast<int8_t*>(xs + groups), xs, xsum);
  }
}

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
