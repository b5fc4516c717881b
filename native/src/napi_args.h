// The argument readers and the call wrapper every binding file uses: each argument is checked
// (type, range, size) before use, and a failure is a JS error carrying the catalogue's code.
// No C++ exception crosses into Node (Guarded). Internal to the addon.
#pragma once

#include <napi.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>
#include <system_error>

#include "kernels.h"
#include "simd.h"

namespace voxslab::napi {

// Argument errors carry the catalogue's code (ERR_VOXSLAB_ARGUMENT), so callers can tell them
// from faults without parsing messages.
template <typename E>
E Coded(E e, const char* code, int exit_code) {
  e.Set("code", Napi::String::New(e.Env(), code));
  e.Set("exitCode", Napi::Number::New(e.Env(), exit_code));
  return e;
}

[[noreturn]] inline void ThrowType(const Napi::Env& env, const std::string& message) {
  throw Coded(Napi::TypeError::New(env, message), "ERR_VOXSLAB_ARGUMENT", 2);
}

[[noreturn]] inline void ThrowRange(const Napi::Env& env, const std::string& message) {
  throw Coded(Napi::RangeError::New(env, message), "ERR_VOXSLAB_ARGUMENT", 2);
}

inline void ExpectArgs(const Napi::CallbackInfo& info, size_t n, const char* fn) {
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

inline Bytes TypedArrayBytes(const Napi::CallbackInfo& info, size_t index, const char* fn) {
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

inline std::string ErrnoText(int err) {
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

inline double NumberArg(const Napi::CallbackInfo& info, size_t index, const char* fn, const char* what) {
  if (!info[index].IsNumber()) ThrowType(info.Env(), std::string(fn) + ": " + what + " must be a number");
  return info[index].As<Napi::Number>().DoubleValue();
}

inline int64_t CountArg(const Napi::CallbackInfo& info, size_t index, const char* fn, const char* what) {
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
inline size_t Mul(const Napi::CallbackInfo& info, const char* fn, std::initializer_list<int64_t> factors) {
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
inline Napi::Value Js(const Napi::Env& env, bool v) { return Napi::Boolean::New(env, v); }
inline Napi::Value Js(const Napi::Env& env, int v) { return Napi::Number::New(env, v); }
inline Napi::Value Js(const Napi::Env& env, size_t v) { return Napi::Number::New(env, static_cast<double>(v)); }
inline Napi::Value Js(const Napi::Env& env, const char* v) { return Napi::String::New(env, v); }

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

inline Napi::Object Result(const Napi::Env& env, int err) {
  Napi::Object out = Napi::Object::New(env);
  out.Set("ok", Napi::Boolean::New(env, err == 0));
  out.Set("errno", Napi::Number::New(env, err));
  out.Set("message", Napi::String::New(env, err == 0 ? "" : ErrnoText(err)));
  return out;
}

inline bool BoolArg(const Napi::CallbackInfo& info, size_t index, const char* fn, const char* what) {
  if (!info[index].IsBoolean()) ThrowType(info.Env(), std::string(fn) + ": " + what + " must be a boolean");
  return info[index].As<Napi::Boolean>().Value();
}

// A typed array of at least `need` values.
template <typename T>
View<T> SizedArg(const Napi::CallbackInfo& info, size_t i, napi_typedarray_type want, const char* fn, const char* what, size_t need) {
  auto v = TypedArg<T>(info, i, want, fn, what);
  if (v.length < need) ThrowRange(info.Env(), std::string(fn) + ": " + what + " has " + std::to_string(v.length) + " values, needs " + std::to_string(need));
  return v;
}

inline View<float> F32Arg(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* what, size_t need) {
  return SizedArg<float>(info, i, napi_float32_array, fn, what, need);
}

// f16 values (their bits in a Uint16Array).
inline View<uint16_t> HalfArg(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* what, size_t need) {
  return SizedArg<uint16_t>(info, i, napi_uint16_array, fn, what, need);
}

// Each domain's functions on the module's exports (bind_*.cc).
void BindSystem(Napi::Env env, Napi::Object exports);
void BindDsp(Napi::Env env, Napi::Object exports);
void BindAudio(Napi::Env env, Napi::Object exports);
void BindKernels(Napi::Env env, Napi::Object exports);

}  // namespace voxslab::napi
