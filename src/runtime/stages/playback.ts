import { BadInputError, InternalError } from '../../errors.js';
import { arenaWorkspace } from '../../dsp/workspace.js';
import { Detokenizer, type DetokenizerJob, DetokenizerState } from '../../model/blocks/detokenizer.js';
import { STEP_BATCH } from '../../model/blocks/backbone.js';
import { frameSamplesAt } from '../../core/frames.js';
import { CLOCK_DETOKENIZER } from '../../core/clock.js';
import { capacity, PassStage, type Environment, type RoomConv } from './stage.js';
import { stageDefaults, type StageSpec } from '../topology.js';
import { maxPayloadOf, RECORD_OVERHEAD } from '../ring.js';
import {
  type BatchingStats,
  kLookaheadSet,
  REC_CODES,
  REC_END_OF_AUDIO,
  REC_PCM,
  REC_TURN_END,
  REC_TURN_START,
  type StageConversation,
  type StageOpen,
} from '../protocol.js';

import '../../core/categories.js';

interface PlaybackConv extends RoomConv, DetokenizerJob {
  codes: Int32Array;
  open: boolean;
  /** A VAD conversation's look-ahead may change while it runs (`kLookaheadSet` of its words). */
  vad: boolean;
  words: Int32Array;
}

/** Who holds a slot during a batched call: an index no conversation has (-1 is a free slot). */
const BATCH_HOLDER = -2;

/**
 * Codes to device-rate PCM: the detokenizer, the ISTFT and the resampler, one code frame per
 * record, written straight into the playback ring. Every conversation whose next record is a
 * code frame goes into one detokenizer call (each weight block read once for all of them, up to
 * a slot's batch); a conversation's detokenizer state is its own, so its samples are what it
 * would get alone.
 */
export class PlaybackStage extends PassStage<PlaybackConv, Detokenizer> {
  /** One call's conversations (made once: no allocation per poll). */
  readonly #batch: PlaybackConv[] = [];
  readonly #most: number;
  /** Calls that served several conversations, the frames they served, and the widest. */
  #batched = 0;
  #batchedRows = 0;
  #widest = 0;
  /**
   * A reply's first code frame waits for the record after it, so that its samples and the
   * second frame's leave together: the first frame's block is short (the ISTFT keeps its
   * overlap), and a player that began on it alone would wait a generated frame and a
   * detokenizer call for the next. Off where the look-ahead is under two frames (the second
   * waits for the first to be played): the engine's, or a VAD conversation's as it is now.
   */
  readonly #preRoll: boolean;
  readonly #twoFrames: number;

  constructor(env: Environment) {
    super('playback', env, (s, work, derived) => {
      const o = { turnPositions: env.init.turnPositions, planner: s.planner, batch: STEP_BATCH };
      return new Detokenizer(s.config, env.image, work, derived, o);
    });
    this.#most = this.tickets.slots[0]!.batch;
    const o = env.init.options;
    this.#twoFrames = 2 * frameSamplesAt(this.config, o.outputRate);
    this.#preRoll = (o.lookaheadMs * o.outputRate) / 1000 >= this.#twoFrames;
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
    if (conv.pcm.length > maxPayloadOf(capacity(o, 'output')))
      throw new BadInputError({ field: 'outputRate' }, `the playback ring cannot hold a frame at ${this.env.init.options.outputRate} Hz`);
    this.conversations[o.index] = {
      index: o.index,
      input: this.input(o, 'codes'),
      out: this.output(o, 'output'),
      room: conv.pcm.length + 2 * RECORD_OVERHEAD,
      open: false,
      samples: 0,
      vad: o.vad,
      words: this.words(o),
      ...conv,
    };
  }

  override batching(): BatchingStats {
    return { ...super.batching(), batchedSteps: this.#batched, batchedRows: this.#batchedRows, widestBatch: this.#widest };
  }

  /**
   * One frame of m conversations at once, for each m in `rows`: one batched call per slot's
   * batch, each conversation at the start of a turn (the best of a few runs of 8 calls).
   */
  override calibrate(index: number, rows: readonly number[]): number[] {
    const c = this.conversations[index];
    if (c === undefined) throw new InternalError(`playback stage: no conversation ${index} to calibrate on`);
    const det = this.tickets.slots[0]!;
    const jobs = Array.from({ length: det.batch }, () => c);
    const calls = 8;
    return rows.map((m) => {
      let ms = Infinity;
      const until = performance.now() + 10;
      for (let k = 0; k < 2 || (k < 16 && performance.now() < until); k++) {
        const t = performance.now();
        for (let i = 0; i < calls; i++) {
          for (let q = 0; q < c.codes.length; q++) c.codes[q] = (i * 131 + q * 17) % this.config.audio.codes;
          for (let left = m; left > 0; left -= det.batch) {
            c.state.startTurn();
            det.frames(jobs, Math.min(left, det.batch));
          }
        }
        ms = Math.min(ms, (performance.now() - t) / calls);
      }
      return ms;
    });
  }

  /**
   * Each round takes every conversation's records up to its next code frame, then runs those
   * frames in one call (or several, past a slot's batch); until no frame is ready.
   */
  poll(): boolean {
    let progress = false;
    const batch = this.#batch;
    for (;;) {
      let m = 0;
      for (let k = 0; k < this.conversations.length; k++) {
        const c = this.conversations[k];
        if (c === undefined) continue;
        for (;;) {
          const kind = c.input.peekKind();
          if (kind < 0 || !c.out.canWrite(c.room)) break;
          if (kind === REC_CODES) {
            if (!c.open && this.#preRolls(c) && c.input.peekNextKind() < 0) break;
            batch[m++] = c;
            break;
          }
          if (!this.#control(c, kind)) break;
          this.records++;
          progress = true;
        }
        if (m === this.#most) {
          if (!this.#frames(m)) return progress;
          progress = true;
          m = 0;
        }
      }
      if (m === 0 || !this.#frames(m)) return progress;
      progress = true;
    }
  }

  /** Whether `c`'s first frame waits for its second (the look-ahead lets the second come unplayed). */
  #preRolls(c: PlaybackConv): boolean {
    if (!this.#preRoll) return false;
    if (!c.vad) return true;
    const set = Atomics.load(c.words, kLookaheadSet);
    return set <= 0 || set >= this.#twoFrames;
  }

  /** The batch's first `m` code frames in one detokenizer call on a free slot; false when none is free. */
  #frames(m: number): boolean {
    const slot = this.tickets.acquire(BATCH_HOLDER);
    if (slot < 0) return false;
    const batch = this.#batch;
    for (let r = 0; r < m; r++) {
      const c = batch[r]!;
      c.input.read(c.codes, 0);
      if (!c.open) c.state.startTurn();
      c.open = true;
    }
    this.tic();
    this.tickets.slots[slot]!.frames(batch, m);
    this.tocShared(batch, m, CLOCK_DETOKENIZER);
    for (let r = 0; r < m; r++) {
      const c = batch[r]!;
      if (c.samples > 0) c.out.write(REC_PCM, c.pcm, 0, c.samples);
    }
    this.records += m;
    if (m > 1) {
      this.#batched++;
      this.#batchedRows += m;
      if (m > this.#widest) this.#widest = m;
    }
    this.tickets.release(slot);
    return true;
  }

  /** A record other than a code frame: a turn's start, its end of audio or its end. False leaves it in place. */
  #control(c: PlaybackConv, kind: number): boolean {
    if (kind === REC_TURN_START) {
      c.state.startTurn();
      c.open = false;
      c.input.skip();
      return true;
    }
    const end = kind === REC_END_OF_AUDIO || kind === REC_TURN_END;
    const slot = end && c.open ? this.tickets.acquire(c.index) : -1;
    if (end && c.open && slot < 0) return false;
    c.input.skip();
    if (slot >= 0) {
      this.tic();
      const n = this.tickets.slots[slot]!.finish(c.state, c.pcm, 0);
      this.toc(c.index, CLOCK_DETOKENIZER);
      this.tickets.release(slot);
      if (n > 0) c.out.write(REC_PCM, c.pcm, 0, n);
      c.open = false;
    }
    if (kind === REC_TURN_END) c.out.write(REC_TURN_END, null, 0, 0);
    return true;
  }
}

export const stage: StageSpec = {
  ...stageDefaults(import.meta.url, 'playback', (env) => new PlaybackStage(env)),
  ...{ reads: ['codes'], writes: ['output'], compute: true, pin: 3, clocks: ['detokenizer'], categories: ['playback.payload', 'playback.metadata'] },
  capacities: { output: (c, rate) => 4 * (frameSamplesAt(c, rate) + 4096) + 4 },
};
