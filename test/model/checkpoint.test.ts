import t from 'tap';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BadInputError } from '../../src/errors.js';
import { MemoryDomain } from '../../src/memory/index.js';
import { native } from '../../src/native.js';
import { loadCheckpoint, makeCheckpoint } from '../../src/io/checkpoint.js';

import { buildWeightsImage, BN_EPS, DETOKENIZER_PREFIX } from '../../src/model/format/image.js';
import { checkpointLayout } from '../../src/model/format/layout.js';
import { encodeSafetensorsHeader, readSafetensorsHeader } from '../../src/model/format/safetensors.js';
import { TensorStream } from '../../src/model/format/synth.js';
import { bf16ToF32, f32ToBf16 } from '../../src/model/format/dtype.js';
import { memorySource } from '../../src/dsp/wav.js';
import { runWorker, scratchDir } from '../helpers.js';
import { loadConfig } from '../../src/io/config.js';

const dir = scratchDir('voxslab-ckpt-');
const sha = (p: string) => createHash('sha256').update(readFileSync(p)).digest('hex');
const tiny = loadConfig('tiny');
const layout = checkpointLayout(tiny);

t.test('the same seed gives the same bytes; another seed differs', async (t) => {
  const a = makeCheckpoint({ config: 'tiny', seed: 7, out: join(dir, 'a'), dtype: 'f32' });
  const b = makeCheckpoint({ config: 'tiny', seed: 7, out: join(dir, 'b'), dtype: 'f32' });
  const c = makeCheckpoint({ config: 'tiny', seed: 8, out: join(dir, 'c'), dtype: 'f32' });
  for (let i = 0; i < a.files.length; i++) t.equal(sha(a.files[i]!), sha(b.files[i]!), `${a.files[i]} repeats`);
  t.not(sha(a.files[1]!), sha(c.files[1]!), 'seed 8 differs');
});

t.test('a loaded checkpoint holds exactly the generated values, charged once to the model', async (t) => {
  const domain = MemoryDomain.create({ limit: '1GiB' });
  const { image, report } = loadCheckpoint(join(dir, 'a'), domain);
  t.same(report.unexpected, []);
  t.same(report.aliased, []);
  const used = [...layout.main, ...layout.detokenizer.map((s) => ({ ...s, name: DETOKENIZER_PREFIX + s.name }))].filter((s) => s.ignore !== true);
  t.equal(image.names.length, used.length + 2 * tiny.encoder.layers, 'every used tensor plus the folded convolutions');
  for (const name of ['lfm.layers.1.self_attn.q_proj.weight', 'conformer.pre_encode.conv.0.weight', 'depth_embeddings.3.to_logits.weight']) {
    const spec = layout.main.find((s) => s.name === name)!;
    const n = spec.shape.reduce((a, b) => a * b, 1);
    const want = new Float64Array(n);
    new TensorStream(spec, 7).next(want, n);
    const got = image.toF32(name, new Float32Array(n));
    t.ok(
      got.every((v, i) => v === Math.fround(want[i]!)),
      `${name} equals its generated values`,
    );
  }
  // The kernels' loads assume it: every tensor starts on a cache line in memory.
  const off = image.names.filter((n) => image.bytes(n).byteLength > 0 && native.addressLow(image.bytes(n)) % 64 !== 0);
  t.same(off, [], 'every tensor starts at a 64-byte-aligned address');
  const s = domain.snapshot();
  const model = s.owners.find((o) => o.name === 'model/0')!;
  t.equal(model.categories.weights!.requested, report.weightBytes);
  t.equal(model.categories.derived!.requested, report.derivedBytes);
  t.ok(model.sealed, 'the model is sealed (ready)');
  t.equal(s.held.total, model.held, 'nothing else was allocated');
});

t.test('batch-norm is folded into the depthwise convolution at load', async (t) => {
  const domain = MemoryDomain.create({ limit: '1GiB' });
  const { image } = loadCheckpoint(join(dir, 'a'), domain);
  const d = tiny.encoder.d;
  const k = tiny.encoder.convKernel;
  const p = 'conformer.layers.1.conv';
  const get = (n: string, len: number) => image.toF32(`${p}.${n}`, new Float32Array(len));
  const w = get('depthwise_conv.weight', d * k);
  const b = get('depthwise_conv.bias', d);
  const g = get('batch_norm.weight', d);
  const be = get('batch_norm.bias', d);
  const mu = get('batch_norm.running_mean', d);
  const v = get('batch_norm.running_var', d);
  const fw = get('depthwise_conv.folded_weight', d * k);
  const fb = get('depthwise_conv.folded_bias', d);
  let worst = 0;
  for (let c = 0; c < d; c++) {
    const s = g[c]! / Math.sqrt(v[c]! + BN_EPS);
    // BN(conv(x)) for a unit impulse at tap j equals the folded weight; for zero input the folded bias.
    for (let j = 0; j < k; j++) worst = Math.max(worst, Math.abs(fw[c * k + j]! - w[c * k + j]! * s));
    worst = Math.max(worst, Math.abs(fb[c]! - ((b[c]! - mu[c]!) * s + be[c]!)));
  }
  t.ok(worst < 1e-6, `folded values within 1e-6 (max ${worst.toExponential(2)})`);
});

t.test('bf16 and f16 checkpoints load in their stored dtype', async (t) => {
  for (const dtype of ['bf16', 'f16'] as const) {
    makeCheckpoint({ config: 'tiny', seed: 7, out: join(dir, dtype), dtype });
    const domain = MemoryDomain.create({ limit: '1GiB' });
    const { image, report } = loadCheckpoint(join(dir, dtype), domain);
    const name = 'lfm.layers.3.feed_forward.w2.weight';
    t.equal(image.get(name).dtype, dtype === 'bf16' ? 'BF16' : 'F16');
    const spec = layout.main.find((s) => s.name === name)!;
    const n = spec.shape.reduce((a, b) => a * b, 1);
    const want = new Float64Array(n);
    new TensorStream(spec, 7).next(want, n);
    const got = image.toF32(name, new Float32Array(n));
    const tol = dtype === 'bf16' ? 2 ** -8 : 2 ** -11;
    t.ok(
      got.every((v, i) => Math.abs(v - want[i]!) <= tol * Math.abs(want[i]!) + 1e-7),
      `${dtype} values round to nearest`,
    );
    if (dtype === 'bf16') t.equal(got[0], bf16ToF32(f32ToBf16(want[0]!)));
    t.ok(report.weightBytes < 12_000_000, `${dtype} image is half the f32 size (${report.weightBytes} bytes)`);
  }
});

t.test('missing tied tensors alias their twin; unknown extras are listed and skipped', async (t) => {
  makeCheckpoint({ config: 'tiny', seed: 7, out: join(dir, 'untied'), dtype: 'f32', omitTied: true });
  const domain = MemoryDomain.create({ limit: '1GiB' });
  const { image, report } = loadCheckpoint(join(dir, 'untied'), domain);
  t.equal(report.aliased.length, 8);
  const a = image.get('depth_embeddings.2.to_logits.weight');
  const b = image.get('depth_embeddings.2.embedding.weight');
  t.same([a.slab, a.offset, a.bytes], [b.slab, b.offset, b.bytes], 'same bytes, no copy');
});

t.test('make-checkpoint writes what docs/checkpoints.md says: tied to_logits equal their embeddings, istft.window is the periodic Hann window', async (t) => {
  const out = join(dir, 'layout-values');
  makeCheckpoint({ config: 'tiny', seed: 11, out, dtype: 'f32' });
  const tensor = (file: string, name: string): Buffer => {
    const bytes = readFileSync(file);
    const n = Number(bytes.readBigUInt64LE(0));
    const header = JSON.parse(bytes.subarray(8, 8 + n).toString('utf8')) as Record<string, { data_offsets: [number, number] }>;
    const e = header[name];
    if (e === undefined) throw new Error(`${name} not in ${file}`);
    return bytes.subarray(8 + n + e.data_offsets[0], 8 + n + e.data_offsets[1]);
  };
  const main = join(out, 'model.safetensors');
  const cb = loadConfig(out).audio.codebooks;
  for (let i = 0; i < cb; i++) {
    t.ok(
      tensor(main, `depth_embeddings.${i}.to_logits.weight`).equals(tensor(main, `depth_embeddings.${i}.embedding.weight`)),
      `codebook ${i}: to_logits bytes = embedding bytes`,
    );
  }
  const w = tensor(join(out, 'audio_detokenizer', 'model.safetensors'), 'istft.window');
  const got = new Float32Array(w.buffer.slice(w.byteOffset, w.byteOffset + w.byteLength));
  const want = Float32Array.from({ length: got.length }, (_, k) => 0.5 - 0.5 * Math.cos((2 * Math.PI * k) / got.length));
  t.equal(got.length, 1280);
  t.ok(
    got.every((v, i) => v === want[i]),
    'periodic Hann, to f32 rounding',
  );
  t.equal(got[0], 0, 'periodic: starts at 0 …');
  t.equal(got[640], 1, '… peaks at N/2');
  // So a writer that stores tied tensors once gives a model that answers identically.
  const untied = join(dir, 'layout-untied');
  makeCheckpoint({ config: 'tiny', seed: 11, out: untied, dtype: 'f32', omitTied: true });
  const a = loadCheckpoint(out, MemoryDomain.create({ limit: '1GiB' }));
  const b = loadCheckpoint(untied, MemoryDomain.create({ limit: '1GiB' }));
  for (let i = 0; i < cb; i++) {
    const name = `depth_embeddings.${i}.to_logits.weight`;
    const n = a.image.get(name).bytes / 4;
    t.same(a.image.toF32(name, new Float32Array(n)), b.image.toF32(name, new Float32Array(n)), `codebook ${i}: the same logits weights stored or aliased`);
  }
});

/** A checkpoint's main file rebuilt from `tensors` (name → bytes) with a header edit. */
function rebuild(edit: (header: Record<string, any>) => void, dataEdit?: (data: Uint8Array) => Uint8Array): Uint8Array {
  const bytes = readFileSync(join(dir, 'a', 'model.safetensors'));
  const n = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n))) as Record<string, any>;
  edit(header);
  let data: Uint8Array = bytes.subarray(8 + n);
  if (dataEdit) data = dataEdit(data);
  const text = new TextEncoder().encode(JSON.stringify(header));
  const out = new Uint8Array(8 + text.length + data.length);
  new DataView(out.buffer).setBigUint64(0, BigInt(text.length), true);
  out.set(text, 8);
  out.set(data, 8 + text.length);
  return out;
}

function rawHeader(text: string, data = new Uint8Array(0), declared?: bigint): Uint8Array {
  const body = new TextEncoder().encode(text);
  const out = new Uint8Array(8 + body.length + data.length);
  new DataView(out.buffer).setBigUint64(0, declared ?? BigInt(body.length), true);
  out.set(body, 8);
  out.set(data, 8 + body.length);
  return out;
}

t.test('a corpus of malformed checkpoints: each a BadInputError naming the tensor', async (t) => {
  const q = 'lfm.layers.1.self_attn.q_proj.weight';
  const detok = readFileSync(join(dir, 'a', 'audio_detokenizer', 'model.safetensors'));
  const corpus: [string, Uint8Array, RegExp][] = [
    ['empty', new Uint8Array(0), /header length, offset 0: file of 0 bytes is too short/],
    ['huge header length', rawHeader('{}', new Uint8Array(0), 1n << 40n), /header of 1099511627776 bytes exceeds the 100000000-byte limit/],
    ['header past the end', rawHeader('{}', new Uint8Array(0), 5000n), /header of 5000 bytes runs past the end/],
    ['tiny header', rawHeader('{', new Uint8Array(0), 1n), /cannot hold a JSON object/],
    ['bad JSON', rawHeader('{"a": '), /field header, offset 8: not valid JSON/],
    ['deep nesting', rawHeader(`{"a": ${'['.repeat(1_000_000)}${']'.repeat(1_000_000)}}`), /field header, offset 17: nested deeper than 4 levels/],
    ['a 50 MB string', rawHeader(`{"__metadata__": {"a": "${'x'.repeat(50_000_000)}"}}`), /field header, offset 31: a string longer than 65536 bytes/],
    [
      'not UTF-8',
      (() => {
        const b = rawHeader('{"a":1}');
        b[9] = 0xff;
        return b;
      })(),
      /field header, offset 8: not valid UTF-8/,
    ],
    ['header is an array', rawHeader('[1,2]'), /header is not a JSON object/],
    ['metadata not strings', rawHeader('{"__metadata__": {"a": 1}}'), /field __metadata__: metadata must map strings to strings/],
    ['entry not an object', rawHeader('{"w": 3}'), /field tensor 'w': entry is not an object/],
    ['unknown dtype', rawHeader('{"w": {"dtype": "F8", "shape": [1], "data_offsets": [0, 1]}}', new Uint8Array(1)), /tensor 'w': unsupported dtype "F8"/],
    [
      'negative dimension',
      rawHeader('{"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}', new Uint8Array(4)),
      /tensor 'w': shape \[-1\] is not a list/,
    ],
    ['fractional dimension', rawHeader('{"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}}', new Uint8Array(4)), /tensor 'w': shape/],
    [
      'offsets not a pair',
      rawHeader('{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}}', new Uint8Array(4)),
      /tensor 'w': data_offsets \[0\] is not a pair/,
    ],
    [
      'offsets reversed',
      rawHeader('{"w": {"dtype": "F32", "shape": [0], "data_offsets": [4, 0]}}', new Uint8Array(4)),
      /tensor 'w': data_offsets \[4, 0\] ends before it begins/,
    ],
    [
      'out of the file',
      rawHeader('{"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}', new Uint8Array(8)),
      /tensor 'w', offset \d+: data_offsets \[0, 16\] run past the 8 data bytes/,
    ],
    [
      'shape × dtype mismatch',
      rawHeader('{"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}', new Uint8Array(8)),
      /tensor 'w': shape \[3\] of F32 needs 12 bytes, data_offsets give 8/,
    ],
    [
      'overlapping tensors',
      rawHeader(
        '{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}',
        new Uint8Array(12),
      ),
      /tensor 'b', offset \d+: overlaps tensor 'a'/,
    ],
    [
      'a hole',
      rawHeader(
        '{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}',
        new Uint8Array(12),
      ),
      /tensor 'b', offset \d+: 4 unreferenced bytes before it/,
    ],
    [
      'trailing bytes',
      rawHeader('{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', new Uint8Array(9)),
      /field data, offset \d+: 5 bytes after the last tensor/,
    ],
    [
      'missing tensor',
      rebuild((h) => {
        const e = h[q];
        delete h[q];
        h.__filler = { ...e };
      }),
      new RegExp(`tensor '${q.replace(/\./g, '\\.')}': missing \\(required by configuration 'tiny'\\)`),
    ],
    [
      'wrong shape',
      rebuild((h) => (h[q].shape = [32, 128])),
      new RegExp(`tensor '${q.replace(/\./g, '\\.')}': shape \\[32, 128\\] but configuration 'tiny' needs \\[64, 64\\]`),
    ],
    [
      'wrong dtype',
      rebuild((h) => {
        h[q].dtype = 'I32';
      }),
      new RegExp(`tensor '${q.replace(/\./g, '\\.')}': dtype I32 but a float`),
    ],
    [
      'integer buffer as float',
      rebuild((h) => {
        h.codebook_offsets.dtype = 'F64';
      }),
      /tensor 'codebook_offsets': unsupported dtype "F64"/,
    ],
    ['truncated file', readFileSync(join(dir, 'a', 'model.safetensors')).subarray(0, 5_000_000), /run past the \d+ data bytes|runs past/],
  ];
  t.ok(corpus.length >= 20, `${corpus.length} malformed checkpoints`);
  for (const [name, bytes, pattern] of corpus) {
    const domain = MemoryDomain.create({ limit: '1GiB' });
    const file = `${name}.safetensors`;
    let err: unknown;
    try {
      buildWeightsImage(domain, tiny, { main: memorySource(bytes, file), detokenizer: memorySource(detok, 'detok.safetensors') });
      t.fail(`${name}: accepted`);
      continue;
    } catch (e) {
      err = e;
    }
    t.type(err, BadInputError, `${name}: BadInputError`, { diagnostic: false });
    t.match((err as Error).message, new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`), `${name}: names the file`, { diagnostic: false });
    t.match((err as Error).message, pattern, name);
    t.equal(domain.snapshot().held.total, 0, `${name}: nothing allocated`, { diagnostic: false });
  }
  // A header the writer produces round-trips.
  const { header } = encodeSafetensorsHeader([
    { name: 'x', dtype: 'BF16', shape: [2, 3] },
    { name: 'i', dtype: 'I64', shape: [] },
  ]);
  const file = new Uint8Array(header.length + 12 + 8);
  file.set(header);
  const h = readSafetensorsHeader(memorySource(file, 'ok.safetensors'));
  t.same([...h.tensors.keys()], ['x', 'i']);
  t.same(h.tensors.get('i')!.shape, [], '0-d tensor');
  t.equal(header.length % 8, 0, 'data 8-byte aligned');
});

t.test('two worker threads read the same image; the ledger shows its bytes once', async (t) => {
  const domain = MemoryDomain.create({ limit: '1GiB' });
  const { image } = loadCheckpoint(join(dir, 'a'), domain);
  const held = domain.snapshot().held.total;
  const names = ['lfm.embed_tokens.weight', `${DETOKENIZER_PREFIX}lin.weight`, 'conformer.layers.0.conv.depthwise_conv.folded_weight'];
  const mine = names.map((n) => image.bytes(n).reduce((a, b) => (a * 31 + b) >>> 0, 7));
  const url = new URL('./workers/reader.js', import.meta.url);
  const results = await Promise.all(
    [0, 1].map(() =>
      runWorker<{ sums: number[]; sameBuffer: boolean; heldBefore: number; heldAfter: number }>(url, { shared: domain.share(), image: image.share(), names }),
    ),
  );
  for (const r of results) {
    t.same(r.sums, mine, 'the worker reads the same bytes');
    t.ok(r.sameBuffer, 'through the shared slab itself, not a copy');
    t.same([r.heldBefore, r.heldAfter], [held, held], 'and allocates nothing');
  }
  t.equal(domain.snapshot().held.total, held, 'the image is counted once');
});

t.test('non-finite weights are refused at load, naming the file, the tensor and the offset', async (t) => {
  for (const [dtype, value, size] of [
    ['f32', 'NaN', 4],
    ['f16', 'Infinity', 2],
    ['bf16', 'NaN', 2],
  ] as const) {
    const out = join(dir, `nan-${dtype}`);
    makeCheckpoint({ config: 'tiny', seed: 7, out, dtype });
    const file = join(out, 'model.safetensors');
    const bytes = readFileSync(file);
    const h = readSafetensorsHeader(memorySource(new Uint8Array(bytes), file));
    const e = h.tensors.get('lfm.layers.0.feed_forward.w1.weight')!;
    const at = e.begin + 5 * size;
    // The bits of NaN / +Infinity in each encoding.
    if (dtype === 'f32') bytes.writeFloatLE(value === 'NaN' ? Number.NaN : Infinity, at);
    else bytes.writeUInt16LE(dtype === 'f16' ? 0x7c00 : 0x7fc0, at);
    writeFileSync(file, bytes);
    const domain = MemoryDomain.create({ limit: '1GiB' });
    let err: unknown = null;
    try {
      loadCheckpoint(out, domain);
    } catch (e) {
      err = e;
    }
    t.type(err, BadInputError, `${dtype}: refused`);
    t.match(
      (err as Error).message,
      new RegExp(`model\\.safetensors, field tensor 'lfm\\.layers\\.0\\.feed_forward\\.w1\\.weight', offset ${at}: value 5 is not finite`),
      `${dtype}: ${(err as Error).message.split('/').pop()}`,
    );
    t.equal(domain.snapshot().held.total, 0, `${dtype}: nothing held`);
  }
});
