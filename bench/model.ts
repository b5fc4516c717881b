/**
 * `voxslab bench model`: the speech model's stages on synthetic checkpoints, built
 * exactly as `voxslab run` builds them (SpeechModel, sealed arenas). Per checkpoint: encoder
 * time per second of user audio; backbone prefill tokens/s (chunks of 64) and decode tokens/s
 * without the text head (an audio step) and with it (a text step); Depthformer and detokenizer
 * time per frame, on one thread and with two sharing each row-by-row linear layer; the cost of
 * one generated 80 ms frame = audio step + Depthformer +
 * detokenizer + 6/12 of a text step, as a real-time factor; and the same cost measured inside
 * a real reply (the conversation's own stage clocks). Two conversations: one batched backbone
 * call for both (what the pipeline's Depthformer stage does) against one conversation's step,
 * both text heads in one call and both Depthformer frames in one call against one's, and the
 * stage's frame for two over one. The fastest of several runs is reported.
 *
 * Default: `tiny` and `small` (f32). `--production` adds `lfm2-audio-1.5b` at q4 and q8
 * (generated once into the checkpoint cache, several minutes each); `--model DIR` adds any
 * checkpoint folder. `--peer` measures llama.cpp on the same backbones in a process of its own (bench/peer.ts).
 */
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { MemoryDomain, plan } from '../src/memory/index.js';
import { heapWorkspace } from '../src/dsp/workspace.js';
import { Depthformer, depthformerPass, depthformerStateFloats } from '../src/model/blocks/depthformer.js';
import { makeCheckpoint } from '../src/io/checkpoint.js';
import { quantizeCheckpoint } from '../src/io/quantize.js';
import { checkpointCache, resolveModel } from '../src/io/checkpoint.js';
import { Conversation, SpeechModel } from '../src/core/conversation.js';
import { EMIT_DONE } from '../src/core/dialogue.js';
import { CLOCKS } from '../src/core/clock.js';
import { AUDIO_SAMPLING, Sampler } from '../src/model/blocks/sampler.js';
import { gemvScratchFloats, setComputeThreads } from '../src/model/blocks/kernels.js';
import { fastestSeconds as best, median, readBandwidth, round, type Spread, spread } from './util.js';
import { native } from '../src/native.js';
import {
  besideCpu,
  llamaBench,
  type LlamaBenchResult,
  pagesOf,
  type Pages,
  peerChildSample,
  type PeerInfo,
  type PeerSpeed,
  peerGguf,
  peerType,
} from './peer.js';
import type { BackboneState } from '../src/model/blocks/backbone.js';

export interface ModelBenchRow {
  checkpoint: string;
  /** Threads sharing the rows of each step's linear layers (the rest runs on one). */
  threads: number;
  config: string;
  weights: string;
  weightMiB: number;
  encoderMsPerSecondOfAudio: number;
  prefillTokensPerSecond: number;
  decodeTokensPerSecond: number;
  decodeWithTextHeadTokensPerSecond: number;
  /** N conversations at once in the Depthformer stage's batched calls, for each N measured. */
  batched: BatchedRow[];
  depthformerMsPerFrame: number;
  detokenizerMsPerFrame: number;
  frameMs: number;
  realTimeFactor: number;
  /**
   * The weight bytes a generated frame must read (the backbone's layers for the audio step, 6/12
   * of a text step's layers and head, depth_linear, the Depthformer's layers 8 times and each
   * codebook's logits matrix once, the detokenizer's layers once: the KV cache at the bench's
   * short context adds little), the time that takes at the read probe's bandwidth with as many
   * threads, and the frame's time over it. The frame's parts are timed back to back between two
   * probes (frameProbeGBps) and the bound takes the faster reading: one probe taken in a slow
   * moment would make the bound slack, and one taken a minute away would measure another state
   * of a shared machine, whose bandwidth can change by half within a minute.
   */
  frameWeightMiB: number;
  frameProbeGBps: [number, number];
  readGBps: number;
  frameBoundMs: number;
  frameOverBound: number;
  /**
   * The same weight bytes read alone, matrix by matrix in the frame's order (the read probe's
   * loop over each with its scales and biases, nothing computed), with as many threads, and that
   * time over the bound: what this machine's memory system gives a frame's reads before any
   * arithmetic. A Depthformer re-read that partly hits the last-level cache can take it below 1.
   */
  frameReadMs: number;
  frameReadOverBound: number;
  /**
   * Each stage's weight bytes over its measured time (GB/s): a backbone step (`decodeTokensPerSecond`'s),
   * the text head alone, a Depthformer frame, a detokenizer frame. Beside the read probe it tells a
   * stage that streams its weights (near the probe, or above it where a re-read hits the
   * last-level cache) from one held by its arithmetic (far below).
   */
  stageReadGBps: StageRates;
  /** Inside a real reply: wall ms per generated audio frame (its text steps included). */
  replyMsPerFrame: number;
  /**
   * A new conversation's first turn of 3 s: from the end of the user's speech to the first reply
   * sample (encoder, the turn's prefill, the text steps before the first frame, its Depthformer
   * and detokenizer; the system prompt ran when the conversation opened). Fastest of two.
   */
  firstReplyMs: number;
  /** Of it: the encoder, and the turn's prefill. */
  firstReplyEncoderMs: number;
  firstReplyPrefillMs: number;
  replyRealTimeFactor: number;
}

/** One figure per stage of a generated frame. */
export interface StageRates {
  step: number;
  textHead: number;
  depthformer: number;
  detokenizer: number;
}

/**
 * One checkpoint's backbone beside llama.cpp's on the same weights (exported to GGUF), measured
 * alternately in the same run: prefill of `prefillTokens` positions, decode with the text head.
 */
/** N conversations' positions in one batched call, each figure over one conversation's. */
export interface BatchedRow {
  rows: number;
  /** Positions per second through the batched backbone call (Lfm2Stack.forwardRows). */
  positionsPerSecond: number;
  /** The batched backbone step, the N text heads in one call, the N Depthformer frames in one call (N.0 = no gain). */
  stepOverOne: number;
  headOverOne: number;
  depthformerOverOne: number;
  /** The stage's work per generated frame (backbone steps with 6/12 of a text head, the Depthformer) for N at once over one. */
  frameOverOne: number;
}

/** Rounds of each side against the peer (each a sample of every figure). */
const PEER_ROUNDS = 5;

export interface PeerRow {
  checkpoint: string;
  threads: number;
  ggufType: string;
  prefillTokens: number;
  decodeSteps: number;
  /** Samples per figure: voxslab's, the peer's. */
  samples: [number, number];
  /** Tokens/s: prefill of prefillTokens in one batch; greedy decode with the text head. Ratios are of the medians. */
  voxslabPrefill: Spread;
  peerPrefill: Spread;
  prefillRatio: number;
  voxslabDecode: Spread;
  peerDecode: Spread;
  decodeRatio: number;
  /** What ran as the peer: `llama-bench` or `node-llama-cpp`, and the llama.cpp CPU build it loaded. */
  peerEngine: 'llama-bench' | 'node-llama-cpp';
  peerVariant: string;
  /** Every sample behind the spreads, tokens/s in the order taken. */
  samplesTokensPerSecond: { voxslabPrefill: number[]; peerPrefill: number[]; voxslabDecode: number[]; peerDecode: number[] };
  /**
   * The peer's order does not tilt it: one sample of each figure taken before any of voxslab's
   * rounds on this checkpoint (first) and one after them all (last), each over the median of the
   * samples taken between voxslab's rounds.
   */
  peerOrder: { firstPrefill: number; lastPrefill: number; firstDecode: number; lastDecode: number };
  /** CPU time this process (voxslab) used while the peer ran, over the peer's wall time: 0 is alone. */
  besideCpu: number;
}

/** The 1.5B shape at q4 or q8 (group 64), generated once into the checkpoint cache. */
export async function production(dtype: 'q4' | 'q8', log: (l: string) => void): Promise<string> {
  const dir = join(checkpointCache(), `lfm2-audio-1.5b-seed1-${dtype}`);
  if (existsSync(join(dir, 'config.json'))) return dir;
  mkdirSync(checkpointCache(), { recursive: true });
  const f32 = mkdtempSync(join(checkpointCache(), '.f32-'));
  const tmp = mkdtempSync(join(checkpointCache(), `.${dtype}-`));
  try {
    log(`generating lfm2-audio-1.5b (${dtype}) in ${dir} (first use; several minutes)`);
    makeCheckpoint({ config: 'lfm2-audio-1.5b', seed: 1, out: f32, dtype: 'f32', progress: false });
    await quantizeCheckpoint({ input: f32, output: tmp, bits: dtype === 'q4' ? 4 : 8, group: 64 });
    renameSync(tmp, dir);
  } finally {
    rmSync(f32, { recursive: true, force: true });
    rmSync(tmp, { recursive: true, force: true });
  }
  return dir;
}

/** Heads of `rows` conversations beside a model's own slot, as the pipeline's Depthformer stage carves them. */
function rowHeads(model: SpeechModel, domain: MemoryDomain, rows: number): { depthformer: Depthformer; logits: Float32Array; scratch: Float32Array } {
  const c = model.config;
  const V = c.backbone.vocab;
  const scratchFloats = rows * gemvScratchFloats(c.backbone.hidden);
  const kvFloats = rows * depthformerStateFloats(c);
  const work = domain.createArena(domain.owner('ticket', 1), `bench heads ${rows}`, {
    bytes: domain.policy.arenaBytes([plan(depthformerPass(c, rows).build()).highWater, kvFloats * 4, rows * V * 4, scratchFloats * 4]),
  });
  const kv = work.carve('depth_kv', 'workspace.depthformer', Float32Array, kvFloats);
  const depthformer = new Depthformer(c, model.image, work, heapWorkspace, kv, plan, rows);
  const logits = work.carve('text.logits', 'workspace.sampler', Float32Array, rows * V);
  const scratch = work.carve('text.scratch', 'workspace.sampler', Float32Array, scratchFloats);
  work.seal();
  return { depthformer, logits, scratch };
}

/** Backbone prefill of `tokens` positions in the model's prefill chunks: fastest of `runs`, seconds. */
function prefillSeconds(model: SpeechModel, state: BackboneState, tokens: number, runs: number): number {
  const stack = model.slot.backbone.stack;
  const chunk = model.options.prefillChunk;
  const D = model.config.backbone.hidden;
  return best(runs, () => {
    state.reset();
    for (let done = 0; done < tokens; done += chunk) {
      const n = Math.min(chunk, tokens - done);
      for (let i = 0; i < n * D; i++) stack.input[i] = Math.sin(i * 0.01) * 0.1;
      stack.forward(state, n, null, true);
    }
  });
}

/** `steps` backbone decode steps, with the text head or without: fastest of `runs`, seconds. */
function decodeSeconds(model: SpeechModel, state: BackboneState, steps: number, head: boolean, runs: number): number {
  const s = model.slot;
  const stack = s.backbone.stack;
  return best(runs, () => {
    state.reset();
    for (let i = 0; i < steps; i++) {
      s.backbone.embedText(i % 100, stack.input, 0);
      const hidden = stack.forward(state, 1);
      if (head) s.backbone.logits(hidden, s.logits, s.logitsScratch);
    }
  });
}

/**
 * A generated frame's parts on this thread's compute threads, fastest of `runs` each (ms): an
 * audio step, a text step (with its head), a Depthformer frame, a detokenizer frame, and the
 * frame they make (ModelBenchRow.frameMs). Leaves `conv`'s backbone and detokenizer used.
 */
export function frameCost(model: SpeechModel, conv: Conversation, steps: number, frames: number, runs: number) {
  const s = model.slot;
  const c = model.config;
  const stepMs = (decodeSeconds(model, conv.backbone, steps, false, runs) / steps) * 1000;
  const textMs = (decodeSeconds(model, conv.backbone, steps, true, runs) / steps) * 1000;
  const sampler = new Sampler(1);
  const codes = new Int32Array(8);
  const hidden = new Float32Array(c.backbone.hidden).map((_, i) => Math.cos(i));
  const depthMs =
    (best(runs, () => {
      for (let i = 0; i < frames; i++) s.depthformer.frame(hidden, sampler, AUDIO_SAMPLING, codes);
    }) /
      frames) *
    1000;
  const out = new Float32Array(s.detokenizer.maxSamples(conv.detokenizer));
  const detMs =
    (best(runs, () => {
      conv.detokenizer.startTurn();
      for (let i = 0; i < frames; i++) {
        for (let k = 0; k < 8; k++) codes[k] = (i * 131 + k * 17) % 2048;
        s.detokenizer.frame(conv.detokenizer, codes, out, 0);
      }
    }) /
      frames) *
    1000;
  const frameMs = stepMs + depthMs + detMs + (c.interleave.text / c.interleave.audio) * textMs;
  return { stepMs, textMs, depthMs, detMs, frameMs };
}

/** The engine's own frame (frameCost's) of the checkpoint `dir` with `threads` compute threads: what `bench model` reports. */
export function engineFrameMs(dir: string, threads: number, quick: boolean): number {
  const model = SpeechModel.load(dir, MemoryDomain.create(), { segmentSeconds: 5, replySeconds: quick ? 2 : 4, context: 4096, threads });
  const conv = model.conversation({ seed: 1, inputRate: 16000 });
  model.ready();
  conv.ready();
  const big = model.config.backbone.hidden >= 1024;
  const ms = frameCost(model, conv, quick ? 8 : big ? 16 : 100, quick ? 4 : big ? 8 : 40, quick || big ? 3 : 5).frameMs;
  setComputeThreads(1);
  return ms;
}

/** The weight encodings of a loaded model's matrices, e.g. `F32` or `F32+q4`. */
function weightKinds(model: SpeechModel): string {
  const kinds = new Set(
    model.image.names
      .filter((n) => n.endsWith('.weight'))
      .map((n) => {
        const t = model.image.get(n);
        return t.quant === undefined ? t.dtype : `q${t.quant.bits}`;
      }),
  );
  return [...kinds].sort().join('+');
}

/** A group of a frame's weight tensors, its stage, and how many times a frame reads it. */
type FramePart = { stage: keyof StageRates; tensors: Uint8Array[]; times: number };

/**
 * The weight tensors one generated frame reads, in the frame's order, each group with its stage
 * and how many times a frame reads it (the text step's share is a fraction): from the image's
 * own tensors.
 */
function frameParts(model: SpeechModel): FramePart[] {
  const image = model.image;
  const c = model.config;
  const views = (prefix: string): Uint8Array[] => image.names.filter((n) => n.startsWith(prefix)).map((n) => image.bytes(n));
  const layers = [...views('lfm.layers.'), ...views('lfm.embedding_norm.')];
  const text = c.interleave.text / c.interleave.audio;
  const parts: FramePart[] = [
    { stage: 'step', tensors: layers, times: 1 + text },
    { stage: 'textHead', tensors: views('lfm.embed_tokens.'), times: text },
    { stage: 'depthformer', tensors: views('depth_linear.'), times: 1 },
  ];
  for (let i = 0; i < c.audio.codebooks; i++) {
    const own = views(`depth_embeddings.${i}.to_logits.`);
    parts.push({
      stage: 'depthformer',
      tensors: [...views('depthformer.layers.'), ...(own.length > 0 ? own : views(`depth_embeddings.${i}.embedding.`))],
      times: 1,
    });
  }
  parts.push({ stage: 'detokenizer', tensors: [...views('audio_detokenizer.lfm.'), ...views('audio_detokenizer.lin.')], times: 1 });
  return parts;
}

/** Weight bytes one generated frame reads (ModelBenchRow.frameWeightMiB), in all and per stage (once each). */
function frameWeightBytes(model: SpeechModel): { total: number; stage: StageRates } {
  const stage: StageRates = { step: 0, textHead: 0, depthformer: 0, detokenizer: 0 };
  let total = 0;
  for (const p of frameParts(model)) {
    const bytes = p.tensors.reduce((s, t) => s + t.byteLength, 0);
    total += p.times * bytes;
    stage[p.stage] += bytes;
  }
  return { total, stage };
}

/**
 * The tensors as float views, neighbours in one slab (a matrix, its scales and its biases)
 * joined into one view across the alignment padding between them: one probe call where a
 * kernel makes one call.
 */
function ranges(tensors: readonly Uint8Array[]): Float32Array[] {
  const out: Float32Array[] = [];
  let at = 0;
  let end = 0;
  let buffer: ArrayBufferLike | null = null;
  const flush = (): void => {
    if (buffer !== null && end > at) out.push(new Float32Array(buffer, at, (end - at) >> 2));
  };
  for (const t of tensors) {
    if (t.buffer === buffer && t.byteOffset >= end && t.byteOffset - end < 64) end = t.byteOffset + t.byteLength;
    else {
      flush();
      buffer = t.buffer;
      at = t.byteOffset;
      end = t.byteOffset + t.byteLength;
    }
  }
  flush();
  return out;
}

/**
 * Milliseconds to read a frame's weight bytes alone (ModelBenchRow.frameReadMs) with this
 * thread's compute threads: each matrix through the read probe, in the frame's order, nothing
 * computed; the fastest of `runs`.
 */
function frameReadMs(model: SpeechModel, runs: number): number {
  const parts = frameParts(model).map((p) => ({ times: p.times, floats: ranges(p.tensors) }));
  let best = Number.POSITIVE_INFINITY;
  for (let r = 0; r < runs; r++) {
    let ms = 0;
    for (const p of parts) {
      const t0 = performance.now();
      for (const f of p.floats) native.readProbe(f);
      ms += p.times * (performance.now() - t0);
    }
    best = Math.min(best, ms);
  }
  return best;
}

/** A row before its frame's bound, which `withBound` adds from the run's read probes. */
type UnboundRow = Omit<ModelBenchRow, 'readGBps' | 'frameBoundMs' | 'frameOverBound' | 'frameReadOverBound'>;

/** The streaming read probe with `threads` threads (GB/s), leaving this thread's compute threads at that. */
function probeRead(threads: number): number {
  const [b] = readBandwidth([threads], 7);
  setComputeThreads(threads);
  return round(b! / 1e9, 2);
}

/** One checkpoint at one thread count, and the weight bytes its frame reads. */
function measure(label: string, dir: string, quick: boolean, threads: number): { row: UnboundRow; bytes: number } {
  const domain = MemoryDomain.create();
  const segment = 5;
  const model = SpeechModel.load(dir, domain, { segmentSeconds: segment, replySeconds: quick ? 2 : 4, context: 4096, threads });
  const conv = model.conversation({ seed: 1, inputRate: 16000 });
  const c0 = model.config;
  // Batch widths measured (the stage serves up to STEP_BATCH): fewer on the 1.5B shape, whose
  // conversations' caches are large, with every width to four (the batched step's budget).
  const widths = quick ? [2] : c0.backbone.hidden >= 1024 ? [2, 3, 4, 8] : [2, 4, 8, 16];
  const others = Array.from({ length: widths[widths.length - 1]! - 1 }, (_, i) => model.conversation({ seed: 2 + i, inputRate: 16000 }));
  model.ready();
  conv.ready();
  for (const o of others) o.ready();
  const c = model.config;
  const s = model.slot;
  const big = c.backbone.hidden >= 1024;
  const runs = quick || big ? 2 : 5;
  const D = c.backbone.hidden;
  // Encoder: a 5 s segment of log-mel rows.
  const T = 1 + segment * 100;
  const mel = Float32Array.from({ length: T * 128 }, (_, i) => Math.sin(i * 0.013) - 4);
  const melCopy = new Float32Array(mel.length);
  const encS = best(runs, () => {
    melCopy.set(mel);
    s.encoder.encode(melCopy, T);
  });
  const stack = s.backbone.stack;
  const state = conv.backbone;
  const chunk = model.options.prefillChunk;
  const chunks = big ? 2 : 4;
  const steps = quick ? 8 : big ? 16 : 100;
  const frames = quick ? 4 : big ? 8 : 40;
  const prefillS = prefillSeconds(model, state, chunks * chunk, runs);
  // The frame's parts back to back between two read probes at this thread count (the bound
  // takes the faster, read within seconds of the parts it bounds), each two-conversation
  // figure next to the one it is compared with.
  const probeBefore = probeRead(threads);
  const { stepMs, textMs, depthMs, detMs, frameMs } = frameCost(model, conv, steps, frames, runs);
  const hidden = new Float32Array(D).map((_, i) => Math.cos(i));
  // Per width: the batched backbone step and the batched Depthformer frame (the heads after the probe).
  const wide = widths.map((n) => {
    const states = [state, ...others.slice(0, n - 1).map((o) => o.backbone)];
    const stepS = best(runs, () => {
      for (const st of states) st.reset();
      for (let i = 0; i < steps; i++) {
        for (let r = 0; r < n; r++) s.backbone.embedText((i + 7 * r) % 100, stack.input, r);
        stack.forwardRows(states, n);
      }
    });
    const heads = rowHeads(model, domain, n);
    const hiddenN = new Float32Array(n * D).map((_, i) => Math.cos(i * 0.7));
    const samplers = Array.from({ length: n }, (_, r) => new Sampler(1 + r));
    const options = Array.from({ length: n }, () => AUDIO_SAMPLING);
    const codesN = Array.from({ length: n }, () => new Int32Array(8));
    const depthS = best(runs, () => {
      for (let i = 0; i < frames; i++) heads.depthformer.frameRows(hiddenN, n, samplers, options, codesN);
    });
    return { n, stepS, depthS, heads, hiddenN, headS: 0 };
  });
  const readMs = frameReadMs(model, runs + 1);
  const probeAfter = probeRead(threads);
  const headS = best(runs, () => {
    for (let i = 0; i < steps; i++) s.backbone.logits(hidden, s.logits, s.logitsScratch);
  });
  for (const w of wide)
    w.headS = best(runs, () => {
      for (let i = 0; i < steps; i++) s.backbone.logitsRows(w.hiddenN, w.heads.logits, w.n, w.heads.scratch);
    });
  // A real turn: 2 s of input, then the reply; the conversation's clocks give each stage.
  state.reset();
  listenTo(conv, turnAudio(2));
  conv.endSegment();
  conv.stageMs.fill(0);
  const t0 = performance.now();
  const r = conv.reply({});
  const replyMs = performance.now() - t0;
  const first = firstReply(model, 2);
  const { total: frameBytes, stage: stageBytes } = frameWeightBytes(model);
  const textShare = c.interleave.text / c.interleave.audio;
  const headMs = (headS / steps) * 1000;
  const stageOne = stepMs + depthMs + textShare * (stepMs + headMs);
  const batched = wide.map((w): BatchedRow => {
    const stepN = (w.stepS / steps) * 1000;
    const headN = (w.headS / steps) * 1000;
    const depthN = (w.depthS / frames) * 1000;
    return {
      rows: w.n,
      positionsPerSecond: round((w.n * steps) / w.stepS, 1),
      stepOverOne: round(stepN / stepMs, 3),
      headOverOne: round(headN / headMs, 3),
      depthformerOverOne: round(depthN / depthMs, 3),
      frameOverOne: round((stepN + depthN + textShare * (stepN + headN)) / stageOne, 3),
    };
  });
  const prefillMs = conv.stageMs[CLOCKS.indexOf('prefill')] as number;
  const replyMsPerFrame = r.audioFrames > 0 ? (replyMs - prefillMs) / r.audioFrames : 0;
  const weightBytes = model.report.weightBytes;
  const row: UnboundRow = {
    checkpoint: label,
    threads,
    config: c.name.includes('/') ? label : c.name,
    weights: weightKinds(model),
    weightMiB: round(weightBytes / 2 ** 20, 1),
    encoderMsPerSecondOfAudio: round((encS / segment) * 1000, 2),
    prefillTokensPerSecond: round((chunks * chunk) / prefillS, 1),
    decodeTokensPerSecond: round(1000 / stepMs, 1),
    decodeWithTextHeadTokensPerSecond: round(1000 / textMs, 1),
    batched,
    depthformerMsPerFrame: round(depthMs, 3),
    detokenizerMsPerFrame: round(detMs, 3),
    frameMs: round(frameMs, 3),
    realTimeFactor: round(frameMs / 80, 4),
    frameWeightMiB: round(frameBytes / 2 ** 20, 1),
    frameProbeGBps: [probeBefore, probeAfter],
    frameReadMs: round(readMs, 3),
    stageReadGBps: {
      step: round(stageBytes.step / stepMs / 1e6, 1),
      textHead: round(stageBytes.textHead / headMs / 1e6, 1),
      depthformer: round(stageBytes.depthformer / depthMs / 1e6, 1),
      detokenizer: round(stageBytes.detokenizer / detMs / 1e6, 1),
    },
    replyMsPerFrame: round(replyMsPerFrame, 3),
    replyRealTimeFactor: round(replyMsPerFrame / 80, 4),
    firstReplyMs: round(first.ms, 1),
    firstReplyEncoderMs: round(first.encoderMs, 1),
    firstReplyPrefillMs: round(first.prefillMs, 1),
  };
  return { row, bytes: frameBytes };
}

/** A user turn's 16 kHz input: `seconds` of a modulated tone. */
function turnAudio(seconds: number): Float32Array {
  return Float32Array.from({ length: seconds * 16000 }, (_, i) => 0.2 * Math.sin(i * 0.06) * Math.sin(i * 0.0007));
}

/** Feeds `audio` to `conv` in the largest chunks `listen` takes. */
function listenTo(conv: Conversation, audio: Float32Array): void {
  for (let i = 0; i < audio.length; i += Conversation.INPUT_CHUNK) conv.listen(audio.subarray(i, i + Conversation.INPUT_CHUNK));
}

/** The first reply sample of new conversations' first 3 s turns (see ModelBenchRow.firstReplyMs): the fastest of `runs`. */
function firstReply(model: SpeechModel, runs: number): { ms: number; encoderMs: number; prefillMs: number } {
  const audio = turnAudio(3);
  let best = { ms: Number.POSITIVE_INFINITY, encoderMs: 0, prefillMs: 0 };
  for (let r = 0; r < runs; r++) {
    const conv = model.conversation({ seed: 10 + r, inputRate: 16000 });
    conv.ready();
    listenTo(conv, audio);
    conv.stageMs.fill(0);
    let at = 0;
    const sink = {
      pcm: (_: Float32Array, n: number) => {
        if (n > 0 && at === 0) at = performance.now();
      },
    };
    const t0 = performance.now();
    conv.endSegment();
    conv.startReply();
    while (at === 0 && conv.replyStep(sink) !== EMIT_DONE);
    const ms = at === 0 ? Number.POSITIVE_INFINITY : at - t0;
    if (ms < best.ms) best = { ms, encoderMs: conv.stageMs[CLOCKS.indexOf('encoder')] as number, prefillMs: conv.stageMs[CLOCKS.indexOf('prefill')] as number };
  }
  return best;
}

/**
 * voxslab's backbone against llama.cpp's on the same weights, alternating in one run: two rounds
 * of (one thread, two threads) for each engine, the fastest of each kept.
 */
/**
 * voxslab against llama.cpp on the backbone of `dir`: per thread count, voxslab's samples in
 * this process and the peer's in a process of its own, alternating round by round
 * (node-llama-cpp: one child per sample; llama-bench: its own repetitions, between voxslab's
 * rounds). voxslab's helper threads are stopped while the peer runs.
 */
async function againstPeer(
  label: string,
  dir: string,
  quick: boolean,
  bench: string | undefined,
  log: (l: string) => void,
): Promise<{ rows: PeerRow[]; info: PeerInfo }> {
  const domain = MemoryDomain.create();
  const model = SpeechModel.load(dir, domain, { context: 4096, threads: 1 });
  const conv = model.conversation({ seed: 1, inputRate: 16000 });
  model.ready();
  conv.ready();
  const type = peerType(weightKinds(model));
  const gguf = peerGguf(dir, type, log);
  const prefillTokens = quick ? 128 : 512;
  const steps = quick ? 8 : 64;
  const rounds = quick ? 2 : PEER_ROUNDS;
  const THREADS = [1, 2];
  const ours = THREADS.map(() => ({ prefill: [] as number[], decode: [] as number[] }));
  const theirs = THREADS.map(() => ({ prefill: [] as number[], decode: [] as number[] }));
  let info: PeerInfo = { engine: '', variant: '', pages: null };
  // The peer's order: one sample of each figure before voxslab's rounds, one after them all.
  const order = THREADS.map(() => ({ first: [0, 0], last: [0, 0] }));
  const beside = { cpuMs: 0, wallMs: 0 };
  const voxslabRound = (j: number, threads: number): void => {
    setComputeThreads(threads);
    ours[j]!.prefill.push(prefillTokens / prefillSeconds(model, conv.backbone, prefillTokens, 1));
    ours[j]!.decode.push(steps / decodeSeconds(model, conv.backbone, steps, true, 1));
    // Helpers stopped: nothing of voxslab's runs beside the peer.
    setComputeThreads(1);
  };
  // One peer run (llama-bench: every thread count, `reps` each; node-llama-cpp: one sample at `threads`), timed for what ran beside it.
  const peerRun = <T>(f: () => T): T => {
    const b = besideCpu(f);
    beside.cpuMs += b.cpuMs;
    beside.wallMs += b.wallMs;
    return b.result;
  };
  const llama = (reps: number): LlamaBenchResult => peerRun(() => llamaBench(bench!, gguf, prefillTokens, steps, THREADS, reps));
  const child = (threads: number): PeerSpeed & PeerInfo => peerRun(() => peerChildSample(gguf, threads, prefillTokens, steps));
  try {
    if (bench !== undefined) {
      const first = llama(1);
      for (let r = 0; r < rounds; r++) for (const [j, t] of THREADS.entries()) voxslabRound(j, t);
      const lb = llama(rounds);
      THREADS.forEach((t, j) => {
        theirs[j]!.prefill.push(...(lb.prefill.get(t) ?? []));
        theirs[j]!.decode.push(...(lb.decode.get(t) ?? []));
      });
      info = lb.info;
      for (let r = 0; r < rounds; r++) for (const [j, t] of THREADS.entries()) voxslabRound(j, t);
      const last = llama(1);
      THREADS.forEach((t, j) => {
        order[j]!.first = [first.prefill.get(t)?.[0] ?? 0, first.decode.get(t)?.[0] ?? 0];
        order[j]!.last = [last.prefill.get(t)?.[0] ?? 0, last.decode.get(t)?.[0] ?? 0];
      });
    } else {
      for (const [j, threads] of THREADS.entries()) {
        const p = child(threads);
        order[j]!.first = [p.prefillTokensPerSecond, p.decodeTokensPerSecond];
      }
      for (let r = 0; r < rounds; r++) {
        for (const [j, threads] of THREADS.entries()) {
          voxslabRound(j, threads);
          const p = child(threads);
          theirs[j]!.prefill.push(p.prefillTokensPerSecond);
          theirs[j]!.decode.push(p.decodeTokensPerSecond);
          info = { engine: p.engine, variant: p.variant, pages: p.pages };
        }
      }
      for (const [j, threads] of THREADS.entries()) {
        const p = child(threads);
        order[j]!.last = [p.prefillTokensPerSecond, p.decodeTokensPerSecond];
      }
    }
  } finally {
    setComputeThreads(1);
  }
  const rows = THREADS.map((threads, j): PeerRow => {
    const [vp, vd, pp, pd] = [ours[j]!.prefill, ours[j]!.decode, theirs[j]!.prefill, theirs[j]!.decode].map((x) => spread(x)) as [
      Spread,
      Spread,
      Spread,
      Spread,
    ];
    return {
      checkpoint: label,
      threads,
      ggufType: type,
      prefillTokens,
      decodeSteps: steps,
      samples: [ours[j]!.prefill.length, theirs[j]!.prefill.length],
      voxslabPrefill: vp,
      peerPrefill: pp,
      prefillRatio: round(vp.median / pp.median, 2),
      voxslabDecode: vd,
      peerDecode: pd,
      decodeRatio: round(vd.median / pd.median, 2),
      peerEngine: bench !== undefined ? 'llama-bench' : 'node-llama-cpp',
      peerVariant: info.variant,
      samplesTokensPerSecond: {
        voxslabPrefill: ours[j]!.prefill.map((x) => round(x, 1)),
        peerPrefill: theirs[j]!.prefill.map((x) => round(x, 1)),
        voxslabDecode: ours[j]!.decode.map((x) => round(x, 1)),
        peerDecode: theirs[j]!.decode.map((x) => round(x, 1)),
      },
      peerOrder: {
        firstPrefill: round(order[j]!.first[0]! / median(theirs[j]!.prefill), 3),
        lastPrefill: round(order[j]!.last[0]! / median(theirs[j]!.prefill), 3),
        firstDecode: round(order[j]!.first[1]! / median(theirs[j]!.decode), 3),
        lastDecode: round(order[j]!.last[1]! / median(theirs[j]!.decode), 3),
      },
      besideCpu: round(beside.cpuMs / beside.wallMs, 4),
    };
  });
  return { rows, info };
}

export interface ModelBenchResult {
  bench: 'model';
  rows: ModelBenchRow[];
  /** `--peer`: llama.cpp in the same run (empty without it). */
  peer: PeerRow[];
  /** The peer's engine, the CPU build it loaded and its pages; null without --peer. */
  peerInfo: PeerInfo | null;
  /** What voxslab's weights sit on after the rows above (this process's huge-page mappings). */
  voxslabPages: Pages | null;
  notMeasured: string[];
}

/** The row with its frame's bound at the faster of its two read probes. */
function withBound(row: UnboundRow, frameBytes: number): ModelBenchRow {
  const readGBps = Math.max(...row.frameProbeGBps);
  const boundMs = (frameBytes / (readGBps * 1e9)) * 1000;
  return {
    ...row,
    readGBps: round(readGBps, 2),
    frameBoundMs: round(boundMs, 3),
    frameOverBound: round(row.frameMs / boundMs, 3),
    frameReadOverBound: round(row.frameReadMs / boundMs, 3),
  };
}

export async function run(
  options: { quick?: boolean; models?: string[]; production?: boolean; peer?: boolean; peerBench?: string } = {},
): Promise<ModelBenchResult> {
  const quick = options.quick === true;
  const log = (l: string): void => {
    process.stderr.write(`${l}\n`);
  };
  const targets: [string, string][] = (quick ? ['tiny'] : ['tiny', 'small']).map((n) => [n, resolveModel(n, log)]);
  if (options.production === true) for (const d of ['q4', 'q8'] as const) targets.push([`lfm2-audio-1.5b ${d}`, await production(d, log)]);
  for (const m of options.models ?? []) targets.push([m, m]);
  const notMeasured: string[] = [];
  if (options.production !== true) notMeasured.push('lfm2-audio-1.5b q4/q8: run with --production (generates the checkpoints once)');
  if (options.peer !== true) notMeasured.push('llama.cpp on the same backbones: run with --peer');
  const rows: ModelBenchRow[] = [];
  const peer: PeerRow[] = [];
  let peerInfo: PeerInfo | null = null;
  try {
    for (const [label, dir] of targets) {
      for (const threads of [1, 2]) {
        const m = measure(label, dir, quick, threads);
        rows.push(withBound(m.row, m.bytes));
      }
    }
    // The peer: every checkpoint but tiny (too small for a rate to mean anything).
    if (options.peer === true) {
      for (const [label, dir] of targets.filter(([l]) => l !== 'tiny')) {
        const r = await againstPeer(label, dir, quick, options.peerBench, log);
        peer.push(...r.rows);
        peerInfo = r.info;
      }
    }
  } finally {
    setComputeThreads(1);
  }
  return { bench: 'model', rows, peer, peerInfo, voxslabPages: pagesOf('self'), notMeasured };
}

/** A stage's read rate with its ratio to the row's read probe. */
function stageRate(m: ModelBenchRow, stage: keyof StageRates): string {
  return `${m.stageReadGBps[stage]} (×${round(m.stageReadGBps[stage] / m.readGBps, 2)})`;
}

export function format(r: ModelBenchResult): string {
  const lines = [
    'model stages (a generated 80 ms frame = audio step + Depthformer + detokenizer + 6/12 of a text step; threads share the rows of row-by-row ' +
      'linear layers):',
  ];
  for (const m of r.rows) {
    lines.push(
      `  ${m.checkpoint} (${m.weights}, ${m.weightMiB} MiB of weights), ${m.threads} thread${m.threads > 1 ? 's' : ''}: encoder ` +
        `${m.encoderMsPerSecondOfAudio} ms per s of audio; prefill ${m.prefillTokensPerSecond} tok/s; decode ${m.decodeTokensPerSecond} tok/s ` +
        `(${m.decodeWithTextHeadTokensPerSecond} with the text head); N conversations batched, each over one's (step, text heads, ` +
        `Depthformer frames, the stage's frame): ${m.batched
          .map((b) => `${b.rows}: ×${b.stepOverOne}, ×${b.headOverOne}, ×${b.depthformerOverOne}, ×${b.frameOverOne} (${b.positionsPerSecond} positions/s)`)
          .join('; ')}`,
      `      Depthformer ${m.depthformerMsPerFrame} ms/frame, detokenizer ${m.detokenizerMsPerFrame} ms/frame → ${m.frameMs} ms per 80 ms frame ` +
        `(real-time factor ${m.realTimeFactor}; ${m.frameWeightMiB} MiB of weights at the read probe's ${m.readGBps} GB/s take ` +
        `${m.frameBoundMs} ms: ×${m.frameOverBound} of that bound; the probes around the frame's parts read ${m.frameProbeGBps.join(' and ')} GB/s; ` +
        `the same bytes read alone in the frame's order take ${m.frameReadMs} ms, ×${m.frameReadOverBound}; the stages read their weights at (GB/s, ×the probe) ` +
        `step ${stageRate(m, 'step')}, text head ${stageRate(m, 'textHead')}, Depthformer ${stageRate(m, 'depthformer')}, ` +
        `detokenizer ${stageRate(m, 'detokenizer')}); in a real reply ${m.replyMsPerFrame} ms per frame (${m.replyRealTimeFactor}); first reply ` +
        `sample ${m.firstReplyMs} ms after a 3 s turn (encoder ${m.firstReplyEncoderMs}, prefill ${m.firstReplyPrefillMs})`,
    );
  }
  const sp = (s: Spread) => `${s.median} (${s.min}–${s.max})`;
  const pages = (p: Pages | null) => (p === null ? 'unknown' : `${p.anonHugeMiB} MiB anonymous and ${p.fileHugeMiB} MiB file-backed in huge pages`);
  if (r.peerInfo !== null) {
    lines.push(
      `  peer: ${r.peerInfo.engine}, alone in its own process (voxslab's helper threads stopped meanwhile); its CPU build: ${r.peerInfo.variant}`,
      `  pages: voxslab ${pages(r.voxslabPages)}; the peer ${pages(r.peerInfo.pages)}`,
    );
  }
  for (const p of r.peer) {
    lines.push(
      `  ${p.checkpoint} (${p.ggufType}), ${p.threads} thread${p.threads > 1 ? 's' : ''}, tok/s median (min–max) of ${p.samples[0]} / ${p.samples[1]} samples: ` +
        `prefill ${p.prefillTokens} ${sp(p.voxslabPrefill)} vs ${sp(p.peerPrefill)} (×${p.prefillRatio}); decode with the text head ` +
        `${sp(p.voxslabDecode)} vs ${sp(p.peerDecode)} (×${p.decodeRatio}); the peer first / last over its median: prefill ` +
        `×${p.peerOrder.firstPrefill} / ×${p.peerOrder.lastPrefill}, decode ×${p.peerOrder.firstDecode} / ×${p.peerOrder.lastDecode}; ` +
        `voxslab's CPU beside it ${p.besideCpu} of its wall time`,
    );
  }
  for (const n of r.notMeasured) lines.push(`  not measured: ${n}`);
  return lines.join('\n');
}
