import t from 'tap';
import { attention, attentionScratchFloats, type AttentionMode } from '../../src/model/blocks/kernels.js';
import { native } from '../../src/native.js';
import { f16ToF32, f32ToF16 } from '../../src/model/format/dtype.js';
import { prng } from '../helpers.js';
import { softmax64 } from '../reference/ops.js';

interface Case {
  T: number;
  Tq?: number;
  Hq: number;
  Hkv: number;
  hd: number;
  mode: AttentionMode;
  window?: number;
  qpos0?: number;
  rel?: boolean;
}

/** Naive float64 reference: the whole score row, softmax, weighted values. */
function reference(
  c: Case,
  q: Float32Array,
  k: Float32Array,
  v: Float32Array,
  rel: { p: Float32Array; u: Float32Array; v: Float32Array } | null,
): Float64Array {
  const Tq = c.Tq ?? c.T;
  const Tk = c.T;
  const out = new Float64Array(Tq * c.Hq * c.hd);
  const g = c.Hq / c.Hkv;
  const scale = 1 / Math.sqrt(c.hd);
  const qpos0 = c.qpos0 ?? 0;
  for (let h = 0; h < c.Hq; h++) {
    const kh = Math.floor(h / g);
    for (let i = 0; i < Tq; i++) {
      const qp = qpos0 + i;
      const scores = new Float64Array(Tk).fill(Number.NEGATIVE_INFINITY);
      for (let j = 0; j < Tk; j++) {
        if (c.mode !== 'full' && j > qp) continue;
        if (c.mode === 'sliding' && j <= qp - c.window!) continue;
        let s = 0;
        for (let d = 0; d < c.hd; d++) {
          const qd = q[(i * c.Hq + h) * c.hd + d]!;
          s += (qd + (rel ? rel.u[h * c.hd + d]! : 0)) * k[(j * c.Hkv + kh) * c.hd + d]!;
          if (rel) s += (qd + rel.v[h * c.hd + d]!) * rel.p[((Tk - 1 - (i - j)) * c.Hq + h) * c.hd + d]!;
        }
        scores[j] = s * scale;
      }
      const p = softmax64(Array.from(scores));
      for (let j = 0; j < Tk; j++) {
        if (scores[j] === Number.NEGATIVE_INFINITY) continue;
        const w = p[j]!;
        for (let d = 0; d < c.hd; d++) {
          const o = (i * c.Hq + h) * c.hd + d;
          out[o] = out[o]! + w * v[(j * c.Hkv + kh) * c.hd + d]!;
        }
      }
    }
  }
  return out;
}

function run(c: Case, seed: number, tq = 64, tk = 64): { got: Float32Array; want: Float64Array } {
  const r = prng(seed);
  const Tq = c.Tq ?? c.T;
  const rand = (n: number) => Float32Array.from({ length: n }, () => r() * 2 - 1);
  const q = rand(Tq * c.Hq * c.hd);
  const k = rand(c.T * c.Hkv * c.hd);
  const v = rand(c.T * c.Hkv * c.hd);
  const rel = c.rel === true ? { p: rand((2 * c.T - 1) * c.Hq * c.hd), u: rand(c.Hq * c.hd), v: rand(c.Hq * c.hd) } : null;
  const out = new Float32Array(Tq * c.Hq * c.hd);
  const scratch = new Float32Array(attentionScratchFloats(tq, tk, c.hd, c.Hq, c.Hkv));
  const shape = { Tq, Tk: c.T, Hq: c.Hq, Hkv: c.Hkv, hd: c.hd, mode: c.mode, tq, tk, qpos0: c.qpos0 ?? 0 } as const;
  attention(c.window === undefined ? shape : { ...shape, window: c.window }, q, k, v, out, scratch, rel);
  return { got: out, want: reference(c, q, k, v, rel) };
}

const maxRel = (got: Float32Array, want: Float64Array) => {
  let e = 0;
  let s = 0;
  for (let i = 0; i < want.length; i++) {
    e = Math.max(e, Math.abs(got[i]! - want[i]!));
    s = Math.max(s, Math.abs(want[i]!));
  }
  return e / Math.max(s, 1e-30);
};

t.test('tiled attention equals the naive full-score reference', async (t) => {
  const cases: Case[] = [];
  for (const T of [1, 2, 7, 63, 64, 65, 200, 1000]) {
    cases.push({ T, Hq: 4, Hkv: 2, hd: 16, mode: 'full' });
    cases.push({ T, Hq: 4, Hkv: 1, hd: 8, mode: 'causal' });
    cases.push({ T, Hq: 2, Hkv: 2, hd: 8, mode: 'sliding', window: 30 });
    if (T <= 200) cases.push({ T, Hq: 2, Hkv: 2, hd: 8, mode: 'full', rel: true });
  }
  cases.push({ T: 4096, Hq: 2, Hkv: 1, hd: 8, mode: 'causal' });
  cases.push({ T: 4096, Hq: 1, Hkv: 1, hd: 8, mode: 'full' });
  // Decode: one query at the end of a long cache; and a chunk of queries at an offset.
  cases.push({ T: 3000, Tq: 1, qpos0: 2999, Hq: 8, Hkv: 2, hd: 16, mode: 'causal' });
  cases.push({ T: 500, Tq: 37, qpos0: 463, Hq: 4, Hkv: 2, hd: 16, mode: 'sliding', window: 30 });
  for (const [n, c] of cases.entries()) {
    const { got, want } = run(c, n, 64, 48);
    const e = maxRel(got, want);
    t.ok(e < 1e-5, `${c.mode}${c.rel ? ' rel-pos' : ''} T=${c.T}${c.Tq ? ` Tq=${c.Tq}` : ''} H=${c.Hq}/${c.Hkv}: max error ${e.toExponential(2)}`);
  }
});

t.test('tile sizes do not change the result beyond rounding', async (t) => {
  const c: Case = { T: 300, Hq: 4, Hkv: 2, hd: 16, mode: 'full', rel: true };
  const a = run(c, 9, 64, 64).got;
  for (const [tq, tk] of [
    [1, 1],
    [7, 300],
    [300, 13],
    [32, 128],
  ] as const) {
    const b = run(c, 9, tq, tk).got;
    let e = 0;
    for (let i = 0; i < a.length; i++) e = Math.max(e, Math.abs(a[i]! - b[i]!));
    t.ok(e < 1e-5, `tiles ${tq}×${tk}: ${e.toExponential(2)}`);
  }
});

t.test('scratch depends on the tiles only, never on the sequence length', async (t) => {
  const floats = attentionScratchFloats(64, 64, 64, 1, 1);
  t.equal(floats, 4 * 64 + 64 * (2 + 3 * 64) + 2 * 64 * 64, "four rows' scores; per query row max, sum, accumulator, q+u, q+v; the key and value tiles");
  t.equal(attentionScratchFloats(64, 64, 64, 8, 2), 2 * (4 * 64 + 4 * 64 * (2 + 3 * 64) + 2 * 64 * 64), 'one slot per KV head, for its query heads');
  t.equal(attentionScratchFloats(1, 3, 5, 1, 1), 64, 'a slot is whole cache lines: 12 + 17 + 30 floats take 64');
  // The same scratch serves T = 128 and T = 4096.
  for (const T of [128, 4096]) {
    const q = new Float32Array(T * 64);
    const out = new Float32Array(T * 64);
    t.doesNotThrow(
      () => attention({ Tq: T, Tk: T, Hq: 1, Hkv: 1, hd: 64, mode: 'causal' }, q, q.slice(), q.slice(), out, new Float32Array(floats)),
      `T=${T} with ${floats} scratch floats`,
    );
  }
  t.throws(
    () =>
      native.attention(
        new Float32Array(8),
        new Float32Array(8),
        new Float32Array(8),
        new Float32Array(8),
        null,
        null,
        null,
        new Float32Array(10),
        1,
        1,
        1,
        1,
        8,
        0,
        0,
        0,
        0,
        1,
        64,
        64,
      ),
    { name: 'RangeError', message: /scratch has 10 values/ },
  );
  t.throws(
    () =>
      native.attention(
        new Float32Array(8),
        new Float32Array(8),
        new Float32Array(8),
        new Float32Array(8),
        null,
        null,
        null,
        new Float32Array(9000),
        1,
        1,
        3,
        2,
        8,
        0,
        0,
        0,
        0,
        1,
        64,
        64,
      ),
    { name: 'RangeError', message: /Hkv must divide Hq/ },
  );
  t.throws(
    () =>
      native.attention(
        new Float32Array(8),
        new Float32Array(8),
        new Float32Array(8),
        new Float32Array(8),
        null,
        null,
        null,
        new Float32Array(9000),
        1,
        1,
        1,
        1,
        8,
        0,
        0,
        0,
        2,
        1,
        64,
        64,
      ),
    { name: 'RangeError', message: /sliding window must be positive/ },
  );
});

t.test('an f16 KV cache reads as its values widened to f32, bit for bit', async (t) => {
  const r = prng(31);
  const Tk = 77;
  const Hq = 4;
  const Hkv = 2;
  // Heads of whole vectors are read in place; 24 is widened a tile at a time first.
  for (const hd of [16, 24, 64]) {
    const k16 = Uint16Array.from({ length: Tk * Hkv * hd }, () => f32ToF16(r() * 2 - 1));
    const v16 = Uint16Array.from({ length: Tk * Hkv * hd }, () => f32ToF16(r() * 2 - 1));
    const k32 = Float32Array.from(k16, (h) => f16ToF32(h));
    const v32 = Float32Array.from(v16, (h) => f16ToF32(h));
    for (const Tq of [1, 5]) {
      const q = Float32Array.from({ length: Tq * Hq * hd }, () => r() * 2 - 1);
      const scratch = new Float32Array(attentionScratchFloats(Tq, 16, hd, Hq, Hkv));
      for (const [mode, window] of [
        [1, 0],
        [2, 30],
      ] as const) {
        const a = new Float32Array(Tq * Hq * hd);
        const b = new Float32Array(Tq * Hq * hd);
        native.attention(q, k16, v16, a, null, null, null, scratch, Tq, Tk, Hq, Hkv, hd, Tk - Tq, 0, window, mode, 0.25, Tq, 16);
        native.attention(q, k32, v32, b, null, null, null, scratch, Tq, Tk, Hq, Hkv, hd, Tk - Tq, 0, window, mode, 0.25, Tq, 16);
        t.ok(Buffer.from(a.buffer).equals(Buffer.from(b.buffer)), `hd ${hd}, ${Tq} queries, mode ${mode}: the same bits as the widened f32 cache`);
      }
    }
  }
  const hd = 16;
  const q = new Float32Array(Hq * hd);
  const k16 = new Uint16Array(Tk * Hkv * hd);
  const scratch = new Float32Array(attentionScratchFloats(1, 16, hd, Hq, Hkv));
  t.throws(
    () => native.attention(q, k16, new Uint16Array(4), new Float32Array(Hq * hd), null, null, null, scratch, 1, Tk, Hq, Hkv, hd, Tk - 1, 0, 0, 1, 0.25, 1, 16),
    /k and v need/,
  );
});

t.test(
  'the KV heads split over two, three or eight compute threads give the bits of one thread (f32 and f16 caches, every mask, relative positions)',
  async (t) => {
    const { setComputeThreads } = await import('../../src/model/blocks/kernels.js');
    const r = prng(47);
    const rand = (n: number) => Float32Array.from({ length: n }, () => r() * 2 - 1);
    const shapes = [
      { Tq: 1, Tk: 700, Hq: 32, Hkv: 8, hd: 64, mode: 'causal', qpos0: 699, tq: 1, tk: 64 },
      { Tq: 40, Tk: 300, Hq: 32, Hkv: 8, hd: 64, mode: 'causal', qpos0: 260, tq: 40, tk: 64 },
      { Tq: 40, Tk: 300, Hq: 8, Hkv: 2, hd: 64, mode: 'sliding', window: 100, qpos0: 260, tq: 16, tk: 64 },
      { Tq: 90, Tk: 90, Hq: 8, Hkv: 8, hd: 64, mode: 'full', tq: 32, tk: 32, rel: true },
    ] as const;
    try {
      for (const s of shapes) {
        const q = rand(s.Tq * s.Hq * s.hd);
        const k = rand(s.Tk * s.Hkv * s.hd);
        const v = rand(s.Tk * s.Hkv * s.hd);
        const rel = 'rel' in s ? { p: rand((2 * s.Tk - 1) * s.Hq * s.hd), u: rand(s.Hq * s.hd), v: rand(s.Hq * s.hd) } : null;
        const scratch = new Float32Array(attentionScratchFloats(s.tq, s.tk, s.hd, s.Hq, s.Hkv));
        for (const f16 of rel === null ? [false, true] : [false]) {
          const K = f16 ? Uint16Array.from(k, (x) => f32ToF16(x)) : k;
          const V = f16 ? Uint16Array.from(v, (x) => f32ToF16(x)) : v;
          // Three and eight: more threads than this machine's cores, and parts of uneven sizes.
          const threads = [1, 2, 3, 8];
          const outs = threads.map((n) => {
            setComputeThreads(n);
            const out = new Float32Array(s.Tq * s.Hq * s.hd);
            attention(s, q, K, V, out, scratch, rel);
            return out;
          });
          for (let i = 1; i < threads.length; i++)
            t.same(
              Buffer.from(outs[i]!.buffer),
              Buffer.from(outs[0]!.buffer),
              `${s.mode}${rel ? ' rel-pos' : ''} Tq=${s.Tq} Tk=${s.Tk} H=${s.Hq}/${s.Hkv}${f16 ? ' f16' : ''}, ${threads[i]} threads: the same bytes`,
            );
        }
      }
    } finally {
      setComputeThreads(1);
    }
  },
);

t.test("a query row's output does not depend on the rows computed beside it: each row of a chunk equals that query alone, bit for bit", async (t) => {
  const r = prng(53);
  const rand = (n: number) => Float32Array.from({ length: n }, () => r() * 2 - 1);
  for (const [mode, window] of [
    ['causal', 0],
    ['sliding', 70],
  ] as const) {
    const Tk = 200;
    const Hq = 8;
    const Hkv = 2;
    const hd = 64;
    const n = 50;
    const q = rand(n * Hq * hd);
    const k = rand(Tk * Hkv * hd);
    const v = rand(Tk * Hkv * hd);
    const chunk = new Float32Array(n * Hq * hd);
    const scratch = new Float32Array(attentionScratchFloats(n, 64, hd, Hq, Hkv));
    const m = { causal: 1, sliding: 2 }[mode];
    native.attention(q, k, v, chunk, null, null, null, scratch, n, Tk, Hq, Hkv, hd, Tk - n, 0, window, m, 0.125, n, 64);
    let same = 0;
    for (let i = 0; i < n; i++) {
      const one = new Float32Array(Hq * hd);
      native.attention(
        q.subarray(i * Hq * hd, (i + 1) * Hq * hd),
        k,
        v,
        one,
        null,
        null,
        null,
        scratch,
        1,
        Tk,
        Hq,
        Hkv,
        hd,
        Tk - n + i,
        0,
        window,
        m,
        0.125,
        n,
        64,
      );
      if (Buffer.from(one.buffer).equals(Buffer.from(chunk.buffer, i * Hq * hd * 4, Hq * hd * 4))) same++;
    }
    t.equal(same, n, `${mode}: all ${n} rows`);
  }
});
