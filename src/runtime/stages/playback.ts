import { BadInputError, InternalError } from '../../errors.js';
import { arenaWorkspace } from '../../dsp/workspace.js';
import { Detokenizer, DetokenizerState } from '../../model/blocks/detokenizer.js';
import { frameSamplesAt } from '../../core/frames.js';
import { CLOCK_DETOKENIZER } from '../../core/clock.js';
import { capacity, PassStage, type Environment, type RoomConv } from './stage.js';
import { stageDefaults, type StageSpec } from '../topology.js';
import { maxPayloadOf, RECORD_OVERHEAD } from '../ring.js';
import { REC_CODES, REC_END_OF_AUDIO, REC_PCM, REC_TURN_END, REC_TURN_START, type StageConversation, type StageOpen } from '../protocol.js';

import '../../core/categories.js';

interface PlaybackConv extends RoomConv {
  state: DetokenizerState;
  pcm: Float32Array; // one frame (or the flush) at the device rate
  codes: Int32Array;
  open: boolean;
}

/**
 * Codes to device-rate PCM: the detokenizer, the ISTFT and the resampler, one code frame per
 * record, written straight into the playback ring. A conversation's detokenizer state is its
 * own; a slot's scratch serves one record at a time, so any number of replies play at once.
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
    if (conv.pcm.length > maxPayloadOf(capacity(o, 'output')))
      throw new BadInputError({ field: 'outputRate' }, `the playback ring cannot hold a frame at ${this.env.init.options.outputRate} Hz`);
    this.conversations[o.index] = {
      index: o.index,
      input: this.input(o, 'codes'),
      out: this.output(o, 'output'),
      room: conv.pcm.length + 2 * RECORD_OVERHEAD,
      open: false,
      ...conv,
    };
  }

  /** One frame of m conversations at once, for each m in `rows`: m frames, one after the other (the best of a few runs of 8 frames). */
  override calibrate(index: number, rows: readonly number[]): number[] {
    const c = this.conversations[index];
    if (c === undefined) throw new InternalError(`playback stage: no conversation ${index} to calibrate on`);
    const det = this.tickets.slots[0]!;
    const frames = 8;
    let ms = Infinity;
    const until = performance.now() + 10;
    for (let k = 0; k < 2 || (k < 16 && performance.now() < until); k++) {
      c.state.startTurn();
      const t = performance.now();
      for (let i = 0; i < frames; i++) {
        for (let q = 0; q < c.codes.length; q++) c.codes[q] = (i * 131 + q * 17) % this.config.audio.codes;
        det.frame(c.state, c.codes, c.pcm, 0);
      }
      ms = Math.min(ms, (performance.now() - t) / frames);
    }
    return rows.map((m) => m * ms);
  }

  #flush(c: PlaybackConv, det: Detokenizer): void {
    this.tic();
    const n = det.finish(c.state, c.pcm, 0);
    this.toc(c.index, CLOCK_DETOKENIZER);
    if (n > 0) c.out.write(REC_PCM, c.pcm, 0, n);
    c.open = false;
  }

  poll(): boolean {
    return this.pollRecords(this.conversations);
  }

  protected override record(c: PlaybackConv, kind: number): boolean {
    if (kind === REC_TURN_START) {
      c.state.startTurn();
      c.open = false;
      c.input.skip();
      return true;
    }
    const slot = this.tickets.acquire(c.index);
    if (slot < 0) return false;
    this.#decode(c, kind, this.tickets.slots[slot]!);
    this.tickets.release(slot);
    return true;
  }

  #decode(c: PlaybackConv, kind: number, det: Detokenizer): void {
    if (kind === REC_CODES) {
      c.input.read(c.codes, 0);
      this.tic();
      if (!c.open) c.state.startTurn();
      c.open = true;
      const n = det.frame(c.state, c.codes, c.pcm, 0);
      this.toc(c.index, CLOCK_DETOKENIZER);
      if (n > 0) c.out.write(REC_PCM, c.pcm, 0, n);
    } else if (kind === REC_END_OF_AUDIO) {
      c.input.skip();
      if (c.open) this.#flush(c, det);
    } else {
      c.input.skip();
      if (kind === REC_TURN_END) {
        if (c.open) this.#flush(c, det);
        c.out.write(REC_TURN_END, null, 0, 0);
      }
    }
  }
}

export const stage: StageSpec = {
  ...stageDefaults(import.meta.url, 'playback', (env) => new PlaybackStage(env)),
  ...{ reads: ['codes'], writes: ['output'], compute: true, pin: 3, clocks: ['detokenizer'], categories: ['playback.payload', 'playback.metadata'] },
  capacities: { output: (c, rate) => 4 * (frameSamplesAt(c, rate) + 4096) + 4 },
};
