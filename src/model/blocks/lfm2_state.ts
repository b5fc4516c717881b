/**
 * An LFM2 stack's shape, its workspace plan for a chunk of positions, and one conversation's
 * state (KV cache rows and short-conv columns): what sizing needs without the stack's code.
 */
import type { Arena } from '../../memory/arena.js';
import { ArgumentError } from '../../errors.js';
import { PassBuilder } from '../../memory/index.js';
import type { Lfm2Shape, ModelConfig } from '../format/config.js';
import { f32ToF16 } from '../format/dtype.js';
import { attentionScratchFloats, GEMM_PACK_FLOATS, gemvScratchFloats, prefillScratchFloats } from './kernels.js';
import '../categories.js';

const F32 = 4;
/** Keys per attention tile in the backbone (the bench measures decode attention with it). */
export const KEY_TILE = 64;

/** An LFM2 stack's shape and its attention window (0 = full causal attention). */
export type Lfm2Dims = Lfm2Shape & {
  /** Attention window including the current position; 0 for full causal attention. */
  window: number;
  /** Calls of at most this many positions run each linear layer row by row (GEMV), not as a GEMM. */
  rows: number;
};

export function backboneDims(config: ModelConfig): Lfm2Dims {
  return { ...config.backbone, window: 0, rows: 1 };
}

export function detokenizerDims(config: ModelConfig): Lfm2Dims {
  return { ...config.detokenizer, window: config.detokenizer.window, rows: config.detokenizer.upsample };
}

/** The backbone's workspace for a chunk of `chunk` positions. */
export function backbonePass(config: ModelConfig, chunk: number): PassBuilder {
  return lfm2Pass(backboneDims(config), chunk, true);
}

/**
 * An LFM2 stack's workspace for a chunk of `chunk` positions; with `prefill`, its row scratch
 * also holds the prefill kernel's (linearPrefill) for a whole chunk.
 */
export function lfm2Pass(b: Lfm2Dims, chunk: number, prefill = false): PassBuilder {
  const D = b.hidden;
  const qd = b.heads * b.headDim;
  const kd = b.kvHeads * b.headDim;
  const n = chunk;
  const p = new PassBuilder().external('input', 'kv_cache', 'conv_state');
  p.state('h', n * D * F32, `f32[${n}][${D}]`);
  p.state('gemm.pack', GEMM_PACK_FLOATS * F32);
  // Row-by-row linear layers (steps; calls of at most `rows` positions; every call when the
  // weights are quantized): int8 activations with their scales and sums, per row; a prefill's
  // quantized layers lay the same out by lanes.
  const widest = Math.max(D, qd, b.ffn);
  p.state('gemv.scratch', (prefill ? prefillScratchFloats(n, widest) : n * gemvScratchFloats(widest)) * F32);
  p.op('embed', ['input', 'h']);
  p.op('op.norm', ['h'], [{ name: 'op.ln', bytes: n * D * F32 }]);
  // Short-conv body (conv layers).
  p.op('conv.in_proj', ['op.ln'], [{ name: 'conv.proj', bytes: n * 3 * D * F32 }]);
  p.op('conv.gate', ['conv.proj'], [{ name: 'conv.bx', bytes: n * D * F32 }]);
  p.op('conv.conv', ['conv.bx', 'conv_state'], [{ name: 'conv.y', bytes: n * D * F32 }]);
  p.op('conv.cy', ['conv.proj', 'conv.y'], [{ name: 'conv.cy', bytes: n * D * F32 }]);
  p.op('conv.out', ['conv.cy'], [{ name: 'conv.o', bytes: n * D * F32 }]);
  p.op('conv.residual', ['conv.o', 'h']);
  // Attention body (attention layers), planned after the conv body: a layer runs one of them.
  p.op('att.norm', ['h'], [{ name: 'att.ln', bytes: n * D * F32 }]);
  p.op('att.q', ['att.ln'], [{ name: 'att.q', bytes: n * qd * F32 }]);
  p.op('att.k', ['att.ln'], [{ name: 'att.k', bytes: n * kd * F32 }]);
  p.op('att.v', ['att.ln'], [{ name: 'att.v', bytes: n * kd * F32 }]);
  p.op('att.cache', ['att.q', 'att.k', 'att.v', 'kv_cache']);
  p.op(
    'att.tiles',
    ['att.q', 'kv_cache'],
    [
      { name: 'att.scratch', bytes: attentionScratchFloats(n, KEY_TILE, b.headDim, b.heads, b.kvHeads) * F32 },
      { name: 'att.ctx', bytes: n * qd * F32 },
    ],
  );
  p.op('att.out', ['att.ctx'], [{ name: 'att.o', bytes: n * D * F32 }]);
  p.op('att.residual', ['att.o', 'h']);
  // SwiGLU feed-forward.
  p.op('ffn.norm', ['h'], [{ name: 'ffn.ln', bytes: n * D * F32 }]);
  p.op('ffn.gate', ['ffn.ln'], [{ name: 'ffn.gate', bytes: n * b.ffn * F32 }]);
  p.op('ffn.up', ['ffn.ln'], [{ name: 'ffn.up', bytes: n * b.ffn * F32 }]);
  p.op('ffn.act', ['ffn.gate', 'ffn.up'], [{ name: 'ffn.act', bytes: n * b.ffn * F32 }]);
  p.op('ffn.down', ['ffn.act'], [{ name: 'ffn.o', bytes: n * D * F32 }]);
  p.op('ffn.residual', ['ffn.o', 'h']);
  p.op('final.norm', ['h'], [{ name: 'hidden', bytes: n * D * F32, output: true }]);
  return p;
}

/** Per-conversation recurrence: region sizes, in carve order. */
export function backboneStateSizes(config: ModelConfig, context: number, kv: KvType = 'f32'): { name: string; bytes: number }[] {
  return lfm2StateSizes(backboneDims(config), context, kv);
}

/**
 * Cache rows an LFM2 stack keeps: the whole context for causal attention; for a sliding
 * window, the window plus one chunk (older rows are dropped as the window moves).
 */
export function cacheRows(b: Lfm2Dims, context: number, chunk: number): number {
  return b.window > 0 ? Math.min(context, b.window + chunk - 1) : context;
}

export function lfm2StateSizes(b: Lfm2Dims, rows: number, kv: KvType = 'f32'): { name: string; bytes: number }[] {
  const out: { name: string; bytes: number }[] = [];
  const e = kv === 'f16' ? 2 : F32;
  b.layers.forEach((kind, l) => {
    if (kind === 'attention') {
      out.push({ name: `kv.${l}.k`, bytes: rows * b.kvHeads * b.headDim * e }, { name: `kv.${l}.v`, bytes: rows * b.kvHeads * b.headDim * e });
    } else {
      out.push({ name: `conv.${l}`, bytes: (b.convKernel - 1) * b.hidden * F32 });
    }
  });
  return out;
}

/** KV cache element type: f32, or f16 for half the bytes (rows widened as attention reads them). */
export type KvType = 'f32' | 'f16';

/** One conversation's state for an LFM2 stack. */
export class BackboneState {
  /** Largest position + 1 the stack accepts. */
  readonly context: number;
  /** Rows the KV cache holds. */
  readonly rows: number;
  /** Positions processed so far. */
  position = 0;
  /** Absolute position of cache row 0 (moves as a sliding window drops old rows). */
  base = 0;
  readonly kv: KvType;
  readonly k: (Float32Array | Uint16Array | null)[]; // per layer: [rows][kv heads × head dim]
  readonly v: (Float32Array | Uint16Array | null)[];
  readonly conv: (Float32Array | null)[]; // per layer: [kernel − 1][hidden]
  /** Views of the key caches past the kept prefix, made at the first compaction and reused. */
  readonly tails: (Float32Array | undefined)[] = [];

  constructor(config: ModelConfig | Lfm2Dims, arena: Arena, context: number, rows = context, prefix = '', kv: KvType = 'f32') {
    if (kv !== 'f32' && kv !== 'f16') throw new ArgumentError(`KV cache type must be f32 or f16, got '${String(kv)}'`);
    this.context = context;
    this.rows = rows;
    this.kv = kv;
    const b: Lfm2Dims = 'backbone' in config ? backboneDims(config) : config;
    this.k = [];
    this.v = [];
    this.conv = [];
    b.layers.forEach((kind, l) => {
      if (kind === 'attention') {
        const n = rows * b.kvHeads * b.headDim;
        const carve = (name: string): Float32Array | Uint16Array =>
          kv === 'f16' ? arena.carve(name, 'recurrence', Uint16Array, n) : arena.carve(name, 'recurrence', Float32Array, n);
        this.k.push(carve(`${prefix}kv.${l}.k`));
        this.v.push(carve(`${prefix}kv.${l}.v`));
        this.conv.push(null);
      } else {
        this.k.push(null);
        this.v.push(null);
        this.conv.push(arena.carve(`${prefix}conv.${l}`, 'recurrence', Float32Array, (b.convKernel - 1) * b.hidden));
      }
    });
  }

  /** Starts a new conversation in the same memory. */
  reset(): void {
    this.position = 0;
    this.base = 0;
    for (const c of this.conv) c?.fill(0);
  }
}

/** Writes `count` values of k and v into the caches at `at` (f16 caches convert). */
export function appendRows(K: Float32Array | Uint16Array, V: Float32Array | Uint16Array, at: number, k: Float32Array, v: Float32Array, count: number): void {
  if (K instanceof Float32Array) {
    for (let i = 0; i < count; i++) {
      K[at + i] = k[i]!;
      V[at + i] = v[i]!;
    }
  } else {
    for (let i = 0; i < count; i++) {
      K[at + i] = f32ToF16(k[i]!);
      V[at + i] = f32ToF16(v[i]!);
    }
  }
}
