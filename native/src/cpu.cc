#include "cpu.h"

#include <cstdlib>
#include <cstring>
#include <string>

#if (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1 << 13)
#endif
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
#if defined(__linux__)
  // What the kernel says the CPU has (the instructions themselves trap in user space).
  f.dotprod = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
  f.i8mm = (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
#endif
#else
  f.arch = "other";
#endif
  return f;
}

#if defined(__aarch64__)
constexpr Isa kLevels[] = {Isa::kScalar, Isa::kNeon, Isa::kDotprod, Isa::kI8mm};
#else
constexpr Isa kLevels[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};
#endif

// The level VOXSLAB_KERNELS caps the choice at (a level of this architecture); the widest when
// unset or unknown.
Isa Requested(bool* unknown) {
  const char* want = std::getenv("VOXSLAB_KERNELS");
  *unknown = false;
  constexpr Isa widest = kLevels[sizeof kLevels / sizeof kLevels[0] - 1];
  if (want == nullptr || want[0] == 0) return widest;
  for (Isa level : kLevels)
    if (std::strcmp(want, IsaName(level)) == 0) return level;
  *unknown = true;
  return widest;
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
#if defined(__aarch64__)
  if (f.neon && cap >= Isa::kNeon) c.isa = Isa::kNeon;
  if (f.neon && f.dotprod && cap >= Isa::kDotprod) c.isa = Isa::kDotprod;
  if (f.neon && f.dotprod && f.i8mm && cap >= Isa::kI8mm) c.isa = Isa::kI8mm;
#else
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  if (avx2 && cap >= Isa::kAvx2) c.isa = Isa::kAvx2;
  if (avx2 && f.avx512f && cap >= Isa::kAvx512) c.isa = Isa::kAvx512;
  c.vnni = c.isa == Isa::kAvx512 && f.avx512vl && f.avx512bw && f.avx512vnni;
#endif
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

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kNeon: return "neon";
    case Isa::kDotprod: return "dotprod";
    case Isa::kI8mm: return "i8mm";
  }
  return "scalar";
}
bool ChosenVnni() { return Chosen().vnni; }

const char* KernelLevels() {
  static const std::string names = [] {
    std::string out;
    for (Isa level : kLevels) out += (out.empty() ? "" : ",") + std::string(IsaName(level));
    return out;
  }();
  return names.c_str();
}

const char* KernelsRequestError() {
  if (!Chosen().unknown) return "";
  return std::getenv("VOXSLAB_KERNELS");
}

}  // namespace voxslab
