/**
 * `voxslab quantize`: rewrites a checkpoint folder with affine group-quantized weights. Every
 * float 2-D tensor whose inputs split into whole groups becomes three tensors — `name` (U8:
 * [rows, cols] for 8 bits, [rows, cols / 2] for 4), `name.scales` and `name.biases` (F16,
 * [rows, cols / group]) — and everything else is copied as it is. Tensors are quantized in
 * parallel on a piscina pool and written in order; progress goes to stderr.
 */
import { closeSync, copyFileSync, mkdirSync, openSync, writeFileSync, writeSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { Piscina } from 'piscina';
import { BadInputError, UsageError } from '../errors.js';
import type { Dtype } from '../model/format/layout.js';
import { type Bits, isQuantizable, QUANT_METADATA_KEY } from '../model/format/quant.js';
import type { QuantResult, QuantTask } from '../model/format/quant.js';
import { encodeSafetensorsHeader, readSafetensorsHeader, type TensorEntry } from '../model/format/safetensors.js';
import { checkOutputs, openFileSource, stagedFolder } from './files.js';
import { readJsonFile } from './config.js';
import { Progress } from './progress.js';
import { withWorkerOptions } from '../threads.js';

interface OutTensor {
  name: string;
  dtype: Dtype;
  shape: number[];
}

async function quantizeFile(
  pool: Piscina,
  input: string,
  output: string,
  bits: Bits,
  group: number,
  label: string,
): Promise<{ quantized: number; kept: number }> {
  const src = openFileSource(input);
  try {
    const header = readSafetensorsHeader(src);
    const entries = [...header.tensors.values()].sort((a, b) => a.begin - b.begin);
    const out: OutTensor[] = [];
    const plan: { entry: TensorEntry; quant: boolean }[] = [];
    for (const e of entries) {
      const quant = isQuantizable(e.dtype, e.shape, group);
      plan.push({ entry: e, quant });
      if (quant) {
        const [rows, cols] = e.shape as [number, number];
        out.push({ name: e.name, dtype: 'U8', shape: [rows, bits === 8 ? cols : cols / 2] });
        out.push({ name: `${e.name}.scales`, dtype: 'F16', shape: [rows, cols / group] });
        out.push({ name: `${e.name}.biases`, dtype: 'F16', shape: [rows, cols / group] });
      } else {
        out.push({ name: e.name, dtype: e.dtype, shape: [...e.shape] });
      }
    }
    for (const o of out) {
      if (o.name.endsWith('.scales') || o.name.endsWith('.biases')) {
        if (out.filter((x) => x.name === o.name).length > 1)
          throw new BadInputError({ file: input, field: `tensor '${o.name}'` }, 'collides with a quantization tensor name');
      }
    }
    const metadata = { ...header.metadata, [QUANT_METADATA_KEY]: JSON.stringify({ bits, group }) };
    const { header: bytes } = encodeSafetensorsHeader(out, metadata);
    const total = entries.reduce((a, e) => a + (e.end - e.begin), 0);
    const bar = new Progress(label, total);
    const fd = openSync(output, 'w');
    let quantized = 0;
    try {
      writeSync(fd, bytes);
      // Keep a bounded window of tasks in flight; write results in file order.
      const window = Math.max(2, 2 * pool.options.maxThreads);
      const pending: { p: Promise<QuantResult> | Uint8Array }[] = [];
      let next = 0;
      let done = 0;
      const submit = () => {
        const { entry, quant } = plan[next++] as { entry: TensorEntry; quant: boolean };
        const raw = new Uint8Array(entry.end - entry.begin);
        src.read(raw, 0, raw.length, entry.begin);
        if (!quant) {
          pending.push({ p: raw });
          return;
        }
        const task: QuantTask = {
          bytes: raw,
          dtype: entry.dtype as QuantTask['dtype'],
          rows: entry.shape[0] as number,
          cols: entry.shape[1] as number,
          bits,
          group,
        };
        pending.push({ p: pool.run(task, { transferList: [raw.buffer] }) as Promise<QuantResult> });
      };
      while (next < plan.length && pending.length < window) submit();
      for (let i = 0; i < plan.length; i++) {
        const item = pending.shift() as { p: Promise<QuantResult> | Uint8Array };
        if (next < plan.length) submit();
        const e = (plan[i] as { entry: TensorEntry }).entry;
        let got: QuantResult | Uint8Array;
        try {
          got = item.p instanceof Uint8Array ? item.p : await item.p;
        } catch (err) {
          throw new BadInputError({ file: input, field: `tensor '${e.name}'` }, `cannot be quantized: ${(err as Error).message}`);
        }
        if (got instanceof Uint8Array) {
          writeSync(fd, got);
        } else {
          writeSync(fd, got.data);
          writeSync(fd, new Uint8Array(got.scales.buffer, got.scales.byteOffset, got.scales.byteLength));
          writeSync(fd, new Uint8Array(got.biases.buffer, got.biases.byteOffset, got.biases.byteLength));
          quantized++;
        }
        done += e.end - e.begin;
        bar.update(done);
      }
      bar.update(total);
    } finally {
      closeSync(fd);
    }
    return { quantized, kept: entries.length - quantized };
  } finally {
    src.close();
  }
}

export interface QuantizeOptions {
  input: string;
  output: string;
  bits: Bits;
  group: number;
  threads?: number;
}

export interface QuantizeResult {
  quantized: number;
  kept: number;
  /** Worker threads started for the run. */
  threads: number;
}

/** Quantizes a checkpoint folder into another. */
export async function quantizeCheckpoint(o: QuantizeOptions): Promise<QuantizeResult> {
  if (o.bits !== 4 && o.bits !== 8) throw new UsageError(`--bits must be 4 or 8, got ${String(o.bits)}`);
  if (o.group !== 32 && o.group !== 64) throw new UsageError(`--group must be 32 or 64, got ${String(o.group)}`);
  checkOutputs([['--in', o.input]], [['--out', o.output]]);
  // Everything is written into a temporary folder renamed into place at the end: a failure
  // (a bad detokenizer file, a full disk) leaves nothing behind.
  return stagedFolder(o.output, '--out', (out) => quantizeInto({ ...o, output: out }));
}

async function quantizeInto(o: QuantizeOptions): Promise<QuantizeResult> {
  mkdirSync(join(o.output, 'audio_detokenizer'), { recursive: true });
  const threads = o.threads ?? Math.max(1, availableParallelism());
  // Every worker lives for the whole run: a pool that retires idle workers between tensors
  // starts and ends a thread per lull, and ending a worker whose isolate is still compiling
  // can abort the process inside Node.
  const pool = withWorkerOptions(
    (w) =>
      new Piscina({
        filename: new URL('../../workers/quantize.js', import.meta.url).href,
        maxThreads: threads,
        minThreads: threads,
        ...w,
      }),
  );
  let started = 0;
  pool.on('workerCreate', () => started++);
  try {
    const a = await quantizeFile(pool, join(o.input, 'model.safetensors'), join(o.output, 'model.safetensors'), o.bits, o.group, 'model.safetensors');
    const b = await quantizeFile(
      pool,
      join(o.input, 'audio_detokenizer', 'model.safetensors'),
      join(o.output, 'audio_detokenizer', 'model.safetensors'),
      o.bits,
      o.group,
      'audio_detokenizer/model.safetensors',
    );
    for (const f of ['config.json', join('audio_detokenizer', 'config.json')]) {
      const cfg = readJsonFile(join(o.input, f), 'configuration');
      if (cfg === null || typeof cfg !== 'object' || Array.isArray(cfg)) throw new BadInputError({ file: join(o.input, f) }, 'not a JSON object');
      writeFileSync(join(o.output, f), `${JSON.stringify({ ...cfg, quantization: { bits: o.bits, group_size: o.group } }, null, 2)}\n`);
    }
    for (const extra of ['tokenizer.json', 'tokenizer_config.json']) {
      try {
        copyFileSync(join(o.input, extra), join(o.output, extra));
      } catch {
        // optional file
      }
    }
    return { quantized: a.quantized + b.quantized, kept: a.kept + b.kept, threads: started };
  } finally {
    await pool.destroy();
  }
}
