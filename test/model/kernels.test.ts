import t from 'tap';
import { spawnSync } from 'node:child_process';
import {
  computeThreads,
  GEMM_PACK_FLOATS,
  gelu,
  gemm,
  gemv,
  gemvScratchFloats,
  glu,
  kernelIsa,
  linear1,
  linearMany,
  linearRowsMany,
  linearPrefill,
  linearRows,
  linearSet,
  prefillScratchFloats,
  setComputeThreads,
  layerNorm,
  addRmsNorm,
  rmsNorm,
  rope,
  ropeTables,
  silu,
  swiglu,
  type Weights,
} from '../../src/model/blocks/kernels.js';
import { dequantizedAt, quantize } from '../../src/model/format/quant.js';
import { f32ToBf16, f32ToF16, bf16ToF32, f16ToF32 } from '../../src/model/format/dtype.js';
import { native } from '../../src/native.js';
import { prng, randInt, runWorker } from '../helpers.js';
import { linear64 } from '../reference/ops.js';

const nmse = (y: ArrayLike<number>, ref: ArrayLike<number>) => {
  let e = 0;
  let s = 0;
  for (let i = 0; i < ref.length; i++) {
    e += ((y[i] as number) - (ref[i] as number)) ** 2;
    s += (ref[i] as number) ** 2;
  }
  return s === 0 ? e : e / s;
};

/** float64 reference: y = W·x with W given elementwise. */
function gemvRef(at: (r: number, k: number) => number, x: Float32Array, rows: number, cols: number): Float64Array {
  const y = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let s = 0;
    for (let k = 0; k < cols; k++) s += at(r, k) * (x[k] as number);
    y[r] = s;
  }
  return y;
}

t.test(`GEMV for every weight encoding matches a float64 reference (${kernelIsa()})`, async (t) => {
  const r = prng(1);
  for (let trial = 0; trial < 40; trial++) {
    const rows = randInt(r, 1, 70);
    const cols = randInt(r, 1, 300);
    const w = Float32Array.from({ length: rows * cols }, () => r() - 0.5);
    const x = Float32Array.from({ length: cols }, () => r() * 2 - 1);
    const y = new Float32Array(rows);
    gemv({ kind: 'f32', data: w, rows, cols }, x, y);
    t.ok(
      nmse(
        y,
        gemvRef((i, k) => w[i * cols + k]!, x, rows, cols),
      ) <= 1e-10,
      `f32 ${rows}×${cols}`,
      { diagnostic: false },
    );
    const h = Uint16Array.from(w, (v) => f32ToF16(v));
    gemv({ kind: 'f16', data: h, rows, cols }, x, y);
    t.ok(
      nmse(
        y,
        gemvRef((i, k) => f16ToF32(h[i * cols + k]!), x, rows, cols),
      ) <= 1e-10,
      `f16 ${rows}×${cols}`,
      { diagnostic: false },
    );
    const b = Uint16Array.from(w, (v) => f32ToBf16(v));
    gemv({ kind: 'bf16', data: b, rows, cols }, x, y);
    t.ok(
      nmse(
        y,
        gemvRef((i, k) => bf16ToF32(b[i * cols + k]!), x, rows, cols),
      ) <= 1e-10,
      `bf16 ${rows}×${cols}`,
      { diagnostic: false },
    );
  }
  for (let trial = 0; trial < 30; trial++) {
    const group = trial % 2 === 0 ? 32 : 64;
    const bits = trial % 3 === 0 ? 4 : 8;
    const rows = randInt(r, 1, 50);
    const cols = group * randInt(r, 1, 8);
    const w = Float32Array.from({ length: rows * cols }, () => r() - 0.5);
    const x = Float32Array.from({ length: cols }, () => r() * 2 - 1);
    const q = quantize(w, rows, cols, bits, group);
    const y = new Float32Array(rows);
    gemv({ kind: bits === 8 ? 'q8' : 'q4', data: q.data, scales: q.scales, biases: q.biases, group, rows, cols }, x, y, new Float32Array(cols / group));
    t.ok(
      nmse(
        y,
        gemvRef((i, k) => dequantizedAt(q, i, k), x, rows, cols),
      ) <= 1e-10,
      `q${bits} g${group} ${rows}×${cols} equals the dequantized product`,
      { diagnostic: false },
    );
    // Against the original weights, within the rounding bound: |Δw| ≤ s/2 per weight.
    const exact = gemvRef((i, k) => w[i * cols + k]!, x, rows, cols);
    let ok = true;
    for (let i = 0; i < rows; i++) {
      let bound = 0;
      for (let k = 0; k < cols; k++) bound += (f16ToF32(q.scales[i * (cols / group) + Math.floor(k / group)]!) / 2) * Math.abs(x[k]!);
      if (Math.abs(y[i]! - exact[i]!) > bound * 1.001 + 1e-6) ok = false;
    }
    t.ok(ok, `q${bits} g${group}: error within Σ (s/2)·|x|`, { diagnostic: false });
  }
});

/** Round half to even, as the native activation quantizer does. */
const rint = (v: number): number => {
  const f = Math.floor(v);
  const d = v - f;
  return d > 0.5 || (d === 0.5 && f % 2 !== 0) ? f + 1 : f;
};

/**
 * Group g of weight row i against x in the integer arithmetic, in float64: xs = max|x|/127
 * (f32), xq = rint(x/xs) clamped to ±127, Σx in f32 in order; the exact integer dot and Σq.
 */
function intGroup(data: Uint8Array, bits: number, cols: number, group: number, x: Float32Array, i: number, g: number) {
  let amax = 0;
  let xsum = 0;
  for (let k = g * group; k < (g + 1) * group; k++) {
    amax = Math.max(amax, Math.abs(x[k]!));
    xsum = Math.fround(xsum + x[k]!);
  }
  const xs = Math.fround(amax / 127);
  const inv = xs > 0 ? Math.fround(1 / xs) : 0;
  let dot = 0;
  let qsum = 0;
  for (let k = g * group; k < (g + 1) * group; k++) {
    const qv = bits === 8 ? data[i * cols + k]! : (data[(i * cols + k) >> 1]! >> ((k & 1) * 4)) & 15;
    dot += qv * Math.max(-127, Math.min(127, rint(Math.fround(x[k]! * inv))));
    qsum += qv;
  }
  return { xs, xsum, dot, qsum };
}

/** Whether linearRows over the n rows of X gives each row the bits linear1 gives it alone. */
function rowsMatchSingle(W: Weights, X: Float32Array, n: number): boolean {
  const { rows, cols } = W;
  const Y = new Float32Array(n * rows);
  linearRows(W, X, Y, n, new Float32Array(n * gemvScratchFloats(cols)));
  for (let j = 0; j < n; j++) {
    const one = new Float32Array(rows);
    linear1(W, X.subarray(j * cols, (j + 1) * cols), one, new Float32Array(gemvScratchFloats(cols)));
    for (let i = 0; i < rows; i++) if (!Object.is(one[i], Y[j * rows + i])) return false;
  }
  return true;
}

t.test(`int8-activation GEMV (q8/q4) matches its exact integer arithmetic, within the activation rounding bound (${kernelIsa()})`, async (t) => {
  const r = prng(21);
  let checked = 0;
  for (let trial = 0; trial < 24; trial++) {
    const group = trial % 2 === 0 ? 32 : 64;
    const bits = trial % 3 === 0 ? 8 : 4;
    const rows = randInt(r, 1, 40);
    const cols = group * randInt(r, 1, 9); // multiples of 32 that are not of 64 take the portable path
    const w = Float32Array.from({ length: rows * cols }, () => r() - 0.5);
    const x = Float32Array.from({ length: cols }, () => (r() * 2 - 1) * (trial % 4 === 0 ? 30 : 1));
    const q = quantize(w, rows, cols, bits, group);
    const W: Weights = { kind: bits === 8 ? 'q8' : 'q4', data: q.data, scales: q.scales, biases: q.biases, group, rows, cols };
    const y = new Float32Array(rows);
    linear1(W, x, y, new Float32Array(gemvScratchFloats(cols)));
    // The integer arithmetic in float64: xs = max|x|/127 (f32), xq = rint(x/xs).
    const groups = cols / group;
    let exact = true;
    let bounded = true;
    for (let i = 0; i < rows; i++) {
      let ref = 0;
      let mag = 0;
      let bound = 0;
      for (let g = 0; g < groups; g++) {
        const { xs, xsum, dot, qsum } = intGroup(q.data, bits, cols, group, x, i, g);
        const s = f16ToF32(q.scales[i * groups + g]!);
        const b = f16ToF32(q.biases[i * groups + g]!);
        ref += Math.fround(s * xs) * dot + b * xsum;
        mag += Math.abs(Math.fround(s * xs) * dot) + Math.abs(b * xsum);
        bound += (s * qsum * xs) / 2;
      }
      if (Math.abs(y[i]! - ref) > 1e-5 * mag + 1e-6) exact = false;
      const f32 = gemvRef((rr, k) => dequantizedAt(q, rr, k), x, rows, cols)[i]!;
      if (Math.abs(y[i]! - f32) > bound * 1.001 + 1e-5 * mag + 1e-6) bounded = false;
      checked++;
    }
    t.ok(exact, `q${bits} g${group} ${rows}×${cols}: equals Σ s·xs·(Σ q·xq) + Σ b·Σx`, { diagnostic: false });
    t.ok(bounded, `q${bits} g${group} ${rows}×${cols}: within Σ s·q·xs/2 of the f32-activation product`, { diagnostic: false });
    // Row by row over one to eight inputs (each count groups the inputs and weight rows its own
    // way: AVX2 takes up to six q4 inputs per pass, four q8): each row's bits equal a single call's.
    const n = 1 + (trial % 8);
    const X = new Float32Array(n * cols);
    for (let i = 0; i < n * cols; i++) X[i] = r() * 2 - 1;
    t.ok(rowsMatchSingle(W, X, n), `q${bits} g${group}: linearRows equals linear1 per row, bit for bit`, { diagnostic: false });
  }
  t.ok(checked > 100, `${checked} rows checked`);
});

// f32 rows take several inputs per pass over each block of weight rows (AVX2 three): shapes
// whose rows are not a multiple of four, whose columns are not of eight, and input counts
// that are not of three give each row the bits a single call gives it.
t.test(`f32 linearRows over 1 to 16 inputs equals linear1 per row, bit for bit (${kernelIsa()})`, async (t) => {
  const r = prng(29);
  for (let trial = 0; trial < 20; trial++) {
    const rows = randInt(r, 1, 70);
    const cols = randInt(r, 1, 300);
    const W: Weights = { kind: 'f32', data: Float32Array.from({ length: rows * cols }, () => r() - 0.5), rows, cols };
    const n = 1 + (trial % 16);
    const X = Float32Array.from({ length: n * cols }, () => r() * 2 - 1);
    t.ok(rowsMatchSingle(W, X, n), `${rows}×${cols}, ${n} inputs`, { diagnostic: false });
  }
  // Negative control: a single call on a one-ulp-different input gives other bits.
  const W: Weights = { kind: 'f32', data: Float32Array.from({ length: 8 * 16 }, (_, i) => Math.sin(i)), rows: 8, cols: 16 };
  const x = Float32Array.from({ length: 16 }, (_, i) => Math.cos(i));
  const a = new Float32Array(8);
  const b = new Float32Array(8);
  linear1(W, x, a, new Float32Array(gemvScratchFloats(16)));
  x[3] = Math.fround(x[3]! * (1 + 2 ** -23));
  linear1(W, x, b, new Float32Array(gemvScratchFloats(16)));
  t.notSame([...a], [...b], 'the comparison can fail');
});

t.test(`rows over long inputs (past what the kernels lay out per call): each row's bits equal a single call's (${kernelIsa()})`, async (t) => {
  const r = prng(23);
  // q4 2112: whole 16-group chunks of scales, a part chunk and a half step; 16448: two inputs
  // laid out, four past what fits; 49216: past what fits even for one input (and a half step).
  // Short rows (q4 ≤ 1024 inputs, q8 ≤ 512), whose single calls form four rows' totals at once:
  // q4 1088 is eight steps and a half, seven rows leave three after the last four.
  for (const [bits, cols] of [
    [8, 448],
    [8, 512],
    [4, 512],
    [4, 1024],
    [4, 1088],
    [8, 2048],
    [8, 16384],
    [8, 16448],
    [4, 2048],
    [4, 2112],
    [4, 16384],
    [4, 16448],
    [4, 49216],
  ] as const) {
    for (const group of [32, 64]) {
      const rows = cols <= 1088 ? 7 : 6;
      const W = randomQuantized(r, rows, cols, bits, group);
      for (const n of [2, 5]) {
        const X = Float32Array.from({ length: n * cols }, () => r() * 2 - 1);
        t.ok(rowsMatchSingle(W, X, n), `q${bits} g${group} ${rows}×${cols}, ${n} inputs`, { diagnostic: false });
      }
    }
  }
});

t.test(`activation quantization: each group's sum, scale and int8 values, bit for bit (${kernelIsa()})`, async (t) => {
  // What linear1 leaves in its scratch: Σx per group (added in order from 0), xs = max|x|/127,
  // xq = rint(x/xs) clamped to ±127 (a NaN gives 127, as std::min/max order it), q4 blocks as
  // 32 evens then 32 odds. Group counts that are not multiples of 16 and odd values included.
  const r = prng(33);
  let mismatches = 0;
  let groupsChecked = 0;
  for (let trial = 0; trial < 30; trial++) {
    const group = trial % 2 === 0 ? 32 : 64;
    const q4 = trial % 3 !== 0;
    const groups = randInt(r, 1, 40);
    const cols = groups * group;
    if (q4 && cols % 64 !== 0) continue;
    const x = Float32Array.from({ length: cols }, () => (r() * 2 - 1) * 10 ** randInt(r, -3, 3));
    if (trial % 4 === 1) x[randInt(r, 0, cols - 1)] = Number.NaN;
    if (trial % 5 === 2) x[randInt(r, 0, cols - 1)] = trial % 2 ? Number.POSITIVE_INFINITY : Number.NEGATIVE_INFINITY;
    if (trial % 3 === 1) x.fill(0, 0, group);
    x[randInt(r, 0, cols - 1)] = -0;
    const q = quantize(new Float32Array(cols), 1, cols, q4 ? 4 : 8, group);
    const W: Weights = { kind: q4 ? 'q4' : 'q8', data: q.data, scales: q.scales, biases: q.biases, group, rows: 1, cols };
    const scratch = new Float32Array(gemvScratchFloats(cols));
    linear1(W, x, new Float32Array(1), scratch);
    const xsum = scratch.subarray(0, groups);
    const xs = scratch.subarray(groups, 2 * groups);
    const xq = new Int8Array(scratch.buffer, scratch.byteOffset + 8 * groups, cols);
    const want = new Int8Array(cols);
    for (let g = 0; g < groups; g++) {
      let amax = 0;
      let sum = 0;
      for (let k = g * group; k < (g + 1) * group; k++) {
        if (Math.abs(x[k]!) > amax) amax = Math.abs(x[k]!);
        sum = Math.fround(sum + x[k]!);
      }
      const d = Math.fround(amax / 127);
      const inv = d > 0 ? Math.fround(1 / d) : 0;
      for (let k = g * group; k < (g + 1) * group; k++) {
        const v = rint(Math.fround(x[k]! * inv));
        want[k] = Number.isNaN(v) ? 127 : Math.max(-127, Math.min(127, v));
      }
      if (!Object.is(xsum[g], sum) || !Object.is(xs[g], d)) mismatches++;
      groupsChecked++;
    }
    if (q4) {
      for (let b = 0; b < cols; b += 64) {
        const block = want.slice(b, b + 64);
        for (let i = 0; i < 32; i++) {
          want[b + i] = block[2 * i]!;
          want[b + 32 + i] = block[2 * i + 1]!;
        }
      }
    }
    for (let k = 0; k < cols; k++) if (xq[k] !== want[k]) mismatches++;
  }
  t.equal(mismatches, 0, `${groupsChecked} groups: sums, scales and int8 values as the scalar definition gives them`);
});

t.test(
  `prefill kernel (linearPrefill): its exact integer arithmetic, the same bits whatever n, the rows around it or the threads (${kernelIsa()})`,
  async (t) => {
    const r = prng(34);
    const scalar = kernelIsa() === 'scalar';
    let checked = 0;
    for (let trial = 0; trial < 12; trial++) {
      const group = trial % 2 === 0 ? 32 : 64;
      const bits = trial % 3 === 0 ? 8 : 4;
      const rows = randInt(r, 1, 45);
      const cols = 64 * randInt(r, 1, 9); // past one 256-input block for some
      const n = [1, 3, 16, 17, 33, 70][trial % 6]!;
      const w = Float32Array.from({ length: rows * cols }, () => r() - 0.5);
      const q = quantize(w, rows, cols, bits, group);
      const W: Weights = { kind: bits === 8 ? 'q8' : 'q4', data: q.data, scales: q.scales, biases: q.biases, group, rows, cols };
      const X = Float32Array.from({ length: n * cols }, () => (r() * 2 - 1) * (trial % 4 === 0 ? 30 : 1));
      const Y = new Float32Array(n * rows);
      linearPrefill(W, X, Y, n, new Float32Array(prefillScratchFloats(n, cols)));
      // Per row and input: y = Σ_g (D_g·fround(s·xs) + b·Σx) in float64, D_g the exact integer dot.
      const groups = cols / group;
      let exact = true;
      let fusedBits = true;
      for (let a = 0; a < n; a++) {
        const x = X.subarray(a * cols, (a + 1) * cols);
        for (let i = 0; i < rows; i++) {
          let ref = 0;
          let mag = 0;
          // The integer GEMM's own f32 steps: y = fma(D_g, s·xs, y), then y = fma(b, Σx, y). The
          // products are exact in float64 (D_g < 2^24, s an f16), so each step rounds once but
          // for a double rounding of the sum, which these inputs do not meet.
          let fused = 0;
          for (let g = 0; g < groups; g++) {
            const { xs, xsum, dot } = intGroup(q.data, bits, cols, group, x, i, g);
            const s = Math.fround(f16ToF32(q.scales[i * groups + g]!) * xs);
            const b = f16ToF32(q.biases[i * groups + g]!);
            const term = s * dot + b * xsum;
            ref += term;
            mag += Math.abs(term);
            fused = Math.fround(b * xsum + Math.fround(dot * s + fused));
          }
          if (Math.abs(Y[a * rows + i]! - ref) > 1e-5 * mag + 1e-6) exact = false;
          if (!Object.is(Y[a * rows + i], fused)) fusedBits = false;
          checked++;
        }
      }
      t.ok(exact, `q${bits} g${group} ${rows}×${cols}, ${n} inputs: equals Σ_g (D_g·s·xs + b·Σx)`, { diagnostic: false });
      // Both vector paths (VNNI, AVX2) compute exactly these steps, so they agree bit for bit.
      if (!scalar) t.ok(fusedBits, `q${bits} g${group}: the bits of the fused f32 steps per output`, { diagnostic: false });
      // Each input alone, and the inputs in the other order: the same bits.
      let alone = true;
      for (let a = 0; a < n; a++) {
        const one = new Float32Array(rows);
        linearPrefill(W, X.subarray(a * cols, (a + 1) * cols), one, 1, new Float32Array(prefillScratchFloats(1, cols)));
        for (let i = 0; i < rows; i++) if (!Object.is(one[i], Y[a * rows + i])) alone = false;
      }
      t.ok(alone, `q${bits} g${group}: each of ${n} inputs alone gives its bits`, { diagnostic: false });
      const rev = new Float32Array(n * cols);
      for (let a = 0; a < n; a++) rev.set(X.subarray(a * cols, (a + 1) * cols), (n - 1 - a) * cols);
      const Yr = new Float32Array(n * rows);
      setComputeThreads(2);
      try {
        linearPrefill(W, rev, Yr, n, new Float32Array(prefillScratchFloats(n, cols)));
      } finally {
        setComputeThreads(1);
      }
      let swapped = true;
      for (let a = 0; a < n; a++) for (let i = 0; i < rows; i++) if (!Object.is(Yr[(n - 1 - a) * rows + i], Y[a * rows + i])) swapped = false;
      t.ok(swapped, `q${bits} g${group}: reversed inputs on two threads give the same bits`, { diagnostic: false });
      if (scalar) {
        // Without vector integer instructions the prefill kernel is linearRows.
        const R = new Float32Array(n * rows);
        linearRows(W, X, R, n, new Float32Array(n * gemvScratchFloats(cols)));
        t.ok(
          R.every((v, i) => Object.is(v, Y[i])),
          `q${bits} g${group}: linearRows' bits on the scalar path`,
          { diagnostic: false },
        );
      }
    }
    t.ok(checked > 300, `${checked} outputs checked`);
    const f32: Weights = { kind: 'f32', data: new Float32Array(64), rows: 1, cols: 64 };
    t.throws(() => linearPrefill(f32, new Float32Array(64), new Float32Array(1), 1, new Float32Array(prefillScratchFloats(1, 64))), /q8 or q4 weights/);
  },
);

t.test('two, three and eight compute threads give the same bits as one (linear layers, GEMM, SwiGLU and SiLU)', async (t) => {
  const r = prng(22);
  const rows = 300;
  const cols = 1024;
  const w = Float32Array.from({ length: rows * cols }, () => r() - 0.5);
  const x = Float32Array.from({ length: 4 * cols }, () => r() * 2 - 1);
  const q = quantize(w, rows, cols, 4, 64);
  const all: Weights[] = [
    { kind: 'f32', data: w, rows, cols },
    { kind: 'q4', data: q.data, scales: q.scales, biases: q.biases, group: 64, rows, cols },
  ];
  const run = (): Float32Array[] =>
    all.flatMap((W) => {
      const one = new Float32Array(rows);
      linear1(W, x.subarray(0, cols), one, new Float32Array(gemvScratchFloats(cols)));
      const four = new Float32Array(4 * rows);
      linearRows(W, x, four, 4, new Float32Array(4 * gemvScratchFloats(cols)));
      return [one, four];
    });
  // GEMM: columns past one block of 256, a partial last panel, K past one block of 256.
  const q8 = quantize(w, rows, cols, 8, 32);
  const gemmWeights: Weights[] = [...all, { kind: 'q8', data: q8.data, scales: q8.scales, biases: q8.biases, group: 32, rows, cols }];
  const A = Float32Array.from({ length: 13 * cols }, () => r() - 0.5);
  const bias = Float32Array.from({ length: rows }, () => r());
  const runGemm = (): Float32Array[] =>
    gemmWeights.map((W) => {
      const C = new Float32Array(13 * rows);
      gemm(A, W, bias, C, 13, rows, cols, new Float32Array(GEMM_PACK_FLOATS));
      return C;
    });
  // Activations long enough to split, with a tail and gates past the vector exponential's range.
  const n = 20_011;
  const g = Float32Array.from({ length: n }, () => (r() - 0.5) * 24);
  g[100] = 800;
  g[9_000] = -800;
  g[15_000] = Number.NaN;
  const up = Float32Array.from({ length: n }, () => r() - 0.5);
  const runActivations = (): Float32Array[] => {
    const sw = new Float32Array(n);
    swiglu(g, up, sw, n);
    const si = new Float32Array(n);
    silu(g, si, n);
    return [sw, si];
  };
  t.equal(computeThreads(), 1);
  const a = [...run(), ...runGemm(), ...runActivations()];
  // Three and eight threads on a machine with fewer cores: helpers start late or are descheduled,
  // and the threads that run take their parts.
  for (const n of [2, 3, 8]) {
    t.equal(setComputeThreads(n), n, `${n} threads`);
    let b: Float32Array[];
    try {
      b = [...run(), ...runGemm(), ...runActivations()];
    } finally {
      setComputeThreads(1);
    }
    t.equal(computeThreads(), 1, 'back to one');
    a.forEach((v, i) => {
      t.ok(
        v.every((e, j) => Object.is(e, b[i]![j])),
        `${n} threads, result ${i}: the same bits`,
      );
    });
  }
});

/** A q8/q4 matrix of random weights in [−0.5, 0.5). */
function randomQuantized(r: () => number, rows: number, cols: number, bits: 4 | 8, group: number): Weights {
  const q = quantize(
    Float32Array.from({ length: rows * cols }, () => r() - 0.5),
    rows,
    cols,
    bits,
    group,
  );
  return { kind: bits === 8 ? 'q8' : 'q4', data: q.data, scales: q.scales, biases: q.biases, group, rows, cols };
}

/** Three random q8/q4 matrices for the fused-set tests: row counts that are not multiples of the split's alignment, so parts straddle matrices. */
function setMatrices(r: () => number, bits: 4 | 8, group: number, cols: number): Weights[] {
  return [37, 130, 9].map((rows) => randomQuantized(r, rows, cols, bits, group));
}

t.test('linearMany gives each matrix the bits linear1 gives it, on one and two threads', async (t) => {
  const r = prng(23);
  const cols = 512;
  const x = Float32Array.from({ length: cols }, () => r() * 2 - 1);
  const scratch = new Float32Array(gemvScratchFloats(cols));
  for (const [bits, group] of [
    [4, 64],
    [8, 32],
    [4, 32],
  ] as const) {
    const mats = setMatrices(r, bits, group, cols);
    for (const n of [2, 3]) {
      const ws = mats.slice(0, n);
      const set = linearSet(
        ws,
        ws.map((m) => new Float32Array(m.rows)),
      );
      t.ok(set.fused, `q${bits} g${group}: ${n} matrices in one call`);
      for (const threads of [1, 2]) {
        setComputeThreads(threads);
        try {
          for (const y of set.y) y.fill(Number.NaN);
          linearMany(set, x, scratch);
          const same = ws.every((m, i) => {
            const one = new Float32Array(m.rows);
            linear1(m, x, one, scratch);
            return one.every((v, j) => Object.is(v, set.y[i]![j]));
          });
          t.ok(same, `q${bits} g${group}, ${n} matrices, ${threads} thread(s): every row's bits`);
        } finally {
          setComputeThreads(1);
        }
      }
    }
  }
  const f = { kind: 'f32', data: new Float32Array(4 * cols), rows: 4, cols } as Weights;
  t.notOk(linearSet([f, f], [new Float32Array(4), new Float32Array(4)]).fused, 'float matrices run one call each');
  t.throws(() => native.gemvIntMany(4, x, 1, cols, scratch, 1, new Uint8Array(2), new Uint16Array(1), new Uint16Array(1), 64, new Float32Array(4), 4), {
    name: 'RangeError',
    message: /w has 2 elements, needs/,
  });
});

t.test('linearRowsMany gives each matrix the bits linearRows gives it, on one and two threads', async (t) => {
  const r = prng(24);
  const cols = 512;
  for (const [bits, group] of [
    [4, 64],
    [8, 32],
  ] as const) {
    const mats = setMatrices(r, bits, group, cols);
    for (const n of [2, 6]) {
      const X = Float32Array.from({ length: n * cols }, () => r() * 2 - 1);
      const scratch = new Float32Array(n * gemvScratchFloats(cols));
      for (const count of [2, 3]) {
        const ws = mats.slice(0, count);
        const set = linearSet(
          ws,
          ws.map((m) => new Float32Array(m.rows)),
        );
        const Y = ws.map((m) => new Float32Array(n * m.rows));
        for (const threads of [1, 2]) {
          setComputeThreads(threads);
          try {
            for (const y of Y) y.fill(Number.NaN);
            linearRowsMany(set, X, Y, n, scratch);
            const same = ws.every((m, i) => {
              const want = new Float32Array(n * m.rows);
              linearRows(m, X, want, n, new Float32Array(n * gemvScratchFloats(cols)));
              return want.every((v, j) => Object.is(v, Y[i]![j]));
            });
            t.ok(same, `q${bits} g${group}, ${count} matrices, ${n} rows, ${threads} thread(s): every row's bits`);
          } finally {
            setComputeThreads(1);
          }
        }
      }
    }
  }
  const q = quantize(new Float32Array(64 * cols), 64, cols, 4, 64);
  const w = { kind: 'q4', data: q.data, scales: q.scales, biases: q.biases, group: 64, rows: 64, cols } as Weights;
  const set = linearSet([w, w], [new Float32Array(64), new Float32Array(64)]);
  const X = new Float32Array(2 * cols);
  t.throws(() => linearRowsMany(set, X, [new Float32Array(128)], 2, new Float32Array(2 * gemvScratchFloats(cols))), /1 outputs for 2 matrices/);
  t.throws(
    () => linearRowsMany(set, X, [new Float32Array(128), new Float32Array(64)], 2, new Float32Array(2 * gemvScratchFloats(cols))),
    { name: 'RangeError', message: /Y has 64 values, needs 128/ },
    'an output one row short is refused',
  );
  const Y0 = new Float32Array(256);
  t.throws(() => linearRowsMany(set, X, [Y0.subarray(0, 128), Y0.subarray(64, 192)], 2, new Float32Array(2 * gemvScratchFloats(cols))), /must not overlap/);
});

t.test('bias sum in f32 vs narrow operands (negative control)', async (t) => {
  const r = prng(5);
  const rows = 256;
  const cols = 2048;
  const group = 64;
  // Activations with a large common offset, as after a residual stream: Σx per group is big.
  const x = Float32Array.from({ length: cols }, () => 12 + (r() - 0.5));
  const w = Float32Array.from({ length: rows * cols }, () => (r() - 0.5) * 0.05);
  const q = quantize(w, rows, cols, 8, group);
  const ref = gemvRef((i, k) => dequantizedAt(q, i, k), x, rows, cols);
  const y = new Float32Array(rows);
  gemv({ kind: 'q8', data: q.data, scales: q.scales, biases: q.biases, group, rows, cols }, x, y, new Float32Array(cols / group));
  // The same product with the bias term's Σx summed in f16 (each partial sum rounded to half).
  const half = (v: number) => f16ToF32(f32ToF16(v));
  const narrow = new Float64Array(rows);
  for (let i = 0; i < rows; i++) {
    let acc = 0;
    for (let g = 0; g < cols / group; g++) {
      let qx = 0;
      let xs = 0;
      for (let k = g * group; k < (g + 1) * group; k++) {
        const v = q.data[i * cols + k]!;
        qx += v * x[k]!;
        xs = half(xs + half(x[k]!));
      }
      acc += f16ToF32(q.scales[i * (cols / group) + g]!) * qx + f16ToF32(q.biases[i * (cols / group) + g]!) * xs;
    }
    narrow[i] = acc;
  }
  const good = nmse(y, ref);
  const bad = nmse(narrow, ref);
  t.ok(good <= 1e-10, `f32 bias sum: NMSE ${good.toExponential(2)}`);
  t.ok(bad > 100 * good, `f16 bias sum is measurably worse: NMSE ${bad.toExponential(2)} (${(bad / good).toExponential(1)}×)`);
});

const gemmRef = (A: Float32Array, W: Float32Array, bias: Float32Array | null, T: number, N: number, K: number): Float64Array => linear64(A, T, K, W, bias, N);

t.test('GEMM matches a float64 reference, odd sizes included', async (t) => {
  const r = prng(2);
  const pack = new Float32Array(GEMM_PACK_FLOATS);
  const shapes: [number, number, number][] = [
    [1, 1, 1],
    [6, 16, 256],
    [7, 17, 257],
    [13, 37, 300],
    [64, 40, 512],
    [5, 300, 600],
  ];
  for (let i = 0; i < 20; i++) shapes.push([randInt(r, 1, 20), randInt(r, 1, 60), randInt(r, 1, 700)]);
  for (const [T, N, K] of shapes) {
    const A = Float32Array.from({ length: T * K }, () => r() - 0.5);
    const W = Float32Array.from({ length: N * K }, () => r() - 0.5);
    const bias = Float32Array.from({ length: N }, () => r());
    const C = new Float32Array(T * N).fill(Number.NaN);
    gemm(A, W, bias, C, T, N, K, pack);
    t.ok(nmse(C, gemmRef(A, W, bias, T, N, K)) <= 1e-10, `${T}×${K} · (${N}×${K})ᵀ + bias`, { diagnostic: false });
    gemm(A, W, null, C, T, N, K, pack);
    t.ok(nmse(C, gemmRef(A, W, null, T, N, K)) <= 1e-10, `${T}×${K} · (${N}×${K})ᵀ`, { diagnostic: false });
  }
});

t.test('GEMM with f16, bf16, q8 and q4 weights matches the float64 product of the decoded weights', async (t) => {
  const r = prng(6);
  const pack = new Float32Array(GEMM_PACK_FLOATS);
  for (const [T, N, K] of [
    [7, 17, 64],
    [13, 40, 320],
    [1, 5, 128],
    [20, 33, 256],
  ] as const) {
    const A = Float32Array.from({ length: T * K }, () => r() - 0.5);
    const w = Float32Array.from({ length: N * K }, () => r() - 0.5);
    const h = Uint16Array.from(w, (v) => f32ToF16(v));
    const b = Uint16Array.from(w, (v) => f32ToBf16(v));
    const q8 = quantize(w, N, K, 8, 32);
    const q4 = quantize(w, N, K, 4, 64);
    const encodings: [string, Weights, (n: number, k: number) => number][] = [
      ['f16', { kind: 'f16', data: h, rows: N, cols: K }, (n, k) => f16ToF32(h[n * K + k]!)],
      ['bf16', { kind: 'bf16', data: b, rows: N, cols: K }, (n, k) => bf16ToF32(b[n * K + k]!)],
      ['q8', { kind: 'q8', data: q8.data, scales: q8.scales, biases: q8.biases, group: 32, rows: N, cols: K }, (n, k) => dequantizedAt(q8, n, k)],
      ['q4', { kind: 'q4', data: q4.data, scales: q4.scales, biases: q4.biases, group: 64, rows: N, cols: K }, (n, k) => dequantizedAt(q4, n, k)],
    ];
    for (const [name, weights, at] of encodings) {
      const C = new Float32Array(T * N);
      gemm(A, weights, null, C, T, N, K, pack);
      const ref = new Float64Array(T * N);
      for (let i = 0; i < T; i++)
        for (let n = 0; n < N; n++) {
          let s = 0;
          for (let k = 0; k < K; k++) s += A[i * K + k]! * at(n, k);
          ref[i * N + n] = s;
        }
      t.ok(nmse(C, ref) <= 1e-10, `${name} ${T}×${K}·(${N}×${K})ᵀ`, { diagnostic: false });
    }
  }
});

t.test('kernels give the same bits on another thread', async (t) => {
  const T = 9;
  const N = 70;
  const K = 333;
  const A = new Float32Array(new SharedArrayBuffer(T * K * 4));
  const W = new Float32Array(new SharedArrayBuffer(N * K * 4));
  const r = prng(3);
  for (let i = 0; i < A.length; i++) A[i] = r() - 0.5;
  for (let i = 0; i < W.length; i++) W[i] = r() - 0.5;
  const C = new Float32Array(T * N);
  gemm(A, W, null, C, T, N, K, new Float32Array(GEMM_PACK_FLOATS));
  const y = new Float32Array(N);
  gemv({ kind: 'f32', data: W, rows: N, cols: K }, A.subarray(0, K), y);
  const other = await runWorker<{ C: Float32Array; y: Float32Array }>(new URL('./workers/kernel.js', import.meta.url), { A: A.buffer, W: W.buffer, T, N, K });
  t.ok(
    other.C.every((v, i) => Object.is(v, C[i])),
    'GEMM bits equal',
  );
  t.ok(
    other.y.every((v, i) => Object.is(v, y[i])),
    'GEMV bits equal',
  );
});

t.test('compute threads computing at once divide the CPUs: each call narrows while another pool computes, and the bits stay', async (t) => {
  const cpus = native.allowedCpus().length;
  if (cpus !== 2) {
    t.pass(`skipped: the figures below are for a two-CPU budget (this process has ${cpus})`);
    return;
  }
  const rows = 1024;
  const cols = 1024;
  const W = new Float32Array(new SharedArrayBuffer(rows * cols * 4));
  const x = new Float32Array(new SharedArrayBuffer(cols * 4));
  const r = prng(11);
  for (let i = 0; i < W.length; i++) W[i] = r() - 0.5;
  for (let i = 0; i < x.length; i++) x[i] = r() - 0.5;
  const want = new Float32Array(rows);
  gemv({ kind: 'f32', data: W, rows, cols }, x, want);
  type Out = { y: Float32Array; calls: number; narrowed: number };
  const run = async (n: number): Promise<Out[]> => {
    const go = new Int32Array(new SharedArrayBuffer(8));
    const url = new URL('./workers/split.js', import.meta.url);
    const done = Array.from({ length: n }, () => runWorker<Out>(url, { W: W.buffer, x: x.buffer, rows, cols, go: go.buffer, ms: 400 }));
    // Start them together only once every worker is at the line (a loaded machine starts one late).
    while (Atomics.load(go, 1) < n) await new Promise((res) => setTimeout(res, 5));
    Atomics.store(go, 0, 1);
    Atomics.notify(go, 0);
    return Promise.all(done);
  };
  const [alone] = await run(1);
  t.equal(alone!.narrowed, 0, `one pool alone uses both threads in all its ${alone!.calls} calls`);
  const both = await run(2);
  const narrowed = both.reduce((s, o) => s + o.narrowed, 0);
  const calls = both.reduce((s, o) => s + o.calls, 0);
  t.ok(narrowed > 0, `two pools at once on two CPUs: ${narrowed} of ${calls} calls ran on one thread`);
  for (const o of [alone!, ...both])
    t.ok(
      o.y.every((v, i) => Object.is(v, want[i])),
      'the same bits as one thread',
    );
});

t.test(`SiLU, SwiGLU and GLU: the f32 of a / (1 + e^−g) in double (times up in f32), bit for bit, specials included (${kernelIsa()})`, async (t) => {
  const r = prng(35);
  const n = 100_003; // not a multiple of a vector
  const g = Float32Array.from({ length: n }, () => (r() - 0.5) * 2 ** (r() * 14 - 4));
  g.set([Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, -0, 0, 800, -800, 1e-40, -750, 90, -104, 709.5, -745.5], 0);
  const up = Float32Array.from({ length: n }, () => r() - 0.5);
  const y = new Float32Array(n);
  const z = new Float32Array(n);
  silu(g, y);
  swiglu(g, up, z);
  let a = 0;
  let b = 0;
  for (let i = 0; i < n; i++) {
    const s = Math.fround(g[i]! / (1 + Math.exp(-g[i]!)));
    if (!Object.is(y[i], s)) a++;
    if (!Object.is(z[i], Math.fround(s * up[i]!))) b++;
  }
  t.equal(a, 0, `SiLU: ${n} values`);
  t.equal(b, 0, `SwiGLU: ${n} values`);
  // GLU over rows [a | g] of 2·37 values: f32(a / (1 + e^−g)).
  const rows = Math.floor(n / 74);
  const out = new Float32Array(rows * 37);
  glu(g.subarray(0, rows * 74), out, rows, 37);
  let c = 0;
  for (let row = 0; row < rows; row++)
    for (let i = 0; i < 37; i++) if (!Object.is(out[row * 37 + i], Math.fround(g[row * 74 + i]! / (1 + Math.exp(-g[row * 74 + 37 + i]!))))) c++;
  t.equal(c, 0, `GLU: ${rows} rows of 37`);
});

t.test(`pointwise convolution: every output the f32 steps of the scalar loop, bit for bit, on one and two threads (${kernelIsa()})`, async (t) => {
  const r = prng(41);
  const shapes: [number, number, number, boolean, boolean][] = [
    [5, 7, 37, true, true],
    [16, 9, 48, false, false],
    [3, 4, 16, true, false],
    [12, 6, 100, true, true],
    [1, 1, 15, false, true],
  ];
  for (const [Cin, Cout, P, relu, withBias] of shapes) {
    const x = Float32Array.from({ length: Cin * P }, () => r() * 2 - 1);
    x[P - 1] = Number.NaN; // a NaN column stays NaN through the ReLU
    for (let ci = 0; ci < Cin; ci++) x[ci * P + (P >> 1)] = 0; // and a zero column gives the bias
    const w = Float32Array.from({ length: Cout * Cin }, () => r() - 0.5);
    const bias = withBias ? Float32Array.from({ length: Cout }, () => r() - 0.5) : null;
    let same = true;
    for (const threads of [1, 2]) {
      const out = new Float32Array(Cout * P);
      setComputeThreads(threads);
      try {
        native.pointwise(x, w, bias, out, Cin, Cout, P, relu);
      } finally {
        setComputeThreads(1);
      }
      for (let c = 0; c < Cout; c++)
        for (let p = 0; p < P; p++) {
          let o = bias === null ? 0 : bias[c]!;
          for (let ci = 0; ci < Cin; ci++) o = Math.fround(o + Math.fround(w[c * Cin + ci]! * x[ci * P + p]!));
          // biome-ignore lint/complexity/useMathMinMax: the kernel's o < 0 ? 0 : o keeps −0, which Math.max(o, 0) does not
          if (relu) o = o < 0 ? 0 : o;
          if (!Object.is(out[c * P + p], o)) same = false;
        }
    }
    t.ok(same, `${Cin}→${Cout} channels × ${P} positions${relu ? ', ReLU' : ''}${withBias ? ', bias' : ''}`);
  }
});

t.test(`stride-2 3×3 convolution: every output the f32 steps of the scalar loop, bit for bit, in row tiles and on two threads (${kernelIsa()})`, async (t) => {
  const r = prng(43);
  const shapes: [number, boolean, number, number, number, boolean][] = [
    [1, false, 41, 70, 5, true],
    [6, true, 23, 33, 6, false],
    [3, true, 9, 17, 3, true],
    [2, false, 11, 40, 3, true],
  ];
  for (const [Cin, depthwise, inTotal, inCols, Cout, relu] of shapes) {
    const outTotal = Math.floor((inTotal - 1) / 2) + 1;
    const outCols = Math.floor((inCols - 1) / 2) + 1;
    const w = Float32Array.from({ length: depthwise ? Cout * 9 : Cout * Cin * 9 }, () => r() - 0.5);
    const bias = Float32Array.from({ length: Cout }, () => r() - 0.5);
    const full = Float32Array.from({ length: Cin * inTotal * inCols }, () => r() * 2 - 1);
    let same = true;
    for (const [outRow0, outRows, threads] of [
      [0, outTotal, 1],
      [1, outTotal - 2, 2],
    ] as const) {
      const inRow0 = Math.max(0, 2 * outRow0 - 1);
      const inRows = Math.min(inTotal, 2 * (outRow0 + outRows - 1) + 2) - inRow0;
      const x = new Float32Array(Cin * inRows * inCols);
      for (let ci = 0; ci < Cin; ci++) x.set(full.subarray((ci * inTotal + inRow0) * inCols, (ci * inTotal + inRow0 + inRows) * inCols), ci * inRows * inCols);
      const out = new Float32Array(Cout * outRows * outCols);
      setComputeThreads(threads);
      try {
        native.conv2dS2(x, Cin, inRow0, inRows, inTotal, inCols, w, bias, depthwise, out, Cout, outRow0, outRows, outCols, relu);
      } finally {
        setComputeThreads(1);
      }
      for (let co = 0; co < Cout; co++)
        for (let orow = outRow0; orow < outRow0 + outRows; orow++)
          for (let col = 0; col < outCols; col++) {
            let s = bias[co]!;
            for (let ci = depthwise ? co : 0; ci < (depthwise ? co + 1 : Cin); ci++)
              for (let di = 0; di < 3; di++) {
                const irow = 2 * orow - 1 + di;
                if (irow < 0 || irow >= inTotal) continue;
                for (let dj = 0; dj < 3; dj++) {
                  const icol = 2 * col - 1 + dj;
                  if (icol < 0 || icol >= inCols) continue;
                  const wk = w[(depthwise ? co * 9 : (co * Cin + ci) * 9) + di * 3 + dj]!;
                  s = Math.fround(s + Math.fround(wk * full[(ci * inTotal + irow) * inCols + icol]!));
                }
              }
            // biome-ignore lint/complexity/useMathMinMax: the kernel's s < 0 ? 0 : s keeps −0, which Math.max(s, 0) does not
            if (relu) s = s < 0 ? 0 : s;
            if (!Object.is(out[(co * outRows + (orow - outRow0)) * outCols + col], s)) same = false;
          }
    }
    t.ok(same, `${depthwise ? 'depthwise ' : ''}${Cin}→${Cout} channels, ${inTotal}×${inCols} in${relu ? ', ReLU' : ''}`);
  }
});

t.test('addRmsNorm: the residual added and the norm taken, with the bits of the add then rmsNorm', async (t) => {
  const r = prng(43);
  for (const [rows, dim] of [
    [1, 1024],
    [2, 37],
    [3, 2048],
  ] as const) {
    const x = Float32Array.from({ length: rows * dim }, () => (r() - 0.5) * 8);
    const res = Float32Array.from({ length: rows * dim }, () => (r() - 0.5) * 3);
    const w = Float32Array.from({ length: dim }, () => r() + 0.5);
    const x2 = x.slice();
    for (let i = 0; i < rows * dim; i++) x2[i] = x2[i]! + res[i]!;
    const want = new Float32Array(rows * dim);
    rmsNorm(x2, w, want, rows, dim, 1e-5);
    const y = new Float32Array(rows * dim);
    addRmsNorm(x, res, w, y, rows, dim, 1e-5);
    t.ok(
      x.every((v, i) => Object.is(v, x2[i])),
      `${rows}×${dim}: x holds the sum`,
    );
    t.ok(
      y.every((v, i) => Object.is(v, want[i])),
      `${rows}×${dim}: y is rmsNorm of it`,
    );
  }
  const x = new Float32Array(64);
  t.throws(() => addRmsNorm(x, x.subarray(32), new Float32Array(32), new Float32Array(32), 1, 32), /must not overlap/, 'a residual overlapping x is refused');
  t.throws(() => addRmsNorm(x, new Float32Array(16), new Float32Array(32), new Float32Array(32), 1, 32), RangeError, 'a short residual is refused');
});

t.test('norms, activations and RoPE match references', async (t) => {
  const r = prng(4);
  const rows = 5;
  const dim = 37;
  const x = Float32Array.from({ length: rows * dim }, () => (r() - 0.5) * 4);
  const w = Float32Array.from({ length: dim }, () => r() + 0.5);
  const b = Float32Array.from({ length: dim }, () => r() - 0.5);
  const y = new Float32Array(rows * dim);
  const close = (got: Float32Array, want: number[], what: string) => t.ok(nmse(got, want) <= 1e-12, what);
  rmsNorm(x, w, y, rows, dim, 1e-5);
  close(
    y,
    Array.from(x, (v, i) => {
      const row = Math.floor(i / dim);
      let ss = 0;
      for (let k = 0; k < dim; k++) ss += x[row * dim + k]! ** 2;
      return (v / Math.sqrt(ss / dim + 1e-5)) * w[i % dim]!;
    }),
    'RMSNorm: x · rsqrt(mean(x²) + ε) · w',
  );
  layerNorm(x, w, b, y, rows, dim, 1e-5);
  close(
    y,
    Array.from(x, (v, i) => {
      const row = Math.floor(i / dim);
      let m = 0;
      for (let k = 0; k < dim; k++) m += x[row * dim + k]!;
      m /= dim;
      let vv = 0;
      for (let k = 0; k < dim; k++) vv += (x[row * dim + k]! - m) ** 2;
      return ((v - m) / Math.sqrt(vv / dim + 1e-5)) * w[i % dim]! + b[i % dim]!;
    }),
    'LayerNorm',
  );
  // erf by its series, independent of the native libm.
  const erf = (z: number) => {
    let s = 0;
    let term = z;
    for (let n = 0; n < 80; n++) {
      s += term / (2 * n + 1);
      term *= (-z * z) / (n + 1);
    }
    return (2 / Math.sqrt(Math.PI)) * s;
  };
  gelu(x, y);
  close(
    y,
    Array.from(x, (v) => 0.5 * v * (1 + erf(v / Math.SQRT2))),
    'exact (erf) GELU',
  );
  silu(x, y);
  close(
    y,
    Array.from(x, (v) => v / (1 + Math.exp(-v))),
    'SiLU',
  );
  swiglu(x, b.length === dim ? Float32Array.from(x, (v) => v * 0.5) : x, y);
  close(
    y,
    Array.from(x, (v) => (v / (1 + Math.exp(-v))) * v * 0.5),
    'SwiGLU',
  );
  const y2 = new Float32Array(rows * 18);
  glu(x.subarray(0, rows * 36), y2, rows, 18);
  close(
    y2,
    Array.from({ length: rows * 18 }, (_, i) => {
      const row = Math.floor(i / 18);
      const c = i % 18;
      return x[row * 36 + c]! / (1 + Math.exp(-x[row * 36 + 18 + c]!));
    }),
    'GLU: first half · sigmoid(second half)',
  );
  const hd = 8;
  const heads = 2;
  const cos = new Float32Array(10 * (hd / 2));
  const sin = new Float32Array(10 * (hd / 2));
  ropeTables(10, hd, 1e6, cos, sin);
  for (const adjacent of [false, true]) {
    const v = Float32Array.from({ length: 3 * heads * hd }, () => r() - 0.5);
    const orig = Float32Array.from(v);
    rope(v, cos, sin, 3, heads, hd, 4, adjacent);
    const want = Array.from(orig);
    for (let row = 0; row < 3; row++)
      for (let h = 0; h < heads; h++)
        for (let i = 0; i < hd / 2; i++) {
          const a = (row * heads + h) * hd + (adjacent ? 2 * i : i);
          const bb = (row * heads + h) * hd + (adjacent ? 2 * i + 1 : i + hd / 2);
          const ang = (4 + row) * 1e6 ** ((-2 * i) / hd);
          want[a] = orig[a]! * Math.cos(ang) - orig[bb]! * Math.sin(ang);
          want[bb] = orig[bb]! * Math.cos(ang) + orig[a]! * Math.sin(ang);
        }
    close(v, want, `RoPE ${adjacent ? 'adjacent pairs' : 'rotate-half'}`);
  }
});

t.test('sizes at the addon boundary cannot overflow: huge counts are refused, never read or written out of bounds', async (t) => {
  // Each case runs in a child: before the checks, some wrapped and crashed the process.
  const url = new URL('../../src/native.js', import.meta.url).href;
  const cases: [string, string][] = [
    ['rope: (pos0 + rows) × hd/2 wraps', 'native.rope(f(8192), f(8), f(8), 1, 1, 8192, 2 ** 52 - 1, true)'],
    ['pointwise: Cin × P = 2^64', 'native.pointwise(f(0), f(0), null, f(0), 2 ** 32, 2 ** 32, 2 ** 32, false)'],
    ['gemm: T × K = 2^64', 'native.gemm(f(4), 0, f(4), null, null, 0, null, f(4), 2 ** 32, 2 ** 32, 2 ** 32, f(GEMM))'],
    ['conv2d: Cout × Cin × 9 past 2^53', 'native.conv2dS2(f(1), 1, 0, 1, 1, 1, f(0), null, false, f(0), 2 ** 52, 0, 1, 1, false)'],
  ];
  for (const [what, call] of cases) {
    const src = `import(${JSON.stringify(url)}).then(({ native }) => {
      const f = (n) => new Float32Array(n);
      const GEMM = ${GEMM_PACK_FLOATS};
      try { ${call}; console.log('no error'); } catch (e) { console.log(e.name + ' ' + e.code + ' ' + e.message); }
    });`;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', src], { encoding: 'utf8', timeout: 60_000 });
    t.equal(r.signal, null, `${what}: no crash`);
    t.match(r.stdout, /^RangeError ERR_VOXSLAB_ARGUMENT \w+: sizes out of range/, `${what}: a typed refusal (${r.stdout.trim()})`);
  }
});

t.test('kernels check their arguments', async (t) => {
  const f = (n: number) => new Float32Array(n);
  t.throws(() => native.gemv(9, f(4), null, null, 0, f(2), f(2), 2, 2, null), { name: 'RangeError', message: /type must be/ });
  t.throws(() => native.gemv(0, f(3), null, null, 0, f(2), f(2), 2, 2, null), { name: 'RangeError', message: /w has 3 elements, needs 4/ });
  t.throws(() => native.gemv(1, f(4), null, null, 0, f(2), f(2), 2, 2, null), { name: 'TypeError', message: /w must be a Uint16Array/ });
  const h = (n: number) => new Uint16Array(n);
  t.throws(() => native.gemv(3, new Uint8Array(64), h(2), h(2), 12, f(32), f(2), 2, 32, f(4)), {
    name: 'RangeError',
    message: /group must be a multiple of 8/,
  });
  t.throws(() => native.gemv(3, new Uint8Array(64), h(1), h(2), 32, f(32), f(2), 2, 32, f(1)), { name: 'RangeError', message: /scales has 1 values, needs 2/ });
  t.throws(() => native.gemv(3, new Uint8Array(64), f(2) as unknown as Uint16Array, h(2), 32, f(32), f(2), 2, 32, f(2)), {
    name: 'TypeError',
    message: /scales must be a Uint16Array/,
  });
  const shared = f(8);
  t.throws(() => native.gemv(0, f(4), null, null, 0, shared.subarray(0, 2), shared.subarray(1, 3), 2, 2, null), {
    name: 'RangeError',
    message: /must not overlap/,
  });
  t.throws(() => native.gemm(f(4), 0, f(4), null, null, 0, null, f(4), 2, 2, 2, f(10)), { name: 'RangeError', message: /pack has 10 values/ });
  t.throws(() => native.gemm(f(4), 2, f(4), null, null, 0, null, f(4), 2, 2, 2, f(GEMM_PACK_FLOATS)), {
    name: 'TypeError',
    message: /w must be a Uint16Array/,
  });
  t.throws(() => native.rope(f(16), f(8), f(8), 1, 2, 7, 0, true), { name: 'RangeError', message: /hd must be even/ });
  t.throws(() => native.norm(0, f(4), f(2), null, f(4), 2, 2, -1), { name: 'RangeError', message: /eps non-negative/ });
  t.throws(() => native.activation(2, f(4), f(4), 4, null), { name: 'TypeError', message: /up must be a Float32Array/ });
});
