/**
 * `voxslab run`: one user segment per input WAV → the assistant's spoken (and text) reply.
 * Every conversation's memory is carved and sealed before the first sample is read; the report
 * records the manifest, per-stage times, allocation counts, text tokens and audio codes, and
 * `--dump` writes every stage's outputs as .npy files with a JSON index.
 */
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { BadInputError, UsageError } from '../memory/errors.js';
import { MemoryDomain } from '../memory/domain.js';
import { openFileSource, WavFileWriter } from '../io/files.js';
import { makeCheckpoint } from '../io/checkpoint.js';
import { encodeNpyFloat32, encodeNpyInt32 } from '../dsp/npy.js';
import { MAX_SAMPLE_RATE, MIN_SAMPLE_RATE, WavReader } from '../dsp/wav.js';
import { BUILTIN_CONFIGS } from '../model/config.js';
import { Conversation, SpeechModel, STAGES, type ReplySink, type ReplySummary } from '../model/conversation.js';

export interface RunRequest {
  model: string;
  inputs: string[];
  outputs: string[];
  rate?: string | undefined;
  report?: string | undefined;
  dump?: string | undefined;
  seed?: string | undefined;
  context?: string | undefined;
  segment?: string | undefined;
  reply?: string | undefined;
  threads?: string | undefined;
  kv?: string | undefined;
}

function wholeNumber(flag: string, text: string | undefined, fallback: number, lo: number, hi: number): number {
  if (text === undefined) return fallback;
  if (!/^\d+$/.test(text) || Number(text) < lo || Number(text) > hi) throw new UsageError(`${flag} must be a whole number from ${lo} to ${hi}, got '${text}'`);
  return Number(text);
}

function seconds(flag: string, text: string | undefined, fallback: number, hi: number): number {
  if (text === undefined) return fallback;
  const v = Number(text);
  if (!/^\d+(\.\d+)?$/.test(text) || !(v > 0) || v > hi) throw new UsageError(`${flag} must be a number of seconds above 0 and at most ${hi}, got '${text}'`);
  return v;
}

/** Where built-in synthetic checkpoints are generated on first use. */
export function checkpointCache(): string {
  return process.env.VOXSLAB_CACHE ?? join(homedir(), '.cache', 'voxslab');
}

/** A checkpoint folder, or a built-in configuration name (generated once with seed 1, f32). */
export function resolveModel(model: string, log: (line: string) => void): string {
  if (existsSync(model) || BUILTIN_CONFIGS[model] === undefined) return model;
  const dir = join(checkpointCache(), `${model}-seed1-f32`);
  if (existsSync(join(dir, 'config.json'))) return dir;
  mkdirSync(checkpointCache(), { recursive: true });
  const tmp = mkdtempSync(join(checkpointCache(), `.${model}-`));
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

/** Copies of every stage's outputs for `--dump`, written as .npy with a JSON index. */
class Dump {
  readonly #parts = new Map<string, { chunks: (Float32Array | Int32Array)[]; row: number[]; dtype: 'float32' | 'int32'; what: string }>();

  add(name: string, what: string, data: Float32Array | Int32Array, row: number[]): void {
    let p = this.#parts.get(name);
    if (p === undefined) {
      p = { chunks: [], row, dtype: data instanceof Int32Array ? 'int32' : 'float32', what };
      this.#parts.set(name, p);
    }
    p.chunks.push(data.slice());
  }

  write(dir: string, prefix: string): { file: string; stage: string; dtype: string; shape: number[] }[] {
    mkdirSync(dir, { recursive: true });
    const index: { file: string; stage: string; dtype: string; shape: number[] }[] = [];
    for (const [name, p] of this.#parts) {
      const total = p.chunks.reduce((a, c) => a + c.length, 0);
      const per = p.row.reduce((a, b) => a * b, 1);
      const data = p.dtype === 'int32' ? new Int32Array(total) : new Float32Array(total);
      let at = 0;
      for (const c of p.chunks) {
        data.set(c, at);
        at += c.length;
      }
      const shape = [total / per, ...p.row];
      const file = `${prefix}${name}.npy`;
      writeFileSync(join(dir, file), data instanceof Int32Array ? encodeNpyInt32(data, shape) : encodeNpyFloat32(data, shape));
      index.push({ file, stage: p.what, dtype: p.dtype, shape });
    }
    return index;
  }
}

interface Job {
  input: string;
  output: string;
  reader: WavReader;
  close(): void;
  conversation?: Conversation;
}

export function runCommand(r: RunRequest, log: (line: string) => void = (l) => process.stderr.write(`${l}\n`)): string {
  if (r.inputs.length === 0 || r.inputs.length !== r.outputs.length) throw new UsageError('run: give --model DIR and one --out B.wav for every --in A.wav');
  const rate = wholeNumber('--rate', r.rate, 48000, MIN_SAMPLE_RATE, MAX_SAMPLE_RATE);
  const seed = wholeNumber('--seed', r.seed, 1, 0, 0xffffffff);
  const segment = seconds('--segment', r.segment, 30, 600);
  const reply = seconds('--reply', r.reply, 30, 3600);
  const threads = wholeNumber('--threads', r.threads, 1, 1, 8);
  if (r.kv !== undefined && r.kv !== 'f32' && r.kv !== 'f16') throw new UsageError(`--kv must be f32 or f16, got '${r.kv}'`);
  const kv = r.kv === 'f16' ? ('f16' as const) : ('f32' as const);
  const context = r.context === undefined ? undefined : wholeNumber('--context', r.context, 0, 1, 1 << 30);
  // Inputs are checked before anything is loaded.
  const jobs: Job[] = [];
  try {
    for (const [i, input] of r.inputs.entries()) {
      const src = openFileSource(input);
      try {
        const reader = new WavReader(src, Conversation.INPUT_CHUNK);
        const secs = reader.info.frames / reader.info.sampleRate;
        if (secs > segment) throw new BadInputError({ file: input, field: 'data' }, `${secs.toFixed(2)} s of audio; the longest user segment is ${segment} s (--segment)`);
        jobs.push({ input, output: r.outputs[i] as string, reader, close: () => src.close() });
      } catch (error) {
        src.close();
        throw error;
      }
    }
    const dir = resolveModel(r.model, log);
    const t0 = performance.now();
    const domain = MemoryDomain.create();
    const options: Parameters<typeof SpeechModel.load>[2] = { segmentSeconds: segment, replySeconds: reply, outputRate: rate, threads, kv };
    if (context !== undefined) options.context = context;
    const model = SpeechModel.load(dir, domain, options);
    jobs.forEach((j, i) => {
      j.conversation = model.conversation({ seed: seed + i, inputRate: j.reader.info.sampleRate });
    });
    model.ready();
    for (const j of jobs) j.conversation!.ready();
    const loadMs = performance.now() - t0;
    const atReadiness = domain.snapshot().allocations;
    const lines: string[] = [];
    const results: Record<string, unknown>[] = [];
    const index: { conversation: number; file: string; stage: string; dtype: string; shape: number[] }[] = [];
    const c = model.config;
    for (const [i, j] of jobs.entries()) {
      const conv = j.conversation!;
      const dump = r.dump === undefined ? null : new Dump();
      const chunk = new Float32Array(Conversation.INPUT_CHUNK);
      const started = performance.now();
      for (;;) {
        const n = j.reader.readMono(chunk, chunk.length);
        if (n === 0) break;
        if (conv.listen(chunk, n) < n) throw new BadInputError({ file: j.input, field: 'data' }, `longer than the longest user segment of ${segment} s (--segment)`);
      }
      const frames = conv.endSegment(
        dump === null
          ? {}
          : {
              mel: (rows, T) => dump.add('mel', 'log-mel rows before normalisation [T][128]', rows.subarray(0, T * c.encoder.featIn), [c.encoder.featIn]),
              encoded: (enc, adapter, n) => {
                dump.add('encoder', 'Conformer output [frames][d]', enc.subarray(0, n * c.encoder.d), [c.encoder.d]);
                dump.add('adapter', 'adapter output (backbone input rows) [frames][hidden]', adapter.subarray(0, n * c.backbone.hidden), [c.backbone.hidden]);
              },
            },
      );
      const writer = new WavFileWriter(j.output, { sampleRate: rate, channels: 1, format: 'float32', extensible: false });
      const tokens: number[] = [];
      const codes: number[][] = [];
      const D = c.backbone.hidden;
      const sink: ReplySink = {
        text: (t) => tokens.push(t),
        audio: (f) => codes.push(Array.from(f)),
        pcm: (p, n) => {
          if (n > 0) writer.write(p.subarray(0, n));
          dump?.add('pcm', `reply samples at ${rate} Hz`, p.subarray(0, n), []);
        },
      };
      if (dump !== null) {
        sink.hidden = (h) => dump.add('hidden', 'backbone hidden state of every generated position [steps][hidden]', h.subarray(0, D), [D]);
        sink.textLogits = (l) => dump.add('text_logits', 'text logits of every text position [steps][vocab]', l, [c.backbone.vocab]);
        sink.audioLogits = (l) => dump.add('audio_logits', 'Depthformer logits of every audio frame [frames][codebooks][codes]', l, [c.audio.codebooks, c.audio.codes]);
        sink.bins = (b) => dump.add('bins', 'detokenizer log-magnitudes then phases [positions][1282]', b, [c.detokenizer.outBins]);
      }
      let summary: ReplySummary;
      try {
        summary = conv.reply(sink);
      } finally {
        writer.close();
      }
      const wallMs = performance.now() - started;
      const text = model.tokenizer.decode(tokens);
      if (dump !== null) {
        dump.add('text_tokens', 'emitted text token ids', Int32Array.from(tokens), []);
        dump.add('codes', 'emitted audio frames [frames][codebooks] (2048 = end of audio)', Int32Array.from(codes.flat()), [c.audio.codebooks]);
        for (const e of dump.write(r.dump as string, `c${i}_`)) index.push({ conversation: i, ...e });
      }
      const timings: Record<string, { ms: number; count: number }> = {};
      STAGES.forEach((s, k) => {
        timings[s] = { ms: Math.round((conv.stageMs[k] as number) * 1000) / 1000, count: conv.stageCount[k] as number };
      });
      const audioSeconds = summary.samples / rate;
      results.push({
        input: { file: j.input, sampleRate: j.reader.info.sampleRate, channels: j.reader.info.channels, seconds: j.reader.info.frames / j.reader.info.sampleRate },
        output: { file: j.output, sampleRate: rate, samples: summary.samples, seconds: audioSeconds, format: 'float32' },
        seed: seed + i,
        encoderFrames: frames,
        text,
        textTokens: tokens,
        audioFrames: summary.audioFrames,
        codes,
        stop: summary.stop,
        endOfAudio: summary.endOfAudio,
        positions: conv.backbone.position,
        compactions: conv.compactions,
        droppedPositions: conv.dropped,
        timings,
        wallMs: Math.round(wallMs * 1000) / 1000,
        realTimeFactor: audioSeconds > 0 ? wallMs / 1000 / audioSeconds : null,
      });
      lines.push(`${basename(j.input)} → ${j.output}: "${text}"`);
      log(`${j.output}: ${audioSeconds.toFixed(2)} s at ${rate} Hz, ${summary.audioFrames} audio frames, ${tokens.length} text tokens, stop: ${summary.stop}, ${(wallMs / 1000).toFixed(2)} s wall`);
    }
    const atEnd = domain.snapshot().allocations;
    if (r.dump !== undefined) writeFileSync(join(r.dump, 'index.json'), `${JSON.stringify({ schema: 'voxslab.dump/v1', model: dir, files: index }, null, 2)}\n`);
    if (r.report !== undefined) {
      const s = model.slot;
      const plans = {
        conformer: s.encoder.region.summary,
        backbone: s.backbone.region.summary,
        depthformer: s.depthformer.region.summary,
        detokenizer: s.detokenizer.work.summary,
      };
      const report = {
        schema: 'voxslab.run/v1',
        model: { dir: resolve(dir), config: c.name, weightBytes: model.report.weightBytes, options: model.options },
        loadMs: Math.round(loadMs * 1000) / 1000,
        conversations: results,
        allocations: {
          atReadiness,
          atEnd,
          afterReadinessAttempts: atEnd.afterReadiness.attempts,
        },
        manifest: domain.manifest({ plans }),
      };
      mkdirSync(dirname(resolve(r.report)), { recursive: true });
      writeFileSync(r.report, `${JSON.stringify(report, null, 2)}\n`);
    }
    return lines.join('\n');
  } finally {
    for (const j of jobs) j.close();
  }
}
