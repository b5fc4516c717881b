import type { Lfm2Dims } from '../../src/model/blocks/backbone.js';
import type { WeightsImage } from '../../src/model/format/image.js';

/**
 * Float64 LFM2 forward over a whole sequence of input rows, written from MODEL.md for the
 * tests (independent of the runtime's code): tensors under `prefix`, causal attention or a
 * sliding window of `b.window` positions including the current one.
 */
export function lfm2Reference(b: Lfm2Dims, prefix: string, image: WeightsImage, input: Float64Array, T: number): { hidden: Float64Array } {
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
          const m = Math.max(...sc);
          const ex = sc.map((s) => (s === Number.NEGATIVE_INFINITY ? 0 : Math.exp(s - m)));
          const z = ex.reduce((a, c) => a + c, 0);
          for (let j = lo; j <= i; j++)
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
  return { hidden: rms(h, T, D, get(`${prefix}.embedding_norm.weight`)) };
}

