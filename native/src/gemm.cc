// GEMM for linear layers over many positions: W decoded to f32 panels once per block, then an
// AVX2 or AVX-512 micro-kernel (vec_kernels.h) per tile, or a scalar loop (cpu.h chooses).
#include <algorithm>
#include <cstdint>

#include "cpu.h"
#include "kernels.h"
#include "simd.h"
#include "vec.h"

namespace voxslab {

namespace {

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

using GemmFn = void (*)(const float*, const WeightRef&, const float*, float*, int64_t, int64_t, int64_t, float*);

GemmFn ChooseGemm() {
#ifdef VOXSLAB_X86
  switch (ChosenIsa()) {
    case Isa::kAvx512: return GemmAvx512;
    case Isa::kAvx2: return GemmAvx2;
    case Isa::kScalar: break;
  }
#endif
  return GemmScalar;
}

const GemmFn kGemm = ChooseGemm();

}  // namespace

void Gemm(const float* A, const WeightRef& W, const float* bias, float* C, int64_t T, int64_t N, int64_t K, float* pack) {
  kGemm(A, W, bias, C, T, N, K, pack);
}

}  // namespace voxslab
