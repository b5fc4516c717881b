// The integer GEMV rows at one AArch64 level, included by gemv_neon.cc once per level inside
// that level's target region and namespace (VOXSLAB_NEON_LEVEL), with one of
// VOXSLAB_NEON_LANES_NEON, _DOTPROD or _I8MM set. No include guard: that is the point.

namespace voxslab::gemv {
namespace VOXSLAB_NEON_LEVEL {

// A 32-byte weight block ready for Lanes: q8 its bytes (dotprod: q − 128 as int8), q4 the low
// nibbles of bytes 0–15 and 16–31, then their high nibbles.
struct Block {
  uint8x16_t v[4];
};

inline Block Unpack(bool q4, const uint8_t* p) {
  Block b;
  const uint8x16_t a = vld1q_u8(p), c = vld1q_u8(p + 16);
  if (q4) {
    const uint8x16_t nib = vdupq_n_u8(15);
    b.v[0] = vandq_u8(a, nib);
    b.v[1] = vandq_u8(c, nib);
    b.v[2] = vshrq_n_u8(a, 4);
    b.v[3] = vshrq_n_u8(c, 4);
  } else {
#ifdef VOXSLAB_NEON_LANES_DOTPROD
    b.v[0] = veorq_u8(a, vdupq_n_u8(0x80));
    b.v[1] = veorq_u8(c, vdupq_n_u8(0x80));
#else
    b.v[0] = a;
    b.v[1] = c;
#endif
    b.v[2] = b.v[3] = vdupq_n_u8(0);
  }
  return b;
}

// acc plus, per lane j, the sum of products 4j … 4j + 3 of w (unsigned; dotprod q8: signed) and x.
inline int32x4_t Dot4(int32x4_t acc, uint8x16_t w, int8x16_t x) {
#if defined(VOXSLAB_NEON_LANES_I8MM)
  return vusdotq_s32(acc, w, x);
#elif defined(VOXSLAB_NEON_LANES_DOTPROD)
  return vdotq_s32(acc, vreinterpretq_s8_u8(w), x);
#else
  // |q|·127 < 2^15: each product fits 16 bits; pairs, then pairs of pairs, widen to the lanes.
  const int16x8_t lo = vmulq_s16(vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(w))), vmovl_s8(vget_low_s8(x)));
  const int16x8_t hi = vmulq_s16(vreinterpretq_s16_u16(vmovl_high_u8(w)), vmovl_high_s8(x));
  return vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)));
#endif
}

// The eight integer lanes of one block against its activations x (q8: 32 bytes; q4: 32 evens,
// then 32 odds): lanes 0–3 in lo, 4–7 in hi, as the AVX2 integer GEMV makes them.
inline void Lanes(bool q4, const Block& b, const int8_t* x, int32x4_t& lo, int32x4_t& hi) {
  const int32x4_t z = vdupq_n_s32(0);
  if (q4) {
    lo = Dot4(Dot4(z, b.v[0], vld1q_s8(x)), b.v[2], vld1q_s8(x + 32));
    hi = Dot4(Dot4(z, b.v[1], vld1q_s8(x + 16)), b.v[3], vld1q_s8(x + 48));
    return;
  }
  const int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
  lo = Dot4(z, b.v[0], x0);
  hi = Dot4(z, b.v[1], x1);
#ifdef VOXSLAB_NEON_LANES_DOTPROD
  // 128 times each lane's four activations: what the recentring took away.
  const int8x16_t one = vdupq_n_s8(1);
  lo = vaddq_s32(lo, vshlq_n_s32(vdotq_s32(z, one, x0), 7));
  hi = vaddq_s32(hi, vshlq_n_s32(vdotq_s32(z, one, x1), 7));
#endif
}

// One weight row against NA activation rows: each block unpacked once; per activation the lanes
// scaled by s_g·xs_g (q4 with groups of 32: the two groups of a block, a half each) and added in
// block order, so a row's bits do not depend on NA.
template <int NA>
inline void Row(bool q4, int group, const uint8_t* w, const uint16_t* sc, int64_t blocks, const int8_t* const* xq,
                const float* const* xs, float* out) {
  const int64_t per = q4 ? 64 : 32;
  const bool two = group < per;
  const int64_t perGroup = two ? 1 : group / per;
  float32x4_t lo[NA], hi[NA];
  for (int a = 0; a < NA; ++a) lo[a] = hi[a] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < blocks; ++b) {
    __builtin_prefetch(w + b * 32 + 2048);
    const Block blk = Unpack(q4, w + b * 32);
    const int64_t g = two ? 2 * b : b / perGroup;
    const float s0 = Half(sc[g]);
    const float s1 = two ? Half(sc[g + 1]) : s0;
    for (int a = 0; a < NA; ++a) {
      int32x4_t il, ih;
      Lanes(q4, blk, xq[a] + b * per, il, ih);
      const float32x4_t l0 = vdupq_n_f32(s0 * xs[a][g]);
      const float32x4_t l1 = two ? vdupq_n_f32(s1 * xs[a][g + 1]) : l0;
      lo[a] = vfmaq_f32(lo[a], vcvtq_f32_s32(il), l0);
      hi[a] = vfmaq_f32(hi[a], vcvtq_f32_s32(ih), l1);
    }
  }
  for (int a = 0; a < NA; ++a) out[a] = Hsum8(lo[a], hi[a]);
}

template <int NA>
void ManyOf(bool q4, const uint8_t* w, const uint16_t* sc, const uint16_t* bi, int group, const int8_t* const* xq,
            const float* const* xs, const float* const* xsum, float* const* y, int64_t M, int64_t K) {
  const int64_t groups = K / group;
  const int64_t rowBytes = q4 ? K / 2 : K;
  float out[NA];
  for (int64_t m = 0; m < M; ++m) {
    Row<NA>(q4, group, w + m * rowBytes, sc + m * groups, rowBytes / 32, xq, xs, out);
    for (int a = 0; a < NA; ++a) y[a][m] = out[a] + BiasDotNeon(bi + m * groups, xsum[a], groups);
  }
}

// Weight rows [0, M) against na ≤ kNeonMany activation rows (K a multiple of 64, groups of 32
// or 64).
inline void Many(bool q4, const uint8_t* w, const uint16_t* sc, const uint16_t* bi, int group, const int8_t* const* xq,
                 const float* const* xs, const float* const* xsum, float* const* y, int na, int64_t M, int64_t K) {
  switch (na) {
    case 1: return ManyOf<1>(q4, w, sc, bi, group, xq, xs, xsum, y, M, K);
    case 2: return ManyOf<2>(q4, w, sc, bi, group, xq, xs, xsum, y, M, K);
    case 3: return ManyOf<3>(q4, w, sc, bi, group, xq, xs, xsum, y, M, K);
    case 4: return ManyOf<4>(q4, w, sc, bi, group, xq, xs, xsum, y, M, K);
    case 5: return ManyOf<5>(q4, w, sc, bi, group, xq, xs, xsum, y, M, K);
    default: return ManyOf<6>(q4, w, sc, bi, group, xq, xs, xsum, y, M, K);
  }
}

// ---- the integer GEMM (prefill): tiles of four weight rows by four activation rows ----

// The group's exact integer dot products of four weight rows w (row starts) with four activation
// rows x (GemvRows' scratch layout), per weight row a register over the activations.
inline void GroupDots(bool q4, int group, const uint8_t* const* w, int64_t g, const int8_t* const* x, int32x4_t (&D)[4]) {
  const int32x4_t z = vdupq_n_s32(0);
#ifdef VOXSLAB_NEON_LANES_I8MM
  int32x4_t mm[4] = {z, z, z, z};  // rows 01 × acts 01, 01 × 23, 23 × 01, 23 × 23
#else
  int32x4_t acc[4][4];
  for (int r = 0; r < 4; ++r)
    for (int a = 0; a < 4; ++a) acc[r][a] = z;
#endif
#ifdef VOXSLAB_NEON_LANES_DOTPROD
  int32x4_t corr[4] = {z, z, z, z};
#endif
  // Pieces of 16 weights and their 16 activations: q8 in order; q4 a 16-byte chunk's low nibbles
  // (the evens of its 64-element block) and high nibbles (the odds).
  const int64_t bytes = q4 ? group / 2 : group, from = g * bytes;
  for (int64_t o = from; o < from + bytes; o += 16) {
    for (int half = 0; half < (q4 ? 2 : 1); ++half) {
      const int64_t xo = q4 ? (o / 32) * 64 + half * 32 + o % 32 : o;
      uint8x16_t wv[4];
      int8x16_t xv[4];
      for (int r = 0; r < 4; ++r) {
        const uint8x16_t b = vld1q_u8(w[r] + o);
        if (q4) wv[r] = half == 0 ? vandq_u8(b, vdupq_n_u8(15)) : vshrq_n_u8(b, 4);
#ifdef VOXSLAB_NEON_LANES_DOTPROD
        else wv[r] = veorq_u8(b, vdupq_n_u8(0x80));
#else
        else wv[r] = b;
#endif
      }
      for (int a = 0; a < 4; ++a) xv[a] = vld1q_s8(x[a] + xo);
#ifdef VOXSLAB_NEON_LANES_I8MM
      for (int h = 0; h < 2; ++h) {
        // Half h (eight bytes) of two rows side by side: the 2×8 operands USMMLA multiplies.
        const auto pw = [h](uint8x16_t p, uint8x16_t q) {
          return h == 0 ? vcombine_u8(vget_low_u8(p), vget_low_u8(q)) : vcombine_u8(vget_high_u8(p), vget_high_u8(q));
        };
        const auto px = [h](int8x16_t p, int8x16_t q) {
          return h == 0 ? vcombine_s8(vget_low_s8(p), vget_low_s8(q)) : vcombine_s8(vget_high_s8(p), vget_high_s8(q));
        };
        const uint8x16_t w01 = pw(wv[0], wv[1]), w23 = pw(wv[2], wv[3]);
        const int8x16_t x01 = px(xv[0], xv[1]), x23 = px(xv[2], xv[3]);
        mm[0] = vusmmlaq_s32(mm[0], w01, x01);
        mm[1] = vusmmlaq_s32(mm[1], w01, x23);
        mm[2] = vusmmlaq_s32(mm[2], w23, x01);
        mm[3] = vusmmlaq_s32(mm[3], w23, x23);
      }
#else
      for (int r = 0; r < 4; ++r)
        for (int a = 0; a < 4; ++a) acc[r][a] = Dot4(acc[r][a], wv[r], xv[a]);
#ifdef VOXSLAB_NEON_LANES_DOTPROD
      if (!q4)
        for (int a = 0; a < 4; ++a) corr[a] = vdotq_s32(corr[a], vdupq_n_s8(1), xv[a]);
#endif
#endif
    }
  }
#ifdef VOXSLAB_NEON_LANES_I8MM
  D[0] = vcombine_s32(vget_low_s32(mm[0]), vget_low_s32(mm[1]));
  D[1] = vcombine_s32(vget_high_s32(mm[0]), vget_high_s32(mm[1]));
  D[2] = vcombine_s32(vget_low_s32(mm[2]), vget_low_s32(mm[3]));
  D[3] = vcombine_s32(vget_high_s32(mm[2]), vget_high_s32(mm[3]));
#else
  for (int r = 0; r < 4; ++r) D[r] = vpaddq_s32(vpaddq_s32(acc[r][0], acc[r][1]), vpaddq_s32(acc[r][2], acc[r][3]));
#ifdef VOXSLAB_NEON_LANES_DOTPROD
  if (!q4) {
    // 128·Σxq of each activation's group: what the recentring took away.
    const int32x4_t c = vshlq_n_s32(vpaddq_s32(vpaddq_s32(corr[0], corr[1]), vpaddq_s32(corr[2], corr[3])), 7);
    for (int r = 0; r < 4; ++r) D[r] = vaddq_s32(D[r], c);
  }
#endif
#endif
}

// Weight rows [m0, m1) against the n activation rows quantized in `scratch` (`per` bytes each:
// group sums, scales, int8 values), into Y [n][M]. Per (row, activation), in group order:
// y = fma(float(D_g), s_g·xs_g, y), then y = fma(b_g, Σx_g, y): the AVX-512 VNNI GEMM's steps,
// each lane one output, so no output depends on the tile it falls in.
inline void GemmRows(bool q4, int group, const uint8_t* wdata, const uint16_t* sc, const uint16_t* bi, int64_t K, int64_t M, int64_t m0,
                     int64_t m1, const uint8_t* scratch, int64_t per, int64_t n, float* Y) {
  const int64_t groups = K / group, rowBytes = q4 ? K / 2 : K;
  for (int64_t m = m0; m < m1; m += 4) {
    const int rows = static_cast<int>(std::min<int64_t>(4, m1 - m));
    const uint8_t* w[4];
    for (int r = 0; r < 4; ++r) w[r] = wdata + (m + std::min(r, rows - 1)) * rowBytes;
    for (int64_t a0 = 0; a0 < n; a0 += 4) {
      const int acts = static_cast<int>(std::min<int64_t>(4, n - a0));
      const int8_t* x[4];
      const float* xs[4];
      const float* xsum[4];
      for (int a = 0; a < 4; ++a) {
        xsum[a] = reinterpret_cast<const float*>(scratch + (a0 + std::min(a, acts - 1)) * per);
        xs[a] = xsum[a] + groups;
        x[a] = reinterpret_cast<const int8_t*>(xs[a] + groups);
      }
      float32x4_t y[4];
      for (int r = 0; r < 4; ++r) y[r] = vdupq_n_f32(0.0f);
      for (int64_t g = 0; g < groups; ++g) {
        int32x4_t D[4];
        GroupDots(q4, group, w, g, x, D);
        const float32x4_t xs4 = {xs[0][g], xs[1][g], xs[2][g], xs[3][g]};
        const float32x4_t xsum4 = {xsum[0][g], xsum[1][g], xsum[2][g], xsum[3][g]};
        for (int r = 0; r < rows; ++r) {
          const int64_t at = (m + r) * groups + g;
          y[r] = vfmaq_f32(y[r], vcvtq_f32_s32(D[r]), vmulq_f32(vdupq_n_f32(Half(sc[at])), xs4));
          y[r] = vfmaq_f32(y[r], vdupq_n_f32(Half(bi[at])), xsum4);
        }
      }
      for (int r = 0; r < rows; ++r) {
        float out[4];
        vst1q_f32(out, y[r]);
        for (int a = 0; a < acts; ++a) Y[(a0 + a) * M + m + r] = out[a];
      }
    }
  }
}

}  // namespace VOXSLAB_NEON_LEVEL
}  // namespace voxslab::gemv
