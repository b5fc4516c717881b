import t from 'tap';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { MemoryDomain } from '../../src/memory/index.js';
import { loadCheckpoint, makeCheckpoint } from '../../src/io/checkpoint.js';
import { quantizeCheckpoint } from '../../src/io/quantize.js';

import { checkpointLayout } from '../../src/model/format/layout.js';
import { gemv } from '../../src/model/blocks/kernels.js';
import { TensorStream } from '../../src/model/format/synth.js';
import { buildWeightsImage } from '../../src/model/format/image.js';
import { memorySource } from '../../src/dsp/wav.js';
import { prng, scratchDir } from '../helpers.js';
import { loadConfig } from '../../src/io/config.js';
import { f16ToF32 } from '../../src/model/format/dtype.js';
import type { Dtype } from '../../src/model/format/layout.js';
import { quantize } from '../../src/model/format/quant.js';
import { encodeSafetensorsHeader } from '../../src/model/format/safetensors.js';

const dir = scratchDir('voxslab-quant-');
const sha = (p: string) => createHash('sha256').update(readFileSync(p)).digest('hex');
makeCheckpoint({ config: 'tiny', seed: 11, out: join(dir, 'f32'), dtype: 'f32' });
const layout = checkpointLayout(loadConfig('tiny'));

for (const [bits, group] of [
  [8, 32],
  [4, 64],
] as const) {
  t.test(`q${bits} group ${group}: quantize, load, multiply`, async (t) => {
    const out = join(dir, `q${bits}`);
    const r = await quantizeCheckpoint({ input: join(dir, 'f32'), output: out, bits, group, threads: 2 });
    t.ok(r.quantized > 50, `${r.quantized} tensors quantized, ${r.kept} kept`);
    // A worker per thread for the whole run, none started and ended between tensors.
    t.equal(r.threads, 2, 'two threads: two workers started');
    const again = join(dir, `q${bits}-again`);
    const one = await quantizeCheckpoint({ input: join(dir, 'f32'), output: again, bits, group, threads: 1 });
    t.equal(one.threads, 1, 'one thread: one worker started');
    t.equal(sha(join(out, 'model.safetensors')), sha(join(again, 'model.safetensors')), 'the same bytes with one thread or two');
    // What docs/checkpoints.md says is written is what is written.
    for (const f of ['model.safetensors', 'audio_detokenizer/model.safetensors']) {
      const bytes = readFileSync(join(out, f));
      const header = JSON.parse(bytes.subarray(8, 8 + Number(bytes.readBigUInt64LE(0))).toString('utf8')) as { __metadata__?: Record<string, string> };
      t.equal(header.__metadata__?.['voxslab.quantization'], JSON.stringify({ bits, group }), `${f}: metadata`);
    }
    for (const f of ['config.json', 'audio_detokenizer/config.json']) {
      t.same((JSON.parse(readFileSync(join(out, f), 'utf8')) as { quantization: unknown }).quantization, { bits, group_size: group }, `${f}: quantization`);
    }
    const doc = readFileSync(new URL('../../../docs/checkpoints.md', import.meta.url), 'utf8').replace(/\s+/g, ' ');
    t.match(doc, '(`voxslab.quantization` = `{"bits":4,"group":64}`)');
    t.match(doc, '`"quantization": {"bits": 4, "group_size": 64}`');
    const domain = MemoryDomain.create({ limit: '1GiB' });
    const { image, report } = loadCheckpoint(out, domain);
    t.same(report.unexpected, [], 'scales and biases are recognised');
    const name = 'lfm.layers.2.feed_forward.w1.weight';
    const w = image.weights(name);
    t.equal(w.kind, bits === 8 ? 'q8' : 'q4');
    t.same([w.rows, w.cols], layout.main.find((s) => s.name === name)!.shape);
    // Dequantized values lie within half a step of the original weights.
    const spec = layout.main.find((s) => s.name === name)!;
    const n = w.rows * w.cols;
    const orig = new Float64Array(n);
    new TensorStream(spec, 11).next(orig, n);
    const deq = image.toF32(name, new Float32Array(n));
    let ok = true;
    if (w.kind === 'q8' || w.kind === 'q4') {
      for (let i = 0; i < n; i++) {
        const s = f16ToF32(w.scales[Math.floor(i / w.cols) * (w.cols / w.group) + Math.floor((i % w.cols) / w.group)]!);
        if (Math.abs(deq[i]! - orig[i]!) > s / 2 + 1e-6) ok = false;
      }
    }
    t.ok(ok, 'every weight within half a quantization step');
    // The quantized GEMV equals the product with the dequantized matrix.
    const r2 = prng(bits);
    const x = Float32Array.from({ length: w.cols }, () => r2() * 2 - 1);
    const y = new Float32Array(w.rows);
    gemv(w, x, y, new Float32Array(w.cols / group));
    let worst = 0;
    for (let i = 0; i < w.rows; i++) {
      let s = 0;
      for (let k = 0; k < w.cols; k++) s += deq[i * w.cols + k]! * x[k]!;
      worst = Math.max(worst, Math.abs(s - y[i]!));
    }
    t.ok(worst < 1e-4, `GEMV on the image matches (${worst.toExponential(2)})`);
    // f16 scale and bias per group: q4 at group 64 is 4.5 bits per weight, q8 at 32 is 9.
    let bpwOk = true;
    for (const name of image.names.filter((n) => image.get(n).quant !== undefined)) {
      const m = image.weights(name);
      if (m.kind !== 'q8' && m.kind !== 'q4') continue;
      const stored = m.data.byteLength + m.scales.byteLength + m.biases.byteLength;
      if ((8 * stored) / (m.rows * m.cols) !== bits + 32 / group) bpwOk = false;
    }
    t.ok(bpwOk, `every quantized matrix stores ${bits + 32 / group} bits per weight`);
    const held = domain.snapshot().owners[0]!.categories.weights!.requested;
    t.ok(held < readFileSync(join(dir, 'f32', 'model.safetensors')).length * (bits === 8 ? 0.45 : 0.3), `image ${held} bytes`);
  });
}

t.test('a quantized tensor without its scales is refused by name', async (t) => {
  const bytes = readFileSync(join(dir, 'q8', 'model.safetensors'));
  const n = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n))) as Record<string, any>;
  const q = 'lfm.layers.0.conv.in_proj.weight';
  header.__spare = header[`${q}.scales`];
  delete header[`${q}.scales`];
  const text = new TextEncoder().encode(JSON.stringify(header));
  const file = new Uint8Array(8 + text.length + bytes.length - 8 - n);
  new DataView(file.buffer).setBigUint64(0, BigInt(text.length), true);
  file.set(text, 8);
  file.set(bytes.subarray(8 + n), 8 + text.length);
  const detok = readFileSync(join(dir, 'q8', 'audio_detokenizer', 'model.safetensors'));
  t.throws(
    () =>
      buildWeightsImage(MemoryDomain.create({ limit: '1GiB' }), loadConfig('tiny'), {
        main: memorySource(file, 'q.safetensors'),
        detokenizer: memorySource(detok, 'd.safetensors'),
      }),
    {
      name: 'BadInputError',
      message: new RegExp(`q\\.safetensors, field tensor '${q.replace(/\./g, '\\.')}': is U8 \\(quantized\\) but its \\.scales or \\.biases tensor is missing`),
    },
  );
  await t.rejects(quantizeCheckpoint({ input: join(dir, 'f32'), output: join(dir, 'x'), bits: 3 as never, group: 64 }), /--bits must be 4 or 8/);
  await t.rejects(quantizeCheckpoint({ input: join(dir, 'missing'), output: join(dir, 'y'), bits: 8, group: 64 }), {
    name: 'BadInputError',
    message: /missing\/model\.safetensors: cannot open/,
  });
});

/** The file with every quantization scale and bias tensor rewritten by `f` (F16 bits → F32 values). */
function withF32Scales(bytes: Uint8Array, f: (name: string, i: number, v: number) => number = (_n, _i, v) => v): Uint8Array {
  const n = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n))) as Record<string, any>;
  const { __metadata__: metadata, ...entries } = header;
  const list = Object.entries(entries).sort((a, b) => a[1].data_offsets[0] - b[1].data_offsets[0]);
  const parts: Uint8Array[] = [];
  const out: { name: string; dtype: Dtype; shape: number[] }[] = [];
  for (const [name, e] of list) {
    const data = bytes.subarray(8 + n + e.data_offsets[0], 8 + n + e.data_offsets[1]);
    if (/\.(scales|biases)$/.test(name)) {
      const h = new Uint16Array(new Uint8Array(data).buffer);
      parts.push(new Uint8Array(Float32Array.from(h, (v, i) => f(name, i, f16ToF32(v))).buffer));
      out.push({ name, dtype: 'F32', shape: e.shape });
    } else {
      parts.push(data);
      out.push({ name, dtype: e.dtype, shape: e.shape });
    }
  }
  const { header: head } = encodeSafetensorsHeader(out, metadata);
  const file = new Uint8Array(head.length + parts.reduce((a, p) => a + p.length, 0));
  file.set(head, 0);
  let at = head.length;
  for (const p of parts) {
    file.set(p, at);
    at += p.length;
  }
  return file;
}

t.test('an older file with F32 scales and biases loads as F16, the same values; one outside f16 is refused by name', async (t) => {
  const main = readFileSync(join(dir, 'q4', 'model.safetensors'));
  const detok = readFileSync(join(dir, 'q4', 'audio_detokenizer', 'model.safetensors'));
  const config = loadConfig('tiny');
  const load = (m: Uint8Array, d: Uint8Array) =>
    buildWeightsImage(MemoryDomain.create({ limit: '1GiB' }), config, {
      main: memorySource(m, 'q.safetensors'),
      detokenizer: memorySource(d, 'd.safetensors'),
    });
  const now = load(main, detok);
  const old = load(withF32Scales(main), withF32Scales(detok));
  t.equal(old.report.weightBytes, now.report.weightBytes, 'the same image size');
  let same = 0;
  let differ = 0;
  for (const name of now.image.names) {
    if (!/\.(scales|biases)$/.test(name)) continue;
    t.equal(old.image.get(name).dtype, 'F16');
    if (Buffer.compare(old.image.bytes(name), now.image.bytes(name)) === 0) same++;
    else differ++;
  }
  t.ok(same > 100 && differ === 0, `${same} scale and bias tensors, byte for byte`);
  const q = 'lfm.layers.1.feed_forward.w1.weight.biases';
  t.throws(
    () =>
      load(
        withF32Scales(main, (name, i, v) => (name === q && i === 3 ? -1e6 : v)),
        detok,
      ),
    {
      name: 'BadInputError',
      message: new RegExp(`q\\.safetensors, field tensor '${q.replace(/\./g, '\\.')}', offset \\d+: value 3 \\(-1000000\\) is outside the f16 range`),
    },
  );
  t.throws(
    () =>
      quantize(
        Float32Array.from({ length: 64 }, (_, i) => i - 1e5),
        1,
        64,
        4,
        64,
      ),
    {
      name: 'ArgumentError',
      message: /row 0, group 0: values from -100000 to -99937 are outside the f16 range/,
    },
  );
});
