import type { Lfm2Dims } from '../../src/model/blocks/backbone.js';
import type { WeightsImage } from '../../src/model/format/image.js';
import { linear64, rmsNorm64, softmax64, swiglu64, weights64 } from './ops.js';

/**
 * Float64 LFM2 forward over a whole sequence of input rows, written from docs/model.md for the
 * tests (independent of the runtime's code): tensors under `prefix`, causal attention or a
 * sliding window of `b.window` positions including the current one.
 */
export function lfm2Reference(b: Lfm2Dims, prefix: string, image: WeightsImage, input: Float64Array, T: number): { hidden: Float64Array } {
  const D = b.hidden;
  const hd = b.headDim;
  const get = weights64(image);
  const rms = (x: Float64Array, rows: number, dim: number, w: Float64Array) => rmsNorm64(x, rows, dim, w);
  const lin = (x: Float64Array, rows: number, inD: number, w: Float64Array, outD: number) => linear64(x, rows, inD, w, null, outD);
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
    const p = `${prefix}.layers.${l}`;
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
          const lo = b.window > 0 ? Math.max(0, i - b.window + 1) : 0;
          const sc = Array.from({ length: i + 1 }, (_, j) => {
            if (j < lo) return Number.NEGATIVE_INFINITY;
            let s = 0;
            for (let c = 0; c < hd; c++) s += q[(i * b.heads + hh) * hd + c]! * k[(j * b.kvHeads + kh) * hd + c]!;
            return s / Math.sqrt(hd);
          });
          const p = softmax64(sc);
          for (let j = lo; j <= i; j++)
            for (let c = 0; c < hd; c++) {
              const at = (i * b.heads + hh) * hd + c;
              ctx[at] = ctx[at]! + p[j]! * v[(j * b.kvHeads + kh) * hd + c]!;
            }
        }
      }
      o = lin(ctx, T, b.heads * hd, get(`${p}.self_attn.out_proj.weight`), D);
    }
    h = h.map((x, i) => x + o[i]!);
    const f = rms(h, T, D, get(`${p}.ffn_norm.weight`));
    const gate = lin(f, T, D, get(`${p}.feed_forward.w1.weight`), b.ffn);
    const up = lin(f, T, D, get(`${p}.feed_forward.w3.weight`), b.ffn);
    const act = swiglu64(gate, up);
    const d2 = lin(act, T, b.ffn, get(`${p}.feed_forward.w2.weight`), D);
    h = h.map((x, i) => x + d2[i]!);
  });
  return { hidden: rms(h, T, D, get(`${prefix}.embedding_norm.weight`)) };
}
