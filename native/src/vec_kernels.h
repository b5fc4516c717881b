// Kernels written once for every vector width. vec.h includes this once per instruction set,
// inside that set's `#pragma GCC target` region and namespace. No include guard: that is the point.

// MR×(2·kLanes) tile: C[MR][2·kLanes] (+)= A rows (stride lda) × packed W panel [kc][2·kLanes].
// MR is a constant, so the unrolled loops index the accumulators by constants and they stay in
// registers for the whole k loop.
template <int MR>
struct Micro {
  static void Run(const float* A, int64_t lda, const float* P, int64_t kc, float* C, int64_t ldc, int64_t nr, bool first,
                  const float* bias) {
    Vec c[MR][2];
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) c[i][0] = c[i][1] = Zero();
    for (int64_t k = 0; k < kc; ++k) {
      const Vec b0 = Load(P + k * 2 * kLanes);
      const Vec b1 = Load(P + k * 2 * kLanes + kLanes);
#pragma GCC unroll 6
      for (int i = 0; i < MR; ++i) {
        const Vec a = Splat(A[i * lda + k]);
        c[i][0] = Fma(a, b0, c[i][0]);
        c[i][1] = Fma(a, b1, c[i][1]);
      }
    }
    alignas(64) float tmp[MR][2 * kLanes];
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      Store(tmp[i], c[i][0]);
      Store(tmp[i] + kLanes, c[i][1]);
    }
    WriteTile(tmp[0], 2 * kLanes, MR, C, ldc, nr, first, bias);
  }
};

// Peak FMA throughput: `iterations` × 12 independent chains of kLanes; returns a value derived
// from the registers so the work cannot be elided.
inline float FmaProbe(int64_t iterations) {
  Vec a[12];
  for (int i = 0; i < 12; ++i) a[i] = Splat(0.001f * static_cast<float>(i));
  const Vec m = Splat(0.999999f);
  const Vec c = Splat(1e-7f);
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < 12; ++i) a[i] = Fma(a[i], m, c);
  Vec s = a[0];
  for (int i = 1; i < 12; ++i) s = Add(s, a[i]);
  return Sum(s);
}
