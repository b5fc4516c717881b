/**
 * The segment gate: which rows of a continuous stream belong to the user's turns. Rows (the raw
 * log-mel rows, one per 10 ms) are numbered from the start of the stream, as the turn detector's
 * frames are, and a segment is a range of them: from `preRoll` rows before the speech began (the
 * onset is confirmed after it began, and soft onsets sit under the detector's threshold) through
 * the end the detector gives with its decision. Rows are handed out as their frames are decided,
 * so a turn's may run past its end: `turnRows` says how many of them the turn is. Because the
 * range is a pure function of the frame decisions, the rows a segment holds do not depend on how
 * the audio was chunked: the frontend stage and the one-thread session, fed the same audio, hand
 * the encoder the same rows.
 *
 * Rows and decisions may arrive in any interleaving (a detector may decide a frame some frames
 * after its audio came): the gate keeps the rows not yet routed in a ring and hands out, in
 * order, GATE_START, the segment's rows as their frames are decided, then GATE_END or
 * GATE_DISCARD once every row up to the end has arrived.
 *
 * Thread contract: one instance per stream, one thread; nothing allocates after construction.
 */
import { ArgumentError } from '../errors.js';
import { heapWorkspace, type Workspace } from '../dsp/workspace.js';
import { VAD_SPEECH_DROP, VAD_SPEECH_END, VAD_SPEECH_START } from './turn.js';

/** Rows kept from before the speech began: 300 ms, the prefix padding voice agents use by default. */
export const PRE_ROLL_ROWS = 30;

/** What `next` hands out. */
export const GATE_NONE = 0;
export const GATE_START = 1; // a segment opens
export const GATE_ROWS = 2; // `spanRows` rows at row `spanAt` of `ring`
export const GATE_END = 3; // the segment is a turn
export const GATE_DISCARD = 4; // the segment was too short: forget its rows
export const GATE_PROVISIONAL = 5; // the segment's first `turnRows` rows are its turn if the silence goes on
export const GATE_RESUME = 6; // the speech went on: the last provisional turn is not one

/** Boundaries waiting for their rows: [kind, row] pairs, a ring of BOUNDS. */
const BOUNDS = 16;
const B_START = 1;
const B_END = 2;
const B_DROP = 3;
const B_PROVISIONAL = 4;
const B_RESUME = 5;

export interface GateOptions {
  /** Floats per row. */
  width: number;
  /** Rows kept before the speech began. */
  preRoll: number;
  /** Frames from the first voiced frame to the onset's confirmation (the turn detector's `onset`). */
  onset: number;
  /** The most rows of one segment (more are dropped: the turn detector ends a segment before). */
  maxRows: number;
  /**
   * How far rows may run ahead of the decisions that route them, in rows: the rows one push
   * brings before its decisions are taken, and the detector's own delay. Default 16.
   */
  lag?: number;
}

export class SegmentGate {
  readonly width: number; // floats per row
  readonly preRoll: number; // rows kept from before the speech began
  readonly maxRows: number; // the most rows of one segment
  readonly capacity: number; // rows the ring holds
  readonly ring: Float32Array; // [capacity][width] the rows not yet routed, row r at r % capacity
  /** Rows pushed so far (the next row's number). */
  rows = 0;
  /** After GATE_ROWS: the first row's slot in `ring` and the count (they never wrap). */
  spanAt = 0;
  spanRows = 0;
  /** After GATE_END and GATE_PROVISIONAL: the turn's rows, from the first handed out (at most `maxRows`). */
  turnRows = 0;
  readonly #bounds: Int32Array; // [BOUNDS][2] boundaries waiting for their rows, from #head
  #head = 0;
  #count = 0;
  #open = false;
  #next = 0; // the next row of the open segment to hand out
  #sent = 0; // rows of the open segment handed out
  #first = 0; // the open segment's first row
  #lastEnd = 0; // the row after the last segment's end

  constructor(o: GateOptions, ws: Workspace = heapWorkspace) {
    for (const k of ['width', 'onset', 'maxRows'] as const) {
      if (!Number.isInteger(o[k]) || o[k] < 1) throw new ArgumentError(`segment gate ${k} must be a positive whole number, got ${o[k]}`);
    }
    if (!Number.isInteger(o.preRoll) || o.preRoll < 0) throw new ArgumentError(`segment gate preRoll must be a whole number of rows, got ${o.preRoll}`);
    this.width = o.width;
    this.preRoll = o.preRoll;
    this.maxRows = o.maxRows;
    // The rows from the pre-roll's first through the onset's confirmation, and the lag either way.
    this.capacity = o.preRoll + o.onset + (o.lag ?? 16);
    this.ring = ws('gate.rows', Float32Array, this.capacity * o.width);
    this.#bounds = ws('gate.bounds', Int32Array, 2 * BOUNDS);
  }

  /** Row `rows` of the stream: `src[at, at + width)`. */
  pushRow(src: Float32Array, at: number): void {
    const w = this.width;
    const o = (this.rows % this.capacity) * w;
    const r = this.ring;
    for (let j = 0; j < w; j++) r[o + j] = src[at + j]!;
    this.rows++;
  }

  /** Frames decided so far: rows up to them may be routed (a later row may lie past the end). */
  decided = 0;

  /**
   * The turn detector's event `e` (0: none) for the next frame, in order: every decided frame
   * comes through here. For a speech start, `start` is the frame the speech began at; for a
   * speech end, `end` is the row after the turn's last (default: after this frame).
   */
  frame(e: number, start: number, end = this.decided + 1): void {
    const frame = this.decided++;
    if (e === VAD_SPEECH_START) {
      // Never back into the segment before (its rows are routed already).
      this.#bound(B_START, Math.max(0, start - this.preRoll, this.#lastEnd));
    } else if (e === VAD_SPEECH_END || e === VAD_SPEECH_DROP) {
      const row = e === VAD_SPEECH_END ? end : frame + 1;
      this.#lastEnd = Math.max(frame + 1, row);
      this.#bound(e === VAD_SPEECH_END ? B_END : B_DROP, row);
    }
  }

  /** The open segment's turn would end before `row` if the silence goes on (speculation). */
  provisional(row: number): void {
    this.#bound(B_PROVISIONAL, row);
  }

  /** The speech went on after a provisional end. */
  resume(): void {
    this.#bound(B_RESUME, 0);
  }

  #bound(kind: number, row: number): void {
    // A full queue would need BOUNDS / 2 segments inside `lag` rows; the oldest goes.
    if (this.#count === BOUNDS) {
      this.#head = (this.#head + 1) % BOUNDS;
      this.#count--;
    }
    const k = 2 * ((this.#head + this.#count) % BOUNDS);
    this.#bounds[k] = kind;
    this.#bounds[k + 1] = row;
    this.#count++;
  }

  #pop(): void {
    this.#head = (this.#head + 1) % BOUNDS;
    this.#count--;
  }

  /** The next thing to hand out (GATE_*); call until GATE_NONE. */
  next(): number {
    for (;;) {
      const kind = this.#count > 0 ? this.#bounds[2 * this.#head]! : 0;
      const row = this.#count > 0 ? this.#bounds[2 * this.#head + 1]! : 0;
      if (!this.#open) {
        if (kind === 0) return GATE_NONE;
        this.#pop();
        // A provisional end or resume of a segment the gate no longer holds is void.
        if (kind !== B_START) continue;
        this.#open = true;
        this.#sent = 0;
        // Rows older than the ring holds are gone (it is sized so that none the segment needs are).
        this.#next = Math.max(row, this.rows - this.capacity);
        this.#first = this.#next;
        return GATE_START;
      }
      if (kind === B_RESUME) {
        this.#pop();
        return GATE_RESUME;
      }
      // The open segment's rows: up to its end (or provisional end) when it is known, else up to the frames decided.
      const ends = kind === B_END || kind === B_DROP || kind === B_PROVISIONAL;
      const until = Math.min(ends ? row : this.decided, this.rows);
      if (this.#next < until) {
        const at = this.#next % this.capacity;
        let n = Math.min(until - this.#next, this.capacity - at);
        // Past the longest segment, rows are dropped.
        const room = this.maxRows - this.#sent;
        if (room <= 0) {
          this.#next += n;
          continue;
        }
        n = Math.min(n, room);
        this.spanAt = at;
        this.spanRows = n;
        this.#next += n;
        this.#sent += n;
        return GATE_ROWS;
      }
      if (ends && this.#next >= row) {
        this.#pop();
        this.turnRows = Math.min(this.maxRows, row - this.#first);
        if (kind === B_PROVISIONAL) return GATE_PROVISIONAL;
        this.#open = false;
        return kind === B_END ? GATE_END : GATE_DISCARD;
      }
      return GATE_NONE;
    }
  }
}
