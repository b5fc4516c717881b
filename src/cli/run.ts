/**
 * `voxslab run`: one user segment per input WAV → the assistant's spoken (and text) reply.
 * By default every conversation runs through the five-stage pipeline of pinned workers, all
 * at once; `--engine single` runs them one after the other on this thread (the reference the
 * pipeline must equal byte for byte, and the only engine with `--dump`'s inspection taps).
 * Every conversation's memory is carved and sealed before the first sample is read; the report
 * records the manifest, per-stage times, allocation counts, text tokens and audio codes, and
 * `--dump` writes every stage's outputs as .npy files with a JSON index.
 */
import { rmSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { BadInputError, UsageError } from '../errors.js';
import { MemoryDomain } from '../memory/domain.js';
import { checkFolderWritable, checkOutputs, checkWritable, commitStaged, openFileSource, stagedFolder, stagingName, WavFileWriter } from '../io/files.js';
import { resolveModel } from '../io/checkpoint.js';
import { computeThreadsShortfall } from '../model/blocks/kernels.js';
import { encodeNpyFloat32, encodeNpyInt32 } from '../dsp/npy.js';
import { WavReader } from '../dsp/wav.js';
import { flagValue, OPTIONS, parseFlag } from '../options.js';
import { Conversation, SpeechModel, type ReplySink, type ReplySummary } from '../core/conversation.js';
import { computeCpuMs, CLOCKS, threadCpuMs } from '../core/clock.js';
import { PIPELINE } from '../runtime/stages/index.js';
import type { Pipeline, PinMap, StageThreads } from '../runtime/coordinator.js';
import { ledgerOwners } from '../runtime/carve.js';
import type { StageName } from '../runtime/protocol.js';
import { type Job, ms, turnResult, writeReport } from './run-report.js';
import { runPipeline } from './run-pipeline.js';

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
  engine?: string | undefined;
  pin?: string | undefined;
  stageThreads?: string | undefined;
  slots?: string | undefined;
  realtime?: boolean | undefined;
  /** For tests of the built artifact: a domain to run in, and the pipeline's test hooks. */
  hooks?: {
    domain?: MemoryDomain;
    trapAllocations?: boolean;
    exitAfterRecords?: Partial<Record<StageName, number>>;
    gateReplies?: number;
    turnEndPauseMs?: number;
    firstFramePauseMs?: number;
    lookaheadMs?: number;
  };
}

/**
 * `stage=value,…` of a per-stage flag: each part must match `value` after `stage=` and name a
 * stage; `read` turns the value's text into the map's entry.
 */
function parseStageMap<T>(text: string, flag: string, form: string, value: RegExp, read: (v: string) => T): Partial<Record<StageName, T>> {
  const map: Partial<Record<StageName, T>> = {};
  const part = new RegExp(`^([a-z]+)=(${value.source})$`);
  for (const p of text.split(',')) {
    const m = part.exec(p);
    if (m === null || !PIPELINE.names.includes(m[1]!)) {
      throw new UsageError(`--${flag} takes ${form} with stages ${PIPELINE.names.join(', ')}; got '${p}'`);
    }
    map[m[1] as StageName] = read(m[2]!);
  }
  return map;
}

/** `--pin none` or `stage=cpu[+cpu],…` (unnamed stages keep the default placement). */
export function parsePin(text: string | undefined): PinMap | 'none' | undefined {
  if (text === undefined) return undefined;
  if (text === 'none') return 'none';
  return parseStageMap(text, 'pin', "'none' or stage=cpu[+cpu],…", /\d+(?:\+\d+)*/, (v) => v.split('+').map(Number));
}

/** `--stage-threads stage=n,…`: compute threads of the named stages (each as --threads). */
export function parseStageThreads(text: string | undefined): StageThreads | undefined {
  if (text === undefined) return undefined;
  return parseStageMap(text, 'stage-threads', 'stage=n,…', /\d+/, (v) => flagValue<number>('threads', v));
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

  /** Writes the parts into `dir`, an existing folder (the run's staged --dump folder). */
  write(dir: string, prefix: string): { file: string; stage: string; dtype: string; shape: number[] }[] {
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

export async function runCommand(r: RunRequest, log: (line: string) => void = (l) => process.stderr.write(`${l}\n`)): Promise<string> {
  if (r.inputs.length === 0 || r.inputs.length !== r.outputs.length) throw new UsageError('run: give --model DIR and one --out B.wav for every --in A.wav');
  checkOutputs(
    r.inputs.map((f) => ['--in', f] as [string, string]),
    [
      ...r.outputs.map((f) => ['--out', f] as [string, string]),
      ...(r.report === undefined ? [] : [['--report', r.report] as [string, string]]),
      ...(r.dump === undefined ? [] : [['--dump', r.dump] as [string, string]]),
    ],
  );
  for (const f of r.outputs) checkWritable(f, '--out');
  if (r.report !== undefined) checkWritable(r.report, '--report');
  if (r.dump !== undefined) checkFolderWritable(r.dump, '--dump');
  const rate = flagValue<number>('outputRate', r.rate);
  const seed = flagValue<number>('seed', r.seed);
  const segment = flagValue<number>('segmentSeconds', r.segment);
  const reply = flagValue<number>('replySeconds', r.reply);
  const threads = flagValue<number>('threads', r.threads);
  const kv = flagValue<'f32' | 'f16'>('kv', r.kv);
  // The context's range depends on the checkpoint: checked again when the model is loaded.
  const context = parseFlag('context', r.context) as number | undefined;
  const engine = r.engine === undefined && r.dump !== undefined ? 'single' : flagValue<'pipeline' | 'single'>('engine', r.engine);
  if (engine === 'pipeline' && r.dump !== undefined) throw new UsageError('--dump needs --engine single (its inspection taps run on one thread)');
  if (engine === 'single' && r.realtime === true) throw new UsageError('--realtime needs the pipeline engine');
  const pin = parsePin(r.pin);
  const stageThreads = parseStageThreads(r.stageThreads);
  if (engine === 'single' && stageThreads !== undefined) throw new UsageError('--stage-threads needs the pipeline engine');
  const slots = flagValue<number>('slots', r.slots);
  // Inputs are checked before anything is loaded.
  const jobs: Job[] = [];
  try {
    for (const [i, input] of r.inputs.entries()) {
      const src = openFileSource(input);
      try {
        const reader = new WavReader(src, Conversation.INPUT_CHUNK);
        const secs = reader.info.frames / reader.info.sampleRate;
        if (secs > segment)
          throw new BadInputError({ file: input, field: 'data' }, `${secs.toFixed(2)} s of audio; the longest user segment is ${segment} s (--segment)`);
        const output = r.outputs[i] as string;
        jobs.push({ input, output, staging: stagingName(output), reader, close: () => src.close() });
      } catch (error) {
        src.close();
        throw error;
      }
    }
    const dir = resolveModel(r.model, log);
    const t0 = performance.now();
    // One conversation per input: the pipeline's tables are sized for them.
    const most = jobs.length;
    if (most > OPTIONS.maxConversations.max) throw new UsageError(`run: ${most} inputs; at most ${OPTIONS.maxConversations.max} conversations run at once`);
    const domain = r.hooks?.domain ?? MemoryDomain.create({ ownerCapacity: ledgerOwners(slots, most) });
    const options: Parameters<typeof SpeechModel.load>[2] = { segmentSeconds: segment, replySeconds: reply, outputRate: rate, threads, kv };
    if (context !== undefined) options.context = context;
    if (engine === 'pipeline') {
      const po: Parameters<typeof Pipeline.start>[2] = { ...options, slots, maxConversations: most };
      if (pin !== undefined) po.pin = pin;
      if (stageThreads !== undefined) po.stageThreads = stageThreads;
      if (r.hooks?.trapAllocations !== undefined) po.trapAllocations = r.hooks.trapAllocations;
      if (r.hooks?.exitAfterRecords !== undefined) po.exitAfterRecords = r.hooks.exitAfterRecords;
      if (r.hooks?.gateReplies !== undefined) po.gateReplies = r.hooks.gateReplies;
      if (r.hooks?.turnEndPauseMs !== undefined) po.turnEndPauseMs = r.hooks.turnEndPauseMs;
      if (r.hooks?.firstFramePauseMs !== undefined) po.firstFramePauseMs = r.hooks.firstFramePauseMs;
      if (r.hooks?.lookaheadMs !== undefined) po.lookaheadMs = r.hooks.lookaheadMs;
      const text = await runPipeline({ dir, domain, options: po, jobs, rate, seed, segment, report: r.report, realtime: r.realtime === true, t0, log });
      for (const j of jobs) commitStaged(j.staging, j.output, '--out');
      return text;
    }
    const model = SpeechModel.load(dir, domain, options);
    const shortfall = computeThreadsShortfall();
    if (shortfall !== null) log(`--threads: ${shortfall}`);
    jobs.forEach((j, i) => {
      j.conversation = model.conversation({ seed: seed + i, inputRate: j.reader.info.sampleRate });
    });
    model.ready();
    for (const j of jobs) j.conversation!.ready();
    const loadMs = performance.now() - t0;
    const atReadiness = domain.snapshot().allocations;
    const lines: string[] = [];
    const results: Record<string, unknown>[] = [];
    const dumps: Dump[] = [];
    const c = model.config;
    for (const [i, j] of jobs.entries()) {
      const conv = j.conversation!;
      const dump = r.dump === undefined ? null : new Dump();
      const chunk = new Float32Array(Conversation.INPUT_CHUNK);
      const started = performance.now();
      const cpuAtStart = threadCpuMs();
      const computeAtStart = computeCpuMs();
      for (;;) {
        const n = j.reader.readMono(chunk, chunk.length);
        if (n === 0) break;
        if (conv.listen(chunk, n) < n)
          throw new BadInputError({ file: j.input, field: 'data' }, `longer than the longest user segment of ${segment} s (--segment)`);
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
      const writer = new WavFileWriter(j.staging, { sampleRate: rate, channels: 1, format: 'float32', extensible: false }, { shown: j.output });
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
        sink.audioLogits = (l) =>
          dump.add('audio_logits', 'Depthformer logits of every audio frame [frames][codebooks][codes]', l, [c.audio.codebooks, c.audio.codes]);
        sink.bins = (b) => dump.add('bins', 'detokenizer log-magnitudes then phases [positions][1282]', b, [c.detokenizer.outBins]);
      }
      let summary: ReplySummary;
      try {
        summary = conv.reply(sink);
      } finally {
        writer.close();
      }
      const wallMs = performance.now() - started;
      // This thread's CPU over the turn, and the part in the model's timed compute sections.
      const cpu = cpuAtStart < 0 ? null : { ms: ms(threadCpuMs() - cpuAtStart), computeMs: ms(computeCpuMs() - computeAtStart) };
      const text = model.tokenizer.decode(tokens);
      if (dump !== null) {
        dump.add('text_tokens', 'emitted text token ids', Int32Array.from(tokens), []);
        dump.add('codes', 'emitted audio frames [frames][codebooks] (2048 = end of audio)', Int32Array.from(codes.flat()), [c.audio.codebooks]);
        dumps.push(dump);
      }
      const timings: Record<string, { ms: number; count: number }> = {};
      CLOCKS.forEach((s, k) => {
        timings[s] = { ms: ms(conv.stageMs[k] as number), count: conv.stageCount[k] as number };
      });
      const audioSeconds = summary.samples / rate;
      results.push(
        turnResult(
          {
            job: j,
            rate,
            seed: seed + i,
            encoderFrames: frames,
            text,
            tokens,
            codes,
            audioFrames: summary.audioFrames,
            samples: summary.samples,
            stop: summary.stop,
            endOfAudio: summary.endOfAudio,
            positions: conv.backbone.position,
            compactions: conv.compactions,
            droppedPositions: conv.dropped,
            timings,
            wallMs,
          },
          { cpu },
        ),
      );
      lines.push(`${basename(j.input)} → ${j.output}: ${JSON.stringify(text)}`);
      log(
        `${j.output}: ${audioSeconds.toFixed(2)} s at ${rate} Hz, ${summary.audioFrames} audio frames, ${tokens.length} text tokens, stop: ` +
          `${summary.stop}, ${(wallMs / 1000).toFixed(2)} s wall`,
      );
    }
    const atEnd = domain.snapshot().allocations;
    if (r.dump !== undefined) {
      // The whole folder appears at once, or nothing of it does.
      await stagedFolder(r.dump, '--dump', (tmp) => {
        const files = dumps.flatMap((d, i) => d.write(tmp, `c${i}_`).map((e) => ({ conversation: i, ...e })));
        writeFileSync(join(tmp, 'index.json'), `${JSON.stringify({ schema: 'voxslab.dump/v1', model: dir, files }, null, 2)}\n`);
      });
    }
    if (r.report !== undefined) {
      const s = model.slot;
      const plans = {
        conformer: s.encoder.region.summary,
        backbone: s.backbone.region.summary,
        depthformer: s.depthformer.region.summary,
        detokenizer: s.detokenizer.work.summary,
      };
      writeReport(r.report, {
        dir,
        config: c.name,
        weightBytes: model.report.weightBytes,
        options: model.options,
        loadMs,
        results,
        atReadiness,
        atEnd,
        manifest: domain.manifest({ plans }),
      });
    }
    for (const j of jobs) commitStaged(j.staging, j.output, '--out');
    return lines.join('\n');
  } finally {
    for (const j of jobs) {
      j.close();
      // After a failure nothing partial is left behind (after success the staging names are gone).
      rmSync(j.staging, { force: true });
    }
  }
}
