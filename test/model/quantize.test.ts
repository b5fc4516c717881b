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
    const again = join(dir, `q${bits}-again`);
    await quantizeCheckpoint({ input: join(dir, 'f32'), output: again, bits, group, threads: 1 });
    t.equal(sha(join(out, 'model.safetensors')), sha(join(again, 'model.safetensors')), 'the same bytes with one thread or two');
    // What README says is written is what is written.
    for (const f of ['model.safetensors', 'audio_detokenizer/model.safetensors']) {
      const bytes = readFileSync(join(out, f));
      const header = JSON.parse(bytes.subarray(8, 8 + Number(bytes.readBigUInt64LE(0))).toString('utf8')) as { __metadata__?: Record<string, string> };
      t.equal(header.__metadata__?.['voxslab.quantization'], JSON.stringify({ bits, group }), `${f}: metadata`);
    }
    for (const f of ['config.json', 'audio_detokenizer/config.json']) {
      t.same((JSON.parse(readFileSync(join(out, f), 'utf8')) as { quantization: unknown }).quantization, { bits, group_size: group }, `${f}: quantization`);
    }
    const readme = readFileSync(new URL('../../../README.md', import.meta.url), 'utf8').replace(/\s+/g, ' ');
    t.match(readme, '`voxslab.quantization`, value the JSON text `{"bits":4,"group":64}`');
    t.match(readme, '`"quantization": {"bits": 4, "group_size": 64}`');
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
        const s = w.scales[Math.floor(i / w.cols) * (w.cols / w.group) + Math.floor((i % w.cols) / w.group)]!;
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
