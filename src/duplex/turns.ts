/**
 * Turn-taking over one stream, the one policy the frontend stage and the one-thread session
 * both run: the turn detector decides each 10 ms frame, the segment gate routes the mel rows of
 * the user's segments (with the one pre-roll), and playback holds from the first sign of speech
 * until it is taken back or ends.
 *
 * Thread contract: one instance per stream, one thread; nothing allocates after construction.
 */
import type { Workspace } from '../dsp/workspace.js';
import { PRE_ROLL_ROWS, SegmentGate } from './gate.js';
import { Endpointer, framesOf, holdsPlayback, VAD_SPEECH_END } from './turn.js';

/**
 * Rows of a turn after its speech's end (Endpointer.speechEnd: the hangover is not speech):
 * 100 ms. A turn ended by silence is its speech and this tail, however long the silence that
 * ended it (the endpoint waits at least `silenceMs`, at least the tail, after that end), so its
 * rows and its reply do not depend on when the endpoint fired.
 */
export const TURN_TAIL_ROWS = 10;

export interface TurnTakingOptions {
  onsetMs: number;
  silenceMs: number;
  minSpeechMs: number;
  /** The pause after which the turn so far is offered ahead (GATE_PROVISIONAL); 0: never. At least the tail. */
  speculateMs?: number;
  /** The longest silence `configure` may set later (default `silenceMs`). */
  maxSilenceMs?: number;
  /** Frames the detector's voiced runs outlast the speech (FrameDecider.hangover; default 0). */
  hangover?: number;
  /** Floats per mel row. */
  width: number;
  /** Rows of the longest segment (the encoder's); a segment's speech stops short of it by the pre-roll and its end's frame. */
  maxRows: number;
  /** The most rows one push of audio completes before its decisions are taken. */
  rowsPerPush: number;
}

export class TurnTaking {
  readonly endpointer: Endpointer;
  readonly gate: SegmentGate;
  /** Playback holds (the user may be speaking). */
  hold = false;
  /** Frames of pause after the speech's end that offer the turn ahead (0: never; at least the tail, whose rows are then in). */
  readonly speculate: number;
  /** A provisional turn is out and the speech has not gone on since. */
  #offered = false;

  /** The endpointer's window is carved from `ws`, the gate's rows from `rows`. */
  constructor(o: TurnTakingOptions, ws: Workspace, rows: Workspace) {
    const onset = framesOf(o.onsetMs);
    this.endpointer = new Endpointer(
      {
        onset,
        silence: framesOf(o.silenceMs),
        maxSilence: framesOf(o.maxSilenceMs ?? o.silenceMs),
        minSpeech: framesOf(o.minSpeechMs),
        maxSegment: Math.max(1, o.maxRows - PRE_ROLL_ROWS - 1),
      },
      ws,
    );
    this.endpointer.hangover = o.hangover ?? 0;
    this.speculate = (o.speculateMs ?? 0) > 0 ? Math.max(TURN_TAIL_ROWS, framesOf(o.speculateMs!)) : 0;
    // Rows run ahead of the decisions by a push's rows and the detector's delay.
    this.gate = new SegmentGate({ width: o.width, preRoll: PRE_ROLL_ROWS, onset, maxRows: o.maxRows, lag: o.rowsPerPush + 8 }, rows);
  }

  /**
   * The next frame's decision: returns the endpointer's event (VAD_*, 0: none), the gate and
   * `hold` updated. With `speculate`, a pause that long after speech long enough to be a turn
   * offers the turn so far — the rows a silence end would give it — and a voiced frame after
   * it takes the offer back.
   */
  frame(voiced: boolean): number {
    const ep = this.endpointer;
    const e = ep.push(voiced);
    if (this.speculate > 0 && e === 0 && ep.speaking) {
      const f = ep.frame - 1;
      if (this.#offered && voiced) {
        this.#offered = false;
        this.gate.resume();
      } else if (!this.#offered && !voiced && f - ep.speechEnd >= this.speculate && ep.lastVoiced - ep.start + 1 >= ep.o.minSpeech) {
        this.#offered = true;
        this.gate.provisional(ep.speechEnd + 1 + TURN_TAIL_ROWS);
      }
    } else if (e !== 0 && !ep.speaking) this.#offered = false;
    // A turn ended by silence ends a tail after its speech (never after this frame: the stream
    // may end here); one cut at the longest segment, after this frame.
    this.gate.frame(e, ep.start, e === VAD_SPEECH_END && !ep.cut ? Math.min(ep.speechEnd + 1 + TURN_TAIL_ROWS, ep.frame) : ep.frame);
    this.hold = holdsPlayback(e, this.hold);
    return e;
  }
}
