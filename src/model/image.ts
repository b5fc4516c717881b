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
import type { ByteSource } from '../dsp/wav.js';
import { BadInputError } from '../memory/errors.js';
import type { MemoryDomain } from '../memory/domain.js';
import type { Arena } from '../memory/arena.js';
import type { Category } from '../memory/layout.js';
import type { ModelConfig } from './config.js';
import { bf16ToF32, f16ToF32 } from './dtype.js';
import { checkpointLayout, DTYPE_BYTES, type Dtype, type TensorSpec } from './layout.js';
import { readSafetensorsHeader, type TensorEntry } from './safetensors.js';

/** Where a tensor lives in the image. */
export interface ImageTensor {
  readonly name: string;
  readonly dtype: Dtype;
  readonly shape: readonly number[];
  readonly slab: number;
  readonly offset: number;
  readonly bytes: number;
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

  constructor(shared: SharedWeightsImage) {
    if (shared === null || typeof shared !== 'object' || !Array.isArray(shared.slabs) || !Array.isArray(shared.tensors)) {
      throw new BadInputError({ field: 'weights image' }, 'not a shared weights image');
    }
    this.slabs = shared.slabs;
    this.#tensors = new Map(shared.tensors.map((t) => [t.name, t]));
    for (const t of shared.tensors) {
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

  /** The stored bytes of a tensor (a view into the shared image). */
  bytes(name: string): Uint8Array {
    this.get(name);
    return this.#views.get(name) as Uint8Array;
  }

  /** Converts a float tensor to f32 into `out` (length = element count). */
  toF32(name: string, out: Float32Array): Float32Array {
    const t = this.get(name);
    const b = this.bytes(name);
    const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
    const n = b.byteLength / DTYPE_BYTES[t.dtype];
    for (let i = 0; i < n; i++) {
      out[i] = t.dtype === 'F32' ? v.getFloat32(4 * i, true) : t.dtype === 'BF16' ? bf16ToF32(v.getUint16(2 * i, true)) : t.dtype === 'F16' ? f16ToF32(v.getUint16(2 * i, true)) : Number.NaN;
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

function check(entries: ReadonlyMap<string, TensorEntry>, specs: readonly TensorSpec[], file: string, config: string): { load: [TensorSpec, TensorEntry][]; alias: [string, string][]; unexpected: string[] } {
  const load: [TensorSpec, TensorEntry][] = [];
  const alias: [string, string][] = [];
  const known = new Set(specs.map((s) => s.name));
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
    if (!sameShape(e.shape, s.shape)) {
      throw new BadInputError({ file, field: `tensor '${s.name}'` }, `shape [${e.shape.join(', ')}] but configuration '${config}' needs [${s.shape.join(', ')}]`);
    }
    const floatOk = e.dtype === 'F32' || e.dtype === 'F16' || e.dtype === 'BF16';
    const intOk = e.dtype === 'I64' || e.dtype === 'I32';
    if (s.kind === 'float' ? !floatOk : !intOk) {
      throw new BadInputError({ file, field: `tensor '${s.name}'` }, `dtype ${e.dtype} but a ${s.kind === 'float' ? 'float (F32, F16, BF16)' : 'integer (I64, I32)'} tensor is needed`);
    }
    load.push([s, e]);
  }
  const unexpected = [...entries.keys()].filter((n) => !known.has(n));
  return { load, alias, unexpected };
}

/**
 * Validates both safetensors files against `config`, then builds the sealed image in `domain`
 * (owner `model`). Nothing is allocated if validation fails.
 */
export function buildWeightsImage(domain: MemoryDomain, config: ModelConfig, sources: { main: ByteSource; detokenizer: ByteSource }): { image: WeightsImage; report: LoadReport } {
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
    from?: { src: ByteSource; entry: TensorEntry };
  }
  const items: Item[] = [];
  for (const [s, e] of main.load) items.push({ name: s.name, dtype: e.dtype, shape: e.shape, bytes: e.end - e.begin, category: 'weights', from: { src: sources.main, entry: e } });
  for (const [s, e] of det.load) items.push({ name: DETOKENIZER_PREFIX + s.name, dtype: e.dtype, shape: e.shape, bytes: e.end - e.begin, category: 'weights', from: { src: sources.detokenizer, entry: e } });
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
  let size = policy.guardBytes;
  for (const it of items) {
    const f = policy.regionFootprint(it.bytes, `tensor '${it.name}'`);
    if (current.length > 0 && size + f > policy.maxSlabBytes) {
      groups.push(current);
      current = [];
      size = policy.guardBytes;
    }
    current.push(it);
    size += f;
  }
  if (current.length > 0) groups.push(current);

  const arenas: Arena[] = [];
  const tensors: ImageTensor[] = [];
  try {
    groups.forEach((group, slab) => {
      const arena = domain.createArena(owner, `weights ${slab}`, { bytes: policy.arenaBytes(group.map((g) => g.bytes)) });
      arenas.push(arena);
      for (const it of group) {
        const view = arena.carve(it.name, it.category, Uint8Array, it.bytes);
        if (it.from !== undefined) {
          const got = it.from.src.read(view, 0, it.bytes, it.from.entry.begin);
          if (got !== it.bytes) throw new BadInputError({ file: it.from.src.name, field: `tensor '${it.from.entry.name}'`, offset: it.from.entry.begin + got }, 'the file ended while the tensor was read');
        }
        tensors.push(Object.freeze({ name: it.name, dtype: it.dtype, shape: it.shape, slab, offset: view.byteOffset, bytes: it.bytes }));
      }
    });
  } catch (e) {
    for (const a of arenas) a.release();
    throw e;
  }
  for (const [name, twin] of main.alias) {
    const t = tensors.find((x) => x.name === twin) as ImageTensor;
    tensors.push(Object.freeze({ ...t, name }));
  }
  const image = new WeightsImage({ slabs: arenas.map((a) => a.slab.buffer), tensors });

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
  domain.ledger.seal(owner);
  const weightBytes = items.filter((i) => i.category === 'weights').reduce((a, i) => a + i.bytes, 0);
  const derivedBytes = items.filter((i) => i.category === 'derived').reduce((a, i) => a + i.bytes, 0);
  return {
    image,
    report: Object.freeze({
      unexpected: [...main.unexpected, ...det.unexpected.map((n) => DETOKENIZER_PREFIX + n)],
      aliased: main.alias.map(([n]) => n),
      weightBytes,
      derivedBytes,
    }),
  };
}
