/**
 * GGUF v3, the file format of llama.cpp: the backbone of an LFM2-Audio checkpoint written as an
 * `lfm2` model (the tensor names and metadata keys llama.cpp's LFM2 loader reads), so the same
 * weights run in llama.cpp. Pure: the header is built in memory and tensors are encoded into
 * caller-owned buffers; io/gguf.ts writes the file.
 *
 * Layout: magic, version, tensor and key counts; key/value pairs; tensor infos (name, dims with
 * the contiguous dimension first, type, offset into the data section); padding to the
 * alignment; tensor data, each tensor aligned. Q4_0 and Q8_0 are llama.cpp's blocks of 32
 * weights with an f16 scale: Q4_0 stores `q - 8` in nibbles (element j in the low nibble of
 * byte j, element j + 16 in the high nibble), Q8_0 stores signed bytes.
 */
import { ArgumentError, BadInputError } from '../../errors.js';
import type { ModelConfig } from './config.js';
import { f32ToF16 } from './dtype.js';
import { TOKENS } from './tokenizer.js';

/** ggml tensor types (ggml.h). */
const GGML_TYPE = Object.freeze({ F32: 0, F16: 1, Q4_0: 2, Q8_0: 8 });
/** `general.file_type` (llama.h `llama_ftype`). */
const FILE_TYPE = Object.freeze({ f32: 0, f16: 1, q4_0: 2, q8_0: 7 });
/** GGUF metadata value types. */
const GGUF_VALUE = Object.freeze({ U32: 4, I32: 5, F32: 6, BOOL: 7, STRING: 8, ARRAY: 9 });

const GGUF_MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
const GGUF_VERSION = 3;
const GGUF_ALIGNMENT = 32;
/** Weights per Q4_0 / Q8_0 block. */
const QK = 32;

/** The weight encodings `export-gguf` writes for matrices (vectors and the conv taps stay f32). */
export type GgufType = 'f32' | 'f16' | 'q4_0' | 'q8_0';

const TYPE_OF: Readonly<Record<GgufType, number>> = Object.freeze({ f32: GGML_TYPE.F32, f16: GGML_TYPE.F16, q4_0: GGML_TYPE.Q4_0, q8_0: GGML_TYPE.Q8_0 });

export type GgufValue =
  | { readonly type: 'u32' | 'i32' | 'f32'; readonly value: number }
  | { readonly type: 'bool'; readonly value: boolean }
  | { readonly type: 'string'; readonly value: string }
  | { readonly type: 'i32[]'; readonly value: readonly number[] }
  | { readonly type: 'string[]'; readonly value: readonly string[] };

export interface GgufTensorInfo {
  readonly name: string;
  /** Dimensions, the contiguous one first (ggml `ne`). */
  readonly dims: readonly number[];
  readonly type: number;
}

/** Bytes of `elements` weights in a ggml type. */
export function ggmlBytes(type: number, elements: number): number {
  switch (type) {
    case GGML_TYPE.F32:
      return 4 * elements;
    case GGML_TYPE.F16:
      return 2 * elements;
    case GGML_TYPE.Q4_0:
      return (elements / QK) * 18;
    case GGML_TYPE.Q8_0:
      return (elements / QK) * 34;
    default:
      throw new ArgumentError(`ggml type ${type} is not one export-gguf writes`);
  }
}

const align = (n: number, a: number): number => Math.ceil(n / a) * a;
const encoder = new TextEncoder();

/**
 * The header: everything before the data section, padded to the alignment, and each tensor's
 * offset inside the data section.
 */
export function encodeGgufHeader(
  kvs: ReadonlyMap<string, GgufValue>,
  tensors: readonly GgufTensorInfo[],
): { header: Uint8Array; offsets: number[]; dataBytes: number } {
  const parts: Uint8Array[] = [];
  let size = 0;
  const push = (b: Uint8Array): void => {
    parts.push(b);
    size += b.length;
  };
  const u32 = (v: number): void => {
    const b = new Uint8Array(4);
    new DataView(b.buffer).setUint32(0, v, true);
    push(b);
  };
  const i32 = (v: number): void => {
    const b = new Uint8Array(4);
    new DataView(b.buffer).setInt32(0, v, true);
    push(b);
  };
  const u64 = (v: number): void => {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setBigUint64(0, BigInt(v), true);
    push(b);
  };
  const str = (s: string): void => {
    const b = encoder.encode(s);
    u64(b.length);
    push(b);
  };
  const array = <T>(of: number, xs: readonly T[], each: (x: T) => void): void => {
    u32(GGUF_VALUE.ARRAY);
    u32(of);
    u64(xs.length);
    for (const x of xs) each(x);
  };
  u32(GGUF_MAGIC);
  u32(GGUF_VERSION);
  u64(tensors.length);
  u64(kvs.size);
  for (const [key, v] of kvs) {
    str(key);
    switch (v.type) {
      case 'u32':
        u32(GGUF_VALUE.U32);
        u32(v.value);
        break;
      case 'i32':
        u32(GGUF_VALUE.I32);
        i32(v.value);
        break;
      case 'f32': {
        u32(GGUF_VALUE.F32);
        const b = new Uint8Array(4);
        new DataView(b.buffer).setFloat32(0, v.value, true);
        push(b);
        break;
      }
      case 'bool':
        u32(GGUF_VALUE.BOOL);
        push(Uint8Array.of(v.value ? 1 : 0));
        break;
      case 'string':
        u32(GGUF_VALUE.STRING);
        str(v.value);
        break;
      case 'i32[]':
        array(GGUF_VALUE.I32, v.value, i32);
        break;
      case 'string[]':
        array(GGUF_VALUE.STRING, v.value, str);
        break;
    }
  }
  const offsets: number[] = [];
  let data = 0;
  for (const t of tensors) {
    str(t.name);
    u32(t.dims.length);
    for (const d of t.dims) u64(d);
    u32(t.type);
    u64(data);
    offsets.push(data);
    data = align(
      data +
        ggmlBytes(
          t.type,
          t.dims.reduce((a, b) => a * b, 1),
        ),
      GGUF_ALIGNMENT,
    );
  }
  const header = new Uint8Array(align(size, GGUF_ALIGNMENT));
  let at = 0;
  for (const p of parts) {
    header.set(p, at);
    at += p.length;
  }
  return { header, offsets, dataBytes: data };
}

/** Q4_0 blocks of `x` (length a multiple of 32) into `out` (18 bytes per block), as llama.cpp quantizes. */
export function quantizeQ4_0(x: Float32Array, out: Uint8Array): void {
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  for (let b = 0; b < x.length / QK; b++) {
    const base = b * QK;
    // The scale comes from the weight of largest magnitude, with its sign, so it maps to -8.
    let amax = 0;
    let max = 0;
    for (let j = 0; j < QK; j++) {
      const v = x[base + j] as number;
      if (Math.abs(v) > amax) {
        amax = Math.abs(v);
        max = v;
      }
    }
    const d = max / -8;
    const id = d !== 0 ? 1 / d : 0;
    const o = b * 18;
    view.setUint16(o, f32ToF16(d), true);
    for (let j = 0; j < QK / 2; j++) {
      const q0 = Math.min(15, Math.trunc(Math.fround((x[base + j] as number) * id) + 8.5));
      const q1 = Math.min(15, Math.trunc(Math.fround((x[base + j + QK / 2] as number) * id) + 8.5));
      out[o + 2 + j] = q0 | (q1 << 4);
    }
  }
}

/** Q8_0 blocks of `x` (length a multiple of 32) into `out` (34 bytes per block). */
export function quantizeQ8_0(x: Float32Array, out: Uint8Array): void {
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  for (let b = 0; b < x.length / QK; b++) {
    const base = b * QK;
    let amax = 0;
    for (let j = 0; j < QK; j++) amax = Math.max(amax, Math.abs(x[base + j] as number));
    const d = amax / 127;
    const id = d !== 0 ? 1 / d : 0;
    const o = b * 34;
    view.setUint16(o, f32ToF16(d), true);
    for (let j = 0; j < QK; j++) view.setInt8(o + 2 + j, Math.round(Math.fround((x[base + j] as number) * id)));
  }
}

/** Encodes f32 weights into `out` in a ggml type; returns the byte count. */
export function encodeTensor(type: number, x: Float32Array, out: Uint8Array): number {
  const n = ggmlBytes(type, x.length);
  const o = out.subarray(0, n);
  switch (type) {
    case GGML_TYPE.F32:
      o.set(new Uint8Array(x.buffer, x.byteOffset, n));
      break;
    case GGML_TYPE.F16: {
      const v = new DataView(o.buffer, o.byteOffset, n);
      for (let i = 0; i < x.length; i++) v.setUint16(2 * i, f32ToF16(x[i] as number), true);
      break;
    }
    case GGML_TYPE.Q4_0:
      quantizeQ4_0(x, o);
      break;
    case GGML_TYPE.Q8_0:
      quantizeQ8_0(x, o);
      break;
  }
  return n;
}

/** The parts of a Hugging Face `tokenizer.json` a GGUF vocabulary needs. */
export interface TokenizerJson {
  readonly model?: { readonly type?: string; readonly vocab?: Record<string, number>; readonly merges?: readonly (string | readonly string[])[] };
  readonly added_tokens?: readonly { readonly id: number; readonly content: string; readonly special?: boolean }[];
}

/** llama.cpp token types. */
const TOKEN_TYPE = Object.freeze({ normal: 1, control: 3, userDefined: 4, unused: 5 });

/** One tensor of the GGUF file and where its weights come from in the checkpoint. */
export interface GgufTensorPlan extends GgufTensorInfo {
  readonly source: string;
}

/**
 * The backbone as an llama.cpp `lfm2` model: metadata (hyperparameters and the byte-level BPE
 * vocabulary) and every tensor with its source name. Matrices are written in `type`; norms and
 * the short-conv taps stay f32, as llama.cpp's converter keeps them.
 */
export function lfm2GgufPlan(
  config: ModelConfig,
  tokenizer: TokenizerJson,
  type: GgufType,
  normEps: number,
  file = 'tokenizer.json',
): { kvs: Map<string, GgufValue>; tensors: GgufTensorPlan[] } {
  const b = config.backbone;
  const V = b.vocab;
  const D = b.hidden;
  const kvs = new Map<string, GgufValue>();
  const set = (k: string, v: GgufValue): void => {
    kvs.set(k, v);
  };
  set('general.architecture', { type: 'string', value: 'lfm2' });
  set('general.name', { type: 'string', value: 'LFM2-Audio backbone' });
  set('general.file_type', { type: 'u32', value: FILE_TYPE[type] });
  if (type !== 'f16' && type !== 'f32') set('general.quantization_version', { type: 'u32', value: 2 });
  set('lfm2.vocab_size', { type: 'u32', value: V });
  set('lfm2.context_length', { type: 'u32', value: b.maxContext });
  set('lfm2.embedding_length', { type: 'u32', value: D });
  set('lfm2.feed_forward_length', { type: 'u32', value: b.ffn });
  set('lfm2.block_count', { type: 'u32', value: b.layers.length });
  set('lfm2.attention.head_count', { type: 'u32', value: b.heads });
  // Per layer: zero KV heads marks a short-conv layer.
  set('lfm2.attention.head_count_kv', { type: 'i32[]', value: b.layers.map((k) => (k === 'conv' ? 0 : b.kvHeads)) });
  set('lfm2.rope.freq_base', { type: 'f32', value: b.ropeTheta });
  set('lfm2.attention.layer_norm_rms_epsilon', { type: 'f32', value: normEps });
  set('lfm2.shortconv.l_cache', { type: 'u32', value: b.convKernel });
  for (const [k, v] of vocabulary(tokenizer, V, file)) set(k, v);

  const matrix = TYPE_OF[type];
  const F32 = GGML_TYPE.F32;
  const tensors: GgufTensorPlan[] = [];
  const add = (name: string, source: string, dims: number[], t: number): void => {
    if (t !== F32 && (dims[0] as number) % QK !== 0) {
      throw new BadInputError({ field: `tensor '${source}'` }, `has ${dims[0]} inputs per row; ${type} needs a multiple of ${QK}`);
    }
    tensors.push({ name, source, dims, type: t });
  };
  add('token_embd.weight', 'lfm.embed_tokens.weight', [D, V], matrix);
  add('token_embd_norm.weight', 'lfm.embedding_norm.weight', [D], F32);
  const qDim = b.heads * b.headDim;
  const kvDim = b.kvHeads * b.headDim;
  b.layers.forEach((kind, l) => {
    const src = `lfm.layers.${l}`;
    const blk = `blk.${l}`;
    add(`${blk}.attn_norm.weight`, `${src}.operator_norm.weight`, [D], F32);
    add(`${blk}.ffn_norm.weight`, `${src}.ffn_norm.weight`, [D], F32);
    add(`${blk}.ffn_gate.weight`, `${src}.feed_forward.w1.weight`, [D, b.ffn], matrix);
    add(`${blk}.ffn_up.weight`, `${src}.feed_forward.w3.weight`, [D, b.ffn], matrix);
    add(`${blk}.ffn_down.weight`, `${src}.feed_forward.w2.weight`, [b.ffn, D], matrix);
    if (kind === 'conv') {
      add(`${blk}.shortconv.in_proj.weight`, `${src}.conv.in_proj.weight`, [D, 3 * D], matrix);
      add(`${blk}.shortconv.conv.weight`, `${src}.conv.conv.weight`, [b.convKernel, D], F32);
      add(`${blk}.shortconv.out_proj.weight`, `${src}.conv.out_proj.weight`, [D, D], matrix);
    } else {
      add(`${blk}.attn_q.weight`, `${src}.self_attn.q_proj.weight`, [D, qDim], matrix);
      add(`${blk}.attn_k.weight`, `${src}.self_attn.k_proj.weight`, [D, kvDim], matrix);
      add(`${blk}.attn_v.weight`, `${src}.self_attn.v_proj.weight`, [D, kvDim], matrix);
      add(`${blk}.attn_output.weight`, `${src}.self_attn.out_proj.weight`, [qDim, D], matrix);
      add(`${blk}.attn_q_norm.weight`, `${src}.self_attn.q_layernorm.weight`, [b.headDim], F32);
      add(`${blk}.attn_k_norm.weight`, `${src}.self_attn.k_layernorm.weight`, [b.headDim], F32);
    }
  });
  return { kvs, tensors };
}

/** The vocabulary keys (`tokenizer.ggml.*`): byte-level BPE, LFM2's pre-tokenizer, special ids. */
function vocabulary(t: TokenizerJson, V: number, file: string): [string, GgufValue][] {
  const model = t.model;
  if (model?.type !== 'BPE' || model.vocab === undefined || !Array.isArray(model.merges)) {
    throw new BadInputError({ file, field: 'model' }, 'is not a byte-level BPE tokenizer (model.type BPE with vocab and merges)');
  }
  const tokens: (string | undefined)[] = new Array(V).fill(undefined);
  const types = new Array<number>(V).fill(TOKEN_TYPE.normal);
  for (const [text, id] of Object.entries(model.vocab)) {
    if (!Number.isInteger(id) || id < 0 || id >= V)
      throw new BadInputError({ file, field: `model.vocab['${text}']` }, `id ${id} is outside the vocabulary of ${V}`);
    tokens[id] = text;
  }
  for (const a of t.added_tokens ?? []) {
    if (!Number.isInteger(a.id) || a.id < 0 || a.id >= V)
      throw new BadInputError({ file, field: 'added_tokens' }, `id ${a.id} is outside the vocabulary of ${V}`);
    tokens[a.id] = a.content;
    types[a.id] = a.special === true ? TOKEN_TYPE.control : TOKEN_TYPE.userDefined;
  }
  const names = tokens.map((s, id) => {
    if (s !== undefined) return s;
    types[id] = TOKEN_TYPE.unused;
    return `[PAD${id}]`;
  });
  const merges = model.merges.map((m, i) => {
    if (typeof m === 'string') return m;
    if (Array.isArray(m) && m.length === 2) return `${m[0]} ${m[1]}`;
    throw new BadInputError({ file, field: `model.merges[${i}]` }, 'is neither "a b" nor a pair');
  });
  return [
    ['tokenizer.ggml.model', { type: 'string', value: 'gpt2' }],
    ['tokenizer.ggml.pre', { type: 'string', value: 'lfm2' }],
    ['tokenizer.ggml.tokens', { type: 'string[]', value: names }],
    ['tokenizer.ggml.token_type', { type: 'i32[]', value: types }],
    ['tokenizer.ggml.merges', { type: 'string[]', value: merges }],
    ['tokenizer.ggml.bos_token_id', { type: 'u32', value: TOKENS.startOfText }],
    ['tokenizer.ggml.eos_token_id', { type: 'u32', value: TOKENS.imEnd }],
    ['tokenizer.ggml.padding_token_id', { type: 'u32', value: TOKENS.pad }],
    ['tokenizer.ggml.add_bos_token', { type: 'bool', value: true }],
  ];
}
