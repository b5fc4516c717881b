/** Writing synthetic checkpoints to disk in the public layout. */
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, renameSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { BUILTIN_CONFIGS, type ModelConfig, resolveConfig } from '../model/format/config.js';
import { buildWeightsImage, type LoadReport, type WeightsImage } from '../model/format/image.js';
import type { MemoryDomain } from '../memory/domain.js';
import { makeFolders, openFileSource } from './files.js';
import type { ByteSource } from '../bytes.js';
import { checkpointLayout, DTYPE_BYTES, type Dtype, type TensorSpec } from '../model/format/layout.js';
import { encodeSafetensorsHeader } from '../model/format/safetensors.js';
import { encodeValues, SYNTH_VERSION, TensorStream } from '../model/format/synth.js';
import { BadInputError, UsageError } from '../errors.js';
import { Progress } from './progress.js';
import { syntheticTokenizer } from '../model/format/tokenizer.js';
import { loadConfig } from './config.js';

export type FloatDtype = 'f32' | 'f16' | 'bf16';
const STORED: Record<FloatDtype, Dtype> = { f32: 'F32', f16: 'F16', bf16: 'BF16' };
const CHUNK = 1 << 20;

export interface MakeCheckpointOptions {
  config: string;
  seed: number;
  out: string;
  dtype: FloatDtype;
  /** Leave out tied tensors (to_logits), as a writer that stores them once would. */
  omitTied?: boolean;
  /** Show progress (default: for checkpoints over 64 MiB). */
  progress?: boolean;
}

/** A synthetic file's tensors as stored, its safetensors header and its data bytes. */
function syntheticFile(specs: readonly TensorSpec[], dtype: Dtype) {
  const stored = specs.map((s) => ({ name: s.name, shape: s.shape, dtype: s.kind === 'int' ? ('I64' as const) : dtype, spec: s }));
  const { header } = encodeSafetensorsHeader(stored, { format: 'pt', generator: 'voxslab make-checkpoint' });
  const total = stored.reduce((a, t) => a + t.shape.reduce((x, y) => x * y, 1) * DTYPE_BYTES[t.dtype], 0);
  return { stored, header, total };
}

/**
 * The two safetensors files `make-checkpoint` would write for `config`, as sources that hold
 * only their headers: for planning, which reads headers and never tensor data.
 */
export function plannedSources(config: ModelConfig, dtype: FloatDtype): { main: ByteSource; detokenizer: ByteSource } {
  const layout = checkpointLayout(config);
  const source = (specs: readonly TensorSpec[], name: string): ByteSource => {
    const { header, total } = syntheticFile(specs, STORED[dtype]);
    return {
      name,
      size: header.length + total,
      read(into, offset, length, position) {
        const n = Math.max(0, Math.min(length, header.length - position));
        into.set(header.subarray(position, position + n), offset);
        return n;
      },
    };
  };
  return {
    main: source(layout.main, `${config.name} model.safetensors (planned, ${dtype})`),
    detokenizer: source(layout.detokenizer, `${config.name} audio_detokenizer/model.safetensors (planned, ${dtype})`),
  };
}

function writeFile(path: string, specs: readonly TensorSpec[], seed: number, dtype: Dtype, label: string, progress: boolean | undefined): number {
  const { stored, header, total } = syntheticFile(specs, dtype);
  const bar = (progress ?? total > 64 * 1024 * 1024) ? new Progress(label, total) : undefined;
  const fd = openSync(path, 'w');
  try {
    writeSync(fd, header);
    const values = new Float64Array(CHUNK);
    const bytes = new Uint8Array(CHUNK * 8);
    let done = 0;
    for (const t of stored) {
      const count = t.shape.reduce((x, y) => x * y, 1);
      const stream = new TensorStream(t.spec, seed);
      for (let i = 0; i < count; i += CHUNK) {
        const n = Math.min(CHUNK, count - i);
        stream.next(values, n);
        const b = encodeValues(values, n, t.dtype, bytes);
        writeSync(fd, bytes, 0, b);
        done += b;
        bar?.update(done);
      }
    }
    bar?.update(total);
    return header.length + total;
  } finally {
    closeSync(fd);
  }
}

/** The files of a checkpoint folder, relative to it. */
export const CHECKPOINT_FILES: readonly string[] = Object.freeze([
  'config.json',
  'model.safetensors',
  'tokenizer.json',
  'tokenizer_config.json',
  'audio_detokenizer/config.json',
  'audio_detokenizer/model.safetensors',
]);

/** A built-in configuration's two documents; an unknown name is a usage error. */
export function builtinConfig(name: string): (typeof BUILTIN_CONFIGS)[string] {
  const pair = BUILTIN_CONFIGS[name];
  if (pair === undefined) throw new UsageError(`make-checkpoint: unknown configuration '${name}' (${Object.keys(BUILTIN_CONFIGS).join(', ')})`);
  return pair;
}

/**
 * Writes `config.json`, `model.safetensors`, `tokenizer.json` (with `tokenizer_config.json`)
 * and `audio_detokenizer/` for a built-in
 * configuration. The same seed gives the same bytes.
 */
export function makeCheckpoint(o: MakeCheckpointOptions): { files: string[]; bytes: number } {
  const pair = builtinConfig(o.config);
  const config = resolveConfig(o.config, pair[0], pair[1]);
  const layout = checkpointLayout(config);
  const dtype = STORED[o.dtype];
  mkdirSync(join(o.out, 'audio_detokenizer'), { recursive: true });
  writeFileSync(join(o.out, 'config.json'), `${JSON.stringify(pair[0], null, 2)}\n`);
  writeFileSync(join(o.out, 'audio_detokenizer', 'config.json'), `${JSON.stringify(pair[1], null, 2)}\n`);
  const tk = syntheticTokenizer(config.backbone.vocab);
  writeFileSync(join(o.out, 'tokenizer.json'), `${JSON.stringify(tk.tokenizer)}\n`);
  writeFileSync(join(o.out, 'tokenizer_config.json'), `${JSON.stringify(tk.config, null, 2)}\n`);
  const main = o.omitTied === true ? layout.main.filter((s) => s.tiedTo === undefined) : layout.main;
  let bytes = writeFile(join(o.out, 'model.safetensors'), main, o.seed, dtype, 'model.safetensors', o.progress);
  bytes += writeFile(
    join(o.out, 'audio_detokenizer', 'model.safetensors'),
    layout.detokenizer,
    o.seed ^ 0x5eed,
    dtype,
    'audio_detokenizer/model.safetensors',
    o.progress,
  );
  return { files: CHECKPOINT_FILES.map((f) => join(o.out, f)), bytes };
}

/** Loads a checkpoint folder into a weights image in `domain` (see model/image.ts). */
export function loadCheckpoint(
  dir: string,
  domain: MemoryDomain,
  sealOwner = true,
): { config: ModelConfig; image: WeightsImage; report: LoadReport; release(): void } {
  const config = loadConfig(dir);
  const main = openFileSource(join(dir, 'model.safetensors'));
  try {
    const det = openFileSource(join(dir, 'audio_detokenizer', 'model.safetensors'));
    try {
      const { image, report, release } = buildWeightsImage(domain, config, { main, detokenizer: det }, sealOwner);
      return { config, image, report, release };
    } finally {
      det.close();
    }
  } finally {
    main.close();
  }
}

/** Where built-in synthetic checkpoints are generated on first use. */
export function checkpointCache(): string {
  return process.env.VOXSLAB_CACHE ?? join(homedir(), '.cache', 'voxslab');
}

/** A checkpoint folder, or a built-in configuration name (generated once with seed 1, f32). */
export function resolveModel(model: string, log: (line: string) => void): string {
  if (existsSync(model) || BUILTIN_CONFIGS[model] === undefined) return model;
  const dir = join(checkpointCache(), `${model}-seed1-f32-v${SYNTH_VERSION}`);
  if (existsSync(join(dir, 'config.json'))) return dir;
  let tmp: string;
  const field = process.env.VOXSLAB_CACHE === undefined ? 'checkpoint cache' : 'VOXSLAB_CACHE';
  try {
    makeFolders(checkpointCache(), checkpointCache(), field);
    tmp = mkdtempSync(join(checkpointCache(), `.${model}-`));
  } catch (cause) {
    const why = cause instanceof BadInputError ? cause.reason : ((cause as NodeJS.ErrnoException).code ?? 'error');
    throw new BadInputError(
      { file: checkpointCache(), field },
      `cannot make the built-in '${model}' checkpoint there (${why}): it must be a folder this user can write`,
      {
        cause,
      },
    );
  }
  try {
    log(`generating the '${model}' checkpoint in ${dir} (first use)`);
    makeCheckpoint({ config: model, seed: 1, out: tmp, dtype: 'f32' });
    renameSync(tmp, dir);
  } catch (error) {
    rmSync(tmp, { recursive: true, force: true });
    if (!existsSync(join(dir, 'config.json'))) throw error;
  }
  return dir;
}
