/**
 * Stage plans as functions of the configuration: each stage lists its planes as a pass of ops
 * (PassBuilder), so a plan — and a memory manifest — exists for any configuration without
 * loading weights. The compute of a stage carves exactly this plan (one source of truth).
 * All planes are f32 unless a layout says otherwise.
 *
 * A loop over tiles is described as one op: every buffer it reads or writes is live for the
 * whole loop, so a plane filled tile by tile never shares bytes with the per-tile scratch.
 * Loops whose tiles only touch per-tile buffers and persistent state (the residual stream `x`)
 * are described op by op, since each iteration repeats the same lifetimes.
 */
import { PassBuilder, plan, type Plan } from '../../memory/index.js';
import { attentionScratchFloats, GEMM_PACK_FLOATS } from '../blocks/kernels.js';
import type { ModelConfig } from '../format/config.js';

const F32 = 4;

/** Samples in a segment of `seconds` at the frontend rate. */
export function segmentSamples(config: ModelConfig, seconds: number): number {
  return Math.round(seconds * config.frontend.sampleRate);
}

/** Audio frames (12.5 Hz codes) a reply of `seconds` may hold. */
export function replyFrames(config: ModelConfig, seconds: number): number {
  const d = config.detokenizer;
  return Math.ceil(seconds * (d.sampleRate / (d.upsample * d.hop)));
}

/** Mel rows NeMo computes for L samples: 1 + L // hop. */
export function melRows(config: ModelConfig, samples: number): number {
  return 1 + Math.floor(samples / config.frontend.hop);
}

/** Rows after one k3 s2 p1 convolution. */
const down = (n: number): number => Math.floor((n - 1) / 2) + 1;

/** Encoder frames for `rows` mel rows (T' = ceil(T / factor) for the dw-striding stack). */
export function encoderFrames(config: ModelConfig, rows: number): number {
  let t = rows;
  for (let s = 0; s < config.encoder.stages; s++) t = down(t);
  return t;
}

/** Tile sizes; 0 leaves that part untiled (whole-sequence planes), for comparison. */
export interface EncoderTiles {
  /** Encoder frames per subsampling tile. */
  subsampling: number;
  /** Rows per tile for row-wise blocks (LayerNorm, FFN, pointwise convs, adapter). */
  rows: number;
  /** Query rows per attention tile (0 = H × T × T score planes). */
  queries: number;
  /** Key rows per attention tile. */
  keys: number;
}

export const DEFAULT_ENCODER_TILES: Readonly<EncoderTiles> = Object.freeze({ subsampling: 8, rows: 64, queries: 64, keys: 64 });

export interface EncoderPlanOptions {
  segmentSeconds: number;
  /** Tile sizes, or false for the untiled reference layout. */
  tiles: EncoderTiles | false;
}

/**
 * Conformer stage for one completed segment: dw-striding subsampling, one layer body (every
 * layer reuses the same planes; only the residual stream `x` persists), then the adapter
 * writing the stage output. Tiled: subsampling in time tiles, row-wise blocks in row tiles and
 * attention in query × key tiles with an online softmax — no plane grows with T².
 * Untiled: the reference layout with whole-sequence planes and H × T × T score planes.
 */
export function encoderPass(config: ModelConfig, o: EncoderPlanOptions): PassBuilder {
  const e = config.encoder;
  const T = melRows(config, segmentSamples(config, o.segmentSeconds));
  const Tp = encoderFrames(config, T);
  const P = 2 * Tp - 1;
  const d = e.d;
  const D = config.adapter.out;
  const C = e.channels;
  const t: EncoderTiles = o.tiles === false ? { subsampling: 0, rows: 0, queries: 0, keys: 0 } : o.tiles;
  const subTiled = t.subsampling > 0;
  const rowTiled = t.rows > 0;
  const attTiled = t.queries > 0 && t.keys > 0;
  const frames = subTiled ? Math.min(t.subsampling, Tp) : Tp;
  const R = rowTiled ? Math.min(t.rows, Tp) : Tp;
  const p = new PassBuilder().external('mel_rows', 'pos_table');
  p.state('x', Tp * d * F32, `f32[${Tp}][${d}]`);
  // Per-feature normalisation of the completed segment, in place in the mel plane.
  p.op('mel.stats', ['mel_rows'], [{ name: 'mel.stats', bytes: 2 * config.frontend.nMels * 8, layout: 'f64[2][mels]' }]);
  p.op('mel.normalise', ['mel.stats', 'mel_rows']);

  // Subsampling: rows each stage's planes hold for a tile of `frames` outputs (r_{k-1} = 2 r_k + 1;
  // untiled, the whole segment is one tile). Control arrays and GEMM packing live for the pass.
  p.state('sub.lo', e.stages * 4, `i32[${e.stages}]`);
  p.state('sub.hi', e.stages * 4, `i32[${e.stages}]`);
  p.state('sub.totals', e.stages * 4, `i32[${e.stages}]`);
  p.state('gemm.pack', GEMM_PACK_FLOATS * F32, 'f32[256][256]');
  const rows: number[] = [];
  let r = frames;
  let freq = e.featIn;
  const freqs: number[] = [];
  for (let s = 0; s < e.stages; s++) {
    freq = down(freq);
    freqs.push(freq);
  }
  for (let s = e.stages - 1; s >= 0; s--) {
    rows[s] = r;
    r = 2 * r + 1;
  }
  p.op('sub.conv0', ['mel_rows'], [{ name: 'sub0', bytes: C * (rows[0] as number) * (freqs[0] as number) * F32 }]);
  let prev = 'sub0';
  for (let s = 1; s < e.stages; s++) {
    const bytes = C * (rows[s] as number) * (freqs[s] as number) * F32;
    p.op(`sub.dw${s}`, [prev], [{ name: `sub${s}.dw`, bytes }]);
    p.op(`sub.pw${s}`, [`sub${s}.dw`], [{ name: `sub${s}.pw`, bytes }]);
    prev = `sub${s}.pw`;
  }
  const flat = C * (freqs[e.stages - 1] as number);
  p.op('sub.flatten', [prev], [{ name: 'sub.flat', bytes: frames * flat * F32 }]);
  p.op('sub.out', ['sub.flat', 'x'], [{ name: 'sub.rows', bytes: frames * d * F32 }]);

  // Feed-forward (macaron half): LN → linear1 + SiLU → linear2, × 0.5 into x.
  const ffn = (tag: string): void => {
    p.op(`${tag}.norm`, ['x'], [{ name: `${tag}.ln`, bytes: R * d * F32 }]);
    p.op(`${tag}.up`, [`${tag}.ln`], [{ name: `${tag}.h`, bytes: R * e.ffn * F32 }]);
    p.op(`${tag}.down`, [`${tag}.h`], [{ name: `${tag}.o`, bytes: R * d * F32 }]);
    p.op(`${tag}.residual`, [`${tag}.o`, 'x']);
  };
  ffn('ff1');

  // Relative-position self-attention.
  p.op('att.norm', ['x'], [{ name: 'att.ln', bytes: Tp * d * F32 }]);
  p.op('att.q', ['att.ln'], [{ name: 'att.q', bytes: Tp * d * F32 }]);
  p.op('att.k', ['att.ln'], [{ name: 'att.k', bytes: Tp * d * F32 }]);
  p.op('att.v', ['att.ln'], [{ name: 'att.v', bytes: Tp * d * F32 }]);
  p.op('att.pos', ['pos_table'], [{ name: 'att.p', bytes: P * d * F32 }]);
  const H = e.heads;
  const hd = e.headDim;
  if (attTiled) {
    // One op for the whole (head, query tile, key tile) loop: q, k, v, p and the context are
    // live across every iteration, so nothing the loop touches may share bytes.
    const tq = Math.min(t.queries, Tp);
    const tk = Math.min(t.keys, Tp);
    p.op(
      'att.tiles',
      ['att.q', 'att.k', 'att.v', 'att.p'],
      [
        {
          name: 'att.scratch',
          bytes: attentionScratchFloats(tq, tk, hd, H, H) * F32,
          layout: 'f32 per head: scores, max, sum, acc, q+u, q+v, key and value tiles',
        },
        { name: 'att.ctx', bytes: Tp * d * F32 },
      ],
    );
  } else {
    p.op('att.ac', ['att.q', 'att.k'], [{ name: 'att.matrix_ac', bytes: H * Tp * Tp * F32 }]);
    p.op('att.bd', ['att.q', 'att.p'], [{ name: 'att.matrix_bd_raw', bytes: H * Tp * P * F32 }]);
    p.op('att.shift', ['att.matrix_bd_raw'], [{ name: 'att.matrix_bd', bytes: H * Tp * Tp * F32 }]);
    p.op('att.softmax', ['att.matrix_ac', 'att.matrix_bd'], [{ name: 'att.probs', bytes: H * Tp * Tp * F32, inPlaceOf: 'att.matrix_bd' }]);
    p.op('att.context', ['att.probs', 'att.v'], [{ name: 'att.ctx', bytes: Tp * d * F32 }]);
  }
  p.op('att.out', ['att.ctx'], [{ name: 'att.o', bytes: Tp * d * F32 }]);
  p.op('att.residual', ['att.o', 'x']);

  // Convolution module: LN → pointwise (2d) → GLU → depthwise k (BN folded) + SiLU → pointwise.
  if (rowTiled) {
    // Row-tile loop filling the whole GLU plane (the depthwise conv needs its neighbours),
    // then a row-tile loop from it back into x.
    p.op(
      'conv.pre',
      ['x'],
      [
        { name: 'conv.ln', bytes: R * d * F32 },
        { name: 'conv.pw1', bytes: R * 2 * d * F32 },
        { name: 'conv.glu', bytes: Tp * d * F32 },
      ],
    );
    p.op(
      'conv.post',
      ['conv.glu', 'x'],
      [
        { name: 'conv.dw', bytes: R * d * F32 },
        { name: 'conv.pw2', bytes: R * d * F32 },
      ],
    );
  } else {
    p.op('conv.norm', ['x'], [{ name: 'conv.ln', bytes: Tp * d * F32 }]);
    p.op('conv.pw1', ['conv.ln'], [{ name: 'conv.pw1', bytes: Tp * 2 * d * F32 }]);
    p.op('conv.glu', ['conv.pw1'], [{ name: 'conv.glu', bytes: Tp * d * F32 }]);
    p.op('conv.dw', ['conv.glu'], [{ name: 'conv.dw', bytes: Tp * d * F32 }]);
    p.op('conv.pw2', ['conv.dw'], [{ name: 'conv.pw2', bytes: Tp * d * F32 }]);
    p.op('conv.residual', ['conv.pw2', 'x']);
  }

  ffn('ff2');
  p.op('norm_out', ['x']);

  // Adapter: LN → Linear → GELU → Linear, rows written straight into the stage output (one
  // row-tile loop, so the output is live across it).
  if (rowTiled) {
    p.op(
      'adapter',
      ['x'],
      [
        { name: 'adapter.ln', bytes: R * d * F32 },
        { name: 'adapter.h', bytes: R * D * F32 },
        { name: 'encoded', bytes: Tp * D * F32, layout: `f32[${Tp}][${D}]`, output: true },
      ],
    );
  } else {
    p.op('adapter.norm', ['x'], [{ name: 'adapter.ln', bytes: Tp * d * F32 }]);
    p.op('adapter.up', ['adapter.ln'], [{ name: 'adapter.h', bytes: Tp * D * F32 }]);
    p.op('adapter.out', ['adapter.h'], [{ name: 'encoded', bytes: Tp * D * F32, layout: `f32[${Tp}][${D}]`, output: true }]);
  }
  return p;
}

export interface StagePlan {
  readonly stage: string;
  readonly plan: Plan;
  readonly ops: readonly string[];
}

export function planEncoder(config: ModelConfig, o: EncoderPlanOptions): StagePlan {
  const p = encoderPass(config, o);
  return { stage: o.tiles === false ? 'conformer.untiled' : 'conformer', plan: plan(p.build()), ops: p.ops };
}

/** The Conformer's high-water with each kind of tiling on and off (for reports). */
export function encoderTilingReport(config: ModelConfig, segmentSeconds: number): { variant: string; highWater: number; lowerBound: number }[] {
  const d = DEFAULT_ENCODER_TILES;
  const variants: [string, EncoderTiles | false][] = [
    ['untiled', false],
    ['attention tiled', { subsampling: 0, rows: 0, queries: d.queries, keys: d.keys }],
    ['subsampling tiled', { subsampling: d.subsampling, rows: 0, queries: 0, keys: 0 }],
    ['attention + subsampling tiled', { subsampling: d.subsampling, rows: 0, queries: d.queries, keys: d.keys }],
    ['all tiled (default)', d],
  ];
  return variants.map(([variant, tiles]) => {
    const p = planEncoder(config, { segmentSeconds, tiles }).plan;
    return { variant, highWater: p.highWater, lowerBound: p.lowerBound };
  });
}
