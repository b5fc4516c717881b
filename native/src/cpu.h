// CPU features, detected once, and the one instruction-set choice every kernel family (GEMV,
// GEMM, attention helpers, DSP dot products, probes) dispatches on. Plain C++, no Node-API types.
#pragma once

namespace voxslab {

struct CpuFeatures {
  const char* arch;
  bool sse42;
  bool avx;
  bool avx2;
  bool fma;
  bool f16c;
  bool avx512f;
  bool avx512bw;
  bool avx512vl;
  bool avx512vnni;
  bool neon;
};

// What the CPU reports, read once per process.
const CpuFeatures& Cpu();

// Instruction-set levels of the kernels, lowest first.
enum class Isa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// The widest level the CPU runs (kAvx2: AVX2 with FMA and F16C; kAvx512: AVX-512F on top),
// lowered to the one VOXSLAB_KERNELS names ("scalar", "avx2", "avx512") so that tests can check
// every path on one machine. Chosen once per process.
Isa ChosenIsa();
// True when the chosen level is kAvx512 and the CPU has AVX-512 VNNI (with VL and BW).
bool ChosenVnni();
// VOXSLAB_KERNELS as given when it names no level ("" when unset or valid): the facade refuses it.
const char* KernelsRequestError();

}  // namespace voxslab
