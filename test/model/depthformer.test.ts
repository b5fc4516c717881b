import t from 'tap';
import { MemoryDomain, plan } from '../../src/memory/index.js';
import { heapWorkspace } from '../../src/dsp/workspace.js';
import { loadCheckpoint, makeCheckpoint } from '../../src/io/checkpoint.js';
import { quantizeCheckpoint } from '../../src/io/quantize.js';
import { Depthformer, depthformerPass, depthformerStateFloats, END_OF_AUDIO } from '../../src/model/blocks/depthformer.js';
import { AUDIO_SAMPLING, Sampler, TEXT_SAMPLING } from '../../src/model/blocks/sampler.js';
import { allocationProbe, prng, runScript, scratchDir } from '../helpers.js';
import { linear64, rmsNorm64, softmax64, swiglu64, weights64 } from '../reference/ops.js';

const dir = scratchDir('voxslab-depth-');
makeCheckpoint({ config: 'tiny', seed: 41, out: dir, dtype: 'f32' });

function setup() {
  const domain = MemoryDomain.create({ limit: '1GiB' });
  const { config, image } = loadCheckpoint(dir, domain);
  const ticket = domain.owner('ticket', 0);
  const hw = plan(depthformerPass(config).build()).highWater;
  const work = domain.createArena(ticket, 'depthformer', { bytes: domain.policy.arenaBytes([hw]) });
  const conv = domain.owner('conversation', 0);
  const st = domain.createArena(conv, 'depth kv', { bytes: domain.policy.arenaBytes([depthformerStateFloats(config) * 4]) });
  const kv = st.carve('depth_kv', 'recurrence', Float32Array, depthformerStateFloats(config));
  const depth = new Depthformer(config, image, work, heapWorkspace, kv);
  work.seal();
  st.seal();
  return { domain, config, image, depth };
}

t.test('a frame equals a float64 reference (teacher-forced codes)', async (t) => {
  const { config, image, depth, domain } = setup();
  const f = config.depthformer;
  const cb = config.audio.codebooks;
  const D = config.backbone.hidden;
  const r = prng(2);
  const hidden = Float32Array.from({ length: D }, () => r() * 2 - 1);
  const codes = new Int32Array(cb);
  const logits = new Float32Array(cb * 2049);
  const forced = [5, 2048, 17, 0, 1999, 3, 77, 1024];
  const before = domain.snapshot().allocations;
  depth.frame(hidden, new Sampler(1), TEXT_SAMPLING, codes, logits, forced);
  t.same(domain.snapshot().allocations, before, 'no allocation after readiness');
  const get = weights64(image);
  const rms = (x: Float64Array, w: Float64Array, rows: number, dim: number) => rmsNorm64(x, rows, dim, w);
  // One row through rows [row0, row0 + rows) of w [*][cols].
  const mv = (w: Float64Array, x: Float64Array, rows: number, cols: number, row0 = 0) => linear64(x, 1, cols, w.subarray(row0 * cols), null, rows);
  const hd = f.headDim;
  const kd = f.kvHeads * hd;
  const slices = mv(get('depth_linear.weight'), Float64Array.from(hidden), cb * f.dim, D).map((v, i) => v + get('depth_linear.bias')[i]!);
  const cacheK: Float64Array[][] = Array.from({ length: f.layers }, () => []);
  const cacheV: Float64Array[][] = Array.from({ length: f.layers }, () => []);
  let worst = 0;
  for (let i = 0; i < cb; i++) {
    let x = Float64Array.from(slices.subarray(i * f.dim, (i + 1) * f.dim));
    if (i > 0) {
      const e = get(`depth_embeddings.${i - 1}.embedding.weight`);
      x = x.map((v, j) => v + e[forced[i - 1]! * f.dim + j]!);
    }
    for (let l = 0; l < f.layers; l++) {
      const p = `depthformer.layers.${l}`;
      const ln = rms(x, get(`${p}.operator_norm.weight`), 1, f.dim);
      const W = get(`${p}.operator.qkv_proj.weight`);
      const q = rms(mv(W, ln, f.dim, f.dim), get(`${p}.operator.bounded_attention.q_layernorm.weight`), f.heads, hd);
      const k = rms(mv(W, ln, kd, f.dim, f.dim), get(`${p}.operator.bounded_attention.k_layernorm.weight`), f.kvHeads, hd);
      const v = mv(W, ln, kd, f.dim, f.dim + kd);
      const rot = (a: Float64Array, heads: number) => {
        for (let h = 0; h < heads; h++)
          for (let m = 0; m < hd / 2; m++) {
            const ang = i * config.backbone.ropeTheta ** ((-2 * m) / hd);
            const x0 = a[h * hd + 2 * m]!;
            const x1 = a[h * hd + 2 * m + 1]!;
            a[h * hd + 2 * m] = x0 * Math.cos(ang) - x1 * Math.sin(ang);
            a[h * hd + 2 * m + 1] = x1 * Math.cos(ang) + x0 * Math.sin(ang);
          }
      };
      rot(q, f.heads);
      rot(k, f.kvHeads);
      cacheK[l]!.push(Float64Array.from(k));
      cacheV[l]!.push(Float64Array.from(v));
      const ctx = new Float64Array(f.dim);
      const g = f.heads / f.kvHeads;
      for (let h = 0; h < f.heads; h++) {
        const kh = Math.floor(h / g);
        const sc = cacheK[l]!.map((kk) => {
          let s = 0;
          for (let c = 0; c < hd; c++) s += q[h * hd + c]! * kk[kh * hd + c]!;
          return s / Math.sqrt(hd);
        });
        const pr = softmax64(sc);
        cacheV[l]!.forEach((vv, j) => {
          for (let c = 0; c < hd; c++) ctx[h * hd + c] = ctx[h * hd + c]! + pr[j]! * vv[kh * hd + c]!;
        });
      }
      const o = mv(get(`${p}.operator.out_proj.weight`), ctx, f.dim, f.dim);
      x = x.map((val, j) => val + o[j]!);
      const fl = rms(x, get(`${p}.ffn_norm.weight`), 1, f.dim);
      const gate = mv(get(`${p}.feed_forward.w1.weight`), fl, f.ffn, f.dim);
      const up = mv(get(`${p}.feed_forward.w3.weight`), fl, f.ffn, f.dim);
      const act = swiglu64(gate, up);
      const d2 = mv(get(`${p}.feed_forward.w2.weight`), act, f.dim, f.ffn);
      x = x.map((val, j) => val + d2[j]!);
    }
    const ref = mv(get(`depth_embeddings.${i}.to_logits.weight`), rms(x, get(`depth_embeddings.${i}.embedding_norm.weight`), 1, f.dim), 2049, f.dim);
    for (let c = 0; c < 2049; c++) worst = Math.max(worst, Math.abs(ref[c]! - logits[i * 2049 + c]!));
  }
  t.ok(worst < 1e-4, `logits of all ${cb} codebooks match (max difference ${worst.toExponential(2)})`);
  // Greedy codes are each codebook's argmax, with 2048 masked from codebook 1 on.
  for (let i = 0; i < cb; i++) {
    let best = -1;
    for (let c = 0; c < 2049; c++) if ((i === 0 || c !== END_OF_AUDIO) && (best < 0 || logits[i * 2049 + c]! > logits[i * 2049 + best]!)) best = c;
    t.equal(codes[i], best, `codebook ${i}: argmax ${best}`, { diagnostic: false });
  }
});

t.test('sampling: seeded, top-k support, mask', async (t) => {
  const logits = Float32Array.from({ length: 2049 }, (_, i) => Math.sin(i * 0.37) * 3);
  logits[2048] = 100;
  const draw = (seed: number) => {
    const s = new Sampler(seed);
    return Array.from({ length: 200 }, () => s.sample(logits, 2049, AUDIO_SAMPLING, 2048));
  };
  const a = draw(7);
  t.same(draw(7), a, 'the same seed gives the same codes');
  t.not(draw(8).join(), a.join(), 'another seed differs');
  const order = Array.from(logits.keys())
    .filter((i) => i !== 2048)
    .sort((x, y) => logits[y]! - logits[x]! || x - y);
  const top4 = new Set(order.slice(0, 4));
  t.ok(
    a.every((c) => top4.has(c)),
    'only the top 4 are sampled',
  );
  t.ok(new Set(a).size > 1, 'and more than one of them');
  t.ok(!a.includes(2048), 'the masked code never appears');
  const g = new Sampler(1);
  t.equal(g.sample(logits, 2049, TEXT_SAMPLING), 2048, 'greedy takes the argmax');
  t.equal(g.sample(logits, 2049, { temperature: 0.7, topK: 1 }, 2048), order[0], 'top-1 is greedy');
  const s = new Sampler(3);
  const first = s.sample(logits, 2049, AUDIO_SAMPLING, 2048);
  s.reset();
  t.equal(s.sample(logits, 2049, AUDIO_SAMPLING, 2048), first, 'reset restarts the sequence');
  t.throws(() => new Sampler(-1), /non-negative integer/);
});

t.test('a frame allocates nothing in steady state', async (t) => {
  const { config, depth } = setup();
  const hidden = Float32Array.from({ length: config.backbone.hidden }, (_, i) => Math.sin(i));
  const codes = new Int32Array(8);
  const sampler = new Sampler(9);
  const probe = allocationProbe(30, () => depth.frame(hidden, sampler, AUDIO_SAMPLING, codes));
  t.ok(probe.heap >= 0 && probe.heap < 1024, `JS heap growth over 30 frames: ${probe.heap} bytes (window ${probe.windows})`);
  t.ok(probe.arrayBuffers <= 0, `no ArrayBuffer growth (${probe.arrayBuffers} bytes; a backing store released meanwhile makes it negative)`);
});

t.test('a draw allocates nothing even where V8 inlines nothing (a double returned from a call is boxed)', async (t) => {
  const p = runScript<{ heap: number; arrayBuffers: number; windows: number }>(new URL('./workers/sampler-probe.js', import.meta.url), [
    '--max-inlined-bytecode-size=0',
  ]);
  t.ok(p.heap >= 0 && p.heap < 1024, `JS heap growth over 200 draws: ${p.heap} bytes (window ${p.windows})`);
});

t.test('a several-row frame gives each conversation the codes and state of its own frame, bit for bit (f32 and q4; 2, 5 and 16 rows)', async (t) => {
  for (const dtype of ['f32', 'q4'] as const) {
    let where = dir;
    if (dtype === 'q4') {
      where = scratchDir('voxslab-depth-q4-');
      await quantizeCheckpoint({ input: dir, output: where, bits: 4, group: 32, threads: 1 });
    }
    const domain = MemoryDomain.create({ limit: '1GiB' });
    const { config, image } = loadCheckpoint(where, domain);
    const cb = config.audio.codebooks;
    const D = config.backbone.hidden;
    const make = (rows: number, i: number) => {
      const work = domain.createArena(domain.owner('ticket', i), `rows ${rows} ${i}`, {
        bytes: domain.policy.arenaBytes([plan(depthformerPass(config, rows).build()).highWater, rows * depthformerStateFloats(config) * 4]),
      });
      const kv = work.carve('depth_kv', 'recurrence', Float32Array, rows * depthformerStateFloats(config));
      return new Depthformer(config, image, work, heapWorkspace, kv, plan, rows);
    };
    const many = make(16, 0);
    const solo = make(1, 1);
    for (const m of [2, 5, 16]) {
      const r = prng(9 + m);
      const samplers = Array.from({ length: m }, (_, i) => new Sampler(3 + i));
      const own = Array.from({ length: m }, (_, i) => new Sampler(3 + i));
      const options = Array.from({ length: m }, (_, i) => (i % 2 === 0 ? AUDIO_SAMPLING : { temperature: 0.7, topK: 16 }));
      let same = true;
      let differ = false;
      for (let frame = 0; frame < 3; frame++) {
        const hidden = Float32Array.from({ length: m * D }, () => r() * 2 - 1);
        const codes = Array.from({ length: m }, () => new Int32Array(cb));
        many.frameRows(hidden, m, samplers, options, codes);
        for (let c = 0; c < m; c++) {
          const want = new Int32Array(cb);
          solo.frame(hidden.subarray(c * D, (c + 1) * D), own[c]!, options[c]!, want);
          if (want.some((v, i) => v !== codes[c]![i])) same = false;
          if (samplers[c]!.state !== own[c]!.state) same = false;
        }
        if (codes[0]!.some((v, i) => v !== codes[1]![i])) differ = true;
      }
      t.ok(same, `${dtype}, ${m} rows: three frames give every conversation the codes and sampler state of its own frames`);
      t.ok(differ, `${dtype}, ${m} rows: the conversations' codes differ (the comparison can fail)`);
    }
    t.throws(() => solo.frameRows(new Float32Array(2 * D), 2, [], [], []), /at most 1/);
  }
});
