// Bindings of the compute kernels (kernels.h) and their probes.
#include "napi_args.h"

#include "cpu.h"
#include "dsp.h"

namespace voxslab::napi {
namespace {

// computeScope(on): the calling thread enters or leaves a compute section (pool.cc).
Napi::Value ComputeScopeValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "computeScope");
  voxslab::ComputeScope(BoolArg(info, 0, "computeScope", "on"));
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

Napi::Value Int8ProbeValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "int8Probe");
  return Napi::Number::New(info.Env(), voxslab::Int8Probe(CountArg(info, 0, "int8Probe", "iterations")));
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

}  // namespace

void BindKernels(Napi::Env env, Napi::Object exports) {
  Export<GemvValue>(env, exports, "gemv");
  Export<GemmValue>(env, exports, "gemm");
  Export<GemvIntValue>(env, exports, "gemvInt");
  Export<GemvIntManyValue>(env, exports, "gemvIntMany");
  Export<RowsValue<false>>(env, exports, "gemvRows");
  Export<RowsValue<true>>(env, exports, "gemmInt");
  Export<SetComputeThreadsValue>(env, exports, "setComputeThreads");
  Export<NoArgs<voxslab::ComputeThreads>>(env, exports, "computeThreads");
  Export<NoArgs<voxslab::ComputeNarrowed>>(env, exports, "computeNarrowed");
  Export<ComputeScopeValue>(env, exports, "computeScope");
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
  Export<NoArgs<voxslab::FmaLanes>>(env, exports, "fmaLanes");
  Export<Int8ProbeValue>(env, exports, "int8Probe");
  Export<NoArgs<voxslab::Int8Macs>>(env, exports, "int8Macs");
  Export<NoArgs<voxslab::KernelIsa>>(env, exports, "kernelIsa");
  Export<NoArgs<voxslab::DotPath>>(env, exports, "kernelPath");
  Export<NoArgs<voxslab::KernelsRequestError>>(env, exports, "kernelsRequestError");
  Export<NoArgs<voxslab::KernelLevels>>(env, exports, "kernelLevels");
  Export<GemvScratchBytesValue>(env, exports, "gemvScratchBytes");
  Export<GemmIntScratchBytesValue>(env, exports, "gemmIntScratchBytes");
  Export<AttentionScratchFloatsValue>(env, exports, "attentionScratchFloats");
  exports.Set("gemmPackFloats", Napi::Number::New(env, static_cast<double>(voxslab::kGemmPackFloats)));
}

}  // namespace voxslab::napi
