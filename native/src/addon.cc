// Node-API surface of the native addon. Every argument is type-checked here; the
// operating-system work lives in system.cc.
#include <napi.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>

#include "apm.h"
#include "dsp.h"
#include "kernels.h"
#include "system.h"

namespace {

using voxslab::CpuFeatures;

// Argument errors carry the catalogue's code (ERR_VOXSLAB_ARGUMENT), so callers can tell them
// from faults without parsing messages.
[[noreturn]] void ThrowType(const Napi::Env& env, const std::string& message) {
  Napi::TypeError e = Napi::TypeError::New(env, message);
  e.Set("code", Napi::String::New(env, "ERR_VOXSLAB_ARGUMENT"));
  throw e;
}

[[noreturn]] void ThrowRange(const Napi::Env& env, const std::string& message) {
  Napi::RangeError e = Napi::RangeError::New(env, message);
  e.Set("code", Napi::String::New(env, "ERR_VOXSLAB_ARGUMENT"));
  throw e;
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

Napi::Value CurrentCpu(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 0, "currentCpu");
  return Napi::Number::New(info.Env(), voxslab::CurrentCpu());
}

Napi::Value AffinitySupported(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 0, "affinitySupported");
  return Napi::Boolean::New(info.Env(), voxslab::AffinitySupported());
}

Napi::Value ConfiguredCpus(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 0, "configuredCpus");
  return Napi::Number::New(info.Env(), voxslab::ConfiguredCpus());
}

// Monotonic milliseconds written into out[index]: a clock read that leaves nothing on the JS
// heap (a returned double would be boxed when the call is not inlined).
Napi::Value ClockInto(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 2, "clockInto");
  View<double> out = TypedArg<double>(info, 0, napi_float64_array, "clockInto", "out");
  const int64_t index = CountArg(info, 1, "clockInto", "index");
  if (static_cast<uint64_t>(index) >= out.length) ThrowRange(info.Env(), "clockInto: index is past the end of out");
  out.data[index] = voxslab::MonotonicMs();
  return info.Env().Undefined();
}

Napi::Value PageSize(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 0, "pageSize");
  return Napi::Number::New(info.Env(), static_cast<double>(voxslab::PageSize()));
}

Napi::Value ResidentBytes(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "residentBytes");
  Bytes b = TypedArrayBytes(info, 0, "residentBytes");
  const int64_t r = voxslab::ResidentBytes(b.data, b.length);
  if (r < 0) {
    throw Napi::Error::New(info.Env(), "residentBytes: mincore failed: " + ErrnoText(static_cast<int>(-r)));
  }
  return Napi::Number::New(info.Env(), static_cast<double>(r));
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

Napi::Value CpuFeaturesValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 0, "cpuFeatures");
  Napi::Env env = info.Env();
  CpuFeatures f = voxslab::DetectCpuFeatures();
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
  if (!info[6].IsBoolean()) ThrowType(info.Env(), "fft: inverse must be a boolean");
  const bool inverse = info[6].As<Napi::Boolean>().Value();
  if (n < 1 || n > (1 << 24)) ThrowRange(info.Env(), "fft: n must be from 1 to 2^24");
  const size_t len = Mul(info, fn, {2, n});
  if (tw.length < len || in.length < len || out.length < len) ThrowRange(info.Env(), "fft: twiddles, input and output need 2·n values");
  // The factor plan must multiply out to n and fit the scratch.
  int64_t rest = n;
  size_t i = 0;
  int32_t maxP = 2;
  while (rest > 1) {
    if (i + 1 >= factors.length) ThrowRange(info.Env(), "fft: factor plan is incomplete");
    const int32_t p = factors.data[i];
    const int32_t m = factors.data[i + 1];
    if (p < 2 || rest % p != 0 || rest / p != m) ThrowRange(info.Env(), "fft: factor plan does not match n");
    maxP = std::max(maxP, p);
    rest = m;
    i += 2;
  }
  if (n == 1 && (factors.length < 2 || factors.data[0] != 1 || factors.data[1] != 1)) ThrowRange(info.Env(), "fft: factor plan does not match n");
  if (scratch.length < Mul(info, fn, {2, maxP})) ThrowRange(info.Env(), "fft: scratch is too small for the largest radix");
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
  if (!info[8].IsBoolean()) ThrowType(info.Env(), "rfft: inverse must be a boolean");
  const bool inverse = info[8].As<Napi::Boolean>().Value();
  if (n < 2 || n % 2 != 0 || n > (1 << 24)) ThrowRange(info.Env(), "rfft: n must be even, from 2 to 2^24");
  const int64_t h = n / 2;
  const size_t bins2 = Mul(info, fn, {2, (h + 1)});
  if (tw.length < Mul(info, fn, {2, h}) || split.length < bins2 || work.length < Mul(info, fn, {2, n})) {
    ThrowRange(info.Env(), "rfft: twiddles need n values, split n + 2, work 2·n");
  }
  const size_t inNeed = inverse ? bins2 : static_cast<size_t>(n);
  const size_t outNeed = inverse ? static_cast<size_t>(n) : bins2;
  if (in.length < inNeed || out.length < outNeed) ThrowRange(info.Env(), "rfft: input or output is too short");
  int64_t rest = h;
  size_t i = 0;
  int32_t maxP = 2;
  while (rest > 1) {
    if (i + 1 >= factors.length) ThrowRange(info.Env(), "rfft: factor plan is incomplete");
    const int32_t p = factors.data[i];
    const int32_t m = factors.data[i + 1];
    if (p < 2 || rest % p != 0 || rest / p != m) ThrowRange(info.Env(), "rfft: factor plan does not match n/2");
    maxP = std::max(maxP, p);
    rest = m;
    i += 2;
  }
  if (h == 1 && (factors.length < 2 || factors.data[0] != 1 || factors.data[1] != 1)) ThrowRange(info.Env(), "rfft: factor plan does not match n/2");
  if (scratch.length < Mul(info, fn, {2, maxP})) ThrowRange(info.Env(), "rfft: scratch is too small for the largest radix");
  if (Overlap(in, out) || Overlap(work, in) || Overlap(work, out) || Overlap(scratch, work)) ThrowRange(info.Env(), "rfft: buffers must not overlap");
  if (inverse) {
    voxslab::RfftInverse(factors.data, tw.data, scratch.data, split.data, work.data, in.data, out.data, static_cast<int>(n));
  } else {
    voxslab::RfftForward(factors.data, tw.data, scratch.data, split.data, work.data, in.data, out.data, static_cast<int>(n));
  }
  return info.Env().Undefined();
}

// ---- compute kernels ---------------------------------------------------------------------

View<float> F32Arg(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* what, size_t need) {
  auto v = TypedArg<float>(info, i, napi_float32_array, fn, what);
  if (v.length < need) ThrowRange(info.Env(), std::string(fn) + ": " + what + " has " + std::to_string(v.length) + " values, needs " + std::to_string(need));
  return v;
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

// gemv(type, w, scales | null, biases | null, group, x, y, M, K, xsum | null)
Napi::Value GemvValue(const Napi::CallbackInfo& info) {
  const char* fn = "gemv";
  ExpectArgs(info, 10, fn);
  const int64_t type = CountArg(info, 0, fn, "type");
  if (type > 4) ThrowRange(info.Env(), "gemv: type must be 0 (f32), 1 (f16), 2 (bf16), 3 (q8) or 4 (q4)");
  const int64_t M = CountArg(info, 7, fn, "M");
  const int64_t K = CountArg(info, 8, fn, "K");
  const auto wt = static_cast<voxslab::WeightType>(type);
  const bool quant = wt == voxslab::WeightType::kQ8 || wt == voxslab::WeightType::kQ4;
  const void* w = nullptr;
  size_t wlen = 0, wneed = Mul(info, fn, {M, K});
  if (wt == voxslab::WeightType::kF32) {
    auto v = TypedArg<float>(info, 1, napi_float32_array, fn, "w");
    w = v.data;
    wlen = v.length;
  } else if (!quant) {
    auto v = TypedArg<uint16_t>(info, 1, napi_uint16_array, fn, "w");
    w = v.data;
    wlen = v.length;
  } else {
    auto v = TypedArg<uint8_t>(info, 1, napi_uint8_array, fn, "w");
    w = v.data;
    wlen = v.length;
    if (wt == voxslab::WeightType::kQ4) wneed = Mul(info, fn, {M, K}) / 2;
  }
  if (wlen < wneed) ThrowRange(info.Env(), "gemv: w has " + std::to_string(wlen) + " elements, needs " + std::to_string(wneed));
  int64_t group = 0;
  const float* scales = nullptr;
  const float* biases = nullptr;
  float* xsum = nullptr;
  if (quant) {
    group = CountArg(info, 4, fn, "group");
    if (group < 8 || group % 8 != 0 || K % group != 0) ThrowRange(info.Env(), "gemv: group must be a multiple of 8 that divides K");
    const size_t g = Mul(info, fn, {M, (K / group)});
    scales = F32Arg(info, 2, fn, "scales", g).data;
    biases = F32Arg(info, 3, fn, "biases", g).data;
    xsum = F32Arg(info, 9, fn, "xsum", static_cast<size_t>(K / group)).data;
  }
  auto x = F32Arg(info, 5, fn, "x", static_cast<size_t>(K));
  auto y = F32Arg(info, 6, fn, "y", static_cast<size_t>(M));
  if (Overlap(x, y)) ThrowRange(info.Env(), "gemv: x and y must not overlap");
  if (quant) voxslab::Gemv(wt, w, scales, biases, static_cast<int>(group), x.data, y.data, M, K, xsum);
  else voxslab::GemvSplit(wt, w, x.data, y.data, M, K);
  return info.Env().Undefined();
}

// setComputeThreads(n): threads sharing each GEMV's rows (1–8; 1 stops the helpers).
Napi::Value SetComputeThreadsValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "setComputeThreads");
  const int64_t n = CountArg(info, 0, "setComputeThreads", "n");
  if (n < 1 || n > 8) ThrowRange(info.Env(), "setComputeThreads: n must be from 1 to 8");
  voxslab::SetComputeThreads(static_cast<int>(n));
  return Napi::Number::New(info.Env(), voxslab::ComputeThreads());
}

Napi::Value ComputeThreadsValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 0, "computeThreads");
  return Napi::Number::New(info.Env(), voxslab::ComputeThreads());
}

// Reads a weight matrix argument [M][K] of `type` (with scales/biases for q8/q4).
voxslab::WeightRef WeightArg(const Napi::CallbackInfo& info, const char* fn, int64_t type, size_t wi, size_t si, size_t bi,
                             size_t gi, int64_t M, int64_t K) {
  if (type > 4) ThrowRange(info.Env(), std::string(fn) + ": type must be 0 (f32), 1 (f16), 2 (bf16), 3 (q8) or 4 (q4)");
  voxslab::WeightRef w{static_cast<voxslab::WeightType>(type), nullptr, nullptr, nullptr, 0};
  const bool quant = type >= 3;
  size_t wlen = 0, wneed = Mul(info, fn, {M, K});
  if (type == 0) {
    auto v = TypedArg<float>(info, wi, napi_float32_array, fn, "w");
    w.data = v.data;
    wlen = v.length;
  } else if (!quant) {
    auto v = TypedArg<uint16_t>(info, wi, napi_uint16_array, fn, "w");
    w.data = v.data;
    wlen = v.length;
  } else {
    auto v = TypedArg<uint8_t>(info, wi, napi_uint8_array, fn, "w");
    w.data = v.data;
    wlen = v.length;
    if (type == 4) wneed = Mul(info, fn, {M, K}) / 2;
  }
  if (wlen < wneed) ThrowRange(info.Env(), std::string(fn) + ": w has " + std::to_string(wlen) + " elements, needs " + std::to_string(wneed));
  if (quant) {
    const int64_t group = CountArg(info, gi, fn, "group");
    if (group < 8 || group % 8 != 0 || K % group != 0) ThrowRange(info.Env(), std::string(fn) + ": group must be a multiple of 8 that divides K");
    const size_t g = Mul(info, fn, {M, (K / group)});
    w.scales = F32Arg(info, si, fn, "scales", g).data;
    w.biases = F32Arg(info, bi, fn, "biases", g).data;
    w.group = static_cast<int>(group);
  }
  return w;
}

// gemvRows(type, w, scales, biases, group, X, Y, n, M, K, scratch | null)
Napi::Value GemvRowsValue(const Napi::CallbackInfo& info) {
  const char* fn = "gemvRows";
  ExpectArgs(info, 11, fn);
  const int64_t type = CountArg(info, 0, fn, "type");
  const int64_t n = CountArg(info, 7, fn, "n");
  const int64_t M = CountArg(info, 8, fn, "M");
  const int64_t K = CountArg(info, 9, fn, "K");
  const voxslab::WeightRef w = WeightArg(info, fn, type, 1, 2, 3, 4, M, K);
  if (type >= 3 && w.group < 32) ThrowRange(info.Env(), "gemvRows: group must be at least 32");
  auto X = F32Arg(info, 5, fn, "X", Mul(info, fn, {n, K}));
  auto Y = F32Arg(info, 6, fn, "Y", Mul(info, fn, {n, M}));
  if (Overlap(X, Y)) ThrowRange(info.Env(), "gemvRows: X and Y must not overlap");
  void* scratch = nullptr;
  if (type >= 3) {
    const int64_t need = voxslab::GemvRowsScratchBytes(n, K, w.group);
    auto sc = F32Arg(info, 10, fn, "scratch", static_cast<size_t>((need + 3) / 4));
    if (Overlap(X, sc) || Overlap(Y, sc)) ThrowRange(info.Env(), "gemvRows: scratch must not overlap X or Y");
    scratch = sc.data;
  }
  voxslab::GemvRows(w.type, w.data, w.scales, w.biases, w.group, X.data, Y.data, n, M, K, scratch);
  return info.Env().Undefined();
}

// gemvInt(type, w, scales, biases, group, x, y, M, K, scratch): q8/q4 weights, int8 activations.
Napi::Value GemvIntValue(const Napi::CallbackInfo& info) {
  const char* fn = "gemvInt";
  ExpectArgs(info, 10, fn);
  const int64_t type = CountArg(info, 0, fn, "type");
  if (type != 3 && type != 4) ThrowRange(info.Env(), "gemvInt: type must be 3 (q8) or 4 (q4)");
  const int64_t M = CountArg(info, 7, fn, "M");
  const int64_t K = CountArg(info, 8, fn, "K");
  const voxslab::WeightRef w = WeightArg(info, fn, type, 1, 2, 3, 4, M, K);
  if (w.group < 32) ThrowRange(info.Env(), "gemvInt: group must be at least 32");
  auto x = F32Arg(info, 5, fn, "x", static_cast<size_t>(K));
  auto y = F32Arg(info, 6, fn, "y", static_cast<size_t>(M));
  const int64_t need = voxslab::GemvIntScratchBytes(K, w.group);
  auto scratch = F32Arg(info, 9, fn, "scratch", static_cast<size_t>((need + 3) / 4));
  if (Overlap(x, y) || Overlap(x, scratch) || Overlap(y, scratch)) ThrowRange(info.Env(), "gemvInt: x, y and scratch must not overlap");
  voxslab::GemvInt(w.type, w.data, w.scales, w.biases, w.group, x.data, y.data, M, K, scratch.data);
  return info.Env().Undefined();
}

// gemm(A, type, W, scales | null, biases | null, group, bias | null, C, T, N, K, pack)
Napi::Value GemmValue(const Napi::CallbackInfo& info) {
  const char* fn = "gemm";
  ExpectArgs(info, 12, fn);
  const int64_t T = CountArg(info, 8, fn, "T");
  const int64_t N = CountArg(info, 9, fn, "N");
  const int64_t K = CountArg(info, 10, fn, "K");
  const int64_t type = CountArg(info, 1, fn, "type");
  auto A = F32Arg(info, 0, fn, "A", Mul(info, fn, {T, K}));
  const voxslab::WeightRef W = WeightArg(info, fn, type, 2, 3, 4, 5, N, K);
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
  const int64_t kind = CountArg(info, 0, fn, "kind");
  const int64_t rows = CountArg(info, 5, fn, "rows");
  const int64_t dim = CountArg(info, 6, fn, "dim");
  const double eps = NumberArg(info, 7, fn, "eps");
  if (kind > 1 || dim == 0 || !(eps >= 0)) ThrowRange(info.Env(), "norm: kind must be 0 or 1, dim positive, eps non-negative");
  auto x = F32Arg(info, 1, fn, "x", Mul(info, fn, {rows, dim}));
  auto w = F32Arg(info, 2, fn, "w", static_cast<size_t>(dim));
  auto y = F32Arg(info, 4, fn, "y", Mul(info, fn, {rows, dim}));
  if (kind == 0) {
    voxslab::RmsNorm(x.data, w.data, y.data, rows, dim, static_cast<float>(eps));
  } else {
    auto b = F32Arg(info, 3, fn, "b", static_cast<size_t>(dim));
    voxslab::LayerNorm(x.data, w.data, b.data, y.data, rows, dim, static_cast<float>(eps));
  }
  return info.Env().Undefined();
}

// activation(kind, x, y, n, other | null): 0 GELU, 1 SiLU, 2 SwiGLU (x = gate, other = up), 3 GLU (n = rows, dim via other length)
Napi::Value ActivationValue(const Napi::CallbackInfo& info) {
  const char* fn = "activation";
  ExpectArgs(info, 5, fn);
  const int64_t kind = CountArg(info, 0, fn, "kind");
  const int64_t n = CountArg(info, 3, fn, "n");
  if (kind > 3) ThrowRange(info.Env(), "activation: kind must be 0 (GELU), 1 (SiLU), 2 (SwiGLU) or 3 (GLU)");
  if (kind == 3) {
    const int64_t dim = CountArg(info, 4, fn, "dim");
    auto x = F32Arg(info, 1, fn, "x", Mul(info, fn, {n, 2, dim}));
    auto y = F32Arg(info, 2, fn, "y", Mul(info, fn, {n, dim}));
    voxslab::Glu(x.data, y.data, n, dim);
    return info.Env().Undefined();
  }
  auto x = F32Arg(info, 1, fn, "x", static_cast<size_t>(n));
  auto y = F32Arg(info, 2, fn, "y", static_cast<size_t>(n));
  if (kind == 0) voxslab::GeluExact(x.data, y.data, n);
  else if (kind == 1) voxslab::Silu(x.data, y.data, n);
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
  if (!info[7].IsBoolean()) ThrowType(info.Env(), "rope: adjacent must be a boolean");
  auto x = F32Arg(info, 0, fn, "x", Mul(info, fn, {rows, heads, hd}));
  const size_t table = Mul(info, fn, {(pos0 + rows), (hd / 2)});
  auto c = F32Arg(info, 1, fn, "cos", table);
  auto s = F32Arg(info, 2, fn, "sin", table);
  voxslab::Rope(x.data, c.data, s.data, rows, heads, hd, pos0, info[7].As<Napi::Boolean>().Value());
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
  const int64_t mode = CountArg(info, 16, fn, "mode");
  a.scale = static_cast<float>(NumberArg(info, 17, fn, "scale"));
  a.tq = CountArg(info, 18, fn, "tq");
  a.tk = CountArg(info, 19, fn, "tk");
  a.mode = static_cast<int>(mode);
  if (mode > 2) ThrowRange(info.Env(), "attention: mode must be 0 (full), 1 (causal) or 2 (sliding)");
  if (a.Hq == 0 || a.Hkv == 0 || a.Hq % a.Hkv != 0) ThrowRange(info.Env(), "attention: Hkv must divide Hq");
  if (a.hd == 0 || a.tq == 0 || a.tk == 0) ThrowRange(info.Env(), "attention: hd and tile sizes must be positive");
  if (mode == 2 && a.window == 0) ThrowRange(info.Env(), "attention: a sliding window must be positive");
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
    if (mode != 0 || a.Tq != a.Tk || a.qpos0 != a.kpos0) ThrowRange(info.Env(), "attention: relative positions need full context and Tq = Tk at the same positions");
    p = F32Arg(info, 4, fn, "p", Mul(info, fn, {2 * a.Tk - 1, a.Hq, a.hd})).data;
    u = F32Arg(info, 5, fn, "u", Mul(info, fn, {a.Hq, a.hd})).data;
    vb = F32Arg(info, 6, fn, "vb", Mul(info, fn, {a.Hq, a.hd})).data;
  }
  auto scratch = F32Arg(info, 7, fn, "scratch", static_cast<size_t>(voxslab::AttentionScratchFloats(a.tq, a.tk, a.hd, a.Hq / a.Hkv)));
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
  const int64_t mode = CountArg(info, 0, fn, "mode");
  const int64_t T = CountArg(info, 5, fn, "T");
  const int64_t C = CountArg(info, 6, fn, "C");
  const int64_t k = CountArg(info, 7, fn, "k");
  if (mode > 1 || k == 0 || C == 0) ThrowRange(info.Env(), "conv1d: mode must be 0 (causal) or 1 (same), k and C positive");
  auto x = F32Arg(info, 1, fn, "x", Mul(info, fn, {T, C}));
  auto w = F32Arg(info, 2, fn, "w", Mul(info, fn, {C, k}));
  if (mode == 0) {
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
  if (!info[8].IsBoolean() || !info[14].IsBoolean()) ThrowType(info.Env(), "conv2dS2: depthwise and relu must be booleans");
  const bool dw = info[8].As<Napi::Boolean>().Value();
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
  voxslab::Conv2dS2(in.data, Cin, inRow0, inRows, inTotal, inCols, w.data, bias, dw, out.data, Cout, outRow0, outRows, outCols,
                    info[14].As<Napi::Boolean>().Value());
  return info.Env().Undefined();
}

// pointwise(in, w, bias | null, out, Cin, Cout, P, relu)
Napi::Value PointwiseValue(const Napi::CallbackInfo& info) {
  const char* fn = "pointwise";
  ExpectArgs(info, 8, fn);
  const int64_t Cin = CountArg(info, 4, fn, "Cin");
  const int64_t Cout = CountArg(info, 5, fn, "Cout");
  const int64_t P = CountArg(info, 6, fn, "P");
  if (!info[7].IsBoolean()) ThrowType(info.Env(), "pointwise: relu must be a boolean");
  auto in = F32Arg(info, 0, fn, "in", Mul(info, fn, {Cin, P}));
  auto w = F32Arg(info, 1, fn, "w", Mul(info, fn, {Cout, Cin}));
  const float* bias = info[2].IsNull() ? nullptr : F32Arg(info, 2, fn, "bias", static_cast<size_t>(Cout)).data;
  auto out = F32Arg(info, 3, fn, "out", Mul(info, fn, {Cout, P}));
  if (Overlap(out, in)) ThrowRange(info.Env(), "pointwise: out must not overlap in");
  voxslab::Pointwise(in.data, w.data, bias, out.data, Cin, Cout, P, info[7].As<Napi::Boolean>().Value());
  return info.Env().Undefined();
}

Napi::Value FmaProbeValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "fmaProbe");
  return Napi::Number::New(info.Env(), voxslab::FmaProbe(CountArg(info, 0, "fmaProbe", "iterations")));
}

Napi::Value ReadProbeValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "readProbe");
  auto x = TypedArg<float>(info, 0, napi_float32_array, "readProbe", "x");
  return Napi::Number::New(info.Env(), voxslab::ReadProbe(x.data, static_cast<int64_t>(x.length)));
}

Napi::Value FmaLanesValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 0, "fmaLanes");
  return Napi::Number::New(info.Env(), voxslab::FmaLanes());
}

Napi::Value KernelIsaValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 0, "kernelIsa");
  return Napi::String::New(info.Env(), voxslab::KernelIsa());
}

Napi::Value DotPathValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 0, "kernelPath");
  return Napi::String::New(info.Env(), voxslab::DotPath());
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
  const int64_t type = CountArg(info, 1, fn, "type");
  if (type > 2) ThrowRange(info.Env(), "firstNonFinite: type must be 0 (f32), 1 (f16) or 2 (bf16)");
  const int64_t size = type == 0 ? 4 : 2;
  const int64_t r = voxslab::FirstNonFinite(b.data, static_cast<int64_t>(b.length) / size, static_cast<int>(type));
  return Napi::Number::New(info.Env(), static_cast<double>(r));
}

Napi::Value QuietAlsaValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 0, "quietAlsa");
  return Napi::Boolean::New(info.Env(), voxslab::QuietAlsaErrors());
}

Napi::Value ApmAvailableValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 0, "apmAvailable");
  return Napi::Boolean::New(info.Env(), voxslab::ApmAvailable());
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
  exports.Set("resampleRun", Napi::Function::New(env, ResampleRunValue, "resampleRun"));
  exports.Set("fft", Napi::Function::New(env, FftValue, "fft"));
  exports.Set("rfft", Napi::Function::New(env, RfftValue, "rfft"));
  exports.Set("gemv", Napi::Function::New(env, GemvValue, "gemv"));
  exports.Set("gemm", Napi::Function::New(env, GemmValue, "gemm"));
  exports.Set("gemvInt", Napi::Function::New(env, GemvIntValue, "gemvInt"));
  exports.Set("gemvRows", Napi::Function::New(env, GemvRowsValue, "gemvRows"));
  exports.Set("setComputeThreads", Napi::Function::New(env, SetComputeThreadsValue, "setComputeThreads"));
  exports.Set("computeThreads", Napi::Function::New(env, ComputeThreadsValue, "computeThreads"));
  exports.Set("norm", Napi::Function::New(env, NormValue, "norm"));
  exports.Set("activation", Napi::Function::New(env, ActivationValue, "activation"));
  exports.Set("rope", Napi::Function::New(env, RopeValue, "rope"));
  exports.Set("attention", Napi::Function::New(env, AttentionValue, "attention"));
  exports.Set("conv1d", Napi::Function::New(env, Conv1dValue, "conv1d"));
  exports.Set("conv2dS2", Napi::Function::New(env, Conv2dValue, "conv2dS2"));
  exports.Set("pointwise", Napi::Function::New(env, PointwiseValue, "pointwise"));
  exports.Set("fmaProbe", Napi::Function::New(env, FmaProbeValue, "fmaProbe"));
  exports.Set("readProbe", Napi::Function::New(env, ReadProbeValue, "readProbe"));
  exports.Set("fmaLanes", Napi::Function::New(env, FmaLanesValue, "fmaLanes"));
  exports.Set("kernelIsa", Napi::Function::New(env, KernelIsaValue, "kernelIsa"));
  exports.Set("kernelPath", Napi::Function::New(env, DotPathValue, "kernelPath"));
  exports.Set("pinThread", Napi::Function::New(env, PinThread, "pinThread"));
  exports.Set("allowedCpus", Napi::Function::New(env, AllowedCpus, "allowedCpus"));
  exports.Set("currentCpu", Napi::Function::New(env, CurrentCpu, "currentCpu"));
  exports.Set("clockInto", Napi::Function::New(env, ClockInto, "clockInto"));
  exports.Set("copyF32", Napi::Function::New(env, CopyF32Value, "copyF32"));
  exports.Set("affinitySupported", Napi::Function::New(env, AffinitySupported, "affinitySupported"));
  exports.Set("configuredCpus", Napi::Function::New(env, ConfiguredCpus, "configuredCpus"));
  exports.Set("pageSize", Napi::Function::New(env, PageSize, "pageSize"));
  exports.Set("residentBytes", Napi::Function::New(env, ResidentBytes, "residentBytes"));
  exports.Set("lockRange", Napi::Function::New(env, LockRange, "lockRange"));
  exports.Set("unlockRange", Napi::Function::New(env, UnlockRange, "unlockRange"));
  exports.Set("firstNonFinite", Napi::Function::New(env, FirstNonFiniteValue, "firstNonFinite"));
  exports.Set("quietAlsa", Napi::Function::New(env, QuietAlsaValue, "quietAlsa"));
  exports.Set("apmAvailable", Napi::Function::New(env, ApmAvailableValue, "apmAvailable"));
  exports.Set("apmCreate", Napi::Function::New(env, ApmCreateValue, "apmCreate"));
  exports.Set("apmDestroy", Napi::Function::New(env, ApmDestroyValue, "apmDestroy"));
  exports.Set("apmProcess", Napi::Function::New(env, ApmProcessValue, "apmProcess"));
  exports.Set("cpuFeatures", Napi::Function::New(env, CpuFeaturesValue, "cpuFeatures"));
  return exports;
}

}  // namespace

NODE_API_MODULE(voxslab_native, Init)
