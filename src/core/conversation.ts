/**
 * The speech model assembled from a checkpoint folder, and conversations with it (docs/model.md,
 * Prompt and generation). `SpeechModel` holds what every conversation shares: the weights image,
 * retained derived tables and prompt token ids (owner `model`), and one pass slot's stage
 * workspaces — encoder, backbone chunk, Depthformer, detokenizer, text logits (owner `ticket`).
 * A `Conversation` holds one conversation's state (owner `conversation`): backbone KV cache and
 * short-conv columns, detokenizer caches and streams, the user segment's mel rows and the
 * input/output buffers. Every arena is sized exactly by a dry run of the same constructors over
 * unbacked arenas (memory/sizing.ts), then carved for real and sealed: once ready nothing is
 * allocated.
 *
 * This is the single-thread engine, the reference the pipeline (src/pipeline) must equal byte for
 * byte. The generation rules and the context policy live in `Dialogue` (dialogue.ts), which both
 * engines drive.
 *
 * Thread contract: a model and its conversations are used from the thread that loaded them,
 * one call at a time (they share one pass slot). Loading and `conversation()` allocate; after
 * `ready()`, `listen`, `endSegment` and `reply` allocate nothing (the sink may) and stage
 * clocks read the native monotonic clock.
 */
import { ArgumentError, BadInputError } from '../errors.js';
import { native } from '../native.js';
import type { ReplyStop } from './dialogue.js';
import { optionValue } from '../options.js';
import type { Arena } from '../memory/arena.js';
import type { MemoryDomain } from '../memory/domain.js';
import { sizedArenas as sized } from '../memory/sizing.js';
import { plan, separatePlan, type Planner } from '../memory/planner.js';
import { arenaWorkspace, type Workspace } from '../dsp/workspace.js';
import { MelFrontend } from '../dsp/mel.js';
import { Resampler } from '../dsp/resample.js';
import { loadCheckpoint } from '../io/checkpoint.js';
import type { ModelConfig } from '../model/format/config.js';
import type { LoadReport, WeightsImage } from '../model/format/image.js';
import { ConformerEncoder } from '../model/blocks/encoder.js';
import { backboneStateSizes, type KvType, type BackboneState } from '../model/blocks/backbone.js';
import { Detokenizer, DetokenizerState } from '../model/blocks/detokenizer.js';
import { AUDIO_SAMPLING, TEXT_SAMPLING, type SamplingOptions } from '../model/blocks/sampler.js';
import { type TextTokenizer, TOKENS } from '../model/format/tokenizer.js';
export type { Prompts } from './dialogue.js';
import { setComputeThreads } from '../model/blocks/kernels.js';
import { CLOCK_DETOKENIZER, CLOCK_ENCODER, CLOCK_FRONTEND, carveClocks, Stopwatch, type StageClocks } from './clock.js';
import { Dialogue, EMIT_DONE, EMIT_END_OF_AUDIO, EMIT_TEXT, type Prompts } from './dialogue.js';
import { buildStepSlot, type StepSlot } from './step.js';
import { DEFAULT_ENCODER_TILES, melRows, replyFrames, segmentSamples } from '../model/plan/plans.js';
import { loadTokenizer } from '../io/config.js';
import { TURN_TAIL_ROWS } from '../duplex/turns.js';
import './categories.js';

export const DEFAULT_SYSTEM_PROMPT = 'Respond with interleaved text and audio.';

export interface SpeechModelOptions {
  // Defaults and ranges of these options: src/options.ts.
  context?: number;
  segmentSeconds?: number;
  replySeconds?: number;
  kv?: KvType;
  prefillChunk?: number;
  outputRate?: number;
  /** System prompt. Default docs/model.md's. */
  systemPrompt?: string;
  /** Sampling. Default text greedy, audio temperature 1 top-k 4. */
  text?: SamplingOptions;
  audio?: SamplingOptions;
  /** Threads sharing each row-by-row linear layer of the calling thread (see setComputeThreads). */
  threads?: number;
  layout?: 'planned' | 'separate';
  /** Endpointing, for conversations whose turns the frontend finds (VAD). */
  vad?: 'silero' | 'very-low' | 'low' | 'moderate' | 'high';
  onsetMs?: number;
  silenceMs?: number;
  /** The pause at which the Conformer stage encodes the turn so far ahead of the endpoint (0: off). */
  speculateMs?: number;
  minSpeechMs?: number;
  /** How far generation may run ahead of playback in VAD conversations (barge-in cuts back to what was heard). */
  lookaheadMs?: number;
}

export type ResolvedSpeechOptions = Required<Omit<SpeechModelOptions, 'text' | 'audio' | 'threads'>> & {
  text: SamplingOptions;
  audio: SamplingOptions;
  threads: number;
};

/** Observers of a reply. Views passed in are reused: copy what you keep. */
export interface ReplySink {
  text?(token: number): void;
  /** The 8 codes of a frame (2048 everywhere for the end-of-audio frame). */
  audio?(codes: Int32Array): void;
  /** Device-rate samples [0, count). */
  pcm?(samples: Float32Array, count: number): void;
  /** Inspection taps (slower: only set them to dump stages). */
  hidden?(row: Float32Array): void;
  textLogits?(logits: Float32Array): void;
  audioLogits?(logits: Float32Array): void;
  bins?(bins: Float32Array): void;
}

export interface ReplySummary {
  textTokens: number;
  audioFrames: number;
  samples: number;
  stop: ReplyStop;
  endOfAudio: boolean;
}

function checkSampling(name: string, s: SamplingOptions): SamplingOptions {
  if (s === null || typeof s !== 'object' || !(s.temperature >= 0) || !Number.isFinite(s.temperature) || !Number.isSafeInteger(s.topK) || s.topK < 1) {
    throw new ArgumentError(`${name} sampling needs a temperature ≥ 0 and a whole top-k ≥ 1`);
  }
  return Object.freeze({ temperature: s.temperature, topK: s.topK });
}

/** `speculateMs`: 0 (off), or a pause no shorter than a turn's tail (its rows must be there to encode). */
function speculateOption(given: number | undefined): number {
  const ms = optionValue<number>('speculateMs', given);
  if (ms !== 0 && ms < 10 * TURN_TAIL_ROWS) throw new ArgumentError(`speculateMs must be 0 or at least ${10 * TURN_TAIL_ROWS}, got ${ms}`);
  return ms;
}

export function resolveSpeechOptions(config: ModelConfig, o: SpeechModelOptions): ResolvedSpeechOptions {
  const c = { maxContext: config.backbone.maxContext };
  if (o.systemPrompt !== undefined && typeof o.systemPrompt !== 'string') throw new ArgumentError('systemPrompt must be a string');
  return {
    context: optionValue('context', o.context, c),
    segmentSeconds: optionValue('segmentSeconds', o.segmentSeconds),
    replySeconds: optionValue('replySeconds', o.replySeconds),
    prefillChunk: optionValue('prefillChunk', o.prefillChunk),
    kv: optionValue('kv', o.kv),
    outputRate: optionValue('outputRate', o.outputRate),
    systemPrompt: o.systemPrompt ?? DEFAULT_SYSTEM_PROMPT,
    text: checkSampling('text', o.text ?? TEXT_SAMPLING),
    audio: checkSampling('audio', o.audio ?? AUDIO_SAMPLING),
    layout: optionValue('layout', o.layout),
    threads: optionValue('threads', o.threads),
    vad: optionValue('vad', o.vad),
    onsetMs: optionValue('onsetMs', o.onsetMs),
    silenceMs: optionValue('silenceMs', o.silenceMs),
    minSpeechMs: optionValue('minSpeechMs', o.minSpeechMs),
    speculateMs: speculateOption(o.speculateMs),
    lookaheadMs: optionValue('lookaheadMs', o.lookaheadMs),
  };
}

interface PassSlot extends StepSlot {
  encoder: ConformerEncoder;
  detokenizer: Detokenizer;
}

/** The stage buffers as planned, or each in bytes of its own. */
export function plannerFor(layout: 'planned' | 'separate'): Planner {
  return layout === 'separate' ? (specs) => separatePlan(specs) : (specs) => plan(specs);
}

/** What the options and the tokenizer fix for every conversation with a model. */
export interface SpeechSetup {
  options: Readonly<ResolvedSpeechOptions>;
  /** Audio frames a reply may hold, and detokenizer positions they need. */
  maxFrames: number;
  turnPositions: number;
  /** Prompt token ids (docs/model.md, Prompt and generation). */
  prompts: { system: number[]; userOpen: number[]; userClose: number[]; replyClose: number[] };
}

/** Resolves the options against the configuration and tokenizes the prompt pieces. */
export function speechSetup(c: ModelConfig, tokenizer: TextTokenizer, options: ResolvedSpeechOptions): SpeechSetup {
  const maxFrames = replyFrames(c, options.replySeconds);
  const ids = (text: string): number[] => tokenizer.encode(text);
  const system = ids(`<|startoftext|><|im_start|>system\n${options.systemPrompt}<|im_end|>\n`);
  if (system[0] !== TOKENS.startOfText || system[1] !== TOKENS.imStart)
    throw new BadInputError({ file: tokenizer.file }, 'the chat special tokens do not tokenize as themselves');
  const userOpen = ids('<|im_start|>user\n');
  const userClose = ids('<|im_end|>\n<|im_start|>assistant\n');
  const replyClose = ids('<|im_end|>\n');
  if (system.length + 2 * options.prefillChunk + userOpen.length + userClose.length + replyClose.length > options.context) {
    throw new ArgumentError(
      `context of ${options.context} positions is too small: the system prompt takes ${system.length} and a prefill chunk ${options.prefillChunk}`,
    );
  }
  return { options, maxFrames, turnPositions: maxFrames * c.detokenizer.upsample, prompts: { system, userOpen, userClose, replyClose } };
}

export class SpeechModel {
  readonly dir: string;
  readonly config: ModelConfig;
  readonly image: WeightsImage;
  readonly report: LoadReport;
  readonly tokenizer: TextTokenizer;
  readonly domain: MemoryDomain;
  readonly options: Readonly<ResolvedSpeechOptions>;
  readonly planner: Planner;
  /** Audio frames a reply may hold, and detokenizer positions they need. */
  readonly maxFrames: number;
  readonly turnPositions: number;
  readonly slot: PassSlot;
  readonly prompts: Prompts;
  readonly arenas: readonly Arena[];
  #conversations = 0;

  private constructor(
    dir: string,
    domain: MemoryDomain,
    loaded: { config: ModelConfig; image: WeightsImage; report: LoadReport },
    tokenizer: TextTokenizer,
    options: ResolvedSpeechOptions,
  ) {
    this.dir = dir;
    this.domain = domain;
    this.config = loaded.config;
    this.image = loaded.image;
    this.report = loaded.report;
    this.tokenizer = tokenizer;
    this.options = Object.freeze(options);
    this.planner = plannerFor(options.layout);
    const c = this.config;
    const setup = speechSetup(c, tokenizer, options);
    this.maxFrames = setup.maxFrames;
    this.turnPositions = setup.turnPositions;
    const { system, userOpen, userClose, replyClose } = setup.prompts;
    const model = domain.owner('model', 0);
    const ticket = domain.owner('ticket', 0);
    const { value, arenas } = sized(
      domain,
      [
        { owner: model, name: 'model derived' },
        { owner: ticket, name: 'ticket 0 scratch' },
      ],
      1 << 30,
      ([derivedArena, work]) => {
        const derived: Workspace = arenaWorkspace(derivedArena!, 'derived', 'model');
        const meta = (name: string, v: number[]): Int32Array => {
          const a = derivedArena!.carve(`prompt.${name}`, 'metadata', Int32Array, v.length);
          a.set(v);
          return a;
        };
        const prompts: Prompts = {
          system: meta('system', system),
          userOpen: meta('user_open', userOpen),
          userClose: meta('user_close', userClose),
          replyClose: meta('reply_close', replyClose),
        };
        const w = work!;
        const encoder = new ConformerEncoder(c, this.image, w, derived, {
          segmentSeconds: options.segmentSeconds,
          tiles: DEFAULT_ENCODER_TILES,
          planner: this.planner,
        });
        const step = buildStepSlot(c, this.image, w, derived, { chunk: options.prefillChunk, context: options.context, planner: this.planner });
        const detokenizer = new Detokenizer(c, this.image, w, derived, { turnPositions: this.turnPositions, planner: this.planner });
        const slot: PassSlot = { ...step, encoder, detokenizer };
        return { slot, prompts };
      },
    );
    this.slot = value.slot;
    this.prompts = value.prompts;
    this.arenas = arenas;
  }

  /** Loads a checkpoint folder (weights, configuration, tokenizer) and plans its workspaces. */
  static load(dir: string, domain: MemoryDomain, options: SpeechModelOptions = {}): SpeechModel {
    const loaded = loadCheckpoint(dir, domain, false);
    try {
      const o = resolveSpeechOptions(loaded.config, options);
      setComputeThreads(o.threads);
      const tokenizer = loadTokenizer(dir, loaded.config.backbone.vocab);
      return new SpeechModel(dir, domain, loaded, tokenizer, o);
    } catch (error) {
      // A refused or failed workspace leaves nothing of the load held.
      loaded.release();
      throw error;
    }
  }

  /**
   * A new conversation (state carved now; call `ready()` before talking). `checkpoints`: the
   * reply frames barge-in can truncate back to (0 for a conversation without barge-in).
   */
  conversation(o: { seed: number; inputRate: number; checkpoints?: number }): Conversation {
    // The index is taken only by a conversation that was built: a failed open leaves no gap.
    const c = new Conversation(this, this.#conversations, o);
    this.#conversations++;
    return c;
  }

  /** Readiness: seals the model's arenas and owners; later carves are refused and counted. */
  ready(): void {
    for (const a of this.arenas) a.seal();
    this.domain.ledger.seal(this.domain.owner('model', 0));
    this.domain.ledger.seal(this.domain.owner('ticket', 0));
  }
}

const INPUT_CHUNK = 4096;

export class Conversation {
  readonly model: SpeechModel;
  readonly index: number;
  readonly inputRate: number;
  readonly dialogue: Dialogue;
  readonly detokenizer: DetokenizerState;
  readonly arena: Arena;
  /** Wall milliseconds per stage (CLOCKS order) and the count of each. */
  readonly stageMs: Float64Array; // [CLOCKS]
  readonly stageCount: Float64Array; // [CLOCKS]
  readonly #mel: MelFrontend;
  readonly #rows: Float32Array; // the user segment's raw mel rows
  readonly #resampler: Resampler; // input rate → 16 kHz
  readonly #resampled: Float32Array;
  readonly #pcm: Float32Array; // one code frame (or the flush) at the device rate
  #segmentSamples = 0;
  readonly #maxSegment: number; // input samples in the longest segment
  #givenRows = 0; // rows of the open segment handed in as mel rows (listenRows)
  readonly #segmentRows: number; // rows of the longest segment
  readonly #input: Float32Array; // one listen call's samples, non-finite ones zeroed
  /** Non-finite input samples taken as silence so far. */
  nonFinite = 0;
  readonly #clocks: StageClocks;
  readonly #watch = new Stopwatch();

  constructor(model: SpeechModel, index: number, o: { seed: number; inputRate: number; checkpoints?: number }) {
    const c = model.config;
    this.model = model;
    this.index = index;
    this.inputRate = optionValue('inputRate', o.inputRate);
    const owner = model.domain.owner('conversation', index);
    const mo = model.options;
    const segRows = melRows(c, segmentSamples(c, mo.segmentSeconds));
    const kvBytes = backboneStateSizes(c, mo.context, mo.kv).reduce((s, r) => s + r.bytes, 0);
    const { value, arenas } = sized(model.domain, [{ owner, name: `conversation ${index} state` }], (1 << 28) + kvBytes, ([arena]) => {
      const a = arena!;
      const clocks = carveClocks(a, '');
      const dialogue = new Dialogue(c, a, {
        context: mo.context,
        kv: mo.kv,
        prefillChunk: mo.prefillChunk,
        maxFrames: model.maxFrames,
        text: mo.text,
        audio: mo.audio,
        seed: o.seed,
        prompts: model.prompts,
        clocks,
        checkpoints: o.checkpoints ?? 0,
      });
      const detokenizer = new DetokenizerState(c, a, arenaWorkspace(a, 'recurrence', 'detok'), {
        turnPositions: model.turnPositions,
        outputRate: mo.outputRate,
      });
      const f = c.frontend;
      const front = arenaWorkspace(a, 'workspace.frontend', 'frontend');
      const mel = new MelFrontend({ sampleRate: f.sampleRate, nFft: f.nFft, winLength: f.winLength, hop: f.hop, nMels: f.nMels }, front);
      const resampler = new Resampler(this.inputRate, f.sampleRate, {}, front);
      return {
        clocks,
        dialogue,
        detokenizer,
        mel,
        resampler,
        rows: a.carve('mel_rows', 'workspace.frontend', Float32Array, segRows * f.nMels),
        input: a.carve('frontend.input', 'workspace.frontend', Float32Array, INPUT_CHUNK),
        resampled: a.carve('frontend.resampled', 'workspace.frontend', Float32Array, resampler.maxOutput(INPUT_CHUNK) + 1),
        pcm: a.carve('playback.pcm', 'playback.payload', Float32Array, model.slot.detokenizer.maxSamples(detokenizer)),
      };
    });
    this.arena = arenas[0]!;
    this.#clocks = value.clocks;
    this.stageMs = value.clocks.ms;
    this.stageCount = value.clocks.count;
    this.dialogue = value.dialogue;
    this.detokenizer = value.detokenizer;
    this.#mel = value.mel;
    this.#resampler = value.resampler;
    this.#rows = value.rows;
    this.#resampled = value.resampled;
    this.#input = value.input;
    this.#maxSegment = Math.floor(mo.segmentSeconds * this.inputRate);
    this.#segmentRows = segRows;
    this.#pcm = value.pcm;
  }

  /** Samples per `listen` call at most. */
  static readonly INPUT_CHUNK = INPUT_CHUNK;

  /** The backbone state (KV cache, short-conv columns, position). */
  get backbone(): BackboneState {
    return this.dialogue.state;
  }

  /** Positions of the system prompt (kept when the context is compacted). */
  get keep(): number {
    return this.dialogue.keep;
  }

  /** Positions forgotten by the context policy so far, and how many times. */
  get dropped(): number {
    return this.dialogue.dropped;
  }

  get compactions(): number {
    return this.dialogue.compactions;
  }

  /** Readiness: seals this conversation's arena and owner, then runs the system prompt. */
  ready(): void {
    this.arena.seal();
    this.model.domain.ledger.seal(this.model.domain.owner('conversation', this.index));
    while (!this.dialogue.prefillSystem(this.model.slot));
  }

  /** Input samples the open segment can still take. */
  get segmentRoom(): number {
    return this.#maxSegment - this.#segmentSamples;
  }

  #tic(): void {
    this.#watch.tic();
  }

  #toc(stage: number): void {
    this.#watch.toc(this.#clocks, stage);
  }

  /**
   * Feeds user samples at the input rate, at most INPUT_CHUNK per call (more is a usage error).
   * Returns how many were taken: fewer than `count` once the segment is full (end it then).
   * Non-finite samples (NaN, ±Infinity) are taken as silence and counted in `nonFinite`.
   * Real-time path: allocates nothing, never throws for the audio itself.
   */
  listen(samples: Float32Array, count = samples.length): number {
    if (count > INPUT_CHUNK) throw new ArgumentError(`listen takes at most ${INPUT_CHUNK} samples per call, got ${count}`);
    const n = Math.min(count, this.#maxSegment - this.#segmentSamples);
    if (n <= 0) return 0;
    const input = this.#input;
    for (let i = 0; i < n; i++) {
      const x = samples[i]!;
      if (Number.isFinite(x)) input[i] = x;
      else {
        input[i] = 0;
        this.nonFinite++;
      }
    }
    this.#tic();
    const m = this.#resampler.push(input, this.#resampled, 0, n);
    this.#mel.push(this.#resampled, this.#rows, m);
    this.#segmentSamples += n;
    this.#toc(CLOCK_FRONTEND);
    return n;
  }

  /**
   * Feeds the user's segment as raw log-mel rows (`count` rows of `rows` from `at`) instead of
   * samples: a caller that runs the frontend itself (the duplex session). Rows past the longest
   * segment are dropped; returns the rows taken. Do not mix with `listen` in one segment.
   */
  listenRows(rows: Float32Array, at: number, count: number): number {
    const nMels = this.model.config.frontend.nMels;
    const n = Math.max(0, Math.min(count, this.#segmentRows - this.#givenRows));
    native.copyF32(rows, at, this.#rows, this.#givenRows * nMels, n * nMels);
    this.#givenRows += n;
    return n;
  }

  /**
   * Ends the user segment: encodes it, and prefills the user turn (the system prompt ran at
   * `ready()`). Returns the encoder frames. `onMel` and `onEncoded` are taps; of rows handed in
   * (`listenRows`), the turn is the first `rows`.
   */
  endSegment(
    taps: { mel?(rows: Float32Array, count: number): void; encoded?(encoder: Float32Array, adapter: Float32Array, frames: number): void } = {},
    rows = Number.POSITIVE_INFINITY,
  ): number {
    const slot = this.model.slot;
    let T = Math.min(this.#givenRows, rows);
    if (T === 0) {
      this.#tic();
      const tail = this.#resampler.finish(this.#resampled, 0);
      this.#mel.push(this.#resampled, this.#rows, tail);
      this.#mel.finish(this.#rows);
      T = this.#mel.rows;
      this.#toc(CLOCK_FRONTEND);
    }
    taps.mel?.(this.#rows, T);
    this.#tic();
    const adapter = slot.encoder.encode(this.#rows, T);
    const frames = slot.encoder.frames(T);
    this.#toc(CLOCK_ENCODER);
    taps.encoded?.(slot.encoder.encoderOutput, adapter, frames);
    this.dialogue.beginUser(slot);
    this.dialogue.pushRows(slot, adapter, 0, frames);
    this.dialogue.endUser(slot);
    this.#mel.reset();
    this.#resampler.reset();
    this.#segmentSamples = 0;
    this.#givenRows = 0;
    return frames;
  }

  /**
   * Drops the open segment (speech too short to be a turn): nothing of it reaches the model.
   */
  discardSegment(): void {
    this.#mel.reset();
    this.#resampler.reset();
    this.#segmentSamples = 0;
    this.#givenRows = 0;
  }

  /** Generates the assistant's whole reply to the prefilled user turn. */
  reply(sink: ReplySink = {}): ReplySummary {
    this.startReply();
    while (this.replyStep(sink) !== EMIT_DONE);
    return this.finishReply(sink);
  }

  #detokOpen = false;
  #samples = 0;

  /** Readies the reply to the prefilled user turn, to be generated a `replyStep` at a time. */
  startReply(): void {
    this.#detokOpen = false;
    this.#samples = 0;
    this.detokenizer.startTurn();
  }

  /**
   * One backbone position of the reply: its text token or audio frame goes to `sink`, the
   * frame's device-rate samples too. Returns the dialogue's EMIT_* value; EMIT_DONE at the end
   * (then call `finishReply`). Allocates nothing.
   */
  replyStep(sink: ReplySink): number {
    const slot = this.model.slot;
    const d = this.dialogue;
    const taps = sink.hidden !== undefined || sink.textLogits !== undefined || sink.audioLogits !== undefined || sink.bins !== undefined ? sink : null;
    const e = d.step(slot, taps);
    if (e === EMIT_DONE) return e;
    if (e === EMIT_TEXT) {
      sink.text?.(d.token);
      return e;
    }
    sink.audio?.(d.codes);
    if (e === EMIT_END_OF_AUDIO) {
      if (this.#detokOpen) this.#samples += this.#finishAudio(sink);
      this.#detokOpen = false;
      return e;
    }
    this.#tic();
    if (!this.#detokOpen) this.detokenizer.startTurn();
    this.#detokOpen = true;
    const det = slot.detokenizer;
    const n = det.frame(this.detokenizer, d.codes, this.#pcm, 0);
    this.#toc(CLOCK_DETOKENIZER);
    if (sink.bins !== undefined) sink.bins(det.bins);
    sink.pcm?.(this.#pcm, n);
    this.#samples += n;
    return e;
  }

  /** Flushes the reply's last audio to `sink` and sums it up. */
  finishReply(sink: ReplySink): ReplySummary {
    const d = this.dialogue;
    if (this.#detokOpen) this.#samples += this.#finishAudio(sink);
    this.#detokOpen = false;
    return { textTokens: d.textTokens, audioFrames: d.frames, samples: this.#samples, stop: d.stop, endOfAudio: d.endOfAudio };
  }

  /**
   * Barge-in: the listener heard `heard` frames of the reply being played; the reply ends
   * there (Dialogue.truncate) and its unplayed audio is dropped. False when that frame's
   * checkpoint is not kept (then nothing changes).
   */
  truncateReply(heard: number): boolean {
    if (!this.dialogue.truncate(heard)) return false;
    this.#detokOpen = false;
    return true;
  }

  #finishAudio(sink: ReplySink): number {
    this.#tic();
    const n = this.model.slot.detokenizer.finish(this.detokenizer, this.#pcm, 0);
    this.#toc(CLOCK_DETOKENIZER);
    sink.pcm?.(this.#pcm, n);
    return n;
  }
}
