import t from 'tap';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MemoryDomain, plan } from '../../src/memory/index.js';
import { heapWorkspace } from '../../src/dsp/workspace.js';
import { loadCheckpoint, makeCheckpoint } from '../../src/io/checkpoint.js';
import { Backbone, backbonePass, BackboneState, backboneStateSizes } from '../../src/model/backbone.js';
import type { WeightsImage } from '../../src/model/image.js';
import type { ModelConfig } from '../../src/model/config.js';

const dir = mkdtempSync(join(tmpdir(), 'voxslab-lfm-'));
makeCheckpoint({ config: 'tiny', seed: 31, out: dir, dtype: 'f32' });

/** Float64 LFM2 forward over whole sequences of input rows, from MODEL.md. */
function reference(config: ModelConfig, image: WeightsImage, input: Float64Array, T: number): { hidden: Float64Array } {
  const b = config.backbone;
  const D = b.hidden;
  const hd = b.headDim;
  const get = (n: string) => Float64Array.from(image.toF32(n, new Float32Array(image.get(n).shape.reduce((a, c) => a * c, 1))));
  const rms = (x: Float64Array, rows: number, dim: number, w: Float64Array) => {
    const y = new Float64Array(rows * dim);
    for (let r = 0; r < rows; r++) {
      let s = 0;
      for (let i = 0; i < dim; i++) s += x[r * dim + i]! ** 2;
      const inv = 1 / Math.sqrt(s / dim + 1e-5);
      for (let i = 0; i < dim; i++) y[r * dim + i] = x[r * dim + i]! * inv * w[i]!;
    }
    return y;
  };
  const lin = (x: Float64Array, rows: number, inD: number, w: Float64Array, outD: number) => {
    const y = new Float64Array(rows * outD);
    for (let r = 0; r < rows; r++)
      for (let o = 0; o < outD; o++) {
        let s = 0;
        for (let k = 0; k < inD; k++) s += x[r * inD + k]! * w[o * inD + k]!;
        y[r * outD + o] = s;
      }
    return y;
  };
  const ropeRows = (x: Float64Array, heads: number) => {
    for (let tt = 0; tt < T; tt++)
      for (let h = 0; h < heads; h++)
        for (let i = 0; i < hd / 2; i++) {
          const ang = tt * b.ropeTheta ** ((-2 * i) / hd);
          const a = (tt * heads + h) * hd + i;
          const c = a + hd / 2;
          const x0 = x[a]!;
          const x1 = x[c]!;
          x[a] = x0 * Math.cos(ang) - x1 * Math.sin(ang);
          x[c] = x1 * Math.cos(ang) + x0 * Math.sin(ang);
        }
  };
  let h = Float64Array.from(input);
  b.layers.forEach((kind, l) => {
    const p = `lfm.layers.${l}`;
    const ln = rms(h, T, D, get(`${p}.operator_norm.weight`));
    let o: Float64Array;
    if (kind === 'conv') {
      const proj = lin(ln, T, D, get(`${p}.conv.in_proj.weight`), 3 * D);
      const w = get(`${p}.conv.conv.weight`);
      const bx = (tt: number, c: number) => (tt < 0 ? 0 : proj[tt * 3 * D + c]! * proj[tt * 3 * D + 2 * D + c]!);
      const cy = new Float64Array(T * D);
      for (let tt = 0; tt < T; tt++)
        for (let c = 0; c < D; c++) {
          const y = w[c * 3]! * bx(tt - 2, c) + w[c * 3 + 1]! * bx(tt - 1, c) + w[c * 3 + 2]! * bx(tt, c);
          cy[tt * D + c] = proj[tt * 3 * D + D + c]! * y;
        }
      o = lin(cy, T, D, get(`${p}.conv.out_proj.weight`), D);
    } else {
      const q = rms(lin(ln, T, D, get(`${p}.self_attn.q_proj.weight`), b.heads * hd), T * b.heads, hd, get(`${p}.self_attn.q_layernorm.weight`));
      const k = rms(lin(ln, T, D, get(`${p}.self_attn.k_proj.weight`), b.kvHeads * hd), T * b.kvHeads, hd, get(`${p}.self_attn.k_layernorm.weight`));
      const v = lin(ln, T, D, get(`${p}.self_attn.v_proj.weight`), b.kvHeads * hd);
      ropeRows(q, b.heads);
      ropeRows(k, b.kvHeads);
      const ctx = new Float64Array(T * b.heads * hd);
      const g = b.heads / b.kvHeads;
      for (let hh = 0; hh < b.heads; hh++) {
        const kh = Math.floor(hh / g);
        for (let i = 0; i < T; i++) {
          const sc = Array.from({ length: i + 1 }, (_, j) => {
            let s = 0;
            for (let c = 0; c < hd; c++) s += q[(i * b.heads + hh) * hd + c]! * k[(j * b.kvHeads + kh) * hd + c]!;
            return s / Math.sqrt(hd);
          });
          const m = Math.max(...sc);
          const ex = sc.map((s) => Math.exp(s - m));
          const z = ex.reduce((a, c) => a + c, 0);
          for (let j = 0; j <= i; j++)
            for (let c = 0; c < hd; c++) {
              const at = (i * b.heads + hh) * hd + c;
              ctx[at] = ctx[at]! + (ex[j]! / z) * v[(j * b.kvHeads + kh) * hd + c]!;
            }
        }
      }
      o = lin(ctx, T, b.heads * hd, get(`${p}.self_attn.out_proj.weight`), D);
    }
    h = h.map((x, i) => x + o[i]!);
    const f = rms(h, T, D, get(`${p}.ffn_norm.weight`));
    const gate = lin(f, T, D, get(`${p}.feed_forward.w1.weight`), b.ffn);
    const up = lin(f, T, D, get(`${p}.feed_forward.w3.weight`), b.ffn);
    const act = gate.map((x, i) => (x / (1 + Math.exp(-x))) * up[i]!);
    const d2 = lin(act, T, b.ffn, get(`${p}.feed_forward.w2.weight`), D);
    h = h.map((x, i) => x + d2[i]!);
  });
  return { hidden: rms(h, T, D, get('lfm.embedding_norm.weight')) };
}

function setup(chunk: number, context = 256) {
  const domain = MemoryDomain.create({ limit: '1GiB' });
  const { config, image } = loadCheckpoint(dir, domain);
  const ticket = domain.owner('ticket', 0);
  const hw = plan(backbonePass(config, chunk).build()).highWater;
  const work = domain.createArena(ticket, 'backbone', { bytes: domain.policy.arenaBytes([hw]) });
  const backbone = new Backbone(config, image, work, heapWorkspace, { chunk, context });
  const conv = domain.owner('conversation', 0);
  const stateArena = domain.createArena(conv, 'state', { bytes: domain.policy.arenaBytes(backboneStateSizes(config, context).map((s) => s.bytes)) });
  const state = new BackboneState(config, stateArena, context);
  work.seal();
  stateArena.seal();
  return { domain, config, image, backbone, state };
}

const TOKENS = [1, 6, 42, 17, 200, 3, 99, 128, 5, 7, 11, 250, 64, 33, 2, 129, 130, 8, 19, 77];

t.test('prefill equals a float64 LFM2 reference; logits through the tied embedding', async (t) => {
  const { config, image, backbone, state, domain } = setup(32);
  const D = config.backbone.hidden;
  const T = TOKENS.length;
  const input = new Float32Array(32 * D);
  TOKENS.forEach((tok, i) => backbone.embedText(tok, input, i));
  const before = domain.snapshot().allocations;
  const hidden = backbone.forward(state, input, T).slice(0, T * D);
  t.same(domain.snapshot().allocations, before, 'no allocation after readiness');
  const ref = reference(config, image, Float64Array.from(input.subarray(0, T * D)), T);
  let e = 0;
  let s = 0;
  for (let i = 0; i < T * D; i++) {
    e += (hidden[i]! - ref.hidden[i]!) ** 2;
    s += ref.hidden[i]! ** 2;
  }
  t.ok(e / s < 1e-9, `hidden states NMSE ${(e / s).toExponential(2)}`);
  const logits = new Float32Array(config.backbone.vocab);
  backbone.logits(hidden.subarray((T - 1) * D, T * D), logits);
  const emb = image.toF32('lfm.embed_tokens.weight', new Float32Array(config.backbone.vocab * D));
  let worst = 0;
  for (let v = 0; v < config.backbone.vocab; v++) {
    let dot = 0;
    for (let c = 0; c < D; c++) dot += emb[v * D + c]! * ref.hidden[(T - 1) * D + c]!;
    worst = Math.max(worst, Math.abs(dot - logits[v]!));
  }
  t.ok(worst < 1e-4, `logits match (${worst.toExponential(2)})`);
  t.equal(state.position, T);
});

t.test('chunked prefill and single steps equal one-shot prefill bit for bit', async (t) => {
  const one = setup(32);
  const D = one.config.backbone.hidden;
  const T = TOKENS.length;
  const input = new Float32Array(32 * D);
  TOKENS.forEach((tok, i) => one.backbone.embedText(tok, input, i));
  const whole = one.backbone.forward(one.state, input, T).slice(0, T * D);
  for (const chunk of [1, 3, 7]) {
    const s = setup(chunk);
    const got = new Float32Array(T * D);
    const rows = new Float32Array(chunk * D);
    for (let i = 0; i < T; i += chunk) {
      const n = Math.min(chunk, T - i);
      for (let r = 0; r < n; r++) s.backbone.embedText(TOKENS[i + r]!, rows, r);
      got.set(s.backbone.forward(s.state, rows, n).subarray(0, n * D), i * D);
    }
    t.ok(got.every((v, i) => Object.is(v, whole[i])), `chunks of ${chunk}`);
  }
  // An audio frame embeds as the sum of its 8 codebook rows.
  const row = new Float32Array(D);
  one.backbone.embedAudio([0, 1, 2, 3, 4, 5, 6, 2048], row);
  const table = one.image.toF32('audio_embedding.embedding.weight', new Float32Array(8 * 2049 * D));
  let worst = 0;
  for (let c = 0; c < D; c++) {
    let s = 0;
    [0, 1, 2, 3, 4, 5, 6, 2048].forEach((code, i) => (s += table[(i * 2049 + code) * D + c]!));
    worst = Math.max(worst, Math.abs(s - row[c]!));
  }
  t.ok(worst < 1e-5, 'audio embedding sums codebooks');
  const small = setup(4, 8);
  const r = new Float32Array(4 * D);
  small.backbone.forward(small.state, r, 4);
  small.backbone.forward(small.state, r, 4);
  t.throws(() => small.backbone.forward(small.state, r, 1), /position 9 exceeds the context of 8/);
  t.throws(() => small.backbone.embedText(99999, r), /outside the vocabulary/);
});
