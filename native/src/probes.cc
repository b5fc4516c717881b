// Probes of the machine's limits (peak FMA rate, streaming read bandwidth) for the benchmarks'
// ratios, on the kernels' chosen instruction set.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

#include "cpu.h"
#include "kernels.h"
#include "pool.h"
#include "simd.h"
#include "vec.h"

namespace voxslab {

namespace {

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

#ifdef VOXSLAB_X86
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

// The integer GEMM's multiply at its peak: `iterations` × 12 independent chains of the
// instruction its inner loop is built on. Saturating values change no instruction's timing.
__attribute__((target("avx2"))) float Int8ProbeAvx2(int64_t iterations) {
  __m256i a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_epi8(static_cast<char>(i + 1));
  const __m256i b = _mm256_set1_epi8(3);
  for (int64_t it = 0; it < iterations; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_maddubs_epi16(a[i], b);
  __m256i s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_xor_si256(s, a[i]);
  return static_cast<float>(_mm256_extract_epi16(s, 0));
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) float Int8ProbeVnni(int64_t iterations) {
  __m512i a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_epi32(i + 1);
  const __m512i b = _mm512_set1_epi32(0x03030303);
  for (int64_t it = 0; it < iterations; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_dpbusd_epi32(a[i], b, b);
  __m512i s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_xor_si512(s, a[i]);
  return static_cast<float>(_mm512_cvtsi512_si32(s));
}
#endif

float Int8ProbeNone(int64_t) { return 0; }

#ifdef VOXSLAB_ARM
// ReadProbeAvx2's four streams on 128-bit registers.
float ReadProbeNeon(const float* x, int64_t n) {
  const int64_t q = (n / 4) & ~int64_t{15};
  const float* p[4] = {x, x + q, x + 2 * q, x + 3 * q};
  float32x4_t s[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  for (int64_t i = 0; i < q; i += 16)
    for (int j = 0; j < 4; ++j)
      s[j] = vaddq_f32(s[j], vaddq_f32(vaddq_f32(vld1q_f32(p[j] + i), vld1q_f32(p[j] + i + 4)),
                                       vaddq_f32(vld1q_f32(p[j] + i + 8), vld1q_f32(p[j] + i + 12))));
  float t = 0;
  for (int64_t i = 4 * q; i < n; ++i) t += x[i];
  return HsumNeon(vaddq_f32(vaddq_f32(s[0], s[1]), vaddq_f32(s[2], s[3]))) + t;
}
#endif

struct Probes {
  float (*fma)(int64_t);
  float (*read)(const float*, int64_t);
  int fmaLanes;  // f32 lanes per FMA in the peak probe
  const char* isa;
  float (*int8)(int64_t) = Int8ProbeNone;
  int int8Macs = 0;  // multiply-adds per instruction of the integer probe (0: none)
};

Probes Choose() {
#ifdef VOXSLAB_X86
  switch (ChosenIsa()) {
    // The integer GEMM runs vpdpbusd where VNNI is chosen and vpmaddubsw otherwise.
    case Isa::kAvx512:
      if (ChosenVnni()) return {avx512::FmaProbe, ReadProbeAvx2, avx512::kLanes, "avx512f+vnni", Int8ProbeVnni, 64};
      return {avx512::FmaProbe, ReadProbeAvx2, avx512::kLanes, "avx512f", Int8ProbeAvx2, 32};
    case Isa::kAvx2: return {avx2::FmaProbe, ReadProbeAvx2, avx2::kLanes, "avx2+fma", Int8ProbeAvx2, 32};
    default: break;
  }
#elif defined(VOXSLAB_ARM)
  if (ChosenIsa() != Isa::kScalar) return {neon::FmaProbe, ReadProbeNeon, neon::kLanes, IsaName(ChosenIsa())};
#endif
  return {FmaProbeScalar, ReadProbeScalar, 1, "scalar"};
}

const Probes kProbes = Choose();

}  // namespace

float FmaProbe(int64_t iterations) { return kProbes.fma(iterations); }
int FmaLanes() { return kProbes.fmaLanes; }
float Int8Probe(int64_t iterations) { return kProbes.int8(iterations); }
int Int8Macs() { return kProbes.int8Macs; }
namespace {

struct ReadTask {
  const float* x;
  int64_t n;
  std::atomic<float>* sum;
};

constexpr int64_t kReadChunk = 1 << 16;  // floats per unit of the split

void RunReadParts(const void* c, int64_t r0, int64_t r1) {
  const ReadTask& t = *static_cast<const ReadTask*>(c);
  const int64_t a = r0 * kReadChunk, b = std::min(t.n, r1 * kReadChunk);
  if (b > a) t.sum->store(kProbes.read(t.x + a, b - a), std::memory_order_relaxed);
}

}  // namespace

// Split among the calling thread's helpers (setComputeThreads), each part read as four streams.
float ReadProbe(const float* x, int64_t n) {
  if (Pool().threads() == 1) return kProbes.read(x, n);
  std::atomic<float> sum{0};
  const ReadTask task{x, n, &sum};
  Pool().Run(RunReadParts, &task, (n + kReadChunk - 1) / kReadChunk, 1, n);
  return sum.load(std::memory_order_relaxed);
}
const char* KernelIsa() { return kProbes.isa; }

}  // namespace voxslab
