// Bindings of the operating-system side (system.h): pinning, CPUs, clocks, residency, memory
// advice, mirrored mappings, the allocator's threshold, the CPU's features.
#include "napi_args.h"

#include "cpu.h"
#include "system.h"

namespace voxslab::napi {
namespace {

Napi::Value PinThread(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ExpectArgs(info, 1, "pinThread");
  if (!info[0].IsArray()) ThrowType(env, "pinThread: cpus must be an array of CPU indices");
  Napi::Array list = info[0].As<Napi::Array>();
  const uint32_t n = list.Length();
  if (n == 0) ThrowRange(env, "pinThread: cpus must name at least one CPU");
  const int configured = voxslab::ConfiguredCpus();
  std::vector<int> cpus;
  cpus.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    Napi::Value v = list.Get(i);
    if (!v.IsNumber()) ThrowType(env, "pinThread: cpus[" + std::to_string(i) + "] must be a number");
    const double d = v.As<Napi::Number>().DoubleValue();
    if (!(d >= 0) || d != static_cast<double>(static_cast<int64_t>(d))) {
      ThrowRange(env, "pinThread: cpus[" + std::to_string(i) + "] must be a non-negative integer");
    }
    if (d >= configured) {
      ThrowRange(env, "pinThread: cpus[" + std::to_string(i) + "] = " + std::to_string(static_cast<int64_t>(d)) +
                          " but this machine has CPUs 0.." + std::to_string(configured - 1));
    }
    cpus.push_back(static_cast<int>(d));
  }
  Napi::Object out = Result(env, voxslab::AffinitySupported() ? voxslab::PinCallingThread(cpus) : ENOSYS);
  out.Set("supported", Napi::Boolean::New(env, voxslab::AffinitySupported()));
  out.Set("cpu", Napi::Number::New(env, voxslab::CurrentCpu()));
  return out;
}

Napi::Value AllowedCpus(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 0, "allowedCpus");
  std::vector<int> cpus = voxslab::AllowedCpus();
  Napi::Array out = Napi::Array::New(info.Env(), cpus.size());
  for (size_t i = 0; i < cpus.size(); ++i) out.Set(static_cast<uint32_t>(i), Napi::Number::New(info.Env(), cpus[i]));
  return out;
}

// computeHelperCpus(): per helper thread of the calling thread, the CPUs it may run on.
Napi::Value ComputeHelperCpus(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 0, "computeHelperCpus");
  const std::vector<std::vector<int>> helpers = voxslab::ComputeHelperCpus();
  Napi::Array out = Napi::Array::New(info.Env(), helpers.size());
  for (size_t h = 0; h < helpers.size(); ++h) {
    Napi::Array cpus = Napi::Array::New(info.Env(), helpers[h].size());
    for (size_t i = 0; i < helpers[h].size(); ++i) cpus.Set(static_cast<uint32_t>(i), Napi::Number::New(info.Env(), helpers[h][i]));
    out.Set(static_cast<uint32_t>(h), cpus);
  }
  return out;
}

// A clock reading written into out[index]: nothing is left on the JS heap (a returned double
// would be boxed when the call is not inlined).
Napi::Value ClockReadingInto(const Napi::CallbackInfo& info, const char* name, double (*read)()) {
  ExpectArgs(info, 2, name);
  View<double> out = TypedArg<double>(info, 0, napi_float64_array, name, "out");
  const int64_t index = CountArg(info, 1, name, "index");
  if (static_cast<uint64_t>(index) >= out.length) ThrowRange(info.Env(), std::string(name) + ": index is past the end of out");
  out.data[index] = read();
  return info.Env().Undefined();
}

// Monotonic milliseconds.
Napi::Value ClockInto(const Napi::CallbackInfo& info) { return ClockReadingInto(info, "clockInto", voxslab::MonotonicMs); }

// The calling thread's CPU milliseconds (-1 where unsupported).
Napi::Value ThreadCpuInto(const Napi::CallbackInfo& info) { return ClockReadingInto(info, "threadCpuInto", voxslab::ThreadCpuMs); }

Napi::Value ResidentBytes(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "residentBytes");
  Bytes b = TypedArrayBytes(info, 0, "residentBytes");
  const int64_t r = voxslab::ResidentBytes(b.data, b.length);
  if (r < 0) {
    throw Napi::Error::New(info.Env(), "residentBytes: mincore failed: " + ErrnoText(static_cast<int>(-r)));
  }
  return Napi::Number::New(info.Env(), static_cast<double>(r));
}

// The low 30 bits of the view's first address: its residue modulo any power of two up to 2^30.
Napi::Value AddressLow(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "addressLow");
  Bytes b = TypedArrayBytes(info, 0, "addressLow");
  return Napi::Number::New(info.Env(), static_cast<double>(reinterpret_cast<uintptr_t>(b.data) & ((uintptr_t{1} << 30) - 1)));
}

Napi::Value LockRange(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "lockRange");
  Bytes b = TypedArrayBytes(info, 0, "lockRange");
  return Result(info.Env(), voxslab::LockRange(b.data, b.length));
}

Napi::Value UnlockRange(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "unlockRange");
  Bytes b = TypedArrayBytes(info, 0, "unlockRange");
  return Result(info.Env(), voxslab::UnlockRange(b.data, b.length));
}

Napi::Value AdviseHugePages(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "adviseHugePages");
  Bytes b = TypedArrayBytes(info, 0, "adviseHugePages");
  return Result(info.Env(), voxslab::AdviseHugePages(b.data, b.length));
}

Napi::Value CpuFeaturesValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 0, "cpuFeatures");
  Napi::Env env = info.Env();
  const CpuFeatures& f = voxslab::Cpu();
  Napi::Object out = Napi::Object::New(env);
  out.Set("arch", Napi::String::New(env, f.arch));
  out.Set("sse42", Napi::Boolean::New(env, f.sse42));
  out.Set("avx", Napi::Boolean::New(env, f.avx));
  out.Set("avx2", Napi::Boolean::New(env, f.avx2));
  out.Set("fma", Napi::Boolean::New(env, f.fma));
  out.Set("f16c", Napi::Boolean::New(env, f.f16c));
  out.Set("avx512f", Napi::Boolean::New(env, f.avx512f));
  out.Set("avx512bw", Napi::Boolean::New(env, f.avx512bw));
  out.Set("avx512vl", Napi::Boolean::New(env, f.avx512vl));
  out.Set("avx512vnni", Napi::Boolean::New(env, f.avx512vnni));
  out.Set("neon", Napi::Boolean::New(env, f.neon));
  out.Set("dotprod", Napi::Boolean::New(env, f.dotprod));
  out.Set("i8mm", Napi::Boolean::New(env, f.i8mm));
  return out;
}

// copyF32(src, srcAt, dst, dstAt, n): a float copy that boxes nothing however cold the caller's
// code is (an unoptimised JS loop over floats leaves a heap number per element).
Napi::Value CopyF32Value(const Napi::CallbackInfo& info) {
  const char* fn = "copyF32";
  ExpectArgs(info, 5, fn);
  const int64_t sa = CountArg(info, 1, fn, "srcAt");
  const int64_t da = CountArg(info, 3, fn, "dstAt");
  const int64_t n = CountArg(info, 4, fn, "n");
  if (sa > (int64_t{1} << 40) || da > (int64_t{1} << 40) || n > (int64_t{1} << 40)) ThrowRange(info.Env(), "copyF32: offsets and count must be below 2^40");
  auto src = F32Arg(info, 0, fn, "src", static_cast<size_t>(sa + n));
  auto dst = F32Arg(info, 2, fn, "dst", static_cast<size_t>(da + n));
  if (n > 0) std::memmove(dst.data + da, src.data + sa, static_cast<size_t>(n) * sizeof(float));
  return info.Env().Undefined();
}

// mallocMmapThreshold(bytes): see SetMallocMmapThreshold (4096 to 2^25 bytes).
Napi::Value MallocMmapThresholdValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "mallocMmapThreshold");
  const int64_t n = CountArg(info, 0, "mallocMmapThreshold", "bytes");
  if (n < 4096 || n > (1 << 25)) ThrowRange(info.Env(), "mallocMmapThreshold: bytes must be from 4096 to 33554432");
  return Napi::Boolean::New(info.Env(), voxslab::SetMallocMmapThreshold(static_cast<int>(n)));
}

// mallocArenaBytes(): see MallocArenaBytes (-1 where unknown).
Napi::Value MallocArenaBytesValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 0, "mallocArenaBytes");
  return Napi::Number::New(info.Env(), static_cast<double>(voxslab::MallocArenaBytes()));
}

// mallocInUseBytes(): see MallocInUseBytes (-1 where unknown).
Napi::Value MallocInUseBytesValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 0, "mallocInUseBytes");
  return Napi::Number::New(info.Env(), static_cast<double>(voxslab::MallocInUseBytes()));
}

// signalHandler(signo): see SignalHandler.
Napi::Value SignalHandlerValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "signalHandler");
  if (!info[0].IsNumber()) ThrowType(info.Env(), "signalHandler: the signal must be a number");
  return Napi::Number::New(info.Env(), voxslab::SignalHandler(info[0].As<Napi::Number>().Int32Value()));
}

// ---- mirrored rings (the registry is in system.cc) ----
uintptr_t MirrorAddressArg(const Napi::CallbackInfo& info, const char* fn) {
  if (!info[0].IsBigInt()) ThrowType(info.Env(), std::string(fn) + ": address must be a bigint from mirrorCreate");
  bool lossless = false;
  const uint64_t at = info[0].As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless) ThrowRange(info.Env(), std::string(fn) + ": address out of range");
  return static_cast<uintptr_t>(at);
}

// mirrorCreate(bytes): { ok, errno, message, address? } — `bytes` mapped twice, back to back.
Napi::Value MirrorCreateValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "mirrorCreate");
  const int64_t bytes = CountArg(info, 0, "mirrorCreate", "bytes");
  if (bytes < 1 || bytes > (int64_t{1} << 32)) ThrowRange(info.Env(), "mirrorCreate: bytes must be from 1 to 2^32");
  int err = 0;
  void* base = voxslab::MirrorCreate(static_cast<size_t>(bytes), &err);
  // JS objects only after the registry's lock: an allocation may collect a view, whose finalizer takes it.
  Napi::Object out = Result(info.Env(), base == nullptr ? err : 0);
  if (base != nullptr) out.Set("address", Napi::BigInt::New(info.Env(), static_cast<uint64_t>(reinterpret_cast<uintptr_t>(base))));
  return out;
}

// mirrorView(address): this thread's ArrayBuffer over both halves (2 × bytes).
Napi::Value MirrorViewValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "mirrorView");
  const uintptr_t at = MirrorAddressArg(info, "mirrorView");
  const size_t bytes = voxslab::MirrorAcquire(at);
  // Thrown outside the registry's lock (making the error allocates, and a collection may run a finalizer).
  if (bytes == 0) ThrowRange(info.Env(), "mirrorView: no mirrored mapping at that address (released?)");
  return Napi::ArrayBuffer::New(info.Env(), reinterpret_cast<void*>(at), 2 * bytes,
                                [](Napi::Env, void* data) { voxslab::MirrorDrop(reinterpret_cast<uintptr_t>(data)); });
}

// mirrorRelease(address): the owner's reference back (the mapping goes with the last view).
Napi::Value MirrorReleaseValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "mirrorRelease");
  voxslab::MirrorDrop(MirrorAddressArg(info, "mirrorRelease"));
  return info.Env().Undefined();
}

}  // namespace

void BindSystem(Napi::Env env, Napi::Object exports) {
  Export<MirrorCreateValue>(env, exports, "mirrorCreate");
  Export<MirrorViewValue>(env, exports, "mirrorView");
  Export<MirrorReleaseValue>(env, exports, "mirrorRelease");
  Export<PinThread>(env, exports, "pinThread");
  Export<AllowedCpus>(env, exports, "allowedCpus");
  Export<ComputeHelperCpus>(env, exports, "computeHelperCpus");
  Export<NoArgs<voxslab::CurrentCpu>>(env, exports, "currentCpu");
  Export<ClockInto>(env, exports, "clockInto");
  Export<ThreadCpuInto>(env, exports, "threadCpuInto");
  Export<CopyF32Value>(env, exports, "copyF32");
  Export<NoArgs<voxslab::AffinitySupported>>(env, exports, "affinitySupported");
  Export<NoArgs<voxslab::ConfiguredCpus>>(env, exports, "configuredCpus");
  Export<NoArgs<voxslab::PageSize>>(env, exports, "pageSize");
  Export<ResidentBytes>(env, exports, "residentBytes");
  Export<AddressLow>(env, exports, "addressLow");
  Export<LockRange>(env, exports, "lockRange");
  Export<UnlockRange>(env, exports, "unlockRange");
  Export<AdviseHugePages>(env, exports, "adviseHugePages");
  Export<MallocMmapThresholdValue>(env, exports, "mallocMmapThreshold");
  Export<MallocArenaBytesValue>(env, exports, "mallocArenaBytes");
  Export<MallocInUseBytesValue>(env, exports, "mallocInUseBytes");
  Export<NoArgs<voxslab::MallocTrim>>(env, exports, "mallocTrim");
  Export<SignalHandlerValue>(env, exports, "signalHandler");
  Export<CpuFeaturesValue>(env, exports, "cpuFeatures");

  Export<NoArgs<voxslab::QuietAlsaErrors>>(env, exports, "quietAlsa");
}

}  // namespace voxslab::napi
