// The scalar GEMV paths and activation quantization: fixed summation orders every vector path
// equals where the tests demand bit equality, and what runs where no vector path does.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "gemv_isa.h"

namespace voxslab::gemv {

// For q4 each 64-element block of xq is stored evens first, then odds.
void SplitEvensOdds(int8_t* xq, int64_t K) {
  int8_t tmp[64];
  for (int64_t b = 0; b + 64 <= K; b += 64) {
    for (int i = 0; i < 32; ++i) {
      tmp[i] = xq[b + 2 * i];
      tmp[32 + i] = xq[b + 2 * i + 1];
    }
    std::memcpy(xq + b, tmp, 64);
  }
}

void QuantizeScalar(const float* x, int64_t K, int group, int8_t* xq, float* xs, float* xsum) {
  for (int64_t g = 0; g < K / group; ++g) {
    const float* xg = x + g * group;
    float amax = 0, sum = 0;
    for (int i = 0; i < group; ++i) {
      amax = std::max(amax, std::fabs(xg[i]));
      sum += xg[i];
    }
    xsum[g] = sum;
    const float d = amax / 127.0f;
    xs[g] = d;
    const float inv = d > 0 ? 1.0f / d : 0.0f;
    for (int i = 0; i < group; ++i) {
      const float v = std::nearbyint(xg[i] * inv);
      xq[g * group + i] = static_cast<int8_t>(std::max(-127.0f, std::min(127.0f, v)));
    }
  }
}

// ---- scalar paths (fixed order: 8 partial sums, combined pairwise) -------------------------

template <typename Load>
float DotScalar(Load load, const float* x, int64_t K) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= K; k += 8)
    for (int l = 0; l < 8; ++l) s[l] += load(k + l) * x[k + l];
  float tail = 0;
  for (; k < K; ++k) tail += load(k) * x[k];
  return (((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))) + tail;
}

void GroupSums(const float* x, int64_t K, int group, float* xsum) {
  for (int64_t g = 0; g < K / group; ++g) {
    float s = 0;
    for (int i = 0; i < group; ++i) s += x[g * group + i];
    xsum[g] = s;
  }
}

void GemvScalar(WeightType type, const void* w, const uint16_t* scales, const uint16_t* biases, int group, const float* x, float* y,
                int64_t M, int64_t K, float* xsum) {
  if (Quantized(type)) GroupSums(x, K, group, xsum);
  for (int64_t m = 0; m < M; ++m) {
    switch (type) {
      case WeightType::kF32: {
        const float* r = static_cast<const float*>(w) + m * K;
        y[m] = DotScalar([r](int64_t k) { return r[k]; }, x, K);
        break;
      }
      case WeightType::kF16: {
        const uint16_t* r = static_cast<const uint16_t*>(w) + m * K;
        y[m] = DotScalar([r](int64_t k) { return F16(r[k]); }, x, K);
        break;
      }
      case WeightType::kBF16: {
        const uint16_t* r = static_cast<const uint16_t*>(w) + m * K;
        y[m] = DotScalar([r](int64_t k) { return Bf16(r[k]); }, x, K);
        break;
      }
      case WeightType::kQ8:
      case WeightType::kQ4: {
        const int64_t groups = K / group;
        float acc = 0;
        for (int64_t g = 0; g < groups; ++g) {
          float q = 0;
          for (int i = 0; i < group; ++i) {
            const int64_t k = g * group + i;
            float v;
            if (type == WeightType::kQ8) {
              v = static_cast<const uint8_t*>(w)[m * K + k];
            } else {
              const uint8_t b = static_cast<const uint8_t*>(w)[(m * K + k) >> 1];
              v = (k & 1) ? (b >> 4) : (b & 15);
            }
            q += v * x[k];
          }
          acc += F16(scales[m * groups + g]) * q + F16(biases[m * groups + g]) * xsum[g];
        }
        y[m] = acc;
        break;
      }
    }
  }
}

// ---- integer dot products with int8 activations (q8/q4 weights) ---------------------------


// y[m] = Σ_g s_g·xs_g·(Σ q·xq) + Σ_g b_g·xsum_g, the integer sums exact.
void GemvIntScalar(bool q4, const uint8_t* w, const uint16_t* scales, const uint16_t* biases, int group, const int8_t* xq,
                   const float* xs, const float* xsum, float* y, int64_t M, int64_t K) {
  const int64_t groups = K / group;
  const int64_t rowBytes = q4 ? K / 2 : K;
  for (int64_t m = 0; m < M; ++m) {
    const uint8_t* r = w + m * rowBytes;
    float acc = 0, bacc = 0;
    for (int64_t g = 0; g < groups; ++g) {
      int32_t dot = 0;
      if (q4) {
        // Two elements per byte; inside whole 64-element blocks xq is stored evens then odds.
        for (int64_t k = g * group; k < (g + 1) * group; k += 2) {
          const int lo = r[k >> 1] & 15, hi = r[k >> 1] >> 4;
          const int64_t b = k & ~int64_t{63};
          if (b + 64 <= K) dot += lo * xq[b + ((k - b) >> 1)] + hi * xq[b + 32 + ((k - b) >> 1)];
          else dot += lo * xq[k] + hi * xq[k + 1];
        }
      } else {
        for (int64_t k = g * group; k < (g + 1) * group; ++k) dot += r[k] * xq[k];
      }
      acc += F16(scales[m * groups + g]) * xs[g] * static_cast<float>(dot);
      bacc += F16(biases[m * groups + g]) * xsum[g];
    }
    y[m] = acc + bacc;
  }
}

}  // namespace voxslab::gemv
