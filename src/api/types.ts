/** The types of a conversation's options, events and turn summaries (the library's public surface). */
import type { ReplyStop } from '../core/dialogue.js';
import type { VoxslabError } from '../errors.js';
import type { MemoryManifest } from '../memory/manifest.js';

export type SampleFormat = 'f32' | 's16';

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

/**
 * What `conversation.update()` changes in a VAD conversation while it runs (the engine's `load`
 * options give the starting values). Each left out keeps its value.
 */
export interface ConversationSettings {
  /** Silence after speech that ends the user's turn, ms (100..10000; 10 ms steps). */
  silenceMs?: number;
  /** Shortest speech kept as a turn, ms (10..10000; 10 ms steps). */
  minSpeechMs?: number;
  /** The WebRTC VAD's voice likelihood (an engine loaded with `vad: 'silero'` keeps Silero). */
  vad?: 'very-low' | 'low' | 'moderate' | 'high';
  /** How far generation may run ahead of playback, ms (80 up to the engine's `lookaheadMs`). */
  lookaheadMs?: number;
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
  /**
   * A stage worker failed: the conversation closes. `turn` is the turn in progress. As with
   * Node's emitters, an error nothing receives (no listener, no `events()` iterator, no
   * `nextTurn()` waiting, no `stream()`) is thrown: an uncaught exception.
   */
  error: [VoxslabError, { turn: number }];
  /** The memory manifest: at open (`turn` 0) and after each turn's reply (that turn). */
  memory: [{ turn: number; manifest: MemoryManifest }];
  /** The conversation closed; `turn` is the turn that was in progress or next. */
  close: [{ turn: number }];
}

/** One event as the async iterator yields it (`close` ends the iteration). */
export type ConversationEvent =
  | {
      [K in Exclude<keyof ConversationEvents, 'error' | 'close'>]: { type: K } & ConversationEvents[K][0];
    }[Exclude<keyof ConversationEvents, 'error' | 'close'>]
  | { type: 'error'; error: VoxslabError; turn: number };
