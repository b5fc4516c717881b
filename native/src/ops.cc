// Row-wise operations of the model's blocks: norms, activations, RoPE, convolutions. Scalar
// code in a fixed order (the compiler vectorises what it can without changing the result); SiLU,
// SwiGLU and GLU also on AVX2 and AVX-512, with the same values.
#include <cmath>
#include <cstdint>

#include "cpu.h"
#include "kernels.h"
#include "pool.h"
#include "simd.h"

namespace voxslab {

namespace {

// y[j] = f32(a / (1 + e^−g)) (· up) for j in [j0, j1): the portable steps, which the vector paths
// match (a is g itself for SiLU and SwiGLU, the other half of the row for GLU).
template <bool Up>
inline void SigmoidMulScalar(const float* a, const float* gate, const float* up, float* y, int64_t j0, int64_t j1) {
  for (int64_t j = j0; j < j1; ++j) {
    const float s = static_cast<float>(a[j] / (1.0 + std::exp(-static_cast<double>(gate[j]))));
    y[j] = Up ? s * up[j] : s;
  }
}

#ifdef VOXSLAB_X86
// GCC 12 reports the intrinsics' own undefined pass-through operands as uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// e^x for eight doubles: x = k·ln2 + r with |r| ≤ ln2/2 (ln2 in two parts), e^r by its Taylor
// series to r^13 (below 1e-17 relative), times 2^k by scalef (which gives inf and 0 past the
// range and keeps NaN). Within a few units in the last place of a double, so the f32 results
// below are those of std::exp but where a double lands within that of an f32 rounding boundary.
constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2Hi = 6.93147180369123816490e-01;
constexpr double kLn2Lo = 1.90821492927058770002e-10;
constexpr double kInvFact[] = {1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
                               1.0 / 40320.0,      1.0 / 5040.0,      1.0 / 720.0,      1.0 / 120.0,     1.0 / 24.0,
                               1.0 / 6.0,          0.5,               1.0,              1.0};

__attribute__((target("avx512f"))) inline __m512d Exp8(__m512d x) {
  const __m512d k = _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kLn2Hi), x);
  r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kLn2Lo), r);
  __m512d p = _mm512_set1_pd(kInvFact[0]);
  for (int i = 1; i < 14; ++i) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(kInvFact[i]));
  return _mm512_scalef_pd(p, k);
}

// y = f32(a / (1 + e^−g)) (· up), eight at a time in double as the scalar loops compute it; a is
// g itself for SiLU and SwiGLU, the other half of the row for GLU.
template <bool Up>
__attribute__((target("avx512f"))) void SigmoidMulAvx512(const float* a, const float* gate, const float* up, float* y, int64_t n) {
  int64_t i = 0;
  const __m512d one = _mm512_set1_pd(1.0);
  for (; i + 8 <= n; i += 8) {
    const __m512d g = _mm512_cvtps_pd(_mm256_loadu_ps(gate + i));
    const __m512d num = a == gate ? g : _mm512_cvtps_pd(_mm256_loadu_ps(a + i));
    const __m256 s = _mm512_cvtpd_ps(_mm512_div_pd(num, _mm512_add_pd(one, Exp8(_mm512_sub_pd(_mm512_setzero_pd(), g)))));
    _mm256_storeu_ps(y + i, Up ? _mm256_mul_ps(s, _mm256_loadu_ps(up + i)) : s);
  }
  SigmoidMulScalar<Up>(a, gate, up, y, i, n);
}

// Exp8's steps on AVX2 for N vectors of four doubles at once (their polynomial chains interleave),
// with 2^k made in the exponent bits: exact for |x| ≤ 708 (k within ±1021, every result
// normal), so the same values as Exp8 there.
constexpr double kExp4Max = 708.0;
template <int N>
__attribute__((target("avx2,fma"))) inline void Exp4(__m256d* x) {
  __m256d k[N], r[N], p[N];
  for (int v = 0; v < N; ++v) {
    k[v] = _mm256_round_pd(_mm256_mul_pd(x[v], _mm256_set1_pd(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r[v] = _mm256_fnmadd_pd(k[v], _mm256_set1_pd(kLn2Hi), x[v]);
    r[v] = _mm256_fnmadd_pd(k[v], _mm256_set1_pd(kLn2Lo), r[v]);
    p[v] = _mm256_set1_pd(kInvFact[0]);
  }
  for (int i = 1; i < 14; ++i)
    for (int v = 0; v < N; ++v) p[v] = _mm256_fmadd_pd(p[v], r[v], _mm256_set1_pd(kInvFact[i]));
  for (int v = 0; v < N; ++v) {
    const __m256i e = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(k[v])), _mm256_set1_epi64x(1023));
    x[v] = _mm256_mul_pd(p[v], _mm256_castsi256_pd(_mm256_slli_epi64(e, 52)));
  }
}

// Whether a lane of g is past Exp4's range, or NaN.
__attribute__((target("avx2,fma"))) inline bool PastExp4(__m256d g) {
  const __m256d mag = _mm256_andnot_pd(_mm256_set1_pd(-0.0), g);
  return _mm256_movemask_pd(_mm256_cmp_pd(mag, _mm256_set1_pd(kExp4Max), _CMP_NLE_UQ)) != 0;
}

// 4·N outputs from at, whose gates (as doubles) are g[0..N).
template <bool Up, int N>
__attribute__((target("avx2,fma"))) inline void SigmoidMul4(const float* a, const float* gate, const float* up, float* y, int64_t at, const __m256d* g) {
  __m256d e[N];
  for (int v = 0; v < N; ++v) e[v] = _mm256_xor_pd(g[v], _mm256_set1_pd(-0.0));
  Exp4<N>(e);
  for (int v = 0; v < N; ++v) {
    const __m256d num = a == gate ? g[v] : _mm256_cvtps_pd(_mm_loadu_ps(a + at + 4 * v));
    const __m128 s = _mm256_cvtpd_ps(_mm256_div_pd(num, _mm256_add_pd(_mm256_set1_pd(1.0), e[v])));
    _mm_storeu_ps(y + at + 4 * v, Up ? _mm_mul_ps(s, _mm_loadu_ps(up + at + 4 * v)) : s);
  }
}

// SigmoidMulAvx512's values on AVX2: thirty-two at a time, then four; a block with a gate past
// Exp4's range (or NaN) takes the scalar steps.
template <bool Up>
__attribute__((target("avx2,fma"))) void SigmoidMulAvx2(const float* a, const float* gate, const float* up, float* y, int64_t n) {
  constexpr int kN = 8;
  int64_t i = 0;
  for (; i + 4 * kN <= n; i += 4 * kN) {
    __m256d g[kN];
    bool past = false;
    for (int v = 0; v < kN; ++v) past |= PastExp4(g[v] = _mm256_cvtps_pd(_mm_loadu_ps(gate + i + 4 * v)));
    if (past) SigmoidMulScalar<Up>(a, gate, up, y, i, i + 4 * kN);
    else SigmoidMul4<Up, kN>(a, gate, up, y, i, g);
  }
  for (; i + 4 <= n; i += 4) {
    const __m256d g = _mm256_cvtps_pd(_mm_loadu_ps(gate + i));
    if (PastExp4(g)) SigmoidMulScalar<Up>(a, gate, up, y, i, i + 4);
    else SigmoidMul4<Up, 1>(a, gate, up, y, i, &g);
  }
  SigmoidMulScalar<Up>(a, gate, up, y, i, n);
}
#pragma GCC diagnostic pop
#endif

// What a row sum adds: x, x², or (x − c)².
enum class Terms { kValues, kSquares, kCentered };

// Σ of the terms in double (each exact but the centered one) over 16 interleaved lanes, the lanes
// combined pairwise, then the tail in order: the same bits on any instruction set, without one
// chain of dependent adds.
template <Terms Kind>
double LaneSum(const float* x, int64_t n, double c) {
  const auto term = [c](float v) {
    const double d = Kind == Terms::kCentered ? static_cast<double>(v) - c : static_cast<double>(v);
    return Kind == Terms::kValues ? d : d * d;
  };
  double s[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) s[l] += term(x[i + l]);
  for (int half = 8; half >= 1; half /= 2)
    for (int l = 0; l < half; ++l) s[l] += s[l + half];
  double t = s[0];
  for (; i < n; ++i) t += term(x[i]);
  return t;
}

#ifdef VOXSLAB_X86
// The same sums, lanes 4j…4j+3 in acc[j]. Aligned to a cache line: the loop ran slower where
// the code before it happened to leave it.
template <Terms Kind>
__attribute__((target("avx2"), aligned(64))) double LaneSumAvx2(const float* x, int64_t n, double c) {
  const __m256d cv = _mm256_set1_pd(c);
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 4; ++j) {
      __m256d d = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * j));
      if (Kind == Terms::kCentered) d = _mm256_sub_pd(d, cv);
      acc[j] = _mm256_add_pd(acc[j], Kind == Terms::kValues ? d : _mm256_mul_pd(d, d));
    }
  const __m256d s4 = _mm256_add_pd(_mm256_add_pd(acc[0], acc[2]), _mm256_add_pd(acc[1], acc[3]));
  const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
  double t = _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
  for (; i < n; ++i) {
    const double d = Kind == Terms::kCentered ? static_cast<double>(x[i]) - c : static_cast<double>(x[i]);
    t += Kind == Terms::kValues ? d : d * d;
  }
  return t;
}
#endif

template <Terms Kind>
double RowSum(const float* x, int64_t n, double c = 0) {
#ifdef VOXSLAB_X86
  if (ChosenIsa() >= Isa::kAvx2) return LaneSumAvx2<Kind>(x, n, c);
#endif
  return LaneSum<Kind>(x, n, c);
}

}  // namespace

void RmsNorm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const double ss = RowSum<Terms::kSquares>(xr, dim);
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = xr[i] * inv * w[i];
  }
}

void AddRmsNorm(float* x, const float* r, const float* w, float* y, int64_t rows, int64_t dim, float eps) {
  for (int64_t i = 0; i < rows * dim; ++i) x[i] += r[i];
  RmsNorm(x, w, y, rows, dim, eps);
}

void LayerNorm(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const double mean = RowSum<Terms::kValues>(xr, dim) / static_cast<double>(dim);
    const double v = RowSum<Terms::kCentered>(xr, dim, mean);
    const double inv = 1.0 / std::sqrt(v / static_cast<double>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = static_cast<float>((xr[i] - mean) * inv) * w[i] + b[i];
  }
}

void GeluExact(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(0.5 * x[i] * (1.0 + std::erf(x[i] / std::sqrt(2.0))));
}

namespace {

// y = f32(a / (1 + e^−g)) (· up) over n values on the chosen instruction set.
template <bool Up>
void SigmoidMul(const float* a, const float* gate, const float* up, float* y, int64_t n) {
#ifdef VOXSLAB_X86
  if (ChosenIsa() == Isa::kAvx512) return SigmoidMulAvx512<Up>(a, gate, up, y, n);
  if (ChosenIsa() == Isa::kAvx2) return SigmoidMulAvx2<Up>(a, gate, up, y, n);
#endif
  SigmoidMulScalar<Up>(a, gate, up, y, 0, n);
}

// One value's time in the multiply-adds RowPool::Run weighs a call by (an integer GEMV's).
constexpr int64_t kSigmoidWork = 48;

struct SigmoidTask {
  const float* a;
  const float* gate;
  const float* up;
  float* y;
};

template <bool Up>
void SigmoidMulPart(const void* ctx, int64_t i0, int64_t i1) {
  const auto& t = *static_cast<const SigmoidTask*>(ctx);
  SigmoidMul<Up>(t.a + i0, t.gate + i0, Up ? t.up + i0 : nullptr, t.y + i0, i1 - i0);
}

// SigmoidMul with the values split among the calling thread's helpers, in parts of whole
// 32-value blocks: each value meets the vector paths' blocks as on one thread.
template <bool Up>
void SigmoidMulSplit(const float* a, const float* gate, const float* up, float* y, int64_t n) {
  const SigmoidTask task{a, gate, up, y};
  Pool().Run(SigmoidMulPart<Up>, &task, n, 32, n * kSigmoidWork);
}

}  // namespace

void Silu(const float* x, float* y, int64_t n) { SigmoidMulSplit<false>(x, x, nullptr, y, n); }

void SwiGlu(const float* gate, const float* up, float* y, int64_t n) { SigmoidMulSplit<true>(gate, gate, up, y, n); }

void Glu(const float* x, float* y, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) SigmoidMul<false>(x + r * 2 * dim, x + r * 2 * dim + dim, nullptr, y + r * dim, dim);
}

void Rope(float* x, const float* cs, const float* sn, int64_t rows, int64_t heads, int64_t hd, int64_t pos0, bool adjacent) {
  const int64_t half = hd / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float* c = cs + (pos0 + r) * half;
    const float* s = sn + (pos0 + r) * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (r * heads + h) * hd;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t a = adjacent ? 2 * i : i;
        const int64_t b = adjacent ? 2 * i + 1 : i + half;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c[i] - x1 * s[i];
        v[b] = x1 * c[i] + x0 * s[i];
      }
    }
  }
}
void Conv1dCausal(const float* x, const float* w, float* state, float* y, int64_t T, int64_t C, int64_t k) {
  const int64_t keep = k - 1;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      float s = 0;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t src = t - keep + j;  // < 0: from the carried state
        const float v = src >= 0 ? x[src * C + c] : state[(keep + src) * C + c];
        s += w[c * k + j] * v;
      }
      y[t * C + c] = s;
    }
  }
  // New state: the last k−1 input rows (from x, or older rows from the state when T < k−1).
  for (int64_t r = 0; r < keep; ++r) {
    const int64_t src = T - keep + r;
    for (int64_t c = 0; c < C; ++c) {
      if (src >= 0) state[r * C + c] = x[src * C + c];
      else state[r * C + c] = state[(r + T) * C + c];
    }
  }
}

void Conv1dSame(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t C, int64_t k, int64_t t0,
                int64_t t1) {
  const int64_t pad = (k - 1) / 2;
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      float s = bias != nullptr ? bias[c] : 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t src = t + j - pad;
        if (src >= 0 && src < T) s += w[c * k + j] * x[src * C + c];
      }
      y[(t - t0) * C + c] = s;
    }
  }
}

namespace {

struct Conv2dTask {
  const float* in;
  int64_t Cin, inRow0, inRows, inTotal, inCols;
  const float* w;
  const float* bias;
  bool depthwise;
  float* out;
  int64_t outRow0, outRows, outCols;
  bool relu;
};

#ifdef VOXSLAB_X86
// Elements 0, 2, …, 14 (Evens) or 1, 3, …, 15 (Odds) of the 16 floats a then b.
__attribute__((target("avx2"))) inline __m256 Evens(__m256 a, __m256 b) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xd8));
}
__attribute__((target("avx2"))) inline __m256 Odds(__m256 a, __m256 b) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd)), 0xd8));
}

// Output columns [from, to) of row `orow` of a channel with one input channel `ci` (depthwise, or
// Cin = 1), eight at a time, for columns whose three taps are all inside the row: the scalar
// loop's steps (s = b, then s += w·x unfused, taps in order; ReLU as s < 0 ? 0 : s).
__attribute__((target("avx2"))) int64_t Conv2dRowAvx2(const float* in, int64_t ci, int64_t inRow0, int64_t inRows, int64_t inTotal,
                                                      int64_t inCols, const float* wk, float b, int64_t orow, float* out, int64_t from,
                                                      int64_t to, bool relu) {
  int64_t col = from;
  // Reads inputs 2·col − 1 … 2·col + 16 of a row.
  for (; col + 8 <= to && 2 * col + 16 < inCols; col += 8) {
    __m256 s = _mm256_set1_ps(b);
    for (int64_t di = 0; di < 3; ++di) {
      const int64_t irow = 2 * orow - 1 + di;
      if (irow < 0 || irow >= inTotal) continue;
      const float* x = in + (ci * inRows + (irow - inRow0)) * inCols + 2 * col - 1;
      const __m256 e0 = _mm256_loadu_ps(x), e1 = _mm256_loadu_ps(x + 8);
      const __m256 f0 = _mm256_loadu_ps(x + 2), f1 = _mm256_loadu_ps(x + 10);
      s = _mm256_add_ps(s, _mm256_mul_ps(_mm256_set1_ps(wk[di * 3]), Evens(e0, e1)));
      s = _mm256_add_ps(s, _mm256_mul_ps(_mm256_set1_ps(wk[di * 3 + 1]), Odds(e0, e1)));
      s = _mm256_add_ps(s, _mm256_mul_ps(_mm256_set1_ps(wk[di * 3 + 2]), Evens(f0, f1)));
    }
    if (relu) s = _mm256_blendv_ps(s, _mm256_setzero_ps(), _mm256_cmp_ps(s, _mm256_setzero_ps(), _CMP_LT_OQ));
    _mm256_storeu_ps(out + col, s);
  }
  return col;
}
#endif

// Output channels [c0, c1) of Conv2dS2.
void Conv2dChannels(const void* ctx, int64_t c0, int64_t c1) {
  const Conv2dTask& t = *static_cast<const Conv2dTask*>(ctx);
  const float* in = t.in;
  const float* w = t.w;
  const float* bias = t.bias;
  float* out = t.out;
  const int64_t Cin = t.Cin, inRow0 = t.inRow0, inRows = t.inRows, inTotal = t.inTotal, inCols = t.inCols;
  const int64_t outRow0 = t.outRow0, outRows = t.outRows, outCols = t.outCols;
  const bool depthwise = t.depthwise, relu = t.relu;
  for (int64_t co = c0; co < c1; ++co) {
    for (int64_t r = 0; r < outRows; ++r) {
      const int64_t orow = outRow0 + r;
      // Columns from 1 whose taps are all inside the row go eight at a time where they can.
      int64_t vecFrom = outCols, vecTo = outCols;
#ifdef VOXSLAB_X86
      if ((depthwise || Cin == 1) && outCols > 1 && ChosenIsa() >= Isa::kAvx2) {
        const int64_t ci = depthwise ? co : 0;
        const float* wk = w + (depthwise ? co * 9 : co * Cin * 9);
        vecFrom = 1;
        vecTo = Conv2dRowAvx2(in, ci, inRow0, inRows, inTotal, inCols, wk, bias != nullptr ? bias[co] : 0.0f, orow,
                              out + (co * outRows + r) * outCols, 1, outCols, relu);
      }
#endif
      for (int64_t col = 0; col < outCols; ++col) {
        if (col == vecFrom) col = vecTo;
        if (col >= outCols) break;
        float s = bias != nullptr ? bias[co] : 0.0f;
        const int64_t ciLo = depthwise ? co : 0;
        const int64_t ciHi = depthwise ? co + 1 : Cin;
        for (int64_t ci = ciLo; ci < ciHi; ++ci) {
          const float* wk = w + (depthwise ? co * 9 : (co * Cin + ci) * 9);
          for (int64_t di = 0; di < 3; ++di) {
            const int64_t irow = 2 * orow - 1 + di;  // absolute input row
            if (irow < 0 || irow >= inTotal) continue;
            const float* row = in + (ci * inRows + (irow - inRow0)) * inCols;
            for (int64_t dj = 0; dj < 3; ++dj) {
              const int64_t icol = 2 * col - 1 + dj;
              if (icol < 0 || icol >= inCols) continue;
              s += wk[di * 3 + dj] * row[icol];
            }
          }
        }
        out[(co * outRows + r) * outCols + col] = relu && s < 0 ? 0.0f : s;
      }
    }
  }
}

struct PointwiseTask {
  const float* in;
  const float* w;
  const float* bias;
  float* out;
  int64_t Cin, P;
  bool relu;
};

#ifdef VOXSLAB_X86
// CB output channels × 16 positions from p, summed over every input channel in registers: the
// scalar loop's steps per output (o = b, then o += w·x unfused, input channels in order; ReLU
// as o < 0 ? 0 : o), so the same bits.
template <int CB>
__attribute__((target("avx2"))) void PointwiseTile(const PointwiseTask& t, int64_t c, int64_t p) {
  const int64_t Cin = t.Cin, P = t.P;
  __m256 a[CB][2];
  for (int k = 0; k < CB; ++k) a[k][0] = a[k][1] = _mm256_set1_ps(t.bias != nullptr ? t.bias[c + k] : 0.0f);
  const float* x = t.in + p;
  const float* w = t.w + c * Cin;
  for (int64_t ci = 0; ci < Cin; ++ci, x += P) {
    const __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
    for (int k = 0; k < CB; ++k) {
      const __m256 wk = _mm256_broadcast_ss(w + k * Cin + ci);
      a[k][0] = _mm256_add_ps(a[k][0], _mm256_mul_ps(wk, x0));
      a[k][1] = _mm256_add_ps(a[k][1], _mm256_mul_ps(wk, x1));
    }
  }
  const __m256 zero = _mm256_setzero_ps();
  for (int k = 0; k < CB; ++k)
    for (int h = 0; h < 2; ++h) {
      __m256 v = a[k][h];
      if (t.relu) v = _mm256_blendv_ps(v, zero, _mm256_cmp_ps(v, zero, _CMP_LT_OQ));
      _mm256_storeu_ps(t.out + (c + k) * P + p + 8 * h, v);
    }
}

// Output channels [c0, c1), positions [0, P16) in tiles: a tile's inputs (16 positions of every
// input channel) stay in L1 for all the channels.
__attribute__((target("avx2"))) void PointwiseAvx2(const PointwiseTask& t, int64_t c0, int64_t c1, int64_t P16) {
  for (int64_t p = 0; p < P16; p += 16) {
    int64_t c = c0;
    for (; c + 4 <= c1; c += 4) PointwiseTile<4>(t, c, p);
    for (; c < c1; ++c) PointwiseTile<1>(t, c, p);
  }
}
#endif

// Output channels [c0, c1) of Pointwise.
void PointwiseChannels(const void* ctx, int64_t c0, int64_t c1) {
  const PointwiseTask& t = *static_cast<const PointwiseTask*>(ctx);
  const float* in = t.in;
  const float* w = t.w;
  const float* bias = t.bias;
  float* out = t.out;
  const int64_t Cin = t.Cin, P = t.P;
  int64_t p0 = 0;  // positions before p0 are done
#ifdef VOXSLAB_X86
  if (ChosenIsa() >= Isa::kAvx2) {
    p0 = P / 16 * 16;
    PointwiseAvx2(t, c0, c1, p0);
  }
#endif
  for (int64_t c = c0; c < c1; ++c) {
    float* o = out + c * P;
    const float b = bias != nullptr ? bias[c] : 0.0f;
    for (int64_t p = p0; p < P; ++p) o[p] = b;
    for (int64_t ci = 0; ci < Cin; ++ci) {
      const float wc = w[c * Cin + ci];
      const float* x = in + ci * P;
      for (int64_t p = p0; p < P; ++p) o[p] += wc * x[p];
    }
    if (t.relu)
      for (int64_t p = p0; p < P; ++p) o[p] = o[p] < 0 ? 0.0f : o[p];
  }
}

}  // namespace

// Both split their output channels among the calling thread's helpers: a channel is computed
// as on one thread.
void Conv2dS2(const float* in, int64_t Cin, int64_t inRow0, int64_t inRows, int64_t inTotal, int64_t inCols, const float* w,
              const float* bias, bool depthwise, float* out, int64_t Cout, int64_t outRow0, int64_t outRows, int64_t outCols,
              bool relu) {
  const Conv2dTask task{in, Cin, inRow0, inRows, inTotal, inCols, w, bias, depthwise, out, outRow0, outRows, outCols, relu};
  Pool().Run(Conv2dChannels, &task, Cout, 1, Cout * outRows * outCols * 9 * (depthwise ? 1 : Cin));
}

void Pointwise(const float* in, const float* w, const float* bias, float* out, int64_t Cin, int64_t Cout, int64_t P, bool relu) {
  const PointwiseTask task{in, w, bias, out, Cin, P, relu};
  Pool().Run(PointwiseChannels, &task, Cout, 1, Cout * Cin * P);
}

}  // namespace voxslab
