import { ConformerEncoder } from '../../model/blocks/encoder.js';
import { CLOCK_ENCODER } from '../../core/clock.js';
import { native } from '../../native.js';
import { PassStage, type Environment, type RingConv } from './stage.js';
import { stageDefaults, type StageSpec } from '../topology.js';
import { DEFAULT_ENCODER_TILES, melRows, segmentSamples } from '../../model/plan/plans.js';
import { RECORD_OVERHEAD } from '../ring.js';
import {
  REC_CONFIRM,
  REC_DISCARD,
  REC_EMBED,
  REC_END_SEGMENT,
  REC_MEL,
  REC_PROVISIONAL,
  REC_RESUME,
  REC_SPEECH_END,
  REC_SPEECH_START,
  type BatchingStats,
  type StageConversation,
  type StageOpen,
} from '../protocol.js';

import '../../core/categories.js';

/** A conversation's spare rows when it does not speculate. */
const NO_ROWS = new Float32Array(0);

/** Adapter rows per embedding record. */
export const EMBED_ROWS = 4;

interface ConformerConv extends RingConv {
  rows: Float32Array; // [segment rows][nMels] the open segment
  /** [segment rows][nMels] what a provisional turn is encoded from: encoding normalises its rows in place (empty without speculation). */
  spare: Float32Array;
  count: number; // rows received
  slot: number; // held pass slot, -1 = none
  adapter: Float32Array | null; // the encoded segment being sent
  frames: number;
  sent: number;
  /** A provisional turn encoded ahead: its slot (held until the endpoint decides, -1: none), rows, output and frames. */
  spec: number;
  specRows: number;
  specAdapter: Float32Array | null;
  specFrames: number;
  /** The provisional turn on the way to the Depthformer stage: TOLD_NONE, its rows in part (`specSent`), or all of them. */
  told: number;
  specSent: number; // -1: its PROVISIONAL record is not written yet
}

const TOLD_NONE = 0;
const TOLD_PART = 1;
const TOLD_ALL = 2;

export class ConformerStage extends PassStage<ConformerConv, ConformerEncoder> {
  /** Provisional turns encoded ahead, and those the endpoint kept. */
  #speculations = 0;
  #kept = 0;
  readonly #word = new Int32Array(1);

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
    const speculates = o.vad && this.env.init.options.speculateMs > 0;
    const { rows, spare } = this.carve([{ owner: { kind: 'conversation', index: o.index }, name: `conversation ${o.index} conformer` }], 1 << 28, ([a]) => {
      this.clocksFor(o.index, a!);
      return {
        rows: a!.carve('mel_rows', 'workspace.frontend', Float32Array, segRows * c.frontend.nMels),
        spare: speculates ? a!.carve('mel_rows.provisional', 'workspace.frontend', Float32Array, segRows * c.frontend.nMels) : NO_ROWS,
      };
    });
    this.conversations[o.index] = {
      index: o.index,
      input: this.input(o, 'mel'),
      out: this.output(o, 'embed'),
      rows,
      spare,
      count: 0,
      slot: -1,
      adapter: null,
      frames: 0,
      sent: 0,
      spec: -1,
      specRows: 0,
      specAdapter: null,
      specFrames: 0,
      told: TOLD_NONE,
      specSent: -1,
    };
  }

  override batching(): BatchingStats {
    return { ...super.batching(), speculations: this.#speculations, speculationsKept: this.#kept };
  }

  /** Encodes the first `rows` rows of `mel` on `slot` (timed on `c`'s encoder clock). */
  #encode(c: ConformerConv, mel: Float32Array, slot: number, rows: number): { adapter: Float32Array; frames: number } {
    const encoder = this.tickets.slots[slot]!;
    this.tic();
    const adapter = encoder.encode(mel, rows);
    const frames = encoder.frames(rows);
    this.toc(c.index, CLOCK_ENCODER);
    return { adapter, frames };
  }

  /** Lets go of `c`'s provisional turn, if any. */
  #dropSpec(c: ConformerConv): void {
    if (c.spec < 0) return;
    this.tickets.release(c.spec);
    c.spec = -1;
    c.specAdapter = null;
  }

  /**
   * Sends what it can of `c`'s provisional turn: PROVISIONAL [frames], its rows, END_SEGMENT.
   * Other records may pass it (the speech's events); the endpoint's answer waits for all of it.
   */
  #tell(c: ConformerConv): boolean {
    if (c.told !== TOLD_PART) return false;
    // A confirmed pass took the slot it was encoded on: the Depthformer stage forgets what it has.
    if (c.specAdapter === null) return this.#retract(c);
    let progress = false;
    if (c.specSent < 0) {
      this.#word[0] = c.specFrames;
      if (!c.out.write(REC_PROVISIONAL, this.#word, 0, 1)) return false;
      c.specSent = 0;
      progress = true;
    }
    const sent = this.#sendRows(c, c.specAdapter, c.specSent, c.specFrames);
    if (sent > c.specSent) progress = true;
    c.specSent = sent;
    if (sent < c.specFrames || !c.out.write(REC_END_SEGMENT, null, 0, 0)) return progress;
    c.told = TOLD_ALL;
    return true;
  }

  /** Writes `adapter`'s rows from `sent` up to `frames` as EMBED records while the ring has room; returns the rows sent by then. */
  #sendRows(c: ConformerConv, adapter: Float32Array, sent: number, frames: number): number {
    const D = this.config.backbone.hidden;
    while (sent < frames) {
      const k = Math.min(EMBED_ROWS, frames - sent);
      if (!c.out.write(REC_EMBED, adapter, sent * D, k * D)) break;
      sent += k;
    }
    return sent;
  }

  /** Tells the Depthformer stage that what it has of a provisional turn is not the turn; false while there is no room to. */
  #retract(c: ConformerConv): boolean {
    if (c.told === TOLD_NONE) return true;
    if (!c.out.write(REC_RESUME, null, 0, 0)) return false;
    c.told = TOLD_NONE;
    return true;
  }

  /**
   * Before the endpoint's `kind` is taken: a turn that keeps the provisional one confirms it
   * (once all of it is sent), anything else retracts it. False while it must wait.
   */
  #answer(c: ConformerConv, kind: number): boolean {
    if (c.told === TOLD_NONE) return true;
    const turn = kind === REC_END_SEGMENT && c.input.peekLength() > 0 ? c.input.peekInt(0) : -1;
    if (kind !== REC_END_SEGMENT || c.spec < 0 || c.specRows !== turn) return this.#retract(c);
    if (c.told === TOLD_PART || !c.out.write(REC_CONFIRM, null, 0, 0)) return false;
    c.told = TOLD_NONE;
    return true;
  }

  /** A slot for a confirmed pass of `c`: a provisional turn of another conversation gives its slot up if none is free. */
  #acquire(c: ConformerConv): number {
    const slot = this.tickets.acquire(c.index);
    if (slot >= 0) return slot;
    for (let k = 0; k < this.conversations.length; k++) {
      const o = this.conversations[k];
      if (o !== undefined && o !== c && o.spec >= 0) {
        this.#dropSpec(o);
        return this.tickets.acquire(c.index);
      }
    }
    return -1;
  }

  poll(): boolean {
    let progress = false;
    const nMels = this.config.frontend.nMels;
    // Indexed, not for-of: an iterator would allocate whenever this code runs unoptimised.
    for (let k = 0; k < this.conversations.length; k++) {
      const c = this.conversations[k];
      if (c === undefined) continue;
      if (c.adapter !== null) {
        // Send the encoded segment as ring room allows.
        const sent = this.#sendRows(c, c.adapter, c.sent, c.frames);
        if (sent > c.sent) progress = true;
        c.sent = sent;
        if (c.sent < c.frames || !c.out.write(REC_END_SEGMENT, null, 0, 0)) continue;
        c.adapter = null;
        this.tickets.release(c.slot);
        c.slot = -1;
        progress = true;
      }
      // The speech's events go ahead of the provisional turn's rows: a told row takes ring room
      // only when no event waits for it, so speech_end does not wait for the whole turn's prefill.
      let eventWaits = false;
      for (;;) {
        const kind = c.input.peekKind();
        if (kind < 0) break;
        // The endpoint's answer follows the provisional turn it answers; a new one replaces it.
        if ((kind === REC_END_SEGMENT || kind === REC_RESUME || kind === REC_DISCARD || kind === REC_PROVISIONAL) && !this.#answer(c, kind)) break;
        if (kind === REC_MEL) {
          // The frontend never sends more rows than the longest segment holds.
          c.count += c.input.read(c.rows, c.count * nMels) / nMels;
        } else if (kind === REC_END_SEGMENT) {
          // The frontend's turn ends say how many of its rows the turn is.
          const turn = c.input.peekLength() > 0 ? c.input.peekInt(0) : -1;
          if (c.spec >= 0 && c.specRows === turn) {
            // Encoded ahead at the pause, from the same rows: that is the turn.
            c.slot = c.spec;
            c.adapter = c.specAdapter;
            c.frames = c.specFrames;
            c.spec = -1;
            c.specAdapter = null;
            this.#kept++;
          } else {
            this.#dropSpec(c);
            const slot = this.#acquire(c);
            if (slot < 0) break;
            if (turn >= 0) c.count = Math.min(c.count, turn);
            c.slot = slot;
            ({ adapter: c.adapter, frames: c.frames } = this.#encode(c, c.rows, slot, c.count));
          }
          c.input.skip();
          c.sent = 0;
          c.count = 0;
          this.records++;
          progress = true;
          break;
        } else if (kind === REC_PROVISIONAL) {
          // The turn so far, encoded ahead on a free slot (none free: not at all); kept until the endpoint decides.
          const turn = c.input.peekInt(0);
          c.input.skip();
          this.#dropSpec(c);
          const slot = c.spare.length > 0 ? this.tickets.acquire(c.index) : -1;
          if (slot >= 0) {
            // From a copy: the rows stay as they came for the turn the speech may still become.
            const n = Math.min(c.count, turn);
            const nMels = this.config.frontend.nMels;
            native.copyF32(c.rows, 0, c.spare, 0, n * nMels);
            c.spec = slot;
            c.specRows = turn;
            ({ adapter: c.specAdapter, frames: c.specFrames } = this.#encode(c, c.spare, slot, n));
            this.#speculations++;
            c.told = TOLD_PART;
            c.specSent = -1;
            this.#tell(c);
          }
        } else if (kind === REC_RESUME) {
          c.input.skip();
          this.#dropSpec(c);
        } else if (kind === REC_DISCARD) {
          // Speech too short for a turn: its rows are forgotten.
          c.input.skip();
          this.#dropSpec(c);
          c.count = 0;
        } else if (kind === REC_SPEECH_START || kind === REC_SPEECH_END) {
          // The frontend's turn events travel on to the host, in order with the segments.
          if (!c.out.canWrite(2)) {
            eventWaits = true;
            break;
          }
          const v = c.input.peekLength() > 0 ? c.input.peekInt(0) : 0;
          c.input.skip();
          c.out.write2(kind, v, 0);
        } else c.input.skip();
        this.records++;
        progress = true;
      }
      if (!eventWaits && this.#tell(c)) progress = true;
    }
    return progress;
  }
}

export const stage: StageSpec = {
  ...stageDefaults(import.meta.url, 'conformer', (env) => new ConformerStage(env)),
  ...{ reads: ['mel'], writes: ['embed'], compute: true, heavy: true, pin: 2, clocks: ['encoder'] },
  capacities: { embed: (c) => 4 * EMBED_ROWS * (c.backbone.hidden + RECORD_OVERHEAD) + 4 },
};
