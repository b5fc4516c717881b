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
import { basename, join, resolve } from 'node:path';
import { BadInputError, UsageError } from '../errors.js';
import { MemoryDomain } from '../memory/domain.js';
import {
  checkFolderWritable,
  checkOutputs,
  checkWritable,
  commitStaged,
  openFileSource,
  stagedFolder,
  stagingName,
  WavFileWriter,
  writeWhole,
} from '../io/files.js';
import { resolveModel } from '../io/checkpoint.js';
import { computeThreadsShortfall } from '../model/blocks/kernels.js';
import { encodeNpyFloat32, encodeNpyInt32 } from '../dsp/npy.js';
import { WavReader } from '../dsp/wav.js';
import { flagValue, parseFlag } from '../options.js';
import { Conversation, SpeechModel, type ReplySink, type ReplySummary } from '../core/conversation.js';
import { computeCpuMs, CLOCKS, threadCpuMs } from '../core/clock.js';
import { PIPELINE } from '../runtime/stages/index.js';
import { ConversationPort, OUT_NONE, OUT_REPLY_END } from '../runtime/port.js';
import { Pipeline, type PinMap, type PipelineConversation, type StageThreads } from '../runtime/coordinator.js';
import { BELL_MAIN, readTurnFields, type StageName } from '../runtime/protocol.js';

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
  };
}

/** A stage's compute helpers in the run line: ` (helpers @1, @0+1)`, or nothing without any. */
function helperText(helpers: number[][]): string {
  return helpers.length === 0 ? '' : ` (helpers ${helpers.map((h) => `@${h.join('+')}`).join(', ')})`;
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

interface Job {
  input: string;
  output: string;
  /** Where the reply is written until the run succeeds (then renamed to `output`). */
  staging: string;
  reader: WavReader;
  close(): void;
  conversation?: Conversation;
}

/** Milliseconds kept to a microsecond in reports. */
const ms = (x: number): number => Math.round(x * 1000) / 1000;
/** The longest the pipeline loop blocks before it lets the event loop in (a worker's failure is seen there). */
const YIELD_MS = 100;

/** What both engines report of one conversation's turn. */
interface TurnRecord {
  job: Job;
  rate: number;
  seed: number;
  encoderFrames: number;
  text: string;
  tokens: number[];
  codes: number[][];
  audioFrames: number;
  samples: number;
  stop: string;
  endOfAudio: boolean;
  positions: number;
  compactions: number;
  droppedPositions: number;
  timings: Record<string, { ms: number; count: number }>;
  wallMs: number;
}

function turnResult(t: TurnRecord, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const info = t.job.reader.info;
  const audioSeconds = t.samples / t.rate;
  return {
    input: { file: t.job.input, sampleRate: info.sampleRate, channels: info.channels, seconds: info.frames / info.sampleRate },
    output: { file: t.job.output, sampleRate: t.rate, samples: t.samples, seconds: audioSeconds, format: 'float32' },
    seed: t.seed,
    encoderFrames: t.encoderFrames,
    text: t.text,
    textTokens: t.tokens,
    audioFrames: t.audioFrames,
    codes: t.codes,
    stop: t.stop,
    endOfAudio: t.endOfAudio,
    positions: t.positions,
    compactions: t.compactions,
    droppedPositions: t.droppedPositions,
    timings: t.timings,
    ...extra,
    wallMs: ms(t.wallMs),
    realTimeFactor: audioSeconds > 0 ? t.wallMs / 1000 / audioSeconds : null,
  };
}

/** The run report (`voxslab.run/v1`) both engines write. */
function writeReport(
  file: string,
  r: {
    dir: string;
    config: string;
    weightBytes: number;
    options: unknown;
    loadMs: number;
    results: Record<string, unknown>[];
    atReadiness: unknown;
    atEnd: { afterReadiness: { attempts: number } };
    manifest: unknown;
  },
  extra: Record<string, unknown> = {},
): void {
  const report = {
    schema: 'voxslab.run/v1',
    model: { dir: resolve(r.dir), config: r.config, weightBytes: r.weightBytes, options: r.options },
    loadMs: ms(r.loadMs),
    conversations: r.results,
    ...extra,
    allocations: { atReadiness: r.atReadiness, atEnd: r.atEnd, afterReadinessAttempts: r.atEnd.afterReadiness.attempts },
    manifest: r.manifest,
  };
  writeWhole(file, `${JSON.stringify(report, null, 2)}\n`, '--report');
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
    const domain = r.hooks?.domain ?? MemoryDomain.create();
    const options: Parameters<typeof SpeechModel.load>[2] = { segmentSeconds: segment, replySeconds: reply, outputRate: rate, threads, kv };
    if (context !== undefined) options.context = context;
    if (engine === 'pipeline') {
      const po: Parameters<typeof Pipeline.start>[2] = { ...options, slots };
      if (pin !== undefined) po.pin = pin;
      if (stageThreads !== undefined) po.stageThreads = stageThreads;
      if (r.hooks?.trapAllocations !== undefined) po.trapAllocations = r.hooks.trapAllocations;
      if (r.hooks?.exitAfterRecords !== undefined) po.exitAfterRecords = r.hooks.exitAfterRecords;
      if (r.hooks?.gateReplies !== undefined) po.gateReplies = r.hooks.gateReplies;
      if (r.hooks?.turnEndPauseMs !== undefined) po.turnEndPauseMs = r.hooks.turnEndPauseMs;
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

interface PipelineRun {
  dir: string;
  domain: MemoryDomain;
  options: Parameters<typeof Pipeline.start>[2];
  jobs: Job[];
  rate: number;
  seed: number;
  segment: number;
  report: string | undefined;
  realtime: boolean;
  t0: number;
  log: (line: string) => void;
}

/** One conversation's file ends as the main thread drives them. */
interface Flow {
  job: Job;
  conv: PipelineConversation;
  port: ConversationPort;
  chunk: Float32Array;
  pending: number; // samples read, not yet in the ring
  fed: number; // samples in the ring
  eof: boolean;
  ended: boolean; // end of segment sent
  endAt: number; // when it was sent (ms)
  firstAudioAt: number; // first reply samples received (ms), -1 = none yet
  writer: WavFileWriter | null;
  tokens: number[];
  /** Every frame's codes, one after the other (kept for --report only). */
  codes: number[];
  samples: number;
  done: boolean;
  arrivals: number[]; // when each block of reply samples reached this thread (ms)
  lateMs: number; // the longest a player started at the first sample would have starved
}

/** Flat codes as one row of `per` codes per frame. */
function frames(flat: readonly number[], per: number): number[][] {
  const out: number[][] = [];
  for (let i = 0; i < flat.length; i += per) out.push(flat.slice(i, i + per));
  return out;
}

/** p50, p99 and max of the gaps between consecutive arrivals, ms. */
function gaps(times: number[]): { p50: number; p99: number; max: number } | null {
  if (times.length < 2) return null;
  const d = times
    .slice(1)
    .map((t, i) => t - times[i]!)
    .sort((a, b) => a - b);
  const at = (q: number) => ms(d[Math.min(d.length - 1, Math.floor(q * d.length))]!);
  return { p50: at(0.5), p99: at(0.99), max: ms(d[d.length - 1]!) };
}

async function runPipeline(p: PipelineRun): Promise<string> {
  const pipeline = await Pipeline.start(p.dir, p.domain, p.options);
  try {
    const flows: Flow[] = [];
    for (const [i, job] of p.jobs.entries()) {
      const conv = await pipeline.open({ seed: p.seed + i, inputRate: job.reader.info.sampleRate });
      const tokens: number[] = [];
      const codes: number[] = [];
      const port = new ConversationPort(pipeline, conv, {
        text: (token) => tokens.push(token),
        // Flat and only when reported: what the main thread keeps per frame bounds a long reply's memory.
        frame: (frame) => {
          if (p.report !== undefined) for (const code of frame) codes.push(code);
        },
      });
      flows.push({
        job,
        conv,
        port,
        chunk: new Float32Array(conv.chunk),
        pending: 0,
        fed: 0,
        eof: false,
        ended: false,
        endAt: 0,
        firstAudioAt: -1,
        writer: null,
        tokens,
        codes,
        samples: 0,
        done: false,
        arrivals: [],
        lateMs: 0,
      });
    }
    await pipeline.ready();
    const loadMs = performance.now() - p.t0;
    const atReadiness = p.domain.snapshot().allocations;
    const c = pipeline.config;
    const pcm = new Float32Array(Math.max(...flows.map((f) => f.conv.output.maxPayload)));
    for (const f of flows)
      f.writer = new WavFileWriter(f.job.staging, { sampleRate: p.rate, channels: 1, format: 'float32', extensible: false }, { shown: f.job.output });
    const started = performance.now();
    const mainCpuAtStart = threadCpuMs();
    let mainSleepCpuMs = 0;
    let yielded = performance.now();
    try {
      for (;;) {
        if (pipeline.failure !== null) throw pipeline.failure;
        const seen = pipeline.bells.read(BELL_MAIN);
        let progress = false;
        let open = 0;
        let nextDue = Number.POSITIVE_INFINITY;
        for (const f of flows) {
          const conv = f.conv;
          const now = performance.now() - started;
          // Feed the input (at device pace with --realtime).
          while (!f.ended) {
            if (f.pending === 0 && !f.eof) {
              if (p.realtime) {
                const due = (1000 * f.fed) / conv.inputRate;
                if (due > now) {
                  nextDue = Math.min(nextDue, due - now);
                  break;
                }
              }
              f.pending = f.job.reader.readMono(f.chunk, f.chunk.length);
              if (f.pending === 0) f.eof = true;
            }
            if (f.pending > 0) {
              if (!f.port.writePcm(f.chunk, 0, f.pending)) break;
              f.fed += f.pending;
              f.pending = 0;
            } else if (f.eof) {
              if (p.realtime && (1000 * f.fed) / conv.inputRate > now) {
                nextDue = Math.min(nextDue, (1000 * f.fed) / conv.inputRate - now);
                break;
              }
              if (!f.port.endSegment()) break;
              f.ended = true;
              f.endAt = performance.now();
            }
            progress = true;
          }
          if (f.port.events()) progress = true;
          // Reply samples.
          for (let n = f.port.readOutput(pcm); n !== OUT_NONE; n = f.port.readOutput(pcm)) {
            progress = true;
            if (n === OUT_REPLY_END) {
              f.port.endReply();
              f.done = true;
            }
            if (n <= 0) continue;
            const now = performance.now();
            if (f.firstAudioAt < 0) f.firstAudioAt = now;
            f.arrivals.push(now);
            // A player that began at the first sample has played this much by now.
            f.lateMs = Math.max(f.lateMs, now - f.firstAudioAt - (1000 * f.samples) / p.rate);
            f.writer!.write(pcm.subarray(0, n));
            f.samples += n;
          }
          if (!f.done) open++;
        }
        if (open === 0) break;
        if (!progress) {
          // This thread runs nothing but this loop, so it blocks: a blocking wait costs it less per
          // wake-up than an asynchronous one. Records, room and a worker's failure all ring it, but a
          // failure is noticed on the event loop, which it lets in at least every YIELD_MS.
          const before = threadCpuMs();
          if (performance.now() - yielded >= YIELD_MS) {
            await new Promise<void>((resolve) => setImmediate(resolve));
            yielded = performance.now();
          }
          if (pipeline.failure === null) pipeline.block(seen, Math.min(YIELD_MS, Math.max(1, nextDue)));
          mainSleepCpuMs += threadCpuMs() - before;
        }
      }
    } finally {
      for (const f of flows) f.writer?.close();
    }
    const wallMs = performance.now() - started;
    // The main thread's CPU while it fed the input and took the reply: ring copies and WAV I/O.
    const mainCpuMs = mainCpuAtStart < 0 ? -1 : ms(threadCpuMs() - mainCpuAtStart);
    mainSleepCpuMs = mainCpuAtStart < 0 ? -1 : ms(mainSleepCpuMs);
    const stats = await pipeline.stats();
    const atEnd = p.domain.snapshot().allocations;
    const lines: string[] = [];
    const results: Record<string, unknown>[] = [];
    for (const [i, f] of flows.entries()) {
      const s = f.port.summary;
      const text = pipeline.tokenizer.decode(f.tokens);
      const timings: Record<string, { ms: number; count: number }> = {};
      for (const name of CLOCKS) timings[name] = { ms: 0, count: 0 };
      for (const st of stats) {
        for (const [name, t] of Object.entries(st.clocks[i] ?? {})) {
          const acc = timings[name]!;
          acc.ms = ms(acc.ms + t.ms);
          acc.count += t.count;
        }
      }
      const audioSeconds = f.samples / p.rate;
      const tf = readTurnFields(s);
      const stop = tf.stop;
      const turn: TurnRecord = {
        job: f.job,
        rate: p.rate,
        seed: p.seed + i,
        encoderFrames: tf.userFrames,
        text,
        tokens: f.tokens,
        codes: frames(f.codes, c.audio.codebooks),
        audioFrames: tf.frames,
        samples: f.samples,
        stop,
        endOfAudio: tf.endOfAudio,
        positions: tf.positions,
        compactions: tf.compactions,
        droppedPositions: tf.droppedPositions,
        timings,
        wallMs,
      };
      results.push(
        turnResult(turn, {
          firstAudioMs: f.firstAudioAt < 0 ? null : ms(f.firstAudioAt - f.endAt),
          // Gaps between blocks of reply samples (one per audio frame) as they reached the main thread.
          frameIntervalMs: gaps(f.arrivals),
          // The longest a player started at the first reply sample would have waited for the next (0 = never starved).
          underrunMs: ms(f.lateMs),
        }),
      );
      lines.push(`${basename(f.job.input)} → ${f.job.output}: ${JSON.stringify(text)}`);
      p.log(
        `${f.job.output}: ${audioSeconds.toFixed(2)} s at ${p.rate} Hz, ${tf.frames} audio frames, ${f.tokens.length} text tokens, stop: ${stop}, ` +
          `first audio ${f.firstAudioAt < 0 ? '-' : `${(f.firstAudioAt - f.endAt).toFixed(1)} ms`} after the end of speech`,
      );
    }
    // The capture ring: mirrored (a window never wraps) or copied where it wraps.
    const captureRing = flows.every((f) => f.conv.mirror !== null) ? 'mirrored' : 'copy-on-wrap';
    p.log(
      `pipeline: ${flows.length} conversation(s) in ${(wallMs / 1000).toFixed(2)} s wall; capture ring ${captureRing}; ` +
        `${pipeline.placement.map((w) => `${w.stage}@${w.affinity.join('+')}${helperText(w.helpers)}${w.pinError === null ? '' : ` (pin failed: ${w.pinError})`}${w.threadsError === null ? '' : ` (${w.threadsError})`}`).join(', ')}`,
    );
    if (p.report !== undefined) {
      const rings = flows.map(({ conv: v }) =>
        Object.fromEntries(Object.entries(v.rings).map(([n, r]) => [n, { capacity: r.capacity, maxUsed: r.maxUsed, records: r.records }])),
      );
      writeReport(
        p.report,
        {
          dir: p.dir,
          config: c.name,
          weightBytes: pipeline.report.weightBytes,
          options: pipeline.setup.options,
          loadMs,
          results,
          atReadiness,
          atEnd,
          manifest: p.domain.manifest(),
        },
        {
          engine: 'pipeline',
          pipeline: { slots: pipeline.slots, placement: pipeline.placement, captureRing, mainCpuMs, mainSleepCpuMs, stages: stats, rings },
        },
      );
    }
    return lines.join('\n');
  } finally {
    await pipeline.close();
  }
}
