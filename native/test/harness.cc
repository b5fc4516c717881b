// The kernel families' cases as a program that needs no Node: built against the addon's kernel
// sources, run once per instruction-set level (VOXSLAB_KERNELS chooses it, once per process), on
// x86-64 natively and on AArch64 under qemu-aarch64. Each family is checked against a reference
// written here: bit for bit where the addon's tests demand bits (activation quantization, the
// integer GEMV's lane order on every AVX2 and AArch64 level, the integer GEMM's fused steps, the
// DSP dot product's order on vector levels), within a stated bound elsewhere. Prints one line per
// family with a digest of its outputs, then `N passed, N failed`; exits 1 on any failure.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../src/cpu.h"
#include "../src/dsp.h"
#include "../src/gemv_isa.h"
#include "../src/kernels.h"

using namespace voxslab;

namespace {

int passed = 0, failed = 0;

void Check(bool ok, const char* family, const char* what) {
  if (ok) ++passed;
  else ++failed, std::printf("not ok: %s: %s\n", family, what);
}

struct Rng {
  uint64_t s;
  uint64_t Next() {
    s += 0x9e3779b97f4a7c15ull;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double Unit() { return static_cast<double>(Next() >> 11) / 9007199254740992.0; }  // [0, 1)
  float Sym(float scale = 1.0f) { return static_cast<float>((Unit() * 2 - 1) * scale); }
  int Int(int lo, int hi) { return lo + static_cast<int>(Next() % static_cast<uint64_t>(hi - lo + 1)); }
};

// FNV-1a over the bytes of every output a family produced.
struct Digest {
  uint64_t h = 0xcbf29ce484222325ull;
  void Add(const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 0x100000001b3ull;
  }
};

bool SameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// A finite f16 of magnitude in [2^-6, 2^-1) with a random sign.
uint16_t RandomHalf(Rng& r) {
  return static_cast<uint16_t>(((r.Next() & 1) << 15) | (static_cast<uint64_t>(r.Int(9, 13)) << 10) | (r.Next() & 0x3ff));
}

struct Quant {
  bool q4;
  int group;
  int64_t M, K;
  std::vector<uint8_t> data;
  std::vector<uint16_t> scales, biases;
  WeightRef Ref() const { return {q4 ? WeightType::kQ4 : WeightType::kQ8, data.data(), scales.data(), biases.data(), group}; }
  int Q(int64_t m, int64_t k) const {
    const int64_t i = m * K + k;
    return q4 ? (data[i >> 1] >> ((i & 1) * 4)) & 15 : data[i];
  }
};

Quant RandomQuant(Rng& r, bool q4, int group, int64_t M, int64_t K) {
  Quant w{q4, group, M, K, std::vector<uint8_t>(q4 ? M * K / 2 : M * K), std::vector<uint16_t>(M * K / group),
          std::vector<uint16_t>(M * K / group)};
  for (auto& b : w.data) b = static_cast<uint8_t>(r.Next());
  for (auto& s : w.scales) s = RandomHalf(r) & 0x7fff;
  for (auto& b : w.biases) b = RandomHalf(r);
  return w;
}

// The scalar definition of the activation side: sums, scales and int8 values in element order.
struct Acts {
  std::vector<float> xsum, xs;
  std::vector<int8_t> xq;  // element order
};

Acts ScalarActs(const float* x, int64_t K, int group) {
  Acts a{std::vector<float>(K / group), std::vector<float>(K / group), std::vector<int8_t>(K)};
  gemv::QuantizeScalar(x, K, group, a.xq.data(), a.xs.data(), a.xsum.data());
  return a;
}

// The exact group dot product D_g of weight row m with the activations.
int64_t GroupDot(const Quant& w, const Acts& a, int64_t m, int64_t g) {
  int64_t d = 0;
  for (int64_t k = g * w.group; k < (g + 1) * w.group; ++k) d += w.Q(m, k) * a.xq[k];
  return d;
}

// The AVX2 integer GEMV's order (every AArch64 level's): eight lanes per 32-byte block, each four
// consecutive products exactly, scaled per lane and added in block order; then Hsum's tree and
// BiasDot (eight lanes of fused products, then the tail in order).
float LaneOrderRow(const Quant& w, const Acts& a, int64_t m) {
  const int64_t groups = w.K / w.group, per = w.q4 ? 64 : 32;
  float acc[8] = {};
  for (int64_t b = 0; b < w.K / per; ++b) {
    for (int l = 0; l < 8; ++l) {
      int64_t lane = 0;
      for (int i = 4 * l; i < 4 * l + 4; ++i) {  // byte i of the block
        if (w.q4) lane += w.Q(m, b * 64 + 2 * i) * a.xq[b * 64 + 2 * i] + w.Q(m, b * 64 + 2 * i + 1) * a.xq[b * 64 + 2 * i + 1];
        else lane += w.Q(m, b * 32 + i) * a.xq[b * 32 + i];
      }
      const int64_t g = w.q4 && w.group == 32 ? 2 * b + l / 4 : b * per / w.group;
      const float scale = F16(w.scales[m * groups + g]) * a.xs[g];
      acc[l] = std::fma(static_cast<float>(lane), scale, acc[l]);
    }
  }
  const float dot = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  float bacc[8] = {};
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8)
    for (int l = 0; l < 8; ++l) bacc[l] = std::fma(F16(w.biases[m * groups + g + l]), a.xsum[g + l], bacc[l]);
  float t = 0;
  for (; g < groups; ++g) t = t + F16(w.biases[m * groups + g]) * a.xsum[g];
  return dot + ((((bacc[0] + bacc[1]) + (bacc[2] + bacc[3])) + ((bacc[4] + bacc[5]) + (bacc[6] + bacc[7]))) + t);
}

// Levels whose integer GEMV keeps the AVX2 lane order.
bool LaneOrderLevel() {
  const Isa isa = ChosenIsa();
  return (isa == Isa::kAvx2 || isa == Isa::kNeon || isa == Isa::kDotprod || isa == Isa::kI8mm);
}

void Quantization() {
  const char* f = "activation quantization";
  Rng r{33};
  Digest d;
  int mismatches = 0, groupsChecked = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int group = trial % 2 == 0 ? 32 : 64;
    const bool q4 = trial % 3 != 0;
    const int64_t groups = r.Int(1, 40), K = groups * group;
    if (q4 && K % 64 != 0) continue;
    std::vector<float> x(K);
    for (auto& v : x) v = r.Sym() * std::pow(10.0f, static_cast<float>(r.Int(-3, 3)));
    if (trial % 4 == 1) x[r.Int(0, K - 1)] = NAN;
    if (trial % 5 == 2) x[r.Int(0, K - 1)] = trial % 2 ? INFINITY : -INFINITY;
    if (trial % 3 == 1) std::fill(x.begin(), x.begin() + group, 0.0f);
    x[r.Int(0, K - 1)] = -0.0f;
    std::vector<int8_t> xq(K), want(K);
    std::vector<float> xs(groups), xsum(groups), ws(groups), wsum(groups);
    QuantizeActivations(x.data(), K, group, q4, xq.data(), xs.data(), xsum.data());
    gemv::QuantizeScalar(x.data(), K, group, want.data(), ws.data(), wsum.data());
    if (q4) gemv::SplitEvensOdds(want.data(), K);
    for (int64_t g = 0; g < groups; ++g, ++groupsChecked)
      if (!SameBits(xs[g], ws[g]) || !SameBits(xsum[g], wsum[g])) ++mismatches;
    if (std::memcmp(xq.data(), want.data(), K) != 0) ++mismatches;
    d.Add(xq.data(), K), d.Add(xs.data(), 4 * groups), d.Add(xsum.data(), 4 * groups);
  }
  Check(mismatches == 0, f, "sums, scales and int8 values as the scalar definition gives them, bit for bit");
  std::printf("%s: %d groups, digest %016llx\n", f, groupsChecked, static_cast<unsigned long long>(d.h));
}

// GemvInt against the exact arithmetic (bound) and the lane order (bits); GemvRows and the
// many-matrix calls against GemvInt (bits).
void IntGemv() {
  const char* f = "integer GEMV";
  Rng r{21};
  Digest d;
  bool exact = true, lanes = true, rows = true, many = true;
  int checked = 0;
  struct Shape {
    bool q4;
    int group;
    int64_t M, K;
  };
  std::vector<Shape> shapes;
  for (int trial = 0; trial < 24; ++trial)
    shapes.push_back({trial % 3 != 0, trial % 2 == 0 ? 32 : 64, r.Int(1, 40), 64 * static_cast<int64_t>(r.Int(1, 9))});
  for (int64_t K : {448, 512, 1024, 1088, 2048, 2112, 16384, 16448, 49216})
    for (int group : {32, 64})
      for (bool q4 : {false, true})
        if (K % group == 0 && K % 64 == 0) shapes.push_back({q4, group, K <= 1088 ? 7 : 6, K});
  for (const Shape& s : shapes) {
    const Quant w = RandomQuant(r, s.q4, s.group, s.M, s.K);
    const int64_t groups = s.K / s.group;
    std::vector<float> x(s.K), y(s.M);
    for (auto& v : x) v = r.Sym(r.Int(0, 3) == 0 ? 30.0f : 1.0f);
    std::vector<uint8_t> scratch(GemvIntScratchBytes(s.K, s.group));
    GemvInt(w.Ref().type, w.data.data(), w.scales.data(), w.biases.data(), s.group, x.data(), y.data(), s.M, s.K, scratch.data());
    d.Add(y.data(), 4 * s.M);
    const Acts a = ScalarActs(x.data(), s.K, s.group);
    for (int64_t m = 0; m < s.M; ++m, ++checked) {
      double ref = 0, mag = 0;
      for (int64_t g = 0; g < groups; ++g) {
        const double term = static_cast<double>(F16(w.scales[m * groups + g]) * a.xs[g]) * static_cast<double>(GroupDot(w, a, m, g)) +
                            static_cast<double>(F16(w.biases[m * groups + g])) * a.xsum[g];
        ref += term, mag += std::fabs(term);
      }
      if (std::fabs(y[m] - ref) > 1e-5 * mag + 1e-6) exact = false;
      if (LaneOrderLevel() && !SameBits(y[m], LaneOrderRow(w, a, m))) lanes = false;
    }
    // Rows: one to eight inputs, each row's bits a single call's.
    const int64_t n = 1 + checked % 8;
    std::vector<float> X(n * s.K), Y(n * s.M), one(s.M);
    for (auto& v : X) v = r.Sym();
    std::vector<uint8_t> rs(GemvRowsScratchBytes(n, s.K, s.group));
    GemvRows(w.Ref().type, w.data.data(), w.scales.data(), w.biases.data(), s.group, X.data(), Y.data(), n, s.M, s.K, rs.data());
    for (int64_t t = 0; t < n; ++t) {
      GemvInt(w.Ref().type, w.data.data(), w.scales.data(), w.biases.data(), s.group, X.data() + t * s.K, one.data(), s.M, s.K, scratch.data());
      if (std::memcmp(one.data(), Y.data() + t * s.M, 4 * s.M) != 0) rows = false;
    }
    // Two matrices reading one input: each row GemvInt's bits.
    const Quant w2 = RandomQuant(r, s.q4, s.group, 9, s.K);
    const WeightRef refs[2] = {w.Ref(), w2.Ref()};
    std::vector<float> y1(s.M), y2(9), alone(9);
    float* ys[2] = {y1.data(), y2.data()};
    const int64_t Ms[2] = {s.M, 9};
    GemvIntMany(refs, ys, Ms, 2, x.data(), s.K, scratch.data());
    GemvInt(w2.Ref().type, w2.data.data(), w2.scales.data(), w2.biases.data(), s.group, x.data(), alone.data(), 9, s.K, scratch.data());
    if (std::memcmp(y1.data(), y.data(), 4 * s.M) != 0 || std::memcmp(y2.data(), alone.data(), 4 * 9) != 0) many = false;
  }
  Check(exact, f, "equals Σ s·xs·(Σ q·xq) + Σ b·Σx within 1e-5 of the terms' magnitude");
  if (LaneOrderLevel()) Check(lanes, f, "the AVX2 lane order's bits");
  Check(rows, f, "GemvRows gives each row GemvInt's bits");
  Check(many, f, "GemvIntMany gives each matrix GemvInt's bits");
  std::printf("%s: %d rows, digest %016llx\n", f, checked, static_cast<unsigned long long>(d.h));
}

// GemmInt against its fused f32 steps (bits, on every vector level), the exact arithmetic
// (bound), each input alone, and two threads.
void IntGemm() {
  const char* f = "integer GEMM";
  Rng r{34};
  Digest d;
  bool exact = true, fused = true, alone = true, threads = true;
  int checked = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const int group = trial % 2 == 0 ? 32 : 64;
    const bool q4 = trial % 3 != 0;
    const int64_t M = r.Int(1, 45), K = 64 * r.Int(1, 9);
    const int64_t n = std::vector<int64_t>{1, 3, 16, 17, 33, 70}[trial % 6];
    const Quant w = RandomQuant(r, q4, group, M, K);
    const int64_t groups = K / group;
    std::vector<float> X(n * K), Y(n * M);
    for (auto& v : X) v = r.Sym(trial % 4 == 0 ? 30.0f : 1.0f);
    std::vector<uint8_t> scratch(GemmIntScratchBytes(n, K, group));
    const WeightType type = w.Ref().type;
    GemmInt(type, w.data.data(), w.scales.data(), w.biases.data(), group, X.data(), Y.data(), n, M, K, scratch.data());
    d.Add(Y.data(), 4 * n * M);
    for (int64_t t = 0; t < n; ++t) {
      const Acts a = ScalarActs(X.data() + t * K, K, group);
      for (int64_t m = 0; m < M; ++m, ++checked) {
        double ref = 0, mag = 0;
        float y = 0;
        for (int64_t g = 0; g < groups; ++g) {
          const float sx = F16(w.scales[m * groups + g]) * a.xs[g];
          const float b = F16(w.biases[m * groups + g]);
          const int64_t D = GroupDot(w, a, m, g);
          ref += static_cast<double>(sx) * D + static_cast<double>(b) * a.xsum[g];
          mag += std::fabs(static_cast<double>(sx) * D) + std::fabs(static_cast<double>(b) * a.xsum[g]);
          y = std::fma(b, a.xsum[g], std::fma(static_cast<float>(D), sx, y));
        }
        if (std::fabs(Y[t * M + m] - ref) > 1e-5 * mag + 1e-6) exact = false;
        if (!SameBits(Y[t * M + m], y)) fused = false;
      }
      std::vector<float> one(M);
      std::vector<uint8_t> s1(GemmIntScratchBytes(1, K, group));
      GemmInt(type, w.data.data(), w.scales.data(), w.biases.data(), group, X.data() + t * K, one.data(), 1, M, K, s1.data());
      if (std::memcmp(one.data(), Y.data() + t * M, 4 * M) != 0) alone = false;
    }
    SetComputeThreads(2);
    std::vector<float> Y2(n * M);
    GemmInt(type, w.data.data(), w.scales.data(), w.biases.data(), group, X.data(), Y2.data(), n, M, K, scratch.data());
    SetComputeThreads(1);
    if (Y2 != Y) threads = false;
  }
  Check(exact, f, "equals Σ_g (D_g·s·xs + b·Σx) within 1e-5 of the terms' magnitude");
  if (ChosenIsa() != Isa::kScalar) Check(fused, f, "the bits of the fused f32 steps per output");
  Check(alone, f, "each input alone gives its bits");
  Check(threads, f, "two threads give one thread's bits");
  std::printf("%s: %d outputs, digest %016llx\n", f, checked, static_cast<unsigned long long>(d.h));
}

// A float-encoded weight array of M×K (f32, f16, bf16) with random values in ±1.
std::vector<uint8_t> RandomFloatWeights(Rng& r, WeightType type, int64_t count) {
  std::vector<uint8_t> out(count * (type == WeightType::kF32 ? 4 : 2));
  for (int64_t i = 0; i < count; ++i) {
    const float v = r.Sym();
    if (type == WeightType::kF32) std::memcpy(out.data() + 4 * i, &v, 4);
    else {
      uint32_t u;
      std::memcpy(&u, &v, 4);
      uint16_t h = type == WeightType::kBF16 ? static_cast<uint16_t>(u >> 16) : RandomHalf(r);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

// Gemv and Gemm for every weight encoding against the float64 product of the decoded weights.
void FloatGemvGemm() {
  const char* f = "float GEMV and GEMM";
  Rng r{7};
  Digest d;
  bool gemv = true, gemm = true;
  for (int trial = 0; trial < 30; ++trial) {
    const auto type = static_cast<WeightType>(trial % 5);
    const int group = trial % 2 == 0 ? 32 : 64;
    const int64_t M = r.Int(1, 37), K = Quantized(type) ? group * r.Int(1, 6) : r.Int(1, 300), T = r.Int(1, 13);
    Quant q = RandomQuant(r, type == WeightType::kQ4, group, M, K);
    std::vector<uint8_t> fw = Quantized(type) ? std::vector<uint8_t>() : RandomFloatWeights(r, type, M * K);
    const WeightRef W{type, Quantized(type) ? static_cast<const void*>(q.data.data()) : fw.data(), q.scales.data(), q.biases.data(), group};
    std::vector<float> A(T * K), bias(M), C(T * M), y(M), xsum(K / group + 1), pack(kGemmPackFloats);
    for (auto& v : A) v = r.Sym();
    for (auto& v : bias) v = r.Sym();
    Gemv(type, W.data, W.scales, W.biases, group, A.data(), y.data(), M, K, xsum.data());
    Gemm(A.data(), W, bias.data(), C.data(), T, M, K, pack.data());
    d.Add(y.data(), 4 * M), d.Add(C.data(), 4 * T * M);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t m = 0; m < M; ++m) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = static_cast<double>(WeightAt(W, m, k, K)) * A[t * K + k];
          ref += p, mag += std::fabs(p);
        }
        if (t == 0 && std::fabs(y[m] - ref) > 1e-5 * mag + 1e-6) gemv = false;
        if (std::fabs(C[t * M + m] - (ref + bias[m])) > 1e-5 * (mag + std::fabs(bias[m])) + 1e-6) gemm = false;
      }
  }
  Check(gemv, f, "GEMV within 1e-5 of Σ|w·x| of the float64 product, every encoding");
  Check(gemm, f, "GEMM within 1e-5 of Σ|w·x| of the float64 product plus bias, every encoding");
  std::printf("%s: digest %016llx\n", f, static_cast<unsigned long long>(d.h));
}

uint16_t ToHalf(float v) {  // for values well inside the normal range
  uint32_t u;
  std::memcpy(&u, &v, 4);
  const uint32_t sign = (u >> 16) & 0x8000, mant = u & 0x7fffff;
  const int exp = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  if (exp <= 0) return static_cast<uint16_t>(sign);
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  if ((mant & 0x1fff) > 0x1000 || ((mant & 0x1fff) == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

// Attention under every mask, f32 and f16 caches, with and without relative positions, against
// a float64 softmax over the visible keys.
void AttentionFamily() {
  const char* f = "attention";
  Rng r{11};
  Digest d;
  bool ok = true;
  int cases = 0;
  for (int trial = 0; trial < 36; ++trial, ++cases) {
    const bool rel = trial % 6 == 5;
    const int64_t hd = std::vector<int64_t>{4, 8, 16, 32, 64, 24}[trial % 6];
    const int64_t Hkv = 1 + trial % 2, Hq = Hkv * (1 + trial % 3);
    const int64_t Tk = r.Int(1, 90), Tq = rel ? Tk : r.Int(1, 20);
    const auto mask = rel ? AttentionMask::kFull : static_cast<AttentionMask>(trial % 3);
    const bool f16 = trial % 4 >= 2;
    const int64_t kpos0 = 0, qpos0 = rel ? 0 : std::max<int64_t>(0, Tk - Tq), window = 8;
    AttentionParams a{Tq, Tk, Hq, Hkv, hd, qpos0, kpos0, window, mask, 1.0f / std::sqrt(static_cast<float>(hd)), 8, 32, f16};
    std::vector<float> q(Tq * Hq * hd), k(Tk * Hkv * hd), v(Tk * Hkv * hd), out(Tq * Hq * hd);
    std::vector<float> p(rel ? (2 * Tk - 1) * Hq * hd : 0), u(rel ? Hq * hd : 0), vb(rel ? Hq * hd : 0);
    for (auto* vec : {&q, &k, &v, &p, &u, &vb})
      for (auto& x : *vec) x = r.Sym();
    std::vector<uint16_t> kh(k.size()), vh(v.size());
    if (f16)
      for (size_t i = 0; i < k.size(); ++i) kh[i] = ToHalf(k[i]), vh[i] = ToHalf(v[i]), k[i] = F16(kh[i]), v[i] = F16(vh[i]);
    std::vector<float> scratch(AttentionScratchFloats(a.tq, a.tk, hd, Hq / Hkv, Hkv));
    Attention(a, q.data(), f16 ? static_cast<const void*>(kh.data()) : k.data(), f16 ? static_cast<const void*>(vh.data()) : v.data(),
              out.data(), rel ? p.data() : nullptr, rel ? u.data() : nullptr, rel ? vb.data() : nullptr, scratch.data());
    d.Add(out.data(), 4 * out.size());
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t kvh = h / (Hq / Hkv), qp = qpos0 + i;
        std::vector<double> s(Tk, -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < Tk; ++j) {
          const int64_t kp = kpos0 + j;
          if ((mask == AttentionMask::kCausal && kp > qp) || (mask == AttentionMask::kSliding && (kp > qp || kp <= qp - window))) continue;
          double sc = 0;
          for (int64_t e = 0; e < hd; ++e) {
            const double qe = q[(i * Hq + h) * hd + e];
            sc += (qe + (rel ? u[h * hd + e] : 0)) * k[(j * Hkv + kvh) * hd + e];
            if (rel) sc += (qe + vb[h * hd + e]) * p[((Tk - 1 - (i - j)) * Hq + h) * hd + e];
          }
          s[j] = sc * a.scale, mx = std::max(mx, s[j]);
        }
        if (mx == -INFINITY) continue;
        double sum = 0;
        for (auto& x : s) sum += (x = std::exp(x - mx));
        for (int64_t e = 0; e < hd; ++e) {
          double o = 0;
          for (int64_t j = 0; j < Tk; ++j) o += s[j] / sum * v[(j * Hkv + kvh) * hd + e];
          if (std::fabs(out[(i * Hq + h) * hd + e] - o) > 2e-5) ok = false;
        }
      }
  }
  Check(ok, f, "within 2e-5 of the float64 softmax, every mask, f32 and f16 caches, relative positions");
  std::printf("%s: %d cases, digest %016llx\n", f, cases, static_cast<unsigned long long>(d.h));
}

// The DSP dot product: the fixed four-accumulator order on the scalar level, the AVX2 order
// (four lanes over each eight, then the pairs) on vector levels, bit for bit; the probes within
// their bounds.
void DspAndProbes() {
  const char* f = "DSP dot product and probes";
  Rng r{5};
  Digest d;
  bool dot = true;
  for (int n = 0; n < 300; n += 1 + n / 16) {
    std::vector<double> a(n), b(n);
    for (int i = 0; i < n; ++i) a[i] = r.Unit() * 2 - 1, b[i] = r.Unit() * 2 - 1;
    const double got = DotProduct(a.data(), b.data(), n);
    d.Add(&got, 8);
    double want;
    if (ChosenIsa() == Isa::kScalar) {
      want = DotFixed4(a.data(), b.data(), n);
    } else {
      double l[8] = {};
      int k = 0;
      for (; k + 8 <= n; k += 8)
        for (int j = 0; j < 8; ++j) l[j] = std::fma(a[k + j], b[k + j], l[j]);
      if (k + 4 <= n) {
        for (int j = 0; j < 4; ++j) l[j] = std::fma(a[k + j], b[k + j], l[j]);
        k += 4;
      }
      double tail = 0;
      for (; k < n; ++k) tail = std::fma(a[k], b[k], tail);
      want = (((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]))) + tail;
    }
    if (std::memcmp(&got, &want, 8) != 0) dot = false;
  }
  Check(dot, f, "the dot product's fixed order, bit for bit");
  // FmaProbe: FmaLanes() lanes of twelve chains, each the scalar chain.
  float chains = 0;
  for (int i = 0; i < 12; ++i) {
    float c = 0.001f * static_cast<float>(i);
    for (int it = 0; it < 1000; ++it) c = std::fma(c, 0.999999f, 1e-7f);
    chains += c;
  }
  const float fma = FmaProbe(1000);
  Check(std::fabs(fma - FmaLanes() * chains) <= 1e-5f * std::fabs(FmaLanes() * chains), f, "FmaProbe: its lanes' chains");
  std::vector<float> x(100003);
  double sum = 0, mag = 0;
  for (auto& v : x) sum += (v = r.Sym()), mag += std::fabs(v);
  Check(std::fabs(ReadProbe(x.data(), static_cast<int64_t>(x.size())) - sum) < 1e-5 * mag, f, "ReadProbe: the sum of what it read");
  std::printf("%s: digest %016llx\n", f, static_cast<unsigned long long>(d.h));
}

// The resampler in chunks of any size: every output is DotProduct over its phase and the T
// inputs up to its newest (zeros before the first), bit for bit, whether or not two outputs
// shared a pass.
void ResamplerFamily() {
  const char* f = "resampler";
  Rng r{13};
  Digest d;
  bool same = true;
  int64_t checked = 0;
  for (const auto& lm : {std::pair<int, int>{2, 1}, {3, 1}, {1, 3}, {147, 80}, {160, 147}}) {
    for (const int T : {1, 7, 143}) {
      const int L = lm.first, M = lm.second, c = (L * T) / 2;
      std::vector<double> phases(static_cast<size_t>(L) * T), ring(2 * T), state(kRsSlots);
      for (auto& v : phases) v = r.Unit() * 2 - 1;
      state[kRsUp] = L, state[kRsDown] = M, state[kRsTaps] = T, state[kRsCenter] = c;
      std::vector<float> in(3000), out;
      for (auto& v : in) v = r.Sym();
      for (size_t at = 0; at < in.size();) {
        const int64_t n = std::min<int64_t>(r.Int(1, 300), static_cast<int64_t>(in.size() - at));
        std::vector<float> part(static_cast<size_t>(ResampleReady(state.data(), n)));
        const int64_t got = ResampleRun(phases.data(), ring.data(), state.data(), in.data() + at, n, part.data(), 0);
        out.insert(out.end(), part.begin(), part.begin() + got);
        at += static_cast<size_t>(n);
      }
      std::vector<double> window(T);
      for (size_t o = 0; o < out.size(); ++o) {
        const int64_t t = static_cast<int64_t>(o) * M + c, newest = t / L, p = t % L;
        for (int j = 0; j < T; ++j) {
          const int64_t i = newest - (T - 1) + j;
          window[j] = i >= 0 ? in[static_cast<size_t>(i)] : 0.0;
        }
        const float want = static_cast<float>(DotProduct(phases.data() + p * T, window.data(), T));
        if (!SameBits(out[o], want)) same = false;
        ++checked;
      }
      d.Add(out.data(), 4 * out.size());
    }
  }
  Check(same && checked > 10000, f, "every output is its phase's DotProduct over its window, bit for bit");
  std::printf("%s: %lld outputs, digest %016llx\n", f, static_cast<long long>(checked), static_cast<unsigned long long>(d.h));
}

// The ISTFT's spectrum: the addon's own e^x, cosine and sine against the C library's, and one
// digest on every level and architecture (they are written to give the same bits everywhere).
void PolarFamily() {
  const char* f = "ISTFT spectrum";
  Rng r{9};
  Digest d;
  // Ulps between two finite doubles of the same sign, or 0 for two NaNs.
  const auto ulps = [](double a, double b) -> double {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : 1e300;
    if (a == b) return 0;
    int64_t ia, ib;
    std::memcpy(&ia, &a, 8), std::memcpy(&ib, &b, 8);
    return static_cast<double>(ia > ib ? ia - ib : ib - ia);
  };
  double worst = 0;
  for (const double scale : {1.0, 20.0, 700.0, 2.0e6}) {
    const int64_t bins = 1027;
    std::vector<float> v(2 * bins);
    for (int64_t k = 0; k < bins; ++k) v[k] = r.Sym(static_cast<float>(std::min(scale, 705.0))), v[bins + k] = r.Sym(static_cast<float>(scale));
    // Edges inside vector passes: saturation, subnormal magnitudes, NaN and infinities.
    v[5] = 709.5f, v[6] = -744.0f, v[7] = -760.0f, v[bins + 9] = INFINITY, v[10] = NAN, v[bins + 11] = 3.0e9f;
    std::vector<double> out(2 * bins);
    PolarSpectrum(v.data(), bins, out.data());
    d.Add(out.data(), 8 * out.size());
    for (int64_t k = 0; k < bins; ++k) {
      const double m = v[k], p = v[bins + k];
      if (std::fabs(p) > 1.6e6 || std::isinf(p) || std::isnan(m)) continue;
      const double u = std::max(ulps(out[2 * k], std::exp(m) * std::cos(p)), ulps(out[2 * k + 1], std::exp(m) * std::sin(p)));
      worst = std::max(worst, u);
    }
  }
  Check(worst <= 4, f, "e^m·(cos, sin) p within 4 ulps of the C library's, edges included");
  std::printf("%s: worst %.0f ulps, digest %016llx\n", f, worst, static_cast<unsigned long long>(d.h));
}

}  // namespace

int main() {
  const char* bad = KernelsRequestError();
  if (bad[0] != 0) {
    std::printf("VOXSLAB_KERNELS='%s' names no level of this architecture\n", bad);
    return 2;
  }
  std::printf("level %s (%s)\n", IsaName(ChosenIsa()), Cpu().arch);
  Quantization();
  IntGemv();
  IntGemm();
  FloatGemvGemm();
  AttentionFamily();
  DspAndProbes();
  PolarFamily();
  ResamplerFamily();
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
