/**
 * The turn detector: endpointing over per-frame voice decisions (10 ms each): when the user's
 * speech starts, and when their turn ends. A pure state machine over plain numbers; the
 * decisions come from a FrameDecider (dsp/voice.ts). The frontend stage, the one-thread session
 * and the benches run this one machine.
 *
 *   idle     → idle       after `pause` voiced frames in a row: SPEECH_MAYBE (playback pauses
 *                         at once), then SPEECH_NOT if the run breaks before `onset` (playback
 *                         resumes where it paused: nothing is lost)
 *   idle     → speech     after `onset` voiced frames in a row (SPEECH_START; the speech began
 *                         at the first of them; barge-in is confirmed)
 *   speech   → idle       at an unvoiced frame `silence` frames after the speech's end, once
 *                         the last `silence` frames hold at most a tenth voiced ones:
 *                         SPEECH_END when the speech lasted at least `minSpeech` frames,
 *                         otherwise SPEECH_DROP (a cough, a click: not a turn)
 *   speech   → idle       after `maxSegment` frames of speech: SPEECH_END (the longest segment)
 *
 * Silence is judged over a window rather than as unvoiced frames in a row, because a frame-level
 * VAD in noise says "voice" now and then in the pauses; one such frame must not restart the wait.
 * A detector that holds its decision for some frames after speech stops (WebRTC's hangover)
 * declares them (`hangover`): when a voiced run ends, that many of its last frames count as
 * silence, so the wait is measured from the end of the speech, not of the hangover.
 *
 * Thread contract: one instance per stream, one thread; nothing allocates after construction.
 */
import { ArgumentError } from '../errors.js';
import { heapWorkspace, type Workspace } from '../dsp/workspace.js';

/** What one frame's decision did (Endpointer.push). */
export const VAD_NONE = 0; // nothing changed
export const VAD_SPEECH_START = 1; // speech confirmed (`start` is its first frame): barge-in
export const VAD_SPEECH_END = 2; // a turn ended after its silence
export const VAD_SPEECH_DROP = 3; // speech too short for a turn ended
export const VAD_SPEECH_MAYBE = 4; // the first sign of speech: playback holds
export const VAD_SPEECH_NOT = 5; // the sign was taken back: playback resumes

export interface EndpointOptions {
  /** Voiced frames in a row that start speech. */
  onset: number;
  /** Voiced frames in a row that may be speech (SPEECH_MAYBE); at most `onset`. Default 2. */
  pause?: number;
  /** Frames of (nearly) no voice that end it. */
  silence: number;
  /** Frames of speech (from its start to its last voiced frame) a turn needs. */
  minSpeech: number;
  /** Frames of speech after which the segment closes anyway. */
  maxSegment: number;
  /** The longest `silence` a later `configure` may ask for (the window is carved for it). Default `silence`. */
  maxSilence?: number;
  /**
   * Frames at the start of a stream whose decisions are ignored: the VAD learns the noise floor
   * and the echo canceller converges there, and both misfire until they have. Default 50.
   */
  warmup?: number;
}

/** Frames from milliseconds (10 ms per frame, at least one). */
export function framesOf(ms: number): number {
  return Math.max(1, Math.round(ms / 10));
}

export class Endpointer {
  readonly o: Required<EndpointOptions>;
  /** `silence` and `minSpeech` as `configure` asked, applied when no speech is under way. */
  readonly #next = { silence: 0, minSpeech: 0 };
  /** Frames seen. */
  frame = 0;
  /** While speaking: the frame the speech began at; -1 when idle. */
  start = -1;
  /** The last voiced frame. */
  lastVoiced = -1;
  /**
   * While speaking: where the speech so far ended, by the last voiced run at least `onset`
   * frames long once the detector's hangover is taken off it (shorter runs, a stray frame or a
   * click, neither move it nor restart the wait); the frame of the onset until such a run ends.
   */
  speechEnd = -1;
  /** Frames a run of voiced decisions outlasts the speech (FrameDecider.hangover); set by the caller. */
  hangover = 0;
  /** After SPEECH_END: whether the longest segment ended it (the speech went on). */
  cut = false;
  #run = 0;
  /** While speaking: voiced frames in a row up to this one. */
  #voicedRun = 0;
  readonly #window: Uint8Array; // [silence] the last decisions while speaking, a ring
  #voicedInWindow = 0;

  constructor(o: EndpointOptions, ws: Workspace = heapWorkspace) {
    for (const k of ['onset', 'silence', 'minSpeech', 'maxSegment'] as const) {
      if (!Number.isInteger(o[k]) || o[k] < 1) throw new ArgumentError(`endpointing ${k} must be a positive whole number of frames, got ${o[k]}`);
    }
    const pause = Math.min(o.pause ?? 2, o.onset);
    if (!Number.isInteger(pause) || pause < 1) throw new ArgumentError(`endpointing pause must be a positive whole number of frames, got ${pause}`);
    const warmup = o.warmup ?? 50;
    if (!Number.isInteger(warmup) || warmup < 0) throw new ArgumentError(`endpointing warmup must be a whole number of frames, got ${warmup}`);
    const maxSilence = o.maxSilence ?? o.silence;
    if (!Number.isInteger(maxSilence) || maxSilence < o.silence)
      throw new ArgumentError(`endpointing maxSilence must be a whole number of frames of at least silence (${o.silence}), got ${maxSilence}`);
    this.o = { ...o, warmup, pause, maxSilence };
    this.#next.silence = o.silence;
    this.#next.minSpeech = o.minSpeech;
    this.#window = ws('endpoint.window', Uint8Array, maxSilence);
  }

  /**
   * New `silence` and `minSpeech` (frames): now when no speech is under way, else when it ends,
   * so a turn is judged by one rule throughout.
   */
  configure(silence: number, minSpeech: number): void {
    if (!Number.isInteger(silence) || silence < 1 || silence > this.o.maxSilence)
      throw new ArgumentError(`endpointing silence must be 1..${this.o.maxSilence} frames, got ${silence}`);
    if (!Number.isInteger(minSpeech) || minSpeech < 1)
      throw new ArgumentError(`endpointing minSpeech must be a positive whole number of frames, got ${minSpeech}`);
    this.#next.silence = silence;
    this.#next.minSpeech = minSpeech;
    if (this.start < 0) this.#apply();
  }

  #apply(): void {
    this.o.silence = this.#next.silence;
    this.o.minSpeech = this.#next.minSpeech;
  }

  get speaking(): boolean {
    return this.start >= 0;
  }

  /** Takes the next frame's decision; returns a VAD_* event. */
  push(voiced: boolean): number {
    const f = this.frame++;
    if (f < this.o.warmup) return VAD_NONE;
    if (voiced) this.lastVoiced = f;
    if (this.start < 0) {
      const was = this.#run;
      this.#run = voiced ? this.#run + 1 : 0;
      if (this.#run === 0) return was >= this.o.pause ? VAD_SPEECH_NOT : VAD_NONE;
      if (this.#run < this.o.onset) return this.#run === this.o.pause ? VAD_SPEECH_MAYBE : VAD_NONE;
      this.start = f - this.o.onset + 1;
      this.#run = 0;
      this.#window.fill(0);
      this.#voicedInWindow = 0;
      this.#voicedRun = this.o.onset;
      this.speechEnd = f;
      return VAD_SPEECH_START;
    }
    // Frames since the onset, into the window ring.
    const n = this.o.silence;
    const k = this.#run++ % n;
    this.#voicedInWindow += (voiced ? 1 : 0) - this.#window[k]!;
    this.#window[k] = voiced ? 1 : 0;
    if (voiced) this.#voicedRun++;
    else if (this.#voicedRun > 0) {
      // A voiced run ended: its last frames were the detector's hangover, not speech (one stays).
      const h = Math.min(this.hangover, this.#voicedRun - 1, this.#run - 1, n - 1);
      for (let j = 1; j <= h; j++) {
        const at = (k - j + n) % n;
        this.#voicedInWindow -= this.#window[at]!;
        this.#window[at] = 0;
      }
      if (this.#voicedRun - h >= this.o.onset) this.speechEnd = this.lastVoiced - h;
      this.#voicedRun = 0;
    }
    if (f - this.start + 1 >= this.o.maxSegment) {
      this.cut = true;
      return this.#end(VAD_SPEECH_END);
    }
    // Never on a voiced frame: speech that resumes as the wait runs out goes on.
    if (voiced || this.#run < this.o.silence || f - this.speechEnd < this.o.silence || 10 * this.#voicedInWindow > this.o.silence) return VAD_NONE;
    this.cut = false;
    return this.#end(this.lastVoiced - this.start + 1 >= this.o.minSpeech ? VAD_SPEECH_END : VAD_SPEECH_DROP);
  }

  #end(event: number): number {
    this.start = -1;
    this.#run = 0;
    this.#apply();
    return event;
  }

  reset(): void {
    this.frame = 0;
    this.start = -1;
    this.lastVoiced = -1;
    this.speechEnd = -1;
    this.#run = 0;
    this.#voicedRun = 0;
  }
}

/**
 * Whether playback holds after endpointer event `e` (`holding` before it): from the first sign
 * of speech (SPEECH_MAYBE) through the speech, until the endpointer takes it back or the speech
 * ends. The frontend stage publishes it (kVoice) for the main thread; the session applies it.
 */
export function holdsPlayback(e: number, holding: boolean): boolean {
  if (e === VAD_SPEECH_MAYBE || e === VAD_SPEECH_START) return true;
  if (e === VAD_SPEECH_NOT || e === VAD_SPEECH_END || e === VAD_SPEECH_DROP) return false;
  return holding;
}
