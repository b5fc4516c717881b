/**
 * The library API: `load()` a model under a memory cap into an Engine (the five pinned stage
 * workers), `engine.open()` conversations on it while others run, talk to each through push
 * methods, a Node Duplex stream, typed events or an async iterator, and `close()` both to
 * return every byte to the cap.
 *
 * A turn is the user's speech up to `endTurn()` (or the longest segment, `segmentSeconds`,
 * whichever comes first), or, in VAD mode, what the frontend stage's endpointer finds; the reply
 * streams out as it is generated. Speech written while a reply is being generated becomes the
 * next turn.
 *
 * The stages allocate nothing once a conversation is ready. This thread hands the application
 * copies: one typed array per block of input it queues and per block of reply audio it emits.
 *
 * Thread contract: one thread (the application's); the stages run in their own workers.
 */
import { EventEmitter } from 'node:events';
import { readFileSync } from 'node:fs';
import v8 from 'node:v8';
import type { DuplexDevice } from '../core/session.js';
import type { ReplyStop } from '../core/dialogue.js';
import { Duplex } from 'node:stream';
import { AbortedError, ArgumentError, BadInputError, ClosedError, UnsupportedError, type VoxslabError, type WorkerError } from '../errors.js';
import { native, WEIGHT_TYPE } from '../native.js';
import { apmAvailable } from '../dsp/aec.js';
import { MemoryDomain } from '../memory/domain.js';
import type { MemoryManifest } from '../memory/manifest.js';
import type { MemorySnapshot } from '../memory/snapshot.js';
import { optionValue } from '../options.js';
import { resolveModel } from '../io/checkpoint.js';
import { runPeriods, type ClockedDevice } from '../io/devices.js';
import type { ModelConfig } from '../model/format/config.js';
import type { SpeechModelOptions } from '../core/conversation.js';
import { Pipeline, type PinMap, type PipelineConversation, type StageThreads } from '../runtime/coordinator.js';
import {
  BARGE_FIELDS,
  BARGE_FRAMES,
  BARGE_GENERATED,
  BARGE_POSITIONS,
  BARGE_REPLY,
  BARGE_TEXT_TOKENS,
  BELL_MAIN,
  kHeard,
  kHeardReply,
  kOnsets,
  kOnsetsSeen,
  kPlayed,
  kPlayedReply,
  kVoice,
  readTurnFields,
  REC_BARGE,
  REC_DUPLEX,
  REC_CODES,
  REC_END_OF_AUDIO,
  REC_END_SEGMENT,
  REC_PCM,
  REC_SPEECH_END,
  REC_SPEECH_START,
  REC_TEXT,
  REC_TURN_END,
  SPEECH_TURN,
  TURN_FIELDS,
  TURN_FRAMES,
  TURN_POSITIONS,
  TURN_STOP,
  TURN_TEXT_TOKENS,
} from '../runtime/protocol.js';

export type SampleFormat = 'f32' | 's16';

/** A conversation's run on a duplex device (Conversation.run): its counters and buffers. */
export interface DeviceLink {
  /** Device samples so far (the device clock), and reply samples played. */
  clock: number;
  played: number;
  /** Periods with a reply owed but no audio yet, and microphone periods lost (the pipeline two seconds behind). */
  underruns: number;
  overruns: number;
  /** The loudest microphone sample of the last period (a level meter's input). */
  inputPeak: number;
  /** Playback held (fading out or silent) because the user may be speaking. */
  paused: boolean;
  readonly buffers: { played: Float32Array; mic: Float32Array; far: Float32Array; backlog: Float32Array; carry: Float32Array };
  carryAt: number;
  carryLength: number;
  /** Periods waiting for room in the capture ring (at most two seconds). */
  backlogHead: number;
  backlogCount: number;
  gain: number;
  readonly fadeStep: number;
}

export interface EngineOptions extends SpeechModelOptions {
  /** The cap on every byte the engine holds: bytes, or a size such as '2GiB'. Default: VOXSLAB_MEMORY_LIMIT, else the machine's memory. */
  memoryLimit?: number | string;
  /** Run in this memory domain instead of a new one (its cap applies). */
  domain?: MemoryDomain;
  /** Pass slots per compute stage. */
  slots?: number;
  /** CPUs per stage, or 'none' to leave thread affinity alone. */
  pin?: PinMap | 'none';
  /** Compute threads of the named stages (the others take `threads`). */
  stageThreads?: StageThreads;
  /** Milliseconds a control call to a stage worker may take. */
  callTimeoutMs?: number;
  /** Aborts loading (the workers stop and every byte is returned). */
  signal?: AbortSignal;
  /** Progress lines (generating a built-in checkpoint on first use). Default: none. */
  log?: (line: string) => void;
  /** Test mode: every stage worker traps typed-array and buffer constructors after readiness (`pipeline.stats()` counts them). */
  trapAllocations?: boolean;
  /** Test hook: the most audio frames of each conversation's n-th reply. */
  replyFrameLimits?: number[];
}

export interface ConversationOptions {
  /** Sample rate of the audio the application writes. Default 16000. */
  inputRate?: number;
  /** Sample format of the stream's bytes and of `audio` events. Default 'f32'. */
  format?: SampleFormat;
  /** Sampling seed. Default: the `seed` option's default. */
  seed?: number;
  /** Closes the conversation when aborted. */
  signal?: AbortSignal;
  /**
   * The conversation finds the user's turns itself: WebRTC's VAD and endpointing run in the
   * pipeline's frontend stage (options silenceMs, onsetMs, minSpeechMs, vad of `load`), and
   * `speech_start`/`speech_end` come from them. `endTurn()` then feeds silence enough to end
   * the speech in progress. Default false: the application ends each turn.
   */
  vad?: boolean;
  /**
   * VAD mode: the application plays the replies itself and hands what it played beside what it
   * heard (`writeDuplex`); echo cancellation (WebRTC's) runs in the capture stage, its engine held
   * under the cap. The value is the delay from a played sample to its echo in the microphone, ms
   * (0..500; the device's output plus input latency). Default: none.
   */
  echoDelayMs?: number;
}

/** What a finished turn produced. */
export interface TurnSummary {
  turn: number;
  /** The reply's text, and its token ids. */
  text: string;
  tokens: number[];
  /** Audio frames generated, and samples at the output rate. */
  frames: number;
  samples: number;
  stop: ReplyStop;
  endOfAudio: boolean;
  /** Encoder frames of the user's speech. */
  userFrames: number;
  /** Context positions in use after the turn, compactions so far, positions they dropped. */
  positions: number;
  compactions: number;
  droppedPositions: number;
  /** From the end of the user's speech to the first reply sample, ms (null: no audio). */
  firstAudioMs: number | null;
}

export interface ConversationEvents {
  speech_start: [{ turn: number }];
  /** `vad`: the frontend's endpointer ended the turn; `dropped`: it was too short to be one (no reply). */
  speech_end: [{ turn: number; samples: number; reason: 'end-turn' | 'segment-limit' | 'vad' | 'dropped' }];
  text: [{ turn: number; token: number; delta: string; text: string }];
  /**
   * VAD mode: the user spoke over reply `turn` before it was all delivered. Its undelivered audio
   * is dropped and the conversation keeps only `heardFrames` audio frames of it and the text
   * before them (null: the context could not be cut back, the reply was only silenced);
   * `generatedFrames` had been generated (at most the look-ahead beyond what was delivered).
   */
  barge_in: [{ turn: number; heardFrames: number | null; generatedFrames: number; text: string }];
  audio: [{ turn: number; pcm: Float32Array | Int16Array; sampleRate: number }];
  turn_end: [TurnSummary];
  error: [VoxslabError];
  memory: [MemoryManifest];
  close: [];
}

/** One event as the async iterator yields it. */
export type ConversationEvent = {
  [K in keyof ConversationEvents]: ConversationEvents[K] extends [infer P] ? { type: K } & (P extends object ? P : never) : { type: K };
}[keyof ConversationEvents];

/** Read through a call: a signal can fire across an await (TypeScript narrows the property). */
function isAborted(signal: AbortSignal): boolean {
  return signal.aborted;
}

const kPump = Symbol('pump');
const kFail = Symbol('fail');

function aborted(signal: AbortSignal, what: string): AbortedError {
  return new AbortedError(`${what} aborted${signal.reason instanceof Error ? `: ${signal.reason.message}` : ''}`, { cause: signal.reason });
}

/** A model loaded into the five stage workers, ready to open conversations. */
/**
 * The process's resident memory as the runtime sees it beside the ledger: what each thread's
 * JavaScript runtime holds (not charged to any owner: it is not voxslab's to plan), what of the
 * ledger's slabs is resident, and the rest.
 */
export interface RuntimeMemory {
  /** Per thread: V8's committed heap pages, and what V8 allocated outside the heap for it. */
  threads: { thread: string; heapCommitted: number; malloced: number }[];
  /** The threads' runtime bytes together. */
  runtime: number;
  /** Resident bytes of the ledger's slabs (weights, workspaces, conversations, rings). */
  ledgerResident: number;
  /** Resident pages mapped from files: Node's and the libraries' code and read-only data (Linux; 0 elsewhere). */
  files: number;
  /** The process's resident set. */
  rss: number;
  /** RSS none of the above accounts for: malloc arenas, thread stacks, the libraries' own heaps. */
  residual: number;
}

export class Engine {
  readonly pipeline: Pipeline;
  readonly domain: MemoryDomain;
  readonly config: ModelConfig;
  /** The sample rate of every reply. */
  readonly outputRate: number;
  readonly #live = new Set<Conversation>();
  #pumping = false;
  #closed: Promise<void> | null = null;

  private constructor(pipeline: Pipeline) {
    this.pipeline = pipeline;
    this.domain = pipeline.domain;
    this.config = pipeline.config;
    this.outputRate = pipeline.setup.options.outputRate;
  }

  /** Loads `model` (a checkpoint folder or a built-in name such as 'tiny') and starts the stages. */
  static async load(model = 'tiny', options: EngineOptions = {}): Promise<Engine> {
    const { memoryLimit, domain: given, slots, pin, stageThreads, callTimeoutMs, signal, log, trapAllocations, replyFrameLimits, ...speech } = options;
    if (signal?.aborted === true) throw aborted(signal, 'loading');
    const dir = resolveModel(model, log ?? (() => undefined));
    const domain = given ?? MemoryDomain.create(memoryLimit === undefined ? {} : { limit: memoryLimit });
    const po: Parameters<typeof Pipeline.start>[2] = { ...speech };
    if (slots !== undefined) po.slots = slots;
    if (pin !== undefined) po.pin = pin;
    if (stageThreads !== undefined) po.stageThreads = stageThreads;
    if (callTimeoutMs !== undefined) po.callTimeoutMs = callTimeoutMs;
    if (trapAllocations === true) po.trapAllocations = true;
    if (replyFrameLimits !== undefined) po.replyFrameLimits = replyFrameLimits;
    const pipeline = await Pipeline.start(dir, domain, po);
    try {
      await pipeline.ready();
      // The signal may have fired while the workers were starting.
      signal?.throwIfAborted();
    } catch (error) {
      await pipeline.close();
      throw signal !== undefined && isAborted(signal) ? aborted(signal, 'loading') : error;
    }
    return new Engine(pipeline);
  }

  /** Conversations open now. */
  get conversations(): number {
    return this.#live.size;
  }

  /** The bytes a conversation at `inputRate` (with `vad`: its VAD engine too) would take, and whether the cap has them now. */
  async admission(inputRate = 16000, vad = false, echoDelayMs = -1): Promise<{ planned: number; free: number; admit: boolean }> {
    const planned = await this.pipeline.plannedBytes(inputRate, undefined, vad, echoDelayMs);
    const s = this.domain.snapshot();
    const free = Math.max(0, s.limit - s.held.total - s.reserved);
    return { planned, free, admit: planned <= free };
  }

  /**
   * Opens a conversation. A conversation the cap cannot take is refused (MemoryLimitError)
   * before anything is carved.
   */
  async open(options: ConversationOptions = {}): Promise<Conversation> {
    if (this.#closed !== null) throw new ClosedError('the engine is closed');
    const inputRate = optionValue<number>('inputRate', options.inputRate ?? 16000);
    const format = options.format ?? 'f32';
    if (format !== 'f32' && format !== 's16') throw new ArgumentError(`format must be 'f32' or 's16', got '${String(format)}'`);
    const seed = optionValue<number>('seed', options.seed);
    if (options.signal?.aborted === true) throw aborted(options.signal, 'opening the conversation');
    if (options.vad !== undefined && typeof options.vad !== 'boolean') throw new ArgumentError('vad must be true or false');
    const vad = options.vad === true;
    const echo = options.echoDelayMs;
    if (echo !== undefined && !vad) throw new ArgumentError('echoDelayMs needs vad: true (echo cancellation serves conversations that find their own turns)');
    if (echo !== undefined && !apmAvailable()) throw new UnsupportedError('echo cancellation is off: the addon was built without WebRTC audio processing');
    const pc = await this.pipeline.open(echo === undefined ? { seed, inputRate, vad } : { seed, inputRate, vad, echoDelayMs: echo });
    const conv = new Conversation(this, pc, format, this.pipeline.setup.options.segmentSeconds, vad ? this.pipeline.setup.options.silenceMs : 0);
    this.#live.add(conv);
    if (options.signal !== undefined) conv.abortOn(options.signal);
    conv.emitMemory();
    this.#wake();
    return conv;
  }

  /** The memory manifest: every owner's bytes by category, the cap and the process total. */
  memory(): MemoryManifest {
    return this.domain.manifest();
  }

  /** Resident memory by thread runtime and ledger (see RuntimeMemory); asks every stage worker. */
  async runtime(): Promise<RuntimeMemory> {
    const stats = await this.pipeline.stats();
    const main = v8.getHeapStatistics();
    const threads = [
      { thread: 'main', heapCommitted: main.total_physical_size, malloced: main.malloced_memory },
      ...stats.map((s) => ({ thread: s.stage, heapCommitted: s.heapCommitted, malloced: s.malloced })),
    ];
    const runtime = threads.reduce((a, t) => a + t.heapCommitted + t.malloced, 0);
    const ledgerResident = this.domain.residentBytes() + stats.reduce((a, s) => a + s.slabResident, 0);
    const rss = process.memoryUsage.rss();
    const files = residentFileBytes();
    return { threads, runtime, ledgerResident, files, rss, residual: rss - runtime - ledgerResident - files };
  }

  snapshot(): MemorySnapshot {
    return this.domain.snapshot();
  }

  /** Ends every conversation, stops the workers and returns every byte to the cap. */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      for (const c of [...this.#live]) await c.close();
      await this.pipeline.close();
    })();
    return this.#closed;
  }

  /** @internal A conversation ended. */
  async release(conv: Conversation, pc: PipelineConversation): Promise<void> {
    this.#live.delete(conv);
    await this.pipeline.closeConversation(pc);
  }

  /** @internal New input or demand: run the pump, or wake it. */
  wake(): void {
    this.#wake();
  }

  #wake(): void {
    if (this.#pumping) this.pipeline.bells.ring(BELL_MAIN);
    else if (this.#live.size > 0) void this.#pump();
  }

  /** Moves input into the rings and replies out of them until no conversation is open. */
  async #pump(): Promise<void> {
    this.#pumping = true;
    const p = this.pipeline;
    try {
      while (this.#live.size > 0) {
        if (p.failure !== null) {
          for (const c of [...this.#live]) c[kFail](p.failure);
          break;
        }
        const seen = p.bells.read(BELL_MAIN);
        let progress = false;
        for (const c of this.#live) if (c[kPump]()) progress = true;
        // Yield to the application either way; wait for a doorbell when nothing moved.
        if (progress) await new Promise<void>((resolve) => setImmediate(resolve));
        else await p.wait(seen, 100);
      }
    } finally {
      this.#pumping = false;
    }
  }
}

/** Loads a model into a new Engine: `const engine = await load('tiny', { memoryLimit: '1GiB' })`. */
export function load(model?: string, options?: EngineOptions): Promise<Engine> {
  return Engine.load(model, options);
}

interface Waiter {
  resolve(t: TurnSummary): void;
  reject(e: Error): void;
}

/** One conversation on an Engine. */
export class Conversation extends EventEmitter<ConversationEvents> {
  readonly engine: Engine;
  readonly index: number;
  readonly inputRate: number;
  readonly outputRate: number;
  readonly format: SampleFormat;
  readonly #pc: PipelineConversation;
  /** Input not yet in the ring; `null` marks the end of a turn. */
  readonly #queue: (Float32Array | null)[] = [];
  /** Queued blocks that hold [microphone | far end] (writeDuplex), and the record they are sent through. */
  readonly #pairs = new WeakSet<Float32Array>();
  readonly #pair: Float32Array;
  #queueAt = 0; // samples of the queue's head already in the ring
  #queuedThisTurn = 0;
  #fedThisTurn = 0;
  readonly #maxTurnSamples: number;
  /** Turns of speech ended, and turns replied to (a reply may play while the next turn is spoken). */
  #spoken = 0;
  #replied = 0;
  #inTurn = false;
  /** When each turn not yet replied to ended. */
  readonly #endedAt: number[] = [];
  #firstAudioAt = -1;
  #tokens: number[] = [];
  #text = '';
  #samples = 0;
  readonly #summary = new Int32Array(TURN_FIELDS);
  /** Turn summaries read from the events ring. */
  #summaries = 0;
  readonly #barge = new Int32Array(BARGE_FIELDS);
  /** Barge-in (VAD mode): onsets answered, verdicts still due, the reply whose audio is dropped, samples of this reply delivered. */
  #onsetsSeen = 0;
  /** The device the conversation runs on (`run`), or null. */
  #link: DeviceLink | null = null;
  #verdictsDue = 0;
  #dropReply = -1;
  #delivered = 0;
  readonly #frame: Int32Array;
  readonly #pcm: Float32Array;
  #outputPaused = false;
  #stream: Duplex | null = null;
  #streamEndPending = false;
  #closing: Promise<void> | null = null;
  readonly #waiters: Waiter[] = [];
  readonly #iterators = new Set<(e: ConversationEvent | null) => void>();

  /** @internal Use `engine.open()`. */
  /** VAD mode: the silence `endTurn()` feeds (null: the application ends turns). */
  readonly #flush: Float32Array | null;

  constructor(engine: Engine, pc: PipelineConversation, format: SampleFormat, segmentSeconds: number, vadSilenceMs = 0) {
    super();
    this.engine = engine;
    this.#pc = pc;
    this.index = pc.index;
    this.inputRate = pc.inputRate;
    this.outputRate = engine.outputRate;
    this.format = format;
    this.#maxTurnSamples = Math.floor(segmentSeconds * pc.inputRate);
    this.#frame = new Int32Array(engine.config.audio.codebooks);
    this.#pcm = new Float32Array(pc.output.maxPayload);
    this.#pair = new Float32Array(2 * pc.chunk);
    this.#flush = vadSilenceMs > 0 ? new Float32Array(Math.ceil(((vadSilenceMs + 200) * pc.inputRate) / 1000)) : null;
  }

  get closed(): boolean {
    return this.#closing !== null;
  }

  /**
   * Queues user speech at `inputRate`: floats in [-1, 1] or 16-bit integers. Returns false when
   * more than a second of input waits for the pipeline (slow down, as with a stream's `write`).
   * A block holding NaN or ±Infinity is refused whole (BadInputError naming the first such
   * sample's offset in the block): nothing of it is queued, and the conversation goes on.
   */
  write(samples: Float32Array | Int16Array): boolean {
    let f: Float32Array;
    if (samples instanceof Float32Array) {
      checkFinite(samples, 'samples');
      f = samples.slice();
    } else if (samples instanceof Int16Array) {
      f = new Float32Array(samples.length);
      for (let i = 0; i < samples.length; i++) f[i] = (samples[i] as number) / 32768;
    } else throw new ArgumentError('write takes a Float32Array or an Int16Array of samples');
    return this.#enqueue(f);
  }

  /**
   * Queues what the microphone heard (`mic`) beside what was played at the same device time
   * (`far`, resampled to `inputRate`), for a conversation opened with `echoDelayMs`: the capture
   * stage cancels the echo of `far` from `mic`. Floats, equal lengths; both are copied.
   */
  writeDuplex(mic: Float32Array, far: Float32Array): boolean {
    if (!(mic instanceof Float32Array) || !(far instanceof Float32Array) || mic.length !== far.length)
      throw new ArgumentError('writeDuplex takes two Float32Arrays of equal length (microphone, far end)');
    if (!this.#pc.echo) throw new ArgumentError(`conversation ${this.index} was opened without echoDelayMs: write() the microphone alone`);
    checkFinite(mic, 'mic');
    checkFinite(far, 'far');
    const block = new Float32Array(2 * mic.length);
    block.set(mic);
    block.set(far, mic.length);
    this.#pairs.add(block);
    return this.#enqueue(block);
  }

  #enqueue(f: Float32Array): boolean {
    if (this.#closing !== null) throw new ClosedError(`conversation ${this.index} is closed`);
    if (this.#link !== null) throw new ArgumentError(`conversation ${this.index} runs on a device: its microphone is the input`);
    if (f.length > 0) {
      this.#queue.push(f);
      this.#queuedThisTurn += f.length;
      this.engine.wake();
    }
    return this.#backlog() <= this.inputRate;
  }

  /**
   * Queues user speech as little-endian bytes in the conversation's `format`: whole samples
   * only (ArgumentError otherwise). Decoded straight into the queued block: one copy.
   */
  writeBytes(bytes: Uint8Array): boolean {
    const per = this.format === 'f32' ? 4 : 2;
    if (bytes.length % per !== 0) throw new ArgumentError(`${bytes.length} bytes is not whole ${this.format} samples`);
    const n = bytes.length / per;
    const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const f = new Float32Array(n);
    if (per === 4) {
      for (let i = 0; i < n; i++) f[i] = v.getFloat32(4 * i, true);
      checkFinite(f, 'samples');
    } else for (let i = 0; i < n; i++) f[i] = v.getInt16(2 * i, true) / 32768;
    return this.#enqueue(f);
  }

  /** Ends the user's turn: the reply follows. A turn with no speech is ignored. */
  endTurn(): void {
    if (this.#closing !== null) throw new ClosedError(`conversation ${this.index} is closed`);
    if (this.#queuedThisTurn === 0) return;
    if (this.#flush !== null) {
      // VAD mode: silence ends the speech in progress, as it would live.
      this.#queue.push(this.#flush);
      this.#queuedThisTurn = 0;
      this.engine.wake();
      return;
    }
    this.#queue.push(null);
    this.#queuedThisTurn = 0;
    this.engine.wake();
  }

  /** Resolves with the next turn's summary when its reply has been played out. */
  nextTurn(): Promise<TurnSummary> {
    if (this.#closing !== null) return Promise.reject(new ClosedError(`conversation ${this.index} is closed`));
    return new Promise((resolve, reject) => this.#waiters.push({ resolve, reject }));
  }

  /**
   * The conversation as a Duplex stream: write PCM bytes (`format`, little-endian, mono, at
   * `inputRate`); read the replies' PCM bytes (`format`, at `outputRate`). Ending the writable
   * side ends the turn; the readable side ends after that turn's reply.
   */
  stream(): Duplex {
    if (this.#stream !== null) return this.#stream;
    const bytesPer = this.format === 'f32' ? 4 : 2;
    let rest: Buffer = Buffer.alloc(0);
    const conv = this;
    const s = new Duplex({
      write(chunk: Buffer, _enc, done) {
        try {
          // A sample may straddle two chunks: keep the stray bytes for the next one.
          const all = rest.length > 0 ? Buffer.concat([rest, chunk]) : chunk;
          const whole = all.length - (all.length % bytesPer);
          rest = Buffer.from(all.subarray(whole));
          if (whole > 0) conv.writeBytes(all.subarray(0, whole));
          conv.#whenDrained(done);
        } catch (error) {
          done(error as Error);
        }
      },
      final(done) {
        if (rest.length > 0) {
          done(new ArgumentError(`the stream ended inside a sample (${rest.length} stray bytes of a ${bytesPer}-byte ${conv.format} sample)`));
          return;
        }
        conv.#streamEndPending = true;
        conv.endTurn();
        conv.#endStreamIfDone();
        done();
      },
      read() {
        if (conv.#outputPaused) {
          conv.#outputPaused = false;
          conv.engine.wake();
        }
      },
      destroy(error, done) {
        if (conv.#stream === s) conv.#stream = null;
        done(error);
      },
    });
    this.#stream = s;
    return s;
  }

  /**
   * Resolves when at most a second of input waits for the pipeline again (at once if it does
   * now): after a `write` that returned false, write more only then. Resolves at close too.
   */
  drained(): Promise<void> {
    if (this.#closing !== null) return Promise.resolve();
    return new Promise((resolve) => this.#whenDrained(resolve));
  }

  /**
   * Holds the reply back: no more `audio` events until `resumeOutput()`. The reply waits in the
   * pipeline's rings, which stall the stages that make it (a consumer that cannot keep up, such
   * as a socket whose client does not read, holds nothing on this thread).
   */
  pauseOutput(): void {
    this.#outputPaused = true;
  }

  /** Lets the held reply flow again (see `pauseOutput`). */
  resumeOutput(): void {
    if (!this.#outputPaused) return;
    this.#outputPaused = false;
    this.engine.wake();
  }

  /** True while the reply is held back (`pauseOutput`, or the stream's reader is full). */
  get outputPaused(): boolean {
    return this.#outputPaused;
  }

  /** Every event in order, until the conversation closes. */
  events(): AsyncIterableIterator<ConversationEvent> {
    const buffered: (ConversationEvent | null)[] = [];
    let wake: (() => void) | null = null;
    const push = (e: ConversationEvent | null): void => {
      buffered.push(e);
      wake?.();
    };
    if (this.#closing !== null) buffered.push(null);
    else this.#iterators.add(push);
    const it: AsyncIterableIterator<ConversationEvent> = {
      next: async () => {
        while (buffered.length === 0) await new Promise<void>((r) => (wake = r));
        wake = null;
        const e = buffered.shift()!;
        if (e === null) {
          buffered.push(null);
          return { done: true, value: undefined };
        }
        return { done: false, value: e };
      },
      return: async () => {
        this.#iterators.delete(push);
        return { done: true, value: undefined };
      },
      [Symbol.asyncIterator]: () => it,
    };
    return it;
  }

  /** Ends the conversation (a reply in progress stops) and returns its bytes to the cap. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      try {
        await this.engine.release(this, this.#pc);
      } finally {
        this.#end(new ClosedError(`conversation ${this.index} closed`));
      }
    })();
    return this.#closing;
  }

  /** @internal */
  abortOn(signal: AbortSignal): void {
    const onAbort = (): void => {
      const e = aborted(signal, `conversation ${this.index}`);
      this.#rejectWaiters(e);
      this.#stream?.destroy(e);
      void this.close();
    };
    signal.addEventListener('abort', onAbort, { once: true });
    this.once('close', () => signal.removeEventListener('abort', onAbort));
  }

  /** @internal */
  emitMemory(): void {
    this.#emit('memory', this.engine.memory());
  }

  /** @internal A stage worker failed: the conversation ends with the error. */
  [kFail](error: WorkerError): void {
    if (this.#closing !== null) return;
    this.#emit('error', error);
    this.#rejectWaiters(error);
    this.#stream?.destroy(error);
    void this.close();
  }

  #end(reason: Error): void {
    this.#rejectWaiters(reason);
    // Writers waiting for room go on (their next write is refused as closed).
    for (const cb of this.#drainCallbacks.splice(0)) cb();
    if (this.#stream !== null && !this.#stream.destroyed) this.#stream.push(null);
    for (const push of this.#iterators) push(null);
    this.#iterators.clear();
    this.emit('close');
  }

  #rejectWaiters(e: Error): void {
    for (const w of this.#waiters.splice(0)) w.reject(e);
  }

  #emit<K extends keyof ConversationEvents>(type: K, ...args: ConversationEvents[K]): void {
    // An 'error' without a listener is not thrown: it rejects `nextTurn()` and ends the iterators.
    if (type !== 'error' || this.listenerCount('error') > 0) this.emit(type, ...(args as never));
    if (this.#iterators.size > 0) {
      const payload = args[0] as object | undefined;
      const e = (type === 'error' ? { type, error: payload } : { type, ...(payload ?? {}) }) as unknown as ConversationEvent;
      for (const push of this.#iterators) push(e);
    }
  }

  #backlog(): number {
    let n = -this.#queueAt;
    for (const q of this.#queue) if (q !== null) n += this.#pairs.has(q) ? q.length / 2 : q.length;
    return n;
  }

  #drainCallbacks: (() => void)[] = [];

  #whenDrained(done: () => void): void {
    if (this.#backlog() <= this.inputRate) done();
    else this.#drainCallbacks.push(done);
  }

  /**
   * Barge-in (VAD mode): a speech onset the frontend confirmed is answered at once with what
   * this thread had delivered of the reply then (kHeard*): the Depthformer stage judges it and
   * sends a BARGE record. Until that verdict, and while speech may be under way, no reply audio
   * is delivered.
   */
  #answerOnsets(): boolean {
    const pc = this.#pc;
    const w = pc.duplex;
    const onsets = Atomics.load(w, kOnsets);
    if (onsets === this.#onsetsSeen) return false;
    Atomics.store(w, kHeardReply, this.#replied);
    Atomics.store(w, kHeard, this.#delivered);
    this.#verdictsDue += onsets - this.#onsetsSeen;
    this.#onsetsSeen = onsets;
    Atomics.store(w, kOnsetsSeen, onsets);
    this.engine.pipeline.bells.ring(this.engine.pipeline.topology.bell('depthformer'));
    return true;
  }

  /** A BARGE record: the verdict on one onset. */
  #verdict(): void {
    const b = this.#barge;
    this.#pc.events.read(b, 0);
    this.#verdictsDue--;
    const reply = b[BARGE_REPLY]!;
    if (reply < 0) return;
    this.#dropReply = reply;
    if (this.#link !== null && reply === this.#replied) {
      // What the device had not played of the cut reply is gone too.
      this.#link.carryAt = this.#link.carryLength;
      this.#link.gain = 0;
    }
    const frames = b[BARGE_FRAMES]!;
    if (frames >= 0) {
      // What stays of the reply: its summary and text as the context now holds them.
      const s = this.#summary;
      s[TURN_FRAMES] = frames;
      s[TURN_TEXT_TOKENS] = b[BARGE_TEXT_TOKENS]!;
      s[TURN_POSITIONS] = b[BARGE_POSITIONS]!;
      s[TURN_STOP] = 2;
      if (this.#tokens.length > b[BARGE_TEXT_TOKENS]!) {
        this.#tokens = this.#tokens.slice(0, b[BARGE_TEXT_TOKENS]!);
        this.#text = this.engine.pipeline.tokenizer.decode(this.#tokens);
      }
    }
    this.#emit('barge_in', { turn: reply, heardFrames: frames >= 0 ? frames : null, generatedFrames: b[BARGE_GENERATED]!, text: this.#text });
  }

  /** @internal One pass of the pump: input in, events and audio out. */
  [kPump](): boolean {
    if (this.#closing !== null) return false;
    const pc = this.#pc;
    let progress = false;
    if (pc.vad && this.#answerOnsets()) progress = true;
    const link = this.#link;
    if (link !== null && link.backlogCount > 0 && this.#flushBacklog(link, link.buffers.mic.length)) progress = true;
    // Input, up to the ring's room; a turn ends at endTurn() or at the longest segment (in VAD
    // mode, where the frontend's endpointer says).
    while (this.#flush !== null && this.#queue.length > 0 && this.#feed(this.#queue[0]!, pc.chunk)) progress = true;
    while (this.#flush === null && this.#queue.length > 0) {
      const head = this.#queue[0]!;
      if (head === null) {
        if (!pc.input.write(REC_END_SEGMENT, null, 0, 0)) break;
        this.#queue.shift();
        this.#endTurnFed('end-turn');
        progress = true;
        continue;
      }
      if (this.#fedThisTurn === 0 && !this.#inTurn) {
        this.#inTurn = true;
        this.#emit('speech_start', { turn: this.#spoken });
      }
      const room = this.#maxTurnSamples - this.#fedThisTurn;
      if (room === 0) {
        if (!pc.input.write(REC_END_SEGMENT, null, 0, 0)) break;
        this.#endTurnFed('segment-limit');
        progress = true;
        continue;
      }
      if (!this.#feed(head, Math.min(pc.chunk, room))) break;
      progress = true;
    }
    if (this.#drainCallbacks.length > 0 && this.#backlog() <= this.inputRate) for (const cb of this.#drainCallbacks.splice(0)) cb();
    if (this.#events()) progress = true;
    // A device pulls the reply audio itself, period by period (#pull).
    if (this.#link === null && this.#output()) progress = true;
    return progress;
  }

  /** Text, frames, turn summaries and speech events, in order (up to a turn's summary with `toSummary`); true if any was taken. */
  #events(toSummary = false): boolean {
    const pc = this.#pc;
    let progress = false;
    const ev = pc.events;
    for (let kind = ev.peekKind(); kind >= 0; kind = ev.peekKind()) {
      if (kind === REC_TEXT) {
        const token = ev.peekInt(0);
        ev.skip();
        this.#tokens.push(token);
        const text = this.engine.pipeline.tokenizer.decode(this.#tokens);
        const delta = text.startsWith(this.#text) ? text.slice(this.#text.length) : text;
        this.#text = text;
        this.#emit('text', { turn: this.#replied, token, delta, text });
      } else if (kind === REC_CODES || kind === REC_END_OF_AUDIO) {
        ev.read(this.#frame, 0);
      } else if (kind === REC_TURN_END) {
        ev.read(this.#summary, 0);
        this.#summaries++;
        if (toSummary) return true;
      } else if (kind === REC_BARGE) this.#verdict();
      else if (kind === REC_SPEECH_START) {
        ev.skip();
        this.#inTurn = true;
        this.#fedThisTurn = 0;
        this.#emit('speech_start', { turn: this.#spoken });
      } else if (kind === REC_SPEECH_END) {
        const why = ev.peekInt(0);
        ev.skip();
        if (why === SPEECH_TURN) this.#endTurnFed('vad');
        else {
          this.#emit('speech_end', { turn: this.#spoken, samples: this.#fedThisTurn, reason: 'dropped' });
          this.#inTurn = false;
        }
      } else ev.skip();
      progress = true;
    }
    return progress;
  }

  /** Whether reply audio must wait (VAD): a verdict is due, or the user may be speaking. */
  #held(): boolean {
    const pc = this.#pc;
    return pc.vad && (this.#verdictsDue > 0 || Atomics.load(pc.duplex, kVoice) !== 0);
  }

  /**
   * Reply audio to the application, unless the stream's reader is behind (the rings then hold
   * the reply back), or (VAD) the user may be speaking over it; a reply cut by a barge-in is dropped.
   */
  #output(): boolean {
    const pc = this.#pc;
    let progress = false;
    const out = pc.output;
    const hold = this.#held();
    for (;;) {
      const kind = out.peekKind();
      if (kind < 0) break;
      const dropping = this.#dropReply === this.#replied;
      if (kind === REC_PCM && dropping) {
        out.skip();
        progress = true;
        continue;
      }
      if (!dropping && (hold || this.#outputPaused)) break;
      progress = true;
      if (kind === REC_PCM) {
        const n = out.read(this.#pcm, 0);
        if (n === 0) continue;
        if (this.#firstAudioAt < 0) this.#firstAudioAt = performance.now();
        this.#samples += n;
        this.#heard(n);
        const pcm = this.format === 'f32' ? this.#pcm.slice(0, n) : toS16(this.#pcm, n);
        this.#emit('audio', { turn: this.#replied, pcm, sampleRate: this.outputRate });
        if (this.#stream !== null && !this.#stream.push(Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength))) this.#outputPaused = true;
      } else {
        out.skip();
        if (kind === REC_TURN_END) this.#replyOut();
      }
    }
    return progress;
  }

  /** `n` more samples of the reply delivered (played, on a device): the look-ahead runs from here. */
  #heard(n: number): void {
    this.#delivered += n;
    const pc = this.#pc;
    if (!pc.vad) return;
    Atomics.store(pc.duplex, kPlayed, this.#delivered);
    this.engine.pipeline.bells.ring(this.engine.pipeline.topology.bell('depthformer'));
  }

  /** The reply's end came out of the output ring: the turn is over, the next reply's count starts. */
  #replyOut(): void {
    const pc = this.#pc;
    // The Depthformer stage writes the turn's summary before playback can pass its end on.
    if (this.#summaries <= this.#replied) this.#events(true);
    this.#turnEnd();
    this.#delivered = 0;
    if (!pc.vad) return;
    Atomics.store(pc.duplex, kPlayed, 0);
    Atomics.store(pc.duplex, kPlayedReply, this.#replied);
    this.engine.pipeline.bells.ring(this.engine.pipeline.topology.bell('depthformer'));
  }

  /**
   * Runs the conversation on a duplex device (io/loopback.ts, io/devices.ts), one device period
   * at a time: the reply is played as the device asks for it (held, with a fade, while the user
   * may be speaking; what was played is what the listener heard), and what the microphone heard
   * goes into the pipeline beside what was played, for echo cancellation.
   *
   * The conversation must find its own turns with echo cancellation (`vad: true`, `echoDelayMs`),
   * listen at the device's rate, and the engine must speak at it. A device with `start` (a real
   * one) runs on its own clock; one without (the loopback device) runs in lockstep with the
   * pipeline: each period waits until every stage has done all it can, so a run is repeatable
   * byte for byte and faster than real time. Resolves after `seconds` of device time, or when
   * `signal` aborts or `until` says so.
   */
  async run(
    device: DuplexDevice & Partial<ClockedDevice> & { stop?(): Promise<void> },
    o: { seconds: number; signal?: AbortSignal; until?: (link: DeviceLink) => boolean; fadeMs?: number },
  ): Promise<DeviceLink> {
    const pc = this.#pc;
    if (this.#closing !== null) throw new ClosedError(`conversation ${this.index} is closed`);
    if (this.#link !== null) throw new ArgumentError(`conversation ${this.index} already runs on a device`);
    if (!pc.vad || !pc.echo) throw new ArgumentError('a conversation on a device is opened with vad: true and echoDelayMs');
    if (device.rate !== this.inputRate || device.rate !== this.outputRate)
      throw new ArgumentError(
        `the device runs at ${device.rate} Hz; the conversation listens at ${this.inputRate} Hz and the engine speaks at ${this.outputRate} Hz`,
      );
    if (!(o.seconds > 0)) throw new ArgumentError(`run: seconds must be positive, got ${o.seconds}`);
    const fadeMs = o.fadeMs ?? 20;
    if (!(fadeMs >= 1 && fadeMs <= 1000)) throw new ArgumentError(`fadeMs must be 1..1000, got ${fadeMs}`);
    const n = device.period;
    if (2 * n > pc.input.maxPayload) throw new ArgumentError(`a device period of ${n} samples is more than the capture ring takes`);
    const link: DeviceLink = {
      clock: 0,
      played: 0,
      underruns: 0,
      overruns: 0,
      inputPeak: 0,
      paused: false,
      buffers: {
        played: new Float32Array(n),
        mic: new Float32Array(n),
        far: new Float32Array(n),
        backlog: new Float32Array(Math.max(1, Math.ceil((2 * device.rate) / n)) * 2 * n),
        carry: new Float32Array(pc.output.maxPayload),
      },
      carryAt: 0,
      carryLength: 0,
      backlogHead: 0,
      backlogCount: 0,
      gain: 1,
      fadeStep: 1 / ((fadeMs * device.rate) / 1000),
    };
    this.#link = link;
    const end = device.clock + Math.round(o.seconds * device.rate);
    const done = (): boolean => device.clock >= end || o.signal?.aborted === true || this.#closing !== null || (o.until?.(link) ?? false);
    try {
      if (device.start === undefined) {
        while (!done()) {
          await this.#settle();
          this.#tick(device, link);
        }
      } else {
        await runPeriods(
          device as ClockedDevice,
          () => {
            this.#tick(device, link);
            this.engine.wake();
            return done();
          },
          o.signal,
        );
      }
    } finally {
      // A device library that never confirms its stop does not hold the conversation.
      if (device.stop !== undefined) await Promise.race([device.stop(), new Promise<void>((resolve) => setTimeout(resolve, 2000).unref())]);
      this.#link = null;
    }
    return link;
  }

  /** Lockstep: returns once this thread and every stage have nothing left to do. */
  async #settle(): Promise<void> {
    const p = this.engine.pipeline;
    for (let spins = 0; ; spins++) {
      if (p.failure !== null) throw p.failure;
      if (!this[kPump]() && p.quiet() && !this[kPump]()) return;
      if (spins % 64 === 63) await new Promise<void>((resolve) => setTimeout(resolve, 1));
      else await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }

  /** One device period: play, capture, and hand [microphone | far end] to the capture stage. */
  #tick(device: DuplexDevice, link: DeviceLink): void {
    const b = link.buffers;
    const n = device.period;
    this.#pull(link, b.played, n);
    device.tick(b.played, b.mic, b.far);
    let peak = 0;
    // Into the backlog ([periods][2][n], a ring): a device does not wait for the pipeline.
    const q = b.backlog;
    const slots = q.length / (2 * n);
    if (link.backlogCount === slots) {
      // Two seconds behind: the oldest period is lost (counted).
      link.backlogHead = (link.backlogHead + 1) % slots;
      link.backlogCount--;
      link.overruns++;
    }
    const at = ((link.backlogHead + link.backlogCount) % slots) * 2 * n;
    for (let i = 0; i < n; i++) {
      peak = Math.max(peak, Math.abs(b.mic[i]!));
      q[at + i] = b.mic[i]!;
      q[at + n + i] = b.far[i]!;
    }
    link.backlogCount++;
    link.inputPeak = peak;
    link.clock = device.clock;
    this.#flushBacklog(link, n);
  }

  /** Periods waiting for the capture ring go in, oldest first, as it has room. */
  #flushBacklog(link: DeviceLink, n: number): boolean {
    const q = link.buffers.backlog;
    const slots = q.length / (2 * n);
    let moved = false;
    while (link.backlogCount > 0 && this.#pc.input.write(REC_DUPLEX, q, link.backlogHead * 2 * n, 2 * n)) {
      link.backlogHead = (link.backlogHead + 1) % slots;
      link.backlogCount--;
      this.#fedThisTurn += n;
      moved = true;
    }
    return moved;
  }

  /** The next `n` samples of reply audio for the device, through the hold fade. */
  #pull(link: DeviceLink, out: Float32Array, n: number): void {
    const pc = this.#pc;
    const ring = pc.output;
    const hold = this.#held();
    const carry = link.buffers.carry;
    let played = 0;
    let starved = false;
    link.paused = hold;
    // A reply cut by a barge-in is dropped at once, held or not.
    for (let kind = ring.peekKind(); kind >= 0 && this.#dropReply === this.#replied; kind = ring.peekKind()) {
      ring.skip();
      if (kind === REC_TURN_END) this.#replyOut();
    }
    for (let i = 0; i < n; i++) {
      if (hold) link.gain = Math.max(0, link.gain - link.fadeStep);
      else link.gain = Math.min(1, link.gain + link.fadeStep);
      out[i] = 0;
      if (hold && link.gain === 0) continue;
      while (link.carryAt === link.carryLength) {
        const kind = ring.peekKind();
        if (kind < 0) break;
        if (kind === REC_PCM) {
          if (this.#dropReply === this.#replied) {
            ring.skip();
            continue;
          }
          link.carryLength = ring.read(carry, 0);
          link.carryAt = 0;
          if (this.#firstAudioAt < 0) this.#firstAudioAt = performance.now();
          this.#samples += link.carryLength;
          const pcm = carry.slice(0, link.carryLength);
          this.#emit('audio', { turn: this.#replied, pcm: this.format === 'f32' ? pcm : toS16(pcm, pcm.length), sampleRate: this.outputRate });
        } else {
          ring.skip();
          if (kind === REC_TURN_END) {
            if (played > 0) this.#heard(played);
            played = 0;
            this.#replyOut();
          }
        }
      }
      if (link.carryAt === link.carryLength) {
        starved ||= this.#replied < this.#spoken && !hold;
        continue;
      }
      out[i] = link.gain * carry[link.carryAt++]!;
      played++;
      link.played++;
    }
    if (played > 0) this.#heard(played);
    if (starved) link.underruns++;
  }

  /** The device this conversation runs on (`run`) and its counters, or null. */
  get device(): DeviceLink | null {
    return this.#link;
  }

  /** Writes up to `most` samples of the queue's head as one PCM (or DUPLEX) record; false when the ring is full. */
  #feed(head: Float32Array, most: number): boolean {
    if (this.#pairs.has(head)) return this.#feedPair(head, most);
    const n = Math.min(most, head.length - this.#queueAt);
    if (!this.#pc.input.write(REC_PCM, head, this.#queueAt, n)) return false;
    this.#queueAt += n;
    this.#fedThisTurn += n;
    if (this.#queueAt === head.length) {
      this.#queue.shift();
      this.#queueAt = 0;
    }
    return true;
  }

  /** A [microphone | far end] block: up to `most` samples of each, as one DUPLEX record. */
  #feedPair(head: Float32Array, most: number): boolean {
    const half = head.length / 2;
    const n = Math.min(most, half - this.#queueAt);
    const p = this.#pair;
    for (let i = 0; i < n; i++) {
      p[i] = head[this.#queueAt + i]!;
      p[n + i] = head[half + this.#queueAt + i]!;
    }
    if (!this.#pc.input.write(REC_DUPLEX, p, 0, 2 * n)) return false;
    this.#queueAt += n;
    this.#fedThisTurn += n;
    if (this.#queueAt === half) {
      this.#queue.shift();
      this.#queueAt = 0;
    }
    return true;
  }

  #endTurnFed(reason: 'end-turn' | 'segment-limit' | 'vad'): void {
    this.#emit('speech_end', { turn: this.#spoken, samples: this.#fedThisTurn, reason });
    this.#spoken++;
    this.#fedThisTurn = 0;
    this.#inTurn = false;
    this.#endedAt.push(performance.now());
  }

  /** A stream whose writable side ended ends its readable side after the last reply. */
  #endStreamIfDone(): void {
    if (!this.#streamEndPending || this.#queue.length > 0 || this.#inTurn || this.#endedAt.length > 0) return;
    this.#streamEndPending = false;
    this.#stream?.push(null);
  }

  #turnEnd(): void {
    const f = readTurnFields(this.#summary);
    const endedAt = this.#endedAt.shift() ?? performance.now();
    const t: TurnSummary = {
      turn: this.#replied,
      text: this.#text,
      tokens: this.#tokens,
      frames: f.frames,
      samples: this.#samples,
      stop: f.stop,
      endOfAudio: f.endOfAudio,
      userFrames: f.userFrames,
      positions: f.positions,
      compactions: f.compactions,
      droppedPositions: f.droppedPositions,
      firstAudioMs: this.#firstAudioAt < 0 ? null : Math.round((this.#firstAudioAt - endedAt) * 1000) / 1000,
    };
    this.#replied++;
    this.#tokens = [];
    this.#text = '';
    this.#samples = 0;
    this.#firstAudioAt = -1;
    this.#emit('turn_end', t);
    this.#waiters.shift()?.resolve(t);
    this.#endStreamIfDone();
  }
}

/** Resident bytes of this process mapped from files (RssFile in /proc/self/status), 0 where there is none. */
function residentFileBytes(): number {
  try {
    const m = /^RssFile:\s+(\d+) kB$/m.exec(readFileSync('/proc/self/status', 'utf8'));
    return m === null ? 0 : Number(m[1]) * 1024;
  } catch {
    return 0;
  }
}

/**
 * Refuses a block of samples holding NaN or ±Infinity before any of it is queued: a stage would
 * take them for silence, and the turn's reply would be lost without a word.
 */
function checkFinite(f: Float32Array, field: string): void {
  const bad = native.firstNonFinite(new Uint8Array(f.buffer, f.byteOffset, f.byteLength), WEIGHT_TYPE.f32);
  if (bad >= 0)
    throw new BadInputError({ field, offset: bad }, `sample ${bad} of the block is ${f[bad]}; samples must be finite (nothing of this block was queued)`);
}

function toS16(x: Float32Array, n: number): Int16Array {
  const out = new Int16Array(n);
  for (let i = 0; i < n; i++) {
    const v = Math.round((x[i] as number) * 32768);
    out[i] = Math.min(32767, Math.max(-32768, v));
  }
  return out;
}
