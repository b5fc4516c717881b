// DSP kernels over caller-owned buffers (no allocation). Plain C++, no Node-API types.
#pragma once

#include <cstddef>
#include <cstdint>

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

// Name of the dot-product path chosen at load ("avx2+fma" or "scalar").
const char* DotPath();

}  // namespace voxslab
