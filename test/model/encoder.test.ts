import t from 'tap';
import { MemoryDomain, plan } from '../../src/memory/index.js';
import { heapWorkspace } from '../../src/dsp/workspace.js';
import { MelFrontend } from '../../src/dsp/mel.js';
import { loadCheckpoint, makeCheckpoint } from '../../src/io/checkpoint.js';
import { ConformerEncoder } from '../../src/model/blocks/encoder.js';
import { DEFAULT_ENCODER_TILES, encoderPass, type EncoderTiles } from '../../src/model/plan/plans.js';
import type { WeightsImage } from '../../src/model/format/image.js';
import type { ModelConfig } from '../../src/model/format/config.js';
import { layerNorm64, linear64, silu64, softmax64, weights64 } from '../reference/ops.js';
import { subsampleReference, type SubsampleRefWeights } from '../reference/subsample.js';
import { scratchDir } from '../helpers.js';

const dir = scratchDir('voxslab-enc-');
makeCheckpoint({ config: 'tiny', seed: 21, out: dir, dtype: 'f32' });

type M = Float64Array; // row-major matrices

/** Float64 reference of the encoder and adapter, from docs/model.md, with unfolded batch-norm. */
function reference(config: ModelConfig, image: WeightsImage, raw: Float32Array, T: number): M {
  const e = config.encoder;
  const get = weights64(image);
  const F = 128;
  // Per-feature normalisation over the T − 1 valid frames; the last frame zeroed.
  const mel = new Float64Array(T * F);
  const valid = T - 1;
  for (let f = 0; f < F; f++) {
    let s = 0;
    for (let i = 0; i < valid; i++) s += raw[i * F + f]!;
    const mean = s / valid;
    let q = 0;
    for (let i = 0; i < valid; i++) q += (raw[i * F + f]! - mean) ** 2;
    const std = Math.sqrt(q / (valid - 1)) + 1e-5;
    for (let i = 0; i < T; i++) mel[i * F + f] = i < valid ? (raw[i * F + f]! - mean) / std : 0;
  }
  const C = e.channels;
  const d = e.d;
  const sub: SubsampleRefWeights = {
    conv0: { w: get('conformer.pre_encode.conv.0.weight'), b: get('conformer.pre_encode.conv.0.bias') },
    dw: Array.from({ length: e.stages - 1 }, (_, j) => ({
      w: get(`conformer.pre_encode.conv.${2 + 3 * j}.weight`),
      b: get(`conformer.pre_encode.conv.${2 + 3 * j}.bias`),
    })),
    pw: Array.from({ length: e.stages - 1 }, (_, j) => ({
      w: get(`conformer.pre_encode.conv.${3 + 3 * j}.weight`),
      b: get(`conformer.pre_encode.conv.${3 + 3 * j}.bias`),
    })),
    out: { w: get('conformer.pre_encode.out.weight'), b: get('conformer.pre_encode.out.bias') },
  };
  let x = subsampleReference(mel, T, F, C, e.stages, sub, d);
  const Tp = x.length / d;
  const H = e.heads;
  const hd = e.headDim;
  for (let n = 0; n < e.layers; n++) {
    const p = `conformer.layers.${n}`;
    for (const [ff, norm] of [['feed_forward1', 'norm_feed_forward1']] as const) {
      const h = linear64(
        layerNorm64(x, Tp, d, get(`${p}.${norm}.weight`), get(`${p}.${norm}.bias`)),
        Tp,
        d,
        get(`${p}.${ff}.linear1.weight`),
        get(`${p}.${ff}.linear1.bias`),
        e.ffn,
      ).map(silu64);
      const o = linear64(h, Tp, e.ffn, get(`${p}.${ff}.linear2.weight`), get(`${p}.${ff}.linear2.bias`), d);
      x = x.map((v, i) => v + 0.5 * o[i]!);
    }
    // Relative-position attention.
    const a = layerNorm64(x, Tp, d, get(`${p}.norm_self_att.weight`), get(`${p}.norm_self_att.bias`));
    const q = linear64(a, Tp, d, get(`${p}.self_attn.linear_q.weight`), get(`${p}.self_attn.linear_q.bias`), d);
    const k = linear64(a, Tp, d, get(`${p}.self_attn.linear_k.weight`), get(`${p}.self_attn.linear_k.bias`), d);
    const v = linear64(a, Tp, d, get(`${p}.self_attn.linear_v.weight`), get(`${p}.self_attn.linear_v.bias`), d);
    const pe = new Float64Array((2 * Tp - 1) * d);
    for (let r = 0; r < 2 * Tp - 1; r++)
      for (let i = 0; i < d / 2; i++) {
        const ang = (Tp - 1 - r) * Math.exp((-2 * i * Math.log(10000)) / d);
        pe[r * d + 2 * i] = Math.sin(ang);
        pe[r * d + 2 * i + 1] = Math.cos(ang);
      }
    const pp = linear64(pe, 2 * Tp - 1, d, get(`${p}.self_attn.linear_pos.weight`), null, d);
    const u = get(`${p}.self_attn.pos_bias_u`);
    const vb = get(`${p}.self_attn.pos_bias_v`);
    const ctx = new Float64Array(Tp * d);
    for (let h = 0; h < H; h++)
      for (let i = 0; i < Tp; i++) {
        const sc = Array.from({ length: Tp }, (_, j) => {
          let s = 0;
          for (let c = 0; c < hd; c++) {
            const qc = q[i * d + h * hd + c]!;
            s += (qc + u[h * hd + c]!) * k[j * d + h * hd + c]! + (qc + vb[h * hd + c]!) * pp[(Tp - 1 - (i - j)) * d + h * hd + c]!;
          }
          return s / Math.sqrt(hd);
        });
        const pr = softmax64(sc);
        for (let j = 0; j < Tp; j++)
          for (let c = 0; c < hd; c++) {
            const o = i * d + h * hd + c;
            ctx[o] = ctx[o]! + pr[j]! * v[j * d + h * hd + c]!;
          }
      }
    const ao = linear64(ctx, Tp, d, get(`${p}.self_attn.linear_out.weight`), get(`${p}.self_attn.linear_out.bias`), d);
    x = x.map((val, i) => val + ao[i]!);
    // Convolution module with batch-norm (eval) applied after the depthwise conv.
    const cl = layerNorm64(x, Tp, d, get(`${p}.norm_conv.weight`), get(`${p}.norm_conv.bias`));
    const pw1 = linear64(cl, Tp, d, get(`${p}.conv.pointwise_conv1.weight`), get(`${p}.conv.pointwise_conv1.bias`), 2 * d);
    const g = Float64Array.from({ length: Tp * d }, (_, idx) => {
      const r = Math.floor(idx / d);
      const c = idx % d;
      return pw1[r * 2 * d + c]! / (1 + Math.exp(-pw1[r * 2 * d + d + c]!));
    });
    const dw = get(`${p}.conv.depthwise_conv.weight`);
    const dwb = get(`${p}.conv.depthwise_conv.bias`);
    const [gm, bt, mu, vr] = ['weight', 'bias', 'running_mean', 'running_var'].map((s) => get(`${p}.conv.batch_norm.${s}`)) as [M, M, M, M];
    const kk = e.convKernel;
    const y = Float64Array.from({ length: Tp * d }, (_, idx) => {
      const r = Math.floor(idx / d);
      const c = idx % d;
      let s = dwb[c]!;
      for (let j = 0; j < kk; j++) {
        const src = r + j - (kk - 1) / 2;
        if (src >= 0 && src < Tp) s += dw[c * kk + j]! * g[src * d + c]!;
      }
      return silu64(((s - mu[c]!) / Math.sqrt(vr[c]! + 1e-5)) * gm[c]! + bt[c]!);
    });
    const pw2 = linear64(y, Tp, d, get(`${p}.conv.pointwise_conv2.weight`), get(`${p}.conv.pointwise_conv2.bias`), d);
    x = x.map((val, i) => val + pw2[i]!);
    {
      const h = linear64(
        layerNorm64(x, Tp, d, get(`${p}.norm_feed_forward2.weight`), get(`${p}.norm_feed_forward2.bias`)),
        Tp,
        d,
        get(`${p}.feed_forward2.linear1.weight`),
        get(`${p}.feed_forward2.linear1.bias`),
        e.ffn,
      ).map(silu64);
      const o = linear64(h, Tp, e.ffn, get(`${p}.feed_forward2.linear2.weight`), get(`${p}.feed_forward2.linear2.bias`), d);
      x = x.map((val, i) => val + 0.5 * o[i]!);
    }
    x = layerNorm64(x, Tp, d, get(`${p}.norm_out.weight`), get(`${p}.norm_out.bias`));
  }
  const D = config.adapter.out;
  const erf = (z: number) => {
    let s = 0;
    let term = z;
    for (let i = 0; i < 80; i++) {
      s += term / (2 * i + 1);
      term *= (-z * z) / (i + 1);
    }
    return (2 / Math.sqrt(Math.PI)) * s;
  };
  const a1 = linear64(
    layerNorm64(x, Tp, d, get('audio_adapter.model.0.weight'), get('audio_adapter.model.0.bias')),
    Tp,
    d,
    get('audio_adapter.model.1.weight'),
    get('audio_adapter.model.1.bias'),
    config.adapter.hidden,
  ).map((v) => 0.5 * v * (1 + erf(v / Math.SQRT2)));
  return linear64(a1, Tp, config.adapter.hidden, get('audio_adapter.model.3.weight'), get('audio_adapter.model.3.bias'), D);
}

function setup(tiles: EncoderTiles) {
  const domain = MemoryDomain.create({ limit: '1GiB' });
  const { config, image } = loadCheckpoint(dir, domain);
  const ticket = domain.owner('ticket', 0);
  const hw = plan(encoderPass(config, { segmentSeconds: 2, tiles }).build()).highWater;
  const arena = domain.createArena(ticket, 'encoder', { bytes: domain.policy.arenaBytes([hw]) });
  const encoder = new ConformerEncoder(config, image, arena, heapWorkspace, { segmentSeconds: 2, tiles });
  arena.seal();
  domain.ledger.seal(ticket);
  return { domain, config, image, encoder, arena, hw };
}

function speechLikeMel(samples: number): { rows: Float32Array; T: number } {
  const x = Float32Array.from({ length: samples }, (_, i) => 0.3 * Math.sin(i * 0.02 + 0.00001 * i * i) + 0.1 * Math.sin(i * 0.31));
  const mel = new MelFrontend();
  const T = mel.rowsFor(samples);
  const rows = new Float32Array(T * 128);
  mel.push(x, rows);
  mel.finish(rows);
  return { rows, T };
}

t.test('the planned encoder equals a float64 reference of docs/model.md', async (t) => {
  const { config, image, encoder, domain, arena, hw } = setup(DEFAULT_ENCODER_TILES);
  t.equal(encoder.region.region.bytes, hw, 'the carved workspace is the plan high-water');
  for (const samples of [16000 * 0.5 + 123, 16000 * 1.9]) {
    const { rows, T } = speechLikeMel(samples);
    const want = reference(config, image, Float32Array.from(rows), T);
    const before = domain.snapshot().allocations;
    const got = encoder.encode(rows, T);
    t.same(domain.snapshot().allocations, before, 'nothing allocated after readiness');
    t.equal(got.length, encoder.frames(T) * config.adapter.out, `${T} rows → ${encoder.frames(T)} frames`);
    let e2 = 0;
    let s2 = 0;
    for (let i = 0; i < want.length; i++) {
      e2 += (got[i]! - want[i]!) ** 2;
      s2 += want[i]! ** 2;
    }
    t.ok(e2 / s2 < 1e-9, `T=${T}: NMSE ${(e2 / s2).toExponential(2)} against the reference`);
  }
  arena.assertRedZones();
});

t.test('row and query tiles do not change a bit; key tiles only round differently', async (t) => {
  const { rows, T } = speechLikeMel(16000 * 1.3);
  const base = setup(DEFAULT_ENCODER_TILES).encoder.encode(Float32Array.from(rows), T).slice();
  for (const tiles of [
    { ...DEFAULT_ENCODER_TILES, rows: 1, subsampling: 1 },
    { ...DEFAULT_ENCODER_TILES, rows: 5, queries: 3, subsampling: 7 },
  ]) {
    const got = setup(tiles).encoder.encode(Float32Array.from(rows), T);
    t.ok(
      got.every((v, i) => Object.is(v, base[i])),
      `tiles ${JSON.stringify(tiles)}: identical bits`,
    );
  }
  const keys = setup({ ...DEFAULT_ENCODER_TILES, keys: 4 }).encoder.encode(Float32Array.from(rows), T);
  let worst = 0;
  for (let i = 0; i < base.length; i++) worst = Math.max(worst, Math.abs(keys[i]! - base[i]!));
  t.ok(worst < 1e-4, `key tiles of 4: max difference ${worst.toExponential(2)}`);
});
