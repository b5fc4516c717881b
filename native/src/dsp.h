// DSP kernels over caller-owned buffers (no allocation). Plain C++, no Node-API types.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels.h"

namespace voxslab {

// Named slots of the resampler state (a Float64Array owned by the caller).
enum ResamplerSlot : int {
  kRsPos = 0,      // ring write position
  kRsInputs = 1,   // samples pushed
  kRsOutputs = 2,  // outputs emitted
  kRsUp = 3,       // L
  kRsDown = 4,     // M
  kRsTaps = 5,     // taps per phase T
  kRsCenter = 6,   // prototype centre at the common rate
  kRsSlots = 8,
};

// Feeds `count` samples (or, when `input` is null, zeros until `limit` outputs exist) and
// writes every completed output to out[0...]. `phases` holds L rows of T taps, each row
// reversed (oldest input first); `ring` holds 2·T doubles. Returns outputs written.
int64_t ResampleRun(const double* phases, double* ring, double* state, const float* input, int64_t count, float* out,
                    int64_t limit);

// Outputs a push of `count` more samples would complete.
int64_t ResampleReady(const double* state, int64_t count);

// Mixed-radix complex FFT (interleaved re/im), out of place, with the caller's factor plan
// [p0, m0, p1, m1, ...], twiddles exp(∓2πik/n) and a scratch of 2 × the largest radix.
void FftRun(const int32_t* factors, const double* twiddles, double* scratch, const double* in, double* out, int n,
            bool inverse);

// Real-input FFT of even length n through a complex FFT of n/2 (plan, twiddles and scratch
// for n/2; `split` holds exp(-2πik/n), k = 0…n/2, interleaved; `work` 2 × n doubles).
// Forward: x[n] → spectrum[(n/2+1) × (re, im)]. Inverse: spectrum (imaginary parts of DC and
// Nyquist ignored) → x[n], scaled by 1/n.
void RfftForward(const int32_t* factors, const double* twiddles, double* scratch, const double* split, double* work,
                 const double* x, double* spectrum, int n);
void RfftInverse(const int32_t* factors, const double* twiddles_inverse, double* scratch, const double* split,
                 double* work, const double* spectrum, double* x, int n);

// X[k] = e^{values[k]}·(cos, sin)(values[bins + k]) for k < bins, interleaved (re, im): the
// ISTFT's log-magnitudes and phases as a spectrum, with the same bits on every machine.
void PolarSpectrum(const float* values, int64_t bins, double* spectrum);

// The ISTFT's overlap-add into rings of mask + 1 doubles: frame[j]·window[j] into acc and
// window[j]² into envelope at (start + j) & mask, for j from `from` to n.
void OverlapAdd(const double* frame, const double* window, double* acc, double* envelope, int64_t n, int64_t start,
                int64_t from, int64_t mask);
// Samples from…to of the rings (acc ÷ envelope where envelope > floor, else 0) into out,
// clearing what they read.
void OverlapEmit(double* acc, double* envelope, int64_t from, int64_t to, int64_t mask, double floor, float* out);

// Name of the dot-product path chosen at load ("avx2+fma" or "scalar").
const char* DotPath();
// Σ a[i]·b[i] on that path (the resampler's inner product).
double DotProduct(const double* a, const double* b, int64_t n);

// Index of the first NaN or infinity among `count` values of a float `type` (f32, f16, bf16)
// at `data`, or -1 when every value is finite. Reads the exponent bits only.
int64_t FirstNonFinite(const uint8_t* data, int64_t count, WeightType type);

}  // namespace voxslab
