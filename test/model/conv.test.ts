import t from 'tap';
import { conv1dCausal, conv1dSame } from '../../src/model/blocks/kernels.js';

import { Subsampler, type SubsamplingWeights } from '../../src/model/blocks/subsampling.js';
import { native } from '../../src/native.js';
import { prng } from '../helpers.js';
import { subsampleReference } from '../reference/subsample.js';
import { loadConfig } from '../../src/io/config.js';

t.test('causal conv1d with carried state streams exactly', async (t) => {
  const r = prng(1);
  const T = 50;
  const C = 12;
  const k = 3;
  const x = Float32Array.from({ length: T * C }, () => r() - 0.5);
  const w = Float32Array.from({ length: C * k }, () => r() - 0.5);
  const whole = new Float32Array(T * C);
  conv1dCausal(x, w, new Float32Array((k - 1) * C), whole, T, C, k);
  // Reference: y[t][c] = Σ_j w[c][j]·x[t−(k−1)+j][c], zero before the start.
  let worst = 0;
  for (let tt = 0; tt < T; tt++)
    for (let c = 0; c < C; c++) {
      let s = 0;
      for (let j = 0; j < k; j++) {
        const src = tt - (k - 1) + j;
        if (src >= 0) s += w[c * k + j]! * x[src * C + c]!;
      }
      worst = Math.max(worst, Math.abs(s - whole[tt * C + c]!));
    }
  t.ok(worst < 1e-6, `matches the reference (${worst.toExponential(2)})`);
  for (const chunk of [1, 2, 7, 50]) {
    const state = new Float32Array((k - 1) * C);
    const y = new Float32Array(T * C);
    for (let i = 0; i < T; i += chunk) {
      const n = Math.min(chunk, T - i);
      const part = new Float32Array(n * C);
      conv1dCausal(x.subarray(i * C, (i + n) * C), w, state, part, n, C, k);
      y.set(part, i * C);
    }
    t.ok(
      y.every((v, i) => Object.is(v, whole[i])),
      `chunks of ${chunk} equal one pass`,
    );
  }
});

t.test("'same' conv1d: row tiles equal one pass", async (t) => {
  const r = prng(2);
  const T = 40;
  const C = 6;
  const k = 9;
  const x = Float32Array.from({ length: T * C }, () => r() - 0.5);
  const w = Float32Array.from({ length: C * k }, () => r() - 0.5);
  const b = Float32Array.from({ length: C }, () => r());
  const whole = new Float32Array(T * C);
  conv1dSame(x, w, b, whole, T, C, k);
  let worst = 0;
  for (let tt = 0; tt < T; tt++)
    for (let c = 0; c < C; c++) {
      let s = b[c]!;
      for (let j = 0; j < k; j++) {
        const src = tt + j - 4;
        if (src >= 0 && src < T) s += w[c * k + j]! * x[src * C + c]!;
      }
      worst = Math.max(worst, Math.abs(s - whole[tt * C + c]!));
    }
  t.ok(worst < 1e-6, 'symmetric padding (k−1)/2');
  const tiled = new Float32Array(T * C);
  for (let t0 = 0; t0 < T; t0 += 7) {
    const t1 = Math.min(T, t0 + 7);
    const part = new Float32Array((t1 - t0) * C);
    conv1dSame(x, w, b, part, T, C, k, t0, t1);
    tiled.set(part, t0 * C);
  }
  t.ok(
    tiled.every((v, i) => Object.is(v, whole[i])),
    'tiles of 7 rows equal one pass',
  );
});

function randomWeights(r: () => number, C: number, d: number, stages: number, flat: number): SubsamplingWeights {
  const rand = (n: number, s = 0.3) => Float32Array.from({ length: n }, () => (r() - 0.5) * s);
  return {
    conv0: { w: rand(C * 9), b: rand(C) },
    dw: Array.from({ length: stages - 1 }, () => ({ w: rand(C * 9), b: rand(C) })),
    pw: Array.from({ length: stages - 1 }, () => ({ w: rand(C * C, 0.5), b: rand(C) })),
    out: { w: rand(d * flat, 0.1), b: rand(d) },
  };
}

t.test('subsampling in time tiles equals the untiled run exactly, and the reference', async (t) => {
  const config = loadConfig('tiny');
  const e = config.encoder;
  const r = prng(3);
  const w = randomWeights(r, e.channels, e.d, e.stages, e.channels * e.featOut);
  for (const T of [1, 8, 9, 57, 161]) {
    const mel = Float32Array.from({ length: T * 128 }, () => r() * 2 - 1);
    const whole = new Subsampler(config, w, 10_000);
    const Tp = whole.frames(T);
    t.equal(Tp, Math.ceil(T / 8), `T=${T}: ceil(T/8) frames`);
    const x = new Float32Array(Tp * e.d);
    whole.run(mel, T, x);
    for (const tile of [1, 3, 8]) {
      const y = new Float32Array(Tp * e.d);
      new Subsampler(config, w, tile).run(mel, T, y);
      t.ok(
        y.every((v, i) => Object.is(v, x[i])),
        `T=${T}: tiles of ${tile} frames equal the untiled run`,
        { diagnostic: false },
      );
    }
    if (T <= 57) {
      const ref = subsampleReference(mel, T, 128, e.channels, e.stages, w, e.d);
      let worst = 0;
      let scale = 0;
      for (let i = 0; i < ref.length; i++) {
        worst = Math.max(worst, Math.abs(ref[i]! - x[i]!));
        scale = Math.max(scale, Math.abs(ref[i]!));
      }
      t.ok(worst <= 1e-5 * Math.max(1, scale), `T=${T}: matches the float64 reference (${worst.toExponential(2)})`);
    }
  }
  t.throws(() => native.conv2dS2(new Float32Array(9 * 4), 1, 5, 4, 20, 9, new Float32Array(9), null, false, new Float32Array(100), 1, 0, 2, 5, false), {
    name: 'RangeError',
    message: /output rows need input rows 0…3 but the buffer holds 5…8/,
  });
});

t.test('subsampling on two compute threads gives the bytes of one (its convolutions split their output channels)', async (t) => {
  const { setComputeThreads } = await import('../../src/model/blocks/kernels.js');
  const config = loadConfig('small');
  const e = config.encoder;
  const r = prng(5);
  const w = randomWeights(r, e.channels, e.d, e.stages, e.channels * e.featOut);
  const T = 161;
  const mel = Float32Array.from({ length: T * 128 }, () => r() * 2 - 1);
  const sub = new Subsampler(config, w, 10_000);
  const outs = [1, 2].map((threads) => {
    setComputeThreads(threads);
    try {
      const y = new Float32Array(sub.frames(T) * e.d);
      sub.run(mel, T, y);
      return y;
    } finally {
      setComputeThreads(1);
    }
  });
  t.same(Buffer.from(outs[1]!.buffer), Buffer.from(outs[0]!.buffer), `T=${T}, ${e.channels} channels: the same bytes`);
});
