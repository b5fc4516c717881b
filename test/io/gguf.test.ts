import t from 'tap';
import { spawnSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync, copyFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { getLlama, LlamaLogLevel, type Token } from 'node-llama-cpp';
import { MemoryDomain, plan } from '../../src/memory/index.js';
import { heapWorkspace } from '../../src/dsp/workspace.js';
import { loadCheckpoint, makeCheckpoint } from '../../src/io/checkpoint.js';
import { exportGguf } from '../../src/io/gguf.js';
import { quantizeQ4_0, quantizeQ8_0 } from '../../src/model/format/gguf.js';
import { Backbone, backbonePass, BackboneState, backboneStateSizes } from '../../src/model/blocks/backbone.js';
import { gemvScratchFloats } from '../../src/model/blocks/kernels.js';
import { BadInputError } from '../../src/errors.js';
import { scratchDir } from '../helpers.js';

const cli = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
const voxslab = (...args: string[]) => spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 120_000 });

const dir = scratchDir('voxslab-gguf-');
const model = join(dir, 'tiny');
makeCheckpoint({ config: 'tiny', seed: 31, out: model, dtype: 'f32' });
const TOKENS = [1, 6, 42, 17, 200, 3, 99, 128, 5, 7, 11, 250, 64, 33, 2, 129, 130, 8, 19, 77];

/** f16 → f32, written here from the IEEE layout (independent of the writer's conversion). */
function half(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 31;
  const m = h & 1023;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m === 0 ? s * Number.POSITIVE_INFINITY : Number.NaN;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

/** A GGUF reader written from the format's description, to check what the writer produced. */
function readGguf(bytes: Uint8Array) {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 0;
  /** Advances the cursor by `n` bytes; returns where the field started. */
  const take = (n: number): number => {
    at += n;
    return at - n;
  };
  const u32 = () => v.getUint32(take(4), true);
  const u64 = () => Number(v.getBigUint64(take(8), true));
  const str = () => {
    const n = u64();
    const from = take(n);
    return new TextDecoder().decode(bytes.subarray(from, from + n));
  };
  const value = (type: number): unknown => {
    switch (type) {
      case 4:
        return u32();
      case 5:
        return v.getInt32(take(4), true);
      case 6:
        return v.getFloat32(take(4), true);
      case 7:
        return bytes[take(1)] === 1;
      case 8:
        return str();
      case 9: {
        const of = u32();
        const n = u64();
        return Array.from({ length: n }, () => value(of));
      }
      default:
        throw new Error(`value type ${type}`);
    }
  };
  const magic = u32();
  const version = u32();
  const nTensors = u64();
  const nKv = u64();
  const kv = new Map<string, unknown>();
  for (let i = 0; i < nKv; i++) {
    const key = str();
    kv.set(key, value(u32()));
  }
  const tensors = new Map<string, { dims: number[]; type: number; offset: number }>();
  for (let i = 0; i < nTensors; i++) {
    const name = str();
    const n = u32();
    const dims = Array.from({ length: n }, () => u64());
    tensors.set(name, { dims, type: u32(), offset: u64() });
  }
  const dataStart = Math.ceil(at / 32) * 32;
  return { magic, version, kv, tensors, dataStart };
}

const SIZE: Record<number, (n: number) => number> = { 0: (n) => 4 * n, 1: (n) => 2 * n, 2: (n) => (n / 32) * 18, 8: (n) => (n / 32) * 34 };

t.test('Q4_0 and Q8_0 blocks decode to the weights within half a step (llama.cpp block layout)', async (t) => {
  const x = Float32Array.from({ length: 32 * 64 }, (_, i) => Math.sin(i * 0.37) * (1 + (i % 7)) * (i % 97 === 0 ? 40 : 1));
  const q4 = new Uint8Array((x.length / 32) * 18);
  quantizeQ4_0(x, q4);
  const q8 = new Uint8Array((x.length / 32) * 34);
  quantizeQ8_0(x, q8);
  let worst4 = 0;
  let worst8 = 0;
  for (let b = 0; b < x.length / 32; b++) {
    const d4 = half(q4[b * 18]! | (q4[b * 18 + 1]! << 8));
    const d8 = half(q8[b * 34]! | (q8[b * 34 + 1]! << 8));
    let amax = 0;
    for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(x[b * 32 + j]!));
    for (let j = 0; j < 32; j++) {
      const byte = q4[b * 18 + 2 + (j % 16)]!;
      const q = j < 16 ? byte & 15 : byte >> 4;
      // Relative to the block's largest weight; the top code (+7) cannot reach +8 steps.
      worst4 = Math.max(worst4, Math.abs((q - 8) * d4 - x[b * 32 + j]!) / amax);
      const s = (q8[b * 34 + 2 + j]! << 24) >> 24;
      worst8 = Math.max(worst8, Math.abs(s * d8 - x[b * 32 + j]!) / amax);
    }
  }
  t.ok(worst4 <= 1 / 8 + 1e-3, `q4_0 error ≤ one step of 1/8 (${worst4.toFixed(4)})`);
  t.ok(worst8 <= 0.5 / 127 + 1e-3, `q8_0 error ≤ half a step of 1/127 (${worst8.toFixed(5)})`);
  // Negative control: nibbles read in the wrong order are far off.
  let swapped = 0;
  for (let j = 0; j < 32; j++) {
    const byte = q4[2 + Math.floor(j / 2)]!;
    const q = j % 2 === 0 ? byte & 15 : byte >> 4;
    swapped = Math.max(swapped, Math.abs((q - 8) * half(q4[0]! | (q4[1]! << 8)) - x[j]!));
  }
  t.ok(swapped > 0.5, 'adjacent-pair nibble order would not decode');
});

t.test('the file: header, metadata llama.cpp reads, every tensor aligned and sized by its type', async (t) => {
  for (const type of ['f32', 'f16', 'q8_0', 'q4_0'] as const) {
    const out = join(dir, `tiny-${type}.gguf`);
    const r = exportGguf({ model, out, type });
    const bytes = new Uint8Array(readFileSync(out));
    t.equal(bytes.length, r.bytes, `${type}: size as reported`);
    const g = readGguf(bytes);
    t.equal(g.magic, 0x46554747, 'GGUF magic');
    t.equal(g.version, 3);
    t.equal(g.kv.get('general.architecture'), 'lfm2');
    t.same(g.kv.get('lfm2.attention.head_count_kv'), [0, 2, 0, 2], 'zero KV heads mark the short-conv layers');
    t.equal(g.kv.get('lfm2.shortconv.l_cache'), 3);
    t.equal((g.kv.get('tokenizer.ggml.tokens') as string[]).length, 256);
    t.equal(g.tensors.size, r.tensors);
    let end = 0;
    for (const [name, info] of g.tensors) {
      t.equal(info.offset % 32, 0, `${name} aligned`);
      const n = info.dims.reduce((a, b) => a * b, 1);
      const expected = name.endsWith('norm.weight') || name.includes('shortconv.conv') ? 0 : { f32: 0, f16: 1, q8_0: 8, q4_0: 2 }[type];
      if (info.type !== expected) t.fail(`${name}: type ${info.type}, expected ${expected}`);
      end = Math.max(end, g.dataStart + info.offset + SIZE[info.type]!(n));
    }
    t.ok(bytes.length >= end && bytes.length - end < 32, `${type}: the data section ends with the last tensor`);
  }
});

/** Our backbone's next-token distributions at every position of TOKENS. */
function ourDistributions(): number[][] {
  const domain = MemoryDomain.create({ limit: '1GiB' });
  const { config, image } = loadCheckpoint(model, domain);
  const D = config.backbone.hidden;
  const V = config.backbone.vocab;
  const work = domain.createArena(domain.owner('ticket', 0), 'backbone', {
    bytes: domain.policy.arenaBytes([plan(backbonePass(config, 32).build()).highWater]),
  });
  const backbone = new Backbone(config, image, work, heapWorkspace, { chunk: 32, context: 256 });
  const states = domain.createArena(domain.owner('conversation', 0), 'state', {
    bytes: domain.policy.arenaBytes(backboneStateSizes(config, 256).map((s) => s.bytes)),
  });
  const state = new BackboneState(config, states, 256);
  work.seal();
  states.seal();
  const input = new Float32Array(32 * D);
  TOKENS.forEach((tok, i) => {
    backbone.embedText(tok, input, i);
  });
  const hidden = backbone.forward(state, input, TOKENS.length).slice(0, TOKENS.length * D);
  const logits = new Float32Array(V);
  const scratch = new Float32Array(gemvScratchFloats(D));
  return TOKENS.map((_, i) => {
    backbone.logits(hidden.subarray(i * D, (i + 1) * D), logits, scratch);
    const m = Math.max(...logits);
    const e = Array.from(logits, (x) => Math.exp(x - m));
    const s = e.reduce((a, b) => a + b, 0);
    return e.map((x) => x / s);
  });
}

t.test('llama.cpp (node-llama-cpp) runs the exported backbone: next-token distributions equal ours', async (t) => {
  const ours = ourDistributions();
  const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
  const compare = async (file: string): Promise<{ worst: number; agree: number }> => {
    const m = await llama.loadModel({ modelPath: file });
    const ctx = await m.createContext({ contextSize: 256, threads: 1 });
    try {
      const options = { temperature: 1, topK: 0, topP: 1, minP: 0 };
      const out = await ctx.getSequence().controlledEvaluate(TOKENS.map((tok) => [tok as Token, { generateNext: { probabilities: true, options } }] as const));
      let worst = 0;
      let agree = 0;
      out.forEach((o, i) => {
        const p = o?.next?.probabilities;
        if (p === undefined) throw new Error(`no distribution at position ${i}`);
        const mine = ours[i]!;
        let best = 0;
        for (let v = 0; v < mine.length; v++) {
          const q = p.get(v as Token) ?? 0;
          worst = Math.max(worst, Math.abs(q - mine[v]!));
          if (q > (p.get(best as Token) ?? 0)) best = v;
        }
        if (best === mine.indexOf(Math.max(...mine))) agree++;
      });
      return { worst, agree };
    } finally {
      await ctx.dispose();
      await m.dispose();
    }
  };
  const f32 = await compare(join(dir, 'tiny-f32.gguf'));
  // llama.cpp keeps its KV cache in f16 by default: f32 weights agree to f16 rounding, no closer.
  t.ok(f32.worst < 1e-3, `f32: largest probability difference ${f32.worst.toExponential(2)} (< 1e-3)`);
  t.equal(f32.agree, TOKENS.length, 'f32: the same most likely token at every position');
  const f16 = await compare(join(dir, 'tiny-f16.gguf'));
  t.ok(f16.worst < 1e-3, `f16: largest probability difference ${f16.worst.toExponential(2)} (< 1e-3)`);
  t.equal(f16.agree, TOKENS.length, 'f16: the same most likely token at every position');
  const q8 = await compare(join(dir, 'tiny-q8_0.gguf'));
  t.ok(q8.worst < 2e-2, `q8_0: largest probability difference ${q8.worst.toExponential(2)} (< 2e-2)`);
  const q4 = await compare(join(dir, 'tiny-q4_0.gguf'));
  t.ok(q4.worst < 0.5, `q4_0 loads and runs (largest difference ${q4.worst.toExponential(2)})`);

  // Negative control: the gate and up projections of layer 0 exchanged in the file (same shape).
  const bytes = new Uint8Array(readFileSync(join(dir, 'tiny-f16.gguf')));
  const g = readGguf(bytes);
  const gate = g.tensors.get('blk.0.ffn_gate.weight')!;
  const up = g.tensors.get('blk.0.ffn_up.weight')!;
  const n = SIZE[gate.type]!(gate.dims.reduce((a, b) => a * b, 1));
  const a = bytes.slice(g.dataStart + gate.offset, g.dataStart + gate.offset + n);
  bytes.copyWithin(g.dataStart + gate.offset, g.dataStart + up.offset, g.dataStart + up.offset + n);
  bytes.set(a, g.dataStart + up.offset);
  const wrong = join(dir, 'tiny-swapped.gguf');
  writeFileSync(wrong, bytes);
  const swapped = await compare(wrong);
  t.ok(swapped.worst > 1e-2, `a miswired layer is caught (difference ${swapped.worst.toExponential(2)})`);
  await llama.dispose();
});

t.test('export-gguf on the command line; bad input names the file', async (t) => {
  const out = join(dir, 'cli.gguf');
  const r = voxslab('export-gguf', '--model', model, '--out', out, '--type', 'q8_0');
  t.equal(r.status, 0, r.stderr);
  t.match(r.stderr, /wrote .*cli\.gguf: 40 tensors/);
  t.equal(voxslab('export-gguf', '--model', model, '--out', out, '--type', 'q5_k').status, 2, 'an unknown type is a usage error');
  // An output that is one of the checkpoint's files is refused before anything is written.
  const weights = readFileSync(join(model, 'model.safetensors'));
  const over = voxslab('export-gguf', '--model', model, '--out', join(model, 'model.safetensors'));
  t.equal(over.status, 2, 'the checkpoint as output: usage error');
  t.match(over.stderr, /--out '.*model\.safetensors' is also --model/);
  t.ok(readFileSync(join(model, 'model.safetensors')).equals(weights), 'the checkpoint is untouched');
  const broken = join(dir, 'broken');
  makeCheckpoint({ config: 'tiny', seed: 3, out: broken, dtype: 'f32' });
  writeFileSync(join(broken, 'tokenizer.json'), '{"model": {"type": "Unigram"}}');
  const bad = voxslab('export-gguf', '--model', broken, '--out', join(dir, 'bad.gguf'));
  t.equal(bad.status, 4, 'a tokenizer that is not byte-level BPE is bad input');
  t.match(bad.stderr, /tokenizer\.json.*model.*byte-level BPE/);
  t.notOk(existsSync(join(dir, 'bad.gguf')), 'no partial file is left');
  copyFileSync(join(model, 'tokenizer.json'), join(broken, 'tokenizer.json'));
  rmSync(join(broken, 'model.safetensors'));
  t.throws(() => exportGguf({ model: broken, out: join(dir, 'bad.gguf'), type: 'f16' }), BadInputError);
});
