// Integer GEMM for prefill: q8/q4 weights times many int8-quantized activation rows with AVX-512
// VNNI, activations in the lanes. A GEMV puts a weight row's inputs in the lanes, so every group
// ends in a conversion and a scale per lane; here a lane is one activation row, four of a weight
// row's bytes are broadcast to all sixteen, and a whole group's integer sum stays in the lane
// before its one conversion. Without VNNI, or for shapes the vector kernels do not take, it is
// GemvRows.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu.h"
#include "kernels.h"
#include "pool.h"
#include "simd.h"

namespace voxslab {

namespace {

constexpr int64_t kLanes = 16;     // activation rows per tile, one per lane
constexpr int kRowsPerPass = 8;     // weight rows a pass keeps in registers (two sums each)
constexpr int64_t kRowBlock = 32;   // weight rows whose f32 sums stay in a stack buffer
constexpr int64_t kKBlock = 256;    // inputs per pass (a multiple of 64)

int64_t Tiles(int64_t n) { return (n + kLanes - 1) / kLanes; }

// Scratch: [K/4][tiles][16] dwords of activation bytes (dword c of every row in its lane, the
// tiles side by side), then [groups][tiles][16] activation scales and as many group
// sums, then one row's GemvInt scratch to quantize a row in.
struct Layout {
  int64_t xt, xs, xsum, row;
  Layout(int64_t n, int64_t K, int group) {
    const int64_t tiles = Tiles(n), groups = K / group;
    xt = 0;
    xs = xt + tiles * K * kLanes;
    xsum = xs + tiles * groups * kLanes * 4;
    row = xsum + tiles * groups * kLanes * 4;
  }
};

bool UseVnniGemm(int group, int64_t K) {
#ifdef VOXSLAB_X86
  return ChosenVnni() && K % 64 == 0 && (group == 32 || group == 64);
#else
  (void)group;
  (void)K;
  return false;
#endif
}

struct GemmIntTask {
  WeightRef w;
  const uint8_t* scratch;
  float* Y;
  int64_t n, M, K;
};

#ifdef VOXSLAB_X86
#define VOXSLAB_VNNI __attribute__((target("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")))
// GCC 12 reports the intrinsics' own undefined pass-through operands as uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Per (weight row r, activation a), in group order: y = fma(float(D_g), s_g·xs_g, y), then
// y = fma(b_g, Σx_g, y), where D_g is the group's exact integer dot product. Every step is per
// lane, so an output's bits do not depend on the tile, the pass or the thread that computes it.
template <bool Q4, int G>
struct VnniGemm {
  static constexpr int64_t kDwordsPerGroup = Q4 ? G / 8 : G / 4;  // weight dwords in a group

  // R weight rows from `m` × one tile, inputs [k0, k1), into acc (f32 [kRowBlock][16], rows
  // relative to the row block).
  template <int R>
  VOXSLAB_VNNI static void Pass(const GemmIntTask& t, const Layout& L, float* acc, int64_t mrel, int64_t m, int64_t tile, int64_t k0,
                                int64_t k1) {
    const int64_t K = t.K;
    const int64_t groups = K / G;
    const int64_t rowBytes = Q4 ? K / 2 : K;
    const auto* wb = static_cast<const uint8_t*>(t.w.data);
    const int64_t stride = Tiles(t.n) * kLanes;  // from one dword (or group) to the next
    const auto* xt = reinterpret_cast<const int32_t*>(t.scratch + L.xt) + tile * kLanes;
    const auto* xs = reinterpret_cast<const float*>(t.scratch + L.xs) + tile * kLanes;
    const auto* xsum = reinterpret_cast<const float*>(t.scratch + L.xsum) + tile * kLanes;
    const __m256i nib = _mm256_set1_epi8(15);
    // The rows' bytes of this input block, staged in L1 (q4: low nibbles, then high nibbles, a
    // byte each), so the products below read every row from one base at constant offsets.
    alignas(64) uint8_t wbuf[R][kKBlock];
    const int64_t span = Q4 ? (k1 - k0) / 2 : k1 - k0;  // weight bytes per row, a multiple of 32
    for (int r = 0; r < R; ++r) {
      const uint8_t* src = wb + (m + r) * rowBytes + (Q4 ? k0 / 2 : k0);
      for (int64_t o = 0; o < span; o += 32) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + o));
        if constexpr (Q4) {
          _mm256_store_si256(reinterpret_cast<__m256i*>(wbuf[r] + o), _mm256_and_si256(v, nib));
          _mm256_store_si256(reinterpret_cast<__m256i*>(wbuf[r] + kKBlock / 2 + o), _mm256_and_si256(_mm256_srli_epi16(v, 4), nib));
        } else {
          _mm256_store_si256(reinterpret_cast<__m256i*>(wbuf[r] + o), v);
        }
      }
    }
    // Their scales and biases as f32, one per group of the block.
    constexpr int64_t kBlockGroups = kKBlock / G;
    alignas(64) float sbuf[R][kBlockGroups], bbuf[R][kBlockGroups];
    const int64_t gk = k0 / G;
    for (int r = 0; r < R; ++r)
      for (int64_t g = gk; g < k1 / G; ++g) {
        sbuf[r][g - gk] = _cvtsh_ss(t.w.scales[(m + r) * groups + g]);
        bbuf[r][g - gk] = _cvtsh_ss(t.w.biases[(m + r) * groups + g]);
      }
    const int64_t c0 = Q4 ? k0 / 8 : k0 / 4;
    for (int64_t g = gk; g < k1 / G; ++g) {
      // Two accumulators per output (q4: low and high nibbles; q8: even and odd dwords), so
      // twice as many independent chains hide the products' latency.
      __m512i d[R], e[R];
      for (int r = 0; r < R; ++r) d[r] = e[r] = _mm512_setzero_si512();
      for (int64_t c = g * kDwordsPerGroup; c < (g + 1) * kDwordsPerGroup; c += Q4 ? 1 : 2) {
        // q4: weight dword c of each row holds 8 inputs, whose low nibbles are the evens of a
        // 64-input block's dword c % 8 and high nibbles its odds (stored 32 bytes later). q8:
        // dwords c and c + 1, 4 inputs each.
        const int64_t ce = Q4 ? (c / 8) * 16 + c % 8 : c;
        const int64_t co = Q4 ? ce + 8 : c + 1;
        const int64_t bo = Q4 ? kKBlock / 2 : 4;  // the second dword's offset in the staged row
        const __m512i xe = _mm512_loadu_si512(xt + ce * stride);
        const __m512i xo = _mm512_loadu_si512(xt + co * stride);
        for (int r = 0; r < R; ++r) {
          int32_t v, u;
          std::memcpy(&v, wbuf[r] + (c - c0) * 4, 4);
          std::memcpy(&u, wbuf[r] + (c - c0) * 4 + bo, 4);
          d[r] = _mm512_dpbusd_epi32(d[r], _mm512_set1_epi32(v), xe);
          e[r] = _mm512_dpbusd_epi32(e[r], _mm512_set1_epi32(u), xo);
        }
        // Each sum stays in its own register from one dword to the next (without this GCC copies
        // and spills them every iteration).
        for (int r = 0; r < R; ++r) __asm__("" : "+v"(d[r]), "+v"(e[r]));
      }
      for (int r = 0; r < R; ++r) {
        const __m512 s = _mm512_set1_ps(sbuf[r][g - gk]);
        const __m512 b = _mm512_set1_ps(bbuf[r][g - gk]);
        float* y = acc + (mrel + r) * kLanes;
        const __m512 sx = _mm512_mul_ps(s, _mm512_loadu_ps(xs + g * stride));
        __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(d[r], e[r])), sx, _mm512_loadu_ps(y));
        v = _mm512_fmadd_ps(b, _mm512_loadu_ps(xsum + g * stride), v);
        _mm512_storeu_ps(y, v);
      }
    }
  }


  // Weight rows [r0, r1): per block of rows and tile, the inputs a block at a time.
  VOXSLAB_VNNI static void Run(const void* c, int64_t r0, int64_t r1) {
    const GemmIntTask& t = *static_cast<const GemmIntTask*>(c);
    const Layout L(t.n, t.K, G);
    const int64_t tiles = Tiles(t.n);
    const int64_t rowBytes = Q4 ? t.K / 2 : t.K;
    const int64_t kBlocks = (t.K + kKBlock - 1) / kKBlock;
    alignas(64) float acc[kRowBlock * kLanes];
    for (int64_t m0 = r0; m0 < r1; m0 += kRowBlock) {
      const int64_t mb = std::min(kRowBlock, r1 - m0);
      const int64_t next = std::min(kRowBlock, std::max<int64_t>(0, r1 - m0 - kRowBlock)) * rowBytes;
      const char* nb = static_cast<const char*>(t.w.data) + (m0 + kRowBlock) * rowBytes;
      for (int64_t tile = 0; tile < tiles; ++tile) {
        std::memset(acc, 0, sizeof acc);
        for (int64_t k0 = 0; k0 < t.K; k0 += kKBlock) {
          const int64_t k1 = std::min(t.K, k0 + kKBlock);
          // The next block of rows (contiguous bytes), a slice per pass over this one, so it is
          // in cache when it starts.
          const int64_t step = tile * kBlocks + k0 / kKBlock;
          const int64_t from = next * step / (tiles * kBlocks), to = next * (step + 1) / (tiles * kBlocks);
          for (int64_t o = from & ~int64_t{63}; o < to; o += 64) _mm_prefetch(nb + o, _MM_HINT_T1);
          int64_t r = 0;
          for (; r + kRowsPerPass <= mb; r += kRowsPerPass) Pass<kRowsPerPass>(t, L, acc, r, m0 + r, tile, k0, k1);
          for (; r < mb; ++r) Pass<1>(t, L, acc, r, m0 + r, tile, k0, k1);
        }
        for (int64_t r = 0; r < mb; ++r)
          for (int64_t l = 0; l < kLanes && tile * kLanes + l < t.n; ++l) t.Y[(tile * kLanes + l) * t.M + m0 + r] = acc[r * kLanes + l];
      }
    }
  }
};

#pragma GCC diagnostic pop
#undef VOXSLAB_VNNI
#endif

}  // namespace

int64_t GemmIntScratchBytes(int64_t n, int64_t K, int group) {
  if (group <= 0) return 0;
  const Layout L(n, K, group);
  return std::max(L.row + GemvIntScratchBytes(K, group), GemvRowsScratchBytes(n, K, group));
}

void GemmInt(WeightType type, const void* w, const uint16_t* scales, const uint16_t* biases, int group, const float* X, float* Y,
             int64_t n, int64_t M, int64_t K, void* scratch) {
  if (!UseVnniGemm(group, K)) {
    GemvRows(type, w, scales, biases, group, X, Y, n, M, K, scratch);
    return;
  }
#ifdef VOXSLAB_X86
  const bool q4 = type == WeightType::kQ4;
  const int64_t groups = K / group;
  const Layout L(n, K, group);
  auto* base = static_cast<uint8_t*>(scratch);
  auto* xt = reinterpret_cast<int32_t*>(base + L.xt);
  auto* xs = reinterpret_cast<float*>(base + L.xs);
  auto* xsum = reinterpret_cast<float*>(base + L.xsum);
  float* rsum = reinterpret_cast<float*>(base + L.row);
  float* rs = rsum + groups;
  int8_t* rq = reinterpret_cast<int8_t*>(rs + groups);
  // Each row quantized as GemvInt quantizes it, then spread into its tile's lane; the padding
  // lanes of the last tile are zeros.
  const int64_t tiles = Tiles(n);
  for (int64_t a = 0; a < tiles * kLanes; ++a) {
    const int64_t stride = tiles * kLanes;
    int32_t* xta = xt + a;
    float* xsa = xs + a;
    float* xsuma = xsum + a;
    if (a < n) {
      QuantizeActivations(X + a * K, K, group, q4, rq, rs, rsum);
      for (int64_t c = 0; c < K / 4; ++c) std::memcpy(xta + c * stride, rq + 4 * c, 4);
      for (int64_t g = 0; g < groups; ++g) xsa[g * stride] = rs[g], xsuma[g * stride] = rsum[g];
    } else {
      for (int64_t c = 0; c < K / 4; ++c) xta[c * stride] = 0;
      for (int64_t g = 0; g < groups; ++g) xsa[g * stride] = 0, xsuma[g * stride] = 0;
    }
  }
  const GemmIntTask task{{type, w, scales, biases, group}, base, Y, n, M, K};
  RowPool::Fn fn;
  if (q4) fn = group == 32 ? VnniGemm<true, 32>::Run : VnniGemm<true, 64>::Run;
  else fn = group == 32 ? VnniGemm<false, 32>::Run : VnniGemm<false, 64>::Run;
  Pool().Run(fn, &task, M, kRowBlock, n * M * K);
#endif
}

}  // namespace voxslab
