#include "dsp.h"

#include <cstring>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "cpu.h"
#include "simd.h"

namespace voxslab {

namespace {

// Four accumulators in a fixed order, so every call rounds the same way.
double DotScalar(const double* a, const double* b, int64_t n) { return DotFixed4(a, b, n); }

#ifdef VOXSLAB_X86
__attribute__((target("avx2,fma"))) double DotAvx2(const double* a, const double* b, int64_t n) {
  __m256d s0 = _mm256_setzero_pd();
  __m256d s1 = _mm256_setzero_pd();
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    s0 = _mm256_fmadd_pd(_mm256_loadu_pd(a + k), _mm256_loadu_pd(b + k), s0);
    s1 = _mm256_fmadd_pd(_mm256_loadu_pd(a + k + 4), _mm256_loadu_pd(b + k + 4), s1);
  }
  if (k + 4 <= n) {
    s0 = _mm256_fmadd_pd(_mm256_loadu_pd(a + k), _mm256_loadu_pd(b + k), s0);
    k += 4;
  }
  __m256d s = _mm256_add_pd(s0, s1);
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, s);
  double tail = 0;
  for (; k < n; ++k) tail = std::fma(a[k], b[k], tail);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + tail;
}

// Two DotAvx2 over the same b at once (the resampler's phases over one window): each with
// DotAvx2's accumulators and order, so each has its bits; four independent chains hide the
// FMA latency two leave exposed.
__attribute__((target("avx2,fma"))) void DotPairAvx2(const double* a0, const double* a1, const double* b, int64_t n, double* d0,
                                                      double* d1) {
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, t0 = s0, t1 = s0;
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256d b0 = _mm256_loadu_pd(b + k), b1 = _mm256_loadu_pd(b + k + 4);
    s0 = _mm256_fmadd_pd(_mm256_loadu_pd(a0 + k), b0, s0);
    s1 = _mm256_fmadd_pd(_mm256_loadu_pd(a0 + k + 4), b1, s1);
    t0 = _mm256_fmadd_pd(_mm256_loadu_pd(a1 + k), b0, t0);
    t1 = _mm256_fmadd_pd(_mm256_loadu_pd(a1 + k + 4), b1, t1);
  }
  if (k + 4 <= n) {
    const __m256d b0 = _mm256_loadu_pd(b + k);
    s0 = _mm256_fmadd_pd(_mm256_loadu_pd(a0 + k), b0, s0);
    t0 = _mm256_fmadd_pd(_mm256_loadu_pd(a1 + k), b0, t0);
    k += 4;
  }
  alignas(32) double ls[4], lt[4];
  _mm256_store_pd(ls, _mm256_add_pd(s0, s1));
  _mm256_store_pd(lt, _mm256_add_pd(t0, t1));
  double tail0 = 0, tail1 = 0;
  for (; k < n; ++k) tail0 = std::fma(a0[k], b[k], tail0), tail1 = std::fma(a1[k], b[k], tail1);
  *d0 = ((ls[0] + ls[1]) + (ls[2] + ls[3])) + tail0;
  *d1 = ((lt[0] + lt[1]) + (lt[2] + lt[3])) + tail1;
}
#endif

#ifdef VOXSLAB_ARM
// DotAvx2's order on 128-bit registers: lanes {0,1} and {2,3} of each four as s0's two halves,
// the next four as s1's, so the lanes add up as DotAvx2's four do.
double DotNeon(const double* a, const double* b, int64_t n) {
  float64x2_t s0l = vdupq_n_f64(0.0), s0h = s0l, s1l = s0l, s1h = s0l;
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    s0l = vfmaq_f64(s0l, vld1q_f64(a + k), vld1q_f64(b + k));
    s0h = vfmaq_f64(s0h, vld1q_f64(a + k + 2), vld1q_f64(b + k + 2));
    s1l = vfmaq_f64(s1l, vld1q_f64(a + k + 4), vld1q_f64(b + k + 4));
    s1h = vfmaq_f64(s1h, vld1q_f64(a + k + 6), vld1q_f64(b + k + 6));
  }
  if (k + 4 <= n) {
    s0l = vfmaq_f64(s0l, vld1q_f64(a + k), vld1q_f64(b + k));
    s0h = vfmaq_f64(s0h, vld1q_f64(a + k + 2), vld1q_f64(b + k + 2));
    k += 4;
  }
  const float64x2_t lo = vaddq_f64(s0l, s1l), hi = vaddq_f64(s0h, s1h);
  double tail = 0;
  for (; k < n; ++k) tail = std::fma(a[k], b[k], tail);
  return ((vgetq_lane_f64(lo, 0) + vgetq_lane_f64(lo, 1)) + (vgetq_lane_f64(hi, 0) + vgetq_lane_f64(hi, 1))) + tail;
}
#endif

using DotFn = double (*)(const double*, const double*, int64_t);

DotFn ChooseDot() {
#ifdef VOXSLAB_X86
  if (ChosenIsa() != Isa::kScalar) return DotAvx2;
#elif defined(VOXSLAB_ARM)
  if (ChosenIsa() != Isa::kScalar) return DotNeon;
#endif
  return DotScalar;
}

const DotFn kDot = ChooseDot();

// Two dot products over the same b, each with kDot's bits.
void DotPair(const double* a0, const double* a1, const double* b, int64_t n, double* d0, double* d1) {
#ifdef VOXSLAB_X86
  if (kDot == DotAvx2) return DotPairAvx2(a0, a1, b, n, d0, d1);
#endif
  *d0 = kDot(a0, b, n);
  *d1 = kDot(a1, b, n);
}

}  // namespace

const char* DotPath() {
#ifdef VOXSLAB_ARM
  if (kDot != DotScalar) return "neon";
#endif
  return kDot == DotScalar ? "scalar" : "avx2+fma";
}

double DotProduct(const double* a, const double* b, int64_t n) { return kDot(a, b, n); }

int64_t ResampleReady(const double* state, int64_t count) {
  const int64_t L = static_cast<int64_t>(state[kRsUp]);
  const int64_t M = static_cast<int64_t>(state[kRsDown]);
  const int64_t c = static_cast<int64_t>(state[kRsCenter]);
  const int64_t inputs = static_cast<int64_t>(state[kRsInputs]) + count;
  const int64_t outputs = static_cast<int64_t>(state[kRsOutputs]);
  // Output n is complete once floor((n·M + c) / L) < inputs, i.e. n·M + c < inputs·L.
  const int64_t num = inputs * L - c;
  const int64_t ready = num <= 0 ? 0 : (num + M - 1) / M;
  return ready > outputs ? ready - outputs : 0;
}

int64_t ResampleRun(const double* phases, double* ring, double* state, const float* input, int64_t count, float* out,
                    int64_t limit) {
  const int64_t L = static_cast<int64_t>(state[kRsUp]);
  const int64_t M = static_cast<int64_t>(state[kRsDown]);
  const int64_t T = static_cast<int64_t>(state[kRsTaps]);
  const int64_t c = static_cast<int64_t>(state[kRsCenter]);
  int64_t pos = static_cast<int64_t>(state[kRsPos]);
  int64_t inputs = static_cast<int64_t>(state[kRsInputs]);
  int64_t outputs = static_cast<int64_t>(state[kRsOutputs]);
  int64_t written = 0;
  // The next output's newest input and phase: output n sits at t = n·M + c on the common
  // grid, newest = floor(t / L), phase t − newest·L; advanced by M per output without a division
  // where M < L.
  int64_t newest = (outputs * M + c) / L;
  int64_t phase = outputs * M + c - newest * L;
  const auto advance = [&]() {
    phase += M;
    if (phase >= L) {
      if (M < L) {
        phase -= L;
        ++newest;
      } else {
        newest += phase / L;
        phase %= L;
      }
    }
  };
  auto drain = [&](int64_t cap) {
    while (outputs < cap && newest <= inputs - 1) {
      // ring[pos+1 .. pos+T] holds the last T inputs, oldest first. Two outputs over the same
      // window (upsampling) go through one pass.
      if (outputs + 1 < cap && phase + M < L) {
        double d0, d1;
        DotPair(phases + phase * T, phases + (phase + M) * T, ring + pos + 1, T, &d0, &d1);
        out[written++] = static_cast<float>(d0);
        out[written++] = static_cast<float>(d1);
        outputs += 2;
        advance();
        advance();
        continue;
      }
      out[written++] = static_cast<float>(kDot(phases + phase * T, ring + pos + 1, T));
      ++outputs;
      advance();
    }
  };
  auto write = [&](double x) {
    pos = pos + 1 == T ? 0 : pos + 1;
    ring[pos] = x;
    ring[pos + T] = x;
    ++inputs;
  };
  if (input != nullptr) {
    const int64_t unlimited = INT64_MAX;
    for (int64_t i = 0; i < count; ++i) {
      write(static_cast<double>(input[i]));
      drain(unlimited);
    }
  } else {
    drain(limit);
    while (outputs < limit) {
      write(0.0);
      drain(limit);
    }
  }
  state[kRsPos] = static_cast<double>(pos);
  state[kRsInputs] = static_cast<double>(inputs);
  state[kRsOutputs] = static_cast<double>(outputs);
  return written;
}

namespace {

struct Fft {
  const int32_t* factors;
  const double* tw;
  double* scratch;
  int n;
  bool inverse;

  void Work(double* out, int o, const double* in, int i, int fstride, int fi) const {
    const int p = factors[fi];
    const int m = factors[fi + 1];
    if (m == 1) {
      for (int q = 0; q < p; ++q) {
        out[2 * (o + q)] = in[2 * i];
        out[2 * (o + q) + 1] = in[2 * i + 1];
        i += fstride;
      }
    } else {
      for (int q = 0; q < p; ++q) {
        Work(out, o + q * m, in, i, fstride * p, fi + 2);
        i += fstride;
      }
    }
    if (p == 2) Bfly2(out, o, fstride, m);
    else if (p == 4) Bfly4(out, o, fstride, m);
    else BflyGeneric(out, o, fstride, m, p);
  }

  void Bfly2(double* f, int o, int fstride, int m) const {
    for (int k = 0; k < m; ++k) {
      double* a = f + 2 * (o + k);
      double* b = f + 2 * (o + k + m);
      const double wr = tw[2 * k * fstride];
      const double wi = tw[2 * k * fstride + 1];
      const double tr = b[0] * wr - b[1] * wi;
      const double ti = b[0] * wi + b[1] * wr;
      b[0] = a[0] - tr;
      b[1] = a[1] - ti;
      a[0] += tr;
      a[1] += ti;
    }
  }

  void Bfly4(double* f, int o, int fstride, int m) const {
    for (int k = 0; k < m; ++k) {
      double* x0 = f + 2 * (o + k);
      double* x1 = f + 2 * (o + k + m);
      double* x2 = f + 2 * (o + k + 2 * m);
      double* x3 = f + 2 * (o + k + 3 * m);
      const double* w1 = tw + 2 * k * fstride;
      const double* w2 = tw + 4 * k * fstride;
      const double* w3 = tw + 6 * k * fstride;
      const double s0r = x1[0] * w1[0] - x1[1] * w1[1];
      const double s0i = x1[0] * w1[1] + x1[1] * w1[0];
      const double s1r = x2[0] * w2[0] - x2[1] * w2[1];
      const double s1i = x2[0] * w2[1] + x2[1] * w2[0];
      const double s2r = x3[0] * w3[0] - x3[1] * w3[1];
      const double s2i = x3[0] * w3[1] + x3[1] * w3[0];
      const double s5r = x0[0] - s1r;
      const double s5i = x0[1] - s1i;
      const double pr = x0[0] + s1r;
      const double pi = x0[1] + s1i;
      const double s3r = s0r + s2r;
      const double s3i = s0i + s2i;
      const double s4r = s0r - s2r;
      const double s4i = s0i - s2i;
      x2[0] = pr - s3r;
      x2[1] = pi - s3i;
      x0[0] = pr + s3r;
      x0[1] = pi + s3i;
      if (inverse) {
        x1[0] = s5r - s4i;
        x1[1] = s5i + s4r;
        x3[0] = s5r + s4i;
        x3[1] = s5i - s4r;
      } else {
        x1[0] = s5r + s4i;
        x1[1] = s5i - s4r;
        x3[0] = s5r - s4i;
        x3[1] = s5i + s4r;
      }
    }
  }

  void BflyGeneric(double* f, int o, int fstride, int m, int p) const {
    for (int u = 0; u < m; ++u) {
      for (int q = 0, k = u; q < p; ++q, k += m) {
        scratch[2 * q] = f[2 * (o + k)];
        scratch[2 * q + 1] = f[2 * (o + k) + 1];
      }
      for (int q1 = 0, k = u; q1 < p; ++q1, k += m) {
        int twidx = 0;
        double re = scratch[0];
        double im = scratch[1];
        for (int q = 1; q < p; ++q) {
          twidx += fstride * k;
          if (twidx >= n) twidx -= n;
          const double wr = tw[2 * twidx];
          const double wi = tw[2 * twidx + 1];
          const double xr = scratch[2 * q];
          const double xi = scratch[2 * q + 1];
          re += xr * wr - xi * wi;
          im += xr * wi + xi * wr;
        }
        f[2 * (o + k)] = re;
        f[2 * (o + k) + 1] = im;
      }
    }
  }
};

}  // namespace

void FftRun(const int32_t* factors, const double* twiddles, double* scratch, const double* in, double* out, int n,
            bool inverse) {
  Fft f{factors, twiddles, scratch, n, inverse};
  f.Work(out, 0, in, 0, 1, 0);
}

void RfftForward(const int32_t* factors, const double* twiddles, double* scratch, const double* split, double* work,
                 const double* x, double* spectrum, int n) {
  const int h = n / 2;
  double* z = work;          // packed input, h complex
  double* zf = work + n;     // its transform, h complex
  for (int k = 0; k < n; ++k) z[k] = x[k];  // z[k] = x[2k] + i·x[2k+1], already interleaved
  FftRun(factors, twiddles, scratch, z, zf, h, false);
  for (int k = 0; k <= h; ++k) {
    const int a = k == h ? 0 : k;
    const int b = k == 0 ? 0 : h - k;
    const double zr = zf[2 * a], zi = zf[2 * a + 1];
    const double cr = zf[2 * b], ci = -zf[2 * b + 1];  // conj(Z[h-k])
    const double er = 0.5 * (zr + cr), ei = 0.5 * (zi + ci);  // even-sample spectrum
    const double dr = zr - cr, di = zi - ci;
    const double orr = 0.5 * di, oi = -0.5 * dr;  // odd-sample spectrum: (Z − conj) / 2i
    const double wr = split[2 * k], wi = split[2 * k + 1];
    spectrum[2 * k] = er + (wr * orr - wi * oi);
    spectrum[2 * k + 1] = ei + (wr * oi + wi * orr);
  }
}

void RfftInverse(const int32_t* factors, const double* twiddles_inverse, double* scratch, const double* split,
                 double* work, const double* spectrum, double* x, int n) {
  const int h = n / 2;
  double* z = work;
  double* zt = work + n;
  for (int k = 0; k < h; ++k) {
    const double xr = spectrum[2 * k], xi = k == 0 ? 0.0 : spectrum[2 * k + 1];
    const int m = h - k;
    const double yr = spectrum[2 * m], yi = m == h ? 0.0 : -spectrum[2 * m + 1];  // conj(X[h-k]), Nyquist imag ignored
    const double er = 0.5 * (xr + yr), ei = 0.5 * (xi + yi);
    const double dr = 0.5 * (xr - yr), di = 0.5 * (xi - yi);
    // odd = d / W^k = d · conj(W^k)
    const double wr = split[2 * k], wi = -split[2 * k + 1];
    const double orr = dr * wr - di * wi, oi = dr * wi + di * wr;
    z[2 * k] = er - oi;  // Z = even + i·odd
    z[2 * k + 1] = ei + orr;
  }
  FftRun(factors, twiddles_inverse, scratch, z, zt, h, true);
  const double scale = 1.0 / h;
  for (int k = 0; k < n; ++k) x[k] = zt[k] * scale;
}

namespace {

// The ISTFT's e^x and (sin x, cos x) in double, written once over a scalar and an AVX2
// vocabulary with the same IEEE operations in the same order (no libm call, whose bits vary by
// C library; no FMA, the file being built without contraction), so the detokenizer's audio has
// the same bits on every machine and path. fdlibm's reductions and polynomials: within an ulp
// of the correctly rounded value. The fast form takes |x| ≤ kExpFast for e^x and
// |x| ≤ kSinFast for the sine; PolarOne takes the rest.
constexpr double kRound = 6755399441055744.0;  // 1.5·2^52: (x + kRound) − kRound rounds x to an integer (ties even)
constexpr double kInvLn2 = 1.44269504088896338700e+00;
constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 32 bits: k·kLn2Hi is exact for |k| < 2^21
constexpr double kLn2Lo = 1.90821492927058770002e-10;
constexpr double kP1 = 1.66666666666666019037e-01, kP2 = -2.77777777770155933842e-03, kP3 = 6.61375632143793436117e-05,
                 kP4 = -1.65339022054652515390e-06, kP5 = 4.13813679705723846039e-08;
constexpr double kInvPio2 = 6.36619772367581382433e-01;
constexpr double kPio2_1 = 1.57079632673412561417e+00;  // π/2 in 33-bit parts: n·part is exact for |n| < 2^20
constexpr double kPio2_2 = 6.07710050630396597660e-11;
constexpr double kPio2_3 = 2.02226624871116645580e-21;
constexpr double kS1 = -1.66666666666666324348e-01, kS2 = 8.33333333332248946124e-03, kS3 = -1.98412698298579493134e-04,
                 kS4 = 2.75573137070700676789e-06, kS5 = -2.50507602534068634195e-08, kS6 = 1.58969099521155010221e-10;
constexpr double kC1 = 4.16666666666666019037e-02, kC2 = -1.38888888888741095749e-03, kC3 = 2.48015872894767294178e-05,
                 kC4 = -2.75573143513906633035e-07, kC5 = 2.08757232129817482790e-09, kC6 = -1.13596475577881948265e-11;
constexpr double kExpFast = 708.0;        // 2^k stays a normal number
constexpr double kExpOverflow = 7.09782712893383973096e+02;   // e^x past it is infinite
constexpr double kExpUnderflow = -7.45133219101941108420e+02;  // e^x below it rounds to 0
constexpr double kSinFast = 1647099.0;    // |n| < 2^20
constexpr double kTwoPi = 6.28318530717958623200e+00;

// t's low bits hold the rounded integer (two's complement, |k| < 2^51).
inline int64_t RoundedBits(double t) {
  int64_t b, r;
  std::memcpy(&b, &t, sizeof b);
  std::memcpy(&r, &kRound, sizeof r);
  return b - r;
}

namespace polar_scalar {
using D = double;
inline D Set(double v) { return v; }
inline D Add(D a, D b) { return a + b; }
inline D Sub(D a, D b) { return a - b; }
inline D Mul(D a, D b) { return a * b; }
inline D Div(D a, D b) { return a / b; }
inline D Pow2(D t) {
  const uint64_t bits = static_cast<uint64_t>(RoundedBits(t) + 1023) << 52;
  double p;
  std::memcpy(&p, &bits, sizeof p);
  return p;
}
inline void Quadrant(D t, D s, D c, D* sin_x, D* cos_x) {
  const int64_t q = RoundedBits(t) & 3;
  const D a = (q & 1) ? c : s, b = (q & 1) ? s : c;
  *sin_x = (q & 2) ? -a : a;
  *cos_x = ((q + 1) & 2) ? -b : b;
}
#include "polar_core.h"
}  // namespace polar_scalar

// One bin outside the fast forms: e^x saturates, or scales through ldexp (exact, rounded once
// where subnormal); a phase past kSinFast is first reduced by fmod (exact, so deterministic; a
// float32 phase that large carries little information); NaN and infinities give NaN.
void PolarOne(double m, double p, double* re, double* im) {
  double mag;
  if (m != m) mag = m;
  else if (m > kExpOverflow) mag = HUGE_VAL;
  else if (m < kExpUnderflow) mag = 0.0;
  else {
    double t;
    const double y = polar_scalar::ExpParts(m, &t);
    mag = std::ldexp(y, static_cast<int>(RoundedBits(t)));
  }
  double s, c;
  if (!(std::fabs(p) <= 1.0e300)) s = c = p - p;
  else {
    if (std::fabs(p) > kSinFast) p = std::fmod(p, kTwoPi);
    polar_scalar::SinCos(p, &s, &c);
  }
  // One NaN for every machine (which operand's NaN a product keeps, and the default NaN's
  // sign, differ between x86 and Arm).
  *re = mag * c;
  *im = mag * s;
  if (*re != *re) *re = std::numeric_limits<double>::quiet_NaN();
  if (*im != *im) *im = std::numeric_limits<double>::quiet_NaN();
}

// Bins [k0, k1) of `bins` one at a time.
void PolarScalar(const float* values, int64_t bins, int64_t k0, int64_t k1, double* spectrum) {
  for (int64_t k = k0; k < k1; ++k) {
    const double m = values[k], p = values[bins + k];
    if (std::fabs(m) <= kExpFast && std::fabs(p) <= kSinFast) {
      double s, c;
      const double mag = polar_scalar::Exp(m);
      polar_scalar::SinCos(p, &s, &c);
      spectrum[2 * k] = mag * c;
      spectrum[2 * k + 1] = mag * s;
    } else {
      PolarOne(m, p, &spectrum[2 * k], &spectrum[2 * k + 1]);
    }
  }
}

#ifdef VOXSLAB_X86
#pragma GCC push_options
#pragma GCC target("avx2")
namespace polar_avx2 {
using D = __m256d;
inline D Set(double v) { return _mm256_set1_pd(v); }
inline D Add(D a, D b) { return _mm256_add_pd(a, b); }
inline D Sub(D a, D b) { return _mm256_sub_pd(a, b); }
inline D Mul(D a, D b) { return _mm256_mul_pd(a, b); }
inline D Div(D a, D b) { return _mm256_div_pd(a, b); }
inline __m256i Rounded(D t) { return _mm256_sub_epi64(_mm256_castpd_si256(t), _mm256_castpd_si256(_mm256_set1_pd(kRound))); }
inline D Pow2(D t) { return _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(Rounded(t), _mm256_set1_epi64x(1023)), 52)); }
inline void Quadrant(D t, D s, D c, D* sin_x, D* cos_x) {
  const __m256i q = Rounded(t);
  const __m256i one = _mm256_set1_epi64x(1), two = _mm256_set1_epi64x(2);
  const D odd = _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(q, one), one));
  const D a = _mm256_blendv_pd(s, c, odd), b = _mm256_blendv_pd(c, s, odd);
  // Signs: sin's from bit 1 of q, cos's from bit 1 of q + 1, moved to bit 63.
  const __m256i sinSign = _mm256_slli_epi64(_mm256_and_si256(q, two), 62);
  const __m256i cosSign = _mm256_slli_epi64(_mm256_and_si256(_mm256_add_epi64(q, one), two), 62);
  *sin_x = _mm256_xor_pd(a, _mm256_castsi256_pd(sinSign));
  *cos_x = _mm256_xor_pd(b, _mm256_castsi256_pd(cosSign));
}
#include "polar_core.h"

// Four bins a pass; a pass with any value outside the fast forms goes one bin at a time.
void Polar(const float* values, int64_t bins, double* spectrum) {
  const D absMask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
  int64_t k = 0;
  for (; k + 4 <= bins; k += 4) {
    const D m = _mm256_cvtps_pd(_mm_loadu_ps(values + k)), p = _mm256_cvtps_pd(_mm_loadu_ps(values + bins + k));
    const D ok = _mm256_and_pd(_mm256_cmp_pd(_mm256_and_pd(m, absMask), Set(kExpFast), _CMP_LE_OQ),
                               _mm256_cmp_pd(_mm256_and_pd(p, absMask), Set(kSinFast), _CMP_LE_OQ));
    if (_mm256_movemask_pd(ok) != 0xf) {
      PolarScalar(values, bins, k, k + 4, spectrum);
      continue;
    }
    D s, c;
    const D mag = Exp(m);
    SinCos(p, &s, &c);
    const D re = Mul(mag, c), im = Mul(mag, s);
    const D lo = _mm256_unpacklo_pd(re, im), hi = _mm256_unpackhi_pd(re, im);  // (re, im) of bins 0, 2 and 1, 3
    _mm256_storeu_pd(spectrum + 2 * k, _mm256_permute2f128_pd(lo, hi, 0x20));
    _mm256_storeu_pd(spectrum + 2 * k + 4, _mm256_permute2f128_pd(lo, hi, 0x31));
  }
  PolarScalar(values, bins, k, bins, spectrum);
}
}  // namespace polar_avx2
#pragma GCC pop_options
#endif

}  // namespace

void PolarSpectrum(const float* values, int64_t bins, double* spectrum) {
#ifdef VOXSLAB_X86
  if (ChosenIsa() != Isa::kScalar) return polar_avx2::Polar(values, bins, spectrum);
#endif
  PolarScalar(values, bins, 0, bins, spectrum);
}

void OverlapAdd(const double* frame, const double* window, double* acc, double* envelope, int64_t n, int64_t start,
                int64_t from, int64_t mask) {
  for (int64_t j = from; j < n; ++j) {
    const double w = window[j];
    const int64_t i = (start + j) & mask;
    acc[i] = acc[i] + frame[j] * w;
    envelope[i] = envelope[i] + w * w;
  }
}

void OverlapEmit(double* acc, double* envelope, int64_t from, int64_t to, int64_t mask, double floor, float* out) {
  for (int64_t p = from; p < to; ++p) {
    const int64_t i = p & mask;
    const double e = envelope[i];
    *out++ = e > floor ? static_cast<float>(acc[i] / e) : 0.0f;
    acc[i] = 0;
    envelope[i] = 0;
  }
}

int64_t FirstNonFinite(const uint8_t* data, int64_t count, WeightType type) {
  if (type == WeightType::kF32) {
    for (int64_t i = 0; i < count; i++) {
      uint32_t u;
      std::memcpy(&u, data + 4 * i, 4);
      if ((u & 0x7f800000u) == 0x7f800000u) return i;
    }
    return -1;
  }
  const uint16_t mask = type == WeightType::kF16 ? 0x7c00 : 0x7f80;
  for (int64_t i = 0; i < count; i++) {
    uint16_t h;
    std::memcpy(&h, data + 2 * i, 2);
    if ((h & mask) == mask) return i;
  }
  return -1;
}

}  // namespace voxslab
