/**
 * The FastConformer dw-striding subsampling (docs/model.md, Encoder) run in time tiles: mel rows as
 * an image [1][T][F] → conv k3 s2 p1 (1 → C) + ReLU → (depthwise k3 s2 p1, pointwise + ReLU)
 * × (stages − 1) → flatten channel-major (c·F' + f) → Linear → [T'][d]. A tile of n output
 * frames needs 2n + 1 rows of the stage before it, so every plane is sized by the tile, not by
 * T; each output element is computed by the same arithmetic whatever the tiling, so tiled
 * output equals untiled output exactly.
 */
import type { ModelConfig } from '../format/config.js';
import { GEMM_PACK_FLOATS, gemm } from './kernels.js';
import { native } from '../../native.js';
import { heapWorkspace, type Workspace } from '../../dsp/workspace.js';
import { ArgumentError } from '../../errors.js';

export interface SubsamplingWeights {
  conv0: { w: Float32Array; b: Float32Array }; // [C][1][3][3], [C]
  dw: { w: Float32Array; b: Float32Array }[]; // stages − 1 × ([C][1][3][3], [C])
  pw: { w: Float32Array; b: Float32Array }[]; // stages − 1 × ([C][C], [C])
  out: { w: Float32Array; b: Float32Array }; // [d][C·F'], [d]
}

const down = (n: number): number => Math.floor((n - 1) / 2) + 1;

export class Subsampler {
  readonly stages: number;
  readonly channels: number;
  readonly d: number;
  readonly tile: number;
  readonly #freqs: number[]; // F after each stage
  readonly #cap: number[]; // rows each stage's planes hold for one tile
  readonly #planes: Float32Array[]; // stage 0 out, then (dw, pw) per later stage
  readonly #flat: Float32Array;
  readonly #rows: Float32Array;
  readonly #pack: Float32Array;
  readonly #w: SubsamplingWeights;
  readonly #featIn: number;
  readonly #lo: Int32Array; // row range per stage for the current tile
  readonly #hi: Int32Array;
  readonly #totals: Int32Array; // rows per stage for the current segment

  constructor(config: ModelConfig, weights: SubsamplingWeights, tile: number, ws: Workspace = heapWorkspace) {
    const e = config.encoder;
    if (!Number.isSafeInteger(tile) || tile < 1) throw new ArgumentError(`subsampling tile must be a positive integer, got ${tile}`);
    this.stages = e.stages;
    this.channels = e.channels;
    this.d = e.d;
    this.tile = tile;
    this.#w = weights;
    this.#featIn = e.featIn;
    this.#lo = ws('sub.lo', Int32Array, e.stages);
    this.#hi = ws('sub.hi', Int32Array, e.stages);
    this.#totals = ws('sub.totals', Int32Array, e.stages);
    this.#freqs = [];
    let f = e.featIn;
    for (let s = 0; s < e.stages; s++) {
      f = down(f);
      this.#freqs.push(f);
    }
    this.#cap = new Array<number>(e.stages);
    let r = tile;
    for (let s = e.stages - 1; s >= 0; s--) {
      this.#cap[s] = r;
      r = 2 * r + 1;
    }
    const C = e.channels;
    this.#planes = [ws('sub0', Float32Array, C * this.#cap[0]! * this.#freqs[0]!)];
    for (let s = 1; s < e.stages; s++) {
      this.#planes.push(ws(`sub${s}.dw`, Float32Array, C * this.#cap[s]! * this.#freqs[s]!));
      this.#planes.push(ws(`sub${s}.pw`, Float32Array, C * this.#cap[s]! * this.#freqs[s]!));
    }
    const flatCols = C * this.#freqs[e.stages - 1]!;
    this.#flat = ws('sub.flat', Float32Array, tile * flatCols);
    this.#rows = ws('sub.rows', Float32Array, tile * e.d);
    this.#pack = ws('gemm.pack', Float32Array, GEMM_PACK_FLOATS);
  }

  /** Encoder frames for T mel rows. */
  frames(T: number): number {
    let t = T;
    for (let s = 0; s < this.stages; s++) t = down(t);
    return t;
  }

  /** mel [T][featIn] → x [frames(T)][d], tile by tile. Allocates nothing. */
  run(mel: Float32Array, T: number, x: Float32Array): void {
    const F0 = this.#featIn;
    if (mel.length < T * F0 || x.length < this.frames(T) * this.d) throw new ArgumentError('subsampling: mel or x is too small for T');
    const totals = this.#totals;
    let t = T;
    for (let s = 0; s < this.stages; s++) totals[s] = t = down(t);
    const Tp = totals[this.stages - 1]!;
    const C = this.channels;
    const S = this.stages;
    const lo = this.#lo;
    const hi = this.#hi;
    for (let o0 = 0; o0 < Tp; o0 += this.tile) {
      const o1 = Math.min(Tp, o0 + this.tile);
      // Row ranges per stage, from the last back to the first.
      lo[S - 1] = o0;
      hi[S - 1] = o1;
      for (let s = S - 2; s >= 0; s--) {
        lo[s] = Math.max(0, 2 * lo[s + 1]! - 1);
        hi[s] = Math.min(totals[s]!, 2 * (hi[s + 1]! - 1) + 2);
      }
      const w = this.#w;
      native.conv2dS2(mel, 1, 0, T, T, F0, w.conv0.w, w.conv0.b, false, this.#planes[0]!, C, lo[0]!, hi[0]! - lo[0]!, this.#freqs[0]!, true);
      let prev = this.#planes[0]!;
      for (let s = 1; s < S; s++) {
        const rows = hi[s]! - lo[s]!;
        const dw = this.#planes[2 * s - 1]!;
        const pw = this.#planes[2 * s]!;
        native.conv2dS2(
          prev,
          C,
          lo[s - 1]!,
          hi[s - 1]! - lo[s - 1]!,
          totals[s - 1]!,
          this.#freqs[s - 1]!,
          w.dw[s - 1]!.w,
          w.dw[s - 1]!.b,
          true,
          dw,
          C,
          lo[s]!,
          rows,
          this.#freqs[s]!,
          false,
        );
        native.pointwise(dw, w.pw[s - 1]!.w, w.pw[s - 1]!.b, pw, C, C, rows * this.#freqs[s]!, true);
        prev = pw;
      }
      // Flatten channel-major per frame, then the output projection.
      const n = o1 - o0;
      const F = this.#freqs[S - 1]!;
      const rowsHeld = hi[S - 1]! - lo[S - 1]!;
      for (let i = 0; i < n; i++) for (let c = 0; c < C; c++) for (let f = 0; f < F; f++) this.#flat[i * C * F + c * F + f] = prev[(c * rowsHeld + i) * F + f]!;
      gemm(this.#flat, w.out.w, w.out.b, this.#rows, n, this.d, C * F, this.#pack);
      for (let i = 0; i < n * this.d; i++) x[o0 * this.d + i] = this.#rows[i]!;
    }
  }
}
