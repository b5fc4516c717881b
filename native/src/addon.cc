// Node-API surface of the native addon. Every argument is type-checked here; the
// operating-system work lives in system.cc.
#include <napi.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <initializer_list>
#include <string>
#include <system_error>

#include "apm.h"
#include "cpu.h"
#include "dsp.h"
#include "kernels.h"
#include "simd.h"
#include "system.h"

namespace {

using voxslab::CpuFeatures;

// Argument errors carry the catalogue's code (ERR_VOXSLAB_ARGUMENT), so callers can tell them
// from faults without parsing messages.
template <typename E>
E Coded(E e, const char* code, int exit_code) {
  e.Set("code", Napi::String::New(e.Env(), code));
  e.Set("exitCode", Napi::Number::New(e.Env(), exit_code));
  return e;
}

[[noreturn]] void ThrowType(const Napi::Env& env, const std::string& message) {
  throw Coded(Napi::TypeError::New(env, message), "ERR_VOXSLAB_ARGUMENT", 2);
}

[[noreturn]] void ThrowRange(const Napi::Env& env, const std::string& message) {
  throw Coded(Napi::RangeError::New(env, message), "ERR_VOXSLAB_ARGUMENT", 2);
}

void ExpectArgs(const Napi::CallbackInfo& info, size_t n, const char* fn) {
  if (info.Length() != n) {
    ThrowType(info.Env(), std::string(fn) + " expects " + std::to_string(n) + " argument(s), got " +
                              std::to_string(info.Length()));
  }
}

// Bytes of a TypedArray, including one whose buffer is a SharedArrayBuffer.
struct Bytes {
  uint8_t* data;
  size_t length;
};

Bytes TypedArrayBytes(const Napi::CallbackInfo& info, size_t index, const char* fn) {
  napi_env env = info.Env();
  napi_value value = info[index];
  bool is_typed = false;
  if (napi_is_typedarray(env, value, &is_typed) != napi_ok || !is_typed) {
    ThrowType(info.Env(), std::string(fn) + ": argument " + std::to_string(index + 1) +
                              " must be a TypedArray (a view of a SharedArrayBuffer or ArrayBuffer)");
  }
  napi_typedarray_type type;
  size_t length = 0;
  void* data = nullptr;
  napi_value buffer;
  size_t offset = 0;
  if (napi_get_typedarray_info(env, value, &type, &length, &data, &buffer, &offset) != napi_ok) {
    ThrowType(info.Env(), std::string(fn) + ": could not read the TypedArray's storage");
  }
  size_t element = 1;
  switch (type) {
    case napi_int8_array:
    case napi_uint8_array:
    case napi_uint8_clamped_array:
      element = 1;
      break;
    case napi_int16_array:
    case napi_uint16_array:
      element = 2;
      break;
    case napi_int32_array:
    case napi_uint32_array:
    case napi_float32_array:
      element = 4;
      break;
    default:
      element = 8;
      break;
  }
  if (length != 0 && data == nullptr) {
    ThrowType(info.Env(), std::string(fn) + ": the TypedArray has no storage (detached buffer?)");
  }
  return Bytes{static_cast<uint8_t*>(data), length * element};
}

std::string ErrnoText(int err) {
  char buf[256];
  buf[0] = 0;
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
  return std::string(strerror_r(err, buf, sizeof(buf)));
#else
  strerror_r(err, buf, sizeof(buf));
  return std::string(buf);
#endif
}

// A TypedArray argument of one element type, with its element count.
template <typename T>
struct View {
  T* data;
  size_t length;
};

template <typename T>
View<T> TypedArg(const Napi::CallbackInfo& info, size_t index, napi_typedarray_type want, const char* fn, const char* what) {
  napi_env env = info.Env();
  napi_value value = info[index];
  bool is_typed = false;
  napi_typedarray_type type;
  size_t length = 0;
  void* data = nullptr;
  napi_value buffer;
  size_t offset = 0;
  if (napi_is_typedarray(env, value, &is_typed) != napi_ok || !is_typed ||
      napi_get_typedarray_info(env, value, &type, &length, &data, &buffer, &offset) != napi_ok || type != want) {
    const char* name = want == napi_float64_array   ? "Float64Array"
                       : want == napi_float32_array ? "Float32Array"
                       : want == napi_uint16_array  ? "Uint16Array"
                       : want == napi_uint8_array   ? "Uint8Array"
                                                    : "Int32Array";
    ThrowType(info.Env(), std::string(fn) + ": " + what + " must be a " + name);
  }
  if (length != 0 && data == nullptr) ThrowType(info.Env(), std::string(fn) + ": " + what + " has no storage");
  return View<T>{static_cast<T*>(data), length};
}

double NumberArg(const Napi::CallbackInfo& info, size_t index, const char* fn, const char* what) {
  if (!info[index].IsNumber()) ThrowType(info.Env(), std::string(fn) + ": " + what + " must be a number");
  return info[index].As<Napi::Number>().DoubleValue();
}

int64_t CountArg(const Napi::CallbackInfo& info, size_t index, const char* fn, const char* what) {
  const double d = NumberArg(info, index, fn, what);
  if (!(d >= 0) || d > 9007199254740991.0 || d != static_cast<double>(static_cast<int64_t>(d))) {
    ThrowRange(info.Env(), std::string(fn) + ": " + what + " must be a non-negative integer");
  }
  return static_cast<int64_t>(d);
}

// An enum argument: a whole number from 0 to `last` (the values src/native.ts names).
template <typename E>
E EnumArg(const Napi::CallbackInfo& info, size_t index, const char* fn, const char* what, E last, const char* values) {
  const int64_t v = CountArg(info, index, fn, what);
  if (v > static_cast<int64_t>(last)) ThrowRange(info.Env(), std::string(fn) + ": " + what + " must be " + values);
  return static_cast<E>(v);
}

// Every size computed from JS counts goes through here: factors must be non-negative and the
// product at most 2^53, checked without wrapping, so a huge count fails as a RangeError
// instead of indexing outside a view.
size_t Mul(const Napi::CallbackInfo& info, const char* fn, std::initializer_list<int64_t> factors) {
  int64_t r = 1;
  for (const int64_t f : factors) {
    if (f < 0 || __builtin_mul_overflow(r, f, &r) || r > 9007199254740991LL) {
      ThrowRange(info.Env(), std::string(fn) + ": sizes out of range (a count is negative, or their product exceeds 2^53)");
    }
  }
  return static_cast<size_t>(r);
}

template <typename A, typename B>
bool Overlap(const View<A>& a, const View<B>& b) {
  const auto* a0 = reinterpret_cast<const uint8_t*>(a.data);
  const auto* b0 = reinterpret_cast<const uint8_t*>(b.data);
  return a0 < b0 + b.length * sizeof(B) && b0 < a0 + a.length * sizeof(A);
}

// Values a function of no arguments may return, as JS values.
Napi::Value Js(const Napi::Env& env, bool v) { return Napi::Boolean::New(env, v); }
Napi::Value Js(const Napi::Env& env, int v) { return Napi::Number::New(env, v); }
Napi::Value Js(const Napi::Env& env, size_t v) { return Napi::Number::New(env, static_cast<double>(v)); }
Napi::Value Js(const Napi::Env& env, const char* v) { return Napi::String::New(env, v); }

// The entry point of a native function of no arguments; its JS name travels as the data pointer.
template <auto F>
Napi::Value NoArgs(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 0, static_cast<const char*>(info.Data()));
  return Js(info.Env(), F());
}

// No C++ exception crosses into Node: a failed allocation or a thread the system would not
// start becomes a JS error with the catalogue's code (std::terminate otherwise ends the process).
template <Napi::Value (*F)(const Napi::CallbackInfo&)>
Napi::Value Guarded(const Napi::CallbackInfo& info) {
  // The name is read only on failure: the call itself stays free of allocation.
  const auto fn = [&info] { return std::string(static_cast<const char*>(info.Data())); };
  try {
    return F(info);
  } catch (const Napi::Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw Coded(Napi::Error::New(info.Env(), fn() + ": out of memory"), "ERR_VOXSLAB_ALLOCATION", 3);
  } catch (const std::system_error& e) {
    throw Coded(Napi::Error::New(info.Env(), fn() + ": the system refused: " + e.what()), "ERR_VOXSLAB_ALLOCATION", 3);
  } catch (const std::exception& e) {
    throw Coded(Napi::Error::New(info.Env(), fn() + ": " + e.what()), "ERR_VOXSLAB_INTERNAL", 1);
  } catch (...) {
    throw Coded(Napi::Error::New(info.Env(), fn() + ": an unknown native exception"), "ERR_VOXSLAB_INTERNAL", 1);
  }
}

template <Napi::Value (*F)(const Napi::CallbackInfo&)>
void Export(Napi::Env env, Napi::Object exports, const char* name) {
  exports.Set(name, Napi::Function::New(env, Guarded<F>, name, const_cast<char*>(name)));
}

Napi::Object Result(const Napi::Env& env, int err) {
  Napi::Object out = Napi::Object::New(env);
  out.Set("ok", Napi::Boolean::New(env, err == 0));
  out.Set("errno", Napi::Number::New(env, err));
  out.Set("message", Napi::String::New(env, err == 0 ? "" : ErrnoText(err)));
  return out;
}

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
  return out;
}

// resampleRun(phases, ring, state, input | null, count, out, outAt, limit) → outputs written
Napi::Value ResampleRunValue(const Napi::CallbackInfo& info) {
  const char* fn = "resampleRun";
  ExpectArgs(info, 8, fn);
  auto phases = TypedArg<double>(info, 0, napi_float64_array, fn, "phases");
  auto ring = TypedArg<double>(info, 1, napi_float64_array, fn, "ring");
  auto state = TypedArg<double>(info, 2, napi_float64_array, fn, "state");
  if (state.length < voxslab::kRsSlots) ThrowRange(info.Env(), "resampleRun: state needs 8 slots");
  const double L = state.data[voxslab::kRsUp], M = state.data[voxslab::kRsDown], T = state.data[voxslab::kRsTaps];
  if (!(L >= 1 && M >= 1 && T >= 1) || L * T > static_cast<double>(phases.length) || 2 * T > static_cast<double>(ring.length) ||
      !(state.data[voxslab::kRsPos] >= 0 && state.data[voxslab::kRsPos] < T)) {
    ThrowRange(info.Env(), "resampleRun: state does not match the phase table and ring");
  }
  const bool finishing = info[3].IsNull();
  View<float> input{nullptr, 0};
  if (!finishing) input = TypedArg<float>(info, 3, napi_float32_array, fn, "input");
  const int64_t count = CountArg(info, 4, fn, "count");
  auto out = TypedArg<float>(info, 5, napi_float32_array, fn, "out");
  const int64_t at = CountArg(info, 6, fn, "outAt");
  const int64_t limit = finishing ? CountArg(info, 7, fn, "limit") : 0;
  if (!finishing && static_cast<size_t>(count) > input.length) ThrowRange(info.Env(), "resampleRun: count exceeds the input");
  const int64_t outputs = static_cast<int64_t>(state.data[voxslab::kRsOutputs]);
  const int64_t need = finishing ? (limit > outputs ? limit - outputs : 0) : voxslab::ResampleReady(state.data, count);
  if (static_cast<size_t>(at) > out.length || static_cast<size_t>(need) > out.length - static_cast<size_t>(at)) {
    ThrowRange(info.Env(), "resampleRun: out has room for " + std::to_string(out.length - std::min(out.length, static_cast<size_t>(at))) +
                               " samples after outAt, the call completes " + std::to_string(need));
  }
  if (Overlap(out, phases) || Overlap(out, ring) || Overlap(out, state) || Overlap(ring, phases) || Overlap(ring, state)) {
    ThrowRange(info.Env(), "resampleRun: buffers must not overlap");
  }
  const int64_t n = voxslab::ResampleRun(phases.data, ring.data, state.data, finishing ? nullptr : input.data, count,
                                          out.data + at, limit);
  return Napi::Number::New(info.Env(), static_cast<double>(n));
}

// A complex FFT's factor plan [p0, m0, p1, m1, ...] must multiply out to `points` and its
// largest radix must fit the scratch (2 values per point of a radix).
void CheckFactorPlan(const Napi::CallbackInfo& info, const char* fn, const View<int32_t>& factors, int64_t points,
                     const char* what, const View<double>& scratch) {
  const std::string prefix = std::string(fn) + ": factor plan ";
  int64_t rest = points;
  size_t i = 0;
  int32_t maxP = 2;
  while (rest > 1) {
    if (i + 1 >= factors.length) ThrowRange(info.Env(), prefix + "is incomplete");
    const int32_t p = factors.data[i];
    const int32_t m = factors.data[i + 1];
    if (p < 2 || rest % p != 0 || rest / p != m) ThrowRange(info.Env(), prefix + "does not match " + what);
    maxP = std::max(maxP, p);
    rest = m;
    i += 2;
  }
  if (points == 1 && (factors.length < 2 || factors.data[0] != 1 || factors.data[1] != 1)) {
    ThrowRange(info.Env(), prefix + "does not match " + what);
  }
  if (scratch.length < Mul(info, fn, {2, maxP})) ThrowRange(info.Env(), std::string(fn) + ": scratch is too small for the largest radix");
}

// A boolean argument.
bool BoolArg(const Napi::CallbackInfo& info, size_t index, const char* fn, const char* what) {
  if (!info[index].IsBoolean()) ThrowType(info.Env(), std::string(fn) + ": " + what + " must be a boolean");
  return info[index].As<Napi::Boolean>().Value();
}

// fft(factors, twiddles, scratch, input, output, n, inverse)
Napi::Value FftValue(const Napi::CallbackInfo& info) {
  const char* fn = "fft";
  ExpectArgs(info, 7, fn);
  auto factors = TypedArg<int32_t>(info, 0, napi_int32_array, fn, "factors");
  auto tw = TypedArg<double>(info, 1, napi_float64_array, fn, "twiddles");
  auto scratch = TypedArg<double>(info, 2, napi_float64_array, fn, "scratch");
  auto in = TypedArg<double>(info, 3, napi_float64_array, fn, "input");
  auto out = TypedArg<double>(info, 4, napi_float64_array, fn, "output");
  const int64_t n = CountArg(info, 5, fn, "n");
  const bool inverse = BoolArg(info, 6, fn, "inverse");
  if (n < 1 || n > (1 << 24)) ThrowRange(info.Env(), "fft: n must be from 1 to 2^24");
  const size_t len = Mul(info, fn, {2, n});
  if (tw.length < len || in.length < len || out.length < len) ThrowRange(info.Env(), "fft: twiddles, input and output need 2·n values");
  CheckFactorPlan(info, fn, factors, n, "n", scratch);
  if (Overlap(in, out) || Overlap(scratch, out) || Overlap(scratch, in)) ThrowRange(info.Env(), "fft: input, output and scratch must not overlap");
  voxslab::FftRun(factors.data, tw.data, scratch.data, in.data, out.data, static_cast<int>(n), inverse);
  return info.Env().Undefined();
}

// rfft(factors, twiddles, scratch, split, work, input, output, n, inverse): plan, twiddles and
// scratch are for the n/2-point complex FFT.
Napi::Value RfftValue(const Napi::CallbackInfo& info) {
  const char* fn = "rfft";
  ExpectArgs(info, 9, fn);
  auto factors = TypedArg<int32_t>(info, 0, napi_int32_array, fn, "factors");
  auto tw = TypedArg<double>(info, 1, napi_float64_array, fn, "twiddles");
  auto scratch = TypedArg<double>(info, 2, napi_float64_array, fn, "scratch");
  auto split = TypedArg<double>(info, 3, napi_float64_array, fn, "split");
  auto work = TypedArg<double>(info, 4, napi_float64_array, fn, "work");
  auto in = TypedArg<double>(info, 5, napi_float64_array, fn, "input");
  auto out = TypedArg<double>(info, 6, napi_float64_array, fn, "output");
  const int64_t n = CountArg(info, 7, fn, "n");
  const bool inverse = BoolArg(info, 8, fn, "inverse");
  if (n < 2 || n % 2 != 0 || n > (1 << 24)) ThrowRange(info.Env(), "rfft: n must be even, from 2 to 2^24");
  const int64_t h = n / 2;
  const size_t bins2 = Mul(info, fn, {2, (h + 1)});
  if (tw.length < Mul(info, fn, {2, h}) || split.length < bins2 || work.length < Mul(info, fn, {2, n})) {
    ThrowRange(info.Env(), "rfft: twiddles need n values, split n + 2, work 2·n");
  }
  const size_t inNeed = inverse ? bins2 : static_cast<size_t>(n);
  const size_t outNeed = inverse ? static_cast<size_t>(n) : bins2;
  if (in.length < inNeed || out.length < outNeed) ThrowRange(info.Env(), "rfft: input or output is too short");
  CheckFactorPlan(info, fn, factors, h, "n/2", scratch);
  if (Overlap(in, out) || Overlap(work, in) || Overlap(work, out) || Overlap(scratch, work)) ThrowRange(info.Env(), "rfft: buffers must not overlap");
  if (inverse) {
    voxslab::RfftInverse(factors.data, tw.data, scratch.data, split.data, work.data, in.data, out.data, static_cast<int>(n));
  } else {
    voxslab::RfftForward(factors.data, tw.data, scratch.data, split.data, work.data, in.data, out.data, static_cast<int>(n));
  }
  return info.Env().Undefined();
}

// ---- compute kernels ---------------------------------------------------------------------

// A typed array of at least `need` values.
template <typename T>
View<T> SizedArg(const Napi::CallbackInfo& info, size_t i, napi_typedarray_type want, const char* fn, const char* what, size_t need) {
  auto v = TypedArg<T>(info, i, want, fn, what);
  if (v.length < need) ThrowRange(info.Env(), std::string(fn) + ": " + what + " has " + std::to_string(v.length) + " values, needs " + std::to_string(need));
  return v;
}

View<float> F32Arg(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* what, size_t need) {
  return SizedArg<float>(info, i, napi_float32_array, fn, what, need);
}

// f16 values (their bits in a Uint16Array).
View<uint16_t> HalfArg(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* what, size_t need) {
  return SizedArg<uint16_t>(info, i, napi_uint16_array, fn, what, need);
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

// setComputeThreads(n): threads sharing each GEMV's rows (1–8; 1 stops the helpers).
Napi::Value SetComputeThreadsValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "setComputeThreads");
  const int64_t n = CountArg(info, 0, "setComputeThreads", "n");
  if (n < 1 || n > 8) ThrowRange(info.Env(), "setComputeThreads: n must be from 1 to 8");
  voxslab::SetComputeThreads(static_cast<int>(n));
  return Napi::Number::New(info.Env(), voxslab::ComputeThreads());
}

voxslab::WeightType WeightTypeArg(const Napi::CallbackInfo& info, size_t index, const char* fn) {
  return EnumArg(info, index, fn, "type", voxslab::WeightType::kQ4, "0 (f32), 1 (f16), 2 (bf16), 3 (q8) or 4 (q4)");
}

// The one reader of a weight matrix argument [M][K] of `type`: the data at info[at], then for
// q8/q4 the scales, biases and group at info[at + 1 … at + 3].
voxslab::WeightRef WeightArg(const Napi::CallbackInfo& info, const char* fn, voxslab::WeightType type, size_t at, int64_t M,
                             int64_t K) {
  voxslab::WeightRef w{type, nullptr, nullptr, nullptr, 0};
  const bool quant = voxslab::Quantized(type);
  size_t wlen = 0, wneed = Mul(info, fn, {M, K});
  if (type == voxslab::WeightType::kF32) {
    auto v = TypedArg<float>(info, at, napi_float32_array, fn, "w");
    w.data = v.data;
    wlen = v.length;
  } else if (!quant) {
    auto v = TypedArg<uint16_t>(info, at, napi_uint16_array, fn, "w");
    w.data = v.data;
    wlen = v.length;
  } else {
    auto v = TypedArg<uint8_t>(info, at, napi_uint8_array, fn, "w");
    w.data = v.data;
    wlen = v.length;
    if (type == voxslab::WeightType::kQ4) wneed = Mul(info, fn, {M, K}) / 2;
  }
  if (wlen < wneed) ThrowRange(info.Env(), std::string(fn) + ": w has " + std::to_string(wlen) + " elements, needs " + std::to_string(wneed));
  if (quant) {
    const int64_t group = CountArg(info, at + 3, fn, "group");
    if (group < 8 || group % 8 != 0 || K % group != 0) ThrowRange(info.Env(), std::string(fn) + ": group must be a multiple of 8 that divides K");
    const size_t g = Mul(info, fn, {M, (K / group)});
    w.scales = HalfArg(info, at + 1, fn, "scales", g).data;
    w.biases = HalfArg(info, at + 2, fn, "biases", g).data;
    w.group = static_cast<int>(group);
  }
  return w;
}

// gemv(type, w, scales | null, biases | null, group, x, y, M, K, xsum | null)
Napi::Value GemvValue(const Napi::CallbackInfo& info) {
  const char* fn = "gemv";
  ExpectArgs(info, 10, fn);
  const voxslab::WeightType type = WeightTypeArg(info, 0, fn);
  const int64_t M = CountArg(info, 7, fn, "M");
  const int64_t K = CountArg(info, 8, fn, "K");
  const voxslab::WeightRef w = WeightArg(info, fn, type, 1, M, K);
  auto x = F32Arg(info, 5, fn, "x", static_cast<size_t>(K));
  auto y = F32Arg(info, 6, fn, "y", static_cast<size_t>(M));
  if (Overlap(x, y)) ThrowRange(info.Env(), "gemv: x and y must not overlap");
  if (voxslab::Quantized(type)) {
    float* xsum = F32Arg(info, 9, fn, "xsum", static_cast<size_t>(K / w.group)).data;
    voxslab::Gemv(type, w.data, w.scales, w.biases, w.group, x.data, y.data, M, K, xsum);
  } else {
    voxslab::GemvSplit(type, w.data, x.data, y.data, M, K);
  }
  return info.Env().Undefined();
}

// gemvScratchBytes(K, group): the scratch gemvInt needs for an input of K values (the facade's
// planners size from this, never from a copy of the formula).
Napi::Value GemvScratchBytesValue(const Napi::CallbackInfo& info) {
  const char* fn = "gemvScratchBytes";
  ExpectArgs(info, 2, fn);
  const int64_t K = CountArg(info, 0, fn, "K");
  const int64_t group = CountArg(info, 1, fn, "group");
  if (group == 0 || K > (int64_t{1} << 40)) ThrowRange(info.Env(), "gemvScratchBytes: group must be positive and K below 2^40");
  return Napi::Number::New(info.Env(), static_cast<double>(voxslab::GemvIntScratchBytes(K, static_cast<int>(group))));
}

// gemmIntScratchBytes(n, K, group): the scratch gemmInt needs for n rows of K values.
Napi::Value GemmIntScratchBytesValue(const Napi::CallbackInfo& info) {
  const char* fn = "gemmIntScratchBytes";
  ExpectArgs(info, 3, fn);
  const int64_t n = CountArg(info, 0, fn, "n");
  const int64_t K = CountArg(info, 1, fn, "K");
  const int64_t group = CountArg(info, 2, fn, "group");
  if (group == 0 || K > (int64_t{1} << 40) || n > (int64_t{1} << 20))
    ThrowRange(info.Env(), "gemmIntScratchBytes: group must be positive, K below 2^40 and n below 2^20");
  return Napi::Number::New(info.Env(), static_cast<double>(voxslab::GemmIntScratchBytes(n, K, static_cast<int>(group))));
}

// Attention's scratch floats, its terms bounded first (each is at most hkv·(group·tq + tk + 16)·(3·hd + 2)).
size_t AttentionScratchNeed(const Napi::CallbackInfo& info, const char* fn, int64_t tq, int64_t tk, int64_t hd, int64_t group, int64_t hkv) {
  const auto rows = static_cast<int64_t>(Mul(info, fn, {group, tq}));
  Mul(info, fn, {hkv, rows + tk + 16, 3 * hd + 2});
  return static_cast<size_t>(voxslab::AttentionScratchFloats(tq, tk, hd, group, hkv));
}

// attentionScratchFloats(tq, tk, hd, group, hkv)
Napi::Value AttentionScratchFloatsValue(const Napi::CallbackInfo& info) {
  const char* fn = "attentionScratchFloats";
  ExpectArgs(info, 5, fn);
  const int64_t tq = CountArg(info, 0, fn, "tq");
  const int64_t tk = CountArg(info, 1, fn, "tk");
  const int64_t hd = CountArg(info, 2, fn, "hd");
  const int64_t group = CountArg(info, 3, fn, "group");
  const int64_t hkv = CountArg(info, 4, fn, "hkv");
  return Napi::Number::New(info.Env(), static_cast<double>(AttentionScratchNeed(info, fn, tq, tk, hd, group, hkv)));
}

// Y[t] = W·X[t] over n rows: gemvRows(type, w, scales, biases, group, X, Y, n, M, K, scratch | null)
// (any weights), or gemmInt(…) (q8/q4 only, the prefill kernel); the scratch as each one's size.
template <bool Prefill>
Napi::Value RowsValue(const Napi::CallbackInfo& info) {
  const char* fn = Prefill ? "gemmInt" : "gemvRows";
  ExpectArgs(info, 11, fn);
  const voxslab::WeightType type = WeightTypeArg(info, 0, fn);
  const int64_t n = CountArg(info, 7, fn, "n");
  const int64_t M = CountArg(info, 8, fn, "M");
  const int64_t K = CountArg(info, 9, fn, "K");
  const bool quant = voxslab::Quantized(type);
  if (Prefill && !quant) ThrowRange(info.Env(), std::string(fn) + ": type must be 3 (q8) or 4 (q4)");
  const voxslab::WeightRef w = WeightArg(info, fn, type, 1, M, K);
  if (quant && w.group < 32) ThrowRange(info.Env(), std::string(fn) + ": group must be at least 32");
  auto X = F32Arg(info, 5, fn, "X", Mul(info, fn, {n, K}));
  auto Y = F32Arg(info, 6, fn, "Y", Mul(info, fn, {n, M}));
  if (Overlap(X, Y)) ThrowRange(info.Env(), std::string(fn) + ": X and Y must not overlap");
  void* scratch = nullptr;
  if (quant) {
    const int64_t need = Prefill ? voxslab::GemmIntScratchBytes(n, K, w.group) : voxslab::GemvRowsScratchBytes(n, K, w.group);
    auto sc = F32Arg(info, 10, fn, "scratch", static_cast<size_t>((need + 3) / 4));
    if (Overlap(X, sc) || Overlap(Y, sc)) ThrowRange(info.Env(), std::string(fn) + ": scratch must not overlap X or Y");
    scratch = sc.data;
  }
  if (Prefill) voxslab::GemmInt(w.type, w.data, w.scales, w.biases, w.group, X.data, Y.data, n, M, K, scratch);
  else voxslab::GemvRows(w.type, w.data, w.scales, w.biases, w.group, X.data, Y.data, n, M, K, scratch);
  return info.Env().Undefined();
}

// gemvInt(type, w, scales, biases, group, x, y, M, K, scratch): q8/q4 weights, int8 activations.
Napi::Value GemvIntValue(const Napi::CallbackInfo& info) {
  const char* fn = "gemvInt";
  ExpectArgs(info, 10, fn);
  const voxslab::WeightType type = WeightTypeArg(info, 0, fn);
  if (!voxslab::Quantized(type)) ThrowRange(info.Env(), "gemvInt: type must be 3 (q8) or 4 (q4)");
  const int64_t M = CountArg(info, 7, fn, "M");
  const int64_t K = CountArg(info, 8, fn, "K");
  const voxslab::WeightRef w = WeightArg(info, fn, type, 1, M, K);
  if (w.group < 32) ThrowRange(info.Env(), "gemvInt: group must be at least 32");
  auto x = F32Arg(info, 5, fn, "x", static_cast<size_t>(K));
  auto y = F32Arg(info, 6, fn, "y", static_cast<size_t>(M));
  const int64_t need = voxslab::GemvIntScratchBytes(K, w.group);
  auto scratch = F32Arg(info, 9, fn, "scratch", static_cast<size_t>((need + 3) / 4));
  if (Overlap(x, y) || Overlap(x, scratch) || Overlap(y, scratch)) ThrowRange(info.Env(), "gemvInt: x, y and scratch must not overlap");
  voxslab::GemvInt(w.type, w.data, w.scales, w.biases, w.group, x.data, y.data, M, K, scratch.data);
  return info.Env().Undefined();
}

// gemvIntMany(type, X, n, K, scratch, count, then per matrix: w, scales, biases, group, Y, M):
// q8/q4 matrices of one type and group reading the same n rows X [n][K] (outputs [n][M]), the
// rows quantized once and all the matrices' rows split among the compute threads in one call.
Napi::Value GemvIntManyValue(const Napi::CallbackInfo& info) {
  const char* fn = "gemvIntMany";
  constexpr size_t kBase = 6;
  if (info.Length() < kBase) ThrowType(info.Env(), "gemvIntMany: expected at least 6 arguments");
  const voxslab::WeightType type = WeightTypeArg(info, 0, fn);
  if (!voxslab::Quantized(type)) ThrowRange(info.Env(), "gemvIntMany: type must be 3 (q8) or 4 (q4)");
  const int64_t n = CountArg(info, 2, fn, "n");
  const int64_t K = CountArg(info, 3, fn, "K");
  const int64_t count = CountArg(info, 5, fn, "count");
  if (n < 1) ThrowRange(info.Env(), "gemvIntMany: n must be at least 1");
  if (count < 1 || count > voxslab::kGemvManyMax) ThrowRange(info.Env(), "gemvIntMany: count must be 1 to " + std::to_string(voxslab::kGemvManyMax));
  if (info.Length() != kBase + 6 * count) ThrowType(info.Env(), "gemvIntMany: expected " + std::to_string(kBase + 6 * count) + " arguments");
  auto x = F32Arg(info, 1, fn, "X", Mul(info, fn, {n, K}));
  voxslab::WeightRef w[voxslab::kGemvManyMax];
  float* y[voxslab::kGemvManyMax];
  int64_t M[voxslab::kGemvManyMax];
  View<float> ys[voxslab::kGemvManyMax];
  for (int64_t i = 0; i < count; ++i) {
    const size_t at = kBase + 6 * static_cast<size_t>(i);
    M[i] = CountArg(info, at + 5, fn, "M");
    w[i] = WeightArg(info, fn, type, at, M[i], K);
    if (w[i].group < 32 || w[i].group != w[0].group) ThrowRange(info.Env(), "gemvIntMany: every matrix needs the same group, at least 32");
    ys[i] = F32Arg(info, at + 4, fn, "Y", Mul(info, fn, {n, M[i]}));
    y[i] = ys[i].data;
  }
  const int64_t need = n * voxslab::GemvIntScratchBytes(K, w[0].group);
  auto scratch = F32Arg(info, 4, fn, "scratch", static_cast<size_t>((need + 3) / 4));
  for (int64_t i = 0; i < count; ++i) {
    bool bad = Overlap(x, ys[i]) || Overlap(scratch, ys[i]);
    for (int64_t j = 0; j < i; ++j) bad = bad || Overlap(ys[i], ys[j]);
    if (bad) ThrowRange(info.Env(), "gemvIntMany: the outputs must not overlap each other, x or scratch");
  }
  if (Overlap(x, scratch)) ThrowRange(info.Env(), "gemvIntMany: x and scratch must not overlap");
  if (n == 1) voxslab::GemvIntMany(w, y, M, static_cast<int>(count), x.data, K, scratch.data);
  else voxslab::GemvRowsMany(w, y, M, static_cast<int>(count), x.data, n, K, scratch.data);
  return info.Env().Undefined();
}

// gemm(A, type, W, scales | null, biases | null, group, bias | null, C, T, N, K, pack)
Napi::Value GemmValue(const Napi::CallbackInfo& info) {
  const char* fn = "gemm";
  ExpectArgs(info, 12, fn);
  const int64_t T = CountArg(info, 8, fn, "T");
  const int64_t N = CountArg(info, 9, fn, "N");
  const int64_t K = CountArg(info, 10, fn, "K");
  const voxslab::WeightType type = WeightTypeArg(info, 1, fn);
  auto A = F32Arg(info, 0, fn, "A", Mul(info, fn, {T, K}));
  const voxslab::WeightRef W = WeightArg(info, fn, type, 2, N, K);
  const float* bias = info[6].IsNull() ? nullptr : F32Arg(info, 6, fn, "bias", static_cast<size_t>(N)).data;
  auto C = F32Arg(info, 7, fn, "C", Mul(info, fn, {T, N}));
  auto pack = F32Arg(info, 11, fn, "pack", static_cast<size_t>(voxslab::kGemmPackFloats));
  if (Overlap(C, A) || Overlap(pack, C) || Overlap(pack, A)) ThrowRange(info.Env(), "gemm: C and pack must not overlap the inputs");
  voxslab::Gemm(A.data, W, bias, C.data, T, N, K, pack.data);
  return info.Env().Undefined();
}

// norm(kind, x, w, b | null, y, rows, dim, eps): kind 0 = RMSNorm, 1 = LayerNorm
Napi::Value NormValue(const Napi::CallbackInfo& info) {
  const char* fn = "norm";
  ExpectArgs(info, 8, fn);
  const auto kind = EnumArg(info, 0, fn, "kind", voxslab::NormKind::kLayer, "0 (RMSNorm) or 1 (LayerNorm)");
  const int64_t rows = CountArg(info, 5, fn, "rows");
  const int64_t dim = CountArg(info, 6, fn, "dim");
  const double eps = NumberArg(info, 7, fn, "eps");
  if (dim == 0 || !(eps >= 0)) ThrowRange(info.Env(), "norm: dim must be positive and eps non-negative");
  auto x = F32Arg(info, 1, fn, "x", Mul(info, fn, {rows, dim}));
  auto w = F32Arg(info, 2, fn, "w", static_cast<size_t>(dim));
  auto y = F32Arg(info, 4, fn, "y", Mul(info, fn, {rows, dim}));
  if (kind == voxslab::NormKind::kRms) {
    voxslab::RmsNorm(x.data, w.data, y.data, rows, dim, static_cast<float>(eps));
  } else {
    auto b = F32Arg(info, 3, fn, "b", static_cast<size_t>(dim));
    voxslab::LayerNorm(x.data, w.data, b.data, y.data, rows, dim, static_cast<float>(eps));
  }
  return info.Env().Undefined();
}

// addNorm(x, r, w, y, rows, dim, eps): x += r, then y = RMSNorm(x)·w (y may be x; r apart from both).
Napi::Value AddNormValue(const Napi::CallbackInfo& info) {
  const char* fn = "addNorm";
  ExpectArgs(info, 7, fn);
  const int64_t rows = CountArg(info, 4, fn, "rows");
  const int64_t dim = CountArg(info, 5, fn, "dim");
  const double eps = NumberArg(info, 6, fn, "eps");
  if (dim == 0 || !(eps >= 0)) ThrowRange(info.Env(), "addNorm: dim must be positive and eps non-negative");
  auto x = F32Arg(info, 0, fn, "x", Mul(info, fn, {rows, dim}));
  auto r = F32Arg(info, 1, fn, "r", Mul(info, fn, {rows, dim}));
  auto w = F32Arg(info, 2, fn, "w", static_cast<size_t>(dim));
  auto y = F32Arg(info, 3, fn, "y", Mul(info, fn, {rows, dim}));
  if (Overlap(r, x) || Overlap(r, y)) ThrowRange(info.Env(), "addNorm: r must not overlap x or y");
  voxslab::AddRmsNorm(x.data, r.data, w.data, y.data, rows, dim, static_cast<float>(eps));
  return info.Env().Undefined();
}

// activation(kind, x, y, n, other | null): 0 GELU, 1 SiLU, 2 SwiGLU (x = gate, other = up), 3 GLU (n = rows, dim via other length)
Napi::Value ActivationValue(const Napi::CallbackInfo& info) {
  const char* fn = "activation";
  ExpectArgs(info, 5, fn);
  using voxslab::Activation;
  const auto kind = EnumArg(info, 0, fn, "kind", Activation::kGlu, "0 (GELU), 1 (SiLU), 2 (SwiGLU) or 3 (GLU)");
  const int64_t n = CountArg(info, 3, fn, "n");
  if (kind == Activation::kGlu) {
    const int64_t dim = CountArg(info, 4, fn, "dim");
    auto x = F32Arg(info, 1, fn, "x", Mul(info, fn, {n, 2, dim}));
    auto y = F32Arg(info, 2, fn, "y", Mul(info, fn, {n, dim}));
    voxslab::Glu(x.data, y.data, n, dim);
    return info.Env().Undefined();
  }
  auto x = F32Arg(info, 1, fn, "x", static_cast<size_t>(n));
  auto y = F32Arg(info, 2, fn, "y", static_cast<size_t>(n));
  if (kind == Activation::kGelu) voxslab::GeluExact(x.data, y.data, n);
  else if (kind == Activation::kSilu) voxslab::Silu(x.data, y.data, n);
  else voxslab::SwiGlu(x.data, F32Arg(info, 4, fn, "up", static_cast<size_t>(n)).data, y.data, n);
  return info.Env().Undefined();
}

// rope(x, cos, sin, rows, heads, hd, pos0, adjacent)
Napi::Value RopeValue(const Napi::CallbackInfo& info) {
  const char* fn = "rope";
  ExpectArgs(info, 8, fn);
  const int64_t rows = CountArg(info, 3, fn, "rows");
  const int64_t heads = CountArg(info, 4, fn, "heads");
  const int64_t hd = CountArg(info, 5, fn, "hd");
  const int64_t pos0 = CountArg(info, 6, fn, "pos0");
  if (hd % 2 != 0) ThrowRange(info.Env(), "rope: hd must be even");
  const bool adjacent = BoolArg(info, 7, fn, "adjacent");
  auto x = F32Arg(info, 0, fn, "x", Mul(info, fn, {rows, heads, hd}));
  const size_t table = Mul(info, fn, {(pos0 + rows), (hd / 2)});
  auto c = F32Arg(info, 1, fn, "cos", table);
  auto s = F32Arg(info, 2, fn, "sin", table);
  voxslab::Rope(x.data, c.data, s.data, rows, heads, hd, pos0, adjacent);
  return info.Env().Undefined();
}

// attention(q, k, v, out, p | null, u | null, vb | null, scratch, Tq, Tk, Hq, Hkv, hd, qpos0, kpos0, window, mode, scale, tq, tk)
Napi::Value AttentionValue(const Napi::CallbackInfo& info) {
  const char* fn = "attention";
  ExpectArgs(info, 20, fn);
  voxslab::AttentionParams a{};
  a.Tq = CountArg(info, 8, fn, "Tq");
  a.Tk = CountArg(info, 9, fn, "Tk");
  a.Hq = CountArg(info, 10, fn, "Hq");
  a.Hkv = CountArg(info, 11, fn, "Hkv");
  a.hd = CountArg(info, 12, fn, "hd");
  a.qpos0 = CountArg(info, 13, fn, "qpos0");
  a.kpos0 = CountArg(info, 14, fn, "kpos0");
  a.window = CountArg(info, 15, fn, "window");
  using voxslab::AttentionMask;
  a.mask = EnumArg(info, 16, fn, "mode", AttentionMask::kSliding, "0 (full), 1 (causal) or 2 (sliding)");
  a.scale = static_cast<float>(NumberArg(info, 17, fn, "scale"));
  a.tq = CountArg(info, 18, fn, "tq");
  a.tk = CountArg(info, 19, fn, "tk");
  if (a.Hq == 0 || a.Hkv == 0 || a.Hq % a.Hkv != 0) ThrowRange(info.Env(), "attention: Hkv must divide Hq");
  if (a.hd == 0 || a.tq == 0 || a.tk == 0) ThrowRange(info.Env(), "attention: hd and tile sizes must be positive");
  if (a.mask == AttentionMask::kSliding && a.window == 0) ThrowRange(info.Env(), "attention: a sliding window must be positive");
  auto q = F32Arg(info, 0, fn, "q", Mul(info, fn, {a.Tq, a.Hq, a.hd}));
  const size_t kvNeed = Mul(info, fn, {a.Tk, a.Hkv, a.hd});
  a.kvF16 = info[1].IsTypedArray() && info[1].As<Napi::TypedArray>().TypedArrayType() == napi_uint16_array;
  View<const uint8_t> k{nullptr, 0}, v{nullptr, 0};
  if (a.kvF16) {
    auto kh = TypedArg<uint16_t>(info, 1, napi_uint16_array, fn, "k");
    auto vh = TypedArg<uint16_t>(info, 2, napi_uint16_array, fn, "v");
    if (kh.length < kvNeed || vh.length < kvNeed) ThrowRange(info.Env(), "attention: k and v need " + std::to_string(kvNeed) + " values");
    k = {reinterpret_cast<const uint8_t*>(kh.data), kh.length * 2};
    v = {reinterpret_cast<const uint8_t*>(vh.data), vh.length * 2};
  } else {
    auto kf = F32Arg(info, 1, fn, "k", kvNeed);
    auto vf = F32Arg(info, 2, fn, "v", kvNeed);
    k = {reinterpret_cast<const uint8_t*>(kf.data), kf.length * 4};
    v = {reinterpret_cast<const uint8_t*>(vf.data), vf.length * 4};
  }
  auto out = F32Arg(info, 3, fn, "out", Mul(info, fn, {a.Tq, a.Hq, a.hd}));
  const float* p = nullptr;
  const float* u = nullptr;
  const float* vb = nullptr;
  if (!info[4].IsNull()) {
    if (a.mask != AttentionMask::kFull || a.Tq != a.Tk || a.qpos0 != a.kpos0) {
      ThrowRange(info.Env(), "attention: relative positions need full context and Tq = Tk at the same positions");
    }
    p = F32Arg(info, 4, fn, "p", Mul(info, fn, {2 * a.Tk - 1, a.Hq, a.hd})).data;
    u = F32Arg(info, 5, fn, "u", Mul(info, fn, {a.Hq, a.hd})).data;
    vb = F32Arg(info, 6, fn, "vb", Mul(info, fn, {a.Hq, a.hd})).data;
  }
  auto scratch = F32Arg(info, 7, fn, "scratch", AttentionScratchNeed(info, fn, a.tq, a.tk, a.hd, a.Hq / a.Hkv, a.Hkv));
  if (Overlap(out, q) || Overlap(out, k) || Overlap(out, v) || Overlap(scratch, out) || Overlap(scratch, q) || Overlap(scratch, k) || Overlap(scratch, v)) {
    ThrowRange(info.Env(), "attention: out and scratch must not overlap the inputs");
  }
  voxslab::Attention(a, q.data, k.data, v.data, out.data, p, u, vb, scratch.data);
  return info.Env().Undefined();
}

// conv1d(mode, x, w, bias | state | null, y, T, C, k, t0, t1): mode 0 causal (third array is
// the state [k−1][C]), mode 1 'same' (third array is the bias or null; rows [t0, t1)).
Napi::Value Conv1dValue(const Napi::CallbackInfo& info) {
  const char* fn = "conv1d";
  ExpectArgs(info, 10, fn);
  const auto mode = EnumArg(info, 0, fn, "mode", voxslab::ConvMode::kSame, "0 (causal) or 1 (same)");
  const int64_t T = CountArg(info, 5, fn, "T");
  const int64_t C = CountArg(info, 6, fn, "C");
  const int64_t k = CountArg(info, 7, fn, "k");
  if (k == 0 || C == 0) ThrowRange(info.Env(), "conv1d: k and C must be positive");
  auto x = F32Arg(info, 1, fn, "x", Mul(info, fn, {T, C}));
  auto w = F32Arg(info, 2, fn, "w", Mul(info, fn, {C, k}));
  if (mode == voxslab::ConvMode::kCausal) {
    auto state = F32Arg(info, 3, fn, "state", Mul(info, fn, {(k - 1), C}));
    auto y = F32Arg(info, 4, fn, "y", Mul(info, fn, {T, C}));
    if (Overlap(y, x) || Overlap(y, state)) ThrowRange(info.Env(), "conv1d: y must not overlap x or the state");
    voxslab::Conv1dCausal(x.data, w.data, state.data, y.data, T, C, k);
  } else {
    if (k % 2 == 0) ThrowRange(info.Env(), "conv1d: 'same' needs an odd kernel");
    const int64_t t0 = CountArg(info, 8, fn, "t0");
    const int64_t t1 = CountArg(info, 9, fn, "t1");
    if (t0 > t1 || t1 > T) ThrowRange(info.Env(), "conv1d: rows [t0, t1) must lie in [0, T]");
    const float* bias = info[3].IsNull() ? nullptr : F32Arg(info, 3, fn, "bias", static_cast<size_t>(C)).data;
    auto y = F32Arg(info, 4, fn, "y", Mul(info, fn, {(t1 - t0), C}));
    if (Overlap(y, x)) ThrowRange(info.Env(), "conv1d: y must not overlap x");
    voxslab::Conv1dSame(x.data, w.data, bias, y.data, T, C, k, t0, t1);
  }
  return info.Env().Undefined();
}

// conv2dS2(in, Cin, inRow0, inRows, inTotal, inCols, w, bias | null, depthwise, out, Cout, outRow0, outRows, outCols, relu)
Napi::Value Conv2dValue(const Napi::CallbackInfo& info) {
  const char* fn = "conv2dS2";
  ExpectArgs(info, 15, fn);
  const int64_t Cin = CountArg(info, 1, fn, "Cin");
  const int64_t inRow0 = CountArg(info, 2, fn, "inRow0");
  const int64_t inRows = CountArg(info, 3, fn, "inRows");
  const int64_t inTotal = CountArg(info, 4, fn, "inTotal");
  const int64_t inCols = CountArg(info, 5, fn, "inCols");
  const bool dw = BoolArg(info, 8, fn, "depthwise");
  const bool relu = BoolArg(info, 14, fn, "relu");
  const int64_t Cout = CountArg(info, 10, fn, "Cout");
  const int64_t outRow0 = CountArg(info, 11, fn, "outRow0");
  const int64_t outRows = CountArg(info, 12, fn, "outRows");
  const int64_t outCols = CountArg(info, 13, fn, "outCols");
  if (dw && Cin != Cout) ThrowRange(info.Env(), "conv2dS2: depthwise needs Cin = Cout");
  if (outCols > (inCols + 1) / 2) ThrowRange(info.Env(), "conv2dS2: outCols exceeds what a stride-2 convolution of inCols gives");
  // Every input row the output rows read must be in the buffer (or be padding).
  if (outRows > 0) {
    const int64_t lo = std::max<int64_t>(0, 2 * outRow0 - 1);
    const int64_t hi = std::min<int64_t>(inTotal - 1, 2 * (outRow0 + outRows - 1) + 1);
    if (lo <= hi && (lo < inRow0 || hi >= inRow0 + inRows)) {
      ThrowRange(info.Env(), "conv2dS2: output rows need input rows " + std::to_string(lo) + "…" + std::to_string(hi) + " but the buffer holds " +
                                 std::to_string(inRow0) + "…" + std::to_string(inRow0 + inRows - 1));
    }
  }
  auto in = F32Arg(info, 0, fn, "in", Mul(info, fn, {Cin, inRows, inCols}));
  auto w = F32Arg(info, 6, fn, "w", dw ? Mul(info, fn, {Cout, 9}) : Mul(info, fn, {Cout, Cin, 9}));
  const float* bias = info[7].IsNull() ? nullptr : F32Arg(info, 7, fn, "bias", static_cast<size_t>(Cout)).data;
  auto out = F32Arg(info, 9, fn, "out", Mul(info, fn, {Cout, outRows, outCols}));
  if (Overlap(out, in)) ThrowRange(info.Env(), "conv2dS2: out must not overlap in");
  voxslab::Conv2dS2(in.data, Cin, inRow0, inRows, inTotal, inCols, w.data, bias, dw, out.data, Cout, outRow0, outRows, outCols, relu);
  return info.Env().Undefined();
}

// pointwise(in, w, bias | null, out, Cin, Cout, P, relu)
Napi::Value PointwiseValue(const Napi::CallbackInfo& info) {
  const char* fn = "pointwise";
  ExpectArgs(info, 8, fn);
  const int64_t Cin = CountArg(info, 4, fn, "Cin");
  const int64_t Cout = CountArg(info, 5, fn, "Cout");
  const int64_t P = CountArg(info, 6, fn, "P");
  const bool relu = BoolArg(info, 7, fn, "relu");
  auto in = F32Arg(info, 0, fn, "in", Mul(info, fn, {Cin, P}));
  auto w = F32Arg(info, 1, fn, "w", Mul(info, fn, {Cout, Cin}));
  const float* bias = info[2].IsNull() ? nullptr : F32Arg(info, 2, fn, "bias", static_cast<size_t>(Cout)).data;
  auto out = F32Arg(info, 3, fn, "out", Mul(info, fn, {Cout, P}));
  if (Overlap(out, in)) ThrowRange(info.Env(), "pointwise: out must not overlap in");
  voxslab::Pointwise(in.data, w.data, bias, out.data, Cin, Cout, P, relu);
  return info.Env().Undefined();
}

Napi::Value FmaProbeValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "fmaProbe");
  return Napi::Number::New(info.Env(), voxslab::FmaProbe(CountArg(info, 0, "fmaProbe", "iterations")));
}

// ---- mirrored rings ----
// A mapping lives while its owner holds it or any thread has a view of it: the owner's release
// and each view's finalizer (on whichever thread collects the view) give a reference back, and
// the last one unmaps. A view is never touched after its finalizer runs, so none outlives it.
struct MirrorMap {
  size_t bytes;
  int refs;
};

std::mutex& MirrorMutex() {
  static std::mutex mu;
  return mu;
}

std::unordered_map<uintptr_t, MirrorMap>& Mirrors() {
  static std::unordered_map<uintptr_t, MirrorMap> maps;
  return maps;
}

void DropMirror(uintptr_t at) {
  std::lock_guard<std::mutex> lock(MirrorMutex());
  auto it = Mirrors().find(at);
  if (it == Mirrors().end()) return;
  if (--it->second.refs == 0) {
    voxslab::UnmapMirror(reinterpret_cast<void*>(at), it->second.bytes);
    Mirrors().erase(it);
  }
}

uintptr_t MirrorAddressArg(const Napi::CallbackInfo& info, const char* fn) {
  if (!info[0].IsBigInt()) ThrowType(info.Env(), std::string(fn) + ": address must be a bigint from mirrorCreate");
  bool lossless = false;
  const uint64_t at = info[0].As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless) ThrowRange(info.Env(), std::string(fn) + ": address out of range");
  return static_cast<uintptr_t>(at);
}

// mirrorCreate(bytes): { ok, errno, message, address? } — `bytes` mapped twice, back to back.
Napi::Value MirrorCreate(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "mirrorCreate");
  const int64_t bytes = CountArg(info, 0, "mirrorCreate", "bytes");
  if (bytes < 1 || bytes > (int64_t{1} << 32)) ThrowRange(info.Env(), "mirrorCreate: bytes must be from 1 to 2^32");
  int err = 0;
  void* base = voxslab::MapMirror(static_cast<size_t>(bytes), &err);
  if (base != nullptr) {
    std::lock_guard<std::mutex> lock(MirrorMutex());
    Mirrors()[reinterpret_cast<uintptr_t>(base)] = MirrorMap{static_cast<size_t>(bytes), 1};
  }
  // JS objects only outside the lock: an allocation may collect a view, whose finalizer takes it.
  Napi::Object out = Result(info.Env(), base == nullptr ? err : 0);
  if (base != nullptr) out.Set("address", Napi::BigInt::New(info.Env(), static_cast<uint64_t>(reinterpret_cast<uintptr_t>(base))));
  return out;
}

// mirrorView(address): this thread's ArrayBuffer over both halves (2 × bytes).
Napi::Value MirrorView(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "mirrorView");
  const uintptr_t at = MirrorAddressArg(info, "mirrorView");
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(MirrorMutex());
    auto it = Mirrors().find(at);
    if (it != Mirrors().end()) {
      it->second.refs++;
      bytes = it->second.bytes;
    }
  }
  // Thrown outside the lock (making the error allocates, and a collection may run a finalizer).
  if (bytes == 0) ThrowRange(info.Env(), "mirrorView: no mirrored mapping at that address (released?)");
  return Napi::ArrayBuffer::New(info.Env(), reinterpret_cast<void*>(at), 2 * bytes,
                                [](Napi::Env, void* data) { DropMirror(reinterpret_cast<uintptr_t>(data)); });
}

// mirrorRelease(address): the owner's reference back (the mapping goes with the last view).
Napi::Value MirrorRelease(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "mirrorRelease");
  DropMirror(MirrorAddressArg(info, "mirrorRelease"));
  return info.Env().Undefined();
}

Napi::Value ReadProbeValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "readProbe");
  auto x = TypedArg<float>(info, 0, napi_float32_array, "readProbe", "x");
  return Napi::Number::New(info.Env(), voxslab::ReadProbe(x.data, static_cast<int64_t>(x.length)));
}

// Echo cancellation and voice activity (apm.h). A handle is an External that owns one engine;
// the finalizer frees it when the handle is collected, apmDestroy at once.
struct ApmHandle {
  voxslab::Apm* apm;
};

// firstNonFinite(bytes: Uint8Array, type 0 f32 | 1 f16 | 2 bf16) -> index or -1
Napi::Value FirstNonFiniteValue(const Napi::CallbackInfo& info) {
  const char* fn = "firstNonFinite";
  ExpectArgs(info, 2, fn);
  Bytes b = TypedArrayBytes(info, 0, fn);
  const auto type = EnumArg(info, 1, fn, "type", voxslab::WeightType::kBF16, "0 (f32), 1 (f16) or 2 (bf16)");
  const int64_t r = voxslab::FirstNonFinite(b.data, static_cast<int64_t>(b.length) / voxslab::ElemBytes(type), type);
  return Napi::Number::New(info.Env(), static_cast<double>(r));
}

// apmCreate(echo 0 (off)..3 suppression, highPass 0|1, noise 0..4, voice 0..4, delayAgnostic 0|1) -> { handle, heapBytes }
Napi::Value ApmCreateValue(const Napi::CallbackInfo& info) {
  const char* fn = "apmCreate";
  ExpectArgs(info, 5, fn);
  const int64_t echo = CountArg(info, 0, fn, "echo");
  const int64_t agnostic = CountArg(info, 4, fn, "delayAgnostic");
  const int64_t high = CountArg(info, 1, fn, "highPass");
  const int64_t noise = CountArg(info, 2, fn, "noise");
  const int64_t voice = CountArg(info, 3, fn, "voice");
  if (echo > 3) ThrowRange(info.Env(), "apmCreate: echo must be 0 (off) to 3");
  if (high > 1 || agnostic > 1) ThrowRange(info.Env(), "apmCreate: highPass and delayAgnostic must be 0 or 1");
  if (noise > 4 || voice > 4) ThrowRange(info.Env(), "apmCreate: noise and voice must be 0 (off) to 4");
  if (!voxslab::ApmAvailable()) throw Napi::Error::New(info.Env(), "apmCreate: the addon was built without WebRTC audio processing");
  voxslab::ApmSettings s{static_cast<int>(echo), high == 1, static_cast<int>(noise), static_cast<int>(voice), agnostic == 1};
  int64_t heap = 0;
  voxslab::Apm* apm = voxslab::ApmCreate(s, &heap);
  if (apm == nullptr) throw Napi::Error::New(info.Env(), "apmCreate: the audio processing engine refused its settings");
  auto handle = Napi::External<ApmHandle>::New(info.Env(), new ApmHandle{apm}, [](Napi::Env, ApmHandle* h) {
    voxslab::ApmDestroy(h->apm);
    delete h;
  });
  Napi::Object out = Napi::Object::New(info.Env());
  out.Set("handle", handle);
  out.Set("heapBytes", Napi::Number::New(info.Env(), static_cast<double>(heap)));
  return out;
}

ApmHandle* ApmArg(const Napi::CallbackInfo& info, const char* fn) {
  if (!info[0].IsExternal()) ThrowType(info.Env(), std::string(fn) + ": argument 1 must be a handle from apmCreate");
  return info[0].As<Napi::External<ApmHandle>>().Data();
}

Napi::Value ApmDestroyValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "apmDestroy");
  ApmHandle* h = ApmArg(info, "apmDestroy");
  voxslab::ApmDestroy(h->apm);
  h->apm = nullptr;
  return info.Env().Undefined();
}

// apmProcess(handle, near, nearAt, far | null, farAt, out, outAt, delayMs) -> flags
// One 10 ms frame at 16 kHz. Flags: 1 voice, 2 echo present.
Napi::Value ApmProcessValue(const Napi::CallbackInfo& info) {
  const char* fn = "apmProcess";
  ExpectArgs(info, 8, fn);
  ApmHandle* h = ApmArg(info, fn);
  if (h->apm == nullptr) throw Napi::Error::New(info.Env(), "apmProcess: the engine was destroyed");
  const int64_t na = CountArg(info, 2, fn, "nearAt");
  const int64_t fa = CountArg(info, 4, fn, "farAt");
  const int64_t oa = CountArg(info, 6, fn, "outAt");
  const int64_t delay = CountArg(info, 7, fn, "delayMs");
  if (na > (int64_t{1} << 40) || fa > (int64_t{1} << 40) || oa > (int64_t{1} << 40)) ThrowRange(info.Env(), "apmProcess: offsets must be below 2^40");
  if (delay > 500) ThrowRange(info.Env(), "apmProcess: delayMs must be at most 500");
  auto near = F32Arg(info, 1, fn, "near", static_cast<size_t>(na + voxslab::kApmFrame));
  const float* far = nullptr;
  if (!info[3].IsNull()) far = F32Arg(info, 3, fn, "far", static_cast<size_t>(fa + voxslab::kApmFrame)).data + fa;
  auto out = F32Arg(info, 5, fn, "out", static_cast<size_t>(oa + voxslab::kApmFrame));
  const int r = voxslab::ApmProcess(h->apm, near.data + na, far, out.data + oa, static_cast<int>(delay));
  return Napi::Number::New(info.Env(), r);
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  Export<ResampleRunValue>(env, exports, "resampleRun");
  Export<FftValue>(env, exports, "fft");
  Export<RfftValue>(env, exports, "rfft");
  Export<GemvValue>(env, exports, "gemv");
  Export<GemmValue>(env, exports, "gemm");
  Export<GemvIntValue>(env, exports, "gemvInt");
  Export<GemvIntManyValue>(env, exports, "gemvIntMany");
  Export<RowsValue<false>>(env, exports, "gemvRows");
  Export<RowsValue<true>>(env, exports, "gemmInt");
  Export<SetComputeThreadsValue>(env, exports, "setComputeThreads");
  Export<NoArgs<voxslab::ComputeThreads>>(env, exports, "computeThreads");
  Export<NormValue>(env, exports, "norm");
  Export<AddNormValue>(env, exports, "addNorm");
  Export<ActivationValue>(env, exports, "activation");
  Export<RopeValue>(env, exports, "rope");
  Export<AttentionValue>(env, exports, "attention");
  Export<Conv1dValue>(env, exports, "conv1d");
  Export<Conv2dValue>(env, exports, "conv2dS2");
  Export<PointwiseValue>(env, exports, "pointwise");
  Export<FmaProbeValue>(env, exports, "fmaProbe");
  Export<ReadProbeValue>(env, exports, "readProbe");
  Export<MirrorCreate>(env, exports, "mirrorCreate");
  Export<MirrorView>(env, exports, "mirrorView");
  Export<MirrorRelease>(env, exports, "mirrorRelease");
  Export<NoArgs<voxslab::FmaLanes>>(env, exports, "fmaLanes");
  Export<NoArgs<voxslab::KernelIsa>>(env, exports, "kernelIsa");
  Export<NoArgs<voxslab::DotPath>>(env, exports, "kernelPath");
  Export<NoArgs<voxslab::KernelsRequestError>>(env, exports, "kernelsRequestError");
  Export<GemvScratchBytesValue>(env, exports, "gemvScratchBytes");
  Export<GemmIntScratchBytesValue>(env, exports, "gemmIntScratchBytes");
  Export<AttentionScratchFloatsValue>(env, exports, "attentionScratchFloats");
  exports.Set("gemmPackFloats", Napi::Number::New(env, static_cast<double>(voxslab::kGemmPackFloats)));
  Napi::Object slots = Napi::Object::New(env);
  const std::pair<const char*, int> names[] = {{"pos", voxslab::kRsPos},   {"inputs", voxslab::kRsInputs}, {"outputs", voxslab::kRsOutputs},
                                               {"up", voxslab::kRsUp},     {"down", voxslab::kRsDown},     {"taps", voxslab::kRsTaps},
                                               {"center", voxslab::kRsCenter}, {"slots", voxslab::kRsSlots}};
  for (const auto& [name, slot] : names) slots.Set(name, Napi::Number::New(env, slot));
  exports.Set("resamplerSlots", slots);
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
  Export<FirstNonFiniteValue>(env, exports, "firstNonFinite");
  Export<NoArgs<voxslab::QuietAlsaErrors>>(env, exports, "quietAlsa");
  Export<MallocMmapThresholdValue>(env, exports, "mallocMmapThreshold");
  Export<NoArgs<voxslab::ApmAvailable>>(env, exports, "apmAvailable");
  Export<ApmCreateValue>(env, exports, "apmCreate");
  Export<ApmDestroyValue>(env, exports, "apmDestroy");
  Export<ApmProcessValue>(env, exports, "apmProcess");
  Export<CpuFeaturesValue>(env, exports, "cpuFeatures");
  return exports;
}

}  // namespace

NODE_API_MODULE(voxslab_native, Init)
