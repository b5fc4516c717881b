// GEMM for linear layers over many positions: W decoded to f32 panels once per block, then an
// AVX2, AVX-512 or NEON micro-kernel (vec_kernels.h) per tile, or a scalar loop (cpu.h chooses). The
// panels of a block are split among the calling thread's helpers (pool.h).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu.h"
#include "kernels.h"
#include "pool.h"
#include "simd.h"
#include "vec.h"

namespace voxslab {

namespace {

// Decodes inputs [k0, k0 + kc) of weight row n to f32, at a stride of NR floats. Quantized rows
// go a group at a time (k0 and kc are whole groups): the same s·q + b as WeightAt.
template <int NR>
void PackRow(const WeightRef& W, int64_t n, int64_t k0, int64_t kc, int64_t K, float* dst) {
  if (W.type == WeightType::kF32) {
    const float* row = static_cast<const float*>(W.data) + n * K + k0;
    for (int64_t k = 0; k < kc; ++k) dst[k * NR] = row[k];
  } else if (Quantized(W.type)) {
    const int64_t group = W.group;
    const int64_t groups = K / group;
    const uint8_t* data = static_cast<const uint8_t*>(W.data);
    for (int64_t k = 0; k < kc; k += group) {
      const int64_t g = n * groups + (k0 + k) / group;
      const float s = F16(W.scales[g]);
      const float b = F16(W.biases[g]);
      float* d = dst + k * NR;
      if (W.type == WeightType::kQ8) {
        const uint8_t* q = data + n * K + k0 + k;
        for (int64_t i = 0; i < group; ++i) d[i * NR] = s * static_cast<float>(q[i]) + b;
      } else {
        const uint8_t* q = data + (n * K + k0 + k) / 2;
        for (int64_t i = 0; i < group / 2; ++i) {
          d[2 * i * NR] = s * static_cast<float>(q[i] & 15) + b;
          d[(2 * i + 1) * NR] = s * static_cast<float>(q[i] >> 4) + b;
        }
      }
    }
  } else {
    for (int64_t k = 0; k < kc; ++k) dst[k * NR] = FloatAt(W.type, W.data, n * K + k0 + k);
  }
}

#ifdef VOXSLAB_X86
// r[i] becomes column i of the 8×8 block whose rows are r[0..7].
__attribute__((target("avx2"))) inline void Transpose8(__m256* r) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// PackRow for NR whole f32 rows from `rows` (K apart) and kc a multiple of 8: 8×8 blocks
// transposed in registers instead of one strided store per float. The same floats.
template <int NR>
__attribute__((target("avx2"))) void PackPanelF32(const float* rows, int64_t K, int64_t kc, float* panel) {
  for (int64_t j0 = 0; j0 < NR; j0 += 8)
    for (int64_t k = 0; k < kc; k += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(rows + (j0 + i) * K + k);
      Transpose8(r);
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(panel + (k + i) * NR + j0, r[i]);
    }
}

// PackRow for NR whole q8/q4 rows and kc whole groups: each row's eight weights at a time
// decoded as s·q + b (unfused, as PackRow), then 8×8 blocks transposed. The same floats.
template <int NR>
__attribute__((target("avx2"))) void PackPanelQuant(const WeightRef& W, int64_t n, int64_t k0, int64_t kc, int64_t K, float* panel) {
  const bool q4 = W.type == WeightType::kQ4;
  const int64_t group = W.group, groups = K / group;
  const auto* data = static_cast<const uint8_t*>(W.data);
  const __m128i nib = _mm_set1_epi8(15);
  for (int64_t j0 = 0; j0 < NR; j0 += 8)
    for (int64_t g0 = 0; g0 < kc; g0 += group) {
      __m256 s[8], b[8];
      for (int i = 0; i < 8; ++i) {
        const int64_t g = (n + j0 + i) * groups + (k0 + g0) / group;
        s[i] = _mm256_set1_ps(F16(W.scales[g]));
        b[i] = _mm256_set1_ps(F16(W.biases[g]));
      }
      for (int64_t k = g0; k < g0 + group; k += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i) {
          const int64_t at = (n + j0 + i) * K + k0 + k;  // element index of the row's first weight
          __m128i q;
          if (q4) {
            uint32_t x;
            std::memcpy(&x, data + at / 2, 4);
            const __m128i v = _mm_cvtsi32_si128(static_cast<int>(x));
            q = _mm_unpacklo_epi8(_mm_and_si128(v, nib), _mm_and_si128(_mm_srli_epi16(v, 4), nib));  // low nibble first
          } else {
            q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(data + at));
          }
          r[i] = _mm256_add_ps(_mm256_mul_ps(s[i], _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q))), b[i]);
        }
        Transpose8(r);
        for (int i = 0; i < 8; ++i) _mm256_storeu_ps(panel + (k + i) * NR + j0, r[i]);
      }
    }
}
#endif

struct GemmTask {
  const float* A;
  const WeightRef* W;
  const float* bias;
  float* C;
  int64_t T, N, K;
  float* pack;
  int64_t n0, nc;  // the column block being computed
};

// Columns [p0, p1) of the task's block (whole panels of NR), over all of K: each panel is packed
// at pack + p·kGemmKc, so parts running at once on other panels never touch its bytes, and
// every output is computed exactly as on one thread. Micro<MR> families have panel width NR.
template <int NR, template <int> class M>
void GemmPanels(const void* ctx, int64_t p0, int64_t p1) {
  const GemmTask& t = *static_cast<const GemmTask*>(ctx);
  for (int64_t k0 = 0; k0 < t.K; k0 += kGemmKc) {
    const int64_t kc = std::min(kGemmKc, t.K - k0);
    for (int64_t p = p0; p < p1; p += NR) {
      float* panel = t.pack + p * kGemmKc;
#ifdef VOXSLAB_X86
      if (t.W->type == WeightType::kF32 && p + NR <= t.nc && kc % 8 == 0 && ChosenIsa() >= Isa::kAvx2) {
        PackPanelF32<NR>(static_cast<const float*>(t.W->data) + (t.n0 + p) * t.K + k0, t.K, kc, panel);
        continue;
      }
      if ((t.W->type == WeightType::kQ8 || t.W->type == WeightType::kQ4) && p + NR <= t.nc && t.W->group % 8 == 0 && ChosenIsa() >= Isa::kAvx2) {
        PackPanelQuant<NR>(*t.W, t.n0 + p, k0, kc, t.K, panel);
        continue;
      }
#endif
      for (int64_t j = 0; j < NR; ++j) {
        if (p + j < t.nc) {
          PackRow<NR>(*t.W, t.n0 + p + j, k0, kc, t.K, panel + j);
        } else {
          for (int64_t k = 0; k < kc; ++k) panel[k * NR + j] = 0.0f;
        }
      }
    }
    const bool first = k0 == 0;
    for (int64_t i = 0; i < t.T; i += 6) {
      const int64_t mr = std::min<int64_t>(6, t.T - i);
      const float* a = t.A + i * t.K + k0;
      for (int64_t p = p0; p < p1; p += NR) {
        const int64_t nr = std::min<int64_t>(NR, t.nc - p);
        const float* panel = t.pack + p * kGemmKc;
        float* c = t.C + i * t.N + t.n0 + p;
        const float* bb = t.bias != nullptr ? t.bias + t.n0 + p : nullptr;
        switch (mr) {
          case 6: M<6>::Run(a, t.K, panel, kc, c, t.N, nr, first, bb); break;
          case 5: M<5>::Run(a, t.K, panel, kc, c, t.N, nr, first, bb); break;
          case 4: M<4>::Run(a, t.K, panel, kc, c, t.N, nr, first, bb); break;
          case 3: M<3>::Run(a, t.K, panel, kc, c, t.N, nr, first, bb); break;
          case 2: M<2>::Run(a, t.K, panel, kc, c, t.N, nr, first, bb); break;
          default: M<1>::Run(a, t.K, panel, kc, c, t.N, nr, first, bb); break;
        }
      }
    }
  }
}

// Blocked GEMM: column blocks of kGemmNc, each split by panels among the calling thread's pool.
template <int NR, template <int> class M>
void GemmBlocked(const float* A, const WeightRef& W, const float* bias, float* C, int64_t T, int64_t N, int64_t K, float* pack) {
  GemmTask task{A, &W, bias, C, T, N, K, pack, 0, 0};
  for (int64_t n0 = 0; n0 < N; n0 += kGemmNc) {
    task.n0 = n0;
    task.nc = std::min(kGemmNc, N - n0);
    Pool().Run(GemmPanels<NR, M>, &task, task.nc, NR, T * task.nc * K);
  }
}

void GemmScalar(const float* A, const WeightRef& W, const float* bias, float* C, int64_t T, int64_t N, int64_t K, float*) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      float s = bias != nullptr ? bias[n] : 0.0f;
      for (int64_t k = 0; k < K; ++k) s += A[t * K + k] * WeightAt(W, n, k, K);
      C[t * N + n] = s;
    }
}

#ifdef VOXSLAB_X86
void GemmAvx2(const float* A, const WeightRef& W, const float* bias, float* C, int64_t T, int64_t N, int64_t K, float* pack) {
  GemmBlocked<16, avx2::Micro>(A, W, bias, C, T, N, K, pack);
}

void GemmAvx512(const float* A, const WeightRef& W, const float* bias, float* C, int64_t T, int64_t N, int64_t K, float* pack) {
  GemmBlocked<32, avx512::Micro>(A, W, bias, C, T, N, K, pack);
}
#endif

#ifdef VOXSLAB_ARM
void GemmNeon(const float* A, const WeightRef& W, const float* bias, float* C, int64_t T, int64_t N, int64_t K, float* pack) {
  GemmBlocked<8, neon::Micro>(A, W, bias, C, T, N, K, pack);
}
#endif

using GemmFn = void (*)(const float*, const WeightRef&, const float*, float*, int64_t, int64_t, int64_t, float*);

GemmFn ChooseGemm() {
#ifdef VOXSLAB_X86
  switch (ChosenIsa()) {
    case Isa::kAvx512: return GemmAvx512;
    case Isa::kAvx2: return GemmAvx2;
    default: break;
  }
#elif defined(VOXSLAB_ARM)
  if (ChosenIsa() != Isa::kScalar) return GemmNeon;
#endif
  return GemmScalar;
}

const GemmFn kGemm = ChooseGemm();

}  // namespace

void Gemm(const float* A, const WeightRef& W, const float* bias, float* C, int64_t T, int64_t N, int64_t K, float* pack) {
  kGemm(A, W, bias, C, T, N, K, pack);
}

}  // namespace voxslab
