/** Weights of the subsampling stack, in any numeric array type. */
export interface SubsampleRefWeights {
  conv0: { w: ArrayLike<number>; b: ArrayLike<number> };
  dw: { w: ArrayLike<number>; b: ArrayLike<number> }[];
  pw: { w: ArrayLike<number>; b: ArrayLike<number> }[];
  out: { w: ArrayLike<number>; b: ArrayLike<number> };
}

/**
 * Float64 reference of the dw-striding subsampling (docs/model.md, Encoder), written for the tests:
 * mel [T][F] → x [T'][d].
 */
export function subsampleReference(mel: ArrayLike<number>, T: number, F: number, C: number, stages: number, w: SubsampleRefWeights, d: number): Float64Array {
  const conv = (
    inp: Float64Array[],
    rows: number,
    cols: number,
    wt: ArrayLike<number>,
    b: ArrayLike<number>,
    dw: boolean,
    relu: boolean,
  ): { out: Float64Array[]; rows: number; cols: number } => {
    const orows = Math.floor((rows - 1) / 2) + 1;
    const ocols = Math.floor((cols - 1) / 2) + 1;
    const out = Array.from({ length: C }, () => new Float64Array(orows * ocols));
    for (let co = 0; co < C; co++)
      for (let i = 0; i < orows; i++)
        for (let j = 0; j < ocols; j++) {
          let s = b[co]!;
          const cis = dw ? [co] : inp.map((_, ci) => ci);
          for (const ci of cis)
            for (let di = 0; di < 3; di++)
              for (let dj = 0; dj < 3; dj++) {
                const ii = 2 * i - 1 + di;
                const jj = 2 * j - 1 + dj;
                if (ii < 0 || ii >= rows || jj < 0 || jj >= cols) continue;
                s += wt[dw ? co * 9 + di * 3 + dj : (co * inp.length + ci) * 9 + di * 3 + dj]! * inp[dw ? co : ci]![ii * cols + jj]!;
              }
          out[co]![i * ocols + j] = relu ? Math.max(0, s) : s;
        }
    return { out, rows: orows, cols: ocols };
  };
  let cur = conv([Float64Array.from(mel as ArrayLike<number>)], T, F, w.conv0.w, w.conv0.b, false, true);
  for (let s = 1; s < stages; s++) {
    const dwo = conv(cur.out, cur.rows, cur.cols, w.dw[s - 1]!.w, w.dw[s - 1]!.b, true, false);
    const P = dwo.rows * dwo.cols;
    const pw = Array.from({ length: C }, (_, co) => {
      const o = new Float64Array(P);
      for (let p = 0; p < P; p++) {
        let v = w.pw[s - 1]!.b[co]!;
        for (let ci = 0; ci < C; ci++) v += w.pw[s - 1]!.w[co * C + ci]! * dwo.out[ci]![p]!;
        o[p] = Math.max(0, v);
      }
      return o;
    });
    cur = { out: pw, rows: dwo.rows, cols: dwo.cols };
  }
  const flatCols = C * cur.cols;
  const x = new Float64Array(cur.rows * d);
  for (let i = 0; i < cur.rows; i++)
    for (let o = 0; o < d; o++) {
      let s = w.out.b[o]!;
      for (let c = 0; c < C; c++) for (let f = 0; f < cur.cols; f++) s += w.out.w[o * flatCols + c * cur.cols + f]! * cur.out[c]![i * cur.cols + f]!;
      x[i * d + o] = s;
    }
  return x;
}
