/**
 * The weights image: every tensor a configuration needs, read once into sealed SharedArrayBuffer
 * slabs charged to owner `model`, and shared with every worker without copying.
 *
 * Loading checks the whole checkpoint against the configuration's layout before allocating
 * anything (every required tensor present with the right shape and a float or integer dtype
 * as needed; ignored tensors skipped; a missing tied tensor aliases its twin; unknown extras
 * listed and skipped). Tensor bytes are read straight from the file into their regions, in
 * their stored dtype. Batch-norm is folded into the Conformer's depthwise convolution at load:
 * the folded f32 weight and bias are new tensors, charged as retained-derived bytes.
 */
import { native, WEIGHT_TYPE } from '../../native.js';
import type { ByteSource } from '../../bytes.js';
import { ArgumentError, BadInputError } from '../../errors.js';
import type { MemoryDomain } from '../../memory/domain.js';
import type { Arena } from '../../memory/arena.js';
import type { Category } from '../../memory/layout.js';
import type { ModelConfig } from './config.js';
import { bf16ToF32, f16ToF32, f32ToF16 } from './dtype.js';
import { checkpointLayout, DTYPE_BYTES, type Dtype, type TensorSpec } from './layout.js';
import { readSafetensorsHeader, type TensorEntry } from './safetensors.js';
import { rowInto, type Weights } from '../blocks/kernels.js';

/** Where a tensor lives in the image. */
export interface ImageTensor {
  readonly name: string;
  readonly dtype: Dtype;
  /** The logical shape (for a quantized tensor, the float matrix it stands for). */
  readonly shape: readonly number[];
  readonly slab: number;
  readonly offset: number;
  readonly bytes: number;
  /** Affine group quantization: the payload is U8, with `${name}.scales` and `${name}.biases`. */
  readonly quant?: { readonly bits: 4 | 8; readonly group: number };
}

/** What a worker needs to use the image (structured-cloneable). */
export interface SharedWeightsImage {
  readonly slabs: readonly SharedArrayBuffer[];
  readonly tensors: readonly ImageTensor[];
}

export const DETOKENIZER_PREFIX = 'audio_detokenizer.';
export const BN_EPS = 1e-5;

/**
 * Read-only access to a loaded image from any thread. Views are made once, when the image is
 * built or attached; `bytes`/`get` return them without allocating.
 */
export class WeightsImage {
  readonly slabs: readonly SharedArrayBuffer[];
  readonly #tensors: Map<string, ImageTensor>;
  readonly #views = new Map<string, Uint8Array>();

  /** `planned`: a planning image's views by tensor name (its slabs are unbacked; see buildWeightsImage). */
  constructor(shared: SharedWeightsImage, planned?: ReadonlyMap<string, Uint8Array>) {
    if (shared === null || typeof shared !== 'object' || !Array.isArray(shared.slabs) || !Array.isArray(shared.tensors)) {
      throw new BadInputError({ field: 'weights image' }, 'not a shared weights image');
    }
    this.slabs = shared.slabs;
    this.#tensors = new Map(shared.tensors.map((t) => [t.name, t]));
    for (const t of shared.tensors) {
      const view = planned?.get(t.name);
      if (view !== undefined) {
        this.#views.set(t.name, view);
        continue;
      }
      const slab = shared.slabs[t.slab];
      if (!(slab instanceof SharedArrayBuffer) || t.offset + t.bytes > slab.byteLength) {
        throw new BadInputError({ field: `tensor '${t.name}'` }, 'lies outside its slab');
      }
      this.#views.set(t.name, new Uint8Array(slab, t.offset, t.bytes));
    }
  }

  /** Joins an image built in another thread. */
  static attach(shared: SharedWeightsImage): WeightsImage {
    return new WeightsImage(shared);
  }

  share(): SharedWeightsImage {
    return { slabs: this.slabs, tensors: [...this.#tensors.values()] };
  }

  has(name: string): boolean {
    return this.#tensors.has(name);
  }

  get names(): string[] {
    return [...this.#tensors.keys()];
  }

  get(name: string): ImageTensor {
    const t = this.#tensors.get(name);
    if (t === undefined) throw new BadInputError({ field: `tensor '${name}'` }, 'is not in the weights image');
    return t;
  }

  /** A 2-D weight matrix as the kernels take it (views into the shared image). */
  weights(name: string): Weights {
    const t = this.get(name);
    if (t.shape.length !== 2) throw new BadInputError({ field: `tensor '${name}'` }, `is not a matrix (shape [${t.shape.join(', ')}])`);
    const [rows, cols] = t.shape as [number, number];
    const b = this.bytes(name);
    if (t.quant !== undefined) {
      const sb = this.bytes(`${name}.scales`);
      const bb = this.bytes(`${name}.biases`);
      return {
        kind: t.quant.bits === 8 ? 'q8' : 'q4',
        data: b,
        scales: new Uint16Array(sb.buffer, sb.byteOffset, sb.byteLength / 2),
        biases: new Uint16Array(bb.buffer, bb.byteOffset, bb.byteLength / 2),
        group: t.quant.group,
        rows,
        cols,
      };
    }
    if (t.dtype === 'F32') return { kind: 'f32', data: new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4), rows, cols };
    if (t.dtype === 'F16' || t.dtype === 'BF16')
      return { kind: t.dtype === 'F16' ? 'f16' : 'bf16', data: new Uint16Array(b.buffer, b.byteOffset, b.byteLength / 2), rows, cols };
    throw new BadInputError({ field: `tensor '${name}'` }, `dtype ${t.dtype} is not a weight encoding`);
  }

  /** The stored bytes of a tensor (a view into the shared image). */
  bytes(name: string): Uint8Array {
    this.get(name);
    return this.#views.get(name) as Uint8Array;
  }

  /** Converts a float tensor to f32 into `out` (length = element count; quantized ones dequantized). */
  toF32(name: string, out: Float32Array): Float32Array {
    const t = this.get(name);
    const b = this.bytes(name);
    if (t.quant !== undefined) {
      const w = this.weights(name);
      for (let r = 0; r < w.rows; r++) rowInto(w, r, out, r * w.cols);
      return out;
    }
    const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
    const n = b.byteLength / DTYPE_BYTES[t.dtype];
    for (let i = 0; i < n; i++) {
      out[i] =
        t.dtype === 'F32'
          ? v.getFloat32(4 * i, true)
          : t.dtype === 'BF16'
            ? bf16ToF32(v.getUint16(2 * i, true))
            : t.dtype === 'F16'
              ? f16ToF32(v.getUint16(2 * i, true))
              : Number.NaN;
    }
    return out;
  }
}

export interface LoadReport {
  /** Tensors present in a file but not used by the configuration (not loaded). */
  readonly unexpected: readonly string[];
  /** Tied tensors missing from the file, now aliasing their twin. */
  readonly aliased: readonly string[];
  readonly weightBytes: number;
  readonly derivedBytes: number;
}

const sameShape = (a: readonly number[], b: readonly number[]) => a.length === b.length && a.every((x, i) => x === b[i]);

interface Accepted {
  spec: TensorSpec;
  entry: TensorEntry;
  quant?: { bits: 4 | 8; group: number; scales: TensorEntry; biases: TensorEntry };
}

function check(
  entries: ReadonlyMap<string, TensorEntry>,
  specs: readonly TensorSpec[],
  file: string,
  config: string,
): { load: Accepted[]; alias: [string, string][]; unexpected: string[] } {
  const load: Accepted[] = [];
  const alias: [string, string][] = [];
  // A quantized matrix brings its scales and biases, ignored tensors included.
  const known = new Set(specs.flatMap((s) => (s.kind === 'float' && s.shape.length === 2 ? [s.name, `${s.name}.scales`, `${s.name}.biases`] : [s.name])));
  for (const s of specs) {
    const e = entries.get(s.name);
    if (s.ignore === true) continue;
    if (e === undefined) {
      if (s.tiedTo !== undefined && entries.has(s.tiedTo)) {
        alias.push([s.name, s.tiedTo]);
        continue;
      }
      throw new BadInputError({ file, field: `tensor '${s.name}'` }, `missing (required by configuration '${config}')`);
    }
    if (e.dtype === 'U8' && s.kind === 'float' && s.shape.length === 2) {
      // Affine group-quantized: U8 payload plus F16 scales and biases [rows, cols / group]
      // (F32 ones, an older layout, are converted to F16 as they are read).
      const [rows, cols] = s.shape as [number, number];
      const sc = entries.get(`${s.name}.scales`);
      const bi = entries.get(`${s.name}.biases`);
      const field = `tensor '${s.name}'`;
      if (sc === undefined || bi === undefined) throw new BadInputError({ file, field }, 'is U8 (quantized) but its .scales or .biases tensor is missing');
      const bits = e.shape[0] === rows && e.shape[1] === cols ? 8 : e.shape[0] === rows && (e.shape[1] as number) * 2 === cols ? 4 : 0;
      if (bits === 0) throw new BadInputError({ file, field }, `quantized shape [${e.shape.join(', ')}] fits neither 8 nor 4 bits of [${rows}, ${cols}]`);
      const groups = sc.shape[1] as number;
      const group = cols / groups;
      if (sc.shape.length !== 2 || sc.shape[0] !== rows || !Number.isInteger(group) || (group !== 32 && group !== 64)) {
        throw new BadInputError(
          { file, field: `tensor '${s.name}.scales'` },
          `shape [${sc.shape.join(', ')}] does not give groups of 32 or 64 over [${rows}, ${cols}]`,
        );
      }
      for (const t of [sc, bi]) {
        if ((t.dtype !== 'F16' && t.dtype !== 'F32') || !sameShape(t.shape, [rows, groups]) || t.dtype !== sc.dtype)
          throw new BadInputError({ file, field: `tensor '${t.name}'` }, `must be F16 [${rows}, ${groups}] (or F32, an older layout, for both)`);
      }
      load.push({ spec: s, entry: e, quant: { bits: bits as 4 | 8, group, scales: sc, biases: bi } });
      continue;
    }
    if (!sameShape(e.shape, s.shape)) {
      throw new BadInputError(
        { file, field: `tensor '${s.name}'` },
        `shape [${e.shape.join(', ')}] but configuration '${config}' needs [${s.shape.join(', ')}]`,
      );
    }
    const floatOk = e.dtype === 'F32' || e.dtype === 'F16' || e.dtype === 'BF16';
    const intOk = e.dtype === 'I64' || e.dtype === 'I32';
    if (s.kind === 'float' ? !floatOk : !intOk) {
      throw new BadInputError(
        { file, field: `tensor '${s.name}'` },
        `dtype ${e.dtype} but a ${s.kind === 'float' ? 'float (F32, F16, BF16)' : 'integer (I64, I32)'} tensor is needed`,
      );
    }
    load.push({ spec: s, entry: e });
  }
  const unexpected = [...entries.keys()].filter((n) => !known.has(n));
  return { load, alias, unexpected };
}

/** Reads an F32 tensor into `out` as f16 bits; a value outside f16's range is refused by name. */
function readF32AsF16(src: ByteSource, entry: TensorEntry, out: Uint8Array): void {
  const halves = new Uint16Array(out.buffer, out.byteOffset, out.byteLength / 2);
  const chunk = new Float32Array(Math.min(halves.length, 16384));
  const bytes = new Uint8Array(chunk.buffer);
  for (let at = 0; at < halves.length; at += chunk.length) {
    const n = Math.min(chunk.length, halves.length - at);
    const offset = entry.begin + 4 * at;
    const got = src.read(bytes, 0, 4 * n, offset);
    if (got !== 4 * n)
      throw new BadInputError({ file: src.name, field: `tensor '${entry.name}'`, offset: offset + got }, 'the file ended while the tensor was read');
    for (let i = 0; i < n; i++) {
      const h = f32ToF16(chunk[i] as number);
      if ((h & 0x7c00) === 0x7c00 && Number.isFinite(chunk[i] as number)) {
        throw new BadInputError(
          { file: src.name, field: `tensor '${entry.name}'`, offset: offset + 4 * i },
          `value ${i + at} (${chunk[i]}) is outside the f16 range the image stores scales and biases in`,
        );
      }
      halves[at + i] = h;
    }
  }
}

/**
 * Validates both safetensors files against `config`, then builds the sealed image in `domain`
 * (owner `model`). Nothing is allocated if validation fails. The owner is sealed (ready) unless
 * `sealOwner` is false: a caller that carves more model-owned state seals it itself.
 */
/** Float encodings whose values are checked for NaN and infinity at load (firstNonFinite's type). */
const FLOAT_TYPES: Partial<Record<string, number>> = { F32: WEIGHT_TYPE.f32, F16: WEIGHT_TYPE.f16, BF16: WEIGHT_TYPE.bf16 };

export function buildWeightsImage(
  domain: MemoryDomain,
  config: ModelConfig,
  sources: { main: ByteSource; detokenizer: ByteSource },
  sealOwner = true,
): { image: WeightsImage; report: LoadReport; release(): void } {
  const layout = checkpointLayout(config);
  const mainHeader = readSafetensorsHeader(sources.main);
  const detHeader = readSafetensorsHeader(sources.detokenizer);
  const main = check(mainHeader.tensors, layout.main, sources.main.name, config.name);
  const det = check(detHeader.tensors, layout.detokenizer, sources.detokenizer.name, config.name);

  interface Item {
    name: string;
    dtype: Dtype;
    shape: readonly number[];
    bytes: number;
    category: Category;
    /** `fromF32`: stored F32 (an older layout), rounded to the image's f16 as it is read. */
    from?: { src: ByteSource; entry: TensorEntry; fromF32?: boolean };
    quant?: { bits: 4 | 8; group: number };
  }
  const items: Item[] = [];
  const add = (prefix: string, src: ByteSource, list: Accepted[]) => {
    for (const a of list) {
      const e = a.entry;
      const item: Item = {
        name: prefix + a.spec.name,
        dtype: e.dtype,
        shape: a.spec.shape,
        bytes: e.end - e.begin,
        category: 'weights',
        from: { src, entry: e },
      };
      if (a.quant !== undefined) {
        item.quant = { bits: a.quant.bits, group: a.quant.group };
        items.push(item);
        for (const t of [a.quant.scales, a.quant.biases]) {
          const n = (t.shape[0] as number) * (t.shape[1] as number);
          items.push({
            name: prefix + t.name,
            dtype: 'F16',
            shape: t.shape,
            bytes: 2 * n,
            category: 'weights',
            from: { src, entry: t, fromF32: t.dtype === 'F32' },
          });
        }
      } else {
        items.push(item);
      }
    }
  };
  add('', sources.main, main.load);
  add(DETOKENIZER_PREFIX, sources.detokenizer, det.load);
  const d = config.encoder.d;
  const k = config.encoder.convKernel;
  for (let n = 0; n < config.encoder.layers; n++) {
    const p = `conformer.layers.${n}.conv.depthwise_conv`;
    items.push({ name: `${p}.folded_weight`, dtype: 'F32', shape: [d, 1, k], bytes: d * k * 4, category: 'derived' });
    items.push({ name: `${p}.folded_bias`, dtype: 'F32', shape: [d], bytes: d * 4, category: 'derived' });
  }

  // Pack into slabs no larger than the policy allows.
  const owner = domain.owner('model');
  const policy = domain.policy;
  const groups: Item[][] = [];
  let current: Item[] = [];
  let size = policy.arenaBytes([]);
  for (const it of items) {
    let f: number;
    try {
      f = policy.regionFootprint(it.bytes, `tensor '${it.name}'`);
    } catch (cause) {
      // A tensor past the slab limit comes from the configuration's dimensions: bad input naming it.
      if (!(cause instanceof ArgumentError)) throw cause;
      throw new BadInputError(
        { file: config.name, field: `tensor '${it.name}'` },
        `shape [${it.shape.join(', ')}] needs ${it.bytes} bytes, more than the largest slab (${policy.maxSlabBytes}): check the configuration's dimensions`,
        { cause },
      );
    }
    if (current.length > 0 && size + f > policy.maxSlabBytes) {
      groups.push(current);
      current = [];
      size = policy.arenaBytes([]);
    }
    current.push(it);
    size += f;
  }
  if (current.length > 0) groups.push(current);

  const arenas: Arena[] = [];
  const tensors: ImageTensor[] = [];
  const planned = new Map<string, Uint8Array>();
  try {
    groups.forEach((group, slab) => {
      const arena = domain.createArena(owner, `weights ${slab}`, {
        bytes: policy.arenaBytes(group.map((g) => g.bytes)),
        hugePages: true,
      });
      arenas.push(arena);
      for (const it of group) {
        const view = arena.carve(it.name, it.category, Uint8Array, it.bytes);
        // A planning domain's arenas are unbacked: charged as real, nothing read.
        if (!arena.backed) planned.set(it.name, view);
        else if (it.from !== undefined) {
          if (it.from.fromF32 === true) readF32AsF16(it.from.src, it.from.entry, view);
          else {
            const got = it.from.src.read(view, 0, it.bytes, it.from.entry.begin);
            if (got !== it.bytes)
              throw new BadInputError(
                { file: it.from.src.name, field: `tensor '${it.from.entry.name}'`, offset: it.from.entry.begin + got },
                'the file ended while the tensor was read',
              );
          }
          // Weights must be finite: one NaN makes every reply NaN, and the run would still exit 0.
          const type = FLOAT_TYPES[it.dtype];
          if (type !== undefined) {
            const bad = native.firstNonFinite(view, type);
            if (bad >= 0) {
              const size = type === WEIGHT_TYPE.f32 ? 4 : 2;
              throw new BadInputError(
                { file: it.from.src.name, field: `tensor '${it.from.entry.name}'`, offset: it.from.entry.begin + bad * size },
                `value ${bad} is not finite (NaN or infinity); the weights must be finite`,
              );
            }
          }
        }
        const entry: ImageTensor = { name: it.name, dtype: it.dtype, shape: it.shape, slab, offset: view.byteOffset, bytes: it.bytes };
        tensors.push(Object.freeze(it.quant !== undefined ? { ...entry, quant: it.quant } : entry));
      }
    });
  } catch (e) {
    for (const a of arenas) a.release();
    throw e;
  }
  // A tied tensor names its twin's bytes (and, planning, its twin's view).
  const alias = (from: string, to: string): ImageTensor => {
    const t = tensors.find((x) => x.name === from) as ImageTensor;
    tensors.push(Object.freeze({ ...t, name: to }));
    const view = planned.get(from);
    if (view !== undefined) planned.set(to, view);
    return t;
  };
  for (const [name, twin] of main.alias) {
    if (alias(twin, name).quant !== undefined) for (const part of ['scales', 'biases']) alias(`${twin}.${part}`, `${name}.${part}`);
  }
  const image = new WeightsImage({ slabs: arenas.map((a) => a.slab.buffer), tensors }, planned.size > 0 ? planned : undefined);

  // Fold batch-norm (eval) into the depthwise convolution: w' = w·s, b' = (b − μ)·s + β, s = γ/√(σ² + ε).
  const vec = (name: string) => image.toF32(name, new Float32Array(d));
  for (let n = 0; n < config.encoder.layers; n++) {
    const p = `conformer.layers.${n}.conv`;
    const w = image.toF32(`${p}.depthwise_conv.weight`, new Float32Array(d * k));
    const b = vec(`${p}.depthwise_conv.bias`);
    const gamma = vec(`${p}.batch_norm.weight`);
    const beta = vec(`${p}.batch_norm.bias`);
    const mean = vec(`${p}.batch_norm.running_mean`);
    const variance = vec(`${p}.batch_norm.running_var`);
    const fw = image.bytes(`${p}.depthwise_conv.folded_weight`);
    const fb = image.bytes(`${p}.depthwise_conv.folded_bias`);
    const ow = new Float32Array(fw.buffer, fw.byteOffset, d * k);
    const ob = new Float32Array(fb.buffer, fb.byteOffset, d);
    for (let c = 0; c < d; c++) {
      const s = (gamma[c] as number) / Math.sqrt((variance[c] as number) + BN_EPS);
      for (let j = 0; j < k; j++) ow[c * k + j] = (w[c * k + j] as number) * s;
      ob[c] = ((b[c] as number) - (mean[c] as number)) * s + (beta[c] as number);
    }
  }
  for (const a of arenas) a.seal();
  if (sealOwner) domain.ledger.seal(owner);
  const weightBytes = items.filter((i) => i.category === 'weights').reduce((a, i) => a + i.bytes, 0);
  const derivedBytes = items.filter((i) => i.category === 'derived').reduce((a, i) => a + i.bytes, 0);
  return {
    image,
    release: () => {
      for (const a of arenas) a.release();
    },
    report: Object.freeze({
      unexpected: [...main.unexpected, ...det.unexpected.map((n) => DETOKENIZER_PREFIX + n)],
      aliased: main.alias.map(([n]) => n),
      weightBytes,
      derivedBytes,
    }),
  };
}
