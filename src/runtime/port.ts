/**
 * The main thread's end of one pipeline conversation: it writes the input records, decodes the
 * events ring into typed calls on a listener, reads the reply audio, and for a VAD conversation
 * runs the main thread's half of the barge-in handshake (protocol.ts, kVoice…). The library's
 * conversations, the daemon (through them) and `voxslab run` all read the rings through it.
 *
 * Thread contract: the main thread only. Decoding allocates nothing of its own; a listener may.
 */
import type { Pipeline, PipelineConversation } from './coordinator.js';

export type { BargeVerdict } from './protocol.js';
import {
  BARGE_FIELDS,
  type BargeVerdict,
  kCancelReply,
  kHeard,
  kHeardReply,
  kLookaheadSet,
  kMinSpeechSet,
  kOnsets,
  kOnsetsSeen,
  kPlayed,
  kPlayedReply,
  kSilenceSet,
  kVadSet,
  kVoice,
  REC_BARGE,
  REC_CODES,
  REC_DUPLEX,
  REC_END_OF_AUDIO,
  REC_END_SEGMENT,
  REC_PCM,
  REC_SPEECH_END,
  REC_SPEECH_START,
  REC_TEXT,
  readBargeFields,
  REC_TURN_END,
  SPEECH_TURN,
  TURN_FIELDS,
  TURN_FRAMES,
  TURN_POSITIONS,
  TURN_STOP,
  TURN_TEXT_TOKENS,
} from './protocol.js';

/** What the events ring carries, as calls (all on the main thread, in ring order). */
export interface PortListener {
  text(token: number): void;
  /** An audio frame's codes, end-of-audio frames too (the view is reused: copy what you keep). */
  frame?(codes: Int32Array): void;
  speechStart?(): void;
  /** The frontend's endpointer ended the speech: a turn follows (true), or it was too short (false). */
  speechEnd?(turn: boolean): void;
  barge?(verdict: BargeVerdict): void;
}

/** `readOutput` results besides a PCM record's sample count. */
export const OUT_NONE = -1; // the output ring is empty
export const OUT_REPLY_END = -2; // a reply's end: call `endReply` once it is accounted for
export const OUT_DROPPED = -3; // audio of a reply a barge-in cut, dropped
export const OUT_OTHER = -4; // a record with nothing for the reader

export class ConversationPort {
  readonly conv: PipelineConversation;
  readonly #pipeline: Pipeline;
  readonly #listener: PortListener;
  /** The last reply's summary (TURN_FIELDS; a barge-in rewrites what stays of it). */
  readonly summary = new Int32Array(TURN_FIELDS);
  /** Summaries read so far. */
  summaries = 0;
  /** Replies whose end came out of the output ring, and samples of the current reply delivered. */
  replied = 0;
  delivered = 0;
  readonly #frame: Int32Array;
  readonly #barge = new Int32Array(BARGE_FIELDS);
  #onsetsSeen = 0;
  /** Verdicts owed on onsets answered, and the reply whose audio is dropped (-1: none). */
  verdictsDue = 0;
  dropReply = -1;
  readonly #depthformerBell: number;
  readonly #playbackBell: number;

  constructor(pipeline: Pipeline, conv: PipelineConversation, listener: PortListener) {
    this.#pipeline = pipeline;
    this.conv = conv;
    this.#listener = listener;
    this.#frame = new Int32Array(pipeline.config.audio.codebooks);
    this.#depthformerBell = pipeline.topology.bell('depthformer');
    this.#playbackBell = pipeline.topology.bell('playback');
  }

  /** One PCM record of `src[at, at + n)`; false when the input ring has no room. */
  writePcm(src: Float32Array, at: number, n: number): boolean {
    return this.conv.input.write(REC_PCM, src, at, n);
  }

  /** One DUPLEX record: `src[at, at + n/2)` heard and `src[at + n/2, at + n)` played. */
  writeDuplex(src: Float32Array, at: number, n: number): boolean {
    return this.conv.input.write(REC_DUPLEX, src, at, n);
  }

  /** Ends the user's segment (a reply follows); false when the input ring has no room. */
  endSegment(): boolean {
    return this.conv.input.write(REC_END_SEGMENT, null, 0, 0);
  }

  /** Decodes the events ring (up to the next summary with `toSummary`); true if any record was taken. */
  events(toSummary = false): boolean {
    const ev = this.conv.events;
    const l = this.#listener;
    let progress = false;
    for (let kind = ev.peekKind(); kind >= 0; kind = ev.peekKind()) {
      progress = true;
      if (kind === REC_TEXT) {
        const token = ev.peekInt(0);
        ev.skip();
        l.text(token);
      } else if (kind === REC_CODES || kind === REC_END_OF_AUDIO) {
        ev.read(this.#frame, 0);
        l.frame?.(this.#frame);
      } else if (kind === REC_TURN_END) {
        ev.read(this.summary, 0);
        this.summaries++;
        if (toSummary) return true;
      } else if (kind === REC_BARGE) this.#verdict();
      else if (kind === REC_SPEECH_START) {
        ev.skip();
        l.speechStart?.();
      } else if (kind === REC_SPEECH_END) {
        const why = ev.peekInt(0);
        ev.skip();
        l.speechEnd?.(why === SPEECH_TURN);
      } else ev.skip();
    }
    return progress;
  }

  /**
   * Answers the speech onsets the frontend confirmed since the last call with what this thread
   * had delivered of the reply then (kHeard*): the Depthformer stage judges each and sends a
   * BARGE record. True if there was one. VAD conversations only.
   */
  answerOnsets(): boolean {
    const w = this.conv.duplex;
    const onsets = Atomics.load(w, kOnsets);
    if (onsets === this.#onsetsSeen) return false;
    Atomics.store(w, kHeardReply, this.replied);
    Atomics.store(w, kHeard, this.delivered);
    this.verdictsDue += onsets - this.#onsetsSeen;
    this.#onsetsSeen = onsets;
    Atomics.store(w, kOnsetsSeen, onsets);
    this.#pipeline.bells.ring(this.#depthformerBell);
    return true;
  }

  #verdict(): void {
    this.conv.events.read(this.#barge, 0);
    this.verdictsDue--;
    const v = readBargeFields(this.#barge);
    if (v.reply < 0) return;
    this.dropReply = v.reply;
    if (v.frames >= 0) {
      // What stays of the reply: its summary as the context now holds it.
      const s = this.summary;
      s[TURN_FRAMES] = v.frames;
      s[TURN_TEXT_TOKENS] = v.textTokens;
      s[TURN_POSITIONS] = v.positions;
      s[TURN_STOP] = 2;
    }
    this.#listener.barge?.(v);
  }

  /**
   * Cancels reply number `replied` (the one being generated or delivered): the Depthformer stage
   * ends it at its next step, and what it had not delivered is dropped here.
   */
  cancelReply(): void {
    this.dropReply = this.replied;
    Atomics.store(this.conv.duplex, kCancelReply, this.replied + 1);
    this.#pipeline.bells.ring(this.#depthformerBell);
  }

  /**
   * A VAD conversation's settings in the stages' units (10 ms frames, the VAD's likelihood level,
   * output samples; 0: the engine's). The frontend reads them at its next record, the
   * Depthformer stage at its next step, the playback stage at its next poll (it is rung: a first
   * frame it holds for the second may be due now).
   */
  settings(s: { silence: number; minSpeech: number; vad: number; lookahead: number }): void {
    const w = this.conv.duplex;
    Atomics.store(w, kSilenceSet, s.silence);
    Atomics.store(w, kMinSpeechSet, s.minSpeech);
    Atomics.store(w, kVadSet, s.vad);
    Atomics.store(w, kLookaheadSet, s.lookahead);
    this.#pipeline.bells.ring(this.#depthformerBell);
    this.#pipeline.bells.ring(this.#playbackBell);
  }

  /** Whether reply audio must wait (VAD): a verdict is due, or the user may be speaking. */
  held(): boolean {
    return this.conv.vad && (this.verdictsDue > 0 || Atomics.load(this.conv.duplex, kVoice) !== 0);
  }

  /** The reply being delivered was cut by a barge-in: its audio is dropped. */
  get dropping(): boolean {
    return this.dropReply === this.replied;
  }

  /** The kind of the next output record, or -1. */
  peekOutput(): number {
    return this.conv.output.peekKind();
  }

  /**
   * Takes the next output record: a PCM record's sample count (into `pcm`), or OUT_*. A reply's
   * end reads its summary first if it has not arrived (the Depthformer stage writes it before
   * playback passes the end on).
   */
  readOutput(pcm: Float32Array): number {
    const out = this.conv.output;
    const kind = out.peekKind();
    if (kind < 0) return OUT_NONE;
    if (kind === REC_PCM) {
      if (this.dropping) {
        out.skip();
        return OUT_DROPPED;
      }
      return out.read(pcm, 0);
    }
    out.skip();
    if (kind !== REC_TURN_END) return OUT_OTHER;
    if (this.summaries <= this.replied) this.events(true);
    return OUT_REPLY_END;
  }

  /** `n` more samples of the reply delivered (played, on a device): the look-ahead runs from here. */
  heard(n: number): void {
    this.delivered += n;
    if (!this.conv.vad) return;
    Atomics.store(this.conv.duplex, kPlayed, this.delivered);
    this.#pipeline.bells.ring(this.#depthformerBell);
  }

  /** The reply whose end came out is accounted for: the next reply's count starts. */
  endReply(): void {
    this.replied++;
    this.delivered = 0;
    if (!this.conv.vad) return;
    Atomics.store(this.conv.duplex, kPlayed, 0);
    Atomics.store(this.conv.duplex, kPlayedReply, this.replied);
    this.#pipeline.bells.ring(this.#depthformerBell);
  }
}
