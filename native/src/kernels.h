// Compute kernels over caller-owned buffers: no allocation, deterministic (a fixed reduction
// order per output, whatever the thread). Each family dispatches on the one instruction-set
// choice in cpu.h (x86-64: AVX-512, else AVX2+FMA; AArch64: i8mm, dotprod, else NEON; else
// portable scalar code; VOXSLAB_KERNELS forces a lower level). Plain C++, no Node-API types. Implemented by concern: gemv.cc, gemm.cc, gemm_int.cc,
// attention.cc, ops.cc, probes.cc, pool.cc.
//
// The enums' values are the addon's argument codes; src/native.ts names the same values.
#pragma once

#include <cstdint>
#include <vector>

namespace voxslab {

enum class WeightType : int { kF32 = 0, kF16 = 1, kBF16 = 2, kQ8 = 3, kQ4 = 4 };
enum class NormKind : int { kRms = 0, kLayer = 1 };
enum class Activation : int { kGelu = 0, kSilu = 1, kSwiGlu = 2, kGlu = 3 };
enum class AttentionMask : int { kFull = 0, kCausal = 1, kSliding = 2 };
enum class ConvMode : int { kCausal = 0, kSame = 1 };

// y[m] = Σ_k W[m][k]·x[k] for m < M, W row-major [M][K] of `type`. Quantized weights are
// affine per group of `group` inputs: w = scale·q + bias, scales/biases f16 [M][K/group],
// q4 two per byte (low nibble first). `xsum` (K/group floats) receives the per-group sums of
// x, accumulated in f32 from f32 operands, which the bias term uses.
void Gemv(WeightType type, const void* w, const uint16_t* scales, const uint16_t* biases, int group, const float* x, float* y,
          int64_t M, int64_t K, float* xsum);

// y = W·x for q8/q4 weights with x quantized to int8 per group (xs = max|x|/127, round to
// nearest): y[m] = Σ_g s_g·xs_g·Σ q·xq + Σ_g b_g·Σx_g, the integer sums exact (AVX-512 VNNI when
// the CPU has it). The error against the f32-activation product is at most Σ|w|·xs/2 per row.
// `scratch` holds GemvIntScratchBytes(K, group) bytes, 4-byte aligned.
int64_t GemvIntScratchBytes(int64_t K, int group);
// The activation side of GemvInt: per group g, xs[g] = max|x|/127, xq = x/xs rounded to nearest
// (ties to even) as int8, xsum[g] = Σ x in f32. For q4 each 64-element block of xq is stored
// evens first, then odds: the order of the low and high nibbles of its 32 packed bytes.
void QuantizeActivations(const float* x, int64_t K, int group, bool q4, int8_t* xq, float* xs, float* xsum);

// Threads (the caller plus helpers) that GemvInt, GemvRows and float GemvSplit share a call's
// output rows among; 1 by default. Each row is computed as on one thread: results do not
// depend on the count. Set it during setup: it starts or stops the helper threads.
void SetComputeThreads(int n);
int ComputeThreads();
// The calling thread's split calls that used fewer threads than it has (other stages were computing).
size_t ComputeNarrowed();
// The calling thread enters (true) or leaves a compute section: while in one it counts as
// computing for every pool's division of the CPUs, its own calls included.
void ComputeScope(bool on);
// The CPUs each of the calling thread's helpers may run on.
std::vector<std::vector<int>> ComputeHelperCpus();
// Float-weight GEMV (f32/f16/bf16) with its rows split among the compute threads.
void GemvSplit(WeightType type, const void* w, const float* x, float* y, int64_t M, int64_t K);
void GemvInt(WeightType type, const void* w, const uint16_t* scales, const uint16_t* biases, int group, const float* x, float* y,
             int64_t M, int64_t K, void* scratch);

// Y[t] = W·X[t] for t < n (X [n][K], Y [n][M]): the GEMV of each row — q8/q4 through int8
// activations as GemvInt, the float encodings exactly as Gemv — with blocks of weight rows kept
// in cache across the n rows. For a few rows, where packing a GEMM would cost more than it
// saves. `scratch` holds GemvRowsScratchBytes(n, K, group) bytes (0 for float weights).
int64_t GemvRowsScratchBytes(int64_t n, int64_t K, int group);
void GemvRows(WeightType type, const void* w, const uint16_t* scales, const uint16_t* biases, int group, const float* X, float* Y,
              int64_t n, int64_t M, int64_t K, void* scratch);

// Y[t] = W·X[t] for t < n, q8/q4 weights and int8 activations quantized as GemvInt's, for
// prefill: per (row, activation) y = Σ_g (float(D_g)·s_g·xs_g + b_g·Σx_g) in group order, D_g
// the group's exact integer dot product, computed with activations in the vector lanes (AVX-512
// VNNI). Each row's bits do not depend on n, on the other rows or on the thread count, but they
// differ from GemvInt's, whose lanes sum within a group in f32. Without VNNI (or for K not a
// multiple of 64, group not 32 or 64) it is GemvRows. `scratch` holds GemmIntScratchBytes.
int64_t GemmIntScratchBytes(int64_t n, int64_t K, int group);
void GemmInt(WeightType type, const void* w, const uint16_t* scales, const uint16_t* biases, int group, const float* X, float* Y,
             int64_t n, int64_t M, int64_t K, void* scratch);

// C[t][n] = Σ_k A[t][k]·W[n][k] (+ bias[n] when non-null): A [T][K] f32 activations, W [N][K]
// weights of `type` (a linear layer; quantized as in Gemv), decoded to f32 while packed.
// `pack` holds kGemmPackFloats floats.
constexpr int64_t kGemmKc = 256;
constexpr int64_t kGemmNc = 256;
constexpr int64_t kGemmPackFloats = kGemmKc * kGemmNc;
struct WeightRef {
  WeightType type;
  const void* data;
  const uint16_t* scales;  // f16 bits
  const uint16_t* biases;
  int group;
};
void Gemm(const float* A, const WeightRef& W, const float* bias, float* C, int64_t T, int64_t N, int64_t K, float* pack);

// y_i = W_i·x for up to kGemvManyMax q8/q4 matrices of one type and group that read the same x
// (K inputs): x is quantized once and the matrices' rows are split among the compute threads as
// one call's; every row gets the bits GemvInt gives it. `scratch` as GemvInt's.
constexpr int kGemvManyMax = 4;
void GemvIntMany(const WeightRef* w, float* const* y, const int64_t* M, int count, const float* x, int64_t K, void* scratch);
// The same for n rows X [n][K] (Y_i [n][M_i]): the rows quantized once, every row with the bits
// GemvRows gives it. `scratch` as GemvRows's.
void GemvRowsMany(const WeightRef* w, float* const* Y, const int64_t* M, int count, const float* X, int64_t n, int64_t K, void* scratch);

void RmsNorm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps);
// x += r (a residual), then y = RmsNorm(x): the add and the next layer's norm in one call.
void AddRmsNorm(float* x, const float* r, const float* w, float* y, int64_t rows, int64_t dim, float eps);
void LayerNorm(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t dim, float eps);
void GeluExact(const float* x, float* y, int64_t n);
// Silu and SwiGlu split long inputs among the calling thread's helpers (the same bits).
void Silu(const float* x, float* y, int64_t n);
// y = silu(gate)·up
void SwiGlu(const float* gate, const float* up, float* y, int64_t n);
// GLU over channels: x [rows][2·dim] → y [rows][dim] = x[:, :dim]·sigmoid(x[:, dim:])
void Glu(const float* x, float* y, int64_t rows, int64_t dim);
// RoPE in place on x [rows][heads][hd] at positions pos0 + row, with cos/sin tables
// [positions][hd/2]; `adjacent` rotates pairs (2i, 2i+1), otherwise (i, i + hd/2).
void Rope(float* x, const float* cos, const float* sin, int64_t rows, int64_t heads, int64_t hd, int64_t pos0, bool adjacent);

// Tiled attention with an online softmax; never a plane of heads × queries × keys.
// q [Tq][Hq][hd], k and v [Tk][Hkv][hd], out [Tq][Hq][hd]; query head h reads KV head
// h / (Hq / Hkv). Query i sits at position qpos0 + i, key j at kpos0 + j. mask: kFull
// (bidirectional), kCausal (key pos ≤ query pos), kSliding (query pos − window < key pos ≤
// query pos). With `p` non-null (relative position, full context, Tq = Tk = T): p [2T−1][Hq][hd]
// holds linear_pos of relative positions T−1 … −(T−1), u and v [Hq][hd] the pos biases, and
// score(i, j) = ((q_i + u)·k_j + (q_i + v)·p_{T−1−(i−j)})·scale.
// scratch: AttentionScratchFloats(tq, tk, hd, Hq / Hkv, Hkv) floats (never a function of T): one
// slot per KV head, so the KV heads split among the calling thread's helpers (pool.h).
// k and v are f32, or f16 (IEEE half) when kvF16 is set: a half-size KV cache, each vector
// widened to f32 as it is loaded (heads the register loops do not take: a tile at a time into
// the scratch), with the bits of its widened copy.
struct AttentionParams {
  int64_t Tq, Tk, Hq, Hkv, hd;
  int64_t qpos0, kpos0, window;
  AttentionMask mask;
  float scale;
  int64_t tq, tk;
  bool kvF16;
};
int64_t AttentionScratchFloats(int64_t tq, int64_t tk, int64_t hd, int64_t group, int64_t hkv);
void Attention(const AttentionParams& a, const float* q, const void* k, const void* v, float* out, const float* p,
               const float* u, const float* vb, float* scratch);

// Depthwise causal conv1d with a carried state (LFM2 short conv): x, y [T][C], w [C][k],
// state [k−1][C] holds the previous k−1 input rows (oldest first) and is updated.
// y[t][c] = Σ_j w[c][j]·x[t − (k−1) + j][c].
void Conv1dCausal(const float* x, const float* w, float* state, float* y, int64_t T, int64_t C, int64_t k);
// Depthwise symmetric ('same', zero padding (k−1)/2) conv1d on rows [t0, t1) of x [T][C];
// y holds rows t0… ([t1 − t0][C]); bias [C] or null.
void Conv1dSame(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t C, int64_t k, int64_t t0,
                int64_t t1);
// conv2d, kernel 3, stride 2, padding 1, on planes [channels][rows][cols]. The input buffer
// holds absolute rows [inRow0, inRow0 + inRows) of a plane of inTotal rows (rows outside
// are zero padding); the output buffer receives absolute rows [outRow0, outRow0 + outRows).
// Full: weight [Cout][Cin][3][3]; depthwise (Cin = Cout): weight [C][1][3][3].
void Conv2dS2(const float* in, int64_t Cin, int64_t inRow0, int64_t inRows, int64_t inTotal, int64_t inCols, const float* w,
              const float* bias, bool depthwise, float* out, int64_t Cout, int64_t outRow0, int64_t outRows, int64_t outCols,
              bool relu);
// Pointwise 1×1 over positions: out[c][p] = bias[c] + Σ_ci w[c][ci]·in[ci][p], optional ReLU.
void Pointwise(const float* in, const float* w, const float* bias, float* out, int64_t Cin, int64_t Cout, int64_t P, bool relu);

// Peak single-core f32 FMA throughput probe: `iterations` × 12 independent FMA chains of
// 8 lanes; returns a value derived from the registers so the work cannot be elided.
float FmaProbe(int64_t iterations);
// f32 lanes per FMA instruction in the probe of the chosen path (8 for AVX2, 16 for AVX-512).
int FmaLanes();
// The integer GEMM's multiply at its peak: `iterations` × 12 independent chains of its
// instruction (vpmaddubsw on AVX2, vpdpbusd with VNNI); Int8Macs() multiply-adds each, 0 where
// there is no probe.
float Int8Probe(int64_t iterations);
int Int8Macs();
// Streaming read probe: sums n floats with wide loads.
float ReadProbe(const float* x, int64_t n);

const char* KernelIsa();

}  // namespace voxslab
