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
#include "gemv_isa.h"
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

// Scratch: [tiles][K/4][16] dwords of activation bytes (dword c of every row in its lane, a
// tile's dwords one after another, so a pass reads them in order), then [tiles][groups][16]
// activation scales, as many group sums and as many integer group sums Σxq (AVX2 q8 adds
// 128·Σxq back), then one row's GemvInt scratch to quantize a row in.
struct Layout {
  int64_t xt, xs, xsum, xq, row;
  int64_t dwordsTile, groupsTile;  // from one tile's columns (dwords, groups) to the next
  Layout(int64_t n, int64_t K, int group) {
    const int64_t tiles = Tiles(n), groups = K / group;
    dwordsTile = K / 4 * kLanes;
    groupsTile = groups * kLanes;
    xt = 0;
    xs = xt + tiles * K * kLanes;
    xsum = xs + tiles * groups * kLanes * 4;
    xq = xsum + tiles * groups * kLanes * 4;
    row = xq + tiles * groups * kLanes * 4;
  }
};

// The integer GEMM takes K a multiple of 64 and groups of 32 or 64, with VNNI or AVX2.
bool UseIntGemm(int group, int64_t K) {
#if defined(VOXSLAB_X86) || defined(VOXSLAB_ARM)
  return ChosenIsa() != Isa::kScalar && K % 64 == 0 && (group == 32 || group == 64);
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
// Tiles whose sums a pass computes from one staging of its weight rows.
constexpr int64_t kTileGroup = 8;

// Weight rows [r0, r1) with Kernel's passes (Kernel::kRows rows each): per block of rows and
// group of tiles, the inputs a block at a time; the sums in acc, [row][tile][lane].
template <class Kernel>
void RunBlocks(const void* c, int64_t r0, int64_t r1) {
  const GemmIntTask& t = *static_cast<const GemmIntTask*>(c);
  const Layout L(t.n, t.K, Kernel::kGroup);
  const int64_t tiles = Tiles(t.n);
  const int64_t rowBytes = Kernel::kQ4 ? t.K / 2 : t.K;
  const int64_t kBlocks = (t.K + kKBlock - 1) / kKBlock;
  const int64_t groupsOfTiles = (tiles + kTileGroup - 1) / kTileGroup;
  alignas(64) float acc[kRowBlock * kTileGroup * kLanes];
  for (int64_t m0 = r0; m0 < r1; m0 += kRowBlock) {
    const int64_t mb = std::min(kRowBlock, r1 - m0);
    const int64_t next = std::min(kRowBlock, std::max<int64_t>(0, r1 - m0 - kRowBlock)) * rowBytes;
    const char* nb = static_cast<const char*>(t.w.data) + (m0 + kRowBlock) * rowBytes;
    for (int64_t tg = 0; tg < groupsOfTiles; ++tg) {
      const int64_t tile0 = tg * kTileGroup, nt = std::min(kTileGroup, tiles - tile0);
      std::memset(acc, 0, sizeof acc);
      for (int64_t k0 = 0; k0 < t.K; k0 += kKBlock) {
        const int64_t k1 = std::min(t.K, k0 + kKBlock);
        // The next block of rows (contiguous bytes), a slice per pass over this one, so it is
        // in cache when it starts.
        const int64_t step = tg * kBlocks + k0 / kKBlock, steps = groupsOfTiles * kBlocks;
        const int64_t from = next * step / steps, to = next * (step + 1) / steps;
        for (int64_t o = from & ~int64_t{63}; o < to; o += 64) _mm_prefetch(nb + o, _MM_HINT_T1);
        int64_t r = 0;
        for (; r + Kernel::kRows <= mb; r += Kernel::kRows) Kernel::template Pass<Kernel::kRows>(t, L, acc, r, m0 + r, tile0, nt, k0, k1);
        if constexpr (Kernel::kRows > 2)
          for (; r + 2 <= mb; r += 2) Kernel::template Pass<2>(t, L, acc, r, m0 + r, tile0, nt, k0, k1);
        for (; r < mb; ++r) Kernel::template Pass<1>(t, L, acc, r, m0 + r, tile0, nt, k0, k1);
      }
      // Output row by output row: each gets mb consecutive floats (rows M floats apart share an
      // L1 set, so a lane-by-lane order would evict every line it writes).
      for (int64_t l = 0; l < nt * kLanes && tile0 * kLanes + l < t.n; ++l) {
        float* y = t.Y + (tile0 * kLanes + l) * t.M + m0;
        for (int64_t r = 0; r < mb; ++r) y[r] = acc[r * nt * kLanes + l];
      }
    }
  }
}

// One pass's inputs: the first tile's activation columns, and R rows' weight bytes of inputs [k0, k1)
// staged in L1 (q4: low nibbles, then high nibbles, a byte each; q8: the bytes, or with
// `recentre` q − 128) so the products read every row from one base at constant offsets, with
// their scales and biases as f32.
template <bool Q4, int G, int R>
struct Staged {
  static constexpr int64_t stride = kLanes;  // from one dword (or group) of the columns to the next
  int64_t dwordsTile, groupsTile;           // the Layout's
  const int32_t* xt;
  const float* xs;
  const float* xsum;
  const int32_t* xq;
  int64_t gk, c0;  // the block's first group and first weight dword
  alignas(64) uint8_t wbuf[R][kKBlock];
  alignas(64) float sbuf[R][kKBlock / G];
  alignas(64) float bbuf[R][kKBlock / G];

  struct Cols {
    const int32_t* xt;
    const float* xs;
    const float* xsum;
    const int32_t* xq;
  };
  // Tile tt after the first: its activation bytes, scales and group sums.
  Cols Columns(int64_t tt) const { return {xt + tt * dwordsTile, xs + tt * groupsTile, xsum + tt * groupsTile, xq + tt * groupsTile}; }

  __attribute__((target("avx2,f16c"))) Staged(const GemmIntTask& t, const Layout& L, int64_t m, int64_t tile, int64_t k0, int64_t k1,
                                               bool recentre)
      : dwordsTile(L.dwordsTile),
        groupsTile(L.groupsTile),
        xt(reinterpret_cast<const int32_t*>(t.scratch + L.xt) + tile * dwordsTile),
        xs(reinterpret_cast<const float*>(t.scratch + L.xs) + tile * groupsTile),
        xsum(reinterpret_cast<const float*>(t.scratch + L.xsum) + tile * groupsTile),
        xq(reinterpret_cast<const int32_t*>(t.scratch + L.xq) + tile * groupsTile),
        gk(k0 / G),
        c0(Q4 ? k0 / 8 : k0 / 4) {
    const int64_t rowBytes = Q4 ? t.K / 2 : t.K;
    const int64_t groups = t.K / G;
    const auto* wb = static_cast<const uint8_t*>(t.w.data);
    const __m256i nib = _mm256_set1_epi8(15);
    const __m256i flip = _mm256_set1_epi8(recentre ? static_cast<char>(0x80) : 0);
    const int64_t span = Q4 ? (k1 - k0) / 2 : k1 - k0;  // weight bytes per row, a multiple of 32
    for (int r = 0; r < R; ++r) {
      const uint8_t* src = wb + (m + r) * rowBytes + (Q4 ? k0 / 2 : k0);
      for (int64_t o = 0; o < span; o += 32) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + o));
        if constexpr (Q4) {
          _mm256_store_si256(reinterpret_cast<__m256i*>(wbuf[r] + o), _mm256_and_si256(v, nib));
          _mm256_store_si256(reinterpret_cast<__m256i*>(wbuf[r] + kKBlock / 2 + o), _mm256_and_si256(_mm256_srli_epi16(v, 4), nib));
        } else {
          _mm256_store_si256(reinterpret_cast<__m256i*>(wbuf[r] + o), _mm256_xor_si256(v, flip));
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int64_t g = gk; g < k1 / G; ++g) {
        sbuf[r][g - gk] = _cvtsh_ss(t.w.scales[(m + r) * groups + g]);
        bbuf[r][g - gk] = _cvtsh_ss(t.w.biases[(m + r) * groups + g]);
      }
  }
};

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
  static constexpr bool kQ4 = Q4;
  static constexpr int kGroup = G;
  static constexpr int kRows = kRowsPerPass;
  static constexpr int64_t kDwordsPerGroup = Q4 ? G / 8 : G / 4;  // weight dwords in a group

  // R weight rows from `m` × tiles [tile0, tile0 + nt), inputs [k0, k1), into acc (f32
  // [kRowBlock][nt][16], rows relative to the row block).
  template <int R>
  VOXSLAB_VNNI static void Pass(const GemmIntTask& t, const Layout& L, float* acc, int64_t mrel, int64_t m, int64_t tile0, int64_t nt,
                                int64_t k0, int64_t k1) {
    const Staged<Q4, G, R> st(t, L, m, tile0, k0, k1, false);
    const int64_t gk = st.gk, c0 = st.c0;
    const int64_t stride = st.stride;
    for (int64_t tt = 0; tt < nt; ++tt) {
      const auto [xt, xs, xsum, xq] = st.Columns(tt);
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
            std::memcpy(&v, st.wbuf[r] + (c - c0) * 4, 4);
            std::memcpy(&u, st.wbuf[r] + (c - c0) * 4 + bo, 4);
            d[r] = _mm512_dpbusd_epi32(d[r], _mm512_set1_epi32(v), xe);
            e[r] = _mm512_dpbusd_epi32(e[r], _mm512_set1_epi32(u), xo);
          }
          // Each sum stays in its own register from one dword to the next (without this GCC copies
          // and spills them every iteration).
          for (int r = 0; r < R; ++r) __asm__("" : "+v"(d[r]), "+v"(e[r]));
        }
        for (int r = 0; r < R; ++r) {
          const __m512 s = _mm512_set1_ps(st.sbuf[r][g - gk]);
          const __m512 b = _mm512_set1_ps(st.bbuf[r][g - gk]);
          float* y = acc + ((mrel + r) * nt + tt) * kLanes;
          const __m512 sx = _mm512_mul_ps(s, _mm512_loadu_ps(xs + g * stride));
          __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(d[r], e[r])), sx, _mm512_loadu_ps(y));
          v = _mm512_fmadd_ps(b, _mm512_loadu_ps(xsum + g * stride), v);
          _mm512_storeu_ps(y, v);
        }
      }
    }
  }
};

#pragma GCC diagnostic pop
#undef VOXSLAB_VNNI

#define VOXSLAB_AVX2 __attribute__((target("avx2,fma,f16c")))

// The same arithmetic on AVX2, eight lanes (half a tile) at a time: the same layout, the same
// exact D_g and the same f32 operations per lane, so its bits are VnniGemm's. vpmaddubsw pairs
// a broadcast weight dword's unsigned bytes with each lane's four int8 inputs into 16 bits and
// vpmaddwd sums the pairs into the lane. q4: the low- and high-nibble pairs of a dword are each at
// most 2·15·127, so four iterations' worth add in 16 bits before they widen. q8: bytes are
// recentred to q − 128 (vpsignb moves the sign to the inputs: |q − 128|·127·2 < 2^15) and
// 128·Σxq of the lane's group inputs is added back.
template <bool Q4, int G>
struct Avx2Gemm {
  static constexpr bool kQ4 = Q4;
  static constexpr int kGroup = G;
  static constexpr int64_t kDwordsPerGroup = Q4 ? G / 8 : G / 4;
  static constexpr int kRows = Q4 ? 3 : 4;  // weight rows a pass keeps in registers (q4: three keep every sum in a register)

  template <int R>
  VOXSLAB_AVX2 static void Pass(const GemmIntTask& t, const Layout& L, float* acc, int64_t mrel, int64_t m, int64_t tile0, int64_t nt,
                                int64_t k0, int64_t k1) {
    const Staged<Q4, G, R> st(t, L, m, tile0, k0, k1, true);
    for (int64_t tt = 0; tt < nt; ++tt) {
      float* y = acc + (mrel * nt + tt) * kLanes;
      // A last tile with no live lane in its upper half computes only the lower one.
      if ((tile0 + tt) * kLanes + 8 >= t.n) Tile<R, 1>(st, st.Columns(tt), y, nt * kLanes, k1);
      else Tile<R, 2>(st, st.Columns(tt), y, nt * kLanes, k1);
    }
  }

  // One tile's H halves (eight lanes each) of R rows' sums, inputs [st's k0, k1): y is row 0's
  // tile in acc, rowStride from one row's to the next.
  template <int R, int H>
  VOXSLAB_AVX2 static void Tile(const Staged<Q4, G, R>& st, const typename Staged<Q4, G, R>::Cols& cols, float* y0, int64_t rowStride,
                                int64_t k1) {
    const int64_t gk = st.gk, c0 = st.c0;
    const __m256i ones16 = _mm256_set1_epi16(1);
    const int64_t stride = st.stride;
    const auto [xt, xs, xsum, xqs] = cols;
    for (int64_t g = gk; g < k1 / G; ++g) {
      // Both halves of the tile per weight dword, so each broadcast serves sixteen lanes.
      __m256i d[R][H];
      for (int r = 0; r < R; ++r)
        for (int h = 0; h < H; ++h) d[r][h] = _mm256_setzero_si256();
      if constexpr (Q4) {
        // Iterations of two dwords (low nibbles of the evens, high of the odds), four at a time in 16 bits.
        for (int64_t c4 = g * kDwordsPerGroup; c4 < (g + 1) * kDwordsPerGroup; c4 += 4) {
          __m256i p[R][H];
          for (int r = 0; r < R; ++r)
            for (int h = 0; h < H; ++h) p[r][h] = _mm256_setzero_si256();
          // Four consecutive dwords stay within one 64-input block: their evens are consecutive.
          const int32_t* xe = xt + ((c4 / 8) * 16 + c4 % 8) * stride;
          const uint8_t* wv = &st.wbuf[0][0] + (c4 - c0) * 4;
#pragma GCC unroll 1
          for (int i = 0; i < 4; ++i, xe += stride, wv += 4) {
            __m256i xe_[H], xo_[H];
            for (int h = 0; h < H; ++h) {
              xe_[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xe + 8 * h));
              xo_[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xe + 8 * stride + 8 * h));
            }
            for (int r = 0; r < R; ++r) {
              int32_t v, u;
              std::memcpy(&v, wv + r * kKBlock, 4);
              std::memcpy(&u, wv + r * kKBlock + kKBlock / 2, 4);
              const __m256i bv = _mm256_set1_epi32(v), bu = _mm256_set1_epi32(u);
              for (int h = 0; h < H; ++h)
                p[r][h] = _mm256_add_epi16(p[r][h], _mm256_add_epi16(_mm256_maddubs_epi16(bv, xe_[h]), _mm256_maddubs_epi16(bu, xo_[h])));
            }
            // The sums stay in registers from one dword to the next (GCC spills them otherwise).
            for (int r = 0; r < R; ++r)
              for (int h = 0; h < H; ++h) __asm__("" : "+x"(p[r][h]));
          }
          for (int r = 0; r < R; ++r)
            for (int h = 0; h < H; ++h) d[r][h] = _mm256_add_epi32(d[r][h], _mm256_madd_epi16(p[r][h], ones16));
        }
      } else {
        for (int64_t c = g * kDwordsPerGroup; c < (g + 1) * kDwordsPerGroup; ++c) {
          __m256i x[H];
          for (int h = 0; h < H; ++h) x[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xt + c * stride + 8 * h));
          for (int r = 0; r < R; ++r) {
            int32_t v;
            std::memcpy(&v, st.wbuf[r] + (c - c0) * 4, 4);
            const __m256i a = _mm256_set1_epi32(v);
            const __m256i ua = _mm256_sign_epi8(a, a);
            for (int h = 0; h < H; ++h)
              d[r][h] = _mm256_add_epi32(d[r][h], _mm256_madd_epi16(_mm256_maddubs_epi16(ua, _mm256_sign_epi8(x[h], a)), ones16));
          }
        }
      }
      for (int r = 0; r < R; ++r) {
        const __m256 s = _mm256_set1_ps(st.sbuf[r][g - gk]);
        const __m256 b = _mm256_set1_ps(st.bbuf[r][g - gk]);
        for (int h = 0; h < H; ++h) {
          const __m256i D =
              Q4 ? d[r][h] : _mm256_add_epi32(d[r][h], _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xqs + g * stride + h * 8)), 7));
          float* y = y0 + r * rowStride + h * 8;
          const __m256 sx = _mm256_mul_ps(s, _mm256_loadu_ps(xs + g * stride + h * 8));
          __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(D), sx, _mm256_loadu_ps(y));
          v = _mm256_fmadd_ps(b, _mm256_loadu_ps(xsum + g * stride + h * 8), v);
          _mm256_storeu_ps(y, v);
        }
      }
    }
  }
};
#undef VOXSLAB_AVX2
#endif

#ifdef VOXSLAB_ARM
struct NeonGemmTask {
  WeightRef w;
  const uint8_t* scratch;
  float* Y;
  int64_t per, n, M, K;
};

void RunNeonRows(const void* c, int64_t r0, int64_t r1) {
  const NeonGemmTask& t = *static_cast<const NeonGemmTask*>(c);
  gemv::GemmIntNeonRows(t.w.type == WeightType::kQ4, t.w.group, static_cast<const uint8_t*>(t.w.data), t.w.scales, t.w.biases, t.K, t.M,
                        r0, r1, t.scratch, t.per, t.n, t.Y);
}
#endif

}  // namespace

int64_t GemmIntScratchBytes(int64_t n, int64_t K, int group) {
  if (group <= 0) return 0;
  const Layout L(n, K, group);
  return std::max(L.row + GemvIntScratchBytes(K, group), GemvRowsScratchBytes(n, K, group));
}

void GemmInt(WeightType type, const void* w, const uint16_t* scales, const uint16_t* biases, int group, const float* X, float* Y,
             int64_t n, int64_t M, int64_t K, void* scratch) {
  if (!UseIntGemm(group, K)) {
    GemvRows(type, w, scales, biases, group, X, Y, n, M, K, scratch);
    return;
  }
#ifdef VOXSLAB_ARM
  // Each row quantized as GemvRows quantizes it; the tiles (gemv_neon_int.h) read them there.
  const int64_t per = GemvIntScratchBytes(K, group);
  gemv::QuantizeRows(X, n, K, group, type == WeightType::kQ4, scratch, per);
  const NeonGemmTask task{{type, w, scales, biases, group}, static_cast<const uint8_t*>(scratch), Y, per, n, M, K};
  Pool().Run(RunNeonRows, &task, M, 4, n * M * K);
#endif
#ifdef VOXSLAB_X86
  const bool q4 = type == WeightType::kQ4;
  const int64_t groups = K / group;
  const Layout L(n, K, group);
  auto* base = static_cast<uint8_t*>(scratch);
  auto* xt = reinterpret_cast<int32_t*>(base + L.xt);
  auto* xs = reinterpret_cast<float*>(base + L.xs);
  auto* xsum = reinterpret_cast<float*>(base + L.xsum);
  auto* xq = reinterpret_cast<int32_t*>(base + L.xq);
  float* rsum = reinterpret_cast<float*>(base + L.row);
  float* rs = rsum + groups;
  int8_t* rq = reinterpret_cast<int8_t*>(rs + groups);
  // Each row quantized as GemvInt quantizes it, then spread into its tile's lane; the padding
  // lanes of the last tile are zeros.
  const int64_t tiles = Tiles(n);
  for (int64_t a = 0; a < tiles * kLanes; ++a) {
    const int64_t stride = kLanes, tile = a / kLanes, lane = a % kLanes;
    int32_t* xta = xt + tile * L.dwordsTile + lane;
    float* xsa = xs + tile * L.groupsTile + lane;
    float* xsuma = xsum + tile * L.groupsTile + lane;
    int32_t* xqa = xq + tile * L.groupsTile + lane;
    if (a < n) {
      QuantizeActivations(X + a * K, K, group, q4, rq, rs, rsum);
      for (int64_t c = 0; c < K / 4; ++c) std::memcpy(xta + c * stride, rq + 4 * c, 4);
      for (int64_t g = 0; g < groups; ++g) {
        int32_t s = 0;
        for (int64_t i = g * group; i < (g + 1) * group; ++i) s += rq[i];
        xsa[g * stride] = rs[g], xsuma[g * stride] = rsum[g], xqa[g * stride] = s;
      }
    } else {
      for (int64_t c = 0; c < K / 4; ++c) xta[c * stride] = 0;
      for (int64_t g = 0; g < groups; ++g) xsa[g * stride] = 0, xsuma[g * stride] = 0, xqa[g * stride] = 0;
    }
  }
  const GemmIntTask task{{type, w, scales, biases, group}, base, Y, n, M, K};
  RowPool::Fn fn;
  if (ChosenVnni()) {
    if (q4) fn = group == 32 ? RunBlocks<VnniGemm<true, 32>> : RunBlocks<VnniGemm<true, 64>>;
    else fn = group == 32 ? RunBlocks<VnniGemm<false, 32>> : RunBlocks<VnniGemm<false, 64>>;
  } else {
    if (q4) fn = group == 32 ? RunBlocks<Avx2Gemm<true, 32>> : RunBlocks<Avx2Gemm<true, 64>>;
    else fn = group == 32 ? RunBlocks<Avx2Gemm<false, 32>> : RunBlocks<Avx2Gemm<false, 64>>;
  }
  Pool().Run(fn, &task, M, kRowBlock, n * M * K);
#endif
}

}  // namespace voxslab
