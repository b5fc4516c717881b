import { ConformerEncoder } from '../../model/blocks/encoder.js';
import { CLOCK_ENCODER } from '../../core/clock.js';
import { PassStage, type Environment, type RingConv } from './stage.js';
import { stageDefaults, type StageSpec } from '../topology.js';
import { DEFAULT_ENCODER_TILES, melRows, segmentSamples } from '../../model/plan/plans.js';
import { RECORD_OVERHEAD } from '../ring.js';
import { REC_DISCARD, REC_EMBED, REC_END_SEGMENT, REC_MEL, REC_SPEECH_END, REC_SPEECH_START, type StageConversation, type StageOpen } from '../protocol.js';

import '../../core/categories.js';

/** Adapter rows per embedding record. */
export const EMBED_ROWS = 4;

interface ConformerConv extends RingConv {
  rows: Float32Array; // [segment rows][nMels] the open segment
  count: number; // rows received
  slot: number; // held pass slot, -1 = none
  adapter: Float32Array | null; // the encoded segment being sent
  frames: number;
  sent: number;
}

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
      input: this.input(o, 'mel'),
      out: this.output(o, 'embed'),
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
          // The frontend's turn ends say how many of its rows the turn is.
          if (c.input.peekLength() > 0) c.count = Math.min(c.count, c.input.peekInt(0));
          c.input.skip();
          c.slot = slot;
          const encoder = this.tickets.slots[slot]!;
          this.tic();
          c.adapter = encoder.encode(c.rows, c.count);
          c.frames = encoder.frames(c.count);
          this.toc(c.index, CLOCK_ENCODER);
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

export const stage: StageSpec = {
  ...stageDefaults(import.meta.url, 'conformer', (env) => new ConformerStage(env)),
  ...{ reads: ['mel'], writes: ['embed'], compute: true, heavy: true, pin: 2, clocks: ['encoder'] },
  capacities: { embed: (c) => 4 * EMBED_ROWS * (c.backbone.hidden + RECORD_OVERHEAD) + 4 },
};
