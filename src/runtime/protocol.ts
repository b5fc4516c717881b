/**
 * The typed boundary between the coordinator and the stage workers: the control block, record kinds on the data rings, the control calls (over comlink) and what they
 * carry. Control is setup and inspection only; audio, mel rows, embeddings, tokens and codes
 * travel through the rings (ring.ts), never through postMessage.
 */
import type { SharedMemoryDomain } from '../memory/domain.js';
import type { SharedWeightsImage } from '../model/format/image.js';
import type { ModelConfig } from '../model/format/config.js';
import type { ResolvedSpeechOptions } from '../core/conversation.js';
import type { SharedRing } from './ring.js';
import type { ReplyStop } from '../core/dialogue.js';
import type { SlabRecord } from '../memory/slab.js';
import '../core/categories.js';

/** A stage's name, as its spec gives it (stages/index.ts). */
export type StageName = string;
/** What a ring carries ('mel', 'embed'): stages name their rings by it (topology.ts). */
export type RingName = string;
/** Doorbell of the main thread; stage i (in pipeline order) rings at i + 1. */
export const BELL_MAIN = 0;

/** Int32 words of the control block: doorbells, one attention word per stage, the stop flag, one idle word per bell. */
export interface ControlLayout {
  /** First attention word (at attention + bell): a control call waits for the stage. */
  readonly attention: number;
  /** 1: every stage leaves its loop. */
  readonly stop: number;
  /** First idle word (at idle + bell): 1 + the bell value the stage sleeps on after a poll found nothing, 0 while it works. */
  readonly idle: number;
  readonly words: number;
}

/** Record kinds. Payloads: floats for PCM/MEL/EMBED, ints otherwise. */
export const REC_PCM = 1; // samples
export const REC_END_SEGMENT = 2; // [] the user segment is closed
export const REC_MEL = 3; // [rows][nMels] raw log-mel rows
export const REC_EMBED = 4; // [rows][hidden] adapter rows
export const REC_TURN_START = 5; // [] an assistant turn starts
export const REC_TEXT = 6; // [token]
export const REC_CODES = 7; // [codebooks] one audio frame
export const REC_END_OF_AUDIO = 8; // [codebooks] all 2048
export const REC_TURN_END = 9; // TURN_FIELDS
export const REC_SPEECH_START = 10; // [] the user started speaking (the frontend's VAD)
export const REC_SPEECH_END = 11; // [reason] SPEECH_TURN: a turn follows; SPEECH_DROPPED: too short
export const REC_DISCARD = 12; // [] forget the segment's rows so far
// Speculation (docs/duplex.md): on the mel ring a provisional turn is offered by its rows; on the
// embed ring its adapter rows follow (EMBED records, then END_SEGMENT), and the endpoint's
// answer comes after them: CONFIRM, then the same rows again for a stage that did not take
// them, or RESUME.
export const REC_PROVISIONAL = 16; // mel ring: [rows] the segment's first rows are the turn if the silence goes on; embed ring: [frames] its adapter rows follow
export const REC_RESUME = 17; // [] the speech went on (or the turn was encoded anew): the last provisional turn is not one
export const REC_CONFIRM = 18; // [] the provisional turn just sent is the turn
export const REC_DUPLEX = 14; // [2][samples] the microphone, then the far end played at the same device time (input rate)
export const REC_PCM_ECHO = 15; // samples (16 kHz, echo cancelled) heard while the far end plays and the canceller has not converged: not the user
export const REC_BARGE = 13; // BARGE_FIELDS: the Depthformer stage's verdict on a speech onset (events ring)
export const SPEECH_TURN = 1;
export const SPEECH_DROPPED = 2;

/** Fields of a BARGE record: the reply cut (-1: none), what it kept, the context after it. */
export const BARGE_REPLY = 0;
export const BARGE_FRAMES = 1; // audio frames kept (-1: the context could not be cut; the reply's audio is dropped)
export const BARGE_TEXT_TOKENS = 2;
export const BARGE_POSITIONS = 3;
export const BARGE_GENERATED = 4; // audio frames the reply had when it was judged
export const BARGE_FIELDS = 5;

/** A BARGE record decoded: the Depthformer stage's verdict on a speech onset. */
export interface BargeVerdict {
  /** The reply cut (its audio is dropped), or -1: none. */
  reply: number;
  /** Audio frames of it the context keeps (-1: the context could not be cut; the reply was only silenced). */
  frames: number;
  textTokens: number;
  positions: number;
  /** Frames the reply had when it was judged. */
  generated: number;
}

export function readBargeFields(b: Int32Array): BargeVerdict {
  return {
    reply: b[BARGE_REPLY]!,
    frames: b[BARGE_FRAMES]!,
    textTokens: b[BARGE_TEXT_TOKENS]!,
    positions: b[BARGE_POSITIONS]!,
    generated: b[BARGE_GENERATED]!,
  };
}

/**
 * A conversation's duplex words (Int32, carved with its rings). Writers: the frontend stage
 * (kVoice, kOnsets), the main thread (kOnsetsSeen, kHeard*, kPlayed*, kCancelReply, the
 * settings k*Set), the Depthformer stage (kReplies). Each is written by one thread and read with
 * Atomics by the others. All but kCancelReply serve VAD conversations only. A setting's 0 means
 * the engine's own value.
 */
export const kVoice = 0; // 1 while speech may be under way (playback holds), else 0
export const kOnsets = 1; // confirmed speech onsets so far
export const kOnsetsSeen = 2; // onsets the main thread has answered (kHeard* are for the last)
export const kHeardReply = 3; // the reply the main thread was delivering at that onset
export const kHeard = 4; // samples of it delivered then
export const kPlayedReply = 5; // the reply being delivered now (replies whose end was delivered)
export const kPlayed = 6; // samples of it delivered so far
export const kReplies = 7; // replies the Depthformer stage has begun
export const kCancelReply = 8; // 1 + the reply the main thread cancelled (0: none)
export const kSilenceSet = 9; // frames of silence that end a turn (the frontend reads it)
export const kMinSpeechSet = 10; // frames of speech a turn needs (the frontend)
export const kVadSet = 11; // the WebRTC VAD's likelihood, 1..4 (the frontend)
export const kLookaheadSet = 12; // output samples generation may run ahead of playback (the Depthformer stage)
export const DUPLEX_WORDS = 13;

/** Fields of a TURN_END record on the event ring. */
export const TURN_TEXT_TOKENS = 0;
export const TURN_FRAMES = 1;
export const TURN_STOP = 2; // 0 length, 1 end of turn, 2 interrupted
export const TURN_END_OF_AUDIO = 3;
export const TURN_POSITIONS = 4;
export const TURN_COMPACTIONS = 5;
export const TURN_DROPPED = 6;
export const TURN_USER_FRAMES = 7;
export const TURN_FIELDS = 8;

/** A TURN_END record's fields, decoded (the one reader of the layout above). */
export interface TurnFields {
  textTokens: number;
  frames: number;
  stop: ReplyStop;
  endOfAudio: boolean;
  positions: number;
  compactions: number;
  droppedPositions: number;
  userFrames: number;
}

export function readTurnFields(s: Int32Array): TurnFields {
  return {
    textTokens: s[TURN_TEXT_TOKENS]!,
    frames: s[TURN_FRAMES]!,
    stop: s[TURN_STOP] === 1 ? 'end-of-turn' : s[TURN_STOP] === 2 ? 'interrupted' : 'length',
    endOfAudio: s[TURN_END_OF_AUDIO] === 1,
    positions: s[TURN_POSITIONS]!,
    compactions: s[TURN_COMPACTIONS]!,
    droppedPositions: s[TURN_DROPPED]!,
    userFrames: s[TURN_USER_FRAMES]!,
  };
}

/** Everything a stage worker needs to build its stage (sent once). */
export interface StageInit {
  stage: StageName;
  /** Its doorbell, and the control block's layout (topology.ts). */
  bell: number;
  layout: ControlLayout;
  domain: SharedMemoryDomain;
  image: SharedWeightsImage;
  config: ModelConfig;
  options: ResolvedSpeechOptions;
  maxFrames: number;
  turnPositions: number;
  prompts: { system: number[]; userOpen: number[]; userClose: number[]; replyClose: number[] };
  /** The control block (`layout.words` Int32 words at `byteOffset`). */
  control: { buffer: SharedArrayBuffer; byteOffset: number };
  /** Pass slots of the compute stages. */
  slots: number;
  /** CPUs to pin this worker to; empty = leave the affinity as it is. */
  pin: number[];
  /** Threads sharing this stage's row-by-row layers (its native helpers are threads − 1). */
  threads: number;
  /** Test mode: count typed-array and buffer constructions once the stage is ready. */
  trapAllocations: boolean;
  /** Test hook: exit the worker when this many records have been handled (0 = never). */
  exitAfterRecords: number;
  /** Test hook: the worker's allocator fails its n-th slab (1-based; 0 = never). */
  failAllocationAt: number;
  /** Test hook (Depthformer stage): hold every reply until this many conversations have one ready (0 = never). */
  gateReplies: number;
  /** Test hook (Depthformer stage): the most audio frames of each conversation's n-th reply (none: the reply length). */
  replyFrameLimits: number[];
  /** Test hook (Depthformer stage): ms to stall between a turn's two end records (0 = never). */
  turnEndPauseMs: number;
  /** Test hook (Depthformer stage): ms to stall after a reply's first audio frame is sent (0 = never). */
  firstFramePauseMs: number;
}

export interface StageReady {
  stage: StageName;
  /** CPUs the worker may run on after pinning, and the one it ran on then. */
  affinity: number[];
  cpu: number;
  pinError: string | null;
  /** The worker's own native compute helpers (`threads` − 1 of them): the CPUs each may run on. */
  helpers: number[][];
  /** Set when the system started fewer helpers than asked (the stage runs with those it has). */
  threadsError: string | null;
  /** The slabs the worker created (returned to the cap by the coordinator if it dies). */
  slabs: SlabRecord[];
}

/** One conversation as a stage sizes it: what it carves depends on these alone. */
export interface StageConversation {
  index: number;
  seed: number;
  inputRate: number;
  /** The frontend finds the user's turns itself (VAD and endpointing), not the host. */
  vad: boolean;
  /** Echo cancellation in capture (DUPLEX records): the delay from a played sample to its echo, ms; -1: none. */
  echoDelayMs: number;
  /** Data words of its rings, by what they carry. */
  capacities: Readonly<Record<RingName, number>>;
}

/** One conversation as a stage opens it: its rings and barge-in words too. */
export interface StageOpen extends StageConversation {
  /** The rings this stage reads and writes, by what they carry. */
  rings: { reads: Readonly<Record<RingName, SharedRing>>; writes: Readonly<Record<RingName, SharedRing>> };
  /** DUPLEX_WORDS Int32 words at `byteOffset`. */
  duplex: { buffer: SharedArrayBuffer; byteOffset: number };
}

export interface StageStats {
  stage: StageName;
  /** Per conversation: wall ms and count of each clock this stage ran (names as CLOCKS). */
  clocks: Record<string, { ms: number; count: number }>[];
  records: number;
  /** Batched calls (the Depthformer stage's backbone steps, the playback stage's detokenizer frames): several conversations read each weight block once. */
  batchedSteps: number;
  /** Conversations' positions (or frames) those calls served (over batchedSteps: the mean width), and the widest. */
  batchedRows: number;
  widestBatch: number;
  /** Of those calls, the ones that also ran two or more text heads, or Depthformer frames, in one call. */
  batchedTextHeads: number;
  batchedFrames: number;
  /** Conversations that copied their system prompt's state from another instead of running it. */
  systemCopies: number;
  /** Turns encoded ahead at a pause (the Conformer stage's), and those the endpoint kept. */
  speculations: number;
  speculationsKept: number;
  /**
   * Passes over a turn's prompt (the Depthformer stage's prefill chunks and replies' first
   * steps) that waited for the replies playing to get ahead of their players, and those of them
   * that stopped waiting after the longest wait (the stage was behind).
   */
  deferredPasses: number;
  overduePasses: number;
  /** Pass slots: most held at once, passes that began while another slot was held. */
  slots: { count: number; maxBusy: number; overlapped: number };
  /** Constructor calls trapped after readiness (test mode), JS heap change over the run. */
  allocationsAfterReady: number;
  heapDelta: number;
  /**
   * Bytes of the worker's JS heap the OS holds (V8's physical heap size): it follows V8's heap
   * sizing as garbage comes and goes, so it moves while `heapDelta` (live bytes) holds.
   */
  heapCommitted: number;
  /** Bytes of the ArrayBuffers the worker's isolate holds, as V8 counts them (shared ones included). */
  arrayBuffers: number;
  /** Bytes V8 allocated outside its heap for this isolate (its own bookkeeping: the runtime's, not the ledger's). */
  malloced: number;
  /** Resident bytes (mincore) of the slabs this worker created (they are the ledger's). */
  slabResident: number;
  nonFinite: number;
  /** The first damaged red zone among the stage's arenas, or null (always null without red zones). */
  canary: string | null;
  /** Wall ms the loop spent in polls that made progress. */
  busyMs: number;
  /**
   * The worker thread's CPU ms since the loop started, and the part of it inside the model's
   * timed compute sections; the rest is the pipeline's own work (rings, wake-ups, copies, control).
   * Both -1 where the OS has no per-thread CPU clock.
   */
  cpuMs: number;
  computeCpuMs: number;
  /** Of cpuMs, the CPU ms spent going to sleep on the doorbell and waking up (-1 as cpuMs). */
  sleepCpuMs: number;
  /** Loop turns: polls that made progress, and polls that found nothing (each followed by a sleep on the doorbell). */
  polls: number;
  idlePolls: number;
}

/** The batching counters of a stage's stats. */
export type BatchingStats = Pick<
  StageStats,
  | 'batchedSteps'
  | 'batchedRows'
  | 'widestBatch'
  | 'batchedTextHeads'
  | 'batchedFrames'
  | 'systemCopies'
  | 'speculations'
  | 'speculationsKept'
  | 'deferredPasses'
  | 'overduePasses'
>;

/** The control surface each stage worker exposes over comlink. */
export interface StageApi {
  init(init: StageInit): StageReady;
  /** The bytes `open` would charge to the cap for this conversation; nothing is allocated. */
  size(o: StageConversation): number;
  /** Returns the records of the slabs it created (sealed at once when the stage is running). */
  open(o: StageOpen): SlabRecord[];
  /** Milliseconds of one generated frame of 1, 2, … conversations at once here (empty: none), timed on a conversation opened for it. */
  calibrate(index: number, rows: readonly number[]): number[];
  /** Drops a conversation (its pass slot too) and returns its slabs to the cap. */
  close(index: number): void;
  ready(): void;
  start(): void;
  stats(): StageStats;
  stop(): void;
}
