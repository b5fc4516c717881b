/**
 * `voxslab export-gguf`: writes a checkpoint's backbone as a GGUF file llama.cpp loads as an
 * `lfm2` model (model/format/gguf.ts has the layout). Every weight is read from the loaded
 * image as f32 (quantized checkpoints dequantized) and encoded in the chosen type, one tensor at
 * a time; the file appears under its name only when it is whole, and never in place of one of
 * the checkpoint's own files.
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { BadInputError } from '../errors.js';
import { MemoryDomain } from '../memory/domain.js';
import { EPS } from '../model/blocks/backbone.js';
import { encodeGgufHeader, encodeTensor, ggmlBytes, type GgufType, lfm2GgufPlan, type TokenizerJson } from '../model/format/gguf.js';
import { CHECKPOINT_FILES, loadCheckpoint } from './checkpoint.js';
import { checkOutputs, staged } from './files.js';
import { readJsonFile } from './config.js';
import { Progress } from './progress.js';

export interface ExportGgufOptions {
  /** A checkpoint folder. */
  readonly model: string;
  readonly out: string;
  readonly type: GgufType;
  /** A progress bar on stderr. */
  readonly progress?: boolean;
}

/** Writes the GGUF file; returns its tensor count and size in bytes. */
export function exportGguf(o: ExportGgufOptions): { tensors: number; bytes: number } {
  checkOutputs(
    CHECKPOINT_FILES.map((f) => ['--model', join(o.model, f)]),
    [['--out', o.out]],
  );
  const tokenizerFile = join(o.model, 'tokenizer.json');
  const tokenizer = readJsonFile(tokenizerFile, 'tokenizer') as TokenizerJson;
  const domain = MemoryDomain.create();
  const { config, image, release } = loadCheckpoint(o.model, domain);
  try {
    const { kvs, tensors } = lfm2GgufPlan(config, tokenizer, o.type, EPS, tokenizerFile);
    const { header, offsets, dataBytes } = encodeGgufHeader(kvs, tensors);
    const elements = tensors.map((t) => t.dims.reduce((a, b) => a * b, 1));
    const most = Math.max(...elements);
    const f32 = new Float32Array(most);
    const encoded = new Uint8Array(4 * most);
    const padding = new Uint8Array(64);
    const progress = o.progress === true ? new Progress(`export-gguf ${o.type}`, tensors.length) : null;
    staged(o.out, '--out', (tmp) => {
      const fd = openSync(tmp, 'w');
      try {
        writeSync(fd, header);
        let at = 0;
        tensors.forEach((t, i) => {
          const n = elements[i] as number;
          const x = image.toF32(t.source, f32.subarray(0, n));
          for (let k = 0; k < n; k++) {
            if (!Number.isFinite(x[k] as number)) throw new BadInputError({ file: o.model, field: `tensor '${t.source}'` }, `element ${k} is not finite`);
          }
          const bytes = encodeTensor(t.type, x, encoded);
          const gap = (offsets[i] as number) - at;
          if (gap > 0) writeSync(fd, padding, 0, gap);
          writeSync(fd, encoded, 0, bytes);
          at = (offsets[i] as number) + ggmlBytes(t.type, n);
          progress?.update(i + 1);
        });
        if (dataBytes > at) writeSync(fd, padding, 0, dataBytes - at);
      } finally {
        closeSync(fd);
      }
    });
    return { tensors: tensors.length, bytes: header.length + dataBytes };
  } finally {
    release();
  }
}
