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
  bool dotprod;  // AArch64 SDOT/UDOT (FEAT_DotProd)
  bool i8mm;     // AArch64 SMMLA/USMMLA/USDOT (FEAT_I8MM)
};

// What the CPU reports, read once per process.
const CpuFeatures& Cpu();

// Instruction-set levels of the kernels, lowest first within each architecture: x86-64 has
// kAvx2 and kAvx512 above kScalar, AArch64 kNeon, kDotprod and kI8mm. Levels compare only with
// levels of the same architecture (and kScalar).
enum class Isa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kNeon = 3, kDotprod = 4, kI8mm = 5 };

// The widest level the CPU runs, lowered to the one VOXSLAB_KERNELS names so that tests can
// check every path on one machine. x86-64: kAvx2 (AVX2 with FMA and F16C), kAvx512 (AVX-512F on
// top); names "scalar", "avx2", "avx512". AArch64: kNeon (Advanced SIMD, always there),
// kDotprod (SDOT/UDOT on top), kI8mm (SMMLA/USMMLA/USDOT on top of dotprod); names "scalar",
// "neon", "dotprod", "i8mm". Chosen once per process.
Isa ChosenIsa();
// True when the chosen level is kAvx512 and the CPU has AVX-512 VNNI (with VL and BW).
bool ChosenVnni();
// The level's name as VOXSLAB_KERNELS spells it.
const char* IsaName(Isa isa);
// The names of this architecture's levels, lowest first, comma-separated.
const char* KernelLevels();
// VOXSLAB_KERNELS as given when it names no level of this architecture ("" when unset or valid): the facade refuses it.
const char* KernelsRequestError();

}  // namespace voxslab
