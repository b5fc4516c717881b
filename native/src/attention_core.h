// A range of KV heads' share of tiled attention, written once over a vector vocabulary (Vec,
// kLanes, kPvVectors, Zero, Load, LoadHalf, StoreU, Splat, Fma, Add, Sub, Mul, Max, MaxOf, Sum,
// Sum4, Exp, kPairSums, StorePairSums) and included once per instruction set by attention.cc,
// inside that set's namespace. No include guard: that is the point.
//
// Each KV head's query heads and query tiles run in a fixed order, in the head's own slot of
// the scratch, so a call split over KV heads among threads gives the bits of one thread.
// Per key tile an f16 cache's key and value rows are widened once, for every query head of
// the group; a query row sees one contiguous range of keys under every mask, so only visible
// keys are scored.

// n f16 values widened to f32.
inline void WidenV(const uint16_t* h, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) StoreU(out + i, LoadHalf(h + i));
  for (; i < n; ++i) out[i] = F16(h[i]);
}

// A cache vector or value as f32: an f16 cache is read in place by the FMA loops, widened as
// it is loaded, which gives the bits of reading its widened copy.
inline Vec LoadE(const float* p) { return Load(p); }
inline Vec LoadE(const uint16_t* p) { return LoadHalf(p); }
inline float ToF(float x) { return x; }
inline float ToF(uint16_t h) { return F16(h); }

// Up to kBlock query rows that see the same keys, scored and weighted together: each key and
// value vector is loaded once for the block. A row's arithmetic does not depend on the block
// it is in (missing rows are zeros that nothing reads).
constexpr int kBlock = 4;

// The next key tile's rows of this thread's heads, prefetched into L2 in the cache's own order
// (key by key, a key's heads side by side) while this tile is read head by head: the memory sees
// forward streams, where a prefetch per head one tile on is a stride per head that halves the
// rate. The tile's rows are dealt to kAheadStreams streams (consecutive quarters), as the memory
// keeps more reads in flight for a few streams than for one; the n-th prefetch of a tile, over
// its head passes in turn, takes stream n % kAheadStreams at that stream's (n / kAheadStreams)-th
// (key, head) pair, so the tile's passes cover the next tile once.
constexpr int64_t kAheadStreams = 4;

struct Ahead {
  const char* base;   // the next tile's first row at the thread's first head; null: none
  int64_t rowBytes;   // one key row to the next
  int64_t headBytes;  // one head's bytes in a row
  int64_t heads;      // the thread's heads
  int64_t rows;       // key rows in the next tile
  int64_t streamRows; // rows per stream: ceil(tk / kAheadStreams)
  int64_t first;      // the prefetch this pass makes at its key 0: pass · tk
};

// Walks an Ahead's prefetches from key jj on; Next() makes one.
struct AheadCursor {
  const Ahead& a;
  int64_t stream, row, hc;  // the next prefetch's stream and its pair in that stream
  AheadCursor(const Ahead& ah, int64_t jj)
      : a(ah),
        stream((ah.first + jj) % kAheadStreams),
        row((ah.first + jj) / kAheadStreams / ah.heads),
        hc((ah.first + jj) / kAheadStreams % ah.heads) {}
  // Inlined into the FMA loops, which would otherwise spill their accumulators around a call.
  __attribute__((always_inline)) void Next() {
    const int64_t r = stream * a.streamRows + row;
    if (a.base != nullptr && r < a.rows) {
      const char* at = a.base + r * a.rowBytes + hc * a.headBytes;
      for (int64_t b = 0; b < a.headBytes; b += 64) __builtin_prefetch(at + b, 0, 2);
    }
    if (++stream == kAheadStreams) {
      stream = 0;
      if (++hc == a.heads) {
        hc = 0;
        ++row;
      }
    }
  }
};

struct Row {
  int64_t st;     // the row's slot in mx, sm, acc, qu, qv
  int64_t h;      // its query head
  int64_t i;      // its query in the tile
  float* sc;      // its scores, then weights, [tk]
};

inline void ScoreBlock(const AttentionParams& a, const Row* rows, int nb, int64_t ja, int64_t jb, int64_t j0, int64_t i0, const float* kr,
                       int64_t ks, const float* qu, const float* qv, const float* p, const Ahead& ahead) {
  const int64_t hd = a.hd;
  const bool rel = p != nullptr;
  const float* qs[kBlock];
  const float* qr[kBlock];
  for (int r = 0; r < kBlock; ++r) {
    const int rr = r < nb ? r : 0;
    qs[r] = qu + rows[rr].st * hd;
    qr[r] = qv + rows[rr].st * hd;
  }
  AheadCursor next(ahead, ja);
  for (int64_t jj = ja; jj <= jb; ++jj) {
    const float* kv = kr + jj * ks;
    next.Next();
    Vec acc[kBlock] = {Zero(), Zero(), Zero(), Zero()};
    float tail[kBlock] = {0, 0, 0, 0};
    const float* pr[kBlock] = {nullptr, nullptr, nullptr, nullptr};
    if (rel)
      for (int r = 0; r < nb; ++r) pr[r] = p + ((a.Tk - 1 - ((i0 + rows[r].i) - (j0 + jj))) * a.Hq + rows[r].h) * hd;
    int64_t d = 0;
    for (; d + kLanes <= hd; d += kLanes) {
      const Vec k = Load(kv + d);
      for (int r = 0; r < nb; ++r) {
        acc[r] = Fma(Load(qs[r] + d), k, acc[r]);
        if (rel) acc[r] = Fma(Load(qr[r] + d), Load(pr[r] + d), acc[r]);
      }
    }
    for (; d < hd; ++d)
      for (int r = 0; r < nb; ++r) tail[r] += qs[r][d] * kv[d] + (rel ? qr[r][d] * pr[r][d] : 0.0f);
    float sum[kBlock];
    Sum4(acc[0], acc[1], acc[2], acc[3], sum);
    for (int r = 0; r < nb; ++r) rows[r].sc[jj] = (sum[r] + tail[r]) * a.scale;
  }
}

// Keys jj and jj + 1 of up to NB rows (acc[key·kBlock + row]) summed as Sum4 sums each vector,
// scaled and stored to the rows' scores: defined by a vocabulary that sets kPairSums.
template <int NB>
void StorePairSums(const Vec* acc, float scale, float* const* sc, int64_t jj);

// ScoreBlock for NB rows and a head of C whole vectors, without relative positions: the rows'
// queries held in registers, each key's C vectors loaded once for the NB rows. Its arithmetic
// per row is ScoreBlock's: C products in one chain, then the same four-way sum.
template <int NB, int C, typename E>
inline void ScoreRegs(const AttentionParams& a, const Row* rows, int64_t ja, int64_t jb, const E* kr, int64_t ks, const float* qu,
                      const Ahead& ahead) {
  Vec qr[NB][C];
  for (int r = 0; r < NB; ++r)
    for (int c = 0; c < C; ++c) qr[r][c] = Load(qu + rows[r].st * a.hd + c * kLanes);
  float* sc[NB];
  for (int r = 0; r < NB; ++r) sc[r] = rows[r].sc;
  AheadCursor next(ahead, ja);
  int64_t jj = ja;
  // Two keys at a time where the vocabulary sums eight vectors at once.
  if constexpr (kPairSums)
    for (; jj < jb; jj += 2) {
      const E* kv = kr + jj * ks;
      next.Next();
      next.Next();
      Vec acc[2 * kBlock] = {Zero(), Zero(), Zero(), Zero(), Zero(), Zero(), Zero(), Zero()};
      for (int c = 0; c < C; ++c) {
        const Vec k0 = LoadE(kv + c * kLanes);
        for (int r = 0; r < NB; ++r) acc[r] = Fma(qr[r][c], k0, acc[r]);
        const Vec k1 = LoadE(kv + ks + c * kLanes);
        for (int r = 0; r < NB; ++r) acc[kBlock + r] = Fma(qr[r][c], k1, acc[kBlock + r]);
      }
      StorePairSums<NB>(acc, a.scale, sc, jj);
    }
  for (; jj <= jb; ++jj) {
    const E* kv = kr + jj * ks;
    next.Next();
    Vec acc[kBlock] = {Zero(), Zero(), Zero(), Zero()};
    for (int c = 0; c < C; ++c) {
      const Vec k = LoadE(kv + c * kLanes);
      for (int r = 0; r < NB; ++r) acc[r] = Fma(qr[r][c], k, acc[r]);
    }
    float sum[kBlock];
    Sum4(acc[0], acc[1], acc[2], acc[3], sum);
    for (int r = 0; r < NB; ++r) sc[r][jj] = (sum[r] + 0.0f) * a.scale;
  }
}

template <int NB, typename E>
inline bool ScoreRegsFor(const AttentionParams& a, const Row* rows, int64_t ja, int64_t jb, const E* kr, int64_t ks, const float* qu,
                         const Ahead& ahead) {
  if (a.hd == kLanes) ScoreRegs<NB, 1, E>(a, rows, ja, jb, kr, ks, qu, ahead);
  else if (a.hd == 2 * kLanes) ScoreRegs<NB, 2, E>(a, rows, ja, jb, kr, ks, qu, ahead);
  else if (a.hd == 4 * kLanes) ScoreRegs<NB, 4, E>(a, rows, ja, jb, kr, ks, qu, ahead);
  else if (a.hd == 8 * kLanes) ScoreRegs<NB, 8, E>(a, rows, ja, jb, kr, ks, qu, ahead);
  else return false;
  return true;
}

// Whether ScoreRegs takes a head of hd floats.
inline bool RegsHead(int64_t hd) { return hd == kLanes || hd == 2 * kLanes || hd == 4 * kLanes || hd == 8 * kLanes; }

template <typename E>
inline bool ScoreFast(const AttentionParams& a, const Row* rows, int nb, int64_t ja, int64_t jb, const E* kr, int64_t ks, const float* qu,
                      const Ahead& ahead) {
  switch (nb) {
    case 1: return ScoreRegsFor<1>(a, rows, ja, jb, kr, ks, qu, ahead);
    case 2: return ScoreRegsFor<2>(a, rows, ja, jb, kr, ks, qu, ahead);
    case 3: return ScoreRegsFor<3>(a, rows, ja, jb, kr, ks, qu, ahead);
    default: return ScoreRegsFor<4>(a, rows, ja, jb, kr, ks, qu, ahead);
  }
}

// acc += Σ w·v over keys [ja, jb] for NB rows, kPvVectors vectors of each row at once: that many
// independent chains per row, each value vector loaded once for the NB rows.
template <int NB, typename E>
inline void WeighValues(const AttentionParams& a, const Row* rows, float* const* ai, int64_t ja, int64_t jb, const E* vr, int64_t ks,
                        const Ahead& ahead) {
  const int64_t hd = a.hd;
  int64_t d = 0;
  AheadCursor next(ahead, ja);
  for (; d + kPvVectors * kLanes <= hd; d += kPvVectors * kLanes) {
    Vec av[NB][kPvVectors];
    for (int r = 0; r < NB; ++r)
      for (int c = 0; c < kPvVectors; ++c) av[r][c] = Load(ai[r] + d + c * kLanes);
    for (int64_t k = ja; k <= jb; ++k) {
      const E* vk = vr + k * ks + d;
      if (d == 0) next.Next();
      Vec v[kPvVectors];
      for (int c = 0; c < kPvVectors; ++c) v[c] = LoadE(vk + c * kLanes);
      for (int r = 0; r < NB; ++r) {
        const Vec w = Splat(rows[r].sc[k]);
        for (int c = 0; c < kPvVectors; ++c) av[r][c] = Fma(w, v[c], av[r][c]);
      }
    }
    for (int r = 0; r < NB; ++r)
      for (int c = 0; c < kPvVectors; ++c) StoreU(ai[r] + d + c * kLanes, av[r][c]);
  }
  for (; d + kLanes <= hd; d += kLanes) {
    Vec av[NB];
    for (int r = 0; r < NB; ++r) av[r] = Load(ai[r] + d);
    for (int64_t k = ja; k <= jb; ++k) {
      const Vec v = LoadE(vr + k * ks + d);
      for (int r = 0; r < NB; ++r) av[r] = Fma(Splat(rows[r].sc[k]), v, av[r]);
    }
    for (int r = 0; r < NB; ++r) StoreU(ai[r] + d, av[r]);
  }
  for (; d < hd; ++d)
    for (int r = 0; r < NB; ++r) {
      float t = ai[r][d];
      for (int64_t k = ja; k <= jb; ++k) t += rows[r].sc[k] * ToF(vr[k * ks + d]);
      ai[r][d] = t;
    }
}

// Online softmax of each row over this tile's scores [ja, jb], then acc += Σ w·v for the block.
template <typename E>
inline void WeighBlock(const AttentionParams& a, const Row* rows, int nb, int64_t ja, int64_t jb, const E* vr, int64_t ks, float* mx,
                       float* sm, float* acc, const Ahead& ahead) {
  const int64_t hd = a.hd;
  float* ai[kBlock];
  for (int r = 0; r < kBlock; ++r) ai[r] = acc + rows[r < nb ? r : 0].st * hd;
  for (int r = 0; r < nb; ++r) {
    float* sc = rows[r].sc;
    const int64_t st = rows[r].st;
    Vec mv0 = Splat(-INFINITY);
    int64_t j = ja;
    for (; j + kLanes <= jb + 1; j += kLanes) mv0 = Max(mv0, Load(sc + j));
    float tileMax = MaxOf(mv0);
    for (; j <= jb; ++j) tileMax = std::max(tileMax, sc[j]);
    const float m = std::max(mx[st], tileMax);
    const float alpha = mx[st] == -INFINITY ? 0.0f : std::exp(mx[st] - m);
    if (alpha != 1.0f) {
      const Vec av = Splat(alpha);
      int64_t d = 0;
      for (; d + kLanes <= hd; d += kLanes) StoreU(ai[r] + d, Mul(Load(ai[r] + d), av));
      for (; d < hd; ++d) ai[r][d] *= alpha;
    }
    // Weights e^(s − m) in place, and their sum in a fixed order.
    const Vec mv = Splat(m);
    Vec lv = Zero();
    int64_t jj = ja;
    for (; jj + kLanes <= jb + 1; jj += kLanes) {
      const Vec w = Exp(Sub(Load(sc + jj), mv));
      StoreU(sc + jj, w);
      lv = Add(lv, w);
    }
    float l = Sum(lv);
    for (; jj <= jb; ++jj) {
      sc[jj] = std::exp(sc[jj] - m);
      l += sc[jj];
    }
    mx[st] = m;
    sm[st] = sm[st] * alpha + l;
  }
  switch (nb) {
    case 1: WeighValues<1, E>(a, rows, ai, ja, jb, vr, ks, ahead); break;
    case 2: WeighValues<2, E>(a, rows, ai, ja, jb, vr, ks, ahead); break;
    case 3: WeighValues<3, E>(a, rows, ai, ja, jb, vr, ks, ahead); break;
    default: WeighValues<4, E>(a, rows, ai, ja, jb, vr, ks, ahead); break;
  }
}

inline void AttentionHeads(const AttentionParams& a, const float* q, const void* kraw, const void* vraw, float* out, const float* p,
                           const float* u, const float* vb, float* scratch, int64_t slotFloats, int64_t kh0, int64_t kh1) {
  const int64_t hd = a.hd;
  const int64_t group = a.Hq / a.Hkv;
  const int64_t tq = a.tq;
  const int64_t rows = group * tq;
  const bool rel = p != nullptr;
  const int64_t stride = a.Hkv * hd;
  // A head's slot: the block's scores, then weights [kBlock][tk]; per query row of the group's
  // tile ([group][tq]) its max, sum, accumulator, q+u and q+v; the tile's widened keys and values.
  struct Slot {
    float *sc, *mx, *sm, *acc, *qu, *qv, *kt, *vt;
  };
  auto slotOf = [&](int64_t kh) {
    Slot s;
    s.sc = scratch + kh * slotFloats;
    s.mx = s.sc + kBlock * a.tk;
    s.sm = s.mx + rows;
    s.acc = s.sm + rows;
    s.qu = s.acc + rows * hd;
    s.qv = s.qu + rows * hd;
    s.kt = s.qv + rows * hd;
    s.vt = s.kt + a.tk * hd;
    return s;
  };
  // fn(slot, s, h, i) for every query row of the tile at i0 (nq queries) of heads [kh0, kh1).
  auto eachRow = [&](int64_t nq, auto fn) {
    for (int64_t kh = kh0; kh < kh1; ++kh) {
      const Slot sl = slotOf(kh);
      for (int64_t gh = 0; gh < group; ++gh)
        for (int64_t i = 0; i < nq; ++i) fn(sl, gh * tq + i, kh * group + gh, i);
    }
  };
  for (int64_t i0 = 0; i0 < a.Tq; i0 += tq) {
    const int64_t nq = std::min(tq, a.Tq - i0);
    eachRow(nq, [&](const Slot& sl, int64_t s, int64_t h, int64_t i) {
      sl.mx[s] = -INFINITY;
      sl.sm[s] = 0.0f;
      const float* qi = q + ((i0 + i) * a.Hq + h) * hd;
      for (int64_t d = 0; d < hd; ++d) {
        sl.acc[s * hd + d] = 0.0f;
        sl.qu[s * hd + d] = rel ? qi[d] + u[h * hd + d] : qi[d];
        sl.qv[s * hd + d] = rel ? qi[d] + vb[h * hd + d] : 0.0f;
      }
    });
    // Key range any query of the tile can see.
    const int64_t qlo = a.qpos0 + i0, qhi = a.qpos0 + i0 + nq - 1;
    int64_t jlo = 0, jhi = a.Tk - 1;
    if (a.mask != AttentionMask::kFull) jhi = std::min(jhi, qhi - a.kpos0);
    if (a.mask == AttentionMask::kSliding) jlo = std::max<int64_t>(0, qlo - a.window + 1 - a.kpos0);
    // Key tiles on multiples of tk, whatever the query tile: a query's tiles, and so its bits,
    // are the same alone or in any chunk.
    const int64_t eb = a.kvF16 ? 2 : 4;
    // An f16 cache is read in place where ScoreRegs scores it, else widened a tile at a time.
    const bool widen = a.kvF16 && (rel || !RegsHead(hd));
    const int64_t heads = kh1 - kh0;
    const int64_t streamRows = (a.tk + kAheadStreams - 1) / kAheadStreams;
    for (int64_t j0 = jlo - jlo % a.tk; j0 <= jhi; j0 += a.tk) {
      const int64_t nk = std::min(a.tk, jhi - j0 + 1);
      // The next tile's rows this call reads, for the prefetch.
      const int64_t nextRows = std::max<int64_t>(0, std::min(a.tk, jhi - (j0 + a.tk) + 1));
      const int64_t nextAt = ((j0 + a.tk) * a.Hkv + kh0) * hd * eb;
      const char* kNext = nextRows > 0 ? static_cast<const char*>(kraw) + nextAt : nullptr;
      const char* vNext = nextRows > 0 ? static_cast<const char*>(vraw) + nextAt : nullptr;
      for (int64_t kh = kh0; kh < kh1; ++kh) {
        const Slot sl = slotOf(kh);
        const int64_t first = (kh - kh0) * a.tk;
        const Ahead kAhead{kNext, stride * eb, hd * eb, heads, nextRows, streamRows, first};
        const Ahead vAhead{vNext, stride * eb, hd * eb, heads, nextRows, streamRows, first};
        // A widened f16 tile is prefetched as it is widened; the FMA loops then read the scratch.
        const Ahead none{nullptr, 0, 0, 1, 0, 1, 0};
        const int64_t at = (j0 * a.Hkv + kh) * hd;
        const uint16_t* k16 = a.kvF16 ? static_cast<const uint16_t*>(kraw) + at : nullptr;
        const uint16_t* v16 = a.kvF16 ? static_cast<const uint16_t*>(vraw) + at : nullptr;
        const float* kr = a.kvF16 ? sl.kt : static_cast<const float*>(kraw) + at;
        const float* vr = a.kvF16 ? sl.vt : static_cast<const float*>(vraw) + at;
        int64_t ks = stride;
        if (widen) {
          AheadCursor nextK(kAhead, 0), nextV(vAhead, 0);
          for (int64_t jj = 0; jj < nk; ++jj) {
            nextK.Next();
            nextV.Next();
            WidenV(k16 + jj * stride, sl.kt + jj * hd, hd);
            WidenV(v16 + jj * stride, sl.vt + jj * hd, hd);
          }
          ks = hd;
        }
        const Ahead& ka = widen ? none : kAhead;
        const Ahead& va = widen ? none : vAhead;
        // Rows in (query, head) order; consecutive rows that see the same keys form a block.
        Row block[kBlock];
        int nb = 0;
        int64_t ba = 0, bb = -1;
        auto flush = [&]() {
          if (nb == 0) return;
          if (a.kvF16 && !widen) {
            ScoreFast(a, block, nb, ba, bb, k16, stride, sl.qu, ka);
            WeighBlock(a, block, nb, ba, bb, v16, stride, sl.mx, sl.sm, sl.acc, va);
          } else {
            if (p != nullptr || !ScoreFast(a, block, nb, ba, bb, kr, ks, sl.qu, ka))
              ScoreBlock(a, block, nb, ba, bb, j0, i0, kr, ks, sl.qu, sl.qv, p, ka);
            WeighBlock(a, block, nb, ba, bb, vr, ks, sl.mx, sl.sm, sl.acc, va);
          }
          nb = 0;
        };
        for (int64_t i = 0; i < nq; ++i) {
          // The keys of this tile query i sees: [ja, jb] (tile-relative).
          const int64_t qp = a.qpos0 + i0 + i;
          int64_t ja = 0, jb = nk - 1;
          if (a.mask != AttentionMask::kFull) jb = std::min(jb, qp - a.kpos0 - j0);
          if (a.mask == AttentionMask::kSliding) ja = std::max(ja, qp - a.window + 1 - a.kpos0 - j0);
          if (ja > jb) continue;
          for (int64_t gh = 0; gh < group; ++gh) {
            if (nb == kBlock || (nb > 0 && (ja != ba || jb != bb))) flush();
            ba = ja;
            bb = jb;
            block[nb] = Row{gh * tq + i, kh * group + gh, i, sl.sc + nb * a.tk};
            ++nb;
          }
        }
        flush();
      }
    }
    eachRow(nq, [&](const Slot& sl, int64_t st, int64_t h, int64_t i) {
      float* o = out + ((i0 + i) * a.Hq + h) * hd;
      const float inv = sl.sm[st] > 0 ? 1.0f / sl.sm[st] : 0.0f;
      for (int64_t d = 0; d < hd; ++d) o[d] = sl.acc[st * hd + d] * inv;
    });
  }
}
