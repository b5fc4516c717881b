// Tiled attention with an online softmax, and the vector helpers it runs on.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu.h"
#include "kernels.h"
#include "simd.h"

namespace voxslab {

namespace {

float DotF(const float* a, const float* b, int64_t n) { return DotFixed4(a, b, n); }

#ifdef VOXSLAB_X86
__attribute__((target("avx2,fma"))) float DotAvx(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float t = 0;
  for (; i < n; ++i) t += a[i] * b[i];
  return Hsum(_mm256_add_ps(s0, s1)) + t;
}
#endif

// y += a·x over n floats.
void AxpyF(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

#ifdef VOXSLAB_X86
__attribute__((target("avx2,fma"))) void AxpyAvx(float a, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}
#endif

void HalfRowScalar(const uint16_t* h, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = F16(h[i]);
}

#ifdef VOXSLAB_X86
__attribute__((target("avx2,f16c"))) void HalfRowF16c(const uint16_t* h, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  for (; i < n; ++i) out[i] = F16(h[i]);
}
#endif

// The helpers' paths follow the kernels' chosen instruction set (cpu.h).
#ifdef VOXSLAB_X86
const bool kVector = ChosenIsa() != Isa::kScalar;
const auto kAxpy = kVector ? AxpyAvx : AxpyF;
const auto kDotF = kVector ? DotAvx : DotF;
const auto kHalfRow = kVector ? HalfRowF16c : HalfRowScalar;
#else
const auto kAxpy = AxpyF;
const auto kDotF = DotF;
const auto kHalfRow = HalfRowScalar;
#endif

}  // namespace

int64_t AttentionScratchFloats(int64_t tq, int64_t tk, int64_t hd, int64_t group) {
  // scores [tq][tk]; per query head of a KV group: max and sum [tq], acc, q+u and q+v [tq][hd];
  // one widened key row and one value row [hd] (f16 caches).
  return tq * tk + group * (2 * tq + 3 * tq * hd) + 2 * hd;
}

void Attention(const AttentionParams& a, const float* q, const void* kraw, const void* vraw, float* out, const float* p,
               const float* u, const float* vb, float* scratch) {
  const int64_t hd = a.hd;
  const int64_t group = a.Hq / a.Hkv;
  const int64_t tq = a.tq;
  float* sc = scratch;
  float* mx = sc + tq * a.tk;       // [group][tq]
  float* sm = mx + group * tq;      // [group][tq]
  float* acc = sm + group * tq;     // [group][tq][hd]
  float* qu = acc + group * tq * hd;
  float* qv = qu + group * tq * hd;
  float* krow = qv + group * tq * hd;
  float* vrow = krow + hd;
  const bool rel = p != nullptr;
  const float* kf = static_cast<const float*>(kraw);
  const float* vf = static_cast<const float*>(vraw);
  const uint16_t* kh16 = static_cast<const uint16_t*>(kraw);
  const uint16_t* vh16 = static_cast<const uint16_t*>(vraw);
  auto keyRow = [&](int64_t at) -> const float* {
    if (!a.kvF16) return kf + at;
    kHalfRow(kh16 + at, krow, hd);
    return krow;
  };
  auto valueRow = [&](int64_t at) -> const float* {
    if (!a.kvF16) return vf + at;
    kHalfRow(vh16 + at, vrow, hd);
    return vrow;
  };
  // KV head outermost: each key tile serves every query head of its group while it is cached.
  for (int64_t kh = 0; kh < a.Hkv; ++kh) {
    for (int64_t i0 = 0; i0 < a.Tq; i0 += tq) {
      const int64_t nq = std::min(tq, a.Tq - i0);
      for (int64_t gh = 0; gh < group; ++gh) {
        const int64_t h = kh * group + gh;
        for (int64_t i = 0; i < nq; ++i) {
          const int64_t s = gh * tq + i;
          mx[s] = -INFINITY;
          sm[s] = 0.0f;
          const float* qi = q + ((i0 + i) * a.Hq + h) * hd;
          for (int64_t d = 0; d < hd; ++d) {
            acc[s * hd + d] = 0.0f;
            qu[s * hd + d] = rel ? qi[d] + u[h * hd + d] : qi[d];
            qv[s * hd + d] = rel ? qi[d] + vb[h * hd + d] : 0.0f;
          }
        }
      }
      // Key range any query of the tile can see.
      const int64_t qlo = a.qpos0 + i0, qhi = a.qpos0 + i0 + nq - 1;
      int64_t jlo = 0, jhi = a.Tk - 1;
      if (a.mask != AttentionMask::kFull) jhi = std::min(jhi, qhi - a.kpos0);
      if (a.mask == AttentionMask::kSliding) jlo = std::max<int64_t>(0, qlo - a.window + 1 - a.kpos0);
      for (int64_t j0 = jlo; j0 <= jhi; j0 += a.tk) {
        const int64_t nk = std::min(a.tk, jhi - j0 + 1);
        for (int64_t gh = 0; gh < group; ++gh) {
          const int64_t h = kh * group + gh;
          for (int64_t i = 0; i < nq; ++i) {
            const int64_t st = gh * tq + i;
            const int64_t qp = a.qpos0 + i0 + i;
            float tileMax = -INFINITY;
            for (int64_t jj = 0; jj < nk; ++jj) {
              const int64_t j = j0 + jj;
              const int64_t kp = a.kpos0 + j;
              const bool visible = a.mask == AttentionMask::kFull || (kp <= qp && (a.mask == AttentionMask::kCausal || kp > qp - a.window));
              float s = -INFINITY;
              if (visible) {
                s = kDotF(qu + st * hd, keyRow((j * a.Hkv + kh) * hd), hd);
                if (rel) s += kDotF(qv + st * hd, p + ((a.Tk - 1 - ((i0 + i) - j)) * a.Hq + h) * hd, hd);
                s *= a.scale;
              }
              sc[i * a.tk + jj] = s;
              tileMax = std::max(tileMax, s);
            }
            if (tileMax == -INFINITY) continue;
            const float m = std::max(mx[st], tileMax);
            const float alpha = mx[st] == -INFINITY ? 0.0f : std::exp(mx[st] - m);
            float* ai = acc + st * hd;
            if (alpha != 1.0f)
              for (int64_t d = 0; d < hd; ++d) ai[d] *= alpha;
            float l = sm[st] * alpha;
            for (int64_t jj = 0; jj < nk; ++jj) {
              const float s = sc[i * a.tk + jj];
              if (s == -INFINITY) continue;
              const float w = std::exp(s - m);
              l += w;
              kAxpy(w, valueRow(((j0 + jj) * a.Hkv + kh) * hd), ai, hd);
            }
            mx[st] = m;
            sm[st] = l;
          }
        }
      }
      for (int64_t gh = 0; gh < group; ++gh) {
        const int64_t h = kh * group + gh;
        for (int64_t i = 0; i < nq; ++i) {
          const int64_t st = gh * tq + i;
          float* o = out + ((i0 + i) * a.Hq + h) * hd;
          const float inv = sm[st] > 0 ? 1.0f / sm[st] : 0.0f;
          for (int64_t d = 0; d < hd; ++d) o[d] = acc[st * hd + d] * inv;
        }
      }
    }
  }
}

}  // namespace voxslab
