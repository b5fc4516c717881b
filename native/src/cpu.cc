#include "cpu.h"

#include <cstdlib>
#include <cstring>

#if (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__)
#include <cpuid.h>
#endif

namespace voxslab {

namespace {

CpuFeatures Detect() {
  CpuFeatures f{};
#if defined(__x86_64__) || defined(_M_X64)
  f.arch = "x64";
#if defined(__GNUC__)
  __builtin_cpu_init();
  f.sse42 = __builtin_cpu_supports("sse4.2");
  f.avx = __builtin_cpu_supports("avx");
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) f.f16c = (ecx & (1u << 29)) != 0;
#endif
#elif defined(__aarch64__) || defined(_M_ARM64)
  f.arch = "arm64";
  f.neon = true;  // Advanced SIMD is mandatory on AArch64.
#else
  f.arch = "other";
#endif
  return f;
}

// The level VOXSLAB_KERNELS caps the choice at; kAvx512 when unset or unknown.
Isa Requested(bool* unknown) {
  const char* want = std::getenv("VOXSLAB_KERNELS");
  *unknown = false;
  if (want == nullptr || want[0] == 0) return Isa::kAvx512;
  if (std::strcmp(want, "scalar") == 0) return Isa::kScalar;
  if (std::strcmp(want, "avx2") == 0) return Isa::kAvx2;
  if (std::strcmp(want, "avx512") == 0) return Isa::kAvx512;
  *unknown = true;
  return Isa::kAvx512;
}

struct Choice {
  Isa isa;
  bool vnni;
  bool unknown;
};

Choice Choose() {
  const CpuFeatures& f = Cpu();
  Choice c{Isa::kScalar, false, false};
  const Isa cap = Requested(&c.unknown);
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  if (avx2 && cap >= Isa::kAvx2) c.isa = Isa::kAvx2;
  if (avx2 && f.avx512f && cap >= Isa::kAvx512) c.isa = Isa::kAvx512;
  c.vnni = c.isa == Isa::kAvx512 && f.avx512vl && f.avx512bw && f.avx512vnni;
  return c;
}

const Choice& Chosen() {
  static const Choice c = Choose();
  return c;
}

}  // namespace

const CpuFeatures& Cpu() {
  static const CpuFeatures f = Detect();
  return f;
}

Isa ChosenIsa() { return Chosen().isa; }
bool ChosenVnni() { return Chosen().vnni; }

const char* KernelsRequestError() {
  if (!Chosen().unknown) return "";
  return std::getenv("VOXSLAB_KERNELS");
}

}  // namespace voxslab
