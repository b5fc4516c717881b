import t from 'tap';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MemoryDomain } from '../../src/memory/index.js';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { quantizeCheckpoint } from '../../src/io/quantize.js';
import { computeThreads } from '../../src/model/blocks/kernels.js';
import { Conversation, SpeechModel, type SpeechModelOptions } from '../../src/core/conversation.js';
import { END_OF_AUDIO } from '../../src/model/blocks/depthformer.js';
import { TOKENS } from '../../src/model/format/tokenizer.js';
import { memorySource } from '../../src/dsp/wav.js';
import { readSafetensorsHeader } from '../../src/model/format/safetensors.js';
import { prng, scratchDir } from '../helpers.js';

const dir = scratchDir('voxslab-conv-');
makeCheckpoint({ config: 'tiny', seed: 3, out: dir, dtype: 'f32' });

/** A second of speech-like input: a few harmonics with a moving pitch and some noise. */
function userAudio(rate: number, secs: number, seed: number): Float32Array {
  const r = prng(seed);
  return Float32Array.from({ length: Math.round(rate * secs) }, (_, i) => {
    const f = 140 + 40 * Math.sin(i / rate);
    let s = 0;
    for (let h = 1; h <= 4; h++) s += Math.sin((2 * Math.PI * f * h * i) / rate) / h;
    return 0.2 * s + 0.02 * (r() - 0.5);
  });
}

function open(options: SpeechModelOptions, seed = 11, inputRate = 16000, from = dir) {
  const domain = MemoryDomain.create({ limit: '2GiB' });
  const model = SpeechModel.load(from, domain, options);
  const conv = model.conversation({ seed, inputRate });
  model.ready();
  conv.ready();
  return { domain, model, conv };
}

function say(conv: Conversation, audio: Float32Array): number {
  for (let i = 0; i < audio.length; i += Conversation.INPUT_CHUNK) {
    const part = audio.subarray(i, Math.min(audio.length, i + Conversation.INPUT_CHUNK));
    conv.listen(part, part.length);
  }
  return conv.endSegment();
}

/** Everything a turn produces, copied. */
function record(conv: Conversation, audio: Float32Array) {
  const out = {
    mel: [] as number[],
    encoder: [] as number[],
    adapter: [] as number[],
    hidden: [] as number[],
    textLogits: [] as number[],
    audioLogits: [] as number[],
    bins: [] as number[],
    pcm: [] as number[],
    events: [] as (number | number[])[],
  };
  const D = conv.model.config.backbone.hidden;
  for (let i = 0; i < audio.length; i += Conversation.INPUT_CHUNK) conv.listen(audio.subarray(i, Math.min(audio.length, i + Conversation.INPUT_CHUNK)));
  conv.endSegment({
    mel: (rows, T) => out.mel.push(...rows.subarray(0, T * 128)),
    encoded: (enc, ad, n) => {
      out.encoder.push(...enc.subarray(0, n * conv.model.config.encoder.d));
      out.adapter.push(...ad.subarray(0, n * D));
    },
  });
  const summary = conv.reply({
    text: (tk) => out.events.push(tk),
    audio: (c) => out.events.push(Array.from(c)),
    pcm: (p, n) => out.pcm.push(...p.subarray(0, n)),
    hidden: (h) => out.hidden.push(...h.subarray(0, D)),
    textLogits: (l) => out.textLogits.push(...l),
    audioLogits: (l) => out.audioLogits.push(...l),
    bins: (b) => out.bins.push(...b),
  });
  return { ...out, summary };
}

function state(conv: Conversation): number[] {
  const s = conv.backbone;
  const parts: number[] = [s.position, s.base];
  for (const a of [...s.k, ...s.v]) if (a) parts.push(...a.subarray(0, s.position * (a.length / s.rows)));
  for (const a of s.conv) if (a) parts.push(...a);
  const d = conv.detokenizer.lfm;
  parts.push(d.position, d.base);
  for (const a of [...d.k, ...d.v, ...d.conv]) if (a) parts.push(...a);
  return parts;
}

const bitsEqual = (a: number[], b: number[]): boolean => a.length === b.length && a.every((x, i) => Object.is(x, b[i]));

t.test('the planned run equals the run with every plane in its own bytes, bit for bit', async (t) => {
  const audio = userAudio(16000, 2.5, 1);
  const opts: SpeechModelOptions = { replySeconds: 2, context: 1024 };
  const planned = open({ ...opts, layout: 'planned' });
  const separate = open({ ...opts, layout: 'separate' });
  const shared = ['conformer', 'backbone', 'detokenizer'] as const;
  const hw = (m: SpeechModel) => ({
    conformer: m.slot.encoder.region.summary.highWater,
    backbone: m.slot.backbone.region.summary.highWater,
    detokenizer: m.slot.detokenizer.work.summary.highWater,
  });
  for (const s of shared)
    t.ok(hw(planned.model)[s] < hw(separate.model)[s], `${s}: planned ${hw(planned.model)[s]} B share bytes, separate ${hw(separate.model)[s]} B do not`);
  for (let turn = 0; turn < 2; turn++) {
    const a = record(planned.conv, audio);
    const b = record(separate.conv, audio);
    t.ok(
      a.summary.audioFrames > 0 && a.pcm.length > 0,
      `turn ${turn}: ${a.summary.textTokens} text tokens, ${a.summary.audioFrames} frames, ${a.pcm.length} samples`,
    );
    for (const k of ['mel', 'encoder', 'adapter', 'hidden', 'textLogits', 'audioLogits', 'bins', 'pcm'] as const) {
      t.ok(a[k].length > 0 && bitsEqual(a[k], b[k]), `turn ${turn}: ${k} equal bit for bit (${a[k].length} values)`);
    }
    t.same(a.events, b.events, `turn ${turn}: the same tokens and codes`);
    t.same(a.summary, b.summary);
    t.ok(bitsEqual(state(planned.conv), state(separate.conv)), `turn ${turn}: conversation state equal bit for bit`);
  }
  t.equal(planned.domain.snapshot().allocations.afterReadiness.attempts, 0, 'nothing allocated after readiness');
});

t.test('the same seed gives the same reply; another seed differs', async (t) => {
  const audio = userAudio(22050, 1.5, 2);
  const run = (seed: number) => record(open({ replySeconds: 3, context: 1024 }, seed, 22050).conv, audio);
  const a = run(5);
  const b = run(5);
  const c = run(6);
  t.ok(bitsEqual(a.pcm, b.pcm) && a.pcm.length > 0, `seed 5 twice: ${a.pcm.length} identical samples`);
  t.same(a.events, b.events);
  t.notOk(bitsEqual(a.pcm, c.pcm), 'seed 6 gives other samples');
  t.notSame(a.events, c.events, 'and other codes');
});

t.test('interleaving follows the rules: 6 text, 12 audio, text end, end of audio, im_end', async (t) => {
  const audio = userAudio(16000, 1, 3);
  let checked = 0;
  const seen = { textEnd: 0, imEnd: 0 };
  // Sampled text (not greedy) so that the special tokens come up among random weights.
  for (let seed = 1; seed <= 16; seed++) {
    const { conv, model } = open({ replySeconds: 4, context: 2048, text: { temperature: 1.5, topK: 256 } }, seed);
    say(conv, audio);
    const events: (number | number[])[] = [];
    const s = conv.reply({ text: (tk) => events.push(tk), audio: (c) => events.push(Array.from(c)) });
    // An independent replay of the rules over the emitted events.
    let text = true;
    let left = 6;
    let textDone = false;
    let ok = true;
    for (const e of events) {
      left--;
      if (typeof e === 'number') {
        if (!text || e === TOKENS.imEnd) ok = false;
        if (e === TOKENS.textEnd) textDone = true;
        if (e === TOKENS.textEnd) seen.textEnd++;
        if (left <= 0 || textDone) {
          text = false;
          left = 12;
        }
      } else {
        if (text) ok = false;
        if (e.slice(1).includes(END_OF_AUDIO) && e[0] !== END_OF_AUDIO) ok = false;
        if (left <= 0 && !textDone) {
          text = true;
          left = 6;
        }
        if (e[0] === END_OF_AUDIO) {
          if (!e.every((c) => c === END_OF_AUDIO)) ok = false;
          text = true;
        }
      }
    }
    t.ok(ok, `seed ${seed}: ${events.length} events follow the rules (stop: ${s.stop})`);
    t.equal(s.audioFrames, events.filter((e) => typeof e !== 'number').length);
    t.ok(s.stop === 'end-of-turn' || s.audioFrames === model.maxFrames, 'a reply ends at <|im_end|> or at the length cap');
    if (s.stop === 'end-of-turn') seen.imEnd++;
    checked += events.length;
  }
  t.ok(checked > 100, `${checked} events checked`);
  t.ok(seen.textEnd > 0 && seen.imEnd > 0, `special tokens exercised: ${JSON.stringify(seen)}`);
});

t.test('a conversation past its context keeps answering; the system prompt stays (f32 and f16 KV)', async (t) => {
  for (const kv of ['f32', 'f16'] as const) {
    const { conv, model, domain } = open({ replySeconds: 3, context: 160, prefillChunk: 16, kv }, 9);
    const keep = conv.keep;
    t.ok(keep > 10 && keep < 40, `${kv}: the system prompt takes ${keep} positions`);
    const audio = userAudio(16000, 2, 4);
    let before: Float32Array | Uint16Array | null = null;
    const layer = conv.backbone.k.findIndex((k) => k !== null);
    t.equal(conv.backbone.k[layer]!.BYTES_PER_ELEMENT, kv === 'f16' ? 2 : 4, `${kv} cache`);
    for (let turn = 0; turn < 4; turn++) {
      say(conv, audio);
      if (turn === 0) before = conv.backbone.k[layer]!.slice(0, keep * (conv.backbone.k[layer]!.length / conv.backbone.rows));
      const s = conv.reply({});
      t.ok(
        s.audioFrames > 0 || s.textTokens > 0,
        `${kv} turn ${turn}: answered (${s.textTokens} text tokens, ${s.audioFrames} frames, ${conv.compactions} compactions so far)`,
      );
      t.ok(conv.backbone.position <= 160, `${kv} turn ${turn}: position ${conv.backbone.position} within the context`);
    }
    t.ok(conv.compactions > 0 && conv.dropped > 0, `${kv}: ${conv.compactions} compactions forgot ${conv.dropped} positions`);
    const now = conv.backbone.k[layer]!.subarray(0, before!.length);
    t.ok(bitsEqual(Array.from(now), Array.from(before!)), `${kv}: the system prompt rows of the cache are untouched`);
    t.equal(domain.snapshot().allocations.afterReadiness.attempts, 0, `${kv}: no allocation after readiness`);
    t.equal(model.options.context, 160);
  }
});

t.test('an f16 KV cache halves the cache and stays close to f32', async (t) => {
  const audio = userAudio(16000, 1.5, 9);
  const runs = (['f32', 'f16'] as const).map((kv) => {
    const { conv, model } = open({ replySeconds: 1, context: 1024, kv, audio: { temperature: 0, topK: 1 } }, 3);
    const cache = [...conv.backbone.k, ...conv.backbone.v].reduce((n, a) => n + (a?.byteLength ?? 0), 0);
    return { kv, cache, bytes: model.domain.snapshot().owners.find((o) => o.name === 'conversation/0')!.held, ...record(conv, audio) };
  });
  const [a, b] = runs as [(typeof runs)[0], (typeof runs)[0]];
  t.equal(b.cache * 2, a.cache, `KV cache ${a.cache} B in f32, ${b.cache} B in f16`);
  t.equal(a.bytes - b.bytes >= b.cache - 65536, true, `conversation state ${a.bytes} B → ${b.bytes} B`);
  let e = 0;
  let s = 0;
  const n = Math.min(a.hidden.length, b.hidden.length, 64 * 8);
  for (let i = 0; i < n; i++) {
    e += (a.hidden[i]! - b.hidden[i]!) ** 2;
    s += a.hidden[i]! ** 2;
  }
  t.ok(e / s < 1e-4, `first generated hidden states: NMSE ${(e / s).toExponential(2)} between f16 and f32 caches`);
  t.ok(e > 0, 'and they do differ (the f16 cache is in use)');
});

t.test('dropping positions rotates the kept keys to their new positions (float64 check)', async (t) => {
  const { conv, model } = open({ replySeconds: 1, context: 512, prefillChunk: 16 }, 4);
  say(conv, userAudio(16000, 1, 5));
  conv.reply({});
  const s = conv.backbone;
  const b = model.config.backbone;
  const kd = b.kvHeads * b.headDim;
  const l = s.k.findIndex((k) => k !== null);
  const old = (s.k[l] as Float32Array).slice(0, s.position * kd);
  const oldV = (s.v[l] as Float32Array).slice(0, s.position * kd);
  const pos = s.position;
  const keep = conv.keep;
  const drop = 13;
  model.slot.backbone.stack.dropPositions(s, keep, drop);
  t.equal(s.position, pos - drop);
  const half = b.headDim / 2;
  let worst = 0;
  for (let r = keep; r < s.position; r++) {
    for (let h = 0; h < b.kvHeads; h++) {
      for (let i = 0; i < half; i++) {
        const a = -drop * b.ropeTheta ** ((-2 * i) / b.headDim);
        const src = (r + drop) * kd + h * b.headDim;
        const x1 = old[src + i]!;
        const x2 = old[src + half + i]!;
        const e1 = x1 * Math.cos(a) - x2 * Math.sin(a);
        const e2 = x2 * Math.cos(a) + x1 * Math.sin(a);
        const dst = r * kd + h * b.headDim;
        worst = Math.max(worst, Math.abs(s.k[l]![dst + i]! - e1), Math.abs(s.k[l]![dst + half + i]! - e2));
      }
    }
  }
  t.ok(worst < 1e-5, `kept keys equal R(−${drop})·k within ${worst.toExponential(2)}`);
  t.ok(bitsEqual(Array.from(s.v[l]!.subarray(keep * kd, s.position * kd)), Array.from(oldV.subarray((keep + drop) * kd, pos * kd))), 'values move unchanged');
  t.ok(bitsEqual(Array.from(s.k[l]!.subarray(0, keep * kd)), Array.from(old.subarray(0, keep * kd))), 'the prefix is untouched');
  t.throws(() => model.slot.backbone.stack.dropPositions(s, keep, s.position), /cannot drop/);
});

t.test('listen: a full segment takes no more, non-finite samples are silence, misuse is refused', async (t) => {
  const { conv } = open({ replySeconds: 1, segmentSeconds: 1, context: 512 }, 1);
  t.throws(() => conv.listen(new Float32Array(Conversation.INPUT_CHUNK + 1)), /at most 4096 samples/);
  const odd = new Float32Array(100).fill(0.1);
  odd[37] = Number.NaN;
  odd[38] = Number.POSITIVE_INFINITY;
  t.equal(conv.listen(odd), 100, 'all taken');
  t.equal(conv.nonFinite, 2, 'two non-finite samples counted');
  const chunk = new Float32Array(4000);
  let taken = 100;
  for (let i = 0; i < 5; i++) taken += conv.listen(chunk);
  t.equal(taken, 16000, 'a 1 s segment takes exactly 16000 samples');
  t.equal(conv.segmentRoom, 0);
  t.equal(conv.listen(chunk), 0, 'then nothing more');
  t.ok(conv.endSegment() > 0, 'and ends normally');
  t.ok(conv.reply({}).audioFrames > 0);
  t.throws(() => open({ context: 20 }), /context of 20 positions is too small/);
  t.throws(() => open({ layout: 'other' as 'planned' }), /layout must be/);
  t.throws(() => open({ kv: 'f8' as 'f16' }), /kv must be f32 or f16/);
  t.throws(() => open({ threads: 9 }), /threads must be an integer from 1 to 8/);
});

t.test('q4 weights (int8 activations) and two compute threads: the same reply bits as one thread', async (t) => {
  const q4 = scratchDir('voxslab-conv-q4-');
  await quantizeCheckpoint({ input: dir, output: q4, bits: 4, group: 64 });
  const audio = userAudio(16000, 1.5, 8);
  for (const [name, from] of [
    ['f32', dir],
    ['q4', q4],
  ] as const) {
    const runs = [1, 2].map((threads) => {
      const { conv } = open({ replySeconds: 2, context: 1024, threads }, 12, 16000, from);
      t.equal(computeThreads(), threads, `${name}: ${threads} compute thread(s)`);
      return { ...record(conv, audio), state: state(conv) };
    });
    open({ threads: 1 }, 1, 16000, from);
    const [a, b] = runs as [(typeof runs)[0], (typeof runs)[0]];
    t.ok(a.summary.audioFrames > 0, `${name}: ${a.summary.audioFrames} frames, ${a.summary.textTokens} text tokens`);
    for (const k of ['hidden', 'textLogits', 'audioLogits', 'bins', 'pcm'] as const) t.ok(bitsEqual(a[k], b[k]), `${name}: ${k} equal bit for bit`);
    t.same(a.events, b.events, `${name}: the same tokens and codes`);
    t.ok(bitsEqual(a.state, b.state), `${name}: the same conversation state`);
  }
  t.equal(computeThreads(), 1);
});

t.test('end of audio: codebook 0 = 2048 ends the audio, the frame becomes all 2048 and text resumes', async (t) => {
  // A checkpoint whose Depthformer always prefers code 2048 on codebook 0: slice 0 of
  // depth_linear gets a large bias on one channel j, codebook 0's norm keeps only j, and its
  // logits read channel j for code 2048 only.
  const eoa = scratchDir('voxslab-conv-eoa-');
  cpSync(dir, eoa, { recursive: true });
  const file = join(eoa, 'model.safetensors');
  const bytes = readFileSync(file);
  const header = readSafetensorsHeader(memorySource(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.length), file));
  const view = (name: string): Float32Array => {
    const e = header.tensors.get(name)!;
    return new Float32Array(bytes.buffer, bytes.byteOffset + e.begin, (e.end - e.begin) / 4);
  };
  const j = 5;
  view('depth_linear.bias')[j] = 1000;
  const norm = view('depth_embeddings.0.embedding_norm.weight');
  norm.fill(0);
  norm[j] = 1;
  for (const name of ['depth_embeddings.0.to_logits.weight', 'depth_embeddings.0.embedding.weight']) {
    const w = view(name);
    const dim = w.length / 2049;
    w.fill(0);
    w[2048 * dim + j] = 1;
  }
  writeFileSync(file, bytes);
  const { conv } = open({ replySeconds: 2, context: 1024, audio: { temperature: 0, topK: 1 } }, 1, 16000, eoa);
  say(conv, userAudio(16000, 1, 10));
  const events: (number | number[])[] = [];
  let samples = 0;
  const s = conv.reply({ text: (tk) => events.push(tk), audio: (c) => events.push(Array.from(c)), pcm: (_, n) => (samples += n) });
  const frames = events.filter((e): e is number[] => typeof e !== 'number');
  t.ok(frames.length > 0, `${frames.length} audio frames`);
  t.ok(
    frames.every((f) => f.every((c) => c === 2048)),
    'every frame is the end-of-audio frame, all 8 codes 2048',
  );
  t.ok(s.endOfAudio, 'the summary says so');
  t.equal(samples, 0, 'nothing is detokenized');
  // After each end-of-audio frame the next event is text.
  let resumed = 0;
  events.forEach((e, i) => {
    if (typeof e !== 'number' && i + 1 < events.length) {
      t.type(events[i + 1], 'number', `event ${i + 1} after end of audio is text`);
      resumed++;
    }
  });
  t.ok(resumed > 0, `text resumed ${resumed} times`);
});
