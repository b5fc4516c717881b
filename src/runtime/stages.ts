/**
 * The five pipeline stages. Each is built once in its worker (tables and pass slots carved and
 * sealed before the first record), opens conversations (their state carved in the worker that
 * uses it), and then `poll()`s: it handles every record its input rings hold and its output
 * rings have room for, and returns whether it made progress. A stage never blocks inside
 * `poll`; a full output ring leaves the input record where it is.
 *
 *   capture      input PCM (any rate) → 16 kHz PCM; non-finite samples become silence
 *   frontend     16 kHz PCM → raw log-mel rows as the audio arrives; the segment's end
 *   conformer    mel rows of a segment → normalisation, encoder, adapter → embedding rows
 *   depthformer  embedding rows → backbone prefill; then one backbone position per poll and
 *                conversation (text tokens and Depthformer frames out)
 *   playback     frames → detokenizer, ISTFT and resampling straight into the output ring
 *
 * Thread contract: a stage lives in one worker thread. After `ready()`, `poll()` allocates
 * nothing and never throws for the data (bad audio was refused at the edge).
 */
import type { Arena } from '../memory/arena.js';
import type { MemoryDomain } from '../memory/domain.js';
import type { OwnerKind } from '../memory/layout.js';
import { BadInputError, InternalError } from '../errors.js';
import { plannedFootprint, sizedArenas } from '../memory/sizing.js';
import { arenaWorkspace, type Workspace } from '../dsp/workspace.js';
import { MelFrontend } from '../dsp/mel.js';
import { Resampler } from '../dsp/resample.js';
import type { ModelConfig } from '../model/format/config.js';
import type { WeightsImage } from '../model/format/image.js';
import { ConformerEncoder } from '../model/blocks/encoder.js';
import { type BackboneState, backboneStateSizes, STEP_BATCH } from '../model/blocks/backbone.js';
import { Detokenizer, DetokenizerState } from '../model/blocks/detokenizer.js';
import {
  buildStepSlot,
  checkpointsFor,
  Dialogue,
  EMIT_DONE,
  EMIT_END_OF_AUDIO,
  EMIT_TEXT,
  frameSamplesAt,
  PAIR_HEADS_AUDIO,
  PAIR_HEADS_TEXT,
  type Prompts,
  type StepSlot,
} from '../core/dialogue.js';
import { plannerFor } from '../core/conversation.js';
import { carveClocks, STAGES, Stopwatch, type StageClocks } from '../core/clock.js';
import type { Planner } from '../memory/planner.js';
import { DEFAULT_ENCODER_TILES, melRows, segmentSamples } from '../model/plan/plans.js';
import { setComputeThreads } from '../model/blocks/kernels.js';
import { captureMirrored, type Doorbells, maxPayloadOf, RecordRing, RECORD_OVERHEAD, ringBytes } from './ring.js';
import {
  REC_CODES,
  REC_DISCARD,
  REC_EMBED,
  REC_END_OF_AUDIO,
  REC_END_SEGMENT,
  REC_MEL,
  REC_PCM,
  REC_SPEECH_END,
  REC_SPEECH_START,
  REC_TEXT,
  REC_TURN_END,
  REC_TURN_START,
  TURN_COMPACTIONS,
  TURN_DROPPED,
  TURN_END_OF_AUDIO,
  TURN_FIELDS,
  TURN_FRAMES,
  TURN_POSITIONS,
  TURN_STOP,
  TURN_TEXT_TOKENS,
  TURN_USER_FRAMES,
  BARGE_FIELDS,
  BARGE_FRAMES,
  BARGE_GENERATED,
  BARGE_POSITIONS,
  BARGE_REPLY,
  BARGE_TEXT_TOKENS,
  BELL_MAIN,
  DUPLEX_WORDS,
  kHeard,
  kHeardReply,
  kOnsets,
  kOnsetsSeen,
  kPlayed,
  kPlayedReply,
  kReplies,
  kVoice,
  REC_BARGE,
  REC_DUPLEX,
  REC_PCM_ECHO,
  SPEECH_DROPPED,
  SPEECH_TURN,
  type RingName,
  type StageInit,
  type StageConversation,
  type StageName,
  type StageOpen,
} from './protocol.js';
import { TicketPool } from './tickets.js';
import { APM_HEAP_BOUND, EchoCanceller, type ApmEngine } from '../dsp/aec.js';
import type { FrameDecider } from '../dsp/vad.js';
import { prepareVoice } from '../io/silero.js';
import { makeVoice, maxDecisions } from '../dsp/voice.js';
import { Endpointer, framesOf, VAD_SPEECH_DROP, VAD_SPEECH_END, VAD_SPEECH_MAYBE, VAD_SPEECH_NOT, VAD_SPEECH_START } from '../dsp/vad.js';
import { native, type ApmHandle } from '../native.js';

/** Stands in for the VAD engine in a sizing run (nothing calls it). */
const SIZING_ENGINE: ApmEngine = { handle: null as unknown as ApmHandle, heapBytes: 0 };
import '../core/categories.js';

/** Most device-rate samples in one input record. */
const INPUT_CHUNK_MAX = 4096;

/** Samples per input record (the capture stage's unit), by input rate: about 64 ms of 16 kHz output. */
export function inputChunk(inputRate: number): number {
  return Math.max(1, Math.min(INPUT_CHUNK_MAX, Math.floor((1024 * inputRate) / 16000)));
}

/** Most 16 kHz samples in one capture record (the frontend sizes its VAD mode by it). */
export const CAPTURE_RECORD_MAX = 4096;

/** Adapter rows per embedding record. */
export const EMBED_ROWS = 4;

/** The capture ring: four of the largest input records. */
const CAPTURE_RING_WORDS = 4 * (INPUT_CHUNK_MAX + RECORD_OVERHEAD) + 4;

/** `words` rounded up to whole pages of this machine. */
function pageWords(words: number): number {
  const page = native.pageSize() / 4;
  return Math.ceil(words / page) * page;
}

/** Data words of each ring of a conversation, from the configuration and options. */
export function ringCapacities(c: ModelConfig, outputRate: number): Record<RingName, number> {
  const frameSamples = frameSamplesAt(c, outputRate);
  return {
    // Whole pages when the capture ring's data is a mirrored mapping (coordinator.carveRings).
    input: captureMirrored() ? pageWords(CAPTURE_RING_WORDS) : CAPTURE_RING_WORDS,
    pcm16: 16384,
    mel: 16384,
    embed: 4 * EMBED_ROWS * (c.backbone.hidden + RECORD_OVERHEAD) + 4,
    codes: 64 * (c.audio.codebooks + RECORD_OVERHEAD),
    events: 4096,
    output: 4 * (frameSamples + 4096) + 4,
  };
}

export interface Environment {
  domain: MemoryDomain;
  image: WeightsImage;
  init: StageInit;
  bells: Doorbells;
}

let idleRing: RecordRing | null = null;
let idleWords: Int32Array | null = null;
/** The buffers a conversation without echo cancellation does not have. */
const NONE = new Float32Array(0);
/** Longest a stage sleeps before it looks again without being rung. */
export const IDLE_POLL_MS = 1000;

/** What every stage shares: its clocks, its arenas, and the conversations it serves. */
export abstract class Stage<C> {
  readonly name: StageName;
  readonly env: Environment;
  readonly config: ModelConfig;
  /** Per conversation: wall ms and count per clock, in STAGES order (as the single-thread run). */
  readonly clocks: (StageClocks | undefined)[] = [];
  readonly arenas: Arena[] = [];
  /** By conversation index; a closed conversation leaves a hole its index may fill again. */
  readonly conversations: (C | undefined)[] = [];
  /** The arenas each open conversation's state lives in. */
  readonly #owned = new Map<number, Arena[]>();
  /** While sizing: the footprint the conversation's carve would charge. */
  #sizing: { bytes: number } | null = null;
  /** Native engines each open conversation holds: freed, then given back, at its close. */
  readonly #natives = new Map<number, { free(): void; release(): void }[]>();
  /** How pass buffers are laid out (planned, or separate for comparison). */
  readonly planner: Planner;
  records = 0;
  /** Batched backbone calls (two conversations' positions in one; Depthformer stage), and of those, the ones whose text heads or frames were batched too. */
  batched = 0;
  batchedText = 0;
  batchedFrames = 0;
  /** Conversations that copied their system prompt from another (Depthformer stage). */
  systemCopies = 0;
  nonFinite = 0;
  readonly #watch = new Stopwatch();

  constructor(name: StageName, env: Environment) {
    this.name = name;
    this.env = env;
    this.config = env.init.config;
    this.planner = plannerFor(env.init.options.layout);
  }

  /** The clocks of conversation `index`, carved in its arena when it opens. */
  protected clocksFor(index: number, arena: Arena): StageClocks {
    const c = carveClocks(arena, `${this.name}.`);
    this.clocks[index] = c;
    return c;
  }

  protected tic(): void {
    this.#watch.tic();
  }

  protected toc(conversation: number, clock: number): void {
    this.#watch.toc(this.clocks[conversation]!, clock);
  }

  /** Conversation `o`'s barge-in words (protocol.ts, kVoice…); a plan's conversations share idle ones. */
  protected words(o: StageConversation & { duplex?: StageOpen['duplex'] }): Int32Array {
    if (o.duplex !== undefined) return new Int32Array(o.duplex.buffer, o.duplex.byteOffset, DUPLEX_WORDS);
    if (!this.env.domain.unbacked) throw new InternalError(`${this.name} stage: barge-in words used while sizing conversation ${o.index}`);
    idleWords ??= new Int32Array(new SharedArrayBuffer(4 * DUPLEX_WORDS));
    return idleWords;
  }

  protected ring(o: StageConversation & { rings?: StageOpen['rings'] }, name: RingName): RecordRing {
    // A plan (unbacked domain) builds conversations that never run: they get one idle ring.
    if (o.rings === undefined && this.env.domain.unbacked) {
      idleRing ??= RecordRing.init({ buffer: new SharedArrayBuffer(ringBytes(4)), byteOffset: 0, capacity: 4 }, this.env.bells, 0, 0);
      return idleRing;
    }
    if (o.rings === undefined) throw new InternalError(`${this.name} stage: ring '${name}' used while sizing conversation ${o.index}`);
    return new RecordRing(o.rings[name], this.env.bells);
  }

  /**
   * Carves `build`'s regions in arenas sized exactly by a dry run, kept for sealing (and, for a
   * conversation's arenas, for its close). While sizing, only the dry run happens, and `open`
   * stops there.
   */
  protected carve<T>(arenas: { owner: { kind: OwnerKind; index: number }; name: string }[], bound: number, build: (a: Arena[]) => T): T {
    const d = this.env.domain;
    const specs = arenas.map((a) => ({ owner: d.owner(a.owner.kind, a.owner.index), name: a.name }));
    if (this.#sizing !== null) {
      this.#sizing.bytes += plannedFootprint(d, specs, bound, build);
      throw SIZED;
    }
    const { value, arenas: real } = sizedArenas(d, specs, bound, build);
    this.arenas.push(...real);
    for (const [i, a] of arenas.entries()) {
      if (a.owner.kind !== 'conversation') continue;
      const list = this.#owned.get(a.owner.index) ?? [];
      list.push(real[i]!);
      this.#owned.set(a.owner.index, list);
    }
    return value;
  }

  /** What opening `o` would charge to the cap: its carve's dry run alone. */
  size(o: StageConversation): number {
    if (this.conversations[o.index] !== undefined) throw new InternalError(`${this.name} stage: conversation ${o.index} is open`);
    const sizing = { bytes: 0 };
    this.#sizing = sizing;
    try {
      this.open(o);
      throw new InternalError(`${this.name} stage: opening conversation ${o.index} carved nothing`);
    } catch (error) {
      if (error !== SIZED) throw error;
    } finally {
      this.#sizing = null;
      this.clocks[o.index] = undefined;
      this.conversations[o.index] = undefined;
    }
    return sizing.bytes;
  }

  /**
   * A native engine for conversation `index`, its host heap held under the cap at `bound`
   * (category `native.audio`) until the conversation closes; while sizing, only the bound counts
   * and nothing is made (null).
   */
  protected holdNative<T>(index: number, bound: number, make: () => T, free: (value: T) => void): T | null {
    if (this.#sizing !== null) {
      this.#sizing.bytes += bound;
      return null;
    }
    const d = this.env.domain;
    const h = d.holdNative(d.owner('conversation', index), 'native.audio', bound, make, () => bound);
    const list = this.#natives.get(index) ?? [];
    // A planning domain charges the bound and makes nothing (null): there is nothing to free.
    list.push({ free: () => h.value !== null && free(h.value), release: () => h.release() });
    this.#natives.set(index, list);
    return h.value;
  }

  #releaseNatives(index: number): void {
    for (const n of this.#natives.get(index) ?? []) {
      n.free();
      n.release();
    }
    this.#natives.delete(index);
  }

  /** Drops conversation `index`: what it holds here goes back to the cap. */
  close(index: number): void {
    this.#releaseNatives(index);
    this.drop(index);
    this.conversations[index] = undefined;
    this.clocks[index] = undefined;
    const owned = this.#owned.get(index) ?? [];
    this.#owned.delete(index);
    for (const a of owned) {
      this.arenas.splice(this.arenas.indexOf(a), 1);
      this.env.domain.releaseSlab(a.slab);
    }
  }

  /** Lets go of what a closing conversation holds besides its arenas (a pass slot). */
  protected drop(_index: number): void {}

  /** Pass slots, each carved in its own `ticket/<n>` arena; the stage's tables in `model`. */
  protected slots<T>(bound: number, build: (work: Arena, derived: Workspace, slot: number) => T): TicketPool<T> {
    const n = this.env.init.slots;
    const out: T[] = [];
    const specs: { owner: { kind: OwnerKind; index: number }; name: string }[] = [{ owner: { kind: 'model', index: 0 }, name: `model derived ${this.name}` }];
    for (let i = 0; i < n; i++) specs.push({ owner: { kind: 'ticket' as const, index: i }, name: `ticket ${i} ${this.name}` });
    const built = this.carve(specs, bound, (arenas) => {
      const derived = sharedTables(arenaWorkspace(arenas[0]!, 'derived', this.name));
      const list: T[] = [];
      for (let i = 0; i < n; i++) list.push(build(arenas[i + 1]!, derived.next(), i));
      return list;
    });
    out.push(...built);
    return new TicketPool(out);
  }

  /** Builds conversation `o`'s state; while sizing `o` has no rings and the carve ends it. */
  abstract open(o: StageConversation & { rings?: StageOpen['rings']; duplex?: StageOpen['duplex'] }): void;
  abstract poll(): boolean;

  /** Called when a poll found nothing to do, before the stage sleeps: how long it may sleep (ms). */
  idle(): number {
    return IDLE_POLL_MS;
  }

  ready(): void {
    for (const a of this.arenas) a.seal();
  }

  /** Per conversation, the clocks this stage ran (STAGES names). */
  clockReport(): Record<string, { ms: number; count: number }>[] {
    return this.clocks.map((c) => {
      const r: Record<string, { ms: number; count: number }> = {};
      if (c === undefined) return r;
      STAGES.forEach((n, i) => {
        if ((c.count[i] as number) > 0) r[n] = { ms: c.ms[i] as number, count: c.count[i] as number };
      });
      return r;
    });
  }

  /**
   * The loop of a stage that takes its input one record at a time: a record is taken only when
   * the output ring has `room` for what it may produce, and `record` may leave it in place
   * (false) until it can be handled. Indexed, not for-of: an iterator would allocate whenever
   * this code runs unoptimised. A worker runs one stage class, so `record` is monomorphic there;
   * the per-stage heap probes (test/pipeline/stages.test.ts) hold this loop to zero growth.
   */
  protected pollRecords(conversations: readonly (RoomConv | undefined)[]): boolean {
    let progress = false;
    for (let k = 0; k < conversations.length; k++) {
      const c = conversations[k];
      if (c === undefined) continue;
      for (;;) {
        const kind = c.input.peekKind();
        if (kind < 0 || !c.out.canWrite(c.room) || !this.record(c, kind)) break;
        this.records++;
        progress = true;
      }
    }
    return progress;
  }

  /** Handles the record of `kind` at the head of `c.input`; false leaves it there. */
  protected record(_c: RoomConv, _kind: number): boolean {
    return false;
  }

  /** Pass-slot use; capture and frontend have no pass slots. */
  slotStats(): { count: number; maxBusy: number; overlapped: number } {
    return { count: 0, maxBusy: 0, overlapped: 0 };
  }
}

/** Ends a sizing `open` at its carve (not an error: `Stage.size` catches it). */
const SIZED: unique symbol = Symbol('sized');

/**
 * Formula tables shared by every pass slot: the first slot's build carves them; each later
 * slot's build asks for tables by the same names and gets the first slot's views (and writes
 * the same values into them, at setup). Charged once, to `model`.
 */
function sharedTables(ws: Workspace): { next(): Workspace } {
  // By name, in request order: what slot 0 asked for (a sizing run's views may be empty).
  const made = new Map<string, { type: unknown; length: number; view: ReturnType<Workspace> }[]>();
  let round = 0;
  return {
    next(): Workspace {
      const r = round++;
      const seen = new Map<string, number>();
      return ((name, type, length) => {
        const k = seen.get(name) ?? 0;
        seen.set(name, k + 1);
        const list = made.get(name) ?? [];
        made.set(name, list);
        if (r === 0) {
          const view = ws(name, type, length);
          list.push({ type, length, view });
          return view;
        }
        const m = list[k];
        if (m === undefined || m.length !== length || m.type !== type) {
          throw new InternalError(`pass slot ${r} asked for table '${name}' that slot 0 did not build`);
        }
        return m.view;
      }) as Workspace;
    },
  };
}

// ---------------------------------------------------------------------------------------------

/** A conversation as a stage sees it: the ring it reads and the ring it writes. */
interface RingConv {
  index: number;
  input: RecordRing;
  out: RecordRing;
}

/** A conversation whose output may need up to `room` words per input record. */
interface RoomConv extends RingConv {
  /** Output words one input record (or the segment's end) may need. */
  room: number;
}

/**
 * A stage that turns each input record into at most one output record (capture, frontend):
 * PCM records go to `pcm` (PCM_ECHO too, flagged), DUPLEX records to `duplex`, a segment's end
 * to `endSegment` (which flushes), anything else is dropped. A record is only taken when the
 * output ring has room for what it may produce.
 */
abstract class StreamStage<C extends RoomConv> extends Stage<C> {
  /** Handles the PCM record at the head of `c.input` (and consumes it); `echo`: a PCM_ECHO record. */
  protected abstract pcm(c: C, echo: boolean): void;
  /** Handles the DUPLEX record at the head of `c.input` (and consumes it). */
  protected duplex(c: C): void {
    c.input.skip();
  }
  /** Flushes what the segment left; true to write the end-of-segment record after it. */
  protected abstract endSegment(c: C): boolean;

  poll(): boolean {
    return this.pollRecords(this.conversations);
  }

  protected override record(c: C, kind: number): boolean {
    this.tic();
    if (kind === REC_PCM || kind === REC_PCM_ECHO) {
      this.pcm(c, kind === REC_PCM_ECHO);
    } else if (kind === REC_DUPLEX) {
      this.duplex(c);
    } else {
      c.input.skip();
      if (kind === REC_END_SEGMENT && this.endSegment(c)) c.out.write(REC_END_SEGMENT, null, 0, 0);
    }
    this.toc(c.index, 0);
    return true;
  }
}

interface CaptureConv extends RoomConv {
  resampler: Resampler;
  buf: Float32Array; // one input record ([2][chunk] for a DUPLEX record)
  res: Float32Array; // its 16 kHz samples, or the segment's tail
  /** Echo cancellation (null: none): the far end's resampler, its 16 kHz samples, the cleaned ones. */
  aec: EchoCanceller | null;
  farResampler: Resampler | null;
  farIn: Float32Array; // the far half of a DUPLEX record
  far: Float32Array;
  clean: Float32Array;
}

export class CaptureStage extends StreamStage<CaptureConv> {
  constructor(env: Environment) {
    super('capture', env);
  }

  open(o: StageConversation & { rings?: StageOpen['rings']; duplex?: StageOpen['duplex'] }): void {
    const chunk = inputChunk(o.inputRate);
    const rate = this.config.frontend.sampleRate;
    const echo = o.echoDelayMs >= 0;
    const options = { delayMs: o.echoDelayMs };
    const engine = echo
      ? this.holdNative(
          o.index,
          APM_HEAP_BOUND.echo,
          () => EchoCanceller.engine(options),
          (e) => native.apmDestroy(e.handle),
        )
      : null;
    const conv = this.carve([{ owner: { kind: 'conversation', index: o.index }, name: `conversation ${o.index} capture` }], 1 << 24, ([a]) => {
      this.clocksFor(o.index, a!);
      const resampler = new Resampler(o.inputRate, rate, {}, arenaWorkspace(a!, 'workspace.frontend', 'capture'));
      const res = a!.carve('capture.resampled', 'workspace.frontend', Float32Array, resampler.maxOutput(chunk) + resampler.taps + 2);
      const buf = a!.carve('capture.input', 'workspace.frontend', Float32Array, echo ? 2 * chunk : chunk);
      const plain = { room: res.length + 2 * RECORD_OVERHEAD, resampler, buf, res, aec: null, farResampler: null, farIn: NONE, far: NONE, clean: NONE };
      if (!echo) return plain;
      const aec = new EchoCanceller(options, arenaWorkspace(a!, 'capture', 'capture.echo'), engine ?? SIZING_ENGINE);
      const farResampler = new Resampler(o.inputRate, rate, {}, arenaWorkspace(a!, 'capture', 'capture.far'));
      const farIn = a!.carve('capture.far_in', 'capture', Float32Array, chunk);
      const far = a!.carve('capture.far', 'capture', Float32Array, res.length);
      const clean = a!.carve('capture.clean', 'capture', Float32Array, aec.maxOutput(res.length));
      return { ...plain, room: Math.max(res.length, clean.length) + 2 * RECORD_OVERHEAD, aec, farResampler, farIn, far, clean };
    });
    if (conv.res.length > CAPTURE_RECORD_MAX)
      throw new InternalError(`capture: a record at ${o.inputRate} Hz would hold ${conv.res.length} samples, more than ${CAPTURE_RECORD_MAX}`);
    if (conv.res.length > maxPayloadOf(o.capacities.pcm16))
      throw new BadInputError({ field: 'inputRate' }, `the capture ring cannot hold a record at ${o.inputRate} Hz`);
    this.conversations[o.index] = { index: o.index, input: this.ring(o, 'input'), out: this.ring(o, 'pcm16'), ...conv };
  }

  protected pcm(c: CaptureConv): void {
    const n = c.input.read(c.buf, 0);
    this.#finite(c.buf, n);
    if (c.aec !== null) {
      // Microphone alone in an echo-cancelled conversation: the far end was silent.
      c.farIn.fill(0, 0, n);
      this.#cancel(c, c.aec, n);
      return;
    }
    const m = c.resampler.push(c.buf, c.res, 0, n);
    if (m > 0) c.out.write(REC_PCM, c.res, 0, m);
  }

  /** `c.buf[0, n)` heard, `c.farIn[0, n)` played: both to 16 kHz, the echo cancelled, sent on. */
  #cancel(c: CaptureConv, aec: EchoCanceller, n: number): void {
    const m = c.resampler.push(c.buf, c.res, 0, n);
    c.farResampler!.push(c.farIn, c.far, 0, n);
    const w = aec.push(c.res, 0, c.far, 0, m, c.clean, 0);
    if (w > 0) c.out.write(aec.converged || !aec.farActive ? REC_PCM : REC_PCM_ECHO, c.clean, 0, w);
  }

  #finite(x: Float32Array, n: number): void {
    for (let i = 0; i < n; i++) {
      if (!Number.isFinite(x[i]!)) {
        x[i] = 0;
        this.nonFinite++;
      }
    }
  }

  /**
   * A DUPLEX record: both halves to 16 kHz (the same resampling, so the same counts), the echo
   * of the far end cancelled from the microphone. Until the canceller has converged, what it
   * hears while the far end plays goes out as PCM_ECHO: the frontend does not take it for the user.
   */
  protected override duplex(c: CaptureConv): void {
    const aec = c.aec;
    if (aec === null) {
      c.input.skip();
      return;
    }
    const n = c.input.read(c.buf, 0) >> 1;
    this.#finite(c.buf, 2 * n);
    native.copyF32(c.buf, n, c.farIn, 0, n);
    this.#cancel(c, aec, n);
  }

  protected endSegment(c: CaptureConv): boolean {
    const m = c.resampler.finish(c.res, 0);
    if (m > 0) c.out.write(REC_PCM, c.res, 0, m);
    c.resampler.reset();
    return true;
  }
}

// ---------------------------------------------------------------------------------------------

interface FrontendConv extends RoomConv {
  mel: MelFrontend;
  pcm: Float32Array; // one 16 kHz record
  rows: Float32Array; // the rows one record completes
  maxRows: number; // rows of the longest segment
  rowsPer: number; // rows `rows` holds
  /** VAD mode: the turns are found here (null: the host ends them). */
  vad: FrameDecider | null;
  ep: Endpointer | null;
  decisions: Uint8Array; // one per 10 ms frame of a record
  preRoll: Float32Array; // [PRE_ROLL_ROWS][nMels] the last rows before speech, a ring
  preAt: number;
  preCount: number;
  sent: number; // rows of the open segment sent
  reason: Int32Array; // [1] a SPEECH_END record's payload
  words: Int32Array; // barge-in words: this stage writes kVoice and kOnsets
}

/** Mel rows kept from before a speech onset (the onset is confirmed after it began). */
const PRE_ROLL_ROWS = 24;

export class FrontendStage extends StreamStage<FrontendConv> {
  constructor(env: Environment) {
    super('frontend', env);
  }

  open(o: StageConversation & { rings?: StageOpen['rings']; duplex?: StageOpen['duplex'] }): void {
    const c = this.config;
    const f = c.frontend;
    const so = this.env.init.options;
    // In VAD mode records come from the capture stage (at most CAPTURE_RECORD_MAX samples).
    const maxIn = o.vad ? Math.min(CAPTURE_RECORD_MAX, maxPayloadOf(o.capacities.pcm16)) : maxPayloadOf(o.capacities.pcm16);
    const rowsPer = Math.min(Math.floor(maxPayloadOf(o.capacities.mel) / f.nMels), Math.ceil(maxIn / f.hop) + 4);
    const maxRows = melRows(c, segmentSamples(c, so.segmentSeconds));
    const voice = o.vad ? prepareVoice(so.vad) : null;
    const engine = voice?.kind === 'webrtc' ? this.holdNative(o.index, voice.bound, voice.engine, (e) => native.apmDestroy(e.handle)) : null;
    const conv = this.carve([{ owner: { kind: 'conversation', index: o.index }, name: `conversation ${o.index} frontend` }], 1 << 24, ([a]) => {
      this.clocksFor(o.index, a!);
      const ws = arenaWorkspace(a!, 'workspace.frontend', 'frontend');
      const mel = new MelFrontend({ sampleRate: f.sampleRate, nFft: f.nFft, winLength: f.winLength, hop: f.hop, nMels: f.nMels }, ws);
      const vadWs = arenaWorkspace(a!, 'capture', 'frontend');
      const vad = voice !== null ? makeVoice(voice, vadWs, engine ?? SIZING_ENGINE) : null;
      // The longest segment, less the pre-roll and a record's rows, so the rows never overflow it.
      const ep = o.vad
        ? new Endpointer(
            {
              onset: framesOf(so.onsetMs),
              silence: framesOf(so.silenceMs),
              minSpeech: framesOf(so.minSpeechMs),
              maxSegment: Math.max(1, maxRows - PRE_ROLL_ROWS - rowsPer),
            },
            vadWs,
          )
        : null;
      return {
        room: (o.vad ? rowsPer + PRE_ROLL_ROWS : rowsPer) * f.nMels + 6 * RECORD_OVERHEAD + 1,
        rowsPer,
        mel,
        pcm: a!.carve('frontend.pcm', 'workspace.frontend', Float32Array, maxIn),
        rows: a!.carve('frontend.rows', 'workspace.frontend', Float32Array, rowsPer * f.nMels),
        maxRows,
        vad,
        ep,
        decisions: a!.carve('frontend.vad', 'metadata', Uint8Array, voice !== null ? maxDecisions(voice, maxIn) : 0),
        preRoll: a!.carve('frontend.pre_roll', 'workspace.frontend', Float32Array, o.vad ? PRE_ROLL_ROWS * f.nMels : 0),
        preAt: 0,
        preCount: 0,
        sent: 0,
        reason: a!.carve('frontend.reason', 'metadata', Int32Array, 1),
      };
    });
    if (conv.room > o.capacities.mel) throw new InternalError(`frontend: the mel ring (${o.capacities.mel} words) cannot hold a record's rows (${conv.room})`);
    const words = o.vad ? this.words(o) : new Int32Array(0);
    this.conversations[o.index] = { index: o.index, input: this.ring(o, 'pcm16'), out: this.ring(o, 'mel'), words, ...conv };
  }

  protected pcm(c: FrontendConv, echo: boolean): void {
    const n = c.input.read(c.pcm, 0);
    const nMels = this.config.frontend.nMels;
    if (c.vad === null) {
      const base = c.mel.rows;
      const rows = c.mel.push(c.pcm, c.rows, n, base, Math.min(c.maxRows, base + c.rowsPer));
      if (rows > 0) c.out.write(REC_MEL, c.rows, 0, rows * nMels);
      return;
    }
    // VAD mode: the mel runs on; rows go out only inside the user's speech.
    const base = c.mel.rows;
    const rows = c.mel.push(c.pcm, c.rows, n, base, base + c.rowsPer);
    const frames = c.vad.push(c.pcm, 0, n, c.decisions, 0);
    // What the echo canceller left while it converges is the assistant, not the user.
    if (echo) c.decisions.fill(0, 0, frames);
    const ep = c.ep!;
    const was = ep.speaking;
    let started = false;
    let ended = 0;
    const w = c.words;
    for (let k = 0; k < frames; k++) {
      const e = ep.push(c.decisions[k] === 1);
      if (e === VAD_SPEECH_START) started = true;
      else if (e === VAD_SPEECH_END) ended = SPEECH_TURN;
      else if (e === VAD_SPEECH_DROP) ended = SPEECH_DROPPED;
      // The main thread holds playback at the first sign of speech and cuts it at the onset.
      if (e === VAD_SPEECH_MAYBE || e === VAD_SPEECH_START) Atomics.store(w, kVoice, 1);
      else if (e === VAD_SPEECH_NOT || e === VAD_SPEECH_END || e === VAD_SPEECH_DROP) Atomics.store(w, kVoice, 0);
      if (e === VAD_SPEECH_START) Atomics.add(w, kOnsets, 1);
      if (e !== 0) this.env.bells.ring(BELL_MAIN);
    }
    if (started && !was) {
      c.out.write(REC_SPEECH_START, null, 0, 0);
      // The pre-roll, oldest first (in at most two records: it is a ring).
      const first = (c.preAt - c.preCount + PRE_ROLL_ROWS) % PRE_ROLL_ROWS;
      const head = Math.min(c.preCount, PRE_ROLL_ROWS - first);
      if (head > 0) c.out.write(REC_MEL, c.preRoll, first * nMels, head * nMels);
      if (c.preCount > head) c.out.write(REC_MEL, c.preRoll, 0, (c.preCount - head) * nMels);
      c.sent = c.preCount;
      c.preCount = 0;
    }
    if (was || started) {
      const k = Math.min(rows, c.maxRows - c.sent);
      if (k > 0) c.out.write(REC_MEL, c.rows, 0, k * nMels);
      c.sent += k;
    } else {
      for (let r = 0; r < rows; r++) {
        for (let j = 0; j < nMels; j++) c.preRoll[c.preAt * nMels + j] = c.rows[r * nMels + j]!;
        c.preAt = (c.preAt + 1) % PRE_ROLL_ROWS;
        c.preCount = Math.min(PRE_ROLL_ROWS, c.preCount + 1);
      }
    }
    if (ended !== 0) {
      c.out.write(ended === SPEECH_TURN ? REC_END_SEGMENT : REC_DISCARD, null, 0, 0);
      c.reason[0] = ended;
      c.out.write(REC_SPEECH_END, c.reason, 0, 1);
      c.sent = 0;
    }
  }

  /** In VAD mode the turns are found here: a host's end of segment is not forwarded. */
  protected endSegment(c: FrontendConv): boolean {
    if (c.vad !== null) return false;
    const base = c.mel.rows;
    const rows = c.mel.finish(c.rows, base, Math.min(c.maxRows, base + c.rowsPer));
    if (rows > 0) c.out.write(REC_MEL, c.rows, 0, rows * this.config.frontend.nMels);
    c.mel.reset();
    return true;
  }
}

// ---------------------------------------------------------------------------------------------

interface ConformerConv extends RingConv {
  rows: Float32Array; // [segment rows][nMels] the open segment
  count: number; // rows received
  slot: number; // held pass slot, -1 = none
  adapter: Float32Array | null; // the encoded segment being sent
  frames: number;
  sent: number;
}

/**
 * A compute stage: its pass slots are built once per stage, the first slot's tables shared, and
 * its worker thread gets helper threads of its own for the row-by-row layers.
 */
abstract class PassStage<C, T> extends Stage<C> {
  readonly tickets: TicketPool<T>;

  constructor(name: StageName, env: Environment, build: (stage: PassStage<C, T>, work: Arena, derived: Workspace, slot: number) => T) {
    super(name, env);
    setComputeThreads(env.init.threads);
    this.tickets = this.slots(1 << 30, (work, derived, slot) => build(this, work, derived, slot));
  }

  override slotStats(): { count: number; maxBusy: number; overlapped: number } {
    return { count: this.tickets.slots.length, maxBusy: this.tickets.maxBusy, overlapped: this.tickets.overlapped };
  }

  protected override drop(index: number): void {
    const slot = this.tickets.held(index);
    if (slot >= 0) this.tickets.release(slot);
  }
}

/** Keeps a segment's mel rows, then normalises, encodes and sends adapter rows as the ring has room. */
export class ConformerStage extends PassStage<ConformerConv, ConformerEncoder> {
  constructor(env: Environment) {
    const o = env.init.options;
    super(
      'conformer',
      env,
      (s, work, derived) =>
        new ConformerEncoder(s.config, env.image, work, derived, { segmentSeconds: o.segmentSeconds, tiles: DEFAULT_ENCODER_TILES, planner: s.planner }),
    );
  }

  open(o: StageConversation & { rings?: StageOpen['rings']; duplex?: StageOpen['duplex'] }): void {
    const c = this.config;
    const segRows = melRows(c, segmentSamples(c, this.env.init.options.segmentSeconds));
    const rows = this.carve([{ owner: { kind: 'conversation', index: o.index }, name: `conversation ${o.index} conformer` }], 1 << 28, ([a]) => {
      this.clocksFor(o.index, a!);
      return a!.carve('mel_rows', 'workspace.frontend', Float32Array, segRows * c.frontend.nMels);
    });
    this.conversations[o.index] = {
      index: o.index,
      input: this.ring(o, 'mel'),
      out: this.ring(o, 'embed'),
      rows,
      count: 0,
      slot: -1,
      adapter: null,
      frames: 0,
      sent: 0,
    };
  }

  poll(): boolean {
    let progress = false;
    const nMels = this.config.frontend.nMels;
    const D = this.config.backbone.hidden;
    // Indexed, not for-of: an iterator would allocate whenever this code runs unoptimised.
    for (let k = 0; k < this.conversations.length; k++) {
      const c = this.conversations[k];
      if (c === undefined) continue;
      if (c.adapter !== null) {
        // Send the encoded segment as ring room allows.
        while (c.sent < c.frames) {
          const k = Math.min(EMBED_ROWS, c.frames - c.sent);
          if (!c.out.write(REC_EMBED, c.adapter, c.sent * D, k * D)) break;
          c.sent += k;
          progress = true;
        }
        if (c.sent < c.frames || !c.out.write(REC_END_SEGMENT, null, 0, 0)) continue;
        c.adapter = null;
        this.tickets.release(c.slot);
        c.slot = -1;
        progress = true;
      }
      for (;;) {
        const kind = c.input.peekKind();
        if (kind < 0) break;
        if (kind === REC_MEL) {
          // The frontend never sends more rows than the longest segment holds.
          c.count += c.input.read(c.rows, c.count * nMels) / nMels;
        } else if (kind === REC_END_SEGMENT) {
          const slot = this.tickets.acquire(c.index);
          if (slot < 0) break;
          c.input.skip();
          c.slot = slot;
          const encoder = this.tickets.slots[slot]!;
          this.tic();
          c.adapter = encoder.encode(c.rows, c.count);
          c.frames = encoder.frames(c.count);
          this.toc(c.index, 1);
          c.sent = 0;
          c.count = 0;
          this.records++;
          progress = true;
          break;
        } else if (kind === REC_DISCARD) {
          // Speech too short for a turn: its rows are forgotten.
          c.input.skip();
          c.count = 0;
        } else if (kind === REC_SPEECH_START || kind === REC_SPEECH_END) {
          // The frontend's turn events travel on to the host, in order with the segments.
          if (!c.out.canWrite(2)) break;
          const v = c.input.peekLength() > 0 ? c.input.peekInt(0) : 0;
          c.input.skip();
          c.out.write2(kind, v, 0);
        } else c.input.skip();
        this.records++;
        progress = true;
      }
    }
    return progress;
  }
}

// ---------------------------------------------------------------------------------------------

interface DepthSlot extends StepSlot {
  rowsIn: Float32Array; // [EMBED_ROWS][hidden] one embedding record
}

interface DepthConv {
  index: number;
  input: RecordRing;
  codes: RecordRing;
  events: RecordRing;
  dialogue: Dialogue;
  slot: number;
  phase: number; // 0 idle, 1 prefill, 2 reply
  summary: Int32Array; // [TURN_FIELDS]
  /** VAD conversation: barge-in and the look-ahead run through `words`. */
  vad: boolean;
  words: Int32Array;
  barge: Int32Array; // [BARGE_FIELDS] a BARGE record's payload
  starts: number; // speech onsets passed on
  replies: number; // replies begun (the last is number replies − 1)
  cutReply: number; // the last reply cut by a barge-in (-1: none)
  /** Frames of the last reply the listener heard at the onset being judged (-1: none being judged). */
  verdict: number;
}

/** Conversation indices are owner indices: never more than a ledger's owners. */
const MAX_CONVERSATIONS = 64;
/** Longest the main thread is not woken for text and frames it has not read (they ride on the reply's samples). */
const EVENTS_LAZY_MS = 40;

const PHASE_IDLE = 0;
const PHASE_PREFILL = 1;
const PHASE_REPLY = 2;
/** A verdict that cuts nothing. */
const NO_CUT = 0x7fffffff;
const WAIT_FOR_DONOR = 1;
/** What the turn-end test hook waits on (never notified). */
const PAUSE = new Int32Array(new SharedArrayBuffer(4));

export class DepthformerStage extends PassStage<DepthConv, DepthSlot> {
  readonly prompts: Prompts;
  #gate: number;
  /** Per conversation index, stepped in this poll (made once: no allocation per poll). */
  readonly #stepped = new Uint8Array(MAX_CONVERSATIONS);
  readonly #pair: BackboneState[] = [];
  readonly #now = new Float64Array(1);
  readonly #emitted = new Int32Array(2);
  /** Output-rate samples of one reply frame, and of the look-ahead. */
  readonly #frameSamples: number;
  readonly #lookahead: number;

  constructor(env: Environment) {
    const c = env.init.config;
    const o = env.init.options;
    let prompts: Prompts | null = null;
    super('depthformer', env, (s, work, derived, i) => {
      if (i === 0) {
        const ids = env.init.prompts;
        const meta = (name: string, v: number[]): Int32Array => {
          const a = derived(`prompt.${name}`, Int32Array, v.length);
          a.set(v);
          return a;
        };
        prompts = {
          system: meta('system', ids.system),
          userOpen: meta('user_open', ids.userOpen),
          userClose: meta('user_close', ids.userClose),
          replyClose: meta('reply_close', ids.replyClose),
        };
      }
      // Two rows: a pair step runs both conversations' heads in one call.
      const step = buildStepSlot(c, env.image, work, derived, { chunk: o.prefillChunk, context: o.context, planner: s.planner, rows: STEP_BATCH });
      return { ...step, rowsIn: work.carve('embed.in', 'workspace.prefill', Float32Array, EMBED_ROWS * c.backbone.hidden) };
    });
    this.prompts = prompts!;
    this.#gate = env.init.gateReplies;
    this.#frameSamples = frameSamplesAt(c, o.outputRate);
    this.#lookahead = (o.lookaheadMs * o.outputRate) / 1000;
  }

  /** The test gate: false until `gateReplies` conversations have a reply ready, then always true. */
  #open(): boolean {
    if (this.#gate === 0) return true;
    let ready = 0;
    for (let k = 0; k < this.conversations.length; k++) if (this.conversations[k]?.phase === PHASE_REPLY) ready++;
    if (ready < this.#gate) return false;
    this.#gate = 0;
    return true;
  }

  open(o: StageConversation & { rings?: StageOpen['rings']; duplex?: StageOpen['duplex'] }): void {
    const c = this.config;
    const so = this.env.init.options;
    const kvBytes = backboneStateSizes(c, so.context, so.kv).reduce((s, r) => s + r.bytes, 0);
    const conv = this.carve([{ owner: { kind: 'conversation', index: o.index }, name: `conversation ${o.index} depthformer` }], (1 << 24) + kvBytes, ([a]) => ({
      dialogue: new Dialogue(c, a!, {
        context: so.context,
        kv: so.kv,
        prefillChunk: so.prefillChunk,
        maxFrames: this.env.init.maxFrames,
        text: so.text,
        audio: so.audio,
        seed: o.seed,
        prompts: this.prompts,
        clocks: this.clocksFor(o.index, a!),
        // Barge-in returns to any frame generation ran ahead of the listener.
        checkpoints: o.vad ? checkpointsFor(c, so.lookaheadMs) : 0,
      }),
      summary: a!.carve('turn.summary', 'metadata', Int32Array, TURN_FIELDS),
      barge: a!.carve('turn.barge', 'metadata', Int32Array, BARGE_FIELDS),
    }));
    this.conversations[o.index] = {
      index: o.index,
      input: this.ring(o, 'embed'),
      codes: this.ring(o, 'codes'),
      events: this.ring(o, 'events'),
      slot: -1,
      phase: PHASE_IDLE,
      vad: o.vad,
      words: o.vad ? this.words(o) : new Int32Array(0),
      starts: 0,
      replies: 0,
      cutReply: -1,
      verdict: -1,
      ...conv,
    };
  }

  poll(): boolean {
    let progress = false;
    // Indexed, not for-of: an iterator would allocate whenever this code runs unoptimised.
    for (let k = 0; k < this.conversations.length; k++) {
      const c = this.conversations[k];
      if (c !== undefined && this.#prefill(c)) progress = true;
    }
    if (!this.#open()) return progress;
    // Reply: one backbone position per conversation whose rings can take what it may emit;
    // two such conversations share one batched backbone call.
    const stepped = this.#stepped;
    stepped.fill(0);
    for (let k = 0; k < this.conversations.length; k++) {
      const c = this.conversations[k];
      if (c === undefined || stepped[k] === 1 || !this.#canStep(c)) continue;
      stepped[k] = 1;
      progress = true;
      let partner: DepthConv | undefined;
      if (c.dialogue.batchable) {
        for (let j = k + 1; j < this.conversations.length && partner === undefined; j++) {
          const d = this.conversations[j];
          if (d !== undefined && stepped[j] === 0 && d.dialogue.batchable && this.#canStep(d)) {
            partner = d;
            stepped[j] = 1;
          }
        }
      }
      if (partner === undefined) {
        this.#emit(c, c.dialogue.step(this.tickets.slots[c.slot]!));
        continue;
      }
      const e = this.#emitted;
      const heads = Dialogue.stepPair(c.dialogue, this.tickets.slots[c.slot]!, partner.dialogue, this.tickets.slots[partner.slot]!, this.#pair, e);
      this.batched++;
      if (heads === PAIR_HEADS_TEXT) this.batchedText++;
      else if (heads === PAIR_HEADS_AUDIO) this.batchedFrames++;
      this.#emit(c, e[0]!);
      this.#emit(partner, e[1]!);
    }
    this.#flushEvents();
    return progress;
  }

  override idle(): number {
    return Math.min(IDLE_POLL_MS, this.#flushEvents());
  }

  /**
   * Text and frames wait for the main thread's next wake-up (a reply's samples bring it every
   * frame) until they have waited EVENTS_LAZY_MS; then they ring it. Returns the ms until the
   * next such ring is due (Infinity: none is owed).
   */
  #flushEvents(): number {
    let next = Number.POSITIVE_INFINITY;
    let clock = false;
    for (let k = 0; k < this.conversations.length; k++) {
      const ev = this.conversations[k]?.events;
      if (ev === undefined || !ev.owes()) continue;
      if (!clock) {
        native.clockInto(this.#now, 0);
        clock = true;
      }
      const left = ev.owedAt + EVENTS_LAZY_MS - (this.#now[0] as number);
      if (left <= 0) ev.flush();
      else next = Math.min(next, left);
    }
    return next;
  }

  /**
   * Takes every record that has arrived for `c`: speech events at any time (a speech onset
   * waits for the main thread's answer, then for the verdict on the reply it may cut),
   * embedding rows and the segment's end outside a reply. True if any was taken.
   */
  #prefill(c: DepthConv): boolean {
    // A new conversation copies its system prompt from a conversation that ran it (or waits
    // for one running it); otherwise it runs it before any turn, a chunk per poll (other
    // conversations step in between), on a slot held for that chunk only.
    if (!c.dialogue.systemDone && c.phase === PHASE_IDLE) {
      const donor = this.#systemDonor(c);
      if (donor === WAIT_FOR_DONOR) return false;
      if (donor !== null && c.dialogue.copySystem(donor.dialogue)) {
        this.systemCopies++;
        return true;
      }
      const slot = this.tickets.acquire(c.index);
      if (slot >= 0) {
        c.dialogue.prefillSystem(this.tickets.slots[slot]!);
        this.tickets.release(slot);
        return true;
      }
    }
    let progress = false;
    for (;;) {
      const kind = c.input.peekKind();
      if (kind < 0) break;
      if (kind === REC_SPEECH_START && c.vad && !this.#judge(c)) break;
      if (kind === REC_SPEECH_START || kind === REC_SPEECH_END) {
        if (!c.events.canWrite(2)) break;
        const v = c.input.peekLength() > 0 ? c.input.peekInt(0) : 0;
        c.input.skip();
        c.events.write2(kind, v, 0);
        if (kind === REC_SPEECH_START) c.starts++;
        this.records++;
        progress = true;
        continue;
      }
      if (c.phase === PHASE_REPLY) break;
      if (c.phase === PHASE_IDLE) {
        const slot = this.tickets.acquire(c.index);
        if (slot < 0) break;
        c.slot = slot;
        c.dialogue.beginUser(this.tickets.slots[slot]!);
        c.phase = PHASE_PREFILL;
      }
      const s = this.tickets.slots[c.slot]!;
      if (kind === REC_EMBED) {
        const n = c.input.read(s.rowsIn, 0);
        c.dialogue.pushRows(s, s.rowsIn, 0, n / this.config.backbone.hidden);
      } else {
        if (kind === REC_END_SEGMENT && !c.codes.canWrite(0)) break;
        c.input.skip();
        if (kind === REC_END_SEGMENT) {
          c.dialogue.endUser(s, this.env.init.replyFrameLimits[c.replies] ?? this.env.init.maxFrames);
          c.codes.write(REC_TURN_START, null, 0, 0);
          c.phase = PHASE_REPLY;
          c.replies++;
          if (c.vad) Atomics.store(c.words, kReplies, c.replies);
        }
      }
      this.records++;
      progress = true;
    }
    return progress;
  }

  /** A conversation whose system prompt `c` may copy, WAIT_FOR_DONOR while one is running it, or null. */
  #systemDonor(c: DepthConv): DepthConv | null | typeof WAIT_FOR_DONOR {
    let wait = false;
    for (let k = 0; k < this.conversations.length; k++) {
      const d = this.conversations[k];
      if (d === undefined || d === c) continue;
      if (d.dialogue.systemSaved) return d;
      if (d.dialogue.systemRunning) wait = true;
    }
    return wait ? WAIT_FOR_DONOR : null;
  }

  /**
   * Judges the speech onset at the head of `c`'s input: it interrupts the last reply if the
   * listener had not heard all of it. The reply is cut to the frames heard (at least the first,
   * generated if need be) and a BARGE record tells the main thread what stays. False while it
   * waits: for the main thread's answer to this onset, for the first frame, or for room.
   */
  #judge(c: DepthConv): boolean {
    const w = c.words;
    if (c.verdict < 0) {
      if (Atomics.load(w, kOnsetsSeen) <= c.starts) return false;
      const last = c.replies - 1;
      const heardReply = Atomics.load(w, kHeardReply);
      c.verdict = NO_CUT;
      if (last >= 0 && c.cutReply !== last && heardReply <= last) {
        c.verdict = heardReply < last ? 0 : Math.ceil(Atomics.load(w, kHeard) / this.#frameSamples);
      }
    }
    const d = c.dialogue;
    const cut = c.verdict !== NO_CUT;
    // A reply cut before its first frame keeps that frame (its text alone was not heard either).
    if (cut && c.phase === PHASE_REPLY && d.frames === 0) return false;
    // The main thread reads the events ring at once (it may hold the output ring meanwhile).
    if (!c.events.canWrite(BARGE_FIELDS + RECORD_OVERHEAD + 2)) return false;
    const b = c.barge;
    b[BARGE_REPLY] = -1;
    b[BARGE_FRAMES] = -1;
    b[BARGE_GENERATED] = d.frames;
    if (cut) {
      const kept = d.truncate(Math.max(1, Math.min(d.frames, c.verdict))) ? d.frames : -1;
      // A finished reply whose context cannot be cut (no audio, or forgotten) plays on.
      if (kept >= 0 || c.phase === PHASE_REPLY) {
        c.cutReply = c.replies - 1;
        b[BARGE_REPLY] = c.cutReply;
        b[BARGE_FRAMES] = kept;
      }
    }
    b[BARGE_TEXT_TOKENS] = d.textTokens;
    b[BARGE_POSITIONS] = d.position;
    c.events.write(REC_BARGE, b, 0, BARGE_FIELDS);
    // Cut mid-reply, the next step ends the turn; one whose context could not be cut runs on, unheard.
    c.verdict = -1;
    return true;
  }

  /** In its reply, with room in both output rings for what one position may emit, and (VAD) within the look-ahead. */
  #canStep(c: DepthConv): boolean {
    const cb = this.config.audio.codebooks;
    if (c.phase !== PHASE_REPLY || !c.codes.canWrite(cb + RECORD_OVERHEAD + 2) || !c.events.canWrite(cb + TURN_FIELDS + 2 * RECORD_OVERHEAD)) return false;
    // No look-ahead while an onset waits for the reply's first frame, nor for a cut reply (unheard).
    if (!c.vad || c.verdict >= 0 || c.cutReply === c.replies - 1) return true;
    const w = c.words;
    const played = Atomics.load(w, kPlayedReply) === c.replies - 1 ? Atomics.load(w, kPlayed) : 0;
    return c.dialogue.frames * this.#frameSamples - played < this.#lookahead;
  }

  /** Sends what one step of `c` emitted; at the turn's end, its summary, and its slot goes back. */
  #emit(c: DepthConv, e: number): void {
    const cb = this.config.audio.codebooks;
    const d = c.dialogue;
    if (e === EMIT_TEXT) {
      c.events.write2(REC_TEXT, d.token, 0, true);
    } else if (e === EMIT_DONE) {
      const sm = c.summary;
      sm[TURN_TEXT_TOKENS] = d.textTokens;
      sm[TURN_FRAMES] = d.frames;
      sm[TURN_STOP] = d.stop === 'end-of-turn' ? 1 : d.stop === 'interrupted' ? 2 : 0;
      sm[TURN_END_OF_AUDIO] = d.endOfAudio ? 1 : 0;
      sm[TURN_POSITIONS] = d.position;
      sm[TURN_COMPACTIONS] = d.compactions;
      sm[TURN_DROPPED] = d.dropped;
      sm[TURN_USER_FRAMES] = d.userFrames;
      // Events first: whoever sees the turn end through playback can then read its summary.
      c.events.write(REC_TURN_END, sm, 0, TURN_FIELDS);
      if (this.env.init.turnEndPauseMs > 0) Atomics.wait(PAUSE, 0, 0, this.env.init.turnEndPauseMs);
      c.codes.write(REC_TURN_END, null, 0, 0);
      this.tickets.release(c.slot);
      c.slot = -1;
      c.phase = PHASE_IDLE;
    } else {
      const kind = e === EMIT_END_OF_AUDIO ? REC_END_OF_AUDIO : REC_CODES;
      c.codes.write(kind, d.codes, 0, cb);
      c.events.write(kind, d.codes, 0, cb, kind === REC_CODES);
    }
    this.records++;
  }
}

// ---------------------------------------------------------------------------------------------

interface PlaybackConv extends RoomConv {
  state: DetokenizerState;
  pcm: Float32Array; // one frame (or the flush) at the device rate
  codes: Int32Array;
  slot: number;
  open: boolean;
}

/**
 * Codes to device-rate PCM: the detokenizer, the ISTFT and the resampler, one code frame per
 * record, written straight into the playback ring.
 */
export class PlaybackStage extends PassStage<PlaybackConv, Detokenizer> {
  constructor(env: Environment) {
    super(
      'playback',
      env,
      (s, work, derived) => new Detokenizer(s.config, env.image, work, derived, { turnPositions: env.init.turnPositions, planner: s.planner }),
    );
  }

  open(o: StageConversation & { rings?: StageOpen['rings']; duplex?: StageOpen['duplex'] }): void {
    const c = this.config;
    const det = this.tickets.slots[0]!;
    const conv = this.carve([{ owner: { kind: 'conversation', index: o.index }, name: `conversation ${o.index} playback` }], 1 << 28, ([a]) => {
      this.clocksFor(o.index, a!);
      const state = new DetokenizerState(c, a!, arenaWorkspace(a!, 'recurrence', 'detok'), {
        turnPositions: this.env.init.turnPositions,
        outputRate: this.env.init.options.outputRate,
      });
      return {
        state,
        pcm: a!.carve('playback.pcm', 'playback.payload', Float32Array, det.maxSamples(state)),
        codes: a!.carve('playback.codes', 'workspace.detokenizer', Int32Array, c.audio.codebooks),
      };
    });
    if (conv.pcm.length > maxPayloadOf(o.capacities.output))
      throw new BadInputError({ field: 'outputRate' }, `the playback ring cannot hold a frame at ${this.env.init.options.outputRate} Hz`);
    this.conversations[o.index] = {
      index: o.index,
      input: this.ring(o, 'codes'),
      out: this.ring(o, 'output'),
      room: conv.pcm.length + 2 * RECORD_OVERHEAD,
      slot: -1,
      open: false,
      ...conv,
    };
  }

  #flush(c: PlaybackConv, det: Detokenizer): void {
    this.tic();
    const n = det.finish(c.state, c.pcm, 0);
    this.toc(c.index, 6);
    if (n > 0) c.out.write(REC_PCM, c.pcm, 0, n);
    c.open = false;
  }

  poll(): boolean {
    return this.pollRecords(this.conversations);
  }

  protected override record(c: PlaybackConv, kind: number): boolean {
    if (kind === REC_TURN_START) {
      const slot = this.tickets.acquire(c.index);
      if (slot < 0) return false;
      c.slot = slot;
      c.state.startTurn();
      c.open = false;
      c.input.skip();
      return true;
    }
    const det = this.tickets.slots[c.slot]!;
    if (kind === REC_CODES) {
      c.input.read(c.codes, 0);
      this.tic();
      if (!c.open) c.state.startTurn();
      c.open = true;
      const n = det.frame(c.state, c.codes, c.pcm, 0);
      this.toc(c.index, 6);
      if (n > 0) c.out.write(REC_PCM, c.pcm, 0, n);
    } else if (kind === REC_END_OF_AUDIO) {
      c.input.skip();
      if (c.open) this.#flush(c, det);
    } else {
      c.input.skip();
      if (kind === REC_TURN_END) {
        if (c.open) this.#flush(c, det);
        c.out.write(REC_TURN_END, null, 0, 0);
        this.tickets.release(c.slot);
        c.slot = -1;
      }
    }
    return true;
  }
}

/** Builds the stage a worker runs. */
export function createStage(env: Environment): Stage<unknown> {
  switch (env.init.stage) {
    case 'capture':
      return new CaptureStage(env);
    case 'frontend':
      return new FrontendStage(env);
    case 'conformer':
      return new ConformerStage(env);
    case 'depthformer':
      return new DepthformerStage(env);
    case 'playback':
      return new PlaybackStage(env);
  }
}
